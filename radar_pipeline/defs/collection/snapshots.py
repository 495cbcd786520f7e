"""The pgss_snapshots asset and its schedule: pg_stat_statements from every target into the warehouse."""

import time
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import dagster as dg

from radar_pipeline.config.settings import (
    DEFAULT_SCRAPE_INTERVAL_SECONDS,
    DEFAULT_SNAPSHOT_CRON,
    SHARDS_VAR,
    SNAPSHOT_CRON_VAR,
    count_setting,
    settings,
)
from radar_pipeline.defs.metadata import OWNERS, table
from radar_pipeline.defs.resources import TargetsResource, WarehouseResource, env_cron_schedule

if TYPE_CHECKING:
    from radar_pipeline.steps.snapshots import TargetOutcome

ALL_TARGETS_CHECK = "all_targets_scraped"


class ShardConfig(dg.Config):
    """Which targets a snapshot run scrapes: shard `shard` of `shards` (see steps.shards); all of them by default."""

    shard: int = 0
    shards: int = 1


@dg.asset(
    group_name="collection",
    kinds={"postgres"},
    owners=OWNERS,
    check_specs=[dg.AssetCheckSpec(ALL_TARGETS_CHECK, asset="pgss_snapshots", description="every target was scraped")],
    description="Cumulative pg_stat_statements counters of every watched target (radar.pgss_snapshot).",
)
def pgss_snapshots(
    context: dg.AssetExecutionContext, config: ShardConfig, warehouse: WarehouseResource, targets: TargetsResource
) -> dg.MaterializeResult:
    """Scrape the run's targets (all, or one shard's) concurrently and store the statements whose counters moved."""
    from radar_pipeline.steps.shards import targets_of_shard
    from radar_pipeline.steps.snapshots import snapshot_targets

    started = time.perf_counter()
    try:
        mine = targets_of_shard(targets.targets(), config.shard, config.shards)
    except ValueError as exc:
        raise dg.Failure(description=f"run config for pgss_snapshots: {exc}") from None
    if not mine:
        return dg.MaterializeResult(
            metadata={"note": f"shard {config.shard} of {config.shards} has no target"},
            check_results=[dg.AssetCheckResult(check_name=ALL_TARGETS_CHECK, passed=True)],
        )
    outcomes = snapshot_targets(mine, warehouse.engine(), targets.collector_role or None, targets.catalog_interval)
    failed = [o for o in outcomes if o.error is not None]
    for outcome in failed:
        context.log.error(f"target {outcome.target!r} was not scraped: {outcome.error}")
    for outcome in outcomes:
        if outcome.result is not None and outcome.result.duplicate:
            context.log.warning(f"target {outcome.target!r}: this scrape time is already stored; nothing written")
        if outcome.result is not None and outcome.result.catalog_error:
            context.log.warning(f"target {outcome.target!r}: catalog facts not read: {outcome.result.catalog_error}")
        if outcome.result is not None and outcome.result.wait_error:
            context.log.warning(f"target {outcome.target!r}: wait samples not read: {outcome.result.wait_error}")
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


def _metadata(outcomes: "list[TargetOutcome]", seconds: float) -> dict[str, Any]:
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


# In the run's own process: the default multiprocess executor would start a second process for the one step, loading
# the code location again (about half of a snapshot run's CPU, measured by benchmarks/load_bench.py).
# A second line of defence behind the collector's own bounds (collector/session.py): with dagster.yaml's run monitoring
# the daemon ends a snapshot run still going after 5 minutes, so a run stuck for a reason nobody foresaw cannot pile
# up behind the every-minute schedule. Even 100 targets all silent at once end sooner: 13 rounds of 8 threads, each
# target failed within 20 s (the connect timeout, then one call's bound).
MAX_RUNTIME_TAG = "dagster/max_runtime"
SNAPSHOT_MAX_RUNTIME_S = 300
pgss_snapshot_job = dg.define_asset_job(
    "pgss_snapshot_job",
    selection=[pgss_snapshots],
    executor_def=dg.in_process_executor,
    tags={MAX_RUNTIME_TAG: str(SNAPSHOT_MAX_RUNTIME_S)},
)


def pgss_snapshot_schedule_for() -> dg.ScheduleDefinition:
    """The snapshot schedule, every minute unless RADAR_SNAPSHOT_CRON says otherwise; with RADAR_SNAPSHOT_SHARDS = N
    above 1, each tick requests N runs, one per shard of the targets, so they can run in processes (or pods) of
    their own."""
    shards = count_setting(SHARDS_VAR)
    if shards == 1:
        return env_cron_schedule(
            "pgss_snapshot_schedule",
            pgss_snapshot_job,
            SNAPSHOT_CRON_VAR,
            DEFAULT_SNAPSHOT_CRON,
            "Snapshot pg_stat_statements of every target.",
        )
    cron = env_cron_schedule(
        "pgss_snapshot_schedule", pgss_snapshot_job, SNAPSHOT_CRON_VAR, DEFAULT_SNAPSHOT_CRON, ""
    ).cron_schedule  # validated, the variable named when it does not parse

    @dg.schedule(
        name="pgss_snapshot_schedule",
        job=pgss_snapshot_job,
        cron_schedule=cron,
        default_status=dg.DefaultScheduleStatus.RUNNING,
        description=f"Snapshot pg_stat_statements of every target, in {shards} runs (one per shard of the targets).",
    )
    def sharded(context: dg.ScheduleEvaluationContext) -> list[dg.RunRequest]:
        tick = context.scheduled_execution_time.isoformat()
        return [
            dg.RunRequest(
                run_key=f"{tick}-shard-{shard}",
                run_config={"ops": {"pgss_snapshots": {"config": {"shard": shard, "shards": shards}}}},
                tags={"radar/shard": f"{shard}/{shards}"},
            )
            for shard in range(shards)
        ]

    return sharded


# Stale when the latest snapshot is older than the analysis's coverage check allows (a gap over 3 scrape intervals),
# and never sooner than a minute, the shortest window Dagster accepts (the demo's and the tests' scrapes are seconds).
STALE_AFTER_INTERVALS = 3
SHORTEST_FRESHNESS = timedelta(minutes=1)


@dg.definitions
def snapshot_definitions() -> dg.Definitions:
    """pgss_snapshots, its job and its schedule, built when the location loads (not at import): the schedule from
    RADAR_SNAPSHOT_CRON and RADAR_SNAPSHOT_SHARDS, the asset's freshness from RADAR_SCRAPE_INTERVAL_SECONDS."""
    scrape = settings("scrape_interval_seconds").scrape_interval_seconds or DEFAULT_SCRAPE_INTERVAL_SECONDS
    window = max(SHORTEST_FRESHNESS, timedelta(seconds=STALE_AFTER_INTERVALS * scrape))
    fresh = dg.FreshnessPolicy.time_window(fail_window=window)
    return dg.Definitions(
        assets=[pgss_snapshots.map_asset_specs(lambda spec: spec.replace_attributes(freshness_policy=fresh))],
        jobs=[pgss_snapshot_job],
        schedules=[pgss_snapshot_schedule_for()],
    )
