"""The Dagster code location `radar`: every asset, job, schedule and resource of radar_pipeline."""

from __future__ import annotations

import os

import dagster as dg

from radar_pipeline.config import validate_environment
from radar_pipeline.defs.alerts.code_host_statuses import code_host_retry_job, code_host_statuses
from radar_pipeline.defs.alerts.regression_alerts import regression_alerts, slack_run_failure_sensor
from radar_pipeline.defs.bands.query_history import query_history
from radar_pipeline.defs.collection.compaction import pgss_compaction, pgss_compaction_job, pgss_compaction_schedule
from radar_pipeline.defs.collection.plans import plan_snapshot_job, plan_snapshot_schedule_for, plan_snapshots
from radar_pipeline.defs.collection.retention import pgss_retention_job, pgss_retention_schedule
from radar_pipeline.defs.collection.snapshots import pgss_snapshot_job, pgss_snapshot_schedule_for, pgss_snapshots
from radar_pipeline.defs.deploys.deploy_verdicts import (
    deploy_event_sensor,
    deploy_reanalysis_schedule,
    deploy_verdicts,
    deploy_verdicts_job,
)
from radar_pipeline.defs.periodic.periodic_check import (
    periodic_alerts,
    periodic_job,
    periodic_schedule,
    periodic_verdicts,
)
from radar_pipeline.defs.reconcile.reconciler import (
    alert_retry_job,
    nothing_waiting,
    periodic_alert_retry_job,
    radar_reconciler,
)
from radar_pipeline.defs.resources import code_hosts_from_environment, default_resources, slack_from_environment

validate_environment(os.environ)  # a bad RADAR_* value stops the load here, the variable named

defs = dg.Definitions(
    assets=[
        pgss_snapshots,
        pgss_compaction,
        plan_snapshots,
        deploy_verdicts,
        regression_alerts,
        code_host_statuses,
        query_history,
        periodic_verdicts,
        periodic_alerts,
    ],
    asset_checks=[nothing_waiting],
    jobs=[
        pgss_snapshot_job,
        plan_snapshot_job,
        pgss_retention_job,
        pgss_compaction_job,
        deploy_verdicts_job,
        periodic_job,
        alert_retry_job,
        periodic_alert_retry_job,
        code_host_retry_job,
    ],
    schedules=[
        pgss_snapshot_schedule_for(),
        plan_snapshot_schedule_for(),
        pgss_retention_schedule,
        pgss_compaction_schedule,
        deploy_reanalysis_schedule,
        periodic_schedule,
    ],
    sensors=[deploy_event_sensor, slack_run_failure_sensor, radar_reconciler],
    resources={**default_resources(), "slack": slack_from_environment(), "code_hosts": code_hosts_from_environment()},
)
