"""analyse(): each verdict and reason from a series whose right answer is known, and agreement with the reference."""

from __future__ import annotations

import math
from datetime import timedelta

import numpy as np
import pandas as pd
import pytest

from radar_pipeline.engine import COLUMNS, REASONS, VERDICTS, EngineSettings, analyse
from radar_pipeline.lab.synthetic import DEPLOY, counters, step

from . import reference


def one(frame: pd.DataFrame, settings: EngineSettings | None = None) -> pd.Series:
    out = analyse(frame, DEPLOY, settings)
    assert len(out) == 1
    return out.iloc[0]


def test_result_shape_and_vocabulary():
    out = analyse(pd.concat([counters("a", step()), counters("b", step(after=1.0))]), DEPLOY)
    assert list(out.columns) == COLUMNS
    assert set(out["verdict"]) <= set(VERDICTS) and set(out["reason"]) <= set(REASONS)
    assert out["change_at"].dt.tz is not None


def test_step_after_deploy_is_detected():
    r = one(counters("q", step(before=1.0, after=8.0)))
    assert (r.verdict, r.reason) == ("detected", "significant")
    assert abs(r.change_at - DEPLOY) <= timedelta(minutes=1)
    assert r.change_factor == pytest.approx(8.0, rel=0.1)
    assert r.p_value < 1e-10 and r.confidence == pytest.approx(1 - r.p_family)
    assert r.factor_low < r.change_factor < r.factor_high and r.factor_low > 7.0 and r.factor_high < 9.5
    assert (r.n_before, r.n_after, r.calls_before, r.calls_after) == (30, 30, 1500, 1500)
    assert (r.segment_n_before, r.segment_n_after) == (30, 30)


def test_cumulative_mean_trap_is_detected():
    # A year of history at 1 ms: the cumulative mean barely moves after a 2× step, the interval means do.
    frame = counters("q", step(after=2.0), start_calls=50_000_000, start_time=50_000_000.0)
    cumulative = frame["total_exec_time"] / frame["calls"]
    assert cumulative.iloc[-1] / cumulative.iloc[30] < 1.001
    assert one(frame).verdict == "detected"


def test_floor_samples():
    r = one(counters("q", step(n_before=30, n_after=2, after=8.0)))
    assert (r.verdict, r.reason) == ("insufficient_data", "floor_samples")
    assert r.n_after == 2


def test_floor_calls():
    # The default floor is what a per-call variance needs (2 calls); a larger one is a setting.
    r = one(counters("q", step(), calls=3), EngineSettings(min_calls=100))
    assert (r.verdict, r.reason) == ("insufficient_data", "floor_calls")
    assert r.calls_before == 90


def test_sparse_statement_is_judged_on_its_calls():
    # Three calls a minute, ×4 slower after the deploy: 90 calls a side are plenty for a call-level test.
    r = one(counters("q", step(before=1.0, after=4.0, cv=0.3, seed=3), calls=3))
    assert (r.verdict, r.reason) == ("detected", "significant")
    assert r.factor_low > 2.0


def test_below_threshold():
    r = one(counters("q", step(after=1.1)))
    # Stopped by the pre-filter (×1.1 < 1 + θ), but its upper bound reaches past 1.2: not cleared (engine 2.5).
    assert (r.verdict, r.reason) == ("inconclusive", "interval_spans_threshold")
    assert np.isnan(r.p_value) and 1.2 < r.factor_bound < 1.35
    # Decided without a test, it still carries the interval of its window factor.
    assert r.factor_low < r.change_factor < r.factor_high < 1.35
    # Unchanged, with the same noise: its bound lies within 1 + θ, so it is cleared.
    r = one(counters("q", step(after=1.0)))
    assert (r.verdict, r.reason) == ("no_regression", "below_threshold")
    assert r.change_factor < r.factor_bound <= 1.2


def test_a_rise_too_small_to_matter_is_below_threshold_whatever_its_factor():
    from_zero = one(counters("q", np.array([0.0] * 30 + [0.001] * 30)))
    tiny = one(counters("q", np.array([0.001] * 30 + [0.005] * 30)))
    # Never detected. From 0 ms no factor has a bound: not cleared. ×5 at the deploy, 0.004 ms a call, is cleared on
    # its rise (engine 2.7: every split's after side is compared with the side before the deploy, so the splits after
    # it no longer see a before side of two levels).
    assert (from_zero.verdict, from_zero.reason) == ("inconclusive", "interval_too_wide")
    assert (tiny.verdict, tiny.reason) == ("no_regression", "below_threshold")
    # A fast statement whose noise hides a rise under min_rise_ms is cleared on that rise: 0.02 ms ±10%, 50 calls a
    # minute, unchanged, has a factor bound above 1 + θ but below 1 + 0.01 / 0.02.
    noisy = one(counters("q", 0.02 * step(after=1.0, cv=0.4, seed=7), calls=5))
    assert (noisy.verdict, noisy.reason) == ("no_regression", "below_threshold")
    assert 1.2 < noisy.factor_bound < 1.5
    allowed = one(counters("q", np.array([0.001] * 30 + [0.005] * 30)), EngineSettings(min_rise_ms=0.0))
    assert allowed.verdict == "detected"


def test_improvement_is_never_detected():
    r = one(counters("q", step(before=2.0, after=1.0)))
    assert r.verdict == "no_regression" and r.reason == "below_threshold"
    # Even with the pre-filter off, a located improvement is not a regression.
    r = one(counters("q", step(before=2.0, after=1.0)), EngineSettings(threshold=0.0))
    assert r.verdict == "no_regression" and r.reason == "below_threshold"


def test_no_change_point():
    # The interval means alternate 1, 2, 1, 2 throughout: no split makes two different distributions. After the
    # deploy the slow intervals carry most calls, so the call-weighted mean rises past the pre-filter.
    means = np.tile([1.0, 2.0], 30)
    calls = np.concatenate([np.tile([90, 10], 15), np.tile([10, 90], 15)])
    r = one(counters("q", means, calls=calls))
    # The window factor is beyond θ, so it is not cleared either (engine 2.5).
    assert (r.verdict, r.reason) == ("inconclusive", "no_change_point")
    assert r.change_factor > 1.2 and pd.isna(r.change_at)


def test_shift_twenty_minutes_before_the_deploy_is_not_attributed():
    r = one(counters("q", step(n_before=10, n_after=50, after=3.0), first=DEPLOY - pd.Timedelta(minutes=30)))
    # Not blamed on the deploy; not cleared either: the older shift lifts its window factor beyond θ (engine 2.5).
    assert (r.verdict, r.reason) == ("inconclusive", "outside_tolerance")
    assert r.change_at == DEPLOY - pd.Timedelta(minutes=20)
    assert np.isnan(r.p_value)


def test_not_significant():
    # A third slower after the deploy, but two calls a minute with a wide spread: the estimate passes the
    # pre-filter, its interval reaches well below 1 + θ, so the test cannot reject "after ≤ 1.2 × before".
    r = one(counters("q", step(after=1.35, cv=0.8, seed=11), calls=2))
    assert (r.verdict, r.reason) == ("inconclusive", "not_significant")
    assert r.change_factor > 1.2 and r.factor_low < 1.2 < r.factor_high
    assert r.p_family > 0.1 and abs(r.change_at - DEPLOY) <= timedelta(minutes=6)


def test_both_variances_zero_is_a_certain_step():
    r = one(counters("q", np.array([1.0] * 30 + [2.0] * 30)))
    assert (r.verdict, r.reason) == ("detected", "significant")
    assert r.t_stat == np.inf and r.p_value == 0.0 and r.confidence == 1.0
    assert r.factor_low == r.factor_high == 2.0


def test_reset_inside_the_window_is_discarded_not_clamped():
    frame = counters("q", step(after=3.0))
    reset_at = 40  # counters restart at snapshot 40: the interval closed there spans the reset
    frame.loc[reset_at:, "calls"] -= frame.loc[reset_at, "calls"] - 7
    frame.loc[reset_at:, "total_exec_time"] -= frame.loc[reset_at, "total_exec_time"] - 3.0
    r = one(frame)
    assert r.verdict == "detected"
    assert (r.n_before, r.n_after) == (30, 29)


def test_changed_stats_since_is_a_reset():
    frame = counters("q", step(after=3.0))
    frame["stats_since"] = pd.Timestamp("2026-01-01", tz="UTC")
    frame.loc[45:, "stats_since"] = pd.Timestamp(
        "2026-11-29 12:14", tz="UTC"
    )  # counters kept rising: only this shows it
    r = one(frame)
    assert (r.n_before, r.n_after) == (30, 29)


def test_unsorted_rows_missing_scrapes_and_duplicates_give_the_same_answer():
    frame = counters("q", step(after=3.0, seed=4))
    ordered = analyse(frame, DEPLOY)
    shuffled = pd.concat([frame, frame.iloc[[5, 6]]]).sample(frac=1.0, random_state=1)
    again = analyse(shuffled, DEPLOY)
    pd.testing.assert_frame_equal(ordered, again)
    gappy = frame.drop(index=[10, 11, 12, 50])
    r = analyse(gappy, DEPLOY).iloc[0]
    assert r.verdict == "detected" and (r.n_before, r.n_after) == (27, 29)


def test_input_is_not_modified():
    frame = counters("q", step()).sample(frac=1.0, random_state=2)
    copy = frame.copy()
    analyse(frame, DEPLOY)
    pd.testing.assert_frame_equal(frame, copy)


def test_queryid_rotation_is_reported_once_under_the_live_key():
    means = step(after=8.0, seed=5)
    old = counters("old", means[:32], fingerprint=99)  # dropped and recreated just after the deploy
    new = counters("new", means[32:], first=DEPLOY + pd.Timedelta(minutes=2), fingerprint=99)
    other = counters("other", step(after=1.0, seed=6), fingerprint=7)
    out = analyse(pd.concat([old, new, other]), DEPLOY)
    assert sorted(out["query_key"]) == ["new", "other"]
    r = out.set_index("query_key").loc["new"]
    assert r.verdict == "detected" and r.merged_keys == ("old",)
    assert (r.n_before, r.n_after) == (30, 30)  # 32 intervals of the old key, 28 of the new one
    assert out.set_index("query_key").loc["other", "merged_keys"] == ()


def test_keys_sharing_a_fingerprint_at_once_sum_per_snapshot():
    a = counters("a", np.ones(60), calls=50, fingerprint=1)
    b = counters("b", np.full(60, 3.0), calls=50, fingerprint=1)
    r = analyse(pd.concat([a, b]), DEPLOY).iloc[0]
    assert r.mean_before_ms == pytest.approx(2.0) and r.n_before == 30 and r.calls_before == 3000


def test_no_rows_and_no_window_samples():
    empty = counters("q", np.ones(3)).iloc[0:0]
    assert analyse(empty, DEPLOY).empty
    far = counters("q", step(), first=DEPLOY - pd.Timedelta(days=2))
    r = one(far)
    assert (r.verdict, r.reason, r.n_before, r.n_after) == ("insufficient_data", "floor_samples", 0, 0)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda f: f.drop(columns=["calls"]), "missing column"),
        (lambda f: f.assign(captured_at=f["captured_at"].dt.tz_localize(None)), "time-zone-aware"),
        (lambda f: f.assign(calls=f["calls"].astype(float).where(f.index != 3)), "missing values"),
    ],
)
def test_bad_input_is_named(mutate, message):
    with pytest.raises(ValueError, match=message):
        analyse(mutate(counters("q", step())), DEPLOY)


def test_naive_deploy_time_is_refused():
    with pytest.raises(ValueError, match="deploy_at"):
        analyse(counters("q", step()), DEPLOY.tz_localize(None))


def test_settings_validate_and_round_trip():
    s = EngineSettings(window=timedelta(seconds=60), tolerance_floor=timedelta(seconds=5), min_calls=10)
    assert EngineSettings.from_dict(s.to_dict()) == s
    assert s.tolerance == timedelta(seconds=12)
    assert EngineSettings().tolerance == timedelta(minutes=6)
    for bad in ({"false_alert_budget": 1.5}, {"window": timedelta(0)}, {"min_samples": 2}):
        with pytest.raises(ValueError, match="invalid EngineSettings"):
            EngineSettings(**bad)
    with pytest.raises(ValueError, match="unknown engine settings: windw"):
        EngineSettings.from_dict({"windw": 60})


def _random_counters(seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    frames = []
    for q in range(40):
        n_b, n_a = int(rng.integers(5, 40)), int(rng.integers(5, 40))
        shift_at = int(np.clip(n_b + rng.integers(-15, 15), 1, n_b + n_a - 1))  # the change, near the deploy or not
        means = step(
            n_before=shift_at,
            n_after=n_b + n_a - shift_at,
            after=rng.choice([1.0, 1.15, 1.5, 3.0, 0.7]),
            cv=rng.choice([0.05, 0.3, 1.0]),
            seed=seed * 100 + q,
        )
        calls = rng.integers(1, 60, len(means))
        frame = counters(f"q{q}", means, calls=calls, first=DEPLOY - pd.Timedelta(minutes=int(n_b)))
        frame = frame.drop(index=rng.choice(frame.index, size=rng.integers(0, 4), replace=False))
        frames.append(frame)
    return pd.concat(frames).sample(frac=1.0, random_state=seed)


@pytest.mark.parametrize("seed", range(6))
def test_matches_the_per_query_reference(seed):
    frame = _random_counters(seed)
    settings = EngineSettings(false_alert_budget=0.5)  # a small family: a budget that leaves both outcomes possible
    got = analyse(frame, DEPLOY, settings).set_index("query_key")
    seen = set()
    by_key = dict(tuple(frame.groupby("query_key")))
    pools = reference.pool(by_key, DEPLOY, settings)
    assert pools  # 40 queries: their serial correlation is pooled
    refs = reference.family(
        {key: reference.analyse_one(rows, DEPLOY, settings, pools.get(key)) for key, rows in by_key.items()}, settings
    )
    for key, ref in refs.items():
        row = got.loc[key]
        seen.add(ref["reason"])
        ref.setdefault("p_family", math.nan)
        assert (row.verdict, row.reason) == (ref["verdict"], ref["reason"]), key
        for column in ("n_before", "n_after", "calls_before", "calls_after"):
            assert row[column] == ref[column], (key, column)
        for column in ("mean_before_ms", "mean_after_ms", "t_stat", "dof", "p_value", "p_family", "factor_bound"):
            assert row[column] == pytest.approx(ref[column], rel=1e-9, nan_ok=True), (key, column)
        assert (pd.isna(row.change_at) and pd.isna(ref["change_at"])) or row.change_at == ref["change_at"]
    assert len(seen) >= 3 and {"no_regression", "inconclusive"} <= set(got["verdict"])


def _with_stddev(key: str, means: np.ndarray, calls: int, cv: float, seed: int) -> pd.DataFrame:
    """Counters of per-call log-normal latencies with interval means `means`, stddev_exec_time included."""
    rng = np.random.default_rng(seed)
    sigma = np.sqrt(np.log1p(cv**2))
    times = [rng.lognormal(np.log(m) - sigma**2 / 2, sigma, calls) for m in means]
    frame = counters(key, np.array([t.mean() for t in times]), calls=calls)
    every = np.concatenate([[]] + times)
    cum = np.cumsum(every)
    count = np.arange(1, len(every) + 1)
    mean = cum / count
    m2 = np.cumsum((every - np.concatenate([[0.0], mean[:-1]])) * (every - mean))  # Welford
    ends = np.concatenate([[0], np.cumsum([len(t) for t in times])])
    frame["stddev_exec_time"] = np.concatenate([[0.0], np.sqrt(m2[ends[1:] - 1] / count[ends[1:] - 1])])
    return frame


@pytest.mark.parametrize("seed", range(3))
def test_matches_the_reference_with_stddev(seed):
    rng = np.random.default_rng(seed)
    frames = [
        _with_stddev(f"q{i}", step(after=float(rng.choice([1.0, 1.3, 2.0])), cv=0.2, seed=i), 4, 1.5, seed * 10 + i)
        for i in range(12)
    ]
    frame = pd.concat(frames)
    settings = EngineSettings(false_alert_budget=0.5)
    got = analyse(frame, DEPLOY, settings).set_index("query_key")
    by_key = dict(tuple(frame.groupby("query_key")))
    pools = reference.pool(by_key, DEPLOY, settings)
    assert not pools  # 12 queries, too few to pool: each on its own window
    refs = reference.family(
        {key: reference.analyse_one(rows, DEPLOY, settings, pools.get(key)) for key, rows in by_key.items()}, settings
    )
    for key, ref in refs.items():
        row = got.loc[key]
        assert (row.verdict, row.reason) == (ref["verdict"], ref["reason"]), key
        for column in ("t_stat", "dof", "p_value", "factor_bound"):
            assert row[column] == pytest.approx(ref[column], rel=1e-7, nan_ok=True), (key, column)


def test_drift_through_the_window_is_not_a_step():
    # +60% steadily across the hour, many calls: the window means differ by ×1.3, but nothing happens at the deploy.
    means = np.linspace(1.0, 1.6, 60) * step(after=1.0, cv=0.01, seed=2)
    r = one(counters("q", means, calls=500))
    # Not a step; not cleared either (engine 2.5): the window factor is ×1.3.
    assert r.verdict == "inconclusive" and r.reason in ("drift", "not_significant")
    # The same statement with a ×2 step on top of the drift is found.
    stepped = means * np.r_[np.ones(30), np.full(30, 2.0)]
    assert one(counters("q", stepped, calls=500)).verdict == "detected"


def test_budget_and_weights_are_recorded():
    out = analyse(pd.concat([counters(f"q{i}", step(after=1.0, seed=i)) for i in range(4)]), DEPLOY)
    assert out["budget_share"].sum() == pytest.approx(EngineSettings().false_alert_budget)
    assert EngineSettings().to_dict()["false_alert_budget"] == 0.1
    # An analysis record of engine 1 (with alpha) still reads back.
    assert EngineSettings.from_dict({**EngineSettings().to_dict(), "alpha": 0.05}) == EngineSettings()


def _two_levels(before: float, after: float) -> np.ndarray:
    return np.array([before] * 30 + [after] * 30)


def test_cause_more_rows():
    frame = counters(
        "q",
        step(after=3.0),
        per_call={"rows": _two_levels(10, 30), "shared_blks_read": _two_levels(0.1, 0.1)},
    )
    others = [counters(f"c{i}", step(after=1.0, seed=i), per_call={"rows": 1, "shared_blks_read": 0}) for i in range(5)]
    out = analyse(pd.concat([frame, *others]), DEPLOY).set_index("query_key")
    r = out.loc["q"]
    assert r.cause == "more_rows"
    assert r.rows_per_call_before == pytest.approx(10) and r.rows_per_call_after == pytest.approx(30)
    assert pd.isna(out.loc["c0", "cause"]) and np.isnan(out.loc["c0", "rows_per_call_before"])


def test_cause_more_blocks_read():
    frame = counters("q", step(after=3.0), per_call={"rows": 1.0, "shared_blks_read": _two_levels(0.5, 40)})
    r = one(frame)
    assert r.cause == "more_blocks_read"
    assert r.blks_read_per_call_after == pytest.approx(40)


def test_cause_unexplained_without_the_counters():
    assert one(counters("q", step(after=3.0))).cause == "unexplained"


def test_cause_fleet_wide_when_most_queries_shift_together():
    frames = [
        counters(f"q{i}", step(after=2.0, seed=i), per_call={"rows": _two_levels(1, 5), "shared_blks_read": 0})
        for i in range(6)
    ]
    frames.append(counters("calm", step(after=1.0, seed=99)))
    out = analyse(pd.concat(frames), DEPLOY).set_index("query_key")
    assert (out.loc[[f"q{i}" for i in range(6)], "cause"] == "fleet_wide").all()
    # Fewer than fleet_min_queries detections are never fleet-wide, however large their share.
    few = analyse(pd.concat(frames[:2]), DEPLOY)
    assert set(few["cause"]) == {"more_rows"}


@pytest.mark.parametrize(("keys", "times"), [(50, 40), (3, 70_000), (70_000, 3)])
def test_sort_order_equals_a_two_key_lexsort(keys, times):
    from radar_pipeline.engine.samples import _sort_order

    rng = np.random.default_rng(keys)
    codes = rng.integers(0, keys, 80_000)
    t = rng.integers(0, times, 80_000) * 1_000_000_007  # ns apart, far beyond 16 bits
    np.testing.assert_array_equal(_sort_order(codes, t), np.lexsort((t, codes)))


def test_a_step_of_a_fast_statement_is_never_taken_for_a_drift():
    """A fast statement slowed ×270 at the deploy, its after side noisy with a slight slope and uneven scrapes: one
    slope through the window put the level before the split below zero in about a third of such cases, and the
    step read as a drift. The shift is now the larger of the continuous-trend and broken-line models."""
    from radar_pipeline.engine.inference import level_shift_beyond_trend

    rng = np.random.default_rng(1)
    shifts = []
    for _ in range(300):
        after = 2.7 * rng.lognormal(0, 0.3, 21) + rng.uniform(-0.05, 0.05) * np.arange(21)
        after[0] = 0.01 + rng.uniform(0, 1) * 2.7  # the interval that straddles the deploy
        means = np.concatenate([0.01 * rng.lognormal(0, 0.3, 21), after])
        ends = np.cumsum(rng.uniform(0.15, rng.choice([0.2, 1.5]), 42))
        shifts.append(
            level_shift_beyond_trend(np.full((1, 42), 10.0), means[None], ends[None], np.array([42]), np.array([21]))[0]
        )
    assert min(shifts) > 10
    ramp = np.concatenate([np.linspace(1.0, 1.6, 60)]) * rng.lognormal(0, 0.1, 60)  # a drift: no step anywhere
    drift = level_shift_beyond_trend(
        np.full((1, 60), 50.0), ramp[None], np.arange(60.0)[None], np.array([60]), np.array([30])
    )[0]
    assert drift < 1.2


def test_spans_either_side_of_the_deploy_cut_the_window_there():
    # 120 intervals after the deploy: the default window sees 30 of them, a look 2 hours long all of them.
    frame = counters("q", step(n_before=30, n_after=120, after=1.5))
    first = one(frame)
    later = analyse(frame, DEPLOY, before=timedelta(minutes=30), after=timedelta(hours=2)).iloc[0]
    assert (first.n_before, first.n_after) == (30, 30)
    assert (later.n_before, later.n_after) == (30, 120)
    with pytest.raises(ValueError, match="must be positive"):
        analyse(frame, DEPLOY, after=timedelta(0))


def test_given_budget_shares_decide_p_family_and_a_statement_given_none_is_never_detected():
    frame = pd.concat([counters("a", step(after=8.0)), counters("b", step(after=8.0, seed=1))])
    shares = pd.Series({"a": 0.25})  # the family is larger than this call: b's share is elsewhere, or none
    out = analyse(frame, DEPLOY, weights=shares).set_index("query_key")
    assert out.loc["a", "verdict"] == "detected"
    assert out.loc["a", "p_family"] == pytest.approx(min(1.0, out.loc["a", "p_value"] / 0.25))
    assert out.loc["b", "verdict"] != "detected" and out.loc["b", "p_family"] == 1.0
    for bad in (pd.Series({"a": 0.8, "b": 0.8}), pd.Series({"a": -0.1}), pd.Series({"a": np.nan})):
        with pytest.raises(ValueError, match="weights must be"):
            analyse(frame, DEPLOY, weights=bad)
