"""The write path for pg_stat_statements snapshots.

Storage stays affordable because a statement whose counters did not move since its last stored row gets no new row.
Each target keeps, in radar.query, the last counters stored for every statement it has seen, so deciding what moved
needs no scan of the snapshot table. One scrape is written in one transaction, under a per-target advisory lock:
its info row, the moved statements (COPY), and the catalogue updates. A scrape whose captured_at is not newer than the
target's last stored scrape is refused as a duplicate, so a repeated write never duplicates rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

import numpy as np
import pandas as pd
import sqlalchemy as sa

from radar_pipeline.pgss_model import COUNTERS, KEY, Key, ScrapeInfo, statement_key, statement_keys
from radar_pipeline.warehouse.database import KEYS, driver, key_params

SNAPSHOT_COLUMNS = ["target", "captured_at", *KEY, *COUNTERS, "stats_since", "reset_before", "fingerprint"]
MAX_QUERY_TEXT = 8192
PARTITION_DAYS_AHEAD = 3


@dataclass
class TargetState:
    """What the warehouse knows of a target before a scrape is written."""

    queries: pd.DataFrame  # KEY + fingerprint, last_calls, last_total_exec_time, last_stats_since, missing_since
    ignored: set[Key]
    last_captured_at: datetime | None = None
    last_dealloc: int | None = None
    last_stats_reset: datetime | None = None


@dataclass
class SnapshotPlan:
    """Which statements of a scrape get a row, which are new, back from a reset, or gone from the view."""

    rows: pd.DataFrame  # KEY + COUNTERS + stats_since, reset_before, fingerprint (NA for new statements), is_new
    new_keys: list[Key]
    reappeared_keys: list[Key]
    missing_keys: list[Key]
    server_reset: bool  # pg_stat_statements_info.stats_reset moved since the last scrape
    listed: int  # statements the view listed, the collector's own left out


@dataclass
class StoreResult:
    """What one scrape wrote, for the asset's metadata."""

    target: str
    captured_at: datetime
    statements: int = 0
    stored_rows: int = 0
    new_statements: int = 0
    ignored_statements: int = 0
    resets_seen: int = 0
    missing_statements: int = 0
    dealloc_since_last: int | None = None
    duplicate: bool = False
    skipped_keys: list[Key] = field(default_factory=list)


def lock_target(conn: sa.Connection, target: str) -> None:
    """Take the target's snapshot write lock for this transaction: one writer of its rows and catalogue at a time."""
    conn.execute(
        sa.text("SELECT pg_advisory_xact_lock(hashtextextended('radar.pgss_snapshot:' || :t, 0))"), {"t": target}
    )


def lock_and_load_state(conn: sa.Connection, target: str) -> TargetState:
    """Take the target's write lock for this transaction and read what the warehouse knows of it."""
    lock_target(conn, target)
    with driver(conn).cursor(binary=True) as cur:
        known = cur.execute(
            "SELECT dbid, userid, queryid, toplevel, fingerprint, last_calls, last_total_exec_time, "
            "last_stats_since, missing_since FROM radar.query WHERE target = %s",
            (target,),
        ).fetchall()
    queries = pd.DataFrame(
        known,
        columns=[*KEY, "fingerprint", "last_calls", "last_total_exec_time", "last_stats_since", "missing_since"],
    )
    # Nullable integers, so a left join against new statements never turns a 64-bit fingerprint into a float.
    queries = queries.astype(
        {
            "dbid": "int64",
            "userid": "int64",
            "queryid": "int64",
            "toplevel": "bool",
            "fingerprint": "Int64",
            "last_calls": "Int64",
            "last_total_exec_time": "float64",
        }
    )
    for column in ("last_stats_since", "missing_since"):
        queries[column] = pd.to_datetime(queries[column], utc=True)
    ignored = {
        statement_key(r)
        for r in conn.execute(
            sa.text("SELECT dbid, userid, queryid, toplevel FROM radar.ignored_statement WHERE target = :t"),
            {"t": target},
        )
    }
    last = conn.execute(
        sa.text(
            "SELECT captured_at, dealloc, stats_reset FROM radar.pgss_info_snapshot "
            "WHERE target = :t ORDER BY captured_at DESC LIMIT 1"
        ),
        {"t": target},
    ).fetchone()
    state = TargetState(queries=queries, ignored=ignored)
    if last is not None:
        state.last_captured_at, state.last_dealloc, state.last_stats_reset = last
    return state


EVICTION_QUANTILE = 0.10  # a deallocation drops the least-used 5% of entries: twice that counts as near the edge


def plan_snapshot(
    state: TargetState, statements: pd.DataFrame, stats_reset: datetime | None, dealloc: int | None = None
) -> SnapshotPlan:
    """Decide, without I/O, which statements of a scrape get a row and how their previous interval reads.

    A row is stored when the statement is new, is back after vanishing from the view, or any of calls, total time
    or stats_since changed. reset_before marks a row whose counters restarted since the statement's previous stored
    row: it vanished from the view, the server's stats_reset moved, its calls or time went down, or stats_since changed.
    Without stats_since (PostgreSQL 14–16), a statement evicted and back between two scrapes with more calls than it
    had is invisible in its numbers; so when `dealloc` (pg_stat_statements_info) moved since the last scrape, a
    statement that was among the least-called (EVICTION_QUANTILE) at its previous row is marked too: it may have been
    evicted, and an interval is better lost than wrong.
    """
    if state.ignored and len(statements):
        keys = list(zip(statements.dbid, statements.userid, statements.queryid, statements.toplevel, strict=True))
        statements = statements[[k not in state.ignored for k in keys]]
    merged = statements.merge(state.queries, on=KEY, how="left", indicator=True)
    known = (merged["_merge"] == "both").to_numpy()
    reappeared = known & merged["missing_since"].notna().to_numpy()
    calls, last_calls = merged["calls"].to_numpy(), merged["last_calls"].fillna(-1).to_numpy("int64")
    total, last_total = merged["total_exec_time"].to_numpy(), merged["last_total_exec_time"].to_numpy()
    calls_changed = calls != last_calls
    time_changed = total != last_total
    since_changed = _differs(merged["stats_since"], merged["last_stats_since"])
    server_reset = (
        state.last_stats_reset is not None and stats_reset is not None and stats_reset != state.last_stats_reset
    )
    went_down = known & ((calls < last_calls) | (total < last_total))
    moved = ~known | reappeared | calls_changed | time_changed | since_changed
    reset_before = known & (
        reappeared | server_reset | went_down | since_changed | _maybe_evicted(state, merged, dealloc)
    )

    rows = merged.loc[moved, [*KEY, *COUNTERS, "stats_since", "fingerprint"]].copy()
    rows["reset_before"] = reset_before[moved]
    rows["is_new"] = ~known[moved]

    missing = state.queries[state.queries["missing_since"].isna()].merge(
        statements[KEY], on=KEY, how="left", indicator=True
    )
    missing = missing[missing["_merge"] == "left_only"]
    return SnapshotPlan(
        rows=rows,
        new_keys=statement_keys(merged[~known]),
        reappeared_keys=statement_keys(merged[reappeared]),
        missing_keys=statement_keys(missing),
        server_reset=server_reset,
        listed=len(statements),
    )


def _maybe_evicted(state: TargetState, merged: pd.DataFrame, dealloc: int | None) -> np.ndarray:
    """Statements that may have been evicted since their previous row on a server without stats_since."""
    none = np.zeros(len(merged), dtype=bool)
    if dealloc is None or state.last_dealloc is None or dealloc <= state.last_dealloc:
        return none
    if "stats_since" in merged.columns and merged["stats_since"].notna().any():
        return none  # PostgreSQL 17+: stats_since tells evictions apart exactly
    listed = state.queries.loc[state.queries["missing_since"].isna(), "last_calls"]
    if listed.empty:
        return none
    edge = listed.quantile(EVICTION_QUANTILE)
    return (merged["last_calls"].to_numpy(dtype=float) <= edge) & merged["last_calls"].notna().to_numpy()


def write_snapshot(
    conn: sa.Connection,
    info: ScrapeInfo,
    state: TargetState,
    plan: SnapshotPlan,
    texts: dict[Key, str],
    fingerprints: dict[Key, int],
    ignored: dict[Key, str],
) -> StoreResult:
    """Write one scrape in the caller's transaction (opened with `lock_and_load_state`).

    `texts` and `fingerprints` cover the new statements (and the reappeared ones whose text was read again);
    `ignored` holds new statements recognised as the collector's own, which are recorded by key and never stored.
    A new statement with no text (it left the view between the scrape and the text read) waits for the next scrape.
    """
    result = StoreResult(target=info.target, captured_at=info.captured_at)
    if state.last_captured_at is not None and info.captured_at <= state.last_captured_at:
        result.duplicate = True
        return result

    rows = plan.rows
    is_new = rows["is_new"].to_numpy()
    new_keys = statement_keys(rows[is_new])
    keep_new = np.array([k in fingerprints and k not in ignored for k in new_keys], dtype=bool)
    result.skipped_keys = [k for k, keep in zip(new_keys, keep_new, strict=True) if not keep and k not in ignored]
    keep = np.ones(len(rows), dtype=bool)
    keep[np.flatnonzero(is_new)] = keep_new
    rows = rows[keep].copy()
    if len(rows):
        # New statements take their fingerprint from their text; a reappeared one whose text was read again, too.
        has_text = [k in fingerprints for k in statement_keys(rows)]
        rows.loc[has_text, "fingerprint"] = [fingerprints[k] for k in statement_keys(rows[has_text])]

    result.statements = plan.listed - len(ignored)
    result.stored_rows = len(rows)
    result.new_statements = int(rows["is_new"].sum())
    result.ignored_statements = len(ignored)
    result.resets_seen = int(rows["reset_before"].sum())
    result.missing_statements = len(plan.missing_keys)
    if info.dealloc is not None and state.last_dealloc is not None:
        result.dealloc_since_last = info.dealloc if plan.server_reset else max(0, info.dealloc - state.last_dealloc)

    conn.execute(
        sa.text("SELECT radar.ensure_pgss_snapshot_partitions((:at AT TIME ZONE 'UTC')::date, :days)"),
        {"at": info.captured_at, "days": PARTITION_DAYS_AHEAD},
    )
    conn.execute(
        sa.text(
            "INSERT INTO radar.pgss_info_snapshot (target, captured_at, dealloc, stats_reset, server_version_num, "
            "pgss_version, statements, stored_rows) VALUES (:target, :at, :dealloc, :stats_reset, :version, "
            ":pgss_version, :statements, :stored)"
        ),
        {
            "target": info.target,
            "at": info.captured_at,
            "dealloc": info.dealloc,
            "stats_reset": info.stats_reset,
            "version": info.server_version_num,
            "pgss_version": info.pgss_version,
            "statements": result.statements,
            "stored": result.stored_rows,
        },
    )
    _store_rows(conn, info, rows, texts)
    _mark_missing(conn, info, plan.missing_keys)
    _record_ignored(conn, info.target, ignored)
    return result


def _store_rows(conn: sa.Connection, info: ScrapeInfo, rows: pd.DataFrame, texts: dict[Key, str]) -> None:
    """Stage the moved statements with one COPY, then insert their snapshot rows and update the catalogue from it."""
    if not len(rows):
        return
    keys = statement_keys(rows)
    stats_since = [None if pd.isna(v) else v.to_pydatetime() for v in rows["stats_since"]]
    columns = [rows[c].tolist() for c in KEY + COUNTERS]
    reset_before = rows["reset_before"].tolist()
    fingerprints = rows["fingerprint"].astype("int64").tolist()
    is_new = rows["is_new"].tolist()
    query = [texts[k][:MAX_QUERY_TEXT] if k in texts else None for k in keys]
    stage_columns = [*SNAPSHOT_COLUMNS, "query", "is_new"]
    conn.exec_driver_sql(
        "CREATE TEMP TABLE radar_snapshot_stage (LIKE radar.pgss_snapshot, query text, is_new boolean) ON COMMIT DROP"
    )
    with driver(conn).cursor() as cur:
        with cur.copy(f"COPY radar_snapshot_stage ({', '.join(stage_columns)}) FROM STDIN") as copy:
            for i in range(len(rows)):
                copy.write_row(
                    (
                        info.target,
                        info.captured_at,
                        *(c[i] for c in columns),
                        stats_since[i],
                        reset_before[i],
                        fingerprints[i],
                        query[i],
                        is_new[i],
                    )
                )
        cols = ", ".join(SNAPSHOT_COLUMNS)
        cur.execute(f"INSERT INTO radar.pgss_snapshot ({cols}) SELECT {cols} FROM radar_snapshot_stage")
        cur.execute(
            "UPDATE radar.query q SET last_seen = s.captured_at, last_calls = s.calls, "
            "last_total_exec_time = s.total_exec_time, last_stats_since = s.stats_since, missing_since = NULL, "
            "query = coalesce(s.query, q.query), fingerprint = s.fingerprint "
            "FROM radar_snapshot_stage s WHERE NOT s.is_new AND q.target = s.target AND q.dbid = s.dbid "
            "AND q.userid = s.userid AND q.queryid = s.queryid AND q.toplevel = s.toplevel"
        )
        cur.execute(
            "INSERT INTO radar.query (target, dbid, userid, queryid, toplevel, fingerprint, query, first_seen, "
            "last_seen, last_calls, last_total_exec_time, last_stats_since) "
            "SELECT target, dbid, userid, queryid, toplevel, fingerprint, query, captured_at, captured_at, calls, "
            "total_exec_time, stats_since FROM radar_snapshot_stage WHERE is_new"
        )


def _mark_missing(conn: sa.Connection, info: ScrapeInfo, keys: list[Key]) -> None:
    if not keys:
        return
    conn.execute(
        sa.text(
            f"UPDATE radar.query q SET missing_since = :at FROM {KEYS} AS m(dbid, userid, queryid, toplevel) "
            "WHERE q.target = :target AND q.dbid = m.dbid AND q.userid = m.userid AND q.queryid = m.queryid "
            "AND q.toplevel = m.toplevel AND q.missing_since IS NULL"
        ),
        {"target": info.target, "at": info.captured_at, **key_params(keys)},
    )


def _record_ignored(conn: sa.Connection, target: str, ignored: dict[Key, str]) -> None:
    if not ignored:
        return
    conn.execute(
        sa.text(
            "INSERT INTO radar.ignored_statement (target, dbid, userid, queryid, toplevel, reason) "
            "VALUES (:target, :dbid, :userid, :queryid, :toplevel, :reason) ON CONFLICT DO NOTHING"
        ),
        [
            {"target": target, "dbid": k[0], "userid": k[1], "queryid": k[2], "toplevel": k[3], "reason": reason}
            for k, reason in ignored.items()
        ],
    )


def _differs(a: pd.Series, b: pd.Series) -> np.ndarray:
    """Element-wise 'is distinct from' for two timestamp columns (NaT equals NaT)."""
    both_null = a.isna().to_numpy() & b.isna().to_numpy()
    equal = (a == b).fillna(False).to_numpy(dtype=bool)
    return ~(equal | both_null)
