"""From cumulative counters to interval means, one series per query, for a window around a deploy.

pg_stat_statements reports two monotone counters per statement, calls C and total execution time T. Their ratio is a
mean over the statement's whole history and moves only by the share of calls made since a change, so the engine
analyses the mean of each interval between consecutive snapshots instead: x = ΔT / ΔC.

- An interval whose ΔC or ΔT is negative, or across which stats_since changed, spans a reset: it is discarded, never
  clamped, because its calls belong to no window.
- An interval with ΔC = 0 had no calls and gives no sample. A missing snapshot simply makes an interval longer.
- A sample is placed at the end of its interval (the snapshot that closed it). It belongs to the "before" side when it
  ends at or before the deploy and to the "after" side when it ends after it; the analysis window holds the samples
  ending in (deploy − W, deploy + W]. The interval that straddles the deploy therefore counts as "after".
- When the counters carry a fingerprint, query keys that share it are one query (a queryid rotated by a dropped and
  recreated object, say): their samples form one series, samples closed by the same snapshot are summed (ΔT and ΔC,
  so their mean stays call-weighted), and the query is reported under the key that most recently received calls.
- When the counters carry stddev_exec_time, each sample also carries its calls' own sum of squared deviations about
  the interval mean (`variance.interval_sum_of_squares`; NaN where it cannot be recovered), so inference can use the
  per-call variance; merged samples combine theirs with the parallel-variance formula.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from radar_pipeline.engine.edivisive import WORKERS
from radar_pipeline.engine.variance import interval_sum_of_squares

REQUIRED = ("query_key", "captured_at", "calls", "total_exec_time")
STDDEV = "stddev_exec_time"
# Unordered rows are placed in a grid of keys × scrape times when it holds at most this many cells per row.
GRID_FILL = 4
PARALLEL_ROWS = 1 << 18  # the fewest rows whose columns are copied on several threads


@dataclass(frozen=True)
class WindowSamples:
    """The window's interval samples of every query, grouped: group g owns samples offsets[g]:offsets[g + 1].

    keys: the key each query is reported under; merged: the other keys folded into it (empty tuple when none).
    Samples are in time order within a group: end (ns since the epoch, UTC), calls (ΔC), time (ΔT, ms) and the
    deltas of any further counters asked for.
    """

    keys: np.ndarray
    merged: list[tuple]
    offsets: np.ndarray
    end: np.ndarray
    calls: np.ndarray
    time: np.ndarray
    extra: dict[str, np.ndarray] = field(default_factory=dict)  # deltas of further counters, NaN where unknown
    sumsq: np.ndarray | None = None  # per sample Σ (x − mean)² over its calls (ms²), NaN where unknown; None: no stddev

    @property
    def groups(self) -> int:
        """How many queries there are (after merging keys that share a fingerprint)."""
        return len(self.keys)

    @property
    def group(self) -> np.ndarray:
        """The group of every sample."""
        return np.repeat(np.arange(self.groups), np.diff(self.offsets))

    @property
    def mean(self) -> np.ndarray:
        """The interval mean (ms per call) of every sample."""
        return self.time / self.calls

    def count_until(self, at: np.ndarray | int) -> np.ndarray:
        """Per group, how many of its samples end at or before `at` (one time, or one per group): a group's samples
        are in time order, so they are its first ones, found by a bisection of every group at once."""
        lo, hi = self.offsets[:-1].copy(), self.offsets[1:].copy()
        at = np.broadcast_to(at, lo.shape)
        while True:
            open_ = lo < hi
            if not open_.any():
                return lo - self.offsets[:-1]
            mid = (lo + hi) // 2
            ends = self.end[np.where(open_, mid, 0)]
            later = open_ & (ends > at)
            lo = np.where(open_ & ~later, mid + 1, lo)
            hi = np.where(later, mid, hi)


def segment_sums(values: np.ndarray, starts: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Σ values[starts[i, j] : starts[i, j] + sizes[i, j]] for every i, j, 0 for an empty segment; the segments in
    row-major order must not overlap and each lie after the one before it (gaps allowed; an empty one may begin at or
    past the end of values). One pass of np.add.reduceat, far cheaper than a bincount over a label per value (it sums
    each segment pairwise: the last bits may differ)."""
    shape = starts.shape
    starts, sizes = starts.ravel(), sizes.ravel()
    dtype = np.int64 if values.dtype == bool else None
    if not len(starts):
        return np.zeros(shape, dtype=dtype or values.dtype)
    bounds = np.stack([starts, starts + sizes], axis=1).ravel()
    size = len(values)
    if bounds[-1] == size and bounds[-2] < size:  # the last segment ends with the values: reduceat's own end
        got = np.add.reduceat(values, bounds[:-1], dtype=dtype)
    else:  # reduceat takes indices below the length: zeros up to the last bound and one more to end on
        padded = np.append(values, np.zeros(max(int(bounds[-1]) - size, 0) + 1, dtype=values.dtype))
        got = np.add.reduceat(padded, bounds, dtype=dtype)
    return np.where(sizes > 0, got[0::2], 0).reshape(shape)


def window_samples(counters: pd.DataFrame, lo_ns: int, hi_ns: int, extra: tuple[str, ...] = ()) -> WindowSamples:
    """Interval samples ending in (lo, hi] for every query of `counters` (see the module docstring for the rules).

    `extra` names further cumulative columns (rows, shared_blks_read, ...) whose per-interval deltas travel with the
    samples. `counters` is never modified. Every query key appears in the result, with no samples if none fall in the
    window.
    """
    _check_columns(counters, extra)
    codes, uniques = _factorize_keys(counters["query_key"])
    t = _utc_ns(counters["captured_at"], "counters.captured_at")
    columns = {"calls": "calls", "time": "total_exec_time", **{name: name for name in extra}}
    values = {key: _numeric(counters[col], f"counters.{col}", allow_nan=key in extra) for key, col in columns.items()}
    since = (
        _utc_ns(counters["stats_since"], "counters.stats_since", allow_null=True) if "stats_since" in counters else None
    )
    if STDDEV in counters:
        values[STDDEV] = _numeric(counters[STDDEV], f"counters.{STDDEV}", allow_nan=True)

    if since is not None and len(since) and since.min() == since.max():
        since = None  # one stats_since throughout: no reset to find there, and no column to reorder
    order, codes, t = _key_time_order(codes, t)
    if order is not None:
        values = _each(lambda v: v[order], values)
        since = since[order] if since is not None else None

    same = codes[1:] == codes[:-1]
    stddev = values.pop(STDDEV, None)
    deltas = {key: v[1:] - v[:-1] for key, v in values.items()}
    reset = (deltas["calls"] < 0) | (deltas["time"] < 0)
    if since is not None:
        reset |= since[1:] != since[:-1]
    end = t[1:]
    sample = same & ~reset & (deltas["calls"] > 0) & (end > lo_ns) & (end <= hi_ns)
    s_code, s_end = codes[1:][sample], end[sample]
    s_values = _each(lambda d: d[sample], deltas)
    for key in extra:  # a further counter that went down alone is unknown for that interval, not negative
        s_values[key] = np.where(s_values[key] < 0, np.nan, s_values[key])
    if stddev is not None:
        c, tt = values["calls"], values["time"]
        if 2 * len(s_end) >= len(sample):  # most rows close a sample: every pair of neighbouring rows, then those
            s_values[STDDEV] = interval_sum_of_squares(
                c[:-1], tt[:-1], stddev[:-1], c[1:], tt[1:], stddev[1:], where=sample
            )
        else:
            first, second = np.flatnonzero(sample), np.flatnonzero(sample) + 1
            s_values[STDDEV] = interval_sum_of_squares(
                c[first], tt[first], stddev[first], c[second], tt[second], stddev[second]
            )

    group_of_key = _fingerprint_groups(counters, codes, order, None, len(uniques))
    groups = int(group_of_key.max()) + 1 if len(group_of_key) else 0
    folded = groups < len(uniques)
    # Each key its own group, numbered as the keys (the usual case): the samples' groups are their keys' codes.
    alone = not folded and bool((group_of_key == np.arange(len(group_of_key))).all())
    s_group = s_code if alone else group_of_key[s_code]
    if folded:
        by_group = np.lexsort((s_end, s_group))
        s_group, s_end = s_group[by_group], s_end[by_group]
        s_values = {key: v[by_group] for key, v in s_values.items()}
        if STDDEV in s_values:  # Σx² about zero adds up across keys; Σ(x − mean)² does not
            s_values[STDDEV] = s_values[STDDEV] + s_values["time"] ** 2 / s_values["calls"]
        s_group, s_end, s_values = _sum_same_snapshot(s_group, s_end, s_values)
        if STDDEV in s_values:
            s_values[STDDEV] = np.maximum(s_values[STDDEV] - s_values["time"] ** 2 / s_values["calls"], 0.0)
    if alone or folded:  # the samples are in order of group: where each group's begin
        offsets = np.searchsorted(s_group, np.arange(groups + 1)).astype(np.int64)
    else:
        offsets = np.zeros(groups + 1, dtype=np.int64)
        np.cumsum(np.bincount(s_group, minlength=groups), out=offsets[1:])

    if alone:  # a group's one key is the key it is reported under
        reporter = np.arange(groups)
    else:
        reporter = _reporting_keys(codes, t, s_code, end[sample], group_of_key, groups)
    keys = np.asarray(uniques, dtype=object)[reporter]
    merged: list[tuple] = [()] * groups
    if folded:
        members: dict[int, list] = {}
        for code, g in enumerate(group_of_key):
            members.setdefault(int(g), []).append(code)
        for g, codes_in_group in members.items():
            if len(codes_in_group) > 1:
                merged[g] = tuple(uniques[c] for c in codes_in_group if c != reporter[g])
    return WindowSamples(
        keys=keys,
        merged=merged,
        offsets=offsets,
        end=s_end,
        calls=s_values.pop("calls"),
        time=s_values.pop("time"),
        sumsq=s_values.pop(STDDEV, None),
        extra=s_values,
    )


def _each(pick: Callable[[np.ndarray], np.ndarray], columns: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """`pick` (a gather or a selection of rows) applied to every column; long columns on the machine's cores, a
    column a thread (numpy releases the interpreter's lock while it copies)."""
    if len(columns) < 2 or WORKERS < 2 or min(len(v) for v in columns.values()) < PARALLEL_ROWS:
        return {key: pick(v) for key, v in columns.items()}
    with ThreadPoolExecutor(max_workers=min(WORKERS, len(columns))) as pool:
        return dict(zip(columns, pool.map(pick, columns.values()), strict=True))


def _check_columns(counters: pd.DataFrame, extra: tuple[str, ...] = ()) -> None:
    if not isinstance(counters, pd.DataFrame):
        raise TypeError(f"counters must be a pandas DataFrame, not {type(counters).__name__}")
    missing = [c for c in (*REQUIRED, *extra) if c not in counters.columns]
    if missing:
        raise ValueError(f"counters is missing column(s) {', '.join(missing)} (needs {', '.join(REQUIRED)})")


def _factorize_keys(keys: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """Integer codes for the query keys. Keys in ascending order (as the warehouse reads them) are coded from their
    runs in one vectorised pass; any other order goes through a hash table."""
    if keys.isna().any():
        raise ValueError("counters.query_key has missing values")
    if len(keys) > 1 and keys.is_monotonic_increasing:
        values = keys.to_numpy()
        starts = np.flatnonzero(np.append(True, values[1:] != values[:-1]))
        codes = np.zeros(len(values), dtype=np.int64)
        codes[starts[1:]] = 1
        return np.cumsum(codes), values[starts]
    codes, uniques = pd.factorize(keys, sort=False)
    return codes, np.asarray(uniques)


def _utc_ns(column: pd.Series, name: str, allow_null: bool = False) -> np.ndarray:
    """Nanoseconds since the epoch, UTC (a tz-aware column stores exactly that); nulls as the minimum int64."""
    if not isinstance(column.dtype, pd.DatetimeTZDtype):
        if allow_null and column.isna().all():
            return np.full(len(column), np.iinfo(np.int64).min, dtype=np.int64)
        raise ValueError(f"{name} must hold time-zone-aware timestamps, not {column.dtype}")
    array = column.array
    values = (array if array.unit == "ns" else array.as_unit("ns")).asi8
    if not allow_null and (values == np.iinfo(np.int64).min).any():
        raise ValueError(f"{name} has missing values")
    return values


def _numeric(column: pd.Series, name: str, allow_nan: bool = False) -> np.ndarray:
    try:
        values = column.to_numpy(dtype=np.float64, na_value=np.nan)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be numeric") from None
    if np.isfinite(values).all():  # one pass for the usual case
        return values
    if not allow_nan and np.isnan(values).any():
        raise ValueError(f"{name} has missing values")
    if np.isinf(values).any():
        raise ValueError(f"{name} has infinite values")
    return values


def _key_time_order(codes: np.ndarray, t: np.ndarray) -> tuple[np.ndarray | None, np.ndarray, np.ndarray]:
    """The rows to read, in order of query then time, one per snapshot of a query (the later row wins when one appears
    twice), with their codes and times; None for the rows to read when they are all, as they stand.

    Rows that are not ordered already (a collector's scrape by scrape, or any order at all) and that fill most of the
    grid of keys × distinct scrape times (every statement in most scrapes, as a window's rows do) are placed in that
    grid in one pass, which orders them, finds duplicates and gives each row's code and time back without a sort or a
    gather; other inputs (sparse grids, a snapshot present twice) are sorted (`_sort_order`)."""
    if len(codes) < 2 or not _sort_order_if_needed(codes, t):
        keep = _last_of_duplicates(codes, t) if len(codes) >= 2 else None
        if keep is None:
            return None, codes, t
        kept = np.flatnonzero(keep)
        return kept, codes[kept], t[kept]
    keys = int(codes.max()) + 1
    stamps, distinct = pd.factorize(t, sort=False)
    if keys * len(distinct) <= GRID_FILL * len(codes):
        rank = np.empty(len(distinct), dtype=np.int64)
        by_time = np.argsort(distinct)
        rank[by_time] = np.arange(len(distinct))
        cell = codes * len(distinct) + rank[stamps]
        grid = np.full(keys * len(distinct), -1, dtype=np.int64)
        grid[cell] = np.arange(len(codes))
        times = distinct[by_time]
        if len(grid) == len(codes) and (grid >= 0).all():  # every key in every scrape, once: the whole grid
            return grid, np.repeat(np.arange(keys), len(times)), np.tile(times, keys)
        filled = np.flatnonzero(grid >= 0)
        if len(filled) == len(codes):  # no snapshot twice: every row has a cell of its own
            code, stamp = np.divmod(filled, len(distinct))
            return grid[filled], code, times[stamp]
    order = _sort_order(codes, t)
    assert order is not None  # the rows are not in order
    codes, t = codes[order], t[order]
    keep = _last_of_duplicates(codes, t)
    if keep is None:
        return order, codes, t
    return order[keep], codes[keep], t[keep]


def _sort_order_if_needed(codes: np.ndarray, t: np.ndarray) -> bool:
    """Whether rows are not yet ordered by query, then time."""
    dc = np.diff(codes)
    return not ((dc >= 0).all() and ((dc > 0) | (np.diff(t) >= 0)).all())


def _sort_order(codes: np.ndarray, t: np.ndarray) -> np.ndarray | None:
    """None when rows are already ordered by query then time (the warehouse reads them so), else a stable order.

    Both keys are small integers in practice (query codes, and ranks of the few distinct scrape times), so two stable
    passes of numpy's radix sort for 16-bit keys (time first, then query) order 1.2 million rows several times faster
    than a comparison sort; wider keys fall back to one argsort of the combined key query · span + time.
    """
    if len(codes) < 2 or not _sort_order_if_needed(codes, t):
        return None
    narrow = np.iinfo(np.uint16).max
    if codes.max() <= narrow:
        stamps, distinct = pd.factorize(t, sort=False)
        if len(distinct) <= narrow + 1:
            rank = np.empty(len(distinct), dtype=np.uint16)
            rank[np.argsort(distinct)] = np.arange(len(distinct), dtype=np.uint16)
            by_time = np.argsort(rank[stamps], kind="stable")
            return by_time[np.argsort(codes[by_time].astype(np.uint16), kind="stable")]
    low = int(t.min())
    span = int(t.max()) - low + 1
    if int(codes.max()) < np.iinfo(np.int64).max // span:
        return np.argsort(codes.astype(np.int64) * span + (t - low), kind="stable")
    return np.lexsort((t, codes))


def _last_of_duplicates(codes: np.ndarray, t: np.ndarray) -> np.ndarray | None:
    """Rows to keep when one snapshot of a query appears twice (the later row wins), or None when none does."""
    dup = (codes[1:] == codes[:-1]) & (t[1:] == t[:-1])
    if not dup.any():
        return None
    return np.append(~dup, True)


def _fingerprint_groups(
    counters: pd.DataFrame, codes: np.ndarray, order: np.ndarray | None, keep: np.ndarray | None, keys: int
) -> np.ndarray:
    """The query group of every key code: keys sharing a fingerprint (and, where the counters carry them, dbid, userid
    and toplevel: statements of different databases, users or nesting levels are never merged) form one group;
    without a fingerprint, each key its own."""
    if "fingerprint" not in counters.columns or keys == 0:
        return np.arange(keys)
    rows = np.arange(len(counters))
    rows = rows[order] if order is not None else rows
    rows = rows[keep] if keep is not None else rows
    last_row = np.zeros(keys, dtype=np.int64)
    last_row[codes] = rows  # rows are ordered by time within a key: the last write wins
    per_key = {
        name: counters[name].iloc[last_row].to_numpy(dtype=object)
        for name in ("dbid", "userid", "toplevel", "fingerprint")
        if name in counters.columns
    }
    frame = pd.DataFrame(per_key)
    group_codes = frame.groupby(list(per_key), sort=False, dropna=False).ngroup().to_numpy(dtype=np.int64, copy=True)
    group_codes[frame["fingerprint"].isna().to_numpy()] = -1
    lone = group_codes < 0  # no fingerprint: a group of its own
    group_codes[lone] = group_codes.max(initial=-1) + 1 + np.arange(lone.sum())
    # Renumber so groups follow the first appearance of their keys (stable, deterministic output order).
    _, first = np.unique(group_codes, return_index=True)
    rank = np.empty(len(first), dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(len(first))
    return rank[group_codes]


def _sum_same_snapshot(
    group: np.ndarray, end: np.ndarray, values: dict[str, np.ndarray]
) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """Fold samples of one group closed by the same snapshot into one (input sorted by group, then end)."""
    if len(group) < 2:
        return group, end, values
    starts = np.flatnonzero(np.append(True, (group[1:] != group[:-1]) | (end[1:] != end[:-1])))
    if len(starts) == len(group):
        return group, end, values
    return group[starts], end[starts], {key: np.add.reduceat(v, starts) for key, v in values.items()}


def _reporting_keys(
    codes: np.ndarray, t: np.ndarray, s_code: np.ndarray, s_end: np.ndarray, group_of_key: np.ndarray, groups: int
) -> np.ndarray:
    """For each group, the key that most recently received calls in the window; failing that, the key seen last.

    Rows and samples are ordered by key, then time, so a key's last entry is its latest (with repeated indices,
    numpy's fancy assignment keeps the last value written).
    """
    keys = len(group_of_key)
    last_call = np.full(keys, np.iinfo(np.int64).min, dtype=np.int64)
    last_call[s_code] = s_end
    last_seen = np.full(keys, np.iinfo(np.int64).min, dtype=np.int64)
    last_seen[codes] = t
    ranking = np.lexsort((-np.arange(keys), last_seen, last_call, group_of_key))  # ties: the first-listed key
    best = np.empty(groups, dtype=np.int64)
    best[group_of_key[ranking]] = ranking  # the last of each group in this order wins
    return best


def interval_means(counters: pd.DataFrame, lo: pd.Timestamp, hi: pd.Timestamp) -> dict[object, pd.Series]:
    """Each query's interval means (ms per call) ending in (lo, hi], indexed by interval end (UTC), keyed by the
    query_key it is reported under: the series a chart of the window draws, as the engine saw it."""
    samples = window_samples(counters, int(pd.Timestamp(lo).value), int(pd.Timestamp(hi).value))
    out: dict[object, pd.Series] = {}
    for group, key in enumerate(samples.keys):
        start, stop = samples.offsets[group], samples.offsets[group + 1]
        ends = pd.to_datetime(samples.end[start:stop], utc=True)
        out[key] = pd.Series(samples.time[start:stop] / samples.calls[start:stop], index=ends)
    return out
