"""query_history on real PostgreSQL: twelve deploys of synthetic counters with known answers.

Three queries run through twelve hourly deploys (windows of ±200 s, scrapes every 10 s, 20 calls each):
- 21 creeps: +8% at every deploy, never enough for the deploy analysis (θ = 20%), ×2 over the last ten deploys;
- 22 steps: ×3 at deploy 6 (detected there), flat before and after;
- 23 stays flat.
"""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import dagster as dg
import numpy as np
import pandas as pd
import pytest
import sqlalchemy as sa

from radar_pipeline.defs.bands.query_history import query_history
from radar_pipeline.defs.resources import AnalysisResource, WarehouseResource
from radar_pipeline.engine import EngineSettings
from radar_pipeline.engine.history import STATE, HistorySettings, extend_history
from radar_pipeline.steps.deploy_analysis import AnalysisRun, analyse_deploy
from radar_pipeline.steps.history import HistoryRefused, history_charts, update_history
from radar_pipeline.warehouse import deploys

from .helpers import hourly_deploy_counters, run_log_text, store_counters

SETTINGS = EngineSettings(window=timedelta(seconds=200), tolerance_floor=timedelta(seconds=10))
ANALYSIS = AnalysisResource(window_seconds=200, scrape_interval_seconds=10, tolerance_floor_seconds=10)
DEPLOYS = 12
LATE = 8  # analysed last, after the deploys that follow it: a backfill out of order
ARTIFACTS = Path("/tmp/radar-test-artifacts")
TEXTS = {21: "SELECT * FROM carts WHERE owner = $1", 22: "SELECT * FROM orders WHERE id = $1", 23: "SELECT 1"}


def level(queryid: int, deploy: int) -> float:
    """The true mean (ms) of the query after deploy `deploy` (before deploy 0: as after it)."""
    deploy = max(deploy, 0)
    return {21: 1.0 * 1.08**deploy, 22: 2.0 if deploy < 6 else 6.0, 23: 0.5}[queryid]


@pytest.fixture
def history(warehouse, warehouse_url, tmp_path, monkeypatch):
    """Twelve analysed deploys; every one but LATE has its points in radar.query_history."""
    monkeypatch.setenv("RADAR_CHART_DIR", str(tmp_path / "charts"))
    start = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=DEPLOYS + 2)
    store_counters(
        warehouse, "main", hourly_deploy_counters(start, np.random.default_rng(2), list(TEXTS), DEPLOYS, level), TEXTS
    )
    ids = [f"h-{d}" for d in range(DEPLOYS)]
    for d, deploy_id in enumerate(ids):
        deploys.record(warehouse, deploys.DeployEvent(deploy_id, "main", start + timedelta(hours=d)))
        analyse_deploy(AnalysisRun(warehouse, SETTINGS), deploy_id)
    with warehouse.begin() as conn:
        for deploy_id in ids:
            if deploy_id != f"h-{LATE}":
                update_history(conn, deploy_id, HistorySettings(), SETTINGS.min_calls)
    return ids


def _points(warehouse) -> pd.DataFrame:
    with warehouse.connect() as conn:
        return pd.read_sql(
            sa.text("SELECT * FROM radar.query_history ORDER BY fingerprint, deployed_at"), conn
        ).set_index(["fingerprint", "deploy_id"])


def test_bands_drift_and_a_backfill_out_of_order(history, warehouse, warehouse_url, tmp_path):
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("deploys", history)
        result = dg.materialize(
            [query_history],
            partition_key=f"h-{LATE}",
            resources={"warehouse": WarehouseResource(url=warehouse_url), "analysis": ANALYSIS},
            instance=instance,
        )
        log = run_log_text(instance, result.run_id)
    assert result.success
    meta = result.asset_materializations_for_node("query_history")[0].metadata
    assert meta["points"].value == 3
    assert meta["later_points_recomputed"].value == 3 * (DEPLOYS - LATE - 1)
    assert meta["drifting"].value == 1 and meta["above_band"].value == 0
    assert "creeping drift: SELECT * FROM carts WHERE owner = $1" in log
    charts = json.loads(json.dumps(meta["charts"].value))
    assert [Path(c).name for c in charts] == [_chart_name(21)] and Path(charts[0]).stat().st_size > 10_000
    assert meta["chart_images"].md_str.startswith("![chart 1](data:image/png;base64,iVBORw0KGgo")  # shown in the UI

    points = _points(warehouse)
    assert len(points) == 3 * DEPLOYS

    step = points.loc[22]
    assert step.loc["h-6", "begins_segment"] and step.loc["h-6", "above_band"]  # detected at deploy 6
    assert step.loc["h-6", "z_score"] > 50
    after = step.loc[[f"h-{d}" for d in range(7, DEPLOYS)]]
    assert (after["segment"] == 1).all() and not after["above_band"].any()
    assert after["centre_ms"].between(5.8, 6.2).all()  # the centre moved with the step at once
    assert (after["spread_ms"] < 0.1).all()  # and the step did not blow the spread up
    assert not step["drift"].any()

    creep = points.loc[21]
    assert not creep["begins_segment"].iloc[1:].any()  # no deploy analysis detected any of the +8% steps
    assert not creep["drift"].iloc[:6].any() and creep["drift"].iloc[6:].all()  # +59% over the first seven
    assert creep["drift_rise"].iloc[-1] == pytest.approx(1.08**9 - 1, rel=0.1)
    assert not points.loc[23, "drift"].any() and not points.loc[23, "above_band"].any()

    # The backfilled deploy's followers were recomputed: the same as every point computed in order.
    fresh = points.reset_index().sort_values(["fingerprint", "deployed_at"], kind="stable")
    redo = extend_history(
        pd.DataFrame(columns=["series", "mean_ms", *STATE]),
        fresh.rename(columns={"fingerprint": "series"})[["series", "mean_ms", "begins_segment"]],
    )
    for column in ("centre_ms", "spread_ms", "z_score", "drift_rise", *STATE):
        np.testing.assert_allclose(fresh[column].to_numpy(float), redo[column].to_numpy(float), rtol=1e-9)

    ARTIFACTS.mkdir(exist_ok=True)
    shutil.copy(charts[0], ARTIFACTS / "history_drift.png")
    with warehouse.begin() as conn:
        stepped = update_history(conn, "h-6", HistorySettings(), SETTINGS.min_calls)  # again: same rows
    with warehouse.connect() as conn:
        drawn = history_charts(conn, stepped, HistorySettings(), ARTIFACTS / "history_band")
    assert sorted(p.name for p in drawn) == [_chart_name(21), _chart_name(22)]  # the step, and the drift by then
    band_chart = ARTIFACTS / "history_band" / _chart_name(22)
    shown = ["mean_ms", "segment", "centre_ms", "spread_ms", "band_ms", "z_score", "above_band"]
    print("\nstepped query 22:\n", step[shown].to_string())
    print(
        "creeping query 21:\n",
        creep[["mean_ms", "centre_ms", "band_ms", "z_score", "drift_rise", "drift_p", "drift"]].to_string(),
    )
    print("charts:", ARTIFACTS / "history_drift.png", band_chart)


def test_a_deploy_without_analysis_is_refused_and_nothing_changes(history, warehouse):
    before = _points(warehouse)
    deploys.record(warehouse, deploys.DeployEvent("h-new", "main", datetime.now(UTC) - timedelta(minutes=1)))
    with warehouse.begin() as conn, pytest.raises(HistoryRefused, match="has not been analysed yet"):
        update_history(conn, "h-new", HistorySettings(), SETTINGS.min_calls)
    with warehouse.begin() as conn, pytest.raises(HistoryRefused, match="is not recorded"):
        update_history(conn, "nope", HistorySettings(), SETTINGS.min_calls)
    pd.testing.assert_frame_equal(_points(warehouse), before)


def test_a_periodic_detection_between_deploys_begins_a_segment(history, warehouse):
    """Query 23 never changes at a deploy; a periodic check that detected a change in it between deploys 9 and 10
    makes deploy 10's point begin a new segment."""
    with warehouse.begin() as conn:
        at = conn.execute(sa.text("SELECT deployed_at FROM radar.deploy_event WHERE deploy_id = 'h-10'")).scalar_one()
        conn.execute(
            sa.text(
                "INSERT INTO radar.analysis (deploy_id, target, settings, engine_version, window_start, window_end, "
                "queries, detected, no_regression, insufficient_data) "
                "VALUES ('periodic:x', 'main', '{}', '1', :at - interval '2 hours', :at, 1, 1, 0, 0)"
            ),
            {"at": at},
        )
        conn.execute(
            sa.text(
                "INSERT INTO radar.verdict (deploy_id, target, dbid, userid, queryid, toplevel, fingerprint, verdict, "
                "reason, change_at, n_before, n_after, calls_before, calls_after) "
                "VALUES ('periodic:x', 'main', 5, 10, 23, true, 23, 'detected', 'significant', "
                ":at - interval '30 minutes', 10, 10, 100, 100)"
            ),
            {"at": at},
        )
        update_history(conn, f"h-{LATE}", HistorySettings(), SETTINGS.min_calls)  # recomputes 9, 10 and 11
    flat = _points(warehouse).loc[23]
    assert flat["begins_segment"].tolist() == [True] + [False] * 9 + [True, False]
    assert flat.loc["h-10", "segment"] == 1 and flat.loc["h-11", "centre_ms"] == flat.loc["h-10", "mean_ms"]


def test_a_periodic_detection_before_the_newest_point_begins_its_segment(history, warehouse):
    """The usual order: the periodic check detected a change in query 23 between deploys 10 and 11, and deploy 11's
    points are added with none after them."""
    with warehouse.begin() as conn:
        at = conn.execute(sa.text("SELECT deployed_at FROM radar.deploy_event WHERE deploy_id = 'h-11'")).scalar_one()
        conn.execute(
            sa.text(
                "INSERT INTO radar.analysis (deploy_id, target, settings, engine_version, window_start, window_end, "
                "queries, detected, no_regression, insufficient_data) "
                "VALUES ('periodic:y', 'main', '{}', '1', :at - interval '2 hours', :at, 1, 1, 0, 0)"
            ),
            {"at": at},
        )
        conn.execute(
            sa.text(
                "INSERT INTO radar.verdict (deploy_id, target, dbid, userid, queryid, toplevel, fingerprint, verdict, "
                "reason, change_at, n_before, n_after, calls_before, calls_after) "
                "VALUES ('periodic:y', 'main', 5, 10, 23, true, 23, 'detected', 'significant', "
                ":at - interval '30 minutes', 10, 10, 100, 100)"
            ),
            {"at": at},
        )
        update = update_history(conn, "h-11", HistorySettings(), SETTINGS.min_calls)
    assert update.recomputed == 0
    assert _points(warehouse).loc[(23, "h-11"), "begins_segment"]


def test_each_database_user_and_level_has_its_own_history(warehouse):
    """Two tenants' statements share a fingerprint: each is a query of its own, never one series."""
    at = datetime(2026, 11, 29, 12, tzinfo=UTC)
    deploys.record(warehouse, deploys.DeployEvent("tenants", "main", at), configured_targets=["main"])
    with warehouse.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO radar.analysis (deploy_id, target, settings, engine_version, window_start, window_end, "
                "queries, detected, no_regression, insufficient_data) VALUES ('tenants', 'main', '{}', '1', "
                ":lo, :hi, 3, 0, 3, 0)"
            ),
            {"lo": at - timedelta(minutes=30), "hi": at + timedelta(minutes=30)},
        )
        for dbid, queryid, toplevel, mean in ((5, 1, True, 1.0), (6, 2, True, 3.0), (5, 3, False, 9.0)):
            conn.execute(
                sa.text(
                    "INSERT INTO radar.verdict (deploy_id, target, dbid, userid, queryid, toplevel, fingerprint, "
                    "verdict, reason, mean_after_ms, n_before, n_after, calls_before, calls_after) VALUES "
                    "('tenants', 'main', :d, 10, :q, :l, 42, 'no_regression', 'below_threshold', :m, 30, 30, 500, 500)"
                ),
                {"d": dbid, "q": queryid, "l": toplevel, "m": mean},
            )
        update = update_history(conn, "tenants", HistorySettings(), 100)
    points = update.points.set_index("queryid")
    assert sorted(points.index) == [1, 2, 3]
    assert (points["points"] == 1).all() and (points["seg_points"] == 1).all()
    assert points.loc[2, "seg_mean_ms"] == 3.0 and points.loc[3, "seg_mean_ms"] == 9.0


def _chart_name(queryid: int) -> str:
    """A history chart's file name: named by the whole statement key (store_counters' dbid 5, userid 10, top level)."""
    return f"history-5-10-{queryid}-top.png"
