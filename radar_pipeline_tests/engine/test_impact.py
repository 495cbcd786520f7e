"""The deploy's impact summary and the call-surge test (engine/impact.py), on simulated targets."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pandas as pd
import pytest

from radar_pipeline.engine import EngineSettings
from radar_pipeline.engine.impact import ALL_DATABASES, contention_culprits, impact
from radar_pipeline.lab.surges import DEPLOY, draw

SETTINGS = EngineSettings()


def busy(frame: pd.DataFrame, i: int) -> pd.Series:
    return frame.set_index("query_key").loc[i]


def test_a_traffic_doubling_is_not_a_surge() -> None:
    found = impact(draw(300, 1, traffic=2.0), DEPLOY, SETTINGS)
    assert found.changes.empty
    whole = found.summary.set_index("dbid").loc[ALL_DATABASES]
    assert whole["calls_per_min_after"] / whole["calls_per_min_before"] == pytest.approx(2.0, rel=0.3)


def test_an_n_plus_one_surge_is_named_and_a_slower_surge_is_a_surge() -> None:
    counters = draw(300, 2, surge={0: 20.0}, traffic=1.5)
    rate = counters[counters["query_key"] == 0]["calls"].diff().mean()
    assert rate > 5  # the seeded statement is not a sparse one
    found = impact(counters, DEPLOY, SETTINGS)
    row = busy(found.statements, 0)
    assert row["kind"] == "n_plus_one"
    assert row["share_ratio"] > 10 and row["p_family"] <= SETTINGS.false_alert_budget
    assert list(found.changes["query_key"]) == [0]
    verdicts = pd.DataFrame({"query_key": [0], "verdict": ["detected"]})
    assert busy(impact(counters, DEPLOY, SETTINGS, verdicts).statements, 0)["kind"] == "surge"


def test_new_statements_heavy_by_share_and_sparse_ones_are_not_new() -> None:
    found = impact(draw(300, 3, new={7: 5000.0, 8: 0.5}), DEPLOY, SETTINGS)
    heavy, light = busy(found.statements, 7), busy(found.statements, 8)
    assert heavy["kind"] == "new" and heavy["heavy"]
    assert heavy["calls_before"] == 0 and heavy["calls_after"] > 100_000  # its first row's calls count
    assert heavy["onset_at"] == DEPLOY + timedelta(minutes=1)
    assert light["kind"] == "new" and not light["heavy"]
    old = found.statements[~found.statements["query_key"].isin([7, 8])]
    assert not (old["kind"] == "new").any()  # statements with few calls before were there all along


def test_watching_that_began_inside_the_window_is_no_surge() -> None:
    """The target's first scrape lies inside the window (a warehouse created just before, as in test_deploy_analysis
    under load): every statement's first row holds all its calls since an unknown creation, not one interval's. A
    statement with a long history (a migration's thousands of calls) would otherwise swell the before side's total
    and make every steady statement's share "surge"."""
    counters = draw(50, 6)
    first = counters["captured_at"].min()
    history = counters["query_key"] == 0
    counters.loc[history, "calls"] += 50_000_000  # seen at the first scrape with a long past
    counters.loc[history, "total_exec_time"] += 50_000_000.0
    settings = EngineSettings(window=DEPLOY - first + timedelta(minutes=5))  # the window starts before the first scrape
    found = impact(counters, DEPLOY, settings, watched_since=first)
    assert found.changes.empty, found.changes[["query_key", "kind", "share_ratio"]]
    assert busy(found.statements, 0)["calls_before"] < 1_000_000


def test_a_quiet_target_s_new_statements_keep_their_first_interval() -> None:
    """A target watched long before the window whose old statements were idle in it: the statements the deploy
    brought are the only rows, first seen at the first scrape after the deploy — created since the scrape before, so
    every call counts (a one-off batch run in that interval alone included)."""
    counters = draw(3, 5, new={0: 5000.0, 1: 3000.0, 2: 2000.0})
    found = impact(counters, DEPLOY, SETTINGS, watched_since=DEPLOY - timedelta(days=3))
    rows = found.statements.set_index("query_key")
    assert (rows["calls_after"] == counters.groupby("query_key")["calls"].max()).all()
    assert (rows["kind"] == "new").all()

    times = DEPLOY + pd.to_timedelta(np.arange(1, 31) * 60, unit="s")
    batch = pd.DataFrame({"query_key": 0, "captured_at": times, "calls": 100_000, "total_exec_time": 5e6})
    steady = pd.DataFrame(
        {"query_key": 1, "captured_at": times, "calls": 10 + 10 * np.arange(30), "total_exec_time": 0.0}
    )
    steady["total_exec_time"] = steady["calls"] * 1.0
    one_off = pd.concat([batch, steady], ignore_index=True).assign(rows=lambda f: f["calls"], dbid=5)
    found = impact(one_off, DEPLOY, SETTINGS, watched_since=DEPLOY - timedelta(days=3))
    assert busy(found.statements, 0)["calls_after"] == 100_000


def test_stopped_and_rows_per_call() -> None:
    counters = draw(50, 4)
    last = counters["captured_at"] > DEPLOY
    keep = ~((counters["query_key"] == 1) & last)
    counters = counters[keep].copy()
    two = counters["query_key"] == 2
    counters.loc[two, "rows"] = (
        counters.loc[two, "calls"]
        .diff()
        .fillna(0)
        .mul(  # 1 row a call before, 10 after
            np.where(counters.loc[two, "captured_at"] > DEPLOY, 10, 1)
        )
        .cumsum()
    )
    statements = impact(counters, DEPLOY, SETTINGS).statements
    assert busy(statements, 1)["kind"] == "stopped"
    row = busy(statements, 2)
    assert row["kind"] == "rows_per_call"
    assert row["rows_per_call_after"] == pytest.approx(10.0) and row["rows_per_call_before"] == pytest.approx(1.0)


def test_summary_per_database_adds_up() -> None:
    found = impact(draw(100, 5), DEPLOY, SETTINGS)
    summary = found.summary.set_index("dbid")
    assert set(summary.index) == {ALL_DATABASES, 5, 7}
    for col in ("exec_ms_per_min_before", "exec_ms_per_min_after", "calls_per_min_after"):
        assert summary.loc[[5, 7], col].sum() == pytest.approx(summary.loc[ALL_DATABASES, col])
    assert summary.loc[ALL_DATABASES, "statements_before"] == 100


def test_contention_names_the_surging_statement() -> None:
    found = impact(draw(300, 6, new={9: 5000.0}), DEPLOY, SETTINGS)
    verdicts = pd.DataFrame(
        {
            "query_key": [3, 4, 5],
            "verdict": ["detected", "detected", "no_regression"],
            "cause": ["unexplained", "more_rows", None],
            "change_at": [DEPLOY + timedelta(minutes=2), DEPLOY, pd.NaT],
        }
    )
    culprits = contention_culprits(verdicts, found, SETTINGS)
    assert culprits.tolist() == [9, None, None]  # more_rows is the statement's own work
    far = verdicts.assign(change_at=[DEPLOY + timedelta(minutes=20), DEPLOY, pd.NaT])
    assert contention_culprits(far, found, SETTINGS).tolist() == [None, None, None]
    # With databases known, only a statement of the detection's own database is named (9 is in database 7).
    other = pd.DataFrame(
        {
            "query_key": [2, 3],
            "dbid": [5, 7],
            "verdict": ["detected", "detected"],
            "cause": ["unexplained", "unexplained"],
            "change_at": [DEPLOY + timedelta(minutes=2)] * 2,
        }
    )
    assert contention_culprits(other, found, SETTINGS).tolist() == [None, 9]


def test_settings_are_validated_and_recorded() -> None:
    assert EngineSettings().to_dict()["surge_ratio"] == 2.0
    assert EngineSettings().to_dict()["new_statement_share"] == 0.05
    for bad in ({"surge_ratio": 0.5}, {"new_statement_share": 0.0}):
        with pytest.raises(ValueError):
            EngineSettings(**bad)


def test_a_rotated_queryid_is_not_new() -> None:
    counters = draw(20, 8).assign(fingerprint=lambda f: f["query_key"])
    rotated = (counters["query_key"] == 3) & (counters["captured_at"] > DEPLOY)
    counters.loc[rotated, "query_key"] = 99  # the same statement under a new queryid after the deploy
    counters.loc[rotated, "calls"] -= counters.loc[rotated, "calls"].min() - 5  # a new entry counts from zero
    statements = impact(counters, DEPLOY, SETTINGS).statements
    assert not (statements["kind"] == "new").any()
    assert len(statements) == 20


def test_row_order_does_not_matter() -> None:
    counters = draw(60, 9, new={4: 30.0}, surge={5: 10.0})
    ordered = impact(counters, DEPLOY, SETTINGS).statements
    shuffled = impact(counters.sample(frac=1.0, random_state=1), DEPLOY, SETTINGS).statements
    columns = ["kind", "calls_before", "calls_after", "exec_ms_per_min_after", "p_value"]
    pd.testing.assert_frame_equal(
        ordered.set_index("query_key").sort_index()[columns], shuffled.set_index("query_key").sort_index()[columns]
    )
    assert busy(ordered, 4)["kind"] == "new" and busy(ordered, 5)["kind"] == "n_plus_one"
