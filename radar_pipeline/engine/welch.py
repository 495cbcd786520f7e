"""Welch's t-test on the two segments a split defines, for many series at once (Welch 1947).

The segments are compared without assuming equal variances, since a latency regression often changes the spread as
well as the mean. The test runs on interval means, not on single calls: by the central limit theorem a mean of many
calls is far closer to normal than the heavy-tailed per-call latency, which is what makes a normal-theory test
defensible here. Variances are computed in two passes (mean first, then squared deviations), so latencies far from
zero with a small spread lose no precision.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats


@dataclass(frozen=True)
class WelchResult:
    """Per series: segment sizes and means, t, Welch–Satterthwaite degrees of freedom, two-sided p."""

    n_a: np.ndarray
    n_b: np.ndarray
    mean_a: np.ndarray
    mean_b: np.ndarray
    t: np.ndarray
    dof: np.ndarray
    p: np.ndarray


def welch_split(x: np.ndarray, n: np.ndarray, k: np.ndarray) -> WelchResult:
    """Welch's test of x[:k] against x[k:n] for every row of x ([rows, L], left-aligned).

    Both variances zero is a deterministic step: t is ±inf (p = 0) when the means differ, and undefined (nan, p = 1)
    when they do not; the degrees of freedom are then undefined (nan).
    """
    x = np.asarray(x, dtype=np.float64)
    n = np.asarray(n, dtype=np.int64)
    k = np.asarray(k, dtype=np.int64)
    col = np.arange(x.shape[1])[None, :]
    in_a = col < k[:, None]
    in_b = (col >= k[:, None]) & (col < n[:, None])
    n_a = in_a.sum(axis=1).astype(np.float64)
    n_b = in_b.sum(axis=1).astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        mean_a = np.where(in_a, x, 0.0).sum(axis=1) / n_a
        mean_b = np.where(in_b, x, 0.0).sum(axis=1) / n_b
        var_a = np.where(in_a, (x - mean_a[:, None]) ** 2, 0.0).sum(axis=1) / (n_a - 1)
        var_b = np.where(in_b, (x - mean_b[:, None]) ** 2, 0.0).sum(axis=1) / (n_b - 1)
        se_a = var_a / n_a
        se_b = var_b / n_b
        se2 = se_a + se_b
        diff = mean_b - mean_a
        t = diff / np.sqrt(se2)
        dof = se2**2 / (se_a**2 / (n_a - 1) + se_b**2 / (n_b - 1))
    deterministic = se2 == 0
    t = np.where(deterministic, np.where(diff == 0, np.nan, np.copysign(np.inf, diff)), t)
    dof = np.where(deterministic, np.nan, dof)
    p = np.where(deterministic, np.where(np.isnan(t), 1.0, 0.0), 2 * stats.t.sf(np.abs(t), dof))
    return WelchResult(n_a=n_a, n_b=n_b, mean_a=mean_a, mean_b=mean_b, t=t, dof=dof, p=p)
