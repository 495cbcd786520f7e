"""A real deploy on real PostgreSQL with compressed time: snapshots, the sensor, deploy_verdicts and the verdicts.

Three probe functions run between snapshots taken every SCRAPE seconds (slower on a loaded machine: the window then
grows to hold as many scrapes, from their recorded times). At the deploy, probe_slow is replaced by a
body that sleeps eight times longer (measured: about 5×, since a short sleep overshoots by a fixed amount),
probe_rot is dropped and recreated unchanged (its queryid rotates, its text does not), and probe_ctl is left alone.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import pairwise

import dagster as dg
import pandas as pd
import psycopg
import pytest
import sqlalchemy as sa

from radar_pipeline.config import Target
from radar_pipeline.defs.deploys.deploy_verdicts import (
    deploy_event_sensor,
    deploy_verdicts,
    deploys_partitions,
)
from radar_pipeline.defs.resources import AnalysisResource, TargetsResource, WarehouseResource
from radar_pipeline.steps.deploy_analysis import AnalysisRefused, AnalysisRun, analyse_deploy
from radar_pipeline.warehouse import deploys
from radar_pipeline.warehouse.database import make_engine

from .helpers import drive, run_log_text, tolerance_covering, window_covering

SCRAPE = 0.25  # seconds between snapshots when the machine keeps up
WINDOW = 5.0  # nominal seconds each side of the deploy: 20 samples (longer when scrapes came slower: see scenario)
SAMPLES = 20  # scrape intervals each side of the deploy, whatever the machine's load
CALLS = 8  # calls of each probe per scrape interval: 160 per window
WEEK = timedelta(days=7)
PROBE = "CREATE FUNCTION {name}(k int) RETURNS int LANGUAGE sql AS $$ SELECT k FROM pg_sleep({sleep}) $$"


@dataclass
class Scenario:
    warehouse_url: str
    engine: sa.Engine
    target: Target
    deploy_id: str
    deployed_at: datetime
    queryids: dict[str, int]  # probe → queryid (probe_rot_old: before the rotation)
    window: float  # seconds each side of the deploy holding SAMPLES scrape intervals (WINDOW when on time)
    tolerance: float  # seconds around the deploy reaching the scrapes either side (1 when on time)
    scrapes: list[datetime]  # captured_at of every scrape taken, in order

    @property
    def analysis(self) -> AnalysisResource:
        """The analysis settings of this scenario: its window, the nominal scrape interval."""
        return AnalysisResource(
            window_seconds=self.window, scrape_interval_seconds=SCRAPE, tolerance_floor_seconds=self.tolerance
        )


def _probe_ids(target: Target) -> dict[str, set[int]]:
    with psycopg.connect(target.dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT query, queryid FROM pg_stat_statements WHERE dbid = "
            "(SELECT oid FROM pg_database WHERE datname = current_database()) AND query LIKE 'SELECT probe_%'"
        ).fetchall()
    ids: dict[str, set[int]] = {}
    for text, qid in rows:
        ids.setdefault(text.split("(")[0].removeprefix("SELECT "), set()).add(int(qid))
    return ids


def _probes(conn: psycopg.Connection) -> None:
    for _ in range(CALLS):
        for probe in ("probe_slow", "probe_ctl", "probe_rot"):
            conn.execute(f"SELECT {probe}(%s)", (1,))


@pytest.fixture(scope="module")
def scenario(pg18, warehouse_template) -> Scenario:
    app = pg18.new_database("deployapp")
    wh = pg18.new_database("deploywh", template=warehouse_template)
    pg18.execute("CREATE EXTENSION pg_stat_statements", app)
    for name in ("probe_slow", "probe_ctl", "probe_rot"):
        pg18.execute(PROBE.format(name=name, sleep=0.002), app)
    url = pg18.pg.url(wh, driver="postgresql+psycopg")
    engine = make_engine(url)
    target = Target("deployapp", pg18.pg.url(app))

    # Scrapes are counted, not timed: on a loaded machine they come slower, and the window grows to hold SAMPLES
    # intervals each side, from their recorded times.
    before_scrapes = drive(target, engine, _probes, SCRAPE, SAMPLES + 4)
    before = _probe_ids(target)
    recorded = deploys.record(engine, deploys.DeployEvent("rel-42", target.name, service="api", version="v42"))
    at = recorded.event.deployed_at
    pg18.execute(PROBE.format(name="probe_slow", sleep=0.016).replace("CREATE", "CREATE OR REPLACE"), app)
    pg18.execute("DROP FUNCTION probe_rot(int)", app)
    pg18.execute(PROBE.format(name="probe_rot", sleep=0.002), app)
    after_scrapes = drive(target, engine, _probes, SCRAPE, SAMPLES + 2)
    window = max(window_covering(before_scrapes, at, SAMPLES, WINDOW), (after_scrapes[SAMPLES] - at).total_seconds())
    closing = drive(target, engine, _probes, SCRAPE, 1, until=at + timedelta(seconds=window + SCRAPE))  # closed
    after = _probe_ids(target)
    assert after["probe_slow"] == before["probe_slow"]  # replaced in place: same function, same queryid
    (rotated,) = after["probe_rot"] - before["probe_rot"]  # dropped and recreated: a new queryid
    queryids = {
        "probe_slow": min(after["probe_slow"]),
        "probe_ctl": min(after["probe_ctl"]),
        "probe_rot": rotated,
        "probe_rot_old": min(before["probe_rot"]),
    }
    tolerance = tolerance_covering(before_scrapes, after_scrapes, at, 1.0)
    scrapes = before_scrapes + after_scrapes + closing
    yield Scenario(url, engine, target, "rel-42", at, queryids, window, tolerance, scrapes)
    engine.dispose()
    pg18.drop_database(app)
    pg18.drop_database(wh)


def _materialize(s: Scenario, instance: dg.DagsterInstance) -> dg.ExecuteInProcessResult:
    instance.add_dynamic_partitions("deploys", [s.deploy_id])
    return dg.materialize(
        [deploy_verdicts],
        partition_key=s.deploy_id,
        resources=_resources(s),
        instance=instance,
    )


def _resources(s: Scenario, analysis: AnalysisResource | None = None) -> dict:
    return {
        "warehouse": WarehouseResource(url=s.warehouse_url),
        "analysis": analysis or s.analysis,
        "targets": TargetsResource(spec=f"{s.target.name}={s.target.dsn}"),
    }


def _verdicts(s: Scenario) -> pd.DataFrame:
    with s.engine.connect() as conn:
        return pd.read_sql(
            sa.text("SELECT * FROM radar.verdict WHERE deploy_id = :d ORDER BY dbid, userid, queryid, toplevel"),
            conn,
            params={"d": s.deploy_id},
        )


def _sensor(instance: dg.DagsterInstance, s: Scenario, cursor: str | None = None) -> dg.SensorResult:
    context = dg.build_sensor_context(
        instance=instance,
        cursor=cursor,
        resources={"warehouse": WarehouseResource(url=s.warehouse_url), "analysis": s.analysis},
    )
    return deploy_event_sensor(context)


def test_sensor_waits_for_the_window_then_requests_exactly_one_run(scenario):
    s = scenario
    with dg.instance_for_test() as instance:
        early = AnalysisResource(window_seconds=3600, scrape_interval_seconds=SCRAPE)  # the window has not closed
        context = dg.build_sensor_context(
            instance=instance, resources={"warehouse": WarehouseResource(url=s.warehouse_url), "analysis": early}
        )
        assert deploy_event_sensor(context).run_requests in (None, [])

        first = _sensor(instance, s)
        assert [(r.run_key, r.partition_key) for r in first.run_requests] == [(s.deploy_id, s.deploy_id)]
        assert first.dynamic_partitions_requests[0].partition_keys == [s.deploy_id]
        again = _sensor(instance, s, first.cursor)
        assert not again.run_requests
        assert again.cursor is None or again.cursor == first.cursor


def test_sensor_picks_up_a_late_event(scenario, tmp_path):
    s = scenario
    with dg.instance_for_test() as instance:
        first = _sensor(instance, s)
        late_at = s.deployed_at - timedelta(minutes=30)
        deploys.record(s.engine, deploys.DeployEvent("rel-late", s.target.name, late_at))
        history = tmp_path / "history.csv"  # imported history is for backfills: the sensor leaves it alone
        history.write_text(f"deploy_id,target,deployed_at\nold-1,{s.target.name},{late_at.isoformat()}\n")
        deploys.import_csv(s.engine, history)
        try:
            later = _sensor(instance, s, first.cursor)
            assert [r.run_key for r in later.run_requests] == ["rel-late"]
            assert not _sensor(instance, s, later.cursor).run_requests
        finally:
            with s.engine.begin() as conn:
                conn.execute(sa.text("DELETE FROM radar.deploy_event WHERE deploy_id IN ('rel-late', 'old-1')"))


def test_a_complete_window_is_requested_and_analysed_before_its_settle(scenario):
    """With a settle of an hour, a deploy whose window has closed is requested (and analysed) once a scrape captured
    at or after its close is stored, without moving the cursor; one whose close no stored scrape has reached waits."""
    s = scenario
    slow_settle = AnalysisResource(
        window_seconds=s.window, scrape_interval_seconds=3600, tolerance_floor_seconds=s.tolerance
    )
    complete_at = s.scrapes[-2] - timedelta(seconds=s.window)  # closed before the last stored scrape
    with s.engine.connect() as conn:
        now = conn.execute(sa.text("SELECT now()")).scalar_one()
    waiting_at = now - timedelta(seconds=s.window)  # closes now: no scrape reaches it
    deploys.record(s.engine, deploys.DeployEvent("rel-complete", s.target.name, complete_at))
    deploys.record(s.engine, deploys.DeployEvent("rel-waiting", s.target.name, waiting_at))
    try:
        with dg.instance_for_test() as instance:
            context = dg.build_sensor_context(
                instance=instance,
                cursor='{"ready_at": "2000-01-01T00:00:00+00:00", "deploy_id": ""}',
                resources={"warehouse": WarehouseResource(url=s.warehouse_url), "analysis": slow_settle},
            )
            result = deploy_event_sensor(context)
        requested = {r.run_key for r in result.run_requests}
        assert "rel-complete" in requested and "rel-waiting" not in requested
        assert result.cursor == '{"ready_at": "2000-01-01T00:00:00+00:00", "deploy_id": ""}'
        settings = slow_settle.settings()
        analysed = analyse_deploy(AnalysisRun(s.engine, settings, settle=slow_settle.settle), "rel-complete")
        assert analysed.event.deploy_id == "rel-complete"
        with pytest.raises(AnalysisRefused, match="closes at"):
            analyse_deploy(AnalysisRun(s.engine, settings, settle=slow_settle.settle), "rel-waiting")
        with s.engine.connect() as conn:  # analysed: not requested again
            assert "rel-complete" not in {e.deploy_id for e in deploys.scraped_events(conn, settings.window, WEEK)}
    finally:
        with s.engine.begin() as conn:
            conn.execute(sa.text("DELETE FROM radar.analysis WHERE deploy_id IN ('rel-complete', 'rel-waiting')"))
            conn.execute(sa.text("DELETE FROM radar.deploy_event WHERE deploy_id IN ('rel-complete', 'rel-waiting')"))


def test_the_slow_query_is_detected_and_the_control_is_not(scenario):
    s = scenario
    with dg.instance_for_test() as instance:
        result = _materialize(s, instance)
    assert result.success
    v = _verdicts(s).set_index("queryid")
    slow = v.loc[s.queryids["probe_slow"]]
    assert (slow.verdict, slow.reason) == ("detected", "significant")
    assert 3 < slow.change_factor < 10
    assert abs(slow.change_at - s.deployed_at) <= timedelta(seconds=max(1.0, 0.2 * s.window))
    assert slow.cause in ("unexplained", "more_rows", "more_blocks_read")
    assert slow.history_intervals == 0  # a new target has no noise history: tested on its window alone
    ctl = v.loc[s.queryids["probe_ctl"]]
    # Never detected; cleared exactly when its bound lies within 1 + θ (engine 2.5). On time it does (about ×1.1); a
    # machine too busy to keep pg_sleep's pace may widen it past 1.2, and the control is then inconclusive, saying why.
    assert ctl.verdict in ("no_regression", "inconclusive")
    assert (ctl.verdict == "no_regression") == (ctl.factor_bound <= 1.2), ctl.factor_bound
    assert ctl.verdict == "no_regression" or ctl.reason in ("interval_too_wide", "interval_spans_threshold")

    mat = result.asset_materializations_for_node("deploy_verdicts")[0]
    assert list(mat.metadata)[0] == "state" and mat.metadata["state"].value == "fail"  # the deploy's state first
    assert mat.metadata["detected"].value >= 1
    detections = mat.metadata["detections"]
    assert isinstance(detections, dg.TableMetadataValue)
    assert any("probe_slow" in r.data["query"] for r in detections.records)
    assert all(r.data["history_intervals"] == 0 for r in detections.records)
    checks = {c.check_name: c.passed for c in result.get_asset_check_evaluations()}
    # scrape_coverage reports a gap of over 3 scrape intervals in the window (its edges included): on time there is
    # none, and a machine too busy to keep the pace may leave one, which the check must then report.
    lo, hi = s.deployed_at - timedelta(seconds=s.window), s.deployed_at + timedelta(seconds=s.window)
    # as the check does: the window's first edge is the last scrape at or before lo, or lo itself where there is none
    edges = [max((t for t in s.scrapes if t <= lo), default=lo), *(t for t in s.scrapes if lo < t <= hi), hi]
    longest = max((b - a).total_seconds() for a, b in pairwise(edges))
    assert checks == {"scrape_coverage": longest <= 3 * SCRAPE, "no_resets_in_window": True}, longest

    with s.engine.connect() as conn:
        regressions = conn.execute(
            sa.text("SELECT queryid, query, service, version FROM radar.regression WHERE deploy_id = :d"),
            {"d": s.deploy_id},
        ).fetchall()
    assert (s.queryids["probe_slow"], "SELECT probe_slow($1)", "api", "v42") in [tuple(r) for r in regressions]


def test_the_ui_gets_queryids_as_exact_text(scenario):
    """64-bit queryids go into Dagster's metadata as text: a JavaScript number (the UI's) would round them."""
    s = scenario
    slow = s.queryids["probe_slow"]
    with dg.instance_for_test() as instance:
        assert _materialize(s, instance).success
        (record,) = instance.fetch_materializations(dg.AssetKey("deploy_verdicts"), limit=1).records
        stored = record.asset_materialization.metadata  # as the UI reads it: from the instance's event log
    for name in ("detections", "load_changes"):
        table = stored[name]
        assert isinstance(table, dg.TableMetadataValue)
        assert {c.name: c.type for c in table.schema.columns}["queryid"] == "string", name
        assert all(isinstance(r.data["queryid"], str) for r in table.records), name
    (row,) = [r.data for r in stored["detections"].records if "probe_slow" in r.data["query"]]
    assert row["queryid"] == str(slow) and int(row["queryid"]) == slow


def test_a_rotated_queryid_is_reported_once(scenario):
    s = scenario
    with dg.instance_for_test() as instance:
        assert _materialize(s, instance).success
    v = _verdicts(s)
    rot = v[v["queryid"].isin([s.queryids["probe_rot"], s.queryids["probe_rot_old"]])]
    assert len(rot) == 1
    assert rot.iloc[0].queryid == s.queryids["probe_rot"]
    assert list(rot.iloc[0].merged_queryids) == [s.queryids["probe_rot_old"]]


def test_rematerialising_leaves_the_same_rows(scenario):
    s = scenario
    with dg.instance_for_test() as instance:
        assert _materialize(s, instance).success
        first = _verdicts(s)
        assert _materialize(s, instance).success
        second = _verdicts(s)
    assert len(second) == len(first) and not second.duplicated(["queryid", "dbid", "userid", "toplevel"]).any()
    pd.testing.assert_frame_equal(first, second)
    with s.engine.connect() as conn:
        assert (
            conn.execute(
                sa.text("SELECT count(*) FROM radar.analysis WHERE deploy_id = :d"), {"d": s.deploy_id}
            ).scalar_one()
            == 1
        )


def test_the_run_shows_its_analysis_running_to_the_gate_while_it_runs(scenario, monkeypatch):
    """deploy_verdicts holds the deploy's mark in the warehouse for the analysis' whole run (what `radar gate --wait`
    reports as "the analysis is running"), seen from another session, and the mark is gone when the run ends."""
    import radar_pipeline.steps.deploy_analysis as steps

    s = scenario
    seen: list[bool] = []

    def watched(run: AnalysisRun, deploy_id: str):  # type: ignore[no-untyped-def]
        with s.engine.connect() as conn:
            seen.append(deploys.analysis_running(conn, deploy_id))
        return analyse_deploy(run, deploy_id)

    monkeypatch.setattr(steps, "analyse_deploy", watched)
    with s.engine.connect() as conn:
        assert not deploys.analysis_running(conn, s.deploy_id)
    with dg.instance_for_test() as instance:
        assert _materialize(s, instance).success
    with s.engine.connect() as conn:
        assert seen == [True] and not deploys.analysis_running(conn, s.deploy_id)


def test_an_early_or_unknown_partition_is_refused(scenario):
    s = scenario
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("deploys", ["nope"])
        result = dg.materialize(
            [deploy_verdicts],
            partition_key="nope",
            resources=_resources(s),
            instance=instance,
            raise_on_error=False,
        )
        assert not result.success
        early = AnalysisResource(window_seconds=3600, scrape_interval_seconds=SCRAPE)
        instance.add_dynamic_partitions("deploys", [s.deploy_id])
        refused = dg.materialize(
            [deploy_verdicts],
            partition_key=s.deploy_id,
            resources=_resources(s, early),
            instance=instance,
            raise_on_error=False,
        )
        assert not refused.success
        text = run_log_text(instance, refused.run_id)
        assert "an analysis before then would see only part of the window" in text


def test_radar_verdicts_prints_the_table(scenario):
    import os
    import subprocess
    import sys
    from pathlib import Path

    s = scenario
    with dg.instance_for_test() as instance:
        assert _materialize(s, instance).success
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "radar"), "verdicts", s.deploy_id, "--warehouse", s.warehouse_url],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "220"},
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith(f"deploy {s.deploy_id}: fail; ") and "detected" in lines[0]
    header = next(i for i, line in enumerate(lines) if "┃ verdict" in line)  # the impact summary comes above
    assert "of the time after the deploy cleared; open adds ≤ " in lines[1]
    assert " together (pass: 1%, 3%)" in lines[1]
    # A tier line may follow: on a loaded machine the probes' time before the deploy can run high enough that a
    # control statement clears as clearly faster (improved).
    rest = lines[3:] if lines[2].startswith("statements ") else lines[2:]
    assert rest[0].startswith("database time: ") and " ms per minute" in rest[0]
    first_row = lines[header + 2]  # after the verdicts' header and rule: detections come first
    assert "detected" in first_row and "SELECT probe_slow($1)" in first_row
    assert max(len(line) for line in lines) <= 220


def test_radar_verdicts_for_scripts_gives_every_column(scenario):
    """--format csv and json: the plan diff, p_family, the change's time and the deploy's fields with each verdict."""
    import io
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    s = scenario
    with dg.instance_for_test() as instance:
        assert _materialize(s, instance).success
    out = {}
    for fmt in ("csv", "json"):
        proc = subprocess.run(
            [str(Path(sys.executable).parent / "radar"), "verdicts", s.deploy_id, "--format", fmt],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "RADAR_WAREHOUSE_URL": s.warehouse_url},
        )
        assert proc.returncode == 0, proc.stderr
        out[fmt] = proc.stdout
    wanted = {"plan_diff", "p_family", "p_value", "change_at", "change_after_deploy_s", "deploy_id", "deployed_at"}
    wanted |= {"service", "version", "url", "deploy_source", "dbid", "userid", "toplevel", "merged_queryids"}
    table = pd.read_csv(io.StringIO(out["csv"]))
    assert wanted <= set(table.columns), wanted - set(table.columns)
    verdicts = json.loads(out["json"])
    assert isinstance(verdicts, list) and wanted <= set(verdicts[0])
    (slow,) = [v for v in verdicts if v["queryid"] == s.queryids["probe_slow"]]  # exact, not rounded
    assert (slow["verdict"], slow["service"], slow["version"], slow["deploy_id"]) == (
        "detected",
        "api",
        "v42",
        "rel-42",
    )
    assert datetime.fromisoformat(slow["deployed_at"]) == s.deployed_at
    change_at = datetime.fromisoformat(slow["change_at"])
    assert abs((change_at - s.deployed_at).total_seconds() - slow["change_after_deploy_s"]) < 1e-3
    assert isinstance(slow["plan_diff"], dict) and 0 <= slow["p_family"] <= 1
    (row,) = table[table["queryid"] == s.queryids["probe_slow"]].to_dict("records")
    assert json.loads(row["plan_diff"]) == slow["plan_diff"] and row["service"] == "api"
    assert datetime.fromisoformat(row["change_at"]) == change_at


def test_partitions_definition_name():
    assert deploys_partitions.name == "deploys"


def test_a_backfill_over_deploys_partitions_runs_each(scenario, monkeypatch, tmp_path):
    """A backfill as the UI launches it: a PartitionBackfill executed by the backfill daemon's own iteration. The
    backfill policy puts both partitions in one run, which materializes each."""
    import logging
    import os

    from dagster._core.execution.backfill import BulkActionStatus, PartitionBackfill
    from dagster._core.test_utils import create_test_daemon_workspace_context
    from dagster._core.workspace.load_target import ModuleTarget
    from dagster._daemon.backfill import execute_backfill_iteration

    s = scenario
    history = tmp_path / "history.csv"
    history.write_text(f"deploy_id,target,deployed_at\nhist-1,{s.target.name},{s.deployed_at.isoformat()}\n")
    deploys.import_csv(s.engine, history)
    for var, value in {
        "RADAR_WAREHOUSE_URL": s.warehouse_url,
        "RADAR_TARGETS": f"{s.target.name}={s.target.dsn}",
        "RADAR_WINDOW_SECONDS": str(s.window),
        "RADAR_SCRAPE_INTERVAL_SECONDS": str(SCRAPE),
        "RADAR_TOLERANCE_FLOOR_SECONDS": "1",
    }.items():
        monkeypatch.setenv(var, value)
    sync_launcher = {"module": "dagster._core.launcher.sync_in_memory_run_launcher", "class": "SyncInMemoryRunLauncher"}
    partitions = [s.deploy_id, "hist-1"]
    immediate = {"module": "dagster._core.run_coordinator", "class": "DefaultRunCoordinator"}
    with dg.instance_for_test(overrides={"run_launcher": sync_launcher, "run_coordinator": immediate}) as instance:
        target = ModuleTarget("radar_pipeline.definitions", None, os.getcwd(), "radar")
        with create_test_daemon_workspace_context(target, instance) as workspace:
            instance.add_dynamic_partitions("deploys", partitions)
            from radar_pipeline.definitions import defs

            backfill = PartitionBackfill.from_asset_partitions(
                backfill_id="deploys-backfill",
                asset_graph=defs().get_repository_def().asset_graph,
                partition_names=partitions,
                asset_selection=[dg.AssetKey("deploy_verdicts")],
                backfill_timestamp=time.time(),
                tags={},
                dynamic_partitions_store=instance,
                all_partitions=False,
                title=None,
                description=None,
                run_config=None,
            )
            instance.add_backfill(backfill)
            for _ in range(6):  # the daemon's loop: each iteration submits runs, then marks the backfill done
                errors = [e for e in execute_backfill_iteration(workspace, logging.getLogger("backfill")) if e]
                assert not errors
                if instance.get_backfill("deploys-backfill").status == BulkActionStatus.COMPLETED_SUCCESS:
                    break
            assert instance.get_backfill("deploys-backfill").status == BulkActionStatus.COMPLETED_SUCCESS
            (run,) = instance.get_runs()
            assert run.is_success and "dagster/partition" not in run.tags
            ranged = {run.tags["dagster/asset_partition_range_start"], run.tags["dagster/asset_partition_range_end"]}
            assert ranged == set(partitions)
            assert instance.get_materialized_partitions(dg.AssetKey("deploy_verdicts")) == set(partitions)
    with s.engine.connect() as conn:
        analysed = conn.execute(sa.text("SELECT deploy_id FROM radar.analysis ORDER BY deploy_id")).scalars().all()
    assert set(partitions) <= set(analysed)


def test_nightly_reanalysis_picks_deploys_analysed_with_other_settings(scenario):
    from radar_pipeline.defs.deploys.deploy_verdicts import deploy_reanalysis_schedule

    s = scenario
    with dg.instance_for_test() as instance:
        assert _materialize(s, instance).success
    resources = {"warehouse": WarehouseResource(url=s.warehouse_url), "analysis": s.analysis}
    same = deploy_reanalysis_schedule(dg.build_schedule_context(resources=resources))
    assert s.deploy_id not in [r.partition_key for r in (same if isinstance(same, list) else [])]
    wider = {**resources, "analysis": AnalysisResource(window_seconds=s.window * 2, scrape_interval_seconds=SCRAPE)}
    requests = deploy_reanalysis_schedule(dg.build_schedule_context(resources=wider))
    assert s.deploy_id in [r.partition_key for r in requests]
