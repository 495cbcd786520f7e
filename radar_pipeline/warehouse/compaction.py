"""Compaction of ended snapshot days (sql/0013, sql/0024): a day partition of radar.pgss_snapshot rewritten as one
radar.pgss_compact row per statement, its samples as arrays (integer counters delta-encoded).

A day is compacted in the caller's transaction, so a failure anywhere leaves its raw partition as it was. The raw
partition is locked against writers first (EXCLUSIVE: readers go on), and emptied with TRUNCATE at the end (that waits
for the readers of the day then). A row written into an already compacted day (a target whose clock lags) is merged
into its statement's compact row by the next compaction: the raw partition stays, empty, to take it. TRUNCATE is not
MVCC-safe: a REPEATABLE READ transaction whose snapshot predates the commit and that first reads the day after it would
find neither form; radar's readers run in READ COMMITTED, each read one statement.
"""

from __future__ import annotations

from datetime import date, timedelta

import sqlalchemy as sa

from radar_pipeline.config.queries import sql_text
from radar_pipeline.pgss_model import OPTIONAL_TYPES

_STATEMENT = "target, dbid, userid, queryid, toplevel"
_SAME_STATEMENT = " AND ".join(f"p.{c} = c.{c}" for c in _STATEMENT.split(", "))
# The integer counters delta-encoded in a compact row; the others are kept as stored (sql/0013, sql/0024). The
# decoding (radar.pgss_compact_rows) sums the non-null deltas, so a newer counter (which may be null) is encoded against
# its last known value before it (10, null, 15 → 10, null, 5), its first known value whole, and a null stays null.
_NOT_NULL = ["calls", "rows", "shared_blks_hit", "shared_blks_read", "temp_blks_written"]
_NULLABLE = [name for name, pg_type in OPTIONAL_TYPES if pg_type == "int8"]
_DELTA = [*_NOT_NULL, *_NULLABLE]
_AS_STORED = [
    "total_exec_time",
    "shared_blk_read_time",
    "stddev_exec_time",
    "stats_since",
    "reset_before",
    "fingerprint",
    *(name for name, pg_type in OPTIONAL_TYPES if pg_type == "float8"),
]


def raw_partition(day: date) -> str:
    """The name of a day's partition of radar.pgss_snapshot (sql/0001)."""
    return f"pgss_snapshot_p{day:%Y%m%d}"


def compactable_days(conn: sa.Connection, grace: timedelta) -> list[date]:
    """The days whose raw partition holds rows and ended at least `grace` ago by the warehouse's clock (UTC days):
    never the current day, nor one a scrape may still be writing into."""
    rows = conn.execute(
        sql_text("warehouse.compactable_days"),
        {"grace": grace},
    ).all()
    return [day for day, name in rows if conn.execute(sa.text(f"SELECT EXISTS (SELECT 1 FROM radar.{name})")).scalar()]


def ensure_partition(conn: sa.Connection, day: date) -> None:
    """Create the day's partition of radar.pgss_compact if missing (best in a transaction of its own: it locks the
    parent table)."""
    conn.execute(sa.text("SELECT radar.ensure_pgss_compact_partition(:d)"), {"d": day})


def compact_day(conn: sa.Connection, day: date) -> int:
    """Move the day's raw rows into radar.pgss_compact, in the caller's transaction; returns the samples moved.

    The day's compact partition must exist (`ensure_partition`). Statements already compacted that day (rows written
    late) have their compact row decoded, merged with the new rows and written again.
    """
    raw = f"radar.{raw_partition(day)}"
    conn.execute(sa.text(f"LOCK TABLE {raw} IN EXCLUSIVE MODE"))
    moved = conn.execute(sa.text(f"SELECT count(*) FROM {raw}")).scalar_one()
    if not moved:
        return 0
    late = f"c.day = :day AND EXISTS (SELECT 1 FROM {raw} p WHERE {_SAME_STATEMENT})"
    conn.execute(
        sa.text(
            "CREATE TEMP TABLE pgss_compact_merge ON COMMIT DROP AS SELECT r.* FROM radar.pgss_compact c "
            f"CROSS JOIN LATERAL radar.pgss_compact_rows(c) r WHERE {late}"
        ),
        {"day": day},
    )
    conn.execute(sa.text(f"DELETE FROM radar.pgss_compact c WHERE {late}"), {"day": day})
    conn.execute(sa.text(_encode(f"SELECT * FROM {raw} UNION ALL SELECT * FROM pgss_compact_merge")), {"day": day})
    conn.execute(sa.text(f"TRUNCATE {raw}"))
    return int(moved)


def _encode(source: str) -> str:
    """INSERT the compact rows (one per statement) of the raw-shaped rows `source` selects, all of one day."""
    window = f"OVER (PARTITION BY {_STATEMENT} ORDER BY captured_at)"
    earlier = f"OVER (PARTITION BY {_STATEMENT} ORDER BY captured_at ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)"
    # the last known value before a row: the greatest [time, value] pair of the earlier rows with a value
    deltas = ", ".join(
        [f"{c} - coalesce(lag({c}) {window}, 0) AS {c}" for c in _NOT_NULL]
        + [
            f"{c} - coalesce((max(ARRAY[us, {c}]) FILTER (WHERE {c} IS NOT NULL) {earlier})[2], 0) AS {c}"
            for c in _NULLABLE
        ]
    )
    arrays = ", ".join(f"array_agg({c} ORDER BY captured_at)" for c in ["at_us", *_DELTA, *_AS_STORED])
    return f"""
        INSERT INTO radar.pgss_compact ({_STATEMENT}, day, first_at, last_at, captured_at, {", ".join(_DELTA)},
                                        {", ".join(_AS_STORED)})
        SELECT {_STATEMENT}, :day, min(captured_at), max(captured_at), {arrays}
        FROM (
            SELECT {_STATEMENT}, captured_at, {deltas}, {", ".join(_AS_STORED)},
                   us - first_value(us) {window} AS at_us
            FROM (SELECT *, CAST(extract(epoch FROM captured_at) * 1000000 AS bigint) AS us FROM ({source}) s) s
        ) d
        GROUP BY {_STATEMENT}
    """
