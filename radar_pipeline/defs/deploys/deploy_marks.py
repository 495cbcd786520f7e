"""Deploy marks (a PagerDuty change event, a Grafana deploy annotation) soon after a deploy is recorded: the marks are
for the first minutes of an incident, so they do not wait for the deploy's analysis (its window and settle time) and
a deploy never analysed still gets one. deploy_mark_sensor finds the recent deploys whose mark is due on a channel
routed deploys (not enqueued yet, or pending past its backoff) and requests a run of deploy_marks_job, which sends
them through the outbox (radar.outbox); regression_alerts later finds them sent."""

import hashlib
import json
import time

import dagster as dg

from radar_pipeline.defs.resources import ChannelsResource, WarehouseResource

MARKS_TAG = "radar/deploy-marks"
FAILED_RUN_BACKOFF_S = 300  # after a failed run; doubled for each failure in a row, up to MAX_BACKOFF_S
MAX_BACKOFF_S = 3600
# A run is ended by run monitoring (dagster.yaml) past this, so a stuck one cannot keep the sensor waiting forever;
# the outbox's lease (15 minutes) then lets the next run take what it left `sending`.
MAX_RUNTIME_S = 900
UNFINISHED = [
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
    dg.DagsterRunStatus.CANCELING,
]
ENDED = [dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED]


@dg.op(description="Mark each recent deploy whose mark is due on the channels routed deploys (radar.outbox).")
def deploy_marks(context: dg.OpExecutionContext, warehouse: WarehouseResource, channels: ChannelsResource) -> None:
    """Send the due deploy marks (steps/channel_delivery.mark_recent_deploys); an unexpected error fails the run after
    every deploy and channel was tried."""
    from radar_pipeline.alerts.channels import close
    from radar_pipeline.steps.channel_delivery import mark_recent_deploys

    routed = channels.routed()
    try:
        marked = mark_recent_deploys(context.log, warehouse.engine(), routed, channels.alert_max_age)
    finally:
        close(routed)
    context.log.info(f"deploy marks: {json.dumps(marked)}")


@dg.job(description="The due deploy marks on the channels routed deploys (requested by deploy_mark_sensor).")
def deploy_marks_job() -> None:
    """One op: deploy_marks."""
    deploy_marks()


@dg.sensor(
    job=deploy_marks_job,
    minimum_interval_seconds=30,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Requests deploy_marks_job when a recent deploy's mark is due on a channel routed deploys.",
)
def deploy_mark_sensor(
    context: dg.SensorEvaluationContext, warehouse: WarehouseResource, channels: ChannelsResource
) -> dg.SensorResult | dg.SkipReason:
    """Each tick: the recent deploys (within the alert age limit) whose mark is due; a run of deploy_marks_job for
    them unless one is unfinished (said in the skip, with its status and age: run monitoring ends one past its
    dagster/max_runtime), or the last runs failed (the next one waits FAILED_RUN_BACKOFF_S, doubled for each failure
    in a row, at most MAX_BACKOFF_S). The run key names what is due and a request counter kept in the cursor
    (started from the clock, so a reset cursor never brings back a key Dagster would skip): a tick evaluated again
    requests nothing twice, a later one retries what is still due."""
    from radar_pipeline.warehouse.outbox import LEASE, marks_due

    names = channels.marking()
    if not names:
        return dg.SkipReason("no channel is routed deploys")
    with warehouse.engine().connect() as conn:
        due = marks_due(conn, names, channels.alert_max_age, LEASE)
    if not due:
        return dg.SkipReason("no deploy mark is due")
    job = deploy_marks_job.name
    unfinished = context.instance.get_run_records(dg.RunsFilter(job_name=job, statuses=UNFINISHED), limit=1)
    if unfinished:
        run = unfinished[0]
        age = time.time() - run.create_timestamp.timestamp()
        return dg.SkipReason(
            f"run {run.dagster_run.run_id} of {job} is {run.dagster_run.status.value.lower()} for {age:.0f} s: "
            f"the next one after it (run monitoring ends a run past {MAX_RUNTIME_S} s)"
        )
    ended = context.instance.get_run_records(dg.RunsFilter(job_name=job, statuses=ENDED), limit=6)  # newest first
    streak = next((i for i, r in enumerate(ended) if r.dagster_run.status == dg.DagsterRunStatus.SUCCESS), len(ended))
    if streak:  # failed (or canceled) runs in a row
        wait = min(FAILED_RUN_BACKOFF_S * 2 ** (streak - 1), MAX_BACKOFF_S)
        if time.time() - (ended[0].end_time or 0) < wait:
            # A run that failed before it recorded anything (a bug, the warehouse away) is not repeated every tick.
            return dg.SkipReason(f"the last {streak} run(s) of {job} failed: the next one {wait} s after the last")
    count = int(context.cursor) if context.cursor and context.cursor.isdigit() else int(time.time())
    digest = hashlib.sha256(json.dumps(due).encode()).hexdigest()[:16]
    context.log.info(f"deploy marks due for {len(due)} deploys: {', '.join(due[:10])}")
    tags = {MARKS_TAG: str(len(due)), "dagster/max_runtime": str(MAX_RUNTIME_S)}
    return dg.SensorResult(
        run_requests=[dg.RunRequest(run_key=f"marks:{digest}:{count}", tags=tags)], cursor=str(count + 1)
    )
