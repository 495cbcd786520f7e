"""Weekly rhythms in the periodic check on a real warehouse (issue 41, part 5): the nightly job stores each
statement's hourly sums (sql/0039) with its noise sums; the periodic check of the third Monday's 09:00 hour sets each
statement against its usual level at those hours (steps/rhythm.py) and so leaves the morning ramp alone while still
detecting a step on top of it, which today's rule cannot tell apart; retention keeps the sums the weeks a level
reads; a history point is judged at its usual level for its hours of the week."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pandas as pd
import pytest
import sqlalchemy as sa

from radar_pipeline.defs.resources import AnalysisResource
from radar_pipeline.lab.rhythm import MONDAY, weekly_counters
from radar_pipeline.steps.decide import AnalysisRun
from radar_pipeline.steps.history import judged
from radar_pipeline.steps.noise import update_noise
from radar_pipeline.steps.periodic_check import analyse_period
from radar_pipeline.steps.retention import apply_retention
from radar_pipeline.steps.rhythm import point_levels
from radar_pipeline.warehouse import rhythm

from .helpers import store_counters

STEPPED = 5  # of five statements, the fifth steps ×2 at 09:00 on the third Monday
STEP_AT = MONDAY + pd.Timedelta(weeks=2, hours=9)


def _mondays() -> pd.DataFrame:
    """The lab's workload, one-minute scrapes, kept for 06:00–10:00 of its three Mondays."""
    frame = weekly_counters(STEPPED, 3, every=pd.Timedelta(minutes=1), seed=11, steps={STEPPED: (STEP_AT, 2.0)})
    at = frame["captured_at"]
    return frame[(at.dt.day_of_week == 0) & (at.dt.hour >= 6) & (at <= at.dt.normalize() + pd.Timedelta(hours=10))]


def _check(warehouse, key: str, rhythms: bool) -> pd.DataFrame:
    """The periodic check of the third Monday's 09:00 hour; its verdicts by queryid."""
    analysis = AnalysisResource()
    run = AnalysisRun(warehouse, analysis.periodic_settings(), rhythms=rhythms)
    done, failed = analyse_period(run, key, (STEP_AT + pd.Timedelta(hours=1)).to_pydatetime(), timedelta(minutes=5))
    assert failed == {}
    return done[0].verdicts.set_index("queryid")


def test_the_periodic_check_compares_an_hour_with_its_usual_level_and_still_finds_a_step(warehouse):
    store_counters(warehouse, "main", _mondays(), {q: f"SELECT {q}" for q in range(1, STEPPED + 1)})
    days = update_noise(warehouse, days=(datetime.now(UTC) - MONDAY).days + 1, grace=timedelta(0))
    assert [d.error for d in days] == [None] * 3
    with warehouse.connect() as conn:
        stored = conn.execute(
            sa.text("SELECT count(DISTINCT queryid), count(DISTINCT hour) FROM radar.statement_hour")
        ).one()
    # 06:00 to 09:00 each Monday, and on the later two 05:00 (the interval across the week's gap ends at 06:00)
    assert tuple(stored) == (STEPPED, 4 + 5 + 5)

    today = _check(warehouse, "today", rhythms=False)
    levelled = _check(warehouse, "levelled", rhythms=True)
    unchanged = list(range(1, STEPPED))
    assert (today.loc[unchanged, "verdict"] == "detected").any()  # the morning ramp, taken for a regression
    assert today["expected_factor"].isna().all()
    assert (levelled.loc[unchanged, "verdict"] != "detected").all()
    assert levelled.loc[STEPPED, "verdict"] == "detected"
    assert levelled.loc[STEPPED, "change_factor"] < today.loc[STEPPED, "change_factor"]
    with warehouse.connect() as conn:
        expected = conn.execute(
            sa.text("SELECT queryid, expected_factor FROM radar.verdict WHERE deploy_id = 'periodic:levelled'")
        ).all()
    assert len(expected) == STEPPED and all(factor > 1.1 for _, factor in expected)

    # Retention keeps the hourly sums for the weeks a level reads, past the snapshots' own retention.
    def hours_left() -> int:
        with warehouse.connect() as conn:
            return conn.execute(sa.text("SELECT count(*) FROM radar.statement_hour")).scalar_one()

    before = hours_left()
    apply_retention(warehouse, keep_days=1, today=(STEP_AT + pd.Timedelta(days=1)).date())
    assert hours_left() == before
    apply_retention(warehouse, keep_days=1, today=(STEP_AT + pd.Timedelta(days=36)).date())
    assert hours_left() == 0


def test_a_history_point_is_judged_at_its_usual_level_for_its_hours(warehouse):
    # Three weeks of hourly sums of statement 1 (the weeks centred on the two Mondays before the third, and half
    # a week either side): 1 ms a call at night, 2 ms from 09:00 to 17:00 on weekdays; statement 2 has one week only.
    rows = []
    for hour in pd.date_range(
        MONDAY - pd.Timedelta(weeks=1), MONDAY + pd.Timedelta(weeks=2), freq="h", inclusive="left"
    ):
        busy = hour.day_of_week < 5 and 9 <= hour.hour < 17
        rows.append((1, hour, 100.0, 100.0 * (2.0 if busy else 1.0)))
        if hour >= MONDAY + pd.Timedelta(weeks=1):
            rows.append((2, hour, 100.0, 100.0))
    hours = pd.DataFrame(rows, columns=["queryid", "hour", "calls", "time_ms"]).assign(dbid=5, userid=10, toplevel=True)
    with warehouse.begin() as conn:
        for day in sorted({h.date() for h in hours["hour"]}):
            rhythm.write_day(conn, "main", day, hours[hours["hour"].dt.date == day])
    points = pd.DataFrame({"dbid": [5, 5], "userid": [10, 10], "queryid": [1, 2], "toplevel": [True, True]})
    third_monday = MONDAY + pd.Timedelta(weeks=2)
    with warehouse.connect() as conn:
        peak = point_levels(
            conn, "main", points, third_monday + pd.Timedelta(hours=9), third_monday + pd.Timedelta(hours=9, minutes=30)
        )
        night = point_levels(
            conn, "main", points, third_monday + pd.Timedelta(hours=3), third_monday + pd.Timedelta(hours=3, minutes=30)
        )
    assert peak[0] / night[0] == pytest.approx(2.0)
    week_mean = (40 * 2.0 + 128 * 1.0) / 168
    assert night[0] == pytest.approx(1.0 / week_mean)
    assert np.isnan(peak[1]) and np.isnan(night[1])  # one week is too short a history
    judged_peak = judged(points.assign(mean_ms=2.0, usual_level=peak))
    judged_night = judged(points.assign(mean_ms=1.0, usual_level=night))
    assert judged_peak[0] == pytest.approx(judged_night[0])  # the peak's deploy and the night's compare alike
    assert judged_peak[1] == 2.0  # without a level, as it is
