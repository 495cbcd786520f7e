"""Weekly rhythms (engine/rhythm.py): hourly sums from counters; each statement's usual level at the hours of a
window from earlier weeks (centred per week, the median across weeks, nothing with too short a history); a window
set against those levels decides a weekly peak as unchanged and still finds a step on top of it."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pandas as pd
import pytest

from radar_pipeline.engine import EngineSettings, analyse
from radar_pipeline.engine.noise import noise_estimates, noise_sums
from radar_pipeline.engine.rhythm import (
    SPAN_WEEKS,
    Levels,
    earlier_hours,
    hourly_sums,
    usual_level,
    weekly_levels,
    window_hours,
)
from radar_pipeline.lab.rhythm import MONDAY, weekly_counters
from radar_pipeline.lab.synthetic import counters

HOUR = pd.Timedelta(hours=1)
WEEK = pd.Timedelta(weeks=1)
# the periodic check's settings: one-hour periods, the change anywhere in the window, the day's budget over 24 checks
PERIODIC = EngineSettings(
    window=timedelta(hours=1),
    false_alert_budget=0.1 / 24,
    tolerance_floor=timedelta(hours=1),
    tolerance_fraction=1.0,
)


def _hourly(key: object, week: int, means: dict[int, float], calls: float = 100.0) -> list[dict]:
    """Rows of `key`'s hourly sums in `week` (weeks after MONDAY), hour h of the Monday at mean means[h] ms."""
    return [
        {"query_key": key, "hour": MONDAY + week * WEEK + h * HOUR, "calls": calls, "time_ms": calls * m}
        for h, m in means.items()
    ]


def test_hourly_sums_count_each_interval_in_the_hour_its_end_falls_in():
    # one-minute intervals of 10 calls; the first hour's at 1 ms, the second's at 3 ms
    frame = counters("q", np.repeat([1.0, 3.0], 60), calls=10, first=MONDAY)
    sums = hourly_sums(frame, MONDAY, MONDAY + 2 * HOUR)
    assert sums["hour"].tolist() == [MONDAY, MONDAY + HOUR]  # the interval ending at 01:00 is the first hour's
    assert sums["calls"].tolist() == [600.0, 600.0]
    assert sums["time_ms"].tolist() == pytest.approx([600.0, 1800.0])


def test_a_window_s_hours_and_the_earlier_hours_its_levels_are_made_from():
    lo, hi = MONDAY + 2 * WEEK + 8 * HOUR, MONDAY + 2 * WEEK + 10 * HOUR
    assert window_hours(lo, hi).tolist() == [lo, lo + HOUR]
    assert earlier_hours(lo, hi, max_weeks=2).tolist() == [
        lo - WEEK,
        lo - WEEK + HOUR,
        lo - 2 * WEEK,
        lo - 2 * WEEK + HOUR,
    ]


def test_levels_are_the_median_of_each_week_s_centred_profile_and_need_two_weeks():
    lo, hi = MONDAY + 3 * WEEK + 8 * HOUR, MONDAY + 3 * WEEK + 10 * HOUR
    rows = (
        # "a": twice as slow in the second hour every week, whatever the week's own level
        _hourly("a", 0, {8: 1.0, 9: 2.0})
        + _hourly("a", 1, {8: 3.0, 9: 6.0})
        + _hourly("a", 2, {8: 1.0, 9: 8.0})  # one unusual week: the median of three keeps the rhythm
        # "b": one week only; "c": its earlier week lacks an hour, so only one week is whole
        + _hourly("b", 2, {8: 1.0, 9: 2.0})
        + _hourly("c", 1, {8: 1.0})
        + _hourly("c", 2, {8: 1.0, 9: 2.0})
        # "d": too few calls in an hour for its mean to count
        + _hourly("d", 1, {8: 1.0, 9: 2.0}, calls=5)
        + _hourly("d", 2, {8: 1.0, 9: 2.0}, calls=5)
    )
    hourly = pd.DataFrame(rows)
    hourly["hour"] = hourly["hour"].dt.as_unit("us")  # as the warehouse's read gives them
    levels = weekly_levels(hourly, lo, hi)
    assert levels.keys.tolist() == ["a"]
    assert levels.weeks.tolist() == [3]
    assert levels.level[0, 1] / levels.level[0, 0] == pytest.approx(2.0)
    assert weekly_levels(hourly, lo, hi, min_weeks=1).keys.tolist() == ["a", "b", "c"]  # "d" never counts
    assert len(weekly_levels(hourly.iloc[:0], lo, hi)) == 0
    with pytest.raises(ValueError, match="min_weeks"):
        weekly_levels(hourly, lo, hi, min_weeks=3, max_weeks=2)


def _monday_window(stepped: dict[int, tuple[pd.Timestamp, float]] | None = None):
    """Three weeks of the lab's workload (six statements; statement 6 steps where told), the third Monday's
    08:00–10:00 window, the levels its hours had in the two weeks before and, as the periodic check reads them, the
    statements' noise priors from the week before that Monday."""
    frame = weekly_counters(6, 3, every=pd.Timedelta(minutes=1), seed=3, steps=stepped)
    frame = frame.rename(columns={"queryid": "query_key"})
    lo, hi = MONDAY + 2 * WEEK + 8 * HOUR, MONDAY + 2 * WEEK + 10 * HOUR
    earlier = frame[frame["captured_at"] < MONDAY + 2 * WEEK]
    hourly = hourly_sums(earlier, MONDAY - HOUR, MONDAY + 2 * WEEK)
    prior = noise_estimates(noise_sums(earlier, MONDAY + WEEK, MONDAY + 2 * WEEK))
    window = frame[(frame["captured_at"] >= lo - pd.Timedelta(minutes=1)) & (frame["captured_at"] <= hi)]
    return window, lo + HOUR, weekly_levels(hourly, lo, hi), prior


def test_a_monday_peak_is_a_rise_today_s_rule_detects_and_the_weekly_level_explains():
    window, split, levels, prior = _monday_window()
    today = analyse(window, split, PERIODIC, prior=prior)
    assert (today["verdict"] == "detected").any()  # the morning ramp, taken for a regression
    assert today["expected_factor"].isna().all()
    levelled = analyse(window, split, PERIODIC, prior=prior, levels=levels)
    assert not (levelled["verdict"] == "detected").any()
    assert (levelled["expected_factor"] > 1.1).all()  # every statement's latency rises with the load
    assert (levelled["change_factor"] < today["change_factor"]).all()
    # the before side keeps its scale: its mean moves only by the rhythm within its hour
    assert levelled["mean_before_ms"].to_numpy() == pytest.approx(today["mean_before_ms"].to_numpy(), rel=0.02)


def test_a_step_on_the_peak_is_still_detected_at_its_own_size():
    step_at = MONDAY + 2 * WEEK + 9 * HOUR
    window, split, levels, prior = _monday_window({6: (step_at, 1.5)})
    levelled = analyse(window, split, PERIODIC, prior=prior, levels=levels).set_index("query_key")
    assert levelled.loc[6, "verdict"] == "detected"
    assert levelled.loc[6, "change_factor"] == pytest.approx(1.5, rel=0.12)
    assert (levelled.drop(index=6)["verdict"] != "detected").all()


def test_a_statement_without_levels_is_decided_as_before():
    window, split, _, prior = _monday_window()
    unchanged = analyse(window, split, PERIODIC, prior=prior)
    none = analyse(window, split, PERIODIC, prior=prior, levels=Levels.none())
    columns = [c for c in unchanged.columns if c != "merged_keys"]
    pd.testing.assert_frame_equal(none[columns], unchanged[columns])


def test_a_span_s_usual_level_is_its_median_ratio_to_its_weeks_and_needs_two_whole_weeks():
    weeks = pd.DataFrame(
        [
            # "a": the span at twice its week's mean in two weeks, three times in a third: the median is twice
            ("a", 1, 1000.0, 1000.0, 100.0, 200.0, 2),
            ("a", 2, 1000.0, 2000.0, 100.0, 400.0, 2),
            ("a", 3, 1000.0, 1000.0, 100.0, 300.0, 2),
            # "b": one of its weeks lacks calls in one of the span's two hours
            ("b", 1, 1000.0, 1000.0, 100.0, 200.0, 2),
            ("b", 2, 1000.0, 1000.0, 100.0, 200.0, 1),
        ],
        columns=SPAN_WEEKS,
    )
    levels = usual_level(weeks, hours=2)
    assert levels.to_dict() == pytest.approx({"a": 2.0})
    assert usual_level(weeks, hours=2, min_weeks=1).to_dict() == pytest.approx({"a": 2.0, "b": 2.0})
