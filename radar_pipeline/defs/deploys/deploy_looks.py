"""Later looks in Dagster (issue 29, docs/looks.md): the deploy_looks asset on the `deploys` partitions (one
materialization per look, its number in the metadata), deploy_looks_job (the look, then the deploy's alerts and
code-host statuses) and deploy_look_sensor, which requests each look once when it is due."""

from datetime import timedelta
from typing import Any

import dagster as dg
from pydantic import Field

from radar_pipeline.defs.deploys.deploy_verdicts import (
    ANALYSIS_POOL,
    ANALYSIS_RETRY,
    REANALYSIS_TAG,
    configured_targets,
    deploy_verdicts,
    deploys_partitions,
)
from radar_pipeline.defs.metadata import ID, OWNERS, earlier_charts, rounded, table
from radar_pipeline.defs.resources import AnalysisResource, TargetsResource, WarehouseResource
from radar_pipeline.engine.vocabulary import Verdict

LOOK_TAG = "radar/look"  # on a look's runs: the look's number
ATTEMPT_TAG = "radar/look-attempt"  # … and the attempt (warehouse.looks.look_attempt)
IN_FLIGHT = [
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
    dg.DagsterRunStatus.CANCELING,
]
SENSOR_INTERVAL_S = 30  # a look is due hours after its deploy: a look every 30 s is plenty
SENSOR_PAGE = 100  # looks requested per evaluation at most; the rest on the next ticks
DECIDED_COLUMNS = [
    ("query", "string"),
    ("queryid", ID),
    ("verdict", "string"),
    ("factor", "float"),
    ("factor_low", "float"),
    ("factor_high", "float"),
    ("cause", "string"),
]


class LookConfig(dg.Config):
    """Which look of the deploy this run makes (1 … the last; 0 is the first verdict, deploy_verdicts)."""

    look: int = Field(description="the look's number: 1, 2 or 3 (after 2W, 4W and 8W by default)")


@dg.asset(
    partitions_def=deploys_partitions,
    deps=[deploy_verdicts],
    group_name="analysis",
    kinds={"python", "postgres"},
    owners=OWNERS,
    pool=ANALYSIS_POOL,
    description="The deploy's later looks: the statements and groups its first verdict left open decided again as "
    "the after side grows (2W, 4W, 8W), one materialization per look (radar.deploy_look; late detections in "
    "radar.verdict).",
)
def deploy_looks(
    context: dg.AssetExecutionContext,
    config: LookConfig,
    warehouse: WarehouseResource,
    analysis: AnalysisResource,
    targets: TargetsResource,
) -> dg.MaterializeResult:
    """Run one look of the deploy (steps/looks.run_look) and report it: the look, its window and budget, what it
    decided, and the deploy's state before and after."""
    from radar_pipeline.steps.deploy_analysis import AnalysisRun
    from radar_pipeline.steps.looks import LookRefused, record_failed_look, run_look

    live = configured_targets(targets, context)
    run = AnalysisRun(warehouse.engine(), analysis.settings(), context.run.run_id, analysis.settle, live)
    try:
        result = run_look(run, context.partition_key, config.look)
    except LookRefused as exc:
        raise dg.Failure(description=str(exc), allow_retries=False) from None
    except Exception:
        record_failed_look(run, context.partition_key, config.look, context.log)
        raise
    decided = result.decided
    for row in decided.itertuples() if len(decided) else ():
        if row.verdict == Verdict.DETECTED:
            context.log.info(
                f"look {result.look}: regression: queryid {row.queryid}: ×{row.change_factor:.2f} "
                f"(×{row.factor_low:.2f}–×{row.factor_high:.2f}), "
                f"found {_hours(result)} after deploy {result.deploy_id}"
            )
    metadata: dict[str, Any] = {
        "look": result.look,
        "status": result.status,
        "state": str(result.state["state"]),
        "state_before": result.state_before,
        "after_hours": rounded(result.span.after.total_seconds() / 3600, 3) if result.span else None,
        "before_hours": rounded(result.span.before.total_seconds() / 3600, 3) if result.span else None,
        "budget": rounded(result.span.budget, 4) if result.span else None,
        "cut_by_next_deploy": bool(result.span.cut) if result.span else True,
        "open_before": result.opened,
        "detected": int((decided["verdict"] == Verdict.DETECTED).sum()) if len(decided) else 0,
        "cleared": int((decided["verdict"] == Verdict.NO_REGRESSION).sum()) if len(decided) else 0,
        "decided": table(
            DECIDED_COLUMNS,
            [
                {
                    "query": result.texts.get(int(r.queryid), ""),
                    "queryid": int(r.queryid),
                    "verdict": str(r.verdict),
                    "factor": rounded(r.change_factor, 3),
                    "factor_low": rounded(r.factor_low, 3),
                    "factor_high": rounded(r.factor_high, 3),
                    "cause": str(r.cause) if isinstance(r.cause, str) else "",
                }
                for r in (decided.head(25).itertuples() if len(decided) else ())
            ],
        ),
        "seconds": round(result.seconds, 3),
        # the deploy's charts so far, so the partition's latest look shows them (this look's, if it found any, come
        # with the alerts that follow it)
        **earlier_charts(context.instance, context.partition_key),
    }
    return dg.MaterializeResult(metadata=metadata)


def _hours(result: Any) -> str:
    from radar_pipeline.alerts.render import span_words

    return span_words(result.span.after) if result.span else "?"


# A look, then what a changed verdict must reach: the deploy's alerts (only what is new is sent: the outbox holds a
# row per statement) and its code-host statuses (sent again when the deploy's state moved).
deploy_looks_job = dg.define_asset_job(
    "deploy_looks_job",
    selection=dg.AssetSelection.assets("deploy_looks", "regression_alerts", "code_host_statuses"),
    executor_def=dg.in_process_executor,
    op_retry_policy=ANALYSIS_RETRY,
    description="One later look at a deploy, then its alerts and code-host statuses (requested by deploy_look_sensor).",
)


@dg.sensor(
    job=deploy_looks_job,
    minimum_interval_seconds=SENSOR_INTERVAL_S,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Requests each later look of a deploy once, when it is due (deploy + look span + one scrape "
    "interval), while a statement or a group of the deploy is still open.",
)
def deploy_look_sensor(
    context: dg.SensorEvaluationContext, warehouse: WarehouseResource, analysis: AnalysisResource
) -> dg.SensorResult | dg.SkipReason:
    """The looks due now (warehouse.looks.due_looks: the next look of each analysed deploy with a statement or a group
    open, once its after side plus one scrape interval has passed or the target's next deploy cut it), one run each.
    The run key names the deploy, the look, the first verdict it continues and the attempt
    (warehouse.looks.look_attempt: 0 when due, 1 five minutes later, …, LOOK_ATTEMPTS at most), so each attempt is
    requested once; a look that failed is recorded so and not asked for again, and one whose run ended without
    recording it (terminated, killed) is asked for at the next attempt, unless a run of it is still queued or running.
    The looks continuing a first verdict the nightly reanalysis made carry its tag (REANALYSIS_TAG): their alerts
    and statuses are recorded, never posted. A deploy decided, cut or past its last look has none: its looks stop
    by themselves."""
    from radar_pipeline.warehouse import looks

    with warehouse.engine().connect() as conn:
        due = looks.due_looks(conn, timedelta(seconds=analysis.window_seconds), analysis.settle, limit=SENSOR_PAGE)
    running = _in_flight(context.instance, deploy_looks_job.name, LOOK_TAG)
    attempts = {(d.deploy_id, d.look): looks.look_attempt(d.waited) for d in due}
    due = [d for d in due if attempts[(d.deploy_id, d.look)] is not None and (d.deploy_id, str(d.look)) not in running]
    if not due:
        return dg.SkipReason("no look is due")
    context.log.info(f"requesting {len(due)} looks: " + ", ".join(f"{d.deploy_id} look {d.look}" for d in due[:10]))
    reanalysed = _reanalysis_runs(context.instance, {d.run_id for d in due if d.run_id})
    return dg.SensorResult(
        run_requests=[
            dg.RunRequest(
                run_key=f"look:{d.deploy_id}:{d.look}:{d.basis.timestamp():.6f}:{attempts[(d.deploy_id, d.look)]}",
                partition_key=d.deploy_id,
                run_config={"ops": {"deploy_looks": {"config": {"look": d.look}}}},
                tags={
                    LOOK_TAG: str(d.look),
                    ATTEMPT_TAG: str(attempts[(d.deploy_id, d.look)]),
                    "radar/target": d.target,
                    **({REANALYSIS_TAG: "true"} if d.run_id in reanalysed else {}),
                },
            )
            for d in due
        ],
    )


def _reanalysis_runs(instance: dg.DagsterInstance, run_ids: set[str]) -> set[str]:
    """Which of these runs (of the first verdicts the due looks continue) were the nightly reanalysis's: the looks
    continuing such a verdict carry its tag, so they record their alerts and statuses and never post them, as it
    does. A run no longer stored (past the run retention) counts as not."""
    if not run_ids:
        return set()
    runs = instance.get_runs(filters=dg.RunsFilter(run_ids=sorted(run_ids)))
    return {r.run_id for r in runs if r.tags.get(REANALYSIS_TAG) == "true"}


def _in_flight(instance: dg.DagsterInstance, job_name: str, tag: str) -> set[tuple[str, str]]:
    """The looks a run of `job_name` is making now (queued or running): (its partition, or else its RELEASE tag, and
    its `tag`): a look's next attempt is not asked for while one is under way (a run waiting for the pool)."""
    runs = instance.get_runs(filters=dg.RunsFilter(job_name=job_name, statuses=IN_FLIGHT))
    return {(r.tags.get("dagster/partition") or r.tags.get("radar/release", ""), r.tags.get(tag, "")) for r in runs}
