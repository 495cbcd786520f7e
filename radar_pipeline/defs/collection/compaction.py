"""The pgss_compaction asset and its daily schedule: each ended day's per-statement noise sums stored (steps.noise,
sql/0014), then ended days of raw snapshots rewritten as compact rows (steps.compaction; the form is described in
sql/0013)."""

import dagster as dg

from radar_pipeline.defs.metadata import OWNERS, table
from radar_pipeline.defs.resources import WarehouseResource


@dg.asset(
    group_name="collection",
    deps=["pgss_snapshots"],
    kinds={"postgres"},
    owners=OWNERS,
    description="Snapshot days that have ended, one row per statement per day holding its samples as arrays "
    "(radar.pgss_compact); every reader reads them as before. First, each ended day's noise sums per statement "
    "(radar.statement_noise), from which analyses estimate serial correlation and dispersion.",
)
def pgss_compaction(context: dg.AssetExecutionContext, warehouse: WarehouseResource) -> dg.MaterializeResult:
    """Store the noise sums of every ended day that has none (read while the day is still raw, the cheaper read),
    then compact every ended raw day, each day atomically; fails naming the days left raw or without sums (the others
    are done, and the next run retries those)."""
    from radar_pipeline.steps.compaction import compact_history
    from radar_pipeline.steps.noise import update_noise

    noise = update_noise(warehouse.engine())
    for day in noise:
        if day.error is None:
            context.log.info(f"noise sums of {day.target} {day.day}: {day.statements} statements")
        else:
            context.log.error(f"noise sums of {day.target} {day.day} failed: {day.error}")
    outcomes = compact_history(warehouse.engine())
    failed = [o for o in outcomes if o.error is not None]
    failed_noise = [d for d in noise if d.error is not None]
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
        "noise_days": table(
            [("target", "string"), ("day", "string"), ("statements", "int"), ("error", "string")],
            [{"target": d.target, "day": d.day, "statements": d.statements, "error": d.error} for d in noise],
        ),
    }
    if failed or failed_noise:
        problems = [f"{o.day}: {o.error}" for o in failed] + [
            f"noise {d.target} {d.day}: {d.error}" for d in failed_noise
        ]
        raise dg.Failure(description="days left raw or without noise sums: " + "; ".join(problems), metadata=metadata)
    return dg.MaterializeResult(metadata=metadata)


pgss_compaction_job = dg.define_asset_job("pgss_compaction_job", selection=[pgss_compaction])

pgss_compaction_schedule = dg.ScheduleDefinition(
    name="pgss_compaction_schedule",
    job=pgss_compaction_job,
    cron_schedule="47 1 * * *",
    default_status=dg.DefaultScheduleStatus.RUNNING,
    description="Daily, after the grace hour past midnight (UTC): compact the snapshot days that have ended.",
)
