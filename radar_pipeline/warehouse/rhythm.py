"""Reads and writes of radar.statement_hour (sql/0039): each statement's calls and time per UTC hour, from which the
periodic check's weekly levels are made (engine/rhythm.py)."""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta

import pandas as pd
import sqlalchemy as sa

from radar_pipeline.config.queries import sql_text
from radar_pipeline.pgss_model import KEY
from radar_pipeline.warehouse.database import copy_frame

COLUMNS = ["target", "hour", *KEY, "calls", "time_ms"]
# Days of hourly sums retention keeps whatever the snapshots' retention: the most weeks a level reads, and the week
# being checked.
RHYTHM_DAYS = 35
HALF_WEEK_HOURS = 84


def write_day(conn: sa.Connection, target: str, day: date, hours: pd.DataFrame) -> None:
    """Replace the target's hourly sums of the UTC day with `hours` (KEY columns, hour, calls, time_ms), in the
    caller's transaction."""
    start = datetime.combine(day, time(0), tzinfo=UTC)
    conn.execute(
        sa.text("DELETE FROM radar.statement_hour WHERE target = :t AND hour >= :lo AND hour < :hi"),
        {"t": target, "lo": start, "hi": start + timedelta(days=1)},
    )
    if not hours.empty:
        copy_frame(conn, "radar.statement_hour", COLUMNS, hours.assign(target=target))


def read_hours(conn: sa.Connection, target: str, hours: pd.DatetimeIndex) -> pd.DataFrame:
    """The target's stored sums in these hours: KEY columns, hour, calls, time_ms."""
    return pd.read_sql(
        sa.text(
            f"SELECT {', '.join(KEY)}, hour, calls, time_ms FROM radar.statement_hour "
            "WHERE target = :t AND hour = ANY(CAST(:hours AS timestamptz[]))"
        ),
        conn,
        params={"t": target, "hours": [h.to_pydatetime() for h in hours]},
    )


SPAN_WORK_MEM = "64MB"


def span_weeks(
    conn: sa.Connection, target: str, queries: pd.DataFrame, first: datetime, hours: int, weeks: int, min_calls: float
) -> pd.DataFrame:
    """Per statement of `queries` (KEY columns) and earlier week k (1 … `weeks`: the 168 hours centred on `first` −
    k weeks, which end half a week before `first`, so the nightly job has summed them), its calls and time in that
    week, in the span's `hours` hours from `first` − k weeks, and how many of those hours had at least `min_calls`
    calls: KEY columns, week, calls, time_ms, span_calls, span_time_ms, span_hours."""
    keys = queries[KEY].drop_duplicates()
    # Up to 4 weeks of hours of every statement (3.4 million rows at 5,000): the hour's number in float8, not
    # extract()'s numeric, and memory to aggregate them without spilling (benchmarks/rhythm_lab.py --cost 5000).
    conn.execute(sa.text(f"SET LOCAL work_mem = '{SPAN_WORK_MEM}'"))
    return pd.read_sql(
        sql_text("warehouse.span_weeks"),
        conn,
        params={
            "t": target,
            "oldest": first - timedelta(weeks=weeks, hours=HALF_WEEK_HOURS),
            "newest": first - timedelta(hours=HALF_WEEK_HOURS),
            "weeks": weeks,
            "half_week": HALF_WEEK_HOURS,
            "n": hours,
            "min_calls": min_calls,
            "db": keys["dbid"].astype(int).tolist(),
            "u": keys["userid"].astype(int).tolist(),
            "q": keys["queryid"].astype(int).tolist(),
            "l": keys["toplevel"].astype(bool).tolist(),
        },
    )


def delete_before(conn: sa.Connection, cutoff: date) -> None:
    """Drop the hourly sums of days before `cutoff` (retention, which keeps RHYTHM_DAYS at least), in the caller's
    transaction."""
    conn.execute(
        sa.text("DELETE FROM radar.statement_hour WHERE hour < :c"),
        {"c": datetime.combine(cutoff, time(0), tzinfo=UTC)},
    )
