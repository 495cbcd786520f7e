"""Dagster's own storage is bounded: dagster.yaml purges ticks, and pgss_retention_job deletes old runs of the
snapshot and plan jobs (and only those) with their event logs."""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from radar_pipeline.defs.collection.retention import pgss_retention_job
from radar_pipeline.defs.resources import WarehouseResource

ROOT = Path(__file__).resolve().parents[1]


def _runs_of(name: str, instance: dg.DagsterInstance, n: int) -> list[str]:
    @dg.op(name=f"{name}_op")
    def step() -> None:
        pass

    @dg.job(name=name)
    def job() -> None:
        step()

    return [job.execute_in_process(instance=instance).run_id for _ in range(n)]


def test_old_runs_of_the_frequent_jobs_are_deleted(warehouse_url):
    with dg.instance_for_test() as instance:
        snapshots = _runs_of("pgss_snapshot_job", instance, 3)
        plans = _runs_of("plan_snapshot_job", instance, 2)
        kept = _runs_of("deploy_verdicts_job", instance, 1)
        result = pgss_retention_job.execute_in_process(
            instance=instance,
            resources={"warehouse": WarehouseResource(url=warehouse_url)},
            run_config={"ops": {"prune_dagster_runs": {"config": {"keep_days": 0}}}},
        )
        assert result.success and result.output_for_node("prune_dagster_runs") == 5
        left = {r.run_id for r in instance.get_runs()}
        assert not left & set(snapshots + plans)
        assert set(kept) <= left and result.run_id in left
        assert not instance.all_logs(snapshots[0])  # the event log went with the run
        again = pgss_retention_job.execute_in_process(
            instance=instance, resources={"warehouse": WarehouseResource(url=warehouse_url)}
        )
        assert again.output_for_node("prune_dagster_runs") == 0  # the default keeps a week


def test_ticks_are_purged_by_the_instance_settings(monkeypatch):
    from dagster._core.instance.config import dagster_instance_config

    monkeypatch.setenv("RADAR_DAGSTER_PG_URL", "postgresql+psycopg2://radar@localhost:5432/radar")
    config, _ = dagster_instance_config(str(ROOT))
    assert config["retention"]["schedule"]["purge_after_days"] == 7
    assert config["retention"]["sensor"]["purge_after_days"] == {"skipped": 1, "failure": 30, "success": 7}


def test_the_embedded_default_keeps_the_same_tick_retention():
    import yaml

    from radar_pipeline.demo.environment import INSTANCE_YAML

    repository = yaml.safe_load((Path(__file__).resolve().parents[1] / "dagster.yaml").read_text())
    embedded = yaml.safe_load(INSTANCE_YAML)
    assert embedded["retention"] == repository["retention"] and embedded["telemetry"] == {"enabled": False}
