"""A week-shaped workload with known answers (issue 41, "Weekly rhythms"): statements whose latency follows a weekday
business-hours peak, quiet weekends and a nightly batch, as cumulative counters, and optionally a step on a Monday
peak. What the rhythm lab (benchmarks/rhythm_lab.py) and the engine's tests replay."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.signal import lfilter

MONDAY = pd.Timestamp("2026-11-02 00:00", tz="UTC")  # a Monday: week k of the lab begins k weeks after it
FIVE_MINUTES = pd.Timedelta(minutes=5)


@dataclass(frozen=True)
class Rhythm:
    """The shape of the week: on weekdays the load ramps up from `ramp_up` over `ramp` to a peak `peak` times the
    night's, and down from `ramp_down`; weekends carry `weekend` of a weekday's peak rise; the nightly batch raises
    the load of the statements it touches by `batch` from `batch_hours[0]` to `batch_hours[1]` (sharp edges, hours
    UTC). `day_spread`: each day's peak differs from the others by this much (relative, normal). A statement's
    latency rises with the load by its own sensitivity."""

    peak: float = 2.0
    ramp_up: float = 8.5
    ramp_down: float = 17.5
    ramp: float = 1.0
    weekend: float = 0.2
    batch: float = 1.5
    batch_hours: tuple[float, float] = (2.0, 3.0)
    day_spread: float = 0.1

    def load(self, at: pd.DatetimeIndex, day_peak: np.ndarray) -> np.ndarray:
        """The load (1 at night) at each time, each day's peak rise scaled by `day_peak` (by day since MONDAY)."""
        hours = (at.hour + at.minute / 60 + at.second / 3600).to_numpy(dtype=float)
        rise = np.clip((hours - self.ramp_up) / self.ramp, 0, 1) - np.clip((hours - self.ramp_down) / self.ramp, 0, 1)
        weekday = at.day_of_week.to_numpy() < 5
        day = ((at - MONDAY) // pd.Timedelta(days=1)).to_numpy()
        return 1 + (self.peak - 1) * rise * np.where(weekday, 1.0, self.weekend) * day_peak[day]

    def batch_on(self, at: pd.DatetimeIndex) -> np.ndarray:
        """Whether the nightly batch runs at each time."""
        hours = (at.hour + at.minute / 60 + at.second / 3600).to_numpy(dtype=float)
        return (hours >= self.batch_hours[0]) & (hours < self.batch_hours[1])


def weekly_counters(
    statements: int,
    weeks: int,
    every: pd.Timedelta = FIVE_MINUTES,
    seed: int = 0,
    rhythm: Rhythm | None = None,
    steps: dict[int, tuple[pd.Timestamp, float]] | None = None,
    first: pd.Timestamp = MONDAY,
) -> pd.DataFrame:
    """Cumulative counters (queryid, captured_at, calls, total_exec_time) of `statements` statements (queryids 1 …)
    scraped every `every` for `weeks` weeks from `first`. Statement q has its own base mean (log-normal about 2 ms),
    calls per interval (20 to 400 at night, rising with the load), per-call spread, sensitivity to the load (0.2 to
    1.2: its latency × 1 + s·(load − 1)), a slow AR(1) wander of 3% and, for one in three, the nightly batch.
    `steps`: queryid → (from, factor), that statement's latency × factor from then on."""
    rhythm = rhythm or Rhythm()
    rng = np.random.default_rng(seed)
    ends = pd.date_range(first, first + pd.Timedelta(weeks=weeks), freq=every, inclusive="both")
    day_peak = np.clip(rng.normal(1.0, rhythm.day_spread, weeks * 7 + 1), 0.5, 1.5)
    load = rhythm.load(ends[1:], day_peak)
    batch = rhythm.batch_on(ends[1:])
    n = len(ends) - 1
    frames = []
    for queryid in range(1, statements + 1):
        base = 2.0 * rng.lognormal(0, 0.8)
        calls_night = rng.uniform(20, 400)
        cv = rng.uniform(0.3, 1.5)  # per call
        sensitivity = rng.uniform(0.2, 1.2)
        level = base * (1 + sensitivity * (load - 1))
        if queryid % 3 == 0:
            level = level * np.where(batch, rhythm.batch, 1.0)
        wander = lfilter([1.0], [1.0, -0.9], rng.normal(0, 0.03 * np.sqrt(1 - 0.9**2), n))
        level = level * np.exp(wander)
        if steps and queryid in steps:
            at, factor = steps[queryid]
            level = level * np.where(ends[1:] > at, factor, 1.0)
        calls = rng.poisson(calls_night * load * every / pd.Timedelta(minutes=5)).astype(np.int64) + 1
        means = level * np.exp(rng.normal(0, cv / np.sqrt(calls)) - cv**2 / (2 * calls))
        frames.append(
            pd.DataFrame(
                {
                    "queryid": queryid,
                    "captured_at": ends,
                    "calls": np.concatenate([[0], np.cumsum(calls)]),
                    "total_exec_time": np.concatenate([[0.0], np.cumsum(calls * means)]),
                }
            )
        )
    return pd.concat(frames, ignore_index=True)
