"""The vectorised statistics equal a naive per-series loop (reference.py)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from radar_pipeline.engine.edivisive import best_split, split_statistics
from radar_pipeline.engine.inference import level_shift_beyond_trend, split_tests

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


@settings(max_examples=60, deadline=None)
@given(st.lists(series, min_size=1, max_size=5), st.data())
def test_split_test_equals_the_loop(rows, data):
    calls_rows = [[data.draw(st.integers(1, 200)) for _ in r] for r in rows]
    with_ss = data.draw(st.booleans())
    x, n = _pad(rows)
    c, _ = _pad(calls_rows)
    c = np.where(np.arange(x.shape[1])[None, :] < n[:, None], c, 0.0)
    time = np.where(c > 0, c * x, 0.0)
    ss = np.where(c > 1, c * (0.3 * x) ** 2, 0.0) if with_ss else None
    k = np.array([data.draw(st.integers(3, len(r) - 3)) for r in rows])
    candidate = np.zeros((len(rows), x.shape[1] + 1), dtype=bool)
    candidate[np.arange(len(rows)), k] = True
    res = split_tests(c, time, ss, n, candidate, 0.2)
    for i in range(len(rows)):
        ref = reference.call_level_test(c[i, : n[i]], time[i, : n[i]], None if ss is None else ss[i, : n[i]], k[i], 0.2)
        xs = np.array(rows[i])
        if not np.isfinite(ref["t"]) or min(np.ptp(xs[: k[i]]), np.ptp(xs[k[i] :])) <= 1e-9 * xs.max():
            continue  # a constant side: its residuals are rounding noise, either answer is right
        assert res.t[i] == pytest.approx(ref["t"], rel=1e-6, abs=1e-9)
        assert res.dof[i] == pytest.approx(ref["dof"], rel=1e-6)
        assert res.p[i] == pytest.approx(ref["p"], rel=1e-6, abs=1e-300)
        assert res.rho[i] == pytest.approx(ref["rho"], rel=1e-6, abs=1e-9)


def test_split_test_keeps_precision_far_from_zero():
    rng = np.random.default_rng(3)
    x = np.concatenate([1e6 + rng.normal(0, 1e-3, 40), 1.2e6 + rng.normal(0, 1e-3, 40)])
    c = np.full(80, 10.0)
    candidate = np.zeros((1, 81), dtype=bool)
    candidate[0, 40] = True
    res = split_tests(c[None], (c * x)[None], None, np.array([80]), candidate, 0.2)
    ref = reference.call_level_test(c, c * x, None, 40, 0.2)
    assert res.t[0] == pytest.approx(ref["t"], rel=1e-4, abs=1e-3)


def test_selection_over_splits_is_paid_for():
    rng = np.random.default_rng(5)
    c = np.full((1, 40), 20.0)
    x = np.r_[np.ones(20), np.full(20, 1.5)] * rng.lognormal(0, 0.05, 40)
    one_split = np.zeros((1, 41), dtype=bool)
    one_split[0, 20] = True
    many = np.zeros((1, 41), dtype=bool)
    many[0, 15:26] = True
    fixed = split_tests(c, c * x[None], None, np.array([40]), one_split, 0.2)
    chosen = split_tests(c, c * x[None], None, np.array([40]), many, 0.2)
    assert chosen.splits[0] == 11 and chosen.p[0] >= min(1.0, fixed.p[0]) and chosen.k[0] == 20


def test_a_slow_side_does_not_set_the_other_sides_correlation():
    """The index dropped at a deploy, on a machine with bursts of load: a 0.01 ms lookup with independent noise
    becomes a 3 ms scan whose times climb with the load (strongly correlated). Pooled in milliseconds, the scan's
    residuals alone set ρ for the lookup's side too, and the ×300 step came out not significant (test_plans, CI)."""
    rng = np.random.default_rng(11)
    before = 0.01 * rng.lognormal(0, 0.3, 21)
    climb = np.empty(21)
    climb[0] = 0.0
    for i in range(1, 21):
        climb[i] = 0.9 * climb[i - 1] + rng.normal(0, 0.15)
    after = 3.0 * np.exp(climb)
    x = np.r_[before, after]
    c = np.full((1, 42), 10.0)
    candidate = np.zeros((1, 43), dtype=bool)
    candidate[0, 21:24] = True
    res = split_tests(c, c * x[None], None, np.array([42]), candidate, 0.2)
    ref = reference.call_level_test(c[0], c[0] * x, None, 21, 0.2)
    assert res.k[0] == 21 and res.rho[0] == pytest.approx(ref["rho"])
    assert res.rho[0] < 0.6 and res.p[0] < 1e-6


def test_both_sides_constant_is_a_certain_step():
    c = np.full((2, 20), 5.0)
    x = np.array([[1.0] * 10 + [2.0] * 10, [1.0] * 20])
    candidate = np.zeros((2, 21), dtype=bool)
    candidate[:, 10] = True
    res = split_tests(c, c * x, None, np.array([20, 20]), candidate, 0.2)
    assert res.t[0] == np.inf and res.p[0] == 0.0
    assert res.t[1] == -np.inf and res.p[1] == 1.0


def test_level_shift_beyond_trend():
    t = np.arange(60, dtype=float)[None, :]
    n, k, calls = np.array([60]), np.array([30]), np.full((1, 60), 10.0)
    ramp = 1.0 + 0.01 * t
    assert level_shift_beyond_trend(calls, ramp, t, n, k)[0] == pytest.approx(1.0)
    stepped = ramp * np.where(t >= 30, 2.0, 1.0)
    assert level_shift_beyond_trend(calls, stepped, t, n, k)[0] == pytest.approx(2.0, rel=0.1)


def test_no_admissible_split_for_short_series():
    k, q = best_split(np.array([[1.0, 2.0, 3.0, 4.0, 5.0]]), np.array([5]))
    assert k[0] == 0 and q[0] == -np.inf
