"""The canary arm's two-arm test (engine/canary.py) on simulated arms (lab/canary.py) and small hand-made counters:
its level under the null when the whole server's load steps at the deploy (where before/after alone detects the
load), its estimate's indifference to load, the pairing of the arms' scrapes, its floors and its errors."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pandas as pd
import pytest

from radar_pipeline.engine import EngineSettings, analyse
from radar_pipeline.engine.canary import CanaryInputError, canary_analyse, canary_state
from radar_pipeline.lab.canary import draw_arms
from radar_pipeline.lab.fleet import DEPLOY

W = timedelta(minutes=30)
SETTINGS = EngineSettings(window=W)


def _analyse(arms, settings=SETTINGS):  # type: ignore[no-untyped-def]
    return canary_analyse(arms.canary, arms.stable, DEPLOY, DEPLOY + W, settings)


def test_at_h0s_boundary_with_a_load_step_the_budget_holds_where_before_after_blames_the_deploy():
    canary_false, before_after_false = [], []
    for seed in range(30):
        arms = draw_arms(300, 500 + seed, factor=1.2, load_step=1.5)  # every statement exactly at 1 + θ
        canary_false.append(int((_analyse(arms)["verdict"] == "detected").sum()))
        if seed < 3:  # the stable role's own statements, before/after: the load step looks like the deploy's
            verdicts = analyse(arms.stable, DEPLOY.to_pydatetime(), SETTINGS)
            before_after_false.append(int((verdicts["verdict"] == "detected").sum()))
    # B = 0.1 per analysis: 30 analyses expect at most 3 false detections; 8 or more has probability < 0.5% (Poisson)
    assert sum(canary_false) <= 7, canary_false
    assert sum(before_after_false) >= 30, before_after_false  # 70 in these three


def test_the_factor_is_the_canarys_over_the_stables_whatever_the_load():
    arms = draw_arms(400, 7, factor=2.0, load_step=1.5)
    result = _analyse(arms)
    busy = result[(result["intervals"] >= 20) & (result["calls_canary"] >= 200)]
    assert len(busy) > 50
    assert np.median(busy["change_factor"]) == pytest.approx(2.0, rel=0.05)  # not 3 = 2 × the load
    assert (busy["verdict"] == "detected").mean() > 0.6  # the rest too noisy for 1/m of B (m ≈ 380)
    assert ((busy["factor_low"] < 2.0) & (2.0 < busy["factor_high"])).mean() > 0.85


def _counters(key, times, calls, totals):  # type: ignore[no-untyped-def]
    return pd.DataFrame(
        {
            "query_key": [key] * len(times),
            "captured_at": [DEPLOY + timedelta(minutes=m) for m in times],
            "calls": calls,
            "total_exec_time": totals,
        }
    )


def test_the_arms_are_paired_interval_by_interval_on_a_common_grid():
    # Canary: baseline at the deploy, then 1, 2, 3, 4 calls of 2 ms, 2 ms, 4 ms, 4 ms in minutes 1–4.
    canary = _counters("q", [0, 1, 2, 3, 4], [0, 1, 3, 6, 10], [0, 2, 6, 18, 34])
    # Stable: 1 ms a call in minutes 1–2, 2 ms in 3–4 (the server's load doubled); no row at minute 2 (no calls in
    # minute 2, as an absent row means), so minute 2's canary calls have no reference and are left out.
    stable = _counters("q", [-5, 1, 3, 4], [100, 110, 120, 130], [100, 110, 130, 150])
    result = canary_analyse(canary, stable, DEPLOY, DEPLOY + timedelta(minutes=4), EngineSettings(window=W))
    row = result.iloc[0]
    assert row["intervals"] == 3 and row["calls_canary"] == 1 + 3 + 4 and row["calls_stable"] == 30
    # A = 2 + 12 + 16 = 30 ms; B = Σ c·m = 1·1 + 3·2 + 4·2 = 15 ms: r = 2 (the load's doubling cancelled)
    assert row["change_factor"] == pytest.approx(2.0)
    assert row["mean_canary_ms"] == pytest.approx(30 / 8) and row["mean_stable_ms"] == pytest.approx(15 / 8)


def test_floors_give_insufficient_data_and_the_state_follows_the_verdicts():
    canary = pd.concat(
        [
            _counters("short", [0, 1, 2], [0, 5, 10], [0, 5, 10]),  # two intervals
            _counters("alone", [0, 1, 2, 3, 4], [0, 5, 10, 15, 20], [0, 5, 10, 15, 20]),  # no stable arm
        ]
    )
    stable = _counters("short", [0, 1, 2], [0, 50, 100], [0, 50, 100])
    result = canary_analyse(canary, stable, DEPLOY, DEPLOY + timedelta(minutes=4), SETTINGS).set_index("query_key")
    assert result.loc["short", "verdict"] == "insufficient_data" and result.loc["short", "reason"] == "floor_samples"
    assert result.loc["alone", "verdict"] == "insufficient_data" and result.loc["alone", "intervals"] == 0
    assert np.isnan(result["budget_share"]).all()
    assert canary_state(result.reset_index()) == "inconclusive"

    frame = pd.DataFrame(
        {
            "verdict": ["no_regression", "inconclusive"],
            "calls_canary": [96, 4],
            "mean_canary_ms": [1.0, 1.0],
            "factor_bound": [1.1, 1.5],
        }
    )
    assert canary_state(frame) == "pass"  # the open statement may have added 4% · (1 − 1.2/1.5) = 0.8% beyond θ
    # the gate's rule (engine.gate): more than 1% of the canary's time added beyond θ, with a bound beyond the gate
    # factor ×1.4, keeps it from passing (6% · (1 − 1.2/1.5) = 1.2%); within ×1.4 it does not (8% at ×1.4: 1.14%)
    assert canary_state(frame.assign(calls_canary=[94, 6])) == "inconclusive"
    assert canary_state(frame.assign(calls_canary=[92, 8], factor_bound=[1.1, 1.4])) == "pass"
    assert canary_state(frame.assign(calls_canary=[92, 8], factor_bound=[1.1, 1.4]), gate_factor=1.2) == "inconclusive"
    assert canary_state(frame.assign(factor_bound=[1.1, np.nan])) == "inconclusive"
    assert canary_state(frame.assign(verdict=["no_regression", "detected"])) == "fail"


def test_bad_input_is_refused_with_the_reason():
    canary = _counters("q", [0, 1], [0, 1], [0, 1])
    with pytest.raises(CanaryInputError, match="stable counters lack total_exec_time"):
        canary_analyse(canary, canary.drop(columns="total_exec_time"), DEPLOY, DEPLOY + W)
    with pytest.raises(CanaryInputError, match="ends .* at or before it starts"):
        canary_analyse(canary, canary, DEPLOY, DEPLOY)
    with pytest.raises(CanaryInputError, match="tz-aware"):
        canary_analyse(canary, canary, DEPLOY.tz_localize(None), DEPLOY + W)


def test_with_the_noise_prior_the_boundary_holds_and_more_is_found():
    from radar_pipeline.lab.canary import history_estimates

    false, found = [], {"window": 0, "prior": 0}
    for seed in range(6):
        arms = draw_arms(300, 900 + seed, factor=1.2, load_step=1.5)
        prior = history_estimates(arms, 720, seed)
        result = canary_analyse(arms.canary, arms.stable, DEPLOY, DEPLOY + W, SETTINGS, prior)
        false.append(int((result["verdict"] == "detected").sum()))
        slowed = draw_arms(300, 950 + seed, factor=1.6, load_step=1.5)
        prior = history_estimates(slowed, 720, seed)
        found["window"] += int((_analyse(slowed)["verdict"] == "detected").sum())
        with_prior = canary_analyse(slowed.canary, slowed.stable, DEPLOY, DEPLOY + W, SETTINGS, prior)
        found["prior"] += int((with_prior["verdict"] == "detected").sum())
        assert (with_prior["serial_correlation"].dropna() <= 0.9 + 1e-12).all()
    assert sum(false) <= 3, false  # 6 analyses at B = 0.1: P(≥ 4) < 0.4%
    assert found["prior"] > 1.1 * found["window"] > 0, found


def test_a_detection_is_never_shown_with_an_interval_reaching_below_one_plus_theta():
    # One statement a family (B / m = 0.1, looser than the 95% interval's 2.5% a side), five one-minute intervals:
    # few degrees of freedom, where a p between 2.5% and 10% comes with an interval reaching far below 1 + θ.
    window = timedelta(minutes=5)
    settings = EngineSettings(window=window)
    rows = pd.DataFrame(
        [
            canary_analyse(arms.canary, arms.stable, DEPLOY, DEPLOY + window, settings).iloc[0]
            for arms in (
                draw_arms(1, seed, factor=1.8, minutes=5, rate=(20, 50), load_spread=0.3) for seed in range(100)
            )
        ]
    )
    detected = rows[rows["verdict"] == "detected"]
    assert len(detected) >= 5 and (detected["factor_low"] > 1.2).all(), detected
    between = rows[(rows["p_value"] > 0.025) & (rows["p_value"] <= 0.1)]  # within B / m, not within the interval's
    assert len(between) >= 3 and (between["verdict"] == "inconclusive").all(), between
    assert (between["factor_low"] <= 1.2).all()
