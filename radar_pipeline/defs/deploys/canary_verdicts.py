"""The canary arm in Dagster (docs/canary.md): the canary_verdicts asset (one partition per deploy that names a
canary role, the `deploys` partitions) and canary_sensor, which asks for it once the canary window has closed."""

from datetime import timedelta
from typing import Any

import dagster as dg

from radar_pipeline.defs.deploys.deploy_verdicts import (
    ANALYSIS_POOL,
    ANALYSIS_RETRY,
    SENSOR_INTERVAL_S,
    SENSOR_PAGE,
    configured_targets,
    deploys_partitions,
)
from radar_pipeline.defs.metadata import OWNERS
from radar_pipeline.defs.resources import AnalysisResource, CodeHostResource, TargetsResource, WarehouseResource
from radar_pipeline.engine.vocabulary import Verdict


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
    code_hosts: CodeHostResource,
) -> dg.MaterializeResult:
    """Decide the deploy's canary arm (steps/canary.py). Bad input (an unknown canary role, a role with no
    statements) is stored as the analysis's error and fails the run with that message, not retried. Anything else
    (the warehouse or the target away) fails the step, retried in the run (ANALYSIS_RETRY), and the run, asked for
    again by canary_sensor; the last attempt's last failure is stored as the analysis's error."""
    from radar_pipeline.steps.canary import analyse_canary, record_failure
    from radar_pipeline.steps.deploy_analysis import AnalysisRefused, AnalysisRun
    from radar_pipeline.warehouse.canary import LAST_ATTEMPT

    run = AnalysisRun(
        warehouse.engine(),
        analysis.settings(),
        context.run.run_id,
        analysis.settle,
        configured_targets(targets, context),
    )
    last = int(context.run.tags.get(ATTEMPT_TAG, -1)) >= LAST_ATTEMPT
    try:
        result = analyse_canary(run, context.partition_key)
    except AnalysisRefused as exc:
        if last:
            _record(context, run, record_failure, f"the last attempt was refused: {exc}")
        raise dg.Failure(description=str(exc), allow_retries=False) from None
    except Exception as exc:
        if last and context.retry_number >= ANALYSIS_RETRY.max_retries:
            _record(context, run, record_failure, f"the last attempt failed: {type(exc).__name__}: {exc}")
        raise
    if result.error is not None:
        raise dg.Failure(description=result.error, allow_retries=False)
    delivered = _deliver(context, warehouse, code_hosts, analysis)
    counts = result.verdicts["verdict"].value_counts()
    detected = result.verdicts[result.verdicts["verdict"] == Verdict.DETECTED]
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
            **{v.value: int(counts.get(v, 0)) for v in (Verdict.DETECTED, Verdict.NO_REGRESSION, Verdict.INCONCLUSIVE)},
            "code_host": dg.MetadataValue.json(delivered),
        }
    )


def _deliver(
    context: dg.AssetExecutionContext,
    warehouse: WarehouseResource,
    code_hosts: CodeHostResource,
    analysis: AnalysisResource,
) -> dict[str, Any]:
    """The deploy's code-host status from the canary's state, as `radar gate` gives it (steps/code_host_delivery.py;
    through its outbox, retried by radar_reconciler): the canary's verdict may be stored after the before/after run
    sent nothing (the gate was pending then)."""
    try:
        return code_hosts.deliver(context.log, warehouse.engine(), context.partition_key, analysis)
    except Exception as exc:  # the verdict is stored; what the outbox holds is radar_reconciler's to retry
        context.log.error(f"code-host status not sent: {exc}")
        return {"error": str(exc)}


def _record(context: dg.AssetExecutionContext, run: object, record: Any, message: str) -> None:
    """Store the last attempt's failure as the canary analysis's error, when the warehouse takes it."""
    try:
        record(run, context.partition_key, message)
    except Exception as exc:  # the warehouse away too: the gate then says the canary analysis never came
        context.log.error(f"could not store the canary analysis's failure: {exc}")


ATTEMPT_TAG = "radar/canary-attempt"  # the attempt a canary_sensor run is (warehouse.canary.RETRY_BASE)
canary_verdicts_job = dg.define_asset_job(
    "canary_verdicts_job",
    selection=dg.AssetSelection.assets("canary_verdicts", "canary_alerts"),  # its detections alerted in the run
    executor_def=dg.in_process_executor,
    op_retry_policy=ANALYSIS_RETRY,  # a blip of the warehouse or the target: tried again in the run
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
    """One canary_verdicts run per deploy that names a canary role and attempt, once W plus one scrape interval has
    passed since the deploy (by the warehouse's clock), while it has no canary analysis and for at most
    warehouse.canary.HORIZON; run_key `canary:<deploy id>:<attempt>`, the attempt numbered from the time since it fell
    due (warehouse.canary.RETRY_BASE), so a run that failed is asked for again at the next attempt, and a stored
    analysis or error is not asked again."""
    from radar_pipeline.warehouse.canary import due_canaries

    delay = timedelta(seconds=analysis.window_seconds) + analysis.settle
    with warehouse.engine().connect() as conn:
        due = due_canaries(conn, delay, limit=SENSOR_PAGE)
    if not due:
        return dg.SensorResult(skip_reason="no canary deploy whose canary window has closed")
    new = [d.deploy_id for d in due if not context.instance.has_dynamic_partition("deploys", d.deploy_id)]
    return dg.SensorResult(
        run_requests=[
            dg.RunRequest(
                run_key=f"canary:{d.deploy_id}:{d.attempt}",
                partition_key=d.deploy_id,
                tags={"radar/target": d.target, ATTEMPT_TAG: str(d.attempt)},
            )
            for d in due
        ],
        dynamic_partitions_requests=[deploys_partitions.build_add_request(new)] if new else [],
    )
