"""Noise sums per statement and day (sql/0014, steps/noise.py): computed once per ended day from the stored samples,
read back for an analysis with one query over the days before its window only, given to the engine by the deploy
analysis, and dropped by retention."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import dagster as dg
import numpy as np
import pandas as pd
import sqlalchemy as sa

from radar_pipeline.defs.deploys.deploy_verdicts import deploy_verdicts
from radar_pipeline.defs.resources import AnalysisResource, TargetsResource, WarehouseResource
from radar_pipeline.engine import EngineSettings, analyse
from radar_pipeline.engine.noise import noise_sums
from radar_pipeline.steps.deploy_analysis import AnalysisRun, analyse_deploy
from radar_pipeline.steps.noise import prior_for, update_noise
from radar_pipeline.steps.retention import apply_retention
from radar_pipeline.warehouse import deploys
from radar_pipeline.warehouse import noise as store
from radar_pipeline.warehouse.analysis import read_window

from .helpers import store_counters

TODAY = datetime.now(UTC).date()
FIRST = datetime.combine(TODAY - timedelta(days=2), datetime.min.time(), tzinfo=UTC)  # a whole ended day
DEPLOY = FIRST + timedelta(days=1, hours=12)  # the next day, also ended
QUERIES = {1: 0.8, 2: 0.0, 3: 0.5}  # queryid: AR(1) φ of its interval means


def _counters(seed: int = 7) -> pd.DataFrame:
    """One-minute scrapes of three statements through FIRST's day and the hour around DEPLOY: 40 calls an interval,
    means 3 ms × AR(1) noise (10%); queryid 1 steps ×3 one minute after the deploy."""
    rng = np.random.default_rng(seed)
    times = [FIRST + timedelta(minutes=i) for i in range(1441)]
    times += [DEPLOY + timedelta(minutes=i) for i in range(-30, 31)]
    rows = []
    for queryid, phi in QUERIES.items():
        noise, calls, total = 0.0, 1_000, 3_000.0
        for at in times:
            noise = phi * noise + np.sqrt(1 - phi**2) * rng.normal(0, 0.1)
            step = 3.0 if queryid == 1 and at > DEPLOY + timedelta(minutes=1) else 1.0
            calls, total = calls + 40, total + 40 * 3.0 * step * np.exp(noise)
            rows.append((queryid, at, calls, total))
    return pd.DataFrame(rows, columns=["queryid", "captured_at", "calls", "total_exec_time"])


def test_noise_sums_are_stored_per_ended_day_and_read_from_the_days_before_the_window(warehouse):
    counters = _counters()
    store_counters(warehouse, "main", counters, {q: f"SELECT {q}" for q in QUERIES})

    done = update_noise(warehouse, grace=timedelta(0))
    assert [(d.target, d.day, d.error) for d in done] == [
        ("main", FIRST.date().isoformat(), None),
        ("main", DEPLOY.date().isoformat(), None),
    ]
    assert [d.statements for d in done] == [3, 3]
    assert update_noise(warehouse, grace=timedelta(0)) == []  # each day once

    # The stored sums of the first day are the engine's, from the same counters.
    first_day = counters[counters["captured_at"] <= FIRST + timedelta(days=1)].rename(columns={"queryid": "query_key"})
    expected = noise_sums(first_day, pd.Timestamp(FIRST), pd.Timestamp(FIRST + timedelta(days=1))).set_index(
        "query_key"
    )
    lo = DEPLOY - timedelta(minutes=30)
    with warehouse.connect() as conn:
        stored = store.read_before(conn, "main", lo, days=7).set_index("queryid").sort_index()
        # No peeking: a window on the first day reads nothing of that day, nor of the deploy's.
        assert store.read_before(conn, "main", FIRST + timedelta(hours=20), days=7).empty
        window = read_window(conn, "main", lo, DEPLOY + timedelta(minutes=30))
        history = prior_for(conn, "main", lo, window.keys)
    pd.testing.assert_frame_equal(
        stored[expected.columns], expected, check_dtype=False, check_names=False, check_index_type=False
    )
    assert history is not None and sorted(history["query_key"]) == sorted(window.keys.index)
    by_query = history.assign(queryid=window.keys.loc[history["query_key"], "queryid"].to_numpy()).set_index("queryid")
    assert by_query.loc[1, "serial_correlation"] > by_query.loc[2, "serial_correlation"] + 0.3
    assert (by_query["intervals"] == 1440).all()

    # The deploy analysis gives them to the engine: its verdicts are those of analyse with this history.
    deploys.record(warehouse, deploys.DeployEvent("rel-noise", "main", DEPLOY))
    result = analyse_deploy(AnalysisRun(warehouse, EngineSettings()), "rel-noise")
    verdicts = result.verdicts.set_index("queryid").sort_index()
    expected_verdicts = analyse(window.counters, DEPLOY, EngineSettings(), prior=history)
    expected_verdicts.index = window.keys.loc[expected_verdicts["query_key"], "queryid"].to_numpy()
    alone = analyse(window.counters, DEPLOY, EngineSettings())
    alone.index = expected_verdicts.index
    assert verdicts.loc[1, "verdict"] == "detected"
    assert verdicts.loc[1, "dof"] == expected_verdicts.loc[1, "dof"] != alone.loc[1, "dof"]
    assert verdicts.loc[1, "p_value"] == expected_verdicts.loc[1, "p_value"]

    # Retention drops the sums with their day.
    apply_retention(warehouse, keep_days=1, today=TODAY)
    with warehouse.connect() as conn:
        days = conn.execute(sa.text("SELECT DISTINCT day FROM radar.statement_noise ORDER BY 1")).scalars().all()
        marked = conn.execute(sa.text("SELECT day FROM radar.statement_noise_day ORDER BY 1")).scalars().all()
    assert days == marked == [DEPLOY.date()]


def test_the_history_a_test_used_is_stored_with_its_verdict_and_shown(warehouse, warehouse_url):
    # Seeded so that the split tested is one where the window agrees with its history (with seed 7 it is not: the
    # split an interval late, whose window conflicts with the history, has the largest t there).
    store_counters(warehouse, "main", _counters(seed=1), {q: f"SELECT {q}" for q in QUERIES})
    update_noise(warehouse, grace=timedelta(0))
    deploys.record(warehouse, deploys.DeployEvent("rel-shown", "main", DEPLOY))
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("deploys", ["rel-shown"])
        result = dg.materialize(
            [deploy_verdicts],
            partition_key="rel-shown",
            resources={
                "warehouse": WarehouseResource(url=warehouse_url),
                "analysis": AnalysisResource(),
                "targets": TargetsResource(spec=""),  # no watched server here: no plans captured
            },
            instance=instance,
        )
    assert result.success
    with warehouse.connect() as conn:
        stored = pd.read_sql(
            sa.text("SELECT queryid, reason, t_stat, history_intervals FROM radar.verdict WHERE deploy_id = :d"),
            conn,
            params={"d": "rel-shown"},
        ).set_index("queryid")
        shown = conn.execute(
            sa.text("SELECT queryid, history_intervals FROM radar.regression WHERE deploy_id = 'rel-shown'")
        ).all()
    # The stepped statement was tested with its whole day of history (1,440 one-minute intervals, the cap); the
    # others stopped before any split was tested, and say so with a null.
    assert stored.loc[1, "reason"] == "significant" and stored.loc[1, "history_intervals"] == 1440
    untested = stored["t_stat"].isna()
    assert untested.sum() == 2 and stored.loc[untested, "history_intervals"].isna().all()
    assert [tuple(r) for r in shown] == [(1, 1440)]
    detections = result.asset_materializations_for_node("deploy_verdicts")[0].metadata["detections"]
    assert isinstance(detections, dg.TableMetadataValue)
    assert [(r.data["queryid"], r.data["history_intervals"]) for r in detections.records] == [("1", 1440)]


def test_without_stored_sums_the_analysis_runs_on_its_window_alone(warehouse):
    counters = _counters(seed=8)
    store_counters(warehouse, "main", counters, {q: f"SELECT {q}" for q in QUERIES})
    lo = DEPLOY - timedelta(minutes=30)
    with warehouse.connect() as conn:
        window = read_window(conn, "main", lo, DEPLOY + timedelta(minutes=30))
        assert prior_for(conn, "main", lo, window.keys) is None
    deploys.record(warehouse, deploys.DeployEvent("rel-alone", "main", DEPLOY))
    result = analyse_deploy(AnalysisRun(warehouse, EngineSettings()), "rel-alone")
    alone = analyse(window.counters, DEPLOY, EngineSettings())
    np.testing.assert_array_equal(
        result.verdicts.sort_values("query_key")["p_value"].to_numpy(),
        alone.sort_values("query_key")["p_value"].to_numpy(),
    )


def test_a_day_is_read_in_chunks_of_whole_blocks():
    """_update_day adds up a day's chunks: that is the day's sums only while no block straddles a chunk's edge."""
    from radar_pipeline.engine.noise import BLOCK
    from radar_pipeline.steps.noise import CHUNK

    assert CHUNK % BLOCK == timedelta(0) and timedelta(days=1) % CHUNK == timedelta(0)
