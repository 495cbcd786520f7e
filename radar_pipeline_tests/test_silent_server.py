"""A watched server that goes silent after the start-up (a frozen VM, a stuck pooler, a half-open connection) never
hangs radar: snapshots, plan capture and an analysis's live plan capture each end within the collector's client-side
bound, the target failed with a reason that names it and shows no password, the other targets served.

The server is real; the silence is silent_proxy's. The bound is shortened to CALL_BOUND_S so the tests are quick;
each test also has a deadline of its own, after which it releases the proxy (so a hung call ends) and fails.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TypeVar

import dagster as dg
import numpy as np
import pytest
import sqlalchemy as sa
import yaml

from radar_pipeline import plan_shape
from radar_pipeline.collector import session
from radar_pipeline.config import Target
from radar_pipeline.defs.deploys import deploy_verdicts
from radar_pipeline.defs.plans import plan_snapshots
from radar_pipeline.defs.resources import AnalysisResource, TargetsResource, WarehouseResource
from radar_pipeline.defs.snapshots import ALL_TARGETS_CHECK, MAX_RUNTIME_TAG, pgss_snapshot_job, pgss_snapshots
from radar_pipeline.warehouse import deploys
from radar_pipeline.warehouse import plans as stored_plans

from .helpers import hourly_deploy_counters, run, run_log_text, store_counters
from .silent_proxy import SilentProxy

CALL_BOUND_S = 2.0
DEADLINE_S = 120.0  # the test's own: far past the bound (and a loaded machine's slowness), far short of forever
PASSWORD = "s3cret-pw"
ON_PG18 = pytest.mark.parametrize("server", ["pg18"], indirect=True)
T = TypeVar("T")


@pytest.fixture(autouse=True)
def short_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(session, "CALL_TIMEOUT_S", CALL_BOUND_S)


def _within(proxy: SilentProxy, call: Callable[[], T]) -> T:
    """call(), failing the test if it is still going after DEADLINE_S (the proxy is then released, so it ends)."""
    timer = threading.Timer(DEADLINE_S, proxy.release)
    timer.start()
    started = time.monotonic()
    try:
        result = call()
    finally:
        timer.cancel()
    elapsed = time.monotonic() - started
    assert elapsed < DEADLINE_S, f"the call hung: it ended only when the test released the proxy after {elapsed:.0f} s"
    assert proxy.silenced.is_set(), "the proxy never went silent: the test tested nothing"
    return result


def _reason_names_the_target(reason: str, name: str) -> None:
    assert f"target {name!r}" in reason and f"no answer within {CALL_BOUND_S:g} s" in reason, reason
    assert PASSWORD not in reason


@ON_PG18
def test_a_silent_target_fails_its_snapshot_on_time_and_the_others_are_stored(app_db, warehouse_url, warehouse):
    server, target = app_db
    run(target, "SELECT count(*) FROM items WHERE grp = %s", 3, (1,))
    with SilentProxy("127.0.0.1", server.pg.port) as proxy, dg.instance_for_test() as instance:
        frozen = proxy.target(Target("frozen", target.dsn), PASSWORD)
        result = _within(
            proxy,
            lambda: dg.materialize(
                [pgss_snapshots],
                resources={
                    "warehouse": WarehouseResource(url=warehouse_url),
                    "targets": TargetsResource(spec=f"{target.name}={target.dsn} frozen={frozen.dsn}"),
                },
                instance=instance,
                raise_on_error=False,
            ),
        )
        text = run_log_text(instance, result.run_id)
    assert result.success
    mat = result.asset_materializations_for_node("pgss_snapshots")[0]
    failed = mat.metadata["failed_targets"].value
    assert list(failed) == ["frozen"]
    _reason_names_the_target(failed["frozen"], "frozen")
    (check,) = result.get_asset_check_evaluations()
    assert check.check_name == ALL_TARGETS_CHECK and check.passed is False
    with warehouse.connect() as conn:
        stored = dict(conn.execute(sa.text("SELECT target, count(*) FROM radar.pgss_snapshot GROUP BY target")).all())
    assert stored.get(target.name, 0) > 0 and "frozen" not in stored
    assert "target 'frozen' was not scraped" in text and PASSWORD not in text


@ON_PG18
def test_a_silent_target_fails_plan_capture_on_time(app_db, warehouse_url):
    server, target = app_db
    with SilentProxy("127.0.0.1", server.pg.port) as proxy, dg.instance_for_test() as instance:
        frozen = proxy.target(Target("frozen", target.dsn), PASSWORD)
        result = _within(
            proxy,
            lambda: dg.materialize(
                [plan_snapshots],
                resources={
                    "warehouse": WarehouseResource(url=warehouse_url),
                    "targets": TargetsResource(spec=f"{target.name}={target.dsn} frozen={frozen.dsn}"),
                },
                instance=instance,
                raise_on_error=False,
            ),
        )
        text = run_log_text(instance, result.run_id)
    assert result.success
    meta = result.asset_materializations_for_node("plan_snapshots")[0].metadata
    failed = meta["failed_targets"].value
    assert list(failed) == ["frozen"]
    _reason_names_the_target(failed["frozen"], "frozen")
    assert target.name in meta["unavailable_targets"].value  # the healthy one answered (a superuser: refused)
    assert "target 'frozen': plans not captured" in text and PASSWORD not in text


@ON_PG18
def test_an_analysis_gives_up_on_a_silent_target_s_live_plan_within_the_bound(app_db, warehouse, warehouse_url):
    """The deploy's window has closed, but not the plans' reach: the slowed statement's plan after the change is
    captured live, from a target that went silent. The analysis (which holds the radar/analysis pool) ends on time,
    its verdicts stored, the plan diff saying why there is no plan after the change."""
    server, target = app_db
    texts = {21: "SELECT * FROM carts WHERE owner = $1", 22: "SELECT * FROM orders WHERE id = $1"}
    at = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=240)  # the window (±200 s) closed 40 s ago
    counters = hourly_deploy_counters(
        at, np.random.default_rng(5), list(texts), 1, lambda q, d: 3.0 if q == 22 and d >= 0 else 1.0
    )
    store_counters(warehouse, "main", counters, texts)
    plan = {"Plan": {"Node Type": "Index Scan", "Relation Name": "orders", "Index Name": "orders_pkey"}}
    before = ("generic_plan", plan_shape.plan_hash(plan), "Index Scan using orders_pkey on orders", 8.0, plan)
    with warehouse.begin() as conn:
        stored_plans.store(conn, "main", at - timedelta(seconds=150), {(5, 10, 22, True): before}, {})
    deploys.record(warehouse, deploys.DeployEvent("silent-1", "main", at))

    with SilentProxy("127.0.0.1", server.pg.port) as proxy, dg.instance_for_test() as instance:
        frozen = proxy.target(Target("main", target.dsn), PASSWORD)
        instance.add_dynamic_partitions("deploys", ["silent-1"])
        result = _within(
            proxy,
            lambda: dg.materialize(
                [deploy_verdicts],
                partition_key="silent-1",
                resources={
                    "warehouse": WarehouseResource(url=warehouse_url),
                    "analysis": AnalysisResource(
                        window_seconds=200, scrape_interval_seconds=10, tolerance_floor_seconds=30
                    ),
                    "targets": TargetsResource(spec=f"main={frozen.dsn}"),
                },
                instance=instance,
                raise_on_error=False,
            ),
        )
        text = run_log_text(instance, result.run_id)
    assert result.success
    (mat,) = result.asset_materializations_for_node("deploy_verdicts")
    assert mat.metadata["detected"].value == 1
    (diff,) = mat.metadata["plan_diffs"].value.values()
    assert diff["unavailable"].startswith("no plan after the change: none could be captured now: ")
    _reason_names_the_target(diff["unavailable"], "main")
    assert PASSWORD not in text


def test_snapshot_runs_carry_a_max_runtime_that_run_monitoring_enforces():
    """The second line of defence: the daemon ends a snapshot run past its dagster/max_runtime, in the shipped
    dagster.yaml, the embedded default's and the Helm values alike."""
    from radar_pipeline.demo.environment import INSTANCE_YAML

    root = Path(__file__).resolve().parents[1]
    assert int(pgss_snapshot_job.tags[MAX_RUNTIME_TAG]) <= 300
    for instance in (yaml.safe_load((root / "dagster.yaml").read_text()), yaml.safe_load(INSTANCE_YAML)):
        assert instance["run_monitoring"]["enabled"] is True
    values = yaml.safe_load((root / "deploy" / "helm" / "values.yaml").read_text())
    assert values["dagsterDaemon"]["runMonitoring"]["enabled"] is True
