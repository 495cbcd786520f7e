"""The write path for pg_stat_statements snapshots.

Storage stays affordable because a statement whose counters did not move since its last stored row gets no new row.
Each target keeps, in radar.query, the last counters stored for every statement it has seen, so deciding what moved
needs no scan of the snapshot table; a scrape reads (in binary, into numpy) only the catalogue rows of the statements
its previous scrape listed, and looks up by key the few it lists that had left the view, so statements gone long ago
are neither sent nor decoded (the warehouse still passes over their rows). One scrape is written in one transaction,
under a per-target advisory lock: its info row, the moved statements (one binary COPY), and the catalogue updates. A
scrape whose captured_at is not newer than the target's last stored scrape is refused as a duplicate, so a repeated
write never duplicates rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime

import numpy as np
import pandas as pd
import psycopg
import sqlalchemy as sa
from psycopg import sql as psql

from radar_pipeline import binary_copy
from radar_pipeline.config.queries import sql_string
from radar_pipeline.pgss_model import (
    COUNTER_TYPES,
    COUNTERS,
    KEY,
    KEY_TYPES,
    OPTIONAL_COUNTERS,
    OPTIONAL_TYPES,
    Key,
    ScrapeInfo,
    statement_key,
    statement_keys,
)
from radar_pipeline.warehouse.database import KEYS, driver, key_params

SNAPSHOT_COLUMNS = [
    "target",
    "captured_at",
    *KEY,
    *COUNTERS,
    "stats_since",
    "reset_before",
    "fingerprint",
    *OPTIONAL_COUNTERS,
]
MAX_QUERY_TEXT = 8192
# What a scrape needs of the catalogue, per statement, read in binary (binary_copy): nulls read as '-infinity'.
CATALOGUE_FIELDS = [
    *KEY_TYPES,
    ("fingerprint", "int8"),
    ("last_calls", "int8"),
    ("last_total_exec_time", "float8"),
    ("last_stats_since", "timestamptz"),
    ("missing_since", "timestamptz"),
]
CATALOGUE_COLUMNS = (
    "dbid, userid, queryid, toplevel, fingerprint, last_calls, last_total_exec_time, "
    "coalesce(last_stats_since, '-infinity'), coalesce(missing_since, '-infinity')"
)
# The moved statements as staged for the write, in binary; a null stats_since travels as '-infinity', a newer counter
# the server lacks as -1 (a count) or NaN (a time), values no counter takes.
STAGE_FIELDS = [
    *KEY_TYPES,
    *COUNTER_TYPES,
    *OPTIONAL_TYPES,
    ("stats_since", "timestamptz"),
    ("reset_before", "bool"),
    ("fingerprint", "int8"),
    ("is_new", "bool"),
]
PARTITION_DAYS_AHEAD = 3


@dataclass
class TargetState:
    """What the warehouse knows of a target before a scrape is written."""

    # KEY + fingerprint, last_calls, last_total_exec_time, last_stats_since, missing_since: the catalogue rows of the
    # statements the last scrape listed, and of the scraped ones back in the view (lock_and_load_state)
    queries: pd.DataFrame
    ignored: set[Key]
    last_captured_at: datetime | None = None
    last_dealloc: int | None = None
    last_stats_reset: datetime | None = None


@dataclass
class SnapshotPlan:
    """Which statements of a scrape get a row, which are new, back from a reset, or gone from the view."""

    rows: pd.DataFrame  # KEY + COUNTERS + OPTIONAL_COUNTERS + stats_since, reset_before, fingerprint (NA: new), is_new
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
    resets_seen: int = 0
    missing_statements: int = 0
    dealloc_since_last: int | None = None
    duplicate: bool = False
    # issue 28, catalog facts (steps/snapshots.py): versions stored by the scrape's catalog read, or why it failed
    catalog_changes: int = 0
    catalog_error: str | None = None
    # issue 39, wait samples (collector/waits.py): rows stored by the scrape's pg_stat_activity sample, or why it failed
    wait_rows: int = 0
    wait_error: str | None = None


def ensure_partitions(conn: sa.Connection, first_day: date, days: int = PARTITION_DAYS_AHEAD) -> None:
    """Create the missing day partitions of radar.pgss_snapshot from first_day on, in the caller's transaction.

    Two transactions can both find a day missing (the first scrapes of several targets on a new UTC day, a scrape and
    the retention job): both create it, and the second, after waiting for the first to commit, fails with
    DuplicateTable. That attempt is undone (a savepoint) and made again: it now finds the other's partition.
    """
    for attempt in range(1, 4):
        try:
            with conn.begin_nested():
                conn.execute(
                    sa.text("SELECT radar.ensure_pgss_snapshot_partitions(:d, :n)"), {"d": first_day, "n": days}
                )
            return
        except sa.exc.ProgrammingError as exc:
            if attempt == 3 or not isinstance(exc.orig, psycopg.errors.DuplicateTable):
                raise


def lock_target(conn: sa.Connection, target: str) -> None:
    """Take the target's snapshot write lock for this transaction: one writer of its rows and catalogue at a time."""
    conn.execute(
        sa.text("SELECT pg_advisory_xact_lock(hashtextextended('radar.pgss_snapshot:' || :t, 0))"), {"t": target}
    )


def lock_and_load_state(conn: sa.Connection, target: str, statements: pd.DataFrame) -> TargetState:
    """Take the target's write lock for this transaction and read what the warehouse knows of it that a scrape of
    `statements` needs: the catalogue rows of the statements its previous scrape listed (read whole, in binary), and of
    the scraped statements it did not list, those the catalogue has from before (gone from the view and back). The
    statements gone long ago, which a catalogue gathers over months, are not read."""
    lock_target(conn, target)
    with driver(conn).cursor() as cur:
        copy_sql = psql.SQL(
            "COPY (SELECT {columns} FROM radar.query WHERE target = {target} AND missing_since IS NULL) "
            "TO STDOUT (FORMAT binary)"
        ).format(columns=psql.SQL(CATALOGUE_COLUMNS), target=psql.Literal(target))
        with cur.copy(copy_sql) as copy:
            listed = binary_copy.parse(b"".join(bytes(block) for block in copy), CATALOGUE_FIELDS)
    ignored = {
        statement_key(r)
        for r in conn.execute(
            sa.text("SELECT dbid, userid, queryid, toplevel FROM radar.ignored_statement WHERE target = :t"),
            {"t": target},
        )
    }
    queries = _catalogue_frame(listed)
    unlisted = statements.iloc[np.flatnonzero(positions(key_codes(queries), key_codes(statements)) < 0)]
    unlisted_keys = [k for k in statement_keys(unlisted) if k not in ignored]  # the collector's own are not in it
    if unlisted_keys:
        back = conn.execute(
            sa.text(
                f"SELECT {', '.join(name for name, _ in CATALOGUE_FIELDS)} FROM radar.query q "
                f"JOIN {KEYS} AS k(dbid, userid, queryid, toplevel) USING (dbid, userid, queryid, toplevel) "
                "WHERE q.target = :t AND q.missing_since IS NOT NULL"
            ),
            {"t": target, **key_params(unlisted_keys)},
        ).fetchall()
        if back:
            frame = pd.DataFrame(back, columns=[name for name, _ in CATALOGUE_FIELDS])
            queries = pd.concat([queries, _catalogue_frame(frame)], ignore_index=True)
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


def _catalogue_frame(rows: np.ndarray | pd.DataFrame) -> pd.DataFrame:
    frame = pd.DataFrame({name: rows[name] for name, _ in CATALOGUE_FIELDS})
    frame = frame.astype({"dbid": "int64", "userid": "int64", "toplevel": "bool"})
    for column in ("last_stats_since", "missing_since"):
        frame[column] = pd.to_datetime(frame[column], utc=True)
    return frame


def key_codes(frame: pd.DataFrame) -> np.ndarray:
    """Each row's statement key as one fixed-size byte string, so keys compare, sort and search as numpy values."""
    packed = np.empty(len(frame), dtype=[("queryid", ">i8"), ("dbid", ">u4"), ("userid", ">u4"), ("toplevel", "u1")])
    for name in KEY:
        packed[name] = frame[name].to_numpy()
    return packed.view(f"V{packed.dtype.itemsize}")


def positions(known: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """For each of `wanted` (key codes), its index in `known`, or -1 where `known` lacks it."""
    if not len(known) or not len(wanted):
        return np.full(len(wanted), -1, dtype=np.int64)
    order = np.argsort(known, kind="stable")
    ordered = known[order]
    at = np.minimum(np.searchsorted(ordered, wanted), len(known) - 1)
    return np.where(ordered[at] == wanted, order[at], -1)


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
        ignored = pd.DataFrame(list(state.ignored), columns=KEY)
        statements = statements.iloc[np.flatnonzero(positions(key_codes(ignored), key_codes(statements)) < 0)]
    queries = state.queries
    at = positions(key_codes(queries), key_codes(statements))
    known = at >= 0
    slot = np.where(known, at, len(queries))  # one past the catalogue's rows: a new statement's "previous" value

    def previous(values: np.ndarray, missing: float) -> np.ndarray:
        """The catalogue's values for each scraped statement, `missing` where the catalogue lacks it."""
        return np.append(values, np.array([missing], dtype=values.dtype))[slot]

    last_calls = previous(queries["last_calls"].to_numpy(dtype="int64", na_value=-1), -1)
    last_total = previous(queries["last_total_exec_time"].to_numpy(dtype="float64", na_value=np.nan), np.nan)
    catalogue_missing = _instants(queries["missing_since"]) != NAT
    reappeared = known & previous(catalogue_missing, False)
    calls, total = statements["calls"].to_numpy(), statements["total_exec_time"].to_numpy()
    since = _instants(statements["stats_since"])
    last_since = previous(_instants(queries["last_stats_since"]), NAT)
    since_changed = since != last_since
    server_reset = (
        state.last_stats_reset is not None and stats_reset is not None and stats_reset != state.last_stats_reset
    )
    went_down = known & ((calls < last_calls) | (total < last_total))
    moved = ~known | reappeared | (calls != last_calls) | (total != last_total) | since_changed
    evicted = _maybe_evicted(state, statements, last_calls, known, catalogue_missing, dealloc)
    reset_before = known & (reappeared | server_reset | went_down | since_changed | evicted)

    chosen = np.flatnonzero(moved)
    optional = [name for name in OPTIONAL_COUNTERS if name in statements]
    rows = statements.iloc[chosen][[*KEY, *COUNTERS, *optional, "stats_since"]].reset_index(drop=True)
    for name in OPTIONAL_COUNTERS:  # a scrape frame without one (PgssScrape documents them) has it unknown
        if name not in statements:
            rows[name] = np.nan
    rows["fingerprint"] = pd.array(previous(queries["fingerprint"].to_numpy(dtype="int64", na_value=0), 0)[chosen])
    rows["fingerprint"] = rows["fingerprint"].astype("Int64").mask(~known[chosen])
    rows["reset_before"] = reset_before[chosen]
    rows["is_new"] = ~known[chosen]

    listed = queries.iloc[np.flatnonzero(~catalogue_missing)]
    gone = listed.iloc[np.flatnonzero(positions(key_codes(statements), key_codes(listed)) < 0)]
    return SnapshotPlan(
        rows=rows,
        new_keys=statement_keys(statements.iloc[np.flatnonzero(~known)]),
        reappeared_keys=statement_keys(statements.iloc[np.flatnonzero(reappeared)]),
        missing_keys=statement_keys(gone),
        server_reset=server_reset,
        listed=len(statements),
    )


NAT = np.iinfo(np.int64).min  # NaT as an int64 of microseconds


def _instants(values: pd.Series) -> np.ndarray:
    """Timestamps as UTC microseconds (NaT as NAT), so columns of any unit or time zone compare as numbers."""
    stamps = pd.to_datetime(values, utc=True).dt.tz_localize(None)
    return stamps.to_numpy(dtype="datetime64[us]").view(np.int64)


def _maybe_evicted(
    state: TargetState,
    statements: pd.DataFrame,
    last_calls: np.ndarray,
    known: np.ndarray,
    catalogue_missing: np.ndarray,
    dealloc: int | None,
) -> np.ndarray:
    """Statements that may have been evicted since their previous row on a server without stats_since."""
    none = np.zeros(len(statements), dtype=bool)
    if dealloc is None or state.last_dealloc is None or dealloc <= state.last_dealloc:
        return none
    if statements["stats_since"].notna().any():
        return none  # PostgreSQL 17+: stats_since tells evictions apart exactly
    listed = state.queries["last_calls"].to_numpy(dtype="float64", na_value=np.nan)[~catalogue_missing]
    if not len(listed):
        return none
    edge = np.quantile(listed, EVICTION_QUANTILE)
    return known & (last_calls <= edge)


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
    result.resets_seen = int(rows["reset_before"].sum())
    result.missing_statements = len(plan.missing_keys)
    if info.dealloc is not None and state.last_dealloc is not None:
        result.dealloc_since_last = info.dealloc if plan.server_reset else max(0, info.dealloc - state.last_dealloc)

    ensure_partitions(conn, info.captured_at.astimezone(UTC).date())
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
    """Stage the moved statements with one binary COPY (built by numpy, no per-row loop) and their few texts, then
    insert their snapshot rows and update the catalogue from the stage."""
    if not len(rows):
        return
    columns = {name: rows[name].to_numpy() for name, _ in STAGE_FIELDS if name != "stats_since"}
    for name, pg_type in OPTIONAL_TYPES:
        values = rows[name].to_numpy(dtype="float64")
        columns[name] = values if pg_type == "float8" else np.where(np.isnan(values), -1, values).astype(np.int64)
    columns["fingerprint"] = rows["fingerprint"].to_numpy(dtype="int64")
    columns["stats_since"] = _instants(rows["stats_since"]).view("datetime64[us]")
    stage = binary_copy.encode(columns, STAGE_FIELDS)
    with driver(conn).cursor() as cur:
        cur.execute(
            "CREATE TEMP TABLE radar_snapshot_stage ("
            + ", ".join(f"{name} {pg_type}" for name, pg_type in STAGE_FIELDS)
            + ", query text) ON COMMIT DROP"
        )
        with cur.copy(
            f"COPY radar_snapshot_stage ({', '.join(n for n, _ in STAGE_FIELDS)}) FROM STDIN (FORMAT binary)"
        ) as copy:
            copy.write(stage)
        with_text = [k for k in statement_keys(rows) if k in texts]
        if with_text:
            cur.execute(
                sql_string("warehouse.stage_statement_texts"),
                {**key_params(with_text), "query": [texts[k][:MAX_QUERY_TEXT] for k in with_text]},
            )
        at = {"target": info.target, "at": info.captured_at}
        counters = ", ".join(COUNTERS)
        unknown = {"int8": "-1", "float8": "'NaN'"}
        optional = ", ".join(f"nullif({name}, {unknown[pg_type]})" for name, pg_type in OPTIONAL_TYPES)
        cur.execute(
            f"INSERT INTO radar.pgss_snapshot ({', '.join(SNAPSHOT_COLUMNS)}) "
            f"SELECT %(target)s, %(at)s, {', '.join(KEY)}, {counters}, nullif(stats_since, '-infinity'), "
            f"reset_before, fingerprint, {optional} FROM radar_snapshot_stage "
            "ORDER BY dbid, userid, queryid, toplevel",
            at,
        )
        cur.execute(
            sql_string("warehouse.update_seen_statements"),
            at,
        )
        cur.execute(
            sql_string("warehouse.insert_new_statements"),
            at,
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
