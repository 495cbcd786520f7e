"""canary_alerts: a canary deploy's canary-arm detections on Slack and the routed channels (PagerDuty, …), once per
canary analysis, through the outbox (steps/canary.py deliver_canary_alerts; docs/canary.md)."""

from datetime import UTC, datetime

import dagster as dg

from radar_pipeline.defs.deploys.canary_verdicts import canary_verdicts
from radar_pipeline.defs.deploys.deploy_verdicts import deploys_partitions
from radar_pipeline.defs.metadata import OWNERS
from radar_pipeline.defs.resources import ChannelsResource, SlackResource, WarehouseResource
from radar_pipeline.defs.retry_jobs import RETRIED_BY, alert_retry_job


@dg.asset(
    partitions_def=deploys_partitions,
    deps=[canary_verdicts],
    group_name="analysis",
    kinds={"slack"},
    owners=OWNERS,
    tags={RETRIED_BY: alert_retry_job.name},  # its rows wait under the deploy's partition: retried with its alerts
    description="Slack and routed-channel alerts for the canary arm's detections of a canary deploy (radar.outbox, "
    "target canary:<target>), once per canary analysis.",
)
def canary_alerts(
    context: dg.AssetExecutionContext,
    warehouse: WarehouseResource,
    slack: SlackResource,
    channels: ChannelsResource,
) -> dg.MaterializeResult:
    """Send what is due of the deploy's canary detections (none for a deploy without a canary analysis, or one whose
    analysis stopped on an error), recorded withheld when the canary window closed more than the alert age limit ago."""
    from radar_pipeline.alerts.channels import REGRESSION, close
    from radar_pipeline.steps.canary import deliver_canary_alerts

    routed = channels.routed() if channels.factories() else []
    try:
        metadata = deliver_canary_alerts(
            context.log,
            warehouse.engine(),
            slack.sender(),
            routed,
            context.partition_key,
            slack.alert_max_age,
            datetime.now(UTC),
            slack.dagster_url or None,
            slack.takes(REGRESSION),
        )
    finally:
        close(routed)
    return dg.MaterializeResult(
        metadata={k: dg.MetadataValue.json(v) if isinstance(v, dict) else v for k, v in metadata.items()}
    )
