"""The plan_snapshots asset and its schedule: plans of the statements that matter, stored when their shape changes."""

import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import dagster as dg

from radar_pipeline.config.settings import PLAN_CRON_VAR, PLAN_TOP_N_VAR, count_setting
from radar_pipeline.defs.collection.snapshots import MAX_RUNTIME_TAG
from radar_pipeline.defs.metadata import ID, OWNERS, table
from radar_pipeline.defs.resources import TargetsResource, WarehouseResource, env_cron_schedule

DEFAULT_PLAN_CRON = "*/10 * * * *"
SKIPPED_ROWS_SHOWN = 50  # per target: statements not planned this time, and why


@dg.asset(
    group_name="collection",
    kinds={"postgres"},
    owners=OWNERS,
    description=(
        "Plans of each target's busiest statements, of new ones and, in turn, of the rest of its active statements "
        "(radar.plan_snapshot), stored when their shape changes."
    ),
)
def plan_snapshots(
    context: dg.AssetExecutionContext, warehouse: WarehouseResource, targets: TargetsResource
) -> dg.MaterializeResult:
    """Capture plans on every target at once; a target without a plan source is named once, and the rest go on."""
    from radar_pipeline.steps.plan_capture import CAPTURE_DEADLINE_S, OUT_OF_TIME, PLAN_ROTATION_N_VAR, capture_targets
    from radar_pipeline.warehouse.plans import BUSIEST, NEW, ROTATION

    started = time.perf_counter()
    top_n, rotation_n = count_setting(PLAN_TOP_N_VAR), count_setting(PLAN_ROTATION_N_VAR)
    captures = capture_targets(targets.targets(), warehouse.engine(), top_n, rotation_n, targets.auto_explain_logs())
    rows: list[dict[str, Any]] = []
    for capture in captures:
        name = capture.target
        if capture.error is not None:
            context.log.error(f"target {name!r}: plans not captured: {capture.error}")
            rows.append({"target": name, "note": f"failed: {capture.error}"})
        elif capture.source is None:
            context.log.warning(f"target {name!r}: plans are unavailable: {capture.reason}")
            rows.append({"target": name, "source": "none", "note": f"plans unavailable: {capture.reason}"})
        else:
            notes = [f"pg_store_plans not used: {capture.reason}"] if capture.reason else []
            if capture.auto_explain:
                notes.append(f"{capture.auto_explain} plan(s) from auto_explain's log (plans that ran)")
            if capture.auto_explain_error:
                context.log.warning(f"target {name!r}: {capture.auto_explain_error}")
                notes.append(capture.auto_explain_error)
            if capture.out_of_time:
                out_of_time = OUT_OF_TIME.format(CAPTURE_DEADLINE_S)
                late = f"{capture.out_of_time} of {capture.tried + capture.out_of_time} not planned: {out_of_time}"
                context.log.warning(f"target {name!r}: {late}")
                notes.append(late)
            if capture.held_back_reason:
                context.log.warning(f"target {name!r}: {capture.held_back_reason}")
                notes.append(capture.held_back_reason)
            note = "; ".join(notes)
            rows.append(
                {
                    "target": name,
                    "source": capture.source,
                    "tried": capture.tried,
                    **{why: capture.planned.get(why, 0) for why in (BUSIEST, NEW, ROTATION)},
                    "stored": capture.stored,
                    "skipped": len(capture.skipped),
                    "note": note,
                }
            )
    skipped: list[dict[str, Any]] = [
        {"target": c.target, "queryid": key[2], "dbid": key[0], "userid": key[1], "reason": reason}
        for c in captures
        for key, reason in sorted(c.skipped.items())[:SKIPPED_ROWS_SHOWN]
    ]
    columns = [("target", "string"), ("source", "string"), ("tried", "int")]
    columns += [("busiest", "int"), ("new", "int"), ("rotation", "int"), ("stored", "int")]
    columns += [("skipped", "int"), ("note", "string")]
    metadata: dict[str, Any] = {
        "targets": table(columns, rows),
        "plans_stored": sum(c.stored for c in captures),
        "skipped": sum(len(c.skipped) for c in captures),
        "skipped_statements": table(
            [("target", "string"), ("queryid", ID), ("dbid", "int"), ("userid", "int"), ("reason", "string")],
            skipped,
        ),
        "unavailable_targets": dg.MetadataValue.json(
            {c.target: c.reason for c in captures if c.source is None and c.error is None}
        ),
        "failed_targets": dg.MetadataValue.json({c.target: c.error for c in captures if c.error is not None}),
        "out_of_time": sum(c.out_of_time for c in captures),
        "held_back": sum(c.held_back for c in captures),
        "duration_s": round(time.perf_counter() - started, 3),
    }
    return dg.MaterializeResult(metadata=metadata)


# Behind each target's CAPTURE_DEADLINE_S: the daemon's run monitoring ends a run still going after this, before the
# next one is due (every 10 minutes by default).
PLAN_MAX_RUNTIME_S = 480
plan_snapshot_job = dg.define_asset_job(
    "plan_snapshot_job", selection=[plan_snapshots], tags={MAX_RUNTIME_TAG: str(PLAN_MAX_RUNTIME_S)}
)


def plan_snapshot_schedule_for() -> dg.ScheduleDefinition:
    """The plan schedule, every 10 minutes unless RADAR_PLAN_CRON says otherwise."""
    return env_cron_schedule(
        "plan_snapshot_schedule",
        plan_snapshot_job,
        PLAN_CRON_VAR,
        DEFAULT_PLAN_CRON,
        "Capture plans of each target's busiest statements, new ones, and the rest in turn.",
    )


@dg.definitions
def plan_definitions() -> dg.Definitions:
    """plan_snapshots, its job and its schedule, built when the location loads (not at import): the schedule from
    RADAR_PLAN_CRON, and the asset stale when a whole capture was missed (twice the cron's longest gap)."""
    schedule = plan_snapshot_schedule_for()
    fresh = dg.FreshnessPolicy.time_window(fail_window=2 * longest_gap(schedule.cron_schedule))
    return dg.Definitions(
        assets=[plan_snapshots.map_asset_specs(lambda spec: spec.replace_attributes(freshness_policy=fresh))],
        jobs=[plan_snapshot_job],
        schedules=[schedule],
    )


# Ticks are read from a fixed Monday, so the answer is the same whenever and wherever the location loads: two days
# see a cron's gaps by hour of day (a cron of working hours waits all night); a cron of fewer than 30 ticks a day is
# read over 15 days, which sees its gaps by day of week too, and one of fewer than 3 ticks in those over 130.
GAP_ANCHOR = datetime(2026, 1, 5, tzinfo=UTC)


def longest_gap(cron: str | Sequence[str]) -> timedelta:
    """The longest time between two ticks of a cron (from a fixed Monday: 2 days, or 15 or 130 for sparser crons),
    read through Dagster's own cron handling."""
    fmt = "%Y-%m-%d-%H:%M"
    partitions = dg.TimeWindowPartitionsDefinition(
        cron_schedule=cron if isinstance(cron, str) else cron[0], start=GAP_ANCHOR.strftime(fmt), fmt=fmt
    )
    ticks: Sequence[str] = []
    for days, enough in ((2, 60), (15, 3), (130, 0)):
        ticks = partitions.get_partition_keys(current_time=GAP_ANCHOR + timedelta(days=days))
        if len(ticks) >= enough:
            break
    times = [datetime.strptime(tick, fmt) for tick in ticks]
    return max((b - a for a, b in zip(times, times[1:], strict=False)), default=timedelta(days=130))
