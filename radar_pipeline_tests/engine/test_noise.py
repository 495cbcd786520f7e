"""A statement's noise from its own history (engine/noise.py) and the test that uses it (inference, "History"):
the estimates recover known serial correlation and dispersion; without them the verdicts are the window-only ones;
with them the test keeps its level under the null (a seeded simulation) and gains power; a window that conflicts
with its history is tested on its own; bad estimates are refused."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from radar_pipeline.engine import EngineSettings, analyse
from radar_pipeline.engine.noise import noise_estimates, noise_sums
from radar_pipeline.lab.fleet import DEPLOY, draw, history_estimates, p_at_the_deploy

WINDOW_START = DEPLOY - pd.Timedelta(minutes=30)


def _ar_plus_white(phi: float, ar_sd: float, white_sd: float, calls: int, n: int, seed: int) -> pd.DataFrame:
    """Counters of one statement over n one-minute intervals ending at WINDOW_START: `calls` calls each, interval
    mean 2 ms × (1 + a_i + w_i) with a an AR(1) of coefficient phi and sd ar_sd, w white with sd white_sd."""
    rng = np.random.default_rng(seed)
    a = np.empty(n)
    a[0] = rng.normal(0, ar_sd)
    for i in range(1, n):
        a[i] = phi * a[i - 1] + rng.normal(0, ar_sd * np.sqrt(1 - phi**2))
    mean = 2.0 * (1 + a + rng.normal(0, white_sd, n))
    times = WINDOW_START + pd.Timedelta(minutes=1) * np.arange(-n, 1)
    return pd.DataFrame(
        {
            "query_key": "q",
            "captured_at": times,
            "calls": np.arange(n + 1) * calls,
            "total_exec_time": np.concatenate([[0.0], np.cumsum(calls * mean)]),
        }
    )


@pytest.mark.parametrize("phi, ar_sd, white_sd", [(0.0, 0.0, 0.1), (0.8, 0.1, 0.0), (0.8, 0.1, 0.1), (0.5, 0.05, 0.1)])
def test_the_estimates_recover_the_long_run_inflation_and_the_dispersion(phi, ar_sd, white_sd):
    calls, n = 50, 14_400  # ten days of one-minute scrapes
    counters = _ar_plus_white(phi, ar_sd, white_sd, calls, n, seed=int(phi * 10 + white_sd * 100))
    got = noise_estimates(noise_sums(counters, WINDOW_START - pd.Timedelta(minutes=n), WINDOW_START)).iloc[0]
    total = ar_sd**2 + white_sd**2
    # A relative residual of an interval of c calls is c (a + w) about its block's mean: variance c² · total, so
    # c · total per call; its long-run variance inflation is 1 + 2 (ar share) φ / (1 − φ) (AR(1) plus white noise).
    inflation = 1 + 2 * (ar_sd**2 / total) * phi / (1 - phi)
    got_inflation = (1 + got["serial_correlation"]) / (1 - got["serial_correlation"])
    assert got["intervals"] == n
    assert got["calls_per_interval"] == calls
    assert got["dispersion"] == pytest.approx(calls * total, rel=0.15)
    # The estimate is taken half a standard error high, never low by more than sampling allows.
    assert inflation * 0.85 <= got_inflation <= inflation * 1.35 + 0.1


def test_the_sums_of_days_add_up_to_the_sums_of_their_span():
    counters = _ar_plus_white(0.6, 0.1, 0.05, 20, 2 * 1440, seed=5)
    day = pd.Timedelta(days=1)
    first, second = (noise_sums(counters, WINDOW_START - k * day, WINDOW_START - (k - 1) * day) for k in (2, 1))
    both = noise_sums(counters, WINDOW_START - 2 * day, WINDOW_START)
    added = first.set_index("query_key") + second.set_index("query_key")
    pd.testing.assert_frame_equal(added, both.set_index("query_key"), check_dtype=False)


def test_without_usable_history_the_verdicts_are_the_window_alone():
    fleet = draw(1500, 21, stepped=0.1, drifting=0.05)
    alone = analyse(fleet.counters, DEPLOY)
    history = history_estimates(fleet, 720, 22, WINDOW_START)
    too_short = dataclasses.replace(EngineSettings(), prior_min_intervals=100_000, prior_max_intervals=100_000)
    pd.testing.assert_frame_equal(analyse(fleet.counters, DEPLOY, too_short, prior=history), alone)
    # Estimates for half the statements leave the other half's verdicts exactly as without any (their own figures: the
    # family's step-up adjusts each p by every statement's, so p_family and confidence move with the other half's).
    half = history[history["query_key"] % 2 == 0]
    mixed = analyse(fleet.counters, DEPLOY, prior=half)
    odd = alone["query_key"] % 2 == 1
    family = ["p_family", "confidence"]
    pd.testing.assert_frame_equal(mixed.loc[odd].drop(columns=family), alone.loc[odd].drop(columns=family))
    with_history = analyse(fleet.counters, DEPLOY, prior=history)
    tested = with_history["t_stat"].notna()
    assert (with_history.loc[tested, "dof"] != alone.loc[tested, "dof"]).mean() > 0.9


def test_with_history_the_test_holds_its_level_and_uses_a_near_normal_reference():
    # θ = 0 puts the null on its boundary, where the level is attained; 6,000 unchanged statements per arm, each with
    # a day of history drawn with its own parameters.
    fleets = [draw(3000, seed) for seed in (31, 32)]
    histories = [history_estimates(f, 1440, 40 + i, WINDOW_START) for i, f in enumerate(fleets)]
    for with_stddev in (True, False):
        p = np.concatenate(
            [p_at_the_deploy(f.counters, with_stddev, h)[0] for f, h in zip(fleets, histories, strict=True)]
        )
        assert len(p) > 5000
        for alpha, slack in ((0.1, 1.25), (0.01, 1.6), (0.001, 2.5)):
            assert (p <= alpha).mean() <= slack * alpha, (with_stddev, alpha, (p <= alpha).mean())
    settings = dataclasses.replace(EngineSettings(), threshold=0.0)
    out = analyse(fleets[0].counters, DEPLOY, settings, prior=histories[0])
    assert int((out["verdict"] == "detected").sum()) <= 1  # the budget: 0.1 expected at H0's boundary
    tested = out["dof"].notna()
    assert out.loc[tested, "dof"].median() > 100


def test_history_finds_steps_the_window_alone_misses():
    fleet = draw(3000, 51, stepped=0.2, steps=(1.5, 2.0))
    history = history_estimates(fleet, 1440, 52, WINDOW_START)
    # each statement alone at its share (engine 2.5's rule): with 600 steps in the family, the step-up would lift both
    # arms' levels and hide what the history adds to each test; and engine 2.6's window-only variance, which engine
    # 2.7's pooled serial correlation brings close to the history's on this fleet (test_pooled_serial_correlation.py)
    each = EngineSettings(family_rule="bonferroni", pool_serial_correlation=False)
    alone = analyse(fleet.counters, DEPLOY, each)["verdict"] == "detected"
    known = analyse(fleet.counters, DEPLOY, each, prior=history)["verdict"] == "detected"
    stepped = fleet.factor > 1
    assert known[stepped].sum() >= 1.1 * alone[stepped].sum()
    assert not known[~stepped].any()


@pytest.fixture(scope="module")
def steps_of_two() -> tuple:
    """A fleet of 1,000 with a fifth stepped ×2 and no serial correlation, and a day of its history (seeded, drawn
    once for the two tests that read it)."""
    fleet = draw(1000, 61, stepped=0.2, steps=(2.0,), spread=(0.1, 0.2), phi=(0.0, 0.0))
    return fleet, history_estimates(fleet, 1440, 62, WINDOW_START)


def test_a_window_noisier_than_its_history_is_tested_on_its_own(steps_of_two):
    fleet, history = steps_of_two
    alone = analyse(fleet.counters, DEPLOY)
    quiet = history.assign(dispersion=history["dispersion"] / 100)  # a history far calmer than today
    out = analyse(fleet.counters, DEPLOY, prior=quiet)
    tested = alone["t_stat"].notna()
    assert tested.sum() > 20
    pd.testing.assert_series_equal(out.loc[tested, "p_value"], alone.loc[tested, "p_value"])


@pytest.fixture(scope="module")
def peak_hour() -> tuple[list, list[pd.DataFrame]]:
    """Two fleets of 3,000 busy statements and their histories drawn at a tenth of their calls (seeded: the same for
    both of the test's parameters, drawn once for the module; a day of history for 6,000 statements is most of the
    test's time)."""
    fleets = [draw(3000, seed, rate=(30.0, 1500.0), spread=(0.05, 0.2)) for seed in (81, 82)]
    histories = [
        history_estimates(dataclasses.replace(f, rate=f.rate / 10), 1440, 181 + i, WINDOW_START)
        for i, f in enumerate(fleets)
    ]
    return fleets, histories


@pytest.mark.parametrize("with_stddev", [True, False])
def test_a_history_quieter_than_the_window_is_scaled_to_its_calls(with_stddev, peak_hour):
    # A deploy at the peak hour meets a history of quieter intervals: overdispersion does not shrink with an
    # interval's calls, so a relative dispersion per call read at a tenth of the calls would understate the window's.
    fleets, histories = peak_hour
    p = np.concatenate([p_at_the_deploy(f.counters, with_stddev, h)[0] for f, h in zip(fleets, histories, strict=True)])
    assert len(p) > 5000
    for alpha, slack in ((0.1, 1.25), (0.01, 1.25), (0.001, 2.5)):
        assert (p <= alpha).mean() <= slack * alpha, (alpha, (p <= alpha).mean())


def test_each_verdict_says_how_many_history_intervals_its_test_used():
    fleet = draw(1000, 81, stepped=0.2, steps=(2.0,))
    history = history_estimates(fleet, 2000, 82, WINDOW_START)  # longer than prior_max_intervals (1,440)
    given = history.set_index("query_key")["intervals"]
    for settings in (EngineSettings(), dataclasses.replace(EngineSettings(), prior_max_intervals=600)):
        out = analyse(fleet.counters, DEPLOY, settings, prior=history)
        tested = out["t_stat"].notna()
        assert tested.sum() > 50
        assert out.loc[~tested, "history_intervals"].isna().all()
        used = out.loc[tested, "history_intervals"].to_numpy()
        # Each tested statement's history intervals, as the test counts them (capped), or 0 where it was not used.
        counted = np.minimum(given.loc[out.loc[tested, "query_key"]].to_numpy(), settings.prior_max_intervals)
        counted = np.where(counted >= settings.prior_min_intervals, counted, 0)
        assert ((used == counted) | (used == 0)).all()
        assert (used == settings.prior_max_intervals).mean() > 0.8

    # Without history every tested statement was tested on its window alone.
    alone = analyse(fleet.counters, DEPLOY)
    tested = alone["t_stat"].notna()
    assert (alone.loc[tested, "history_intervals"] == 0).all() and alone.loc[~tested, "history_intervals"].isna().all()


def test_a_window_that_conflicts_with_its_history_says_it_used_none(steps_of_two):
    fleet, history = steps_of_two
    fitting = analyse(fleet.counters, DEPLOY, prior=history)
    tested = fitting["t_stat"].notna()
    assert (fitting.loc[tested, "history_intervals"] > 0).mean() > 0.9
    quiet = history.assign(dispersion=history["dispersion"] / 100)  # a window far noisier than its history
    out = analyse(fleet.counters, DEPLOY, prior=quiet)
    assert out["t_stat"].notna().equals(tested)
    assert (out.loc[tested, "history_intervals"] == 0).all()
    assert out.loc[~tested, "history_intervals"].isna().all()


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda h: h.drop(columns="dispersion"), "missing column"),
        (lambda h: pd.concat([h, h.head(1)]), "duplicates"),
        (lambda h: h.assign(serial_correlation=1.0), "strictly between"),
        (lambda h: h.assign(dispersion=-1.0), "must not be negative"),
        (lambda h: h.assign(intervals=np.inf), "infinite"),
        (lambda h: h.assign(intervals="many"), "must be numeric"),
        (lambda h: h.assign(calls_per_interval=-1.0), "calls_per_interval must be finite"),
    ],
)
def test_bad_history_is_refused_naming_what_is_wrong(change, message):
    fleet = draw(50, 71)
    history = history_estimates(fleet, 240, 72, WINDOW_START)
    with pytest.raises(ValueError, match=message):
        analyse(fleet.counters, DEPLOY, prior=change(history))
