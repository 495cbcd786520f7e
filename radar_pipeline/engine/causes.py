"""Why a detected query got slower, where the counters can tell: computed from the same intervals, not declared.

For each detection the two segments the located change defines (samples ending at or before change_at, and after
it, inside the window) are compared on further counters, each per call (Σ Δcounter / Σ Δcalls over the segment's
samples where the counter is known): rows; shared blocks touched (hit + read) and read; planning time; temp blocks
written; parallel workers planned and launched; JIT time; WAL bytes and wal_buffers_full. A counter the server lacks
(NaN: PostgreSQL before 18 has no parallel workers or wal_buffers_full, before 15 no JIT times) is unknown, and a
cause from it never fires: each needs its counter known on both sides.

And across queries: when at least `fleet_share` of a target's decidable queries (and at least `fleet_min_queries`) are
detected at the same deploy, the shift is fleet-wide — something outside the deploy (the server, its host, a
neighbour) is suspected, and alerts should carry a lower severity.

cause, one value per detection, the first that applies (θ is settings.threshold; "rose" means by at least θ and by at
least the floor named):

- `fleet_wide`;
- `more_rows`: rows per call rose;
- `planning_time`: planning time per call rose (by min_rise_ms at least) and accounts for at least TIME_SHARE of the
  time each call gained (execution plus planning: pg_stat_statements times planning apart from execution);
- `temp_spill`: temp blocks written per call rose by at least one block (appeared, or grew): sorts or hashes spill;
- `lost_parallelism`: parallel workers launched per call fell (by θ and MIN_WORKERS), or the workers planned but not
  launched per call rose by MIN_WORKERS (max_parallel_workers exhausted);
- `jit`: JIT time per call rose (by min_rise_ms at least) and accounts for at least TIME_SHARE of the execution time
  each call gained;
- `wal_bound`: WAL bytes per call rose by at least a WAL page, or wal_buffers_full per call by MIN_WAL_BUFFERS_FULL;
- `more_buffers`: shared buffers touched (hit + read) per call rose by at least one block — a scan of a cached table;
- `more_blocks_read`: shared blocks read per call rose by at least one block;
- `unexplained`.

The time shares keep the time causes off noise: a phase whose time rose but that explains only a sliver of what the
calls gained is not the cause. Each cause's `cause_detail` says it in words, with its figures.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from radar_pipeline.engine.samples import WindowSamples, segment_sums
from radar_pipeline.engine.settings import EngineSettings
from radar_pipeline.engine.vocabulary import Cause, Tier, Verdict

# The further counters the causes read, as cumulative columns of analyse's `counters` (each optional).
ROWS, BLOCKS, HIT = "rows", "shared_blks_read", "shared_blks_hit"
PLAN_TIME, TEMP = "total_plan_time", "temp_blks_written"
TO_LAUNCH, LAUNCHED = "parallel_workers_to_launch", "parallel_workers_launched"
JIT_TIME = "jit_time"  # the JIT's time over all its phases (ms): generation, inlining, optimization, emission, deform
WAL, WAL_FULL = "wal_bytes", "wal_buffers_full"
CAUSE_COUNTERS = (ROWS, BLOCKS, HIT, PLAN_TIME, TEMP, TO_LAUNCH, LAUNCHED, JIT_TIME, WAL, WAL_FULL)

TIME_SHARE = 0.5  # a phase's added time per call must be at least this share of what each call gained
MIN_WORKERS = 0.5  # parallel workers per call: half the calls losing one worker
WAL_PAGE = 8192.0  # bytes
MIN_WAL_BUFFERS_FULL = 0.1  # per call: one call in ten found the WAL buffers full

# The per-segment figures in the result, before and after: (column prefix, the counter or measure).
FIGURES = {
    "rows_per_call": ROWS,
    "blks_read_per_call": BLOCKS,
    "buffers_per_call": "buffers",
    "plan_ms_per_call": PLAN_TIME,
    "temp_blks_per_call": TEMP,
    "workers_to_launch_per_call": TO_LAUNCH,
    "workers_launched_per_call": LAUNCHED,
    "jit_ms_per_call": JIT_TIME,
    "wal_bytes_per_call": WAL,
    "wal_buffers_full_per_call": WAL_FULL,
}
FIGURE_COLUMNS = tuple(f"{prefix}_{side}" for prefix in FIGURES for side in ("before", "after"))
WITHOUT_DETAIL = [Cause.FLEET_WIDE.value, Cause.UNEXPLAINED.value]  # causes _detail has no words for


def explained(verdicts: pd.DataFrame, threshold: float | None = None) -> np.ndarray:
    """The rows a cause is said for (issue 39): the detections, the statements marked probably slower (tier), which a
    person is asked to look at, and with `threshold` (θ) every statement left inconclusive whose window means rose
    beyond it (change_factor ≥ 1 + θ): unproven, but a cause on its row says where to look (a spill, a setting
    changed) before more evidence comes."""
    rows = (verdicts["verdict"] == Verdict.DETECTED).to_numpy()
    if "tier" in verdicts:
        rows = rows | (verdicts["tier"] == Tier.PROBABLY_SLOWER).to_numpy()
    if threshold is not None and "change_factor" in verdicts:
        rose = verdicts["change_factor"].to_numpy(np.float64) >= 1 + threshold
        rows = rows | ((verdicts["verdict"] == Verdict.INCONCLUSIVE).to_numpy() & rose)
    return rows


def explain(samples: WindowSamples, verdicts: pd.DataFrame, settings: EngineSettings) -> pd.DataFrame:
    """Per-segment per-call figures (FIGURE_COLUMNS) for every row `verdicts` asks for (a boolean column `explain`;
    without it, the detections), its cause and cause_detail (None for the other rows); each row's segments either
    side of its change_at.

    `samples` must be the samples `verdicts` was decided on (one group per verdict row, same order); a counter they do
    not carry is unknown, and with none of them only `fleet_wide` or `unexplained` remain.
    """
    return explain_groups(samples, verdicts, settings, fleet_wide(verdicts, settings))


def fleet_wide(verdicts: pd.DataFrame, settings: EngineSettings) -> bool:
    """Whether the detections among `verdicts` (every statement of the analysis) are fleet-wide: at least
    fleet_min_queries of them, and at least fleet_share of the decidable statements."""
    decidable = int((verdicts["verdict"] != Verdict.INSUFFICIENT_DATA).sum())
    n_detected = int((verdicts["verdict"] == Verdict.DETECTED).sum())
    return n_detected >= settings.fleet_min_queries and n_detected >= settings.fleet_share * decidable


def explain_groups(
    samples: WindowSamples, verdicts: pd.DataFrame, settings: EngineSettings, fleet: bool
) -> pd.DataFrame:
    """As `explain`, with whether the analysis's detections are fleet-wide (`fleet_wide` of all its verdicts) given:
    `verdicts` (verdict and change_at) may then be those of some of the analysis's statements alone, one row per
    group of `samples`, and each detection's figures and cause depend on its own group's samples only."""
    g = samples.groups
    out = pd.DataFrame(
        {
            **{name: np.full(g, np.nan) for name in FIGURE_COLUMNS},
            "cause": np.full(g, None, dtype=object),
            "cause_detail": np.full(g, None, dtype=object),
        },
        index=verdicts.index,
    )
    detected = verdicts["explain"].to_numpy(bool) if "explain" in verdicts else explained(verdicts)
    if not detected.any():
        return out
    change = verdicts["change_at"].array.as_unit("ns").asi8
    # Each group's samples before its change (those ending at or before it: its first ones) and after it.
    n_before = samples.count_until(change)
    n = np.diff(samples.offsets)
    starts = np.stack([samples.offsets[:-1], samples.offsets[:-1] + n_before], axis=1)
    sizes = np.stack([n_before, n - n_before], axis=1)
    unknown = np.full(len(samples.end), np.nan)
    series = {name: samples.extra.get(name, unknown) for name in CAUSE_COUNTERS}
    absent = series[HIT] is unknown or series[BLOCKS] is unknown
    series["buffers"] = unknown if absent else series[HIT] + series[BLOCKS]
    series["exec"] = samples.time
    per_call: dict[tuple[str, str], np.ndarray] = {}
    for name, values in series.items():
        if values is unknown:  # a counter the samples do not carry: unknown on both sides, nothing to add up
            per_call[name, "before"], per_call[name, "after"] = np.full(g, np.nan), np.full(g, np.nan)
            continue
        missing = np.isnan(values)
        weights = samples.calls
        if missing.any():  # an interval where the counter is unknown counts on neither side
            values, weights = np.where(missing, 0.0, values), np.where(missing, 0.0, weights)
        amount, calls = segment_sums(values, starts, sizes), segment_sums(weights, starts, sizes)
        for at, side in enumerate(("before", "after")):
            with np.errstate(divide="ignore", invalid="ignore"):
                per_call[name, side] = np.where(detected & (calls[:, at] > 0), amount[:, at] / calls[:, at], np.nan)
    for prefix, name in FIGURES.items():
        out[f"{prefix}_before"], out[f"{prefix}_after"] = per_call[name, "before"], per_call[name, "after"]

    b = {name: per_call[name, "before"] for name in series}
    a = {name: per_call[name, "after"] for name in series}
    rise = 1.0 + settings.threshold

    def rose(name: str, floor: float) -> np.ndarray:
        """Per call, after ≥ (1 + θ) · before and by at least `floor` (False where unknown)."""
        return (a[name] >= rise * b[name]) & (a[name] - b[name] >= floor)

    gained = np.maximum(a["exec"] - b["exec"], 0.0)  # execution ms each call gained
    added_plan = a[PLAN_TIME] - b[PLAN_TIME]
    added_jit = a[JIT_TIME] - b[JIT_TIME]
    lost_before, lost_after = b[TO_LAUNCH] - b[LAUNCHED], a[TO_LAUNCH] - a[LAUNCHED]
    conditions = {
        Cause.MORE_ROWS: (a[ROWS] >= rise * b[ROWS]) & (a[ROWS] > b[ROWS]),
        Cause.PLANNING_TIME: rose(PLAN_TIME, settings.min_rise_ms) & (added_plan >= TIME_SHARE * (gained + added_plan)),
        Cause.TEMP_SPILL: rose(TEMP, 1.0),
        Cause.LOST_PARALLELISM: ((a[LAUNCHED] * rise <= b[LAUNCHED]) & (b[LAUNCHED] - a[LAUNCHED] >= MIN_WORKERS))
        | ((lost_after >= rise * lost_before) & (lost_after - lost_before >= MIN_WORKERS)),
        Cause.JIT: rose(JIT_TIME, settings.min_rise_ms) & (added_jit >= TIME_SHARE * gained),
        Cause.WAL_BOUND: (wal_bytes := rose(WAL, WAL_PAGE)) | (wal_full := rose(WAL_FULL, MIN_WAL_BUFFERS_FULL)),
        Cause.MORE_BUFFERS: rose("buffers", 1.0),
        Cause.MORE_BLOCKS_READ: rose(BLOCKS, 1.0),
    }
    # The first cause that holds, in this order (fleet-wide first): each written over the ones after it.
    cause = np.full(g, Cause.FLEET_WIDE.value if fleet else Cause.UNEXPLAINED.value, dtype=object)
    if not fleet:
        for found, holds in reversed(conditions.items()):
            cause[holds] = found.value
    cause[~detected] = None
    out["cause"] = cause
    detail = np.full(g, None, dtype=object)
    for i in np.flatnonzero(detected & ~np.isin(cause, WITHOUT_DETAIL)):
        wal = (bool(wal_bytes[i]), bool(wal_full[i]))
        detail[i] = _detail(cause[i], {k: v[i] for k, v in b.items()}, {k: v[i] for k, v in a.items()}, wal)
    out["cause_detail"] = detail
    return out


def _detail(cause: str, b: dict[str, float], a: dict[str, float], wal: tuple[bool, bool]) -> str | None:
    """A counter cause in words, with its figures: "shared buffers touched per call ×310 (11 → 3,408)". `wal`: whether
    WAL bytes and wal_buffers_full per call rose."""
    if cause == Cause.MORE_ROWS:
        return _change("rows per call", b[ROWS], a[ROWS])
    if cause == Cause.PLANNING_TIME:
        return _change("planning time per call", b[PLAN_TIME], a[PLAN_TIME], " ms")
    if cause == Cause.TEMP_SPILL:
        return _change("temp blocks written per call", b[TEMP], a[TEMP]) + " (spilled to disk)"
    if cause == Cause.LOST_PARALLELISM:
        return (
            f"parallel workers launched per call {_num(b[LAUNCHED])} → {_num(a[LAUNCHED])} "
            f"(planned {_num(b[TO_LAUNCH])} → {_num(a[TO_LAUNCH])})"
        )
    if cause == Cause.JIT:
        gained = a["exec"] - b["exec"]
        return _change("JIT time per call", b[JIT_TIME], a[JIT_TIME], " ms") + f" of {_num(gained)} ms gained"
    if cause == Cause.WAL_BOUND:
        parts = [_change("WAL bytes per call", b[WAL], a[WAL])] if wal[0] else []
        if wal[1]:
            parts.append(_change("WAL buffers full per call", b[WAL_FULL], a[WAL_FULL]))
        return "; ".join(parts)
    if cause == Cause.MORE_BUFFERS:
        return _change("shared buffers touched per call", b["buffers"], a["buffers"])
    if cause == Cause.MORE_BLOCKS_READ:
        return _change("shared blocks read per call", b[BLOCKS], a[BLOCKS])
    return None


def _change(label: str, before: float, after: float, unit: str = "") -> str:
    """ "label ×F (before → after unit)", or "label before → after unit" from nothing."""
    if before > 0:
        return f"{label} {_factor(after / before)} ({_num(before)} → {_num(after)}{unit})"
    return f"{label} {_num(before)} → {_num(after)}{unit}"


def _num(x: float) -> str:
    """A figure as a person reads it: 3,408 · 14 · 2.5 · 0.2 · 0.0012."""
    if x == 0:
        return "0"
    if abs(x) >= 100:
        return f"{x:,.0f}"
    if abs(x) >= 10:
        return f"{x:.0f}"
    if abs(x) >= 1:
        return f"{x:.1f}".removesuffix(".0")
    return f"{x:.2g}"


def _factor(f: float) -> str:
    """A ratio to two significant figures: ×310 · ×14 · ×2.5."""
    if f >= 100:
        return f"×{round(f, 1 - int(math.floor(math.log10(f)))):,.0f}"
    if f >= 10:
        return f"×{f:.0f}"
    return f"×{f:.1f}"
