"""Retention: drop day partitions of radar.pgss_snapshot older than RADAR_RETENTION_DAYS, create the next ones, and
thin out the periodic checks' verdicts of that age to their detections."""

import os
from datetime import UTC, date, datetime, timedelta

import dagster as dg
import sqlalchemy as sa

from radar_pipeline.config import RETENTION_DAYS_VAR, retention_days
from radar_pipeline.defs.resources import WarehouseResource
from radar_pipeline.warehouse.snapshots import PARTITION_DAYS_AHEAD


def apply_retention(engine: sa.Engine, keep_days: int, today: date) -> list[str]:
    """Drop the day partitions that ended before today − keep_days, with the scrape facts, the verdicts of periodic
    checks of that age other than detections (an hourly check writes one per query: deploy verdicts are all kept),
    and the catalogue entries of statements last seen before then (unless a verdict shows them); returns the
    partitions dropped."""
    cutoff = today - timedelta(days=keep_days)
    with engine.begin() as conn:
        dropped = [
            r[0]
            for r in conn.execute(
                sa.text("SELECT * FROM radar.drop_pgss_snapshot_partitions_before(:c)"), {"c": cutoff}
            )
        ]
        conn.execute(
            sa.text("DELETE FROM radar.pgss_info_snapshot WHERE captured_at < CAST(:c AS date)"), {"c": cutoff}
        )
        conn.execute(
            sa.text(
                "DELETE FROM radar.verdict v USING radar.analysis a WHERE a.deploy_id = v.deploy_id "
                "AND a.target = v.target AND a.trigger = 'periodic' AND a.window_end < CAST(:c AS date) "
                "AND v.verdict <> 'detected'"
            ),
            {"c": cutoff},
        )
        # Statements not seen since the cutoff leave the catalogue, unless a verdict still shows their text.
        conn.execute(
            sa.text(
                "DELETE FROM radar.query q WHERE q.last_seen < CAST(:c AS date) AND NOT EXISTS (SELECT 1 FROM "
                "radar.verdict v WHERE v.target = q.target AND v.dbid = q.dbid AND v.userid = q.userid "
                "AND v.queryid = q.queryid AND v.toplevel = q.toplevel)"
            ),
            {"c": cutoff},
        )
        conn.execute(
            sa.text("SELECT radar.ensure_pgss_snapshot_partitions(:d, :n)"), {"d": today, "n": PARTITION_DAYS_AHEAD}
        )
    return dropped


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
