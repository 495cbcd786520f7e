"""Reads and writes of radar.statement_noise (sql/0014): per statement and ended UTC day, the sums its noise
estimates are made from (engine/noise.py).

The sums of several days add up, so a window's estimates are one indexed read: the days strictly before the day its
window begins in, which all ended before the window (nothing after the change is ever read), at most `days` of them.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pandas as pd
import sqlalchemy as sa

from radar_pipeline.config.queries import sql_text
from radar_pipeline.engine.noise import SUMS
from radar_pipeline.pgss_model import KEY
from radar_pipeline.warehouse.database import copy_frame

COLUMNS = ["target", "day", *KEY, *SUMS]


def days_to_compute(conn: sa.Connection, first: date, before: date) -> list[tuple[str, date]]:
    """(target, day) pairs in [first, before) with scrapes stored and no sums computed yet, oldest first."""
    rows = conn.execute(
        sql_text("warehouse.noise_days_to_compute"),
        {"lo": _midnight(first), "hi": _midnight(before)},
    )
    return [(r[0], r[1]) for r in rows]


def write_day(conn: sa.Connection, target: str, day: date, sums: pd.DataFrame, samples: int) -> None:
    """Replace the target's sums of the day with `sums` (KEY and SUMS columns), in the caller's transaction."""
    conn.execute(sa.text("DELETE FROM radar.statement_noise WHERE target = :t AND day = :d"), {"t": target, "d": day})
    conn.execute(
        sa.text("DELETE FROM radar.statement_noise_day WHERE target = :t AND day = :d"), {"t": target, "d": day}
    )
    if not sums.empty:
        copy_frame(conn, "radar.statement_noise", COLUMNS, sums.assign(target=target, day=day))
    conn.execute(
        sa.text("INSERT INTO radar.statement_noise_day (target, day, statements, samples) VALUES (:t, :d, :n, :s)"),
        {"t": target, "d": day, "n": len(sums), "s": samples},
    )


def read_before(conn: sa.Connection, target: str, window_start: datetime, days: int) -> pd.DataFrame:
    """Each statement's sums added up over the ended days before the one `window_start` lies in, at most `days` of
    them (KEY and SUMS columns; empty when none are stored: the analysis then runs on its windows alone)."""
    before = pd.Timestamp(window_start).tz_convert("UTC").date()
    sums = ", ".join(f"sum({c}) AS {c}" for c in SUMS)
    return pd.read_sql(
        sa.text(
            f"SELECT {', '.join(KEY)}, {sums} FROM radar.statement_noise "
            "WHERE target = :t AND day >= :first AND day < :before "
            f"GROUP BY {', '.join(KEY)}"
        ),
        conn,
        params={"t": target, "first": before - timedelta(days=days), "before": before},
    )


def delete_before(conn: sa.Connection, cutoff: date) -> None:
    """Drop the sums of days before `cutoff` (retention), in the caller's transaction."""
    for table in ("radar.statement_noise", "radar.statement_noise_day"):
        conn.execute(sa.text(f"DELETE FROM {table} WHERE day < :c"), {"c": cutoff})


def _midnight(day: date) -> datetime:
    return datetime.combine(day, datetime.min.time(), tzinfo=UTC)
