"""Deploy marks (a PagerDuty change event, a Grafana deploy annotation) soon after a deploy is recorded: the marks are
for the first minutes of an incident, so they do not wait for the deploy's analysis (its window and settle time) and
a deploy never analysed still gets one. deploy_mark_sensor finds the recent deploys whose mark is due on a channel
routed deploys (not enqueued yet, or pending past its backoff) and requests a run of deploy_marks_job, which sends
them through the outbox (radar.channel_event); regression_alerts later finds them sent."""

import hashlib
import json
import time

import dagster as dg

from radar_pipeline.defs.resources import ChannelsResource, WarehouseResource

MARKS_TAG = "radar/deploy-marks"
FAILED_RUN_BACKOFF_S = 300


@dg.op(description="Mark each recent deploy whose mark is due on the channels routed deploys (radar.channel_event).")
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
    them unless one is queued or running. The run key names what is due and how many runs came before, so a repeated
    tick requests nothing twice while a later one retries what is still due."""
    from radar_pipeline.steps.alert_delivery import LEASE
    from radar_pipeline.warehouse.channels import marks_due

    names = channels.marking()
    if not names:
        return dg.SkipReason("no channel is routed deploys")
    with warehouse.engine().connect() as conn:
        due = marks_due(conn, names, channels.alert_max_age, LEASE)
    if not due:
        return dg.SkipReason("no deploy mark is due")
    runs = context.instance.get_run_records(dg.RunsFilter(job_name=deploy_marks_job.name))
    if any(not r.dagster_run.is_finished for r in runs):
        return dg.SkipReason("a run of deploy_marks_job is queued or in progress")
    last = max(runs, key=lambda r: r.end_time or 0, default=None)
    if last is not None and last.dagster_run.is_failure and time.time() - (last.end_time or 0) < FAILED_RUN_BACKOFF_S:
        # A run that failed before it recorded anything (a bug, the warehouse away) is not repeated every tick.
        return dg.SkipReason(f"the last run of deploy_marks_job failed: the next one {FAILED_RUN_BACKOFF_S} s after it")
    digest = hashlib.sha256(json.dumps(due).encode()).hexdigest()[:16]
    context.log.info(f"deploy marks due for {len(due)} deploys: {', '.join(due[:10])}")
    return dg.SensorResult(
        run_requests=[dg.RunRequest(run_key=f"marks:{digest}:{len(runs)}", tags={MARKS_TAG: str(len(due))})]
    )
