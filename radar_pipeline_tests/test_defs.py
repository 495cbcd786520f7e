"""The Dagster code location: definitions load, and pgss_snapshots materialises through Dagster's own APIs."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import dagster as dg
import pytest
import sqlalchemy as sa

from radar_pipeline.defs.collection.snapshots import ALL_TARGETS_CHECK, pgss_snapshots
from radar_pipeline.defs.resources import TargetsResource, WarehouseResource
from radar_pipeline.demo.local_postgres import free_port

from .helpers import run, run_log_text

REPO = Path(__file__).resolve().parents[1]


ASSETS = {
    "pgss_snapshots",
    "pgss_compaction",
    "plan_snapshots",
    "deploy_verdicts",
    "deploy_looks",
    "regression_alerts",
    "code_host_statuses",
    "query_history",
    "periodic_verdicts",
    "periodic_alerts",
    "canary_verdicts",
    "release_verdicts",  # issue 29: fleets
    "canary_alerts",  # issue 29: the canary arm's detections alerted
}
CHECKS = {
    "pgss_snapshots:all_targets_scraped",
    "deploy_verdicts:scrape_coverage",
    "deploy_verdicts:no_resets_in_window",
    "periodic_verdicts:all_targets_analysed",
    "regression_alerts:nothing_waiting",
}
JOBS = {
    "pgss_snapshot_job",
    "plan_snapshot_job",
    "pgss_retention_job",
    "pgss_compaction_job",
    "deploy_verdicts_job",
    "periodic_job",
    "alert_retry_job",
    "periodic_alert_retry_job",
    "deploy_marks_job",
    "canary_verdicts_job",
    "deploy_looks_job",
    "release_looks_job",
}
SCHEDULES = {
    "pgss_snapshot_schedule",
    "plan_snapshot_schedule",
    "pgss_retention_schedule",
    "pgss_compaction_schedule",
    "deploy_reanalysis_schedule",
    "periodic_schedule",
}
RESOURCES = {"warehouse", "targets", "analysis", "reconciler", "slack", "code_hosts", "channels"}


def test_definitions_load():
    from radar_pipeline.definitions import defs

    repo = defs().get_repository_def()
    # Everything defs/ holds, found by the defs-folder loader: no more, no less.
    assert {a.to_user_string() for a in repo.asset_graph.get_all_asset_keys()} == ASSETS
    checks = {f"{k.asset_key.to_user_string()}:{k.name}" for k in repo.asset_graph.asset_check_keys}
    assert checks == CHECKS
    assert {j.name for j in repo.get_all_jobs()} - {"__ASSET_JOB"} == JOBS
    assert {s.name for s in repo.schedule_defs} == SCHEDULES
    assert set(repo.get_top_level_resources()) == RESOURCES
    deploy_job = repo.get_job("deploy_verdicts_job")
    assert {k.to_user_string() for k in deploy_job.asset_layer.executable_asset_keys} == {
        "deploy_verdicts",
        "regression_alerts",
        "code_host_statuses",
        "query_history",
        "release_verdicts",
    }
    # The gate waits on these: the analysis runs in the run's own process, and the sensor looks every 10 s.
    assert deploy_job.executor_def is dg.in_process_executor
    assert repo.get_sensor_def("deploy_event_sensor").minimum_interval_seconds == 10
    assert sorted(s.name for s in repo.sensor_defs) == [
        "canary_sensor",
        "deploy_event_sensor",
        "deploy_look_sensor",
        "deploy_mark_sensor",
        "radar_reconciler",
        "release_look_sensor",
        "slack_run_failure_sensor",
    ]
    assert repo.asset_graph.get(dg.AssetKey("deploy_verdicts")).partitions_def.name == "deploys"
    assert repo.get_schedule_def("pgss_snapshot_schedule").cron_schedule == "* * * * *"
    assert repo.has_job("pgss_retention_job")


def test_every_asset_has_kinds_and_an_owner_and_the_snapshots_a_freshness_policy(monkeypatch):
    from radar_pipeline.definitions import defs

    def specs() -> dict[str, dg.AssetSpec]:
        repo = defs().get_repository_def()
        return {key.to_user_string(): repo.assets_defs_by_key[key].specs_by_key[key] for key in repo.assets_defs_by_key}

    loaded = specs()
    assert {name: spec.kinds for name, spec in loaded.items()} == {
        "pgss_snapshots": {"postgres"},
        "pgss_compaction": {"postgres"},
        "plan_snapshots": {"postgres"},
        "deploy_verdicts": {"python", "postgres"},
        "canary_verdicts": {"python", "postgres"},
        "deploy_looks": {"python", "postgres"},
        "regression_alerts": {"slack"},
        "canary_alerts": {"slack"},
        "code_host_statuses": {"github", "gitlab"},
        "query_history": {"python", "postgres"},
        "periodic_verdicts": {"python", "postgres"},
        "periodic_alerts": {"slack"},
        "release_verdicts": {"python", "postgres"},
    }
    assert {tuple(spec.owners) for spec in loaded.values()} == {("team:radar",)}
    fresh = {name: spec.freshness_policy for name, spec in loaded.items() if spec.freshness_policy}
    assert set(fresh) == {"pgss_snapshots", "plan_snapshots"}
    # A gap over 3 scrape intervals (the coverage check's bound); plans: a whole capture of the plan cron missed.
    assert fresh["pgss_snapshots"].fail_window.to_timedelta() == timedelta(minutes=3)
    assert fresh["plan_snapshots"].fail_window.to_timedelta() == timedelta(minutes=20)
    # Read when the location loads, from the settings.
    monkeypatch.setenv("RADAR_SCRAPE_INTERVAL_SECONDS", "30")
    monkeypatch.setenv("RADAR_PLAN_CRON", "0 */6 * * *")
    reloaded = specs()
    assert reloaded["pgss_snapshots"].freshness_policy.fail_window.to_timedelta() == timedelta(seconds=90)
    assert reloaded["plan_snapshots"].freshness_policy.fail_window.to_timedelta() == timedelta(hours=12)
    monkeypatch.setenv("RADAR_SCRAPE_INTERVAL_SECONDS", "2")  # the demo's: Dagster takes no window under a minute
    assert specs()["pgss_snapshots"].freshness_policy.fail_window.to_timedelta() == timedelta(minutes=1)


@pytest.mark.parametrize(
    "variable, value",
    [
        ("RADAR_SNAPSHOT_CRON", "every minute"),
        ("RADAR_PLAN_CRON", "61 * * * *"),
        ("RADAR_PERIODIC_START", "today"),
        ("RADAR_CHANNEL_ROUTES", "regression=pagerduty"),  # routed to a channel that is not configured
    ],
)
def test_settings_are_read_when_the_location_loads_not_at_import(variable, value):
    """Every module of defs/ imports with a bad setting; the location's load stops, naming the variable."""
    code = (
        "import pkgutil, importlib, radar_pipeline.defs as d\n"
        "for m in pkgutil.walk_packages(d.__path__, 'radar_pipeline.defs.'): importlib.import_module(m.name)\n"
        "import radar_pipeline.definitions\n"
        "print('imported', flush=True)\n"
        "radar_pipeline.definitions.defs()\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, variable: value, "DAGSTER_DISABLE_TELEMETRY": "1"},
    )
    assert proc.stdout.strip() == "imported" and proc.returncode != 0
    assert f"ConfigError: {variable}" in proc.stderr


def test_dagster_cli_validates_the_code_location(tmp_path):
    # Run where no dagster.yaml is, so the check needs no storage settings.
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "dagster"), "definitions", "validate", "-w", str(REPO / "workspace.yaml")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**os.environ, "DAGSTER_DISABLE_TELEMETRY": "1"},
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "All code locations passed validation" in proc.stderr + proc.stdout


@pytest.mark.e2e
def test_dg_check_defs_in_the_project_s_root_needs_no_environment(tmp_path):
    # As a Dagster user runs it: in the project's root (a copy of its top-level files; the package and its virtual
    # environment as installed), without DAGSTER_HOME, so Dagster reads the root's dagster.yaml, and without any
    # RADAR_* variable.
    root = tmp_path / "project"
    root.mkdir()
    for name in ("pyproject.toml", "dagster.yaml", "workspace.yaml", "setup.py", "README.md"):
        (root / name).write_bytes((REPO / name).read_bytes())
    (root / "radar_pipeline").symlink_to(REPO / "radar_pipeline")
    venv = Path(sys.prefix)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RADAR_", "DAGSTER_"))}
    env.update(
        VIRTUAL_ENV=str(venv), PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}", HOME=str(tmp_path / "home")
    )
    proc = subprocess.run(
        [str(venv / "bin" / "dg"), "check", "defs"], cwd=root, capture_output=True, text=True, env=env, timeout=300
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    assert "All definitions loaded successfully" in proc.stdout + proc.stderr, proc.stdout + proc.stderr


def _materialize(warehouse_url: str, spec: str) -> tuple[dg.ExecuteInProcessResult, str]:
    """Materialise pgss_snapshots in a throwaway instance; returns the result and the text of every event and log
    line of the run (what a user reads in the UI)."""
    with dg.instance_for_test() as instance:
        result = dg.materialize(
            [pgss_snapshots],
            resources={"warehouse": WarehouseResource(url=warehouse_url), "targets": TargetsResource(spec=spec)},
            instance=instance,
            raise_on_error=False,
        )
        text = run_log_text(instance, result.run_id)
    return result, text


def test_materialize_writes_rows_and_metadata(app_db, warehouse_url, warehouse):
    server, target = app_db
    run(target, "SELECT count(*) FROM items WHERE grp = %s", 5, (1,))
    result, _ = _materialize(warehouse_url, f"{target.name}={target.dsn}")
    assert result.success
    mat = result.asset_materializations_for_node("pgss_snapshots")[0]
    assert mat.metadata["partial"].value is False
    assert mat.metadata["stored_rows"].value > 0
    assert mat.metadata["new_statements"].value == mat.metadata["stored_rows"].value
    (row,) = mat.metadata["targets"].records
    assert row.data["target"] == target.name and row.data["rows_stored"] == mat.metadata["stored_rows"].value
    checks = result.get_asset_check_evaluations()
    assert [(c.check_name, c.passed) for c in checks] == [(ALL_TARGETS_CHECK, True)]
    with warehouse.connect() as conn:
        stored = conn.execute(sa.text("SELECT count(*) FROM radar.pgss_snapshot WHERE target = :t"), {"t": target.name})
        assert stored.scalar_one() == mat.metadata["stored_rows"].value


def test_unreachable_target_beside_a_healthy_one(app_db, warehouse_url, warehouse):
    server, target = app_db
    down = f"postgresql://radar:s3cret-pw@127.0.0.1:{free_port()}/app"
    result, text = _materialize(warehouse_url, f"{target.name}={target.dsn} down={down}")
    assert result.success
    mat = result.asset_materializations_for_node("pgss_snapshots")[0]
    assert mat.metadata["partial"].value is True
    failed = mat.metadata["failed_targets"].value
    assert list(failed) == ["down"] and "cannot connect" in failed["down"]
    check = result.get_asset_check_evaluations()[0]
    assert check.passed is False
    with warehouse.connect() as conn:
        rows = dict(conn.execute(sa.text("SELECT target, count(*) FROM radar.pgss_snapshot GROUP BY target")).all())
    assert rows.get(target.name, 0) > 0 and "down" not in rows
    assert "target 'down' was not scraped" in text
    assert "s3cret-pw" not in text


def test_no_target_reachable_fails_the_run(warehouse_url):
    down = f"postgresql://radar:s3cret-pw@127.0.0.1:{free_port()}/app"
    result, text = _materialize(warehouse_url, f"down={down}")
    assert not result.success
    assert "no target could be scraped" in text and "down" in text
    assert "s3cret-pw" not in text


def test_malformed_targets_stop_the_run_naming_the_variable(warehouse_url):
    result, text = _materialize(warehouse_url, "main postgresql://u:s3cret-pw@db/app")
    assert not result.success
    assert "RADAR_TARGETS" in text
    assert "s3cret-pw" not in text


def test_retention_job_runs_through_dagster(warehouse_url, warehouse, monkeypatch):
    from radar_pipeline.defs.collection.retention import pgss_retention_job

    monkeypatch.setenv("RADAR_RETENTION_DAYS", "3")
    with warehouse.begin() as conn:
        conn.execute(sa.text("SELECT radar.ensure_pgss_snapshot_partitions(current_date - 10, 5)"))
    result = pgss_retention_job.execute_in_process(resources={"warehouse": WarehouseResource(url=warehouse_url)})
    assert result.success
    dropped = result.output_for_node("drop_expired_snapshots")
    assert len(dropped) == 5
    with warehouse.connect() as conn:
        left = conn.execute(
            sa.text("SELECT count(*) FROM pg_inherits WHERE inhparent = 'radar.pgss_snapshot'::regclass")
        ).scalar_one()
    assert left == 3  # today and the two days ahead


def test_the_periodic_schedule_asks_for_the_hour_just_ended():
    from radar_pipeline.definitions import defs

    schedule = defs().get_repository_def().get_schedule_def("periodic_schedule")
    assert schedule.cron_schedule == "5 * * * *"
    with dg.instance_for_test() as instance:
        context = dg.build_schedule_context(
            instance=instance, scheduled_execution_time=datetime(2026, 11, 29, 22, 5, tzinfo=UTC)
        )
        (request,) = schedule.evaluate_tick(context).run_requests or []
    assert request.partition_key == "2026-11-29-21:00"


def test_periodic_settings_from_the_environment_name_the_variable(monkeypatch):
    from radar_pipeline.config import ConfigError
    from radar_pipeline.config.settings import periodic_minute, periodic_start

    monkeypatch.setenv("RADAR_PERIODIC_START", "yesterday")
    with pytest.raises(ConfigError, match="RADAR_PERIODIC_START"):
        periodic_start()
    monkeypatch.setenv("RADAR_PERIODIC_MINUTE", "61")
    with pytest.raises(ConfigError, match="RADAR_PERIODIC_MINUTE"):
        periodic_minute()


def test_no_password_reaches_dagster_storage_from_bad_dsns(warehouse_url, tmp_path):
    from radar_pipeline.defs.collection.plans import plan_snapshots

    port = free_port()
    specs = [
        "main=postgresql://radar_collector:Leak/S3cretPW2@host/app",  # does not parse: / unencoded
        f"main=postgresql://radar:Sec%23ret%2FPW3@127.0.0.1:{port}/app",  # parses, cannot connect
        f"main=postgresql://radar:Sec#retPW4@127.0.0.1:{port}/app",
        "main postgresql://radar:Sec?retPW5@db/app",
    ]
    storage = tmp_path / "dagster_home"
    storage.mkdir()
    with dg.instance_for_test(temp_dir=str(storage)) as instance:
        for spec in specs:
            for asset in (pgss_snapshots, plan_snapshots):
                result = dg.materialize(
                    [asset],
                    resources={
                        "warehouse": WarehouseResource(url=warehouse_url),
                        "targets": TargetsResource(spec=spec),
                    },
                    instance=instance,
                    raise_on_error=False,
                )
                assert not result.success or result.asset_materializations_for_node(asset.key.path[-1])
    stored = b"".join(p.read_bytes() for p in storage.rglob("*") if p.is_file())
    assert b"RADAR_TARGETS" in stored or b"cannot connect" in stored  # the errors did land there
    for secret in (b"Leak", b"S3cretPW2", b"retPW2", b"ret%2FPW3", b"ret/PW3", b"retPW4", b"retPW5"):
        assert secret not in stored, secret


def test_metadata_tables_hold_hostile_text_as_plain_cells():
    from radar_pipeline.defs.metadata import table

    hostile = 'SELECT * FROM "a](http://evil.example)<img src=x>|`" /* \x1b[2J */'
    value = table([("query", "string"), ("n", "int"), ("x", "float")], [{"query": hostile, "n": 3, "x": float("nan")}])
    assert isinstance(value, dg.TableMetadataValue)
    (record,) = value.records
    assert record.data == {"query": hostile.replace("\x1b", ""), "n": 3, "x": None}
    assert [c.type for c in value.schema.columns] == ["string", "int", "float"]


def test_metadata_tables_give_64_bit_ids_as_text():
    from radar_pipeline.defs.metadata import ID, table

    queryid = 3247342922765952897  # a JavaScript number would show 3247342922765953000
    value = table([("queryid", ID), ("n", "int")], [{"queryid": queryid, "n": -(2**60)}, {"queryid": None, "n": 7}])
    assert [c.type for c in value.schema.columns] == ["string", "int"]
    assert [r.data for r in value.records] == [{"queryid": str(queryid), "n": str(-(2**60))}, {"queryid": None, "n": 7}]


def test_the_plan_freshness_window_sees_a_cron_s_nights_and_weekends_whenever_it_loads():
    from datetime import timedelta

    from radar_pipeline.defs.collection.plans import longest_gap

    assert longest_gap("*/10 * * * *") == timedelta(minutes=10)
    assert longest_gap("*/10 8-18 * * *") == timedelta(hours=13, minutes=10)  # 18:50 to 8:00
    assert longest_gap("0 9 * * 1-5") == timedelta(days=3)  # Friday to Monday
    assert longest_gap("0 0 1 * *") == timedelta(days=31)
