"""Retention in Dagster: a daily job that applies RADAR_RETENTION_DAYS to the warehouse (see steps.retention) and
deletes old runs of the frequent jobs from Dagster's own storage (ticks: the `retention` section of dagster.yaml)."""

from datetime import UTC, datetime, timedelta

import dagster as dg
from pydantic import Field

from radar_pipeline.config.settings import settings
from radar_pipeline.defs.resources import WarehouseResource


@dg.op(description="Drop expired snapshot partitions and create the coming days' partitions.")
def drop_expired_snapshots(context: dg.OpExecutionContext, warehouse: WarehouseResource) -> list[str]:
    """Apply RADAR_RETENTION_DAYS to the warehouse and report the partitions dropped."""
    from radar_pipeline.steps.retention import apply_retention

    keep = settings("retention_days").retention_days
    dropped = apply_retention(warehouse.engine(), keep, datetime.now(UTC).date())
    context.log.info(
        f"kept {keep} days of snapshots; dropped {len(dropped)} partitions: {', '.join(dropped) or 'none'}"
    )
    context.add_output_metadata({"dropped": dg.MetadataValue.json(dropped), "keep_days": keep})
    return dropped


PRUNED_JOBS = ("pgss_snapshot_job", "plan_snapshot_job")  # 1,440 and 144 runs a day with the default crons
PRUNE_BATCH = 500
FINISHED = [dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED]


class PruneConfig(dg.Config):
    """keep_days: runs created longer ago than this are deleted (default RADAR_DAGSTER_RUN_RETENTION_DAYS, else 7)."""

    keep_days: int | None = Field(default=None, ge=0)  # 0: every finished run of those jobs


@dg.op(description="Delete finished runs of the snapshot and plan jobs older than the run retention, with their logs.")
def prune_dagster_runs(context: dg.OpExecutionContext, config: PruneConfig) -> int:
    """Delete, through the instance, the finished runs of PRUNED_JOBS created before now − keep days; returns how
    many. Other jobs' runs (analyses, alerts) are kept: they are few and are the record of what was decided."""
    keep = config.keep_days
    if keep is None:
        keep = settings("dagster_run_retention_days").dagster_run_retention_days
    cutoff = datetime.now(UTC) - timedelta(days=keep)
    deleted = 0
    for job in PRUNED_JOBS:
        while True:
            records = context.instance.get_run_records(
                dg.RunsFilter(job_name=job, statuses=FINISHED, created_before=cutoff), limit=PRUNE_BATCH
            )
            for record in records:
                context.instance.delete_run(record.dagster_run.run_id)
            deleted += len(records)
            if len(records) < PRUNE_BATCH:
                break
    context.log.info(f"deleted {deleted} runs of {', '.join(PRUNED_JOBS)} created before {cutoff.isoformat()}")
    context.add_output_metadata({"deleted_runs": deleted, "keep_days": keep})
    return deleted


@dg.job(
    description="Retention: drop snapshot day partitions older than RADAR_RETENTION_DAYS (default 14), and runs of "
    "the snapshot and plan jobs older than RADAR_DAGSTER_RUN_RETENTION_DAYS (default 7)."
)
def pgss_retention_job() -> None:
    """The retention job: the warehouse's partitions and Dagster's frequent runs, independently."""
    drop_expired_snapshots()
    prune_dagster_runs()


pgss_retention_schedule = dg.ScheduleDefinition(
    name="pgss_retention_schedule",
    job=pgss_retention_job,
    cron_schedule="17 0 * * *",
    default_status=dg.DefaultScheduleStatus.RUNNING,
    description="Daily: drop expired snapshot partitions, create the next days'.",
)
