"""Weekly rhythms: each statement's usual level at each hour of the week, and a window's samples set against it.

A statement's latency often follows the week: slower at the Monday-morning peak than on Sunday night, slower while
the nightly batch runs. A check that compares one hour with the hour before takes each rise of that rhythm for a
regression. So the periodic check compares like with like: each interval sample is divided by its statement's
usual level at that hour of the week, and the engine decides on what is left.

- **Hourly sums.** Each ended day, every statement's calls and time per UTC hour are stored (`hourly_sums`, an
  interval counted in the hour its end falls in, as the window's sides count it).
- **The usual level.** For the hours a window covers, the same hours 1, 2, … `max_weeks` weeks earlier are read. In
  each earlier week the statement's mean per call in those hours, on a log scale, is centred on that week's own
  average over them (a week slower throughout, by an old regression or more data, shifts nothing); a week with too
  few calls in any of the hours is left out. The level of an hour is the median of its centred log means across the
  weeks left, so one unusual week does not make the rhythm. With fewer than `min_weeks` weeks, a statement has no
  level and is decided as before (the fallback while the history is short).
- **Set against it.** A sample is divided by level(t) / L, t its middle and L the call-weighted level of the
  statement's samples before the split. level(t) runs log-linearly from the middle of one hour to the middle of the
  next (a morning ramp is a ramp, not a staircase whose treads the engine would take for drift and steps: in the
  rhythm lab the staircase found half the Monday steps the ramp found, with no fewer false detections), and before
  the first hour's middle and after the last one's it is that hour's. The before side keeps its scale (its mean
  moves only by the rhythm within it) and the after side is what it would be at the before side's usual level.
  `expected_factor` is the rise the rhythm alone explains, the after side's call-weighted level over the before
  side's: a statement's raw means moved by change_factor × expected_factor. The per-call spread scales with the
  mean (each call divided alike).

Only the hours' ratios within a window matter to a decision, so the levels carry no absolute scale. UTC hours: a
rhythm that follows local time shifts by an hour for a week around a daylight-saving change.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from radar_pipeline.engine.samples import WindowSamples, window_samples

HOUR_NS = 3_600_000_000_000
WEEK_NS = 7 * 24 * HOUR_NS
MIN_WEEKS = 2  # earlier weeks a statement's rhythm needs
MAX_WEEKS = 4  # the most earlier weeks read: older rhythms are stale
MIN_CALLS = 20  # calls an hour of an earlier week needs for its mean to count
LONE_GAP_NS = 60 * 10**9  # the interval a statement's only sample in a window is taken to span: a scrape's default
HOURLY = ["query_key", "hour", "calls", "time_ms"]
# A span's figures per statement and earlier week (usual_level's input): the week's calls and time, the span's within
# it, and how many of the span's hours had MIN_CALLS.
SPAN_WEEKS = ["query_key", "week", "calls", "time_ms", "span_calls", "span_time_ms", "span_hours"]


@dataclass(frozen=True)
class Levels:
    """Statements' usual levels over consecutive UTC hours: level[i, j] is statement keys[i]'s in the hour beginning
    at first + j hours (ns since the epoch); weeks[i] how many earlier weeks it rests on. Every level of a row is
    finite and positive."""

    keys: np.ndarray
    first: int
    level: np.ndarray
    weeks: np.ndarray

    @classmethod
    def none(cls) -> Levels:
        """No statement has a level."""
        return cls(np.array([], dtype=object), 0, np.zeros((0, 0)), np.zeros(0, dtype=np.int64))

    def __len__(self) -> int:
        return len(self.keys)


def hour_of(end_ns: np.ndarray) -> np.ndarray:
    """The start (ns) of the UTC hour an interval ending at `end_ns` is counted in: the hour holding its last
    instant, so an interval ending on the hour belongs to the hour before, as the sides of a split on the hour."""
    return ((np.asarray(end_ns, dtype=np.int64) - 1) // HOUR_NS) * HOUR_NS


def hourly_sums(counters: pd.DataFrame, lo: pd.Timestamp, hi: pd.Timestamp) -> pd.DataFrame:
    """Each statement's calls and time (ms) per UTC hour over the intervals ending in (lo, hi], from cumulative
    counters as analyse takes them (resets discarded, keys sharing a fingerprint summed): HOURLY columns, `hour`
    the hour's start (UTC), one row per statement and hour with calls."""
    samples = window_samples(counters, pd.Timestamp(lo).value, pd.Timestamp(hi).value)
    if not len(samples.end):
        return pd.DataFrame({"query_key": [], "hour": pd.to_datetime([], utc=True), "calls": [], "time_ms": []})
    frame = pd.DataFrame(
        {
            "query_key": samples.keys[samples.group],
            "hour": hour_of(samples.end),
            "calls": samples.calls.astype(float),
            "time_ms": samples.time.astype(float),
        }
    )
    out = frame.groupby(["query_key", "hour"], as_index=False, sort=True)[["calls", "time_ms"]].sum()
    out["hour"] = pd.to_datetime(out["hour"], utc=True)
    return out


def window_hours(lo: pd.Timestamp, hi: pd.Timestamp) -> pd.DatetimeIndex:
    """The UTC hours intervals ending in (lo, hi] are counted in (hour_of)."""
    first, last = hour_of(np.array([pd.Timestamp(lo).value + 1, pd.Timestamp(hi).value]))
    return pd.to_datetime(np.arange(first, last + 1, HOUR_NS), utc=True)


def earlier_hours(lo: pd.Timestamp, hi: pd.Timestamp, max_weeks: int = MAX_WEEKS) -> pd.DatetimeIndex:
    """The hours whose sums the levels of a window (lo, hi] are made from: its hours 1 … max_weeks weeks earlier."""
    hours = window_hours(lo, hi).asi8
    return pd.to_datetime(np.concatenate([hours - k * WEEK_NS for k in range(1, max_weeks + 1)]), utc=True)


def weekly_levels(
    hourly: pd.DataFrame,
    lo: pd.Timestamp,
    hi: pd.Timestamp,
    min_weeks: int = MIN_WEEKS,
    max_weeks: int = MAX_WEEKS,
    min_calls: float = MIN_CALLS,
) -> Levels:
    """The usual level of each statement in each hour of the window (lo, hi] (the module docstring), from `hourly`
    (HOURLY columns: the statements' sums in earlier hours; rows of other hours are ignored). Statements with fewer
    than `min_weeks` usable weeks are left out."""
    if min_weeks < 1 or max_weeks < min_weeks:
        raise ValueError(f"weekly levels need 1 ≤ min_weeks ≤ max_weeks, not {min_weeks} and {max_weeks}")
    hours = window_hours(lo, hi).asi8
    if hourly.empty:
        return Levels.none()
    at = pd.to_datetime(hourly["hour"], utc=True).dt.as_unit("ns").array.asi8
    behind = hours[0] - at
    week = -(-behind // WEEK_NS)  # the earlier week holding the row's hour: 1 for the week just before
    column = (at + week * WEEK_NS - hours[0]) // HOUR_NS
    use = (
        (behind > 0)
        & (week <= max_weeks)
        & ((at - hours[0]) % HOUR_NS == 0)
        & (column < len(hours))
        & (hourly["calls"].to_numpy(dtype=float) >= min_calls)
        & (hourly["time_ms"].to_numpy(dtype=float) > 0)
    )
    if not use.any():
        return Levels.none()
    rows = hourly.loc[use, ["query_key"]].assign(week=week[use], column=column[use])
    rows["log_mean"] = np.log(
        hourly.loc[use, "time_ms"].to_numpy(dtype=float) / hourly.loc[use, "calls"].to_numpy(dtype=float)
    )
    grid = rows.pivot_table(index=["query_key", "week"], columns="column", values="log_mean", aggfunc="first")
    grid = grid.reindex(columns=range(len(hours))).dropna()  # a week lacking any of the hours is left out
    if grid.empty:
        return Levels.none()
    centred = grid.sub(grid.mean(axis=1), axis=0)
    by_key = centred.groupby(level="query_key", sort=True)
    weeks = by_key.size()
    kept = weeks.index[weeks >= min_weeks]
    if not len(kept):
        return Levels.none()
    level = np.exp(by_key.median().loc[kept].to_numpy(dtype=float))
    return Levels(np.asarray(kept, dtype=object), int(hours[0]), level, weeks.loc[kept].to_numpy(dtype=np.int64))


def usual_level(weeks: pd.DataFrame, hours: int, min_weeks: int = MIN_WEEKS) -> pd.Series:
    """Each statement's usual level over a span of `hours` hours relative to its whole week (the history bands'
    like-for-like): from `weeks` (SPAN_WEEKS columns, one row per statement and earlier week: the 168 hours centred
    on the span's hours that week), exp of the median over its weeks whose every span hour had enough calls of
    log(span mean / week mean). Indexed by query_key; statements with fewer than `min_weeks` such weeks are left
    out."""
    whole = weeks[(weeks["span_hours"] >= hours) & (weeks["span_time_ms"] > 0) & (weeks["time_ms"] > 0)]
    ratio = np.log(
        (whole["span_time_ms"] / whole["span_calls"]).to_numpy(dtype=float)
        / (whole["time_ms"] / whole["calls"]).to_numpy(dtype=float)
    )
    by_key = pd.Series(ratio, index=whole["query_key"].to_numpy()).groupby(level=0)
    counted = by_key.size()
    return np.exp(by_key.median()[counted >= min_weeks])


def set_to_levels(samples: WindowSamples, levels: Levels, split: int) -> tuple[WindowSamples, np.ndarray]:
    """The samples with each of a statement that has levels divided by level(its middle) / L (the module docstring),
    and per group the expected factor (NaN where the group has no levels, or no samples on one side)."""
    expected = np.full(samples.groups, np.nan)
    if not len(levels) or not len(samples.end):
        return samples, expected
    row = pd.Index(levels.keys).get_indexer(samples.keys)
    group = samples.group
    sample_row = row[group]
    has = sample_row >= 0
    if not has.any():
        return samples, expected
    level = np.ones(len(samples.end))
    level[has] = _interpolated(levels, sample_row[has], _midpoints(samples)[has])
    before = samples.end <= split
    calls = samples.calls.astype(float)
    n = samples.groups
    calls_before = np.bincount(group, calls * before, n)
    calls_after = np.bincount(group, calls * ~before, n)
    level_before = _ratio(np.bincount(group, calls * level * before, n), calls_before, np.ones(n))
    level_after = _ratio(np.bincount(group, calls * level * ~before, n), calls_after, np.full(n, np.nan))
    with_levels = row >= 0
    expected[with_levels] = level_after[with_levels] / level_before[with_levels]
    scale = level / level_before[group]
    adjusted = replace(
        samples,
        time=samples.time / scale,
        sumsq=None if samples.sumsq is None else samples.sumsq / scale**2,
    )
    return adjusted, expected


def _interpolated(levels: Levels, rows: np.ndarray, at: np.ndarray) -> np.ndarray:
    """The levels of statements `rows` at times `at` (ns): log-linear between the middles of the hours, the first
    and last hour's level beyond their middles."""
    width = levels.level.shape[1]
    x = np.clip((at - levels.first) / HOUR_NS - 0.5, 0, width - 1)
    left = np.minimum(np.floor(x).astype(np.int64), max(width - 2, 0))
    right = np.minimum(left + 1, width - 1)
    share = x - left
    logs = np.log(levels.level)
    return np.exp(logs[rows, left] * (1 - share) + logs[rows, right] * share)


def _midpoints(samples: WindowSamples) -> np.ndarray:
    """Each sample's middle (ns): half-way from its group's sample before; a group's first, as far as its next is
    from it (a group's only sample, LONE_GAP_NS)."""
    end = samples.end.astype(np.int64)
    gap = np.empty_like(end)
    gap[1:] = end[1:] - end[:-1]
    sizes = np.diff(samples.offsets)
    firsts = samples.offsets[:-1][sizes > 0]
    alone = sizes[sizes > 0] == 1
    seconds = np.where(alone, firsts, firsts + 1)
    gap[firsts] = np.where(alone, LONE_GAP_NS, end[seconds] - end[firsts])
    return end - gap // 2


def _ratio(numerator: np.ndarray, denominator: np.ndarray, empty: np.ndarray) -> np.ndarray:
    """numerator / denominator, `empty` where the denominator is 0."""
    out = empty.astype(float).copy()
    np.divide(numerator, denominator, out=out, where=denominator > 0)
    return out
