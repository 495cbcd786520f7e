"""The canary arm in Dagster (docs/canary.md): the canary_verdicts asset (one partition per deploy that names a
canary role, the `deploys` partitions) and canary_sensor, which asks for it once the canary window has closed."""

from datetime import timedelta

import dagster as dg

from radar_pipeline.defs.deploys.deploy_verdicts import (
    ANALYSIS_POOL,
    SENSOR_INTERVAL_S,
    SENSOR_PAGE,
    configured_targets,
    deploys_partitions,
)
from radar_pipeline.defs.metadata import OWNERS
from radar_pipeline.defs.resources import AnalysisResource, TargetsResource, WarehouseResource


@dg.asset(
    partitions_def=deploys_partitions,
    group_name="analysis",
    deps=["pgss_snapshots"],
    kinds={"python", "postgres"},
    owners=OWNERS,
    pool=ANALYSIS_POOL,
    description="A canary deploy's two-arm verdicts: the canary role's statements against the stable role's over "
    "the same minutes (radar.canary_analysis, radar.canary_verdict; `radar gate` answers from them).",
)
def canary_verdicts(
    context: dg.AssetExecutionContext,
    warehouse: WarehouseResource,
    analysis: AnalysisResource,
    targets: TargetsResource,
) -> dg.MaterializeResult:
    """Decide the deploy's canary arm (steps/canary.py). Bad input (an unknown canary role, a role with no
    statements) is stored as the analysis's error and fails the run with that message, not retried."""
    from radar_pipeline.steps.canary import analyse_canary
    from radar_pipeline.steps.deploy_analysis import AnalysisRefused, AnalysisRun

    try:
        run = AnalysisRun(
            warehouse.engine(),
            analysis.settings(),
            context.run.run_id,
            analysis.settle,
            configured_targets(targets, context),
        )
        result = analyse_canary(run, context.partition_key)
    except AnalysisRefused as exc:
        raise dg.Failure(description=str(exc), allow_retries=False) from None
    if result.error is not None:
        raise dg.Failure(description=result.error, allow_retries=False)
    counts = result.verdicts["verdict"].value_counts()
    detected = result.verdicts[result.verdicts["verdict"] == "detected"]
    for row in detected.itertuples():
        context.log.info(
            f"canary detected: queryid {row.queryid} ×{row.change_factor:.2f} "
            f"[×{row.factor_low:.2f}, ×{row.factor_high:.2f}] against role {result.stable_role or result.stable_userid}"
        )
    return dg.MaterializeResult(
        metadata={
            "state": result.state,
            "canary_role": result.canary_role,
            "stable_role": result.stable_role or f"userid {result.stable_userid}",
            "statements": len(result.verdicts),
            **{f"{v}": int(counts.get(v, 0)) for v in ("detected", "no_regression", "inconclusive")},
        }
    )


canary_verdicts_job = dg.define_asset_job(
    "canary_verdicts_job",
    selection=dg.AssetSelection.assets("canary_verdicts"),
    executor_def=dg.in_process_executor,
)


@dg.sensor(
    job=canary_verdicts_job,
    minimum_interval_seconds=SENSOR_INTERVAL_S,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Asks for each canary deploy's two-arm analysis once its canary window has closed.",
)
def canary_sensor(
    context: dg.SensorEvaluationContext, warehouse: WarehouseResource, analysis: AnalysisResource
) -> dg.SensorResult:
    """One canary_verdicts run per deploy that names a canary role, once W plus one scrape interval has passed
    since the deploy (by the warehouse's clock) and while it has no canary analysis; run_key `canary:<deploy id>`, so
    a deploy is asked for once (a stored error is not asked again)."""
    from radar_pipeline.warehouse.canary import due_canaries

    delay = timedelta(seconds=analysis.window_seconds) + analysis.settle
    with warehouse.engine().connect() as conn:
        due = due_canaries(conn, delay, limit=SENSOR_PAGE)
    if not due:
        return dg.SensorResult(skip_reason="no canary deploy whose canary window has closed")
    new = [d for d, _ in due if not context.instance.has_dynamic_partition("deploys", d)]
    return dg.SensorResult(
        run_requests=[dg.RunRequest(run_key=f"canary:{d}", partition_key=d, tags={"radar/target": t}) for d, t in due],
        dynamic_partitions_requests=[deploys_partitions.build_add_request(new)] if new else [],
    )
