"""code_host_statuses: the deploy's state on its commit (and GitHub deployment) and, on a regression, a comment on the
requests that merged it, through the outbox (radar.outbox) (steps/code_host_delivery.py)."""

import dagster as dg

from radar_pipeline.defs.deploys.deploy_verdicts import REANALYSIS_TAG, deploy_verdicts, deploys_partitions
from radar_pipeline.defs.metadata import OWNERS
from radar_pipeline.defs.resources import AnalysisResource, CodeHostResource, WarehouseResource
from radar_pipeline.defs.retry_jobs import RETRIED_BY, alert_retry_job


@dg.asset(
    partitions_def=deploys_partitions,
    deps=[deploy_verdicts, "deploy_looks"],  # after a later look too (deploy_looks_job), when it found something
    group_name="analysis",
    kinds={"github", "gitlab"},
    owners=OWNERS,
    tags={RETRIED_BY: alert_retry_job.name},  # its rows wait under the deploy's partition: retried with its alerts
    description="The deploy's state as a GitHub or GitLab commit status (and deployment status), and a comment on the "
    "pull or merge request that merged the commit when something regressed (radar.outbox).",
)
def code_host_statuses(
    context: dg.AssetExecutionContext,
    warehouse: WarehouseResource,
    code_hosts: CodeHostResource,
    analysis: AnalysisResource,
) -> dg.MaterializeResult:
    """Send what is due of the deploy's code-host deliveries and record every outcome; withheld instead when the
    deploy's window closed more than the alert age limit ago, or in a reanalysis run."""
    reanalysis = context.run.tags.get(REANALYSIS_TAG) == "true"
    metadata = code_hosts.deliver(context.log, warehouse.engine(), context.partition_key, analysis, reanalysis)
    return dg.MaterializeResult(
        metadata={k: dg.MetadataValue.json(v) if isinstance(v, dict) else v for k, v in metadata.items()}
    )
