"""The decision: did this deploy make each query slower? Seven steps, each of which can stop a query.

1. interval means from the counters (`samples`);
2. floors on both sides of the deploy: min_samples intervals and min_calls calls, else `insufficient_data`;
3. pre-filter: the call-weighted window means ΣΔT/ΣΔC must have risen by at least θ, else `no_regression`;
4. E-divisive means locates the change in the window's series (`edivisive`); none with Q > 0 → `no_change_point`;
5. tolerance: the located change must lie within max(floor, fraction × W) of the deploy, else `outside_tolerance` —
   checked before significance, so a very significant shift that began well before the deploy is never blamed on it;
6. Welch's t-test on the two segments the split defines (`welch`); the later segment must be the slower one;
7. `detected` when p ≤ α; confidence = 1 − p ranks detections and is not the probability that the change is real.

Every step runs for all queries at once; the expensive ones (4 and 6) only for the queries that passed the cheap ones.
"""

from __future__ import annotations

from datetime import datetime

import numpy as np
import pandas as pd

from radar_pipeline.engine.causes import BLOCKS, ROWS, explain
from radar_pipeline.engine.edivisive import best_split
from radar_pipeline.engine.samples import WindowSamples, window_samples
from radar_pipeline.engine.settings import EngineSettings
from radar_pipeline.engine.vocabulary import DETECTED, INSUFFICIENT_DATA, NO_REGRESSION
from radar_pipeline.engine.welch import welch_split

COLUMNS = [
    "query_key",
    "verdict",
    "reason",
    "change_at",
    "mean_before_ms",
    "mean_after_ms",
    "change_factor",
    "t_stat",
    "dof",
    "p_value",
    "confidence",
    "n_before",
    "n_after",
    "calls_before",
    "calls_after",
    "segment_mean_before_ms",
    "segment_mean_after_ms",
    "segment_n_before",
    "segment_n_after",
    "q_stat",
    "rows_per_call_before",
    "rows_per_call_after",
    "blks_read_per_call_before",
    "blks_read_per_call_after",
    "cause",
    "merged_keys",
]
# Rows of padded series per block in steps 4 and 6, so memory stays bounded whatever the number of queries.
BLOCK_CELLS = 1 << 21


def analyse(
    counters: pd.DataFrame, deploy_at: datetime | pd.Timestamp, settings: EngineSettings | None = None
) -> pd.DataFrame:
    """Decide, for every query in `counters`, whether the deploy at `deploy_at` made it slower.

    counters: cumulative snapshots with columns query_key, captured_at (tz-aware), calls, total_exec_time (ms) and
    optionally stats_since, fingerprint, and the counters rows and shared_blks_read (which give a detection its
    cause); rows may be unsorted, missing for some scrapes and contain resets.
    Returns one row per query (see COLUMNS): mean_before_ms / mean_after_ms / change_factor are the call-weighted
    window means either side of the deploy; change_at is where the located change begins (the end of the last
    interval before the split); t_stat, dof, p_value and the segment_* columns describe the located segments;
    cause and the per-call rows and blocks read of both segments explain detections (see `causes`).
    """
    settings = settings or EngineSettings()
    deploy = _utc_ns(deploy_at)
    width = int(settings.window.total_seconds() * 1e9)
    extra = tuple(name for name in (ROWS, BLOCKS) if name in counters.columns)
    samples = window_samples(counters, deploy - width, deploy + width, extra)
    out = _empty_result(samples)
    if samples.groups == 0:
        return out

    group = samples.group
    after = samples.end > deploy
    g = samples.groups
    n_before = np.bincount(group[~after], minlength=g)
    n_after = np.bincount(group[after], minlength=g)
    calls_before = np.bincount(group[~after], weights=samples.calls[~after], minlength=g)
    calls_after = np.bincount(group[after], weights=samples.calls[after], minlength=g)
    time_before = np.bincount(group[~after], weights=samples.time[~after], minlength=g)
    time_after = np.bincount(group[after], weights=samples.time[after], minlength=g)
    with np.errstate(divide="ignore", invalid="ignore"):
        mean_before = time_before / calls_before
        mean_after = time_after / calls_after
        factor = mean_after / mean_before
    out["n_before"], out["n_after"] = n_before, n_after
    out["calls_before"], out["calls_after"] = calls_before.astype(np.int64), calls_after.astype(np.int64)
    out["mean_before_ms"], out["mean_after_ms"] = mean_before, mean_after
    out["change_factor"] = factor

    verdict = np.full(g, NO_REGRESSION, dtype=object)
    reason = np.full(g, "", dtype=object)

    few_samples = (n_before < settings.min_samples) | (n_after < settings.min_samples)
    few_calls = ~few_samples & ((calls_before < settings.min_calls) | (calls_after < settings.min_calls))
    verdict[few_samples | few_calls] = INSUFFICIENT_DATA
    reason[few_samples] = "floor_samples"
    reason[few_calls] = "floor_calls"
    undecided = ~(few_samples | few_calls)

    # A window mean of zero before (and above zero after) is an infinite rise, which passes; 0 → 0 does not.
    rose = np.where(mean_before > 0, factor - 1 >= settings.threshold, mean_after > mean_before)
    small = undecided & ~rose
    reason[small] = "below_threshold"
    candidates = np.flatnonzero(undecided & rose)

    change_at = np.full(g, np.iinfo(np.int64).min, dtype=np.int64)
    columns = {name: np.full(g, np.nan) for name in ("t_stat", "dof", "p_value", "q_stat")}
    seg = {name: np.full(g, np.nan) for name in ("segment_mean_before_ms", "segment_mean_after_ms")}
    seg_n = {name: np.zeros(g, dtype=np.int64) for name in ("segment_n_before", "segment_n_after")}
    tolerance = int(settings.tolerance.total_seconds() * 1e9)

    means = samples.mean
    for block in _blocks(samples, candidates):
        x, ends, n = _padded(samples, means, block)
        k, q = best_split(x, n)
        found = k > 0
        columns["q_stat"][block[found]] = q[found]
        reason[block[~found]] = "no_change_point"
        at = ends[np.arange(len(block)), np.maximum(k - 1, 0)]
        change_at[block[found]] = at[found]
        near = found & (np.abs(at - deploy) <= tolerance)
        reason[block[found & ~near]] = "outside_tolerance"
        if not near.any():
            continue
        tested = block[near]
        res = welch_split(x[near], n[near], k[near])
        columns["t_stat"][tested], columns["dof"][tested], columns["p_value"][tested] = res.t, res.dof, res.p
        seg["segment_mean_before_ms"][tested], seg["segment_mean_after_ms"][tested] = res.mean_a, res.mean_b
        seg_n["segment_n_before"][tested], seg_n["segment_n_after"][tested] = res.n_a, res.n_b
        significant = (res.t > 0) & (res.p <= settings.alpha)
        verdict[tested[significant]] = DETECTED
        reason[tested[significant]] = "significant"
        reason[tested[~significant]] = "not_significant"

    out["verdict"], out["reason"] = verdict, reason
    out["change_at"] = pd.to_datetime(
        np.where(change_at == np.iinfo(np.int64).min, np.datetime64("NaT"), change_at.view("datetime64[ns]")), utc=True
    )
    for name, values in {**columns, **seg, **seg_n}.items():
        out[name] = values
    out["confidence"] = 1.0 - out["p_value"]
    for name, values in explain(samples, out, settings).items():
        out[name] = values
    return out


def _empty_result(samples: WindowSamples) -> pd.DataFrame:
    out = pd.DataFrame({"query_key": samples.keys, "merged_keys": samples.merged}, columns=["query_key", "merged_keys"])
    for name in COLUMNS:
        if name not in out:
            out[name] = pd.Series(dtype="float64")
    return out[COLUMNS]


def _utc_ns(value: datetime | pd.Timestamp) -> int:
    stamp = pd.Timestamp(value)
    if stamp.tzinfo is None:
        raise ValueError(f"deploy_at must be time-zone-aware, not {value!r}")
    return int(stamp.tz_convert("UTC").as_unit("ns").value)


def _blocks(samples: WindowSamples, candidates: np.ndarray) -> list[np.ndarray]:
    """Candidates sorted by series length, cut into blocks whose padded matrices hold at most BLOCK_CELLS values."""
    if not len(candidates):
        return []
    lengths = np.diff(samples.offsets)[candidates]
    order = candidates[np.argsort(lengths, kind="stable")]
    rows = max(1, BLOCK_CELLS // max(1, int(lengths.max())))
    return [order[i : i + rows] for i in range(0, len(order), rows)]


def _padded(samples: WindowSamples, means: np.ndarray, block: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The block's series, left-aligned in [rows, longest] matrices of interval means and end times."""
    starts = samples.offsets[block]
    n = samples.offsets[block + 1] - starts
    width = int(n.max())
    col = np.arange(width)
    index = starts[:, None] + col[None, :]
    inside = col[None, :] < n[:, None]
    index = np.where(inside, index, 0)
    x = np.where(inside, means[index], 0.0)
    ends = np.where(inside, samples.end[index], 0)
    return x, ends, n
