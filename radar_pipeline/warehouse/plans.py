"""Plans in the warehouse: which statements to capture, storing a plan only when its shape changed, and skips."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa

from radar_pipeline.config.queries import sql_text
from radar_pipeline.pgss_model import KEY, Key, statement_key
from radar_pipeline.warehouse.database import KEYS, key_params

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


# Why a statement is planned in a run: among the busiest since the last run, first seen since it, or its turn in the
# rotation through the rest (the least recently looked at first).
BUSIEST, NEW, ROTATION = "busiest", "new", "rotation"
ACTIVE_WITHIN = timedelta(days=1)  # the rotation goes through the statements whose calls moved within this
REPLAN_AFTER = timedelta(hours=1)  # and takes those not looked at within this (a plan that recent is recent enough)
PLAN_RUN_DAYS = 90  # how long each capture run's outcome is kept (radar.plan_capture_run)


@dataclass(frozen=True)
class Candidate:
    """A statement to plan in this run, its text, and why it is planned now (BUSIEST, NEW or ROTATION)."""

    key: Key
    text: str
    why: str


def candidates(
    conn: sa.Connection,
    target: str,
    dbid: int,
    since: datetime,
    top_n: int,
    rotation_n: int = 0,
    now: datetime | None = None,
) -> list[Candidate]:
    """The statements of one database to plan in this run, in order: the top_n by execution time since `since`, then
    up to rotation_n of the rest of those active (calls moved within ACTIVE_WITHIN of `now`): first those first seen
    since `since` and never looked at, then the least recently looked at (planned, or found unplannable), of those
    not looked at within REPLAN_AFTER. Statements
    found unplannable within RETRY_SKIPPED_AFTER are left out (pg_stat_statements spans the server; a plan can only
    be had from the statement's database).

    Execution time is read from the snapshots, as the growth of total_exec_time over the stored rows from the last
    scrape at or before `since` (raw or compacted: a capture that has not run for days still finds them), all of it
    for a statement first seen since then; activity from radar.query's last_seen (a statement's row is stored only
    when its counters moved). `now` is the watched server's time (by default this machine's).
    """
    now = now or datetime.now(UTC)
    rows = conn.execute(
        sql_text("warehouse.plan_candidates"),
        {
            "t": target,
            "dbid": dbid,
            "since": since,
            "active": now - ACTIVE_WITHIN,
            "replan": now - REPLAN_AFTER,
            "n": top_n,
            "rotation": rotation_n,
            "retry": RETRY_SKIPPED_AFTER,
            "now": now,
            "busiest": BUSIEST,
            "new": NEW,
            "rotation_reason": ROTATION,
        },
    )
    return [Candidate(statement_key(r), r[4], r[5]) for r in rows]


@dataclass(frozen=True)
class CaptureRun:
    """One plan capture run's outcome on a target, as radar.plan_capture_run keeps it."""

    captured_at: datetime
    source: str | None
    reason: str | None
    server_version_num: int | None
    busiest: int = 0
    new: int = 0
    rotation: int = 0
    stored: int = 0
    skipped: int = 0
    out_of_time: int = 0
    held_back: int = 0
    held_back_reason: str | None = None
    warehouse_at: datetime | None = None  # the warehouse's clock beside captured_at (None: not read beside it)


def record_run(conn: sa.Connection, target: str, run: CaptureRun) -> None:
    """Keep one capture run's outcome (and forget the target's runs older than PLAN_RUN_DAYS)."""
    fields = CaptureRun.__dataclass_fields__
    conn.execute(
        sa.text(
            f"INSERT INTO radar.plan_capture_run (target, {', '.join(fields)}) "
            f"VALUES (:target, {', '.join(f':{f}' for f in fields)}) ON CONFLICT DO NOTHING"
        ),
        {"target": target, **{f: getattr(run, f) for f in fields}},
    )
    conn.execute(
        sa.text("DELETE FROM radar.plan_capture_run WHERE target = :t AND captured_at < :at - :keep"),
        {"t": target, "at": run.captured_at, "keep": timedelta(days=PLAN_RUN_DAYS)},
    )


def server_clock(conn: sa.Connection, target: str) -> datetime:
    """The watched server's clock now, estimated from the warehouse's: moved by the two clocks' difference at the
    target's last capture run that read both (none: the warehouse's as it is)."""
    return conn.execute(
        sa.text(
            "SELECT now() + coalesce((SELECT captured_at - warehouse_at FROM radar.plan_capture_run "
            "WHERE target = :t AND warehouse_at IS NOT NULL ORDER BY warehouse_at DESC LIMIT 1), interval '0')"
        ),
        {"t": target},
    ).scalar_one()


def server_version(conn: sa.Connection, target: str, at: datetime) -> int | None:
    """The target's server_version_num as its last scrape at or before `at` stored it; None when none did."""
    return conn.execute(
        sa.text(
            "SELECT server_version_num FROM radar.pgss_info_snapshot WHERE target = :t AND captured_at <= :at "
            "ORDER BY captured_at DESC LIMIT 1"
        ),
        {"t": target, "at": at},
    ).scalar_one_or_none()


def last_capture(conn: sa.Connection, target: str) -> datetime | None:
    """When plans of this target were last captured (a run that reached a plan source, a plan stored, or a statement
    skipped), if ever."""
    return conn.execute(
        sa.text(
            "SELECT greatest((SELECT max(captured_at) FROM radar.plan_snapshot WHERE target = :t), "
            "(SELECT max(skipped_at) FROM radar.plan_skip WHERE target = :t), "
            "(SELECT max(captured_at) FROM radar.plan_capture_run WHERE target = :t AND source IS NOT NULL))"
        ),
        {"t": target},
    ).scalar_one()


def latest_hashes(conn: sa.Connection, target: str, keys: list[Key]) -> dict[Key, str]:
    """The most recent stored plan shape of each of these statements (those with a plan stored)."""
    if not keys:
        return {}
    match = " AND ".join(f"p.{k} = k.{k}" for k in KEY)
    rows = conn.execute(
        sa.text(
            f"SELECT {', '.join(f'k.{k}' for k in KEY)}, p.plan_hash "
            f"FROM {KEYS} AS k(dbid, userid, queryid, toplevel) "
            "CROSS JOIN LATERAL (SELECT plan_hash FROM radar.plan_snapshot p "
            f"WHERE p.target = :t AND {match} ORDER BY p.captured_at DESC LIMIT 1) p"
        ),
        {"t": target, **key_params(keys)},
    )
    return {statement_key(r): r[4] for r in rows}


def store(
    conn: sa.Connection,
    target: str,
    captured_at: datetime,
    plans: dict[Key, tuple[str, str, str, float | None, dict]],
    skipped: dict[Key, str],
) -> int:
    """Store the plans whose shape differs from their statement's last stored plan; record skips (at `captured_at`,
    the watched server's clock, as everything of a capture). Returns stored."""
    known = latest_hashes(conn, target, list(plans))
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
                "INSERT INTO radar.plan_skip VALUES (:t, :dbid, :userid, :queryid, :toplevel, :reason, :at) "
                "ON CONFLICT (target, dbid, userid, queryid, toplevel) DO UPDATE "
                "SET reason = EXCLUDED.reason, skipped_at = EXCLUDED.skipped_at"
            ),
            [
                {"t": target, **dict(zip(KEY, k, strict=True)), "reason": reason, "at": captured_at}
                for k, reason in skipped.items()
            ],
        )
    return len(fresh)


@dataclass(frozen=True)
class PlansAround:
    """A statement's plans around a change: the one in force before it and after it (None when not stored), and the
    statement's text from radar.query (to capture a plan now, and to ask whether its queryid is shared)."""

    before: StoredPlan | None
    after: StoredPlan | None
    text: str | None


PLAN_COLUMNS = ["captured_at", "source", "plan_hash", "root_node", "total_cost", "plan"]


def around_each(
    conn: sa.Connection, target: str, keys: list[Key], at: list[datetime], until: datetime
) -> list[PlansAround]:
    """For each statement and its change time, in one query: the plan in force at `at` (the last stored at or before
    it) and the plan in force after it within the analysed window's reach: the first stored in (at, until], or, when
    none was stored after `at` at all and a later look found the shape unchanged, the one before. Plans stored after
    `until` never count, so a re-analysis finds the same."""
    if not keys:
        return []
    match = " AND ".join(f"p.{k} = d.{k}" for k in KEY)
    plan_of = ", ".join(f"{{side}}.{c}" for c in PLAN_COLUMNS)
    rows = conn.execute(
        sa.text(
            f"""
            SELECT {plan_of.format(side="b")}, {plan_of.format(side="a")},
                   EXISTS (SELECT 1 FROM radar.plan_snapshot p WHERE p.target = :t AND {match}
                           AND p.captured_at > d.at) AS later,
                   c.checked_at, c.plan_hash, q.query
            FROM unnest(CAST(:dbid AS oid[]), CAST(:userid AS oid[]), CAST(:queryid AS bigint[]),
                        CAST(:toplevel AS boolean[]), CAST(:at AS timestamptz[]))
                 WITH ORDINALITY AS d(dbid, userid, queryid, toplevel, at, n)
            LEFT JOIN LATERAL (
                SELECT {", ".join(PLAN_COLUMNS)} FROM radar.plan_snapshot p
                WHERE p.target = :t AND {match} AND p.captured_at <= d.at ORDER BY p.captured_at DESC LIMIT 1
            ) b ON true
            LEFT JOIN LATERAL (
                SELECT {", ".join(PLAN_COLUMNS)} FROM radar.plan_snapshot p
                WHERE p.target = :t AND {match} AND p.captured_at > d.at AND p.captured_at <= :until
                ORDER BY p.captured_at LIMIT 1
            ) a ON true
            LEFT JOIN radar.plan_check c ON c.target = :t AND {match.replace("p.", "c.")}
            LEFT JOIN radar.query q ON q.target = :t AND {match.replace("p.", "q.")}
            ORDER BY d.n
            """
        ),
        {"t": target, "until": until, "at": at, **key_params(keys)},
    ).fetchall()
    width = len(PLAN_COLUMNS)
    found: list[PlansAround] = []
    for row in rows:
        before = StoredPlan(*row[:width]) if row[0] is not None else None
        after = StoredPlan(*row[width : 2 * width]) if row[width] is not None else None
        later, checked_at, checked_hash, text = row[2 * width :]
        if after is None and before is not None:
            # plans are stored only when the shape changes: no plan after `at` and a later look at the same shape
            # means the shape never changed after `at` (the look's time is left out: it moves with every look)
            if (
                not later
                and checked_at is not None
                and checked_at > at[len(found)]
                and checked_hash == before.plan_hash
            ):
                after = before
        found.append(PlansAround(before, after, text))
    return found


@dataclass(frozen=True)
class NoPlanBefore:
    """What is known of why a statement has no plan from before a change: the last capture run at or before it (None:
    none recorded) and the last one there that reached a plan source, when the statement was first seen, and its
    skip (why it could not be planned, and when it was last tried), if any."""

    run: CaptureRun | None
    last_planning_run: datetime | None
    first_seen: datetime | None
    skip_reason: str | None
    skipped_at: datetime | None


def no_plan_before(conn: sa.Connection, target: str, keys: list[Key], at: list[datetime]) -> list[NoPlanBefore]:
    """For each statement and its change time, in one query, what is known of why no plan of it was stored before."""
    if not keys:
        return []
    match = " AND ".join(f"{{a}}.{k} = d.{k}" for k in KEY)
    fields = list(CaptureRun.__dataclass_fields__)
    rows = conn.execute(
        sa.text(
            f"""
            SELECT {", ".join(f"r.{f}" for f in fields)},
                   (SELECT max(g.captured_at) FROM radar.plan_capture_run g
                    WHERE g.target = :t AND g.captured_at <= d.at AND g.source IS NOT NULL),
                   q.first_seen, s.reason, s.skipped_at
            FROM unnest(CAST(:dbid AS oid[]), CAST(:userid AS oid[]), CAST(:queryid AS bigint[]),
                        CAST(:toplevel AS boolean[]), CAST(:at AS timestamptz[]))
                 WITH ORDINALITY AS d(dbid, userid, queryid, toplevel, at, n)
            LEFT JOIN LATERAL (
                SELECT * FROM radar.plan_capture_run r WHERE r.target = :t AND r.captured_at <= d.at
                ORDER BY r.captured_at DESC LIMIT 1
            ) r ON true
            LEFT JOIN radar.query q ON q.target = :t AND {match.format(a="q")}
            LEFT JOIN radar.plan_skip s ON s.target = :t AND {match.format(a="s")}
            ORDER BY d.n
            """
        ),
        {"t": target, "at": at, **key_params(keys)},
    ).fetchall()
    width = len(fields)
    return [NoPlanBefore(CaptureRun(*row[:width]) if row[0] is not None else None, *row[width:]) for row in rows]
