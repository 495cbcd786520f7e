"""Plans in the warehouse: which statements to capture, storing a plan only when its shape changed, and skips."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from radar_pipeline.pgss_model import KEY, Key, statement_key

RETRY_SKIPPED_AFTER = timedelta(days=1)
MAX_TEXT = 8192  # radar.query keeps texts this long: a text that long may have been cut, and cannot be planned


@dataclass(frozen=True)
class StoredPlan:
    """A plan as radar.plan_snapshot holds it."""

    captured_at: datetime
    source: str
    plan_hash: str
    root_node: str
    total_cost: float | None
    plan: dict[str, Any]


def candidates(conn: sa.Connection, target: str, dbid: int, since: datetime, top_n: int) -> list[tuple[Key, str]]:
    """The top_n statements of one database by execution time since `since`, with their texts, less those recently
    found unplannable (pg_stat_statements spans the server; a plan can only be had from the statement's database).

    Execution time is read from the snapshots, as the growth of total_exec_time over the stored rows since then.
    """
    rows = conn.execute(
        sa.text(
            f"""
            WITH moved AS (
                SELECT {", ".join(KEY)}, max(total_exec_time) - min(total_exec_time) AS spent, count(*) AS n
                FROM radar.pgss_snapshot WHERE target = :t AND dbid = :dbid AND captured_at > :since
                GROUP BY {", ".join(KEY)}
            )
            SELECT q.dbid, q.userid, q.queryid, q.toplevel, q.query
            FROM moved m
            JOIN radar.query q ON q.target = :t AND (q.dbid, q.userid, q.queryid, q.toplevel) =
                                  (m.dbid, m.userid, m.queryid, m.toplevel)
            LEFT JOIN radar.plan_skip s ON s.target = :t AND (s.dbid, s.userid, s.queryid, s.toplevel) =
                                           (m.dbid, m.userid, m.queryid, m.toplevel)
            WHERE s.skipped_at IS NULL OR s.skipped_at < now() - :retry
            ORDER BY m.spent DESC, m.n DESC LIMIT :n
            """
        ),
        {"t": target, "dbid": dbid, "since": since, "n": top_n, "retry": RETRY_SKIPPED_AFTER},
    )
    return [(statement_key(r), r[4]) for r in rows]


def last_capture(conn: sa.Connection, target: str) -> datetime | None:
    """When plans of this target were last captured (a plan stored, or a statement skipped), if ever."""
    return conn.execute(
        sa.text(
            "SELECT greatest((SELECT max(captured_at) FROM radar.plan_snapshot WHERE target = :t), "
            "(SELECT max(skipped_at) FROM radar.plan_skip WHERE target = :t))"
        ),
        {"t": target},
    ).scalar_one()


def latest_hashes(conn: sa.Connection, target: str) -> dict[Key, str]:
    """Each statement's most recent stored plan shape."""
    rows = conn.execute(
        sa.text(
            f"SELECT DISTINCT ON ({', '.join(KEY)}) {', '.join(KEY)}, plan_hash FROM radar.plan_snapshot "
            f"WHERE target = :t ORDER BY {', '.join(KEY)}, captured_at DESC"
        ),
        {"t": target},
    )
    return {statement_key(r): r[4] for r in rows}


def store(
    conn: sa.Connection,
    target: str,
    captured_at: datetime,
    plans: dict[Key, tuple[str, str, str, float | None, dict]],
    skipped: dict[Key, str],
) -> int:
    """Store the plans whose shape differs from their statement's last stored plan; record skips. Returns stored."""
    known = latest_hashes(conn, target)
    fresh = {k: p for k, p in plans.items() if known.get(k) != p[1]}
    if fresh:
        conn.execute(
            sa.text(
                "INSERT INTO radar.plan_snapshot VALUES (:t, :dbid, :userid, :queryid, :toplevel, :at, :source, "
                ":hash, :root, :cost, CAST(:plan AS jsonb)) ON CONFLICT DO NOTHING"
            ),
            [
                {
                    "t": target,
                    **dict(zip(KEY, k, strict=True)),
                    "at": captured_at,
                    "source": source,
                    "hash": plan_hash,
                    "root": root_node,
                    "cost": cost,
                    "plan": json.dumps(plan),
                }
                for k, (source, plan_hash, root_node, cost, plan) in fresh.items()
            ],
        )
    if plans:
        conn.execute(
            sa.text(
                "INSERT INTO radar.plan_check VALUES (:t, :dbid, :userid, :queryid, :toplevel, :at, :hash) "
                "ON CONFLICT (target, dbid, userid, queryid, toplevel) DO UPDATE "
                "SET checked_at = EXCLUDED.checked_at, plan_hash = EXCLUDED.plan_hash"
            ),
            [
                {"t": target, **dict(zip(KEY, k, strict=True)), "at": captured_at, "hash": p[1]}
                for k, p in plans.items()
            ],
        )
    if skipped:
        conn.execute(
            sa.text(
                "INSERT INTO radar.plan_skip VALUES (:t, :dbid, :userid, :queryid, :toplevel, :reason, now()) "
                "ON CONFLICT (target, dbid, userid, queryid, toplevel) DO UPDATE "
                "SET reason = EXCLUDED.reason, skipped_at = EXCLUDED.skipped_at"
            ),
            [{"t": target, **dict(zip(KEY, k, strict=True)), "reason": reason} for k, reason in skipped.items()],
        )
    return len(fresh)


def around(
    conn: sa.Connection, target: str, key: Key, at: datetime, until: datetime
) -> tuple[StoredPlan | None, StoredPlan | None]:
    """The plan in force at `at` (the last stored at or before it) and the plan in force after it within the analysed
    window's reach: the first stored in (at, until], or, when none was stored after `at` at all and a later look found
    the shape unchanged, the one before. Plans stored after `until` never count, so a re-analysis finds the same."""
    params = {"t": target, **dict(zip(KEY, key, strict=True)), "at": at, "until": until}
    where = "target = :t AND dbid = :dbid AND userid = :userid AND queryid = :queryid AND toplevel = :toplevel"
    columns = "captured_at, source, plan_hash, root_node, total_cost, plan"
    before = conn.execute(
        sa.text(
            f"SELECT {columns} FROM radar.plan_snapshot WHERE {where} AND captured_at <= :at "
            "ORDER BY captured_at DESC LIMIT 1"
        ),
        params,
    ).fetchone()
    after = conn.execute(
        sa.text(
            f"SELECT {columns} FROM radar.plan_snapshot WHERE {where} AND captured_at > :at "
            "AND captured_at <= :until ORDER BY captured_at LIMIT 1"
        ),
        params,
    ).fetchone()
    found_before = StoredPlan(*before) if before else None
    found_after = StoredPlan(*after) if after else None
    if found_after is None and found_before is not None:
        # plans are stored only when the shape changes: no plan after `at` and a later look at the same shape means
        # the shape never changed after `at` (the look's time is left out: it moves with every look)
        later = conn.execute(
            sa.text(f"SELECT 1 FROM radar.plan_snapshot WHERE {where} AND captured_at > :at LIMIT 1"), params
        ).fetchone()
        check = conn.execute(
            sa.text(f"SELECT checked_at, plan_hash FROM radar.plan_check WHERE {where}"), params
        ).fetchone()
        if later is None and check is not None and check[0] > at and check[1] == found_before.plan_hash:
            found_after = found_before
    return found_before, found_after


def text_of(conn: sa.Connection, target: str, key: Key) -> str | None:
    """A statement's normalised text as radar.query holds it."""
    return conn.execute(
        sa.text(
            "SELECT query FROM radar.query WHERE target = :t AND dbid = :d AND userid = :u AND queryid = :q "
            "AND toplevel = :top"
        ),
        {"t": target, "d": key[0], "u": key[1], "q": key[2], "top": key[3]},
    ).scalar_one_or_none()
