"""Deploys in Dagster: the `deploys` partitions, the deploy_verdicts asset, its sensor and the nightly reanalysis."""

import json
import os
from datetime import UTC, datetime, timedelta
from typing import Any

import dagster as dg
import sqlalchemy as sa

from radar_pipeline.collector import plan_shape
from radar_pipeline.config import ConfigError, Target
from radar_pipeline.defs.deploy_analysis import AnalysisRefused, DeployAnalysis, analyse_deploy
from radar_pipeline.defs.resources import AnalysisResource, TargetsResource, WarehouseResource
from radar_pipeline.engine import ENGINE_VERSION
from radar_pipeline.warehouse import deploys

deploys_partitions = dg.DynamicPartitionsDefinition(name="deploys")

COVERAGE_CHECK = "scrape_coverage"
RESETS_CHECK = "no_resets_in_window"
DETECTION_ROWS_SHOWN = 25
# Events re-read behind the cursor, for inserts whose transaction committed after a later one had been seen.
CURSOR_MARGIN = timedelta(minutes=5)
REANALYSIS_DAYS_VAR = "RADAR_REANALYSIS_DAYS"


class VerdictConfig(dg.Config):
    """Per-run overrides of the engine settings (durations in seconds); unset fields keep the defaults."""

    window: float | None = None
    min_samples: int | None = None
    min_calls: int | None = None
    threshold: float | None = None
    false_alert_budget: float | None = None
    tolerance_floor: float | None = None
    tolerance_fraction: float | None = None
    fleet_share: float | None = None
    fleet_min_queries: int | None = None


@dg.asset(
    partitions_def=deploys_partitions,
    group_name="analysis",
    check_specs=[
        dg.AssetCheckSpec(COVERAGE_CHECK, asset="deploy_verdicts", description="no scrape gap over 3 intervals"),
        dg.AssetCheckSpec(RESETS_CHECK, asset="deploy_verdicts", description="no stats reset or eviction"),
    ],
    description="One verdict per query for each deploy (radar.analysis, radar.verdict; detections: radar.regression).",
)
def deploy_verdicts(
    context: dg.AssetExecutionContext,
    config: VerdictConfig,
    warehouse: WarehouseResource,
    analysis: AnalysisResource,
    targets: TargetsResource,
) -> dg.MaterializeResult:
    """Decide, for every query of the deploy's target, whether this deploy made it slower."""
    try:
        settings = analysis.settings(**config.model_dump())
    except ValueError as exc:
        raise dg.Failure(description=f"run config for deploy_verdicts: {exc}") from None
    try:
        result = analyse_deploy(
            warehouse.engine(),
            context.partition_key,
            settings,
            context.run.run_id,
            settle=analysis.settle,
            live_targets=configured_targets(targets, context),
        )
    except AnalysisRefused as exc:
        raise dg.Failure(description=str(exc)) from None
    for line in _detections_log(result):
        context.log.info(line)
    return dg.MaterializeResult(
        metadata=_metadata(result),
        check_results=_checks(result, analysis.scrape_interval_seconds),
    )


def configured_targets(targets: TargetsResource, context: dg.AssetExecutionContext) -> dict[str, Target]:
    """The watched targets configured here, by name (for plans captured at analysis time); none when unconfigured."""
    try:
        return {t.name: t for t in targets.targets()}
    except ConfigError as exc:
        context.log.warning(f"plans cannot be captured during this analysis: {exc}")
        return {}


def _detections_log(result: DeployAnalysis) -> list[str]:
    detected = result.verdicts[result.verdicts["verdict"] == "detected"]
    return [
        f"regression: queryid {r.queryid}: {r.mean_before_ms:.3f} → {r.mean_after_ms:.3f} ms "
        f"(×{r.change_factor:.2f}, confidence {r.confidence:.4f}, cause {r.cause})"
        for r in detected.itertuples()
    ]


def _metadata(result: DeployAnalysis) -> dict[str, Any]:
    v = result.verdicts
    counts = v["verdict"].value_counts()
    detected = v[v["verdict"] == "detected"].sort_values("confidence", ascending=False)
    lines = [
        "| query | before → after (ms) | factor | confidence | change vs deploy | cause | plan |",
        "|---|---|---:|---:|---:|---|---|",
    ]
    for row in detected.head(DETECTION_ROWS_SHOWN).itertuples():
        offset = (row.change_at - result.event.deployed_at).total_seconds()
        text = result.texts.get(int(row.queryid), "").replace("|", "\\|").replace("`", "'")
        lines.append(
            f"| `{text}` | {row.mean_before_ms:.3f} → {row.mean_after_ms:.3f} | ×{row.change_factor:.2f} "
            f"[×{row.factor_low:.2f}, ×{row.factor_high:.2f}] "
            f"| {row.confidence:.4f} | {offset:+.0f} s | {row.cause} | {_plan_summary(row.plan_diff)} |"
        )
    if len(detected) > DETECTION_ROWS_SHOWN:
        lines.append(f"| … and {len(detected) - DETECTION_ROWS_SHOWN} more in radar.regression | | | | | | |")
    return {
        "deploy": dg.MetadataValue.json(
            {
                "deploy_id": result.event.deploy_id,
                "target": result.event.target,
                "deployed_at": result.event.deployed_at.isoformat() if result.event.deployed_at else None,
                "service": result.event.service,
                "version": result.event.version,
            }
        ),
        "queries": len(v),
        "detected": int(counts.get("detected", 0)),
        "no_regression": int(counts.get("no_regression", 0)),
        "insufficient_data": int(counts.get("insufficient_data", 0)),
        "plan_diffs": dg.MetadataValue.json(
            {str(r.queryid): r.plan_diff for r in detected.head(DETECTION_ROWS_SHOWN).itertuples() if r.plan_diff}
        ),
        "reasons": dg.MetadataValue.json({str(k): int(n) for k, n in v["reason"].value_counts().items()}),
        "detections": dg.MetadataValue.md("\n".join(lines) if len(detected) else "No regression detected."),
        "read_s": round(result.seconds["read"], 3),
        "engine_s": round(result.seconds["engine"], 3),
        "plans_s": round(result.seconds["plans"], 3),
        "write_s": round(result.seconds["write"], 3),
    }


def _plan_summary(plan_diff: object) -> str:
    if not isinstance(plan_diff, dict):
        return ""
    return plan_shape.summary(plan_diff).replace("|", "\\|")


def _checks(result: DeployAnalysis, scrape_interval_s: float) -> list[dg.AssetCheckResult]:
    h = result.health
    return [
        dg.AssetCheckResult(
            check_name=COVERAGE_CHECK,
            passed=h["longest_gap_s"] <= 3 * scrape_interval_s and h["scrapes"] > 0,
            severity=dg.AssetCheckSeverity.WARN,
            metadata={"scrapes": h["scrapes"], "longest_gap_s": round(h["longest_gap_s"], 1)},
        ),
        dg.AssetCheckResult(
            check_name=RESETS_CHECK,
            passed=h["stats_resets"] == 0 and h["dealloc"] == 0,
            severity=dg.AssetCheckSeverity.WARN,
            metadata={"stats_resets": h["stats_resets"], "dealloc": h["dealloc"]},
        ),
    ]


# One run per deploy decides, then alerts and extends the histories (regression_alerts and query_history are defined
# in their own modules, downstream of this).
deploy_verdicts_job = dg.define_asset_job(
    "deploy_verdicts_job",
    selection=dg.AssetSelection.assets("deploy_verdicts", "regression_alerts", "query_history"),
)


@dg.sensor(
    job=deploy_verdicts_job,
    minimum_interval_seconds=30,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Turns each deploy event into a deploys partition and one analysis run, once its window has closed.",
)
def deploy_event_sensor(
    context: dg.SensorEvaluationContext, warehouse: WarehouseResource, analysis: AnalysisResource
) -> dg.SensorResult:
    """Request one deploy_verdicts run per deploy event whose window (plus one scrape interval) has closed.

    Cursor: {"ready_through": ISO time, "recent": [deploy ids]}. An event is ready at max(received_at, deployed_at +
    window + scrape interval) by the warehouse's clock, so an event reported late (deployed_at long past) is ready
    when it arrives and is not lost. Each evaluation asks for events ready after ready_through − CURSOR_MARGIN (a
    transaction that inserted an event may commit after a later one was already seen) and skips the ids in "recent",
    those already requested inside that margin, so no event is requested twice; run_key = deploy id besides.
    """
    cursor = json.loads(context.cursor) if context.cursor else {}
    through = datetime.fromisoformat(cursor["ready_through"]) if cursor.get("ready_through") else None
    recent = set(cursor.get("recent", []))
    delay = timedelta(seconds=analysis.window_seconds) + analysis.settle
    with warehouse.engine().connect() as conn:
        due = deploys.due_events(conn, through - CURSOR_MARGIN if through else None, delay)
    fresh = [e for e in due if e.deploy_id not in recent]
    if not due:
        return dg.SensorResult(skip_reason="no deploy whose window has closed since the last evaluation")

    new_partitions = [e.deploy_id for e in fresh if not context.instance.has_dynamic_partition("deploys", e.deploy_id)]
    latest = max([e.ready_at for e in due] + ([through] if through else []))
    keep = {e.deploy_id for e in due if e.ready_at > latest - CURSOR_MARGIN} | {
        d for d in recent if through and through > latest - CURSOR_MARGIN
    }
    return dg.SensorResult(
        run_requests=[
            dg.RunRequest(run_key=e.deploy_id, partition_key=e.deploy_id, tags={"radar/target": e.target})
            for e in fresh
        ],
        dynamic_partitions_requests=[deploys_partitions.build_add_request(new_partitions)] if new_partitions else [],
        cursor=json.dumps({"ready_through": latest.isoformat(), "recent": sorted(keep)}),
    )


@dg.schedule(
    job=deploy_verdicts_job,
    cron_schedule="41 2 * * *",
    default_status=dg.DefaultScheduleStatus.RUNNING,
    description="Nightly: re-analyse recent deploys whose analysis used other settings or another engine version.",
)
def deploy_reanalysis_schedule(
    context: dg.ScheduleEvaluationContext, warehouse: WarehouseResource, analysis: AnalysisResource
) -> list[dg.RunRequest] | dg.SkipReason:
    """Deploys of the last RADAR_REANALYSIS_DAYS days (default 7) analysed with settings other than today's."""
    days = int(os.environ.get(REANALYSIS_DAYS_VAR) or 7)
    current = analysis.settings().to_dict()
    with warehouse.engine().connect() as conn:
        stale = stale_analyses(conn, current, timedelta(days=days))
    if not stale:
        return dg.SkipReason(f"every deploy of the last {days} days was analysed with the current settings")
    stamp = datetime.now(UTC).strftime("%Y%m%d")  # one reanalysis of a deploy per night, whatever the tick
    return [dg.RunRequest(run_key=f"reanalysis-{stamp}-{d}", partition_key=d) for d in stale]


def stale_analyses(conn: sa.Connection, current: dict, within: timedelta) -> list[str]:
    """Deploys within the period whose analysis used other settings or another engine version than `current`."""
    rows = conn.execute(
        sa.text(
            "SELECT a.deploy_id FROM radar.analysis a JOIN radar.deploy_event d USING (deploy_id) "
            "WHERE d.deployed_at > now() - :within "
            "AND (a.engine_version <> :version OR a.settings <> CAST(:s AS jsonb)) "
            "ORDER BY d.deployed_at"
        ),
        {"within": within, "version": ENGINE_VERSION, "s": json.dumps(current, sort_keys=True)},
    )
    return [r[0] for r in rows]
