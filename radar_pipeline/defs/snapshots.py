"""The pgss_snapshots asset and its schedule: pg_stat_statements from every target into the warehouse."""

import time
from typing import Any

import dagster as dg

from radar_pipeline.config import DEFAULT_SNAPSHOT_CRON, SNAPSHOT_CRON_VAR
from radar_pipeline.defs.metadata import table
from radar_pipeline.defs.resources import TargetsResource, WarehouseResource, env_cron_schedule
from radar_pipeline.steps.snapshots import TargetOutcome, snapshot_targets

ALL_TARGETS_CHECK = "all_targets_scraped"


@dg.asset(
    group_name="collection",
    check_specs=[dg.AssetCheckSpec(ALL_TARGETS_CHECK, asset="pgss_snapshots", description="every target was scraped")],
    description="Cumulative pg_stat_statements counters of every watched target (radar.pgss_snapshot).",
)
def pgss_snapshots(
    context: dg.AssetExecutionContext, warehouse: WarehouseResource, targets: TargetsResource
) -> dg.MaterializeResult:
    """Scrape all targets concurrently and store the statements whose counters moved."""
    started = time.perf_counter()
    outcomes = snapshot_targets(targets.targets(), warehouse.engine(), targets.exclude_role())
    failed = [o for o in outcomes if o.error is not None]
    for outcome in failed:
        context.log.error(f"target {outcome.target!r} was not scraped: {outcome.error}")
    for outcome in outcomes:
        if outcome.result is not None and outcome.result.duplicate:
            context.log.warning(f"target {outcome.target!r}: this scrape time is already stored; nothing written")
    if len(failed) == len(outcomes):
        raise dg.Failure(
            description="no target could be scraped: " + "; ".join(f"{o.target}: {o.error}" for o in failed),
            metadata={"failed_targets": dg.MetadataValue.json({o.target: o.error for o in failed})},
        )
    metadata = _metadata(outcomes, time.perf_counter() - started)
    return dg.MaterializeResult(
        metadata=metadata,
        check_results=[
            dg.AssetCheckResult(
                check_name=ALL_TARGETS_CHECK,
                passed=not failed,
                severity=dg.AssetCheckSeverity.WARN,
                metadata={"failed_targets": dg.MetadataValue.json({o.target: o.error for o in failed})},
            )
        ],
    )


def _metadata(outcomes: list[TargetOutcome], seconds: float) -> dict[str, Any]:
    ok = [o for o in outcomes if o.result is not None]
    failed = [o for o in outcomes if o.error is not None]
    rows: list[dict[str, Any]] = []
    for o in ok:
        r = o.result
        assert r is not None
        rows.append(
            {
                "target": o.target,
                "statements": r.statements,
                "new": r.new_statements,
                "rows_stored": r.stored_rows,
                "dealloc_since_last": r.dealloc_since_last,
                "resets_seen": r.resets_seen,
                "gone_from_view": r.missing_statements,
                "seconds": round(o.seconds, 3),
            }
        )
    rows += [{"target": o.target, "error": o.error, "seconds": round(o.seconds, 3)} for o in failed]
    columns = [("target", "string")] + [
        (c, "int") for c in ("statements", "new", "rows_stored", "dealloc_since_last", "resets_seen", "gone_from_view")
    ]
    columns += [("seconds", "float"), ("error", "string")]
    return {
        "partial": len(failed) > 0,
        "failed_targets": dg.MetadataValue.json({o.target: o.error for o in failed}),
        "targets": table(columns, rows),
        "statements": sum(o.result.statements for o in ok if o.result),
        "new_statements": sum(o.result.new_statements for o in ok if o.result),
        "stored_rows": sum(o.result.stored_rows for o in ok if o.result),
        "dealloc_since_last": sum(o.result.dealloc_since_last or 0 for o in ok if o.result),
        "resets_seen": sum(o.result.resets_seen for o in ok if o.result),
        "duration_s": round(seconds, 3),
    }


pgss_snapshot_job = dg.define_asset_job("pgss_snapshot_job", selection=[pgss_snapshots])


def pgss_snapshot_schedule_for() -> dg.ScheduleDefinition:
    """The snapshot schedule, every minute unless RADAR_SNAPSHOT_CRON says otherwise."""
    return env_cron_schedule(
        "pgss_snapshot_schedule",
        pgss_snapshot_job,
        SNAPSHOT_CRON_VAR,
        DEFAULT_SNAPSHOT_CRON,
        "Snapshot pg_stat_statements of every target.",
    )
