"""radar_reconciler: what Dagster cannot see gets a run — the outboxes' waiting rows (with bounded retries and
backoff), deploys whose window closed without an analysis (with
bounded runs and backoff), imported deploys without a partition — and the asset check that
shows what is still waiting. Dagster retries a failed analysis step within its run for a minute and restarts a
crashed run; a deploy still without an analysis gets bounded runs here, with backoff."""

import json
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import dagster as dg

from radar_pipeline.defs.deploys.deploy_verdicts import RANGE_END, RANGE_START, deploy_verdicts_job, deploys_partitions
from radar_pipeline.defs.resources import AnalysisResource, ReconcilerResource, SlackResource, WarehouseResource
from radar_pipeline.defs.retry_jobs import alert_retry_job, periodic_alert_retry_job
from radar_pipeline.steps.reconcile import PastRun, analysis_retry

if TYPE_CHECKING:
    from radar_pipeline.warehouse import reconcile as store

BACKLOG_CHECK = "nothing_waiting"
IN_FLIGHT = [
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
    dg.DagsterRunStatus.CANCELING,
]

CANARY_JOB = "canary_verdicts_job"  # defs/deploys/canary_verdicts.py's: its run in flight may still alert


@dg.sensor(
    jobs=[deploy_verdicts_job, alert_retry_job, periodic_alert_retry_job],
    minimum_interval_seconds=60,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Retries what waits for a later run: pending alerts, deploys without an analysis, imported deploys "
    "without a partition.",
)
def radar_reconciler(
    context: dg.SensorEvaluationContext,
    warehouse: WarehouseResource,
    analysis: AnalysisResource,
    slack: SlackResource,
    reconciler: ReconcilerResource,
) -> dg.SensorResult:
    """Each evaluation: (1) requests a run of the retry job (every asset whose outbox rows wait under the analysis's
    partition: alerts, canary and fleet alerts, code host deliveries) for every analysis with outbox rows due
    (pending past their backoff, or left `sending` by a stopped run), created within the alert age limit, and
    withholds older ones; (1b) requests the same for every stored canary analysis with detections and no outbox
    row, its canary window closed within the alert age limit (its run stopped before canary_alerts claimed the rows;
    bounded as an analysis's runs); (2) requests an analysis of every deploy whose window closed more than the grace
    ago without an analysis row (never requested, or its runs failed: at most max_analysis_runs runs, with backoff);
    (3) adds the `deploys` partitions of imported deploys, without runs (a backfill stays a person's decision).
    Run keys name the attempt, so a repeated tick requests nothing twice. The tick's log says what it did, and the
    `nothing_waiting` check on regression_alerts is reported whenever what waits changes.

    Cursor: {"backlog": the last reported counts}.
    """
    from radar_pipeline.steps.canary import CANARY_ALERT_PREFIX
    from radar_pipeline.warehouse import canary as canaries
    from radar_pipeline.warehouse import reconcile as store
    from radar_pipeline.warehouse.deploys import PERIODIC_PREFIX
    from radar_pipeline.warehouse.outbox import LEASE

    engine = warehouse.engine()
    delay = timedelta(seconds=analysis.window_seconds) + analysis.settle
    with engine.begin() as conn:
        withheld = store.withhold_old(conn, slack.alert_max_age)
        waiting = store.waiting_alerts(conn, slack.alert_max_age, LEASE)
        unanalysed = store.unanalysed_deploys(conn, delay, reconciler.grace, reconciler.max_age)
        imported = store.imported_deploys(conn)
        unalerted = canaries.unalerted(conn, CANARY_ALERT_PREFIX, slack.alert_max_age, reconciler.grace)
        backlog = store.backlog(conn, slack.alert_max_age, LEASE, delay, reconciler.grace, reconciler.max_age)

    lines: list[str] = []
    if withheld:
        lines.append(f"withheld {withheld} alerts still unsent after {slack.alert_max_age} (no longer news)")
    requests: list[dg.RunRequest] = []
    now = datetime.now(UTC)
    for w in waiting:
        job, partition = (
            (periodic_alert_retry_job, w.analysis_id.removeprefix(PERIODIC_PREFIX))
            if w.periodic
            else (alert_retry_job, w.analysis_id)
        )
        # The same retry policy as analyses, per outbox attempt: a run that failed before it claimed the rows (the
        # warehouse was away, the run never started) is followed by another, with backoff, up to max_analysis_runs.
        attempt = f"alerts:{w.analysis_id}:{w.attempts}"
        tags = {"radar/reconciler": "alerts", "radar/alert-attempt": str(w.attempts)}
        decision = analysis_retry(
            attempt,
            _past_runs(context.instance, job.name, partition, tags),
            now,
            reconciler.max_analysis_runs,
            reconciler.backoff,
        )
        if decision.request:
            requests.append(
                dg.RunRequest(job_name=job.name, partition_key=partition, run_key=decision.run_key, tags=tags)
            )
            lines.append(f"{w.analysis_id}: {w.rows} alerts due (attempt {w.attempts + 1})")
        else:
            lines.append(decision.reason)
    for deploy_id in unalerted:
        # A canary analysis stored by a run that stopped before canary_alerts claimed its rows: no row waits, and
        # canary_sensor asks no more once it is stored. alert_retry_job runs canary_alerts, which makes the rows.
        tags = {"radar/reconciler": "canary-alerts"}
        runs = _past_runs(context.instance, alert_retry_job.name, deploy_id, tags)
        runs += [r for r in _past_runs(context.instance, CANARY_JOB, deploy_id) if r.in_flight]
        decision = analysis_retry(
            f"canary-alerts:{deploy_id}", runs, now, reconciler.max_analysis_runs, reconciler.backoff
        )
        if decision.request:
            requests.append(
                dg.RunRequest(
                    job_name=alert_retry_job.name, partition_key=deploy_id, run_key=decision.run_key, tags=tags
                )
            )
            lines.append(f"{deploy_id}: a stored canary analysis's detections never alerted")
        else:
            lines.append(decision.reason)
    known_keys = context.instance.get_dynamic_partitions("deploys")
    in_backfill = _in_ranged_runs(context.instance, deploy_verdicts_job.name, known_keys) if unanalysed else set()
    for event in unanalysed:
        runs = _past_runs(context.instance, deploy_verdicts_job.name, event.deploy_id)
        if event.deploy_id in in_backfill:
            runs.append(PastRun(in_flight=True, ended_at=None))
        # Dagster retries a failed step within its run for a minute (ANALYSIS_RETRY) and restarts a crashed run; a
        # longer outage is waited out here, between runs that hold no slot of the analysis pool meanwhile.
        decision = analysis_retry(event.deploy_id, runs, now, reconciler.max_analysis_runs, reconciler.backoff)
        lines.append(decision.reason)
        if decision.request:
            requests.append(
                dg.RunRequest(
                    job_name=deploy_verdicts_job.name,
                    partition_key=event.deploy_id,
                    run_key=decision.run_key,
                    tags={"radar/target": event.target, "radar/reconciler": "analysis"},
                )
            )
    known = set(known_keys)
    wanted = [r.partition_key for r in requests if r.job_name != periodic_alert_retry_job.name] + imported
    new_partitions = sorted({k for k in wanted if k is not None and k not in known})
    fresh_imports = [k for k in imported if k not in known]
    if fresh_imports:
        lines.append(f"added {len(fresh_imports)} partitions of imported deploys (no runs: backfill them when wanted)")
    for line in lines:
        context.log.info(line)

    summary = _summary(backlog)
    last = json.loads(context.cursor).get("backlog") if context.cursor else None
    events = [_check_evaluation(backlog, summary)] if summary != last else []
    return dg.SensorResult(
        run_requests=requests,
        dynamic_partitions_requests=[deploys_partitions.build_add_request(new_partitions)] if new_partitions else [],
        asset_events=events,
        cursor=json.dumps({"backlog": summary}),
        skip_reason=None if requests or new_partitions or withheld else "nothing waits for a later run",
    )


def _past_runs(
    instance: dg.DagsterInstance, job_name: str, partition: str, tags: dict[str, str] | None = None
) -> list[PastRun]:
    """The runs of `job_name` for the partition (with these tags, when given), as the retry policy sees them."""
    records = instance.get_run_records(
        dg.RunsFilter(job_name=job_name, tags={"dagster/partition": partition, **(tags or {})})
    )
    return [
        PastRun(
            in_flight=not r.dagster_run.is_finished,
            ended_at=datetime.fromtimestamp(r.end_time, UTC) if r.end_time else None,
        )
        for r in records
    ]


def _in_ranged_runs(instance: dg.DagsterInstance, job_name: str, partition_keys: Sequence[str]) -> set[str]:
    """The deploys inside the range of a queued or running run of `job_name`: a backfill's run over several
    partitions carries the range's first and last keys as tags, not the partition tag `_past_runs` filters on."""
    records = instance.get_run_records(dg.RunsFilter(job_name=job_name, statuses=IN_FLIGHT))
    position = {key: i for i, key in enumerate(partition_keys)}
    covered: set[str] = set()
    for record in records:
        first, last = record.dagster_run.tags.get(RANGE_START), record.dagster_run.tags.get(RANGE_END)
        if first in position and last in position:
            covered.update(partition_keys[position[first] : position[last] + 1])
    return covered


def _summary(backlog: "store.Backlog") -> dict[str, Any]:
    return {
        "alerts_due": backlog.alerts_due,
        "alerts_backing_off": backlog.alerts_backing_off,
        "alerts_failed": backlog.alerts_failed,
        "deploys_without_analysis": backlog.unanalysed,
        "oldest_waiting_alert": backlog.oldest_waiting.isoformat() if backlog.oldest_waiting else None,
    }


def _passed(backlog: "store.Backlog") -> bool:
    return backlog.alerts_failed == 0 and backlog.unanalysed == 0 and backlog.alerts_due == 0


def _check_evaluation(backlog: "store.Backlog", summary: dict[str, Any]) -> dg.AssetCheckEvaluation:
    return dg.AssetCheckEvaluation(
        asset_key=dg.AssetKey("regression_alerts"),
        check_name=BACKLOG_CHECK,
        passed=_passed(backlog),
        severity=dg.AssetCheckSeverity.WARN,
        metadata={k: v if v is not None else "" for k, v in summary.items()},
    )


@dg.asset_check(
    asset="regression_alerts",
    name=BACKLOG_CHECK,
    description="Nothing waits past its retries: no alert failed for good or due and unsent, no deploy without an "
    "analysis past the grace (reported by radar_reconciler when it changes).",
)
def nothing_waiting(
    warehouse: WarehouseResource, analysis: AnalysisResource, slack: SlackResource, reconciler: ReconcilerResource
) -> dg.AssetCheckResult:
    """What waits for a later run right now (see radar_reconciler)."""
    from radar_pipeline.warehouse import reconcile as store
    from radar_pipeline.warehouse.outbox import LEASE

    delay = timedelta(seconds=analysis.window_seconds) + analysis.settle
    with warehouse.engine().connect() as conn:
        backlog = store.backlog(conn, slack.alert_max_age, LEASE, delay, reconciler.grace, reconciler.max_age)
    summary = _summary(backlog)
    return dg.AssetCheckResult(
        passed=_passed(backlog),
        severity=dg.AssetCheckSeverity.WARN,
        metadata={k: v if v is not None else "" for k, v in summary.items()},
    )
