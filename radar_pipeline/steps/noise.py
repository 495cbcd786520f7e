"""Each statement's noise prior, from its own earlier days: the per-day sums written nightly, and the estimates an
analysis reads for its window (engine/noise.py, warehouse/noise.py, sql/0014). Not the history bands (steps/history.py).

Plain Python, so the Dagster asset, the benchmarks and the tests run the same code.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

import pandas as pd
import sqlalchemy as sa

from radar_pipeline.engine.noise import SUMS, noise_estimates, noise_sums
from radar_pipeline.engine.rhythm import hourly_sums
from radar_pipeline.pgss_model import KEY
from radar_pipeline.warehouse import analysis, rhythm
from radar_pipeline.warehouse import noise as store

# The days before an analysis's window whose sums it adds up: a week of one-minute scrapes is ten thousand intervals
# a statement, far more than the engine counts (prior_max_intervals); older days are stale, and without any the
# statement is tested on its window alone.
PRIOR_DAYS = 7
# A day is read this much at a time: a whole number of the sums' blocks (engine.noise.BLOCK), so chunks add up.
CHUNK = timedelta(hours=3)
# A day's sums are computed once it ended this long ago by the warehouse's clock (as compaction waits for it).
GRACE = timedelta(hours=1)


@dataclass(frozen=True)
class NoiseDay:
    """One target's day: the statements whose sums were stored and the samples read, or the error that left it."""

    target: str
    day: str
    statements: int = 0
    samples: int = 0
    error: str | None = None


def update_noise(engine: sa.Engine, days: int = PRIOR_DAYS, grace: timedelta = GRACE) -> list[NoiseDay]:
    """Compute and store the sums of every target's ended days of the last `days` that have none yet, oldest first,
    each day in a transaction of its own (a failure is reported and the day is tried again next time). The default
    covers what an analysis of today reads; a day read from its compacted form costs several times a raw one, so
    the first run after an upgrade, which finds a week without sums, takes longest."""
    with engine.connect() as conn:
        today = conn.execute(
            sa.text("SELECT CAST((now() - :grace) AT TIME ZONE 'UTC' AS date)"), {"grace": grace}
        ).scalar_one()
        todo = store.days_to_compute(conn, today - timedelta(days=days), today)
    outcomes = []
    for target, day in todo:
        try:
            outcomes.append(_update_day(engine, target, day))
        except sa.exc.DBAPIError as exc:
            outcomes.append(NoiseDay(target, day.isoformat(), error=str(exc.orig).strip()))
    return outcomes


def _update_day(engine: sa.Engine, target: str, day: date) -> NoiseDay:
    """One target's day: its samples read (both forms, through read_window) a CHUNK at a time, summed, and stored,
    with each statement's hourly sums (the weekly rhythms', engine/rhythm.py).

    The sums are made of blocks aligned to the epoch, which never straddle a chunk's edge, so a day's sums are those
    of its chunks added up (the same to the last bits of floating-point rounding), while a read holds only a chunk's
    samples in memory (a whole day of 5,000 statements would hold 7.2 million).
    """
    start = datetime.combine(day, datetime.min.time(), tzinfo=UTC)
    parts, hours, samples = [], [], 0
    for lo in (start + i * CHUNK for i in range(int(timedelta(days=1) / CHUNK))):
        hi = lo + CHUNK
        with engine.connect() as conn:
            window = analysis.read_window(conn, target, lo, hi)
            conn.rollback()
        sums = noise_sums(window.counters, pd.Timestamp(lo), pd.Timestamp(hi))
        parts.append(_with_keys(sums, window.keys))
        hours.append(_with_keys(hourly_sums(window.counters, pd.Timestamp(lo), pd.Timestamp(hi)), window.keys))
        samples += int((window.counters["captured_at"] > pd.Timestamp(lo)).sum())  # not the earlier rows read
    frame = pd.concat(parts).groupby(KEY, as_index=False, sort=True)[SUMS].sum()
    frame = frame.astype({"intervals": "int64", "blocks": "int64"})  # counts (an empty chunk's sums are floats)
    with engine.begin() as conn:
        store.write_day(conn, target, day, frame, samples)
        rhythm.write_day(conn, target, day, pd.concat(hours, ignore_index=True))
    return NoiseDay(target, day.isoformat(), statements=len(frame), samples=samples)


def _with_keys(frame: pd.DataFrame, keys: pd.DataFrame) -> pd.DataFrame:
    """An engine frame's rows (query_key: a row number of `keys`) with their statement's KEY columns instead."""
    codes = frame["query_key"].to_numpy(dtype="int64")
    return pd.concat([keys.iloc[codes].reset_index(drop=True), frame.drop(columns="query_key")], axis=1)


def prior_for(conn: sa.Connection, target: str, window_start: datetime, keys: pd.DataFrame) -> pd.DataFrame | None:
    """The noise prior of the window's statements (`keys`: KEY columns indexed by query_key, as read_window
    gives them) from the PRIOR_DAYS ended before the window's first day, as analyse takes them; None when none are
    stored (the analysis then runs as engine 2.2.0 did)."""
    sums = store.read_before(conn, target, window_start, PRIOR_DAYS)
    if sums.empty:
        return None
    statements = keys[KEY].rename_axis("query_key").reset_index()
    for name in KEY:
        sums[name] = sums[name].astype(statements[name].dtype)
    joined = statements.merge(sums, on=KEY, how="inner")
    if joined.empty:
        return None
    return noise_estimates(joined[["query_key", *SUMS]])
