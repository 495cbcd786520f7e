"""The vectorised statistics equal a naive per-series loop and scipy.stats, to 1e-9 relative."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from radar_pipeline.engine.edivisive import best_split, split_statistics
from radar_pipeline.engine.welch import welch_split

from . import reference

series = st.lists(st.floats(min_value=0.01, max_value=1e4, allow_nan=False), min_size=6, max_size=60)


def _pad(rows: list[list[float]]) -> tuple[np.ndarray, np.ndarray]:
    n = np.array([len(r) for r in rows])
    x = np.full((len(rows), n.max()), 123.0)  # padding that must not count
    for i, r in enumerate(rows):
        x[i, : len(r)] = r
    return x, n


@settings(max_examples=60, deadline=None)
@given(st.lists(series, min_size=1, max_size=6))
def test_energy_statistic_equals_pair_loop(rows):
    x, n = _pad(rows)
    q = split_statistics(x, n)
    for i, r in enumerate(rows):
        arr = np.array(r)
        m = max(3, len(r) // 10)
        for k in range(q.shape[1]):
            if m <= k <= len(r) - m:
                expected = reference.energy_q(arr, k)
                scale = k * (len(r) - k) / len(r) * np.abs(arr[:, None] - arr[None, :]).max()
                assert q[i, k] == pytest.approx(expected, rel=1e-9, abs=1e-12 * max(scale, 1.0))
            else:
                assert q[i, k] == -np.inf


@settings(max_examples=60, deadline=None)
@given(st.lists(series, min_size=1, max_size=6))
def test_best_split_equals_pair_loop(rows):
    x, n = _pad(rows)
    k, q = best_split(x, n)
    for i, r in enumerate(rows):
        arr = np.array(r)
        ref_k, ref_q = reference.best_split(arr)
        m = max(3, len(r) // 10)
        qs = sorted((reference.energy_q(arr, j) for j in range(m, len(r) - m + 1)), reverse=True)
        scale = len(r) * np.abs(arr[:, None] - arr[None, :]).max()
        if len(qs) > 1 and abs(qs[0] - qs[1]) <= 1e-9 * scale or abs(qs[0]) <= 1e-9 * scale:
            continue  # a near-tie, or a best Q within rounding of 0: either answer is right to floating-point precision
        assert k[i] == ref_k
        if ref_k:
            assert q[i] == pytest.approx(ref_q, rel=1e-9)


@pytest.mark.filterwarnings("ignore:Precision loss occurred:RuntimeWarning")
@settings(max_examples=80, deadline=None)
@given(st.lists(series, min_size=1, max_size=6), st.data())
def test_welch_equals_scipy(rows, data):
    x, n = _pad(rows)
    k = np.array([data.draw(st.integers(2, len(r) - 2)) for r in rows])
    res = welch_split(x, n, k)
    for i, r in enumerate(rows):
        a, b = np.array(r[: k[i]]), np.array(r[k[i] :])
        if a.var() == 0 and b.var() == 0:
            continue  # covered by test_both_variances_zero
        ref = stats.ttest_ind(b, a, equal_var=False)
        assert res.t[i] == pytest.approx(ref.statistic, rel=1e-9, abs=1e-12)
        assert res.dof[i] == pytest.approx(ref.df, rel=1e-9)
        assert res.p[i] == pytest.approx(ref.pvalue, rel=1e-9, abs=1e-300)
        assert res.mean_a[i] == pytest.approx(a.mean(), rel=1e-12)


def test_welch_keeps_precision_far_from_zero():
    rng = np.random.default_rng(3)
    a = 1e6 + rng.normal(0, 1e-3, 40)
    b = 1e6 + 1e-3 + rng.normal(0, 1e-3, 40)
    res = welch_split(np.concatenate([a, b])[None, :], np.array([80]), np.array([40]))
    ref = stats.ttest_ind(b, a, equal_var=False)
    assert res.t[0] == pytest.approx(ref.statistic, rel=1e-6)


def test_both_variances_zero():
    x = np.array([[1.0] * 10 + [2.0] * 10, [1.0] * 20])
    res = welch_split(x, np.array([20, 20]), np.array([10, 10]))
    assert res.t[0] == np.inf and res.p[0] == 0.0 and np.isnan(res.dof[0])
    assert np.isnan(res.t[1]) and res.p[1] == 1.0


def test_no_admissible_split_for_short_series():
    k, q = best_split(np.array([[1.0, 2.0, 3.0, 4.0, 5.0]]), np.array([5]))
    assert k[0] == 0 and q[0] == -np.inf
