"""The pgss_compaction asset and its daily schedule: ended days of raw snapshots rewritten as compact rows
(steps.compaction; the form is described in sql/0013)."""

import dagster as dg

from radar_pipeline.defs.metadata import table
from radar_pipeline.defs.resources import WarehouseResource
from radar_pipeline.steps.compaction import compact_history


@dg.asset(
    group_name="collection",
    deps=["pgss_snapshots"],
    description="Snapshot days that have ended, one row per statement per day holding its samples as arrays "
    "(radar.pgss_compact); every reader reads them as before.",
)
def pgss_compaction(context: dg.AssetExecutionContext, warehouse: WarehouseResource) -> dg.MaterializeResult:
    """Compact every ended raw day, each day atomically; fails naming the days left raw (the others are compacted,
    and the next run retries those)."""
    outcomes = compact_history(warehouse.engine())
    failed = [o for o in outcomes if o.error is not None]
    for outcome in outcomes:
        if outcome.error is None:
            context.log.info(f"compacted {outcome.day}: {outcome.samples} samples")
        else:
            context.log.error(f"{outcome.day} was left raw: {outcome.error}")
    metadata: dict[str, dg.MetadataValue] = {
        "days": table(
            [("day", "string"), ("samples", "int"), ("error", "string")],
            [{"day": o.day, "samples": o.samples, "error": o.error} for o in outcomes],
        ),
        "samples": dg.MetadataValue.int(sum(o.samples for o in outcomes)),
    }
    if failed:
        raise dg.Failure(
            description="days left raw: " + "; ".join(f"{o.day}: {o.error}" for o in failed), metadata=metadata
        )
    return dg.MaterializeResult(metadata=metadata)


pgss_compaction_job = dg.define_asset_job("pgss_compaction_job", selection=[pgss_compaction])

pgss_compaction_schedule = dg.ScheduleDefinition(
    name="pgss_compaction_schedule",
    job=pgss_compaction_job,
    cron_schedule="47 1 * * *",
    default_status=dg.DefaultScheduleStatus.RUNNING,
    description="Daily, after the grace hour past midnight (UTC): compact the snapshot days that have ended.",
)
