"""A watched server that goes silent after the start-up (a frozen VM, a stuck pooler, a half-open connection) never
hangs radar: snapshots, plan capture and an analysis's live plan capture each end within the collector's client-side
bound, the target failed with a reason that names it and shows no password, the other targets served. One that
answers every call slowly (overloaded) holds an analysis or a plan capture no longer than its deadline.

The servers are real; the silence and the slowness are silent_proxy's. The call bound is shortened to CALL_BOUND_S,
for the silent proxy's connections only (a healthy target keeps the real bound), so the tests are quick; each test
also has a deadline of its own, after which it releases the proxy (so a hung call ends) and fails.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TypeVar
from urllib.parse import urlsplit

import dagster as dg
import numpy as np
import psycopg
import pytest
import sqlalchemy as sa
import yaml

from radar_pipeline import plan_shape
from radar_pipeline.collector import session
from radar_pipeline.config import Target
from radar_pipeline.defs.collection.plans import plan_snapshot_job, plan_snapshots
from radar_pipeline.defs.collection.snapshots import (
    ALL_TARGETS_CHECK,
    MAX_RUNTIME_TAG,
    pgss_snapshot_job,
    pgss_snapshots,
)
from radar_pipeline.defs.deploys.deploy_verdicts import deploy_verdicts
from radar_pipeline.defs.resources import AnalysisResource, TargetsResource, WarehouseResource
from radar_pipeline.steps import plan_capture, plan_diffs
from radar_pipeline.steps.plan_diffs import OUT_OF_TIME
from radar_pipeline.warehouse import deploys
from radar_pipeline.warehouse import plans as stored_plans

from .helpers import collector_target, hourly_deploy_counters, run, run_log_text, store_counters
from .silent_proxy import SilentProxy, SlowProxy

CALL_BOUND_S = 2.0
REAL_BOUND_S = session.CALL_TIMEOUT_S
DEADLINE_S = 120.0  # the test's own: far past the bound (and a loaded machine's slowness), far short of forever
PASSWORD = "s3cret-pw"
ON_PG18 = pytest.mark.parametrize("server", ["pg18"], indirect=True)
T = TypeVar("T")


SILENT_PORTS: set[int] = set()  # the silent proxies' ports: connections to them get CALL_BOUND_S


@pytest.fixture(autouse=True)
def short_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    SILENT_PORTS.clear()  # this test's proxies only (a port may come again)
    connect = session.connect

    def bounded(target: Target, call_timeout: float | None = None) -> session.BoundedConnection:
        if call_timeout is None and urlsplit(target.dsn).port in SILENT_PORTS:
            call_timeout = CALL_BOUND_S
        return connect(target, call_timeout)

    monkeypatch.setattr(session, "connect", bounded)


def _within(proxy: SilentProxy, call: Callable[[], T]) -> T:
    """call(), failing the test if it is still going after DEADLINE_S (the proxy is then released, so it ends); a
    silent proxy's connections get the short bound."""
    if not isinstance(proxy, SlowProxy):
        SILENT_PORTS.add(proxy.port)
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


@ON_PG18
def test_only_the_silent_proxy_s_connections_get_the_short_bound(app_db):
    """A healthy target keeps the collector's real bound in these tests, so a slow moment of a loaded machine on it
    cannot fail them."""
    server, target = app_db
    with SilentProxy("127.0.0.1", server.pg.port) as proxy:
        SILENT_PORTS.add(proxy.port)
        with session.connect(proxy.target(target, PASSWORD)) as frozen, session.connect(target) as healthy:
            assert (frozen.call_timeout, healthy.call_timeout) == (CALL_BOUND_S, REAL_BOUND_S)


def _reason_names_the_target(reason: str, name: str) -> None:
    assert f"target {name!r}" in reason and f"no answer within {CALL_BOUND_S:g} s" in reason, reason
    assert PASSWORD not in reason


@ON_PG18
def test_a_silent_target_fails_its_snapshot_on_time_and_the_others_are_stored(app_db, warehouse_url, warehouse):
    server, target = app_db
    run(target, "SELECT count(*) FROM items WHERE grp = %s", 3, (1,))
    with SilentProxy("127.0.0.1", server.pg.port) as proxy, dg.instance_for_test() as instance:
        frozen = proxy.target(Target("frozen", target.dsn), PASSWORD)
        result = _collect(
            proxy, instance, pgss_snapshots, f"{target.name}={target.dsn} frozen={frozen.dsn}", warehouse_url
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
        result = _collect(
            proxy, instance, plan_snapshots, f"{target.name}={target.dsn} frozen={frozen.dsn}", warehouse_url
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
        result = _analyse(proxy, instance, "silent-1", frozen, warehouse_url)
        text = run_log_text(instance, result.run_id)
    assert result.success
    (mat,) = result.asset_materializations_for_node("deploy_verdicts")
    assert mat.metadata["detected"].value == 1
    (diff,) = [row.data for row in mat.metadata["plan_diffs"].value.records]
    assert diff["unavailable"].startswith("no plan after the change: none could be captured now: ")
    _reason_names_the_target(diff["unavailable"], "main")
    assert PASSWORD not in text


SLOW_S = 1.0  # each answer of the slow server: far inside the call bound, so no call ever times out
SLOW_DEADLINE_S = 10.0  # the work's deadline in these tests (the real ones are minutes): a few statements' worth
SLOW_STATEMENTS = 30  # each one call (plan capture) or four (analysis): far more than SLOW_DEADLINE_S holds


def _slow_statements(server, target: Target, warehouse, name: str) -> tuple[Target, dict[int, str], datetime]:  # type: ignore[no-untyped-def]
    """Statements over the app's table, stored as the collector would for target `name` in the app's database,
    slowed at a deploy whose window (±200 s) closed 40 s ago, each with a plan stored before it; and the collector's
    role (plans are never made as a superuser)."""
    collector = collector_target(target)
    with psycopg.connect(target.dsn, autocommit=True) as conn:
        dbid = int(conn.execute("SELECT oid FROM pg_database WHERE datname = current_database()").fetchone()[0])
    texts = {40 + n: f"SELECT payload FROM items WHERE id = $1 AND grp = {n}" for n in range(SLOW_STATEMENTS)}
    at = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=240)
    counters = hourly_deploy_counters(at, np.random.default_rng(7), list(texts), 1, lambda q, d: 3.0 if d >= 0 else 1.0)
    store_counters(warehouse, name, counters, texts, dbid=dbid)
    plan = {"Plan": {"Node Type": "Index Scan", "Relation Name": "items", "Index Name": "items_pkey"}}
    before = ("generic_plan", plan_shape.plan_hash(plan), "Index Scan using items_pkey on items", 8.0, plan)
    with warehouse.begin() as conn:
        stored = {(dbid, 10, q, True): before for q in texts}
        stored_plans.store(conn, name, at - timedelta(seconds=150), stored, {})
    return collector, texts, at


@ON_PG18
def test_an_analysis_on_a_slow_target_ends_its_live_work_at_its_deadline_and_says_so(
    app_db, warehouse, warehouse_url, monkeypatch
):
    """Every answer of the watched server comes a second late, inside the call bound: each detection's shared-queryid
    check and live plan capture (a few calls each) would go on for all of them, holding the radar/analysis pool.
    The analysis's live work stops at its deadline; the detections left say the time ran out, their queryids not
    checked."""
    server, target = app_db
    collector, texts, at = _slow_statements(server, target, warehouse, "main")
    deploys.record(warehouse, deploys.DeployEvent("slow-1", "main", at))
    monkeypatch.setattr(plan_diffs, "LIVE_DEADLINE_S", SLOW_DEADLINE_S)

    with SlowProxy("127.0.0.1", server.pg.port, SLOW_S) as proxy, dg.instance_for_test() as instance:
        slow = proxy.target(collector, PASSWORD)
        result = _analyse(proxy, instance, "slow-1", slow, warehouse_url)
        text = run_log_text(instance, result.run_id)
    assert result.success
    (mat,) = result.asset_materializations_for_node("deploy_verdicts")
    assert mat.metadata["detected"].value == SLOW_STATEMENTS
    # The deadline, then at most one call in flight (one answer late) and the analysis's own warehouse work.
    assert mat.metadata["plans_s"].value < SLOW_DEADLINE_S + SLOW_S + 10, mat.metadata["plans_s"].value
    ran_out = f"no plan after the change: none could be captured now: {OUT_OF_TIME.format(SLOW_DEADLINE_S)}"
    with warehouse.connect() as conn:
        rows = conn.execute(
            sa.text("SELECT queryid, plan_diff, queryid_shared_with FROM radar.regression WHERE deploy_id = 'slow-1'")
        ).all()
    assert {q for q, _, _ in rows} == set(texts)
    late = [(diff, shared) for _, diff, shared in rows if diff.get("unavailable") == ran_out]
    assert len(late) > SLOW_STATEMENTS // 2, [diff for _, diff, _ in rows]
    assert all(shared is None for _, shared in late)  # not checked, not "shared with none"
    done = [diff for _, diff, shared in rows if shared == []]  # the first, within the time: checked and captured
    assert done and all("summary" in diff and "queryid_not_checked" not in diff for diff in done), done
    assert "the time given to the watched server ran out" in text and PASSWORD not in text


@ON_PG18
def test_plan_capture_on_a_slow_target_ends_at_its_deadline_and_says_so(app_db, warehouse, warehouse_url, monkeypatch):
    """Every answer of the watched server comes a second late: planning each of its busiest statements (one EXPLAIN
    each) would go on for all of them. The capture stops at its deadline, stores what it planned and says how many
    statements were left, remembering none of them as unplannable."""
    server, target = app_db
    collector, texts, _ = _slow_statements(server, target, warehouse, "slow")
    monkeypatch.setattr(plan_capture, "CAPTURE_DEADLINE_S", SLOW_DEADLINE_S)
    with SlowProxy("127.0.0.1", server.pg.port, SLOW_S) as proxy, dg.instance_for_test() as instance:
        slow = proxy.target(collector, PASSWORD)
        result = _collect(proxy, instance, plan_snapshots, f"slow={slow.dsn}", warehouse_url)
        text = run_log_text(instance, result.run_id)
    assert result.success
    meta = result.asset_materializations_for_node("plan_snapshots")[0].metadata
    assert meta["duration_s"].value < SLOW_DEADLINE_S + SLOW_S + 10, meta["duration_s"].value
    (row,) = [r.data for r in meta["targets"].value.records]
    assert row["source"] == "generic_plan" and 0 < meta["out_of_time"].value <= SLOW_STATEMENTS
    assert row["tried"] + meta["out_of_time"].value == SLOW_STATEMENTS
    out_of_time = f"{meta['out_of_time'].value} of {SLOW_STATEMENTS} not planned: the time given to the watched"
    assert out_of_time in row["note"] and out_of_time in text and PASSWORD not in text
    assert meta["skipped"].value == 0  # nothing remembered as unplannable for a day


def test_snapshot_and_plan_runs_carry_a_max_runtime_that_run_monitoring_enforces():
    """The second line of defence: the daemon ends a snapshot run past its dagster/max_runtime, and a plan capture
    run before the next is due, in the shipped dagster.yaml, the embedded default's and the Helm values alike."""
    from radar_pipeline.demo.environment import INSTANCE_YAML

    root = Path(__file__).resolve().parents[1]
    assert int(pgss_snapshot_job.tags[MAX_RUNTIME_TAG]) <= 300
    # the capture's deadline, then a target's connect, plan source and one call's bound, all within 10 minutes
    assert plan_capture.CAPTURE_DEADLINE_S + 120 < int(plan_snapshot_job.tags[MAX_RUNTIME_TAG]) < 600
    for instance in (yaml.safe_load((root / "dagster.yaml").read_text()), yaml.safe_load(INSTANCE_YAML)):
        assert instance["run_monitoring"]["enabled"] is True
    values = yaml.safe_load((root / "deploy" / "helm" / "values.yaml").read_text())
    assert values["dagsterDaemon"]["runMonitoring"]["enabled"] is True


def _analyse(
    proxy: SilentProxy, instance: dg.DagsterInstance, deploy_id: str, target: Target, warehouse_url: str
) -> dg.ExecuteInProcessResult:
    """The deploy's analysis through Dagster, with `target` (behind `proxy`) as its watched server, within the
    proxy's bound."""
    instance.add_dynamic_partitions("deploys", [deploy_id])
    return _within(
        proxy,
        lambda: dg.materialize(
            [deploy_verdicts],
            partition_key=deploy_id,
            resources={
                "warehouse": WarehouseResource(url=warehouse_url),
                "analysis": AnalysisResource(
                    window_seconds=200, scrape_interval_seconds=10, tolerance_floor_seconds=30
                ),
                "targets": TargetsResource(spec=f"main={target.dsn}"),
            },
            instance=instance,
            raise_on_error=False,
        ),
    )


def _collect(
    proxy: SilentProxy, instance: dg.DagsterInstance, asset: dg.AssetsDefinition, spec: str, warehouse_url: str
) -> dg.ExecuteInProcessResult:
    """A collection asset (snapshots or plans) through Dagster over the targets of `spec`, within the proxy's bound."""
    return _within(
        proxy,
        lambda: dg.materialize(
            [asset],
            resources={"warehouse": WarehouseResource(url=warehouse_url), "targets": TargetsResource(spec=spec)},
            instance=instance,
            raise_on_error=False,
        ),
    )
