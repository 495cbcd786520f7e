"""A deliberately plain, one-query-at-a-time reading of the detection note, to check the vectorised engine against.

Nothing here is shared with radar_pipeline.engine: it recomputes every step from scratch, with explicit pair loops for
the energy statistic and scipy.stats.ttest_ind(equal_var=False) for Welch's test.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import stats

from radar_pipeline.engine import EngineSettings


def energy_q(x: np.ndarray, k: int) -> float:
    """Q(k) by explicit pair sums."""
    a, b = x[:k], x[k:]
    na, nb = len(a), len(b)
    d_ab = sum(abs(ai - bj) for ai in a for bj in b) / (na * nb)
    d_aa = sum(abs(a[i] - a[j]) for i in range(na) for j in range(i + 1, na)) / math.comb(na, 2)
    d_bb = sum(abs(b[i] - b[j]) for i in range(nb) for j in range(i + 1, nb)) / math.comb(nb, 2)
    return na * nb / (na + nb) * (2 * d_ab - d_aa - d_bb)


def best_split(x: np.ndarray) -> tuple[int, float]:
    """(k, Q) of the first admissible argmax, or (0, -inf) when none has Q > 0."""
    n = len(x)
    m = max(3, n // 10)
    best_k, best_q = 0, -math.inf
    for k in range(m, n - m + 1):
        q = energy_q(x, k)
        if q > best_q:
            best_k, best_q = k, q
    return (best_k, best_q) if best_q > 0 else (0, -math.inf)


def analyse_one(rows: pd.DataFrame, deploy: pd.Timestamp, settings: EngineSettings) -> dict:
    """The verdict for one query's counters (rows of one key, any order)."""
    rows = rows.sort_values("captured_at", kind="stable").drop_duplicates("captured_at", keep="last")
    lo, hi = deploy - settings.window, deploy + settings.window
    samples = []  # (end, calls, time)
    prev = None
    for row in rows.itertuples():
        if prev is not None:
            dc, dt = row.calls - prev.calls, row.total_exec_time - prev.total_exec_time
            since_changed = "stats_since" in rows and not (
                (pd.isna(row.stats_since) and pd.isna(prev.stats_since)) or row.stats_since == prev.stats_since
            )
            if dc > 0 and dt >= 0 and not since_changed and lo < row.captured_at <= hi:
                samples.append((row.captured_at, dc, dt))
        prev = row
    before = [s for s in samples if s[0] <= deploy]
    after = [s for s in samples if s[0] > deploy]
    out = {
        "n_before": len(before),
        "n_after": len(after),
        "calls_before": sum(s[1] for s in before),
        "calls_after": sum(s[1] for s in after),
    }
    mb = sum(s[2] for s in before) / out["calls_before"] if out["calls_before"] else math.nan
    ma = sum(s[2] for s in after) / out["calls_after"] if out["calls_after"] else math.nan
    out.update(mean_before_ms=mb, mean_after_ms=ma, change_at=pd.NaT, t_stat=math.nan, dof=math.nan, p_value=math.nan)
    if len(before) < settings.min_samples or len(after) < settings.min_samples:
        return {**out, "verdict": "insufficient_data", "reason": "floor_samples"}
    if out["calls_before"] < settings.min_calls or out["calls_after"] < settings.min_calls:
        return {**out, "verdict": "insufficient_data", "reason": "floor_calls"}
    rose = (ma / mb - 1 >= settings.threshold) if mb > 0 else ma > mb
    if not rose:
        return {**out, "verdict": "no_regression", "reason": "below_threshold"}
    x = np.array([s[2] / s[1] for s in samples])
    k, q = best_split(x)
    if k == 0:
        return {**out, "verdict": "no_regression", "reason": "no_change_point"}
    out["change_at"] = samples[k - 1][0]
    if abs(out["change_at"] - deploy) > settings.tolerance:
        return {**out, "verdict": "no_regression", "reason": "outside_tolerance"}
    res = stats.ttest_ind(x[k:], x[:k], equal_var=False)
    out.update(t_stat=res.statistic, dof=res.df, p_value=res.pvalue)
    if res.statistic > 0 and res.pvalue <= settings.alpha:
        return {**out, "verdict": "detected", "reason": "significant"}
    return {**out, "verdict": "no_regression", "reason": "not_significant"}
