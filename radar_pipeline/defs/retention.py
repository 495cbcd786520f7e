"""Retention in Dagster: a daily job that applies RADAR_RETENTION_DAYS to the warehouse (see steps.retention)."""

import os
from datetime import UTC, datetime

import dagster as dg

from radar_pipeline.config import RETENTION_DAYS_VAR, retention_days
from radar_pipeline.defs.resources import WarehouseResource
from radar_pipeline.steps.retention import apply_retention


@dg.op(description="Drop expired snapshot partitions and create the coming days' partitions.")
def drop_expired_snapshots(context: dg.OpExecutionContext, warehouse: WarehouseResource) -> list[str]:
    """Apply RADAR_RETENTION_DAYS to the warehouse and report the partitions dropped."""
    keep = retention_days(os.environ.get(RETENTION_DAYS_VAR))
    dropped = apply_retention(warehouse.engine(), keep, datetime.now(UTC).date())
    context.log.info(
        f"kept {keep} days of snapshots; dropped {len(dropped)} partitions: {', '.join(dropped) or 'none'}"
    )
    context.add_output_metadata({"dropped": dg.MetadataValue.json(dropped), "keep_days": keep})
    return dropped


@dg.job(description="Snapshot retention: drop day partitions older than RADAR_RETENTION_DAYS (default 14).")
def pgss_retention_job() -> None:
    """The retention job: one op."""
    drop_expired_snapshots()


pgss_retention_schedule = dg.ScheduleDefinition(
    name="pgss_retention_schedule",
    job=pgss_retention_job,
    cron_schedule="17 0 * * *",
    default_status=dg.DefaultScheduleStatus.RUNNING,
    description="Daily: drop expired snapshot partitions, create the next days'.",
)
