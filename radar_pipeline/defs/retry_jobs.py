"""The jobs radar_reconciler requests for another attempt at a deploy's or a periodic check's pending alerts, and the
asset tag that puts an asset in alert_retry_job: defined apart from the reconciler, so that the assets it retries
name them without importing the reconciler, which imports their jobs."""

import dagster as dg

RETRIED_BY = "radar/retried-by"  # an asset tag: the retry job that also runs it
alert_retry_job = dg.define_asset_job(
    "alert_retry_job",
    # and every asset whose outbox rows wait under a deploy's partition too (tagged: canary_alerts, code_host_statuses,
    # release_verdicts' fleet alerts): the reconciler asks one question of the outbox and requests this one job
    selection=dg.AssetSelection.assets("regression_alerts") | dg.AssetSelection.tag(RETRIED_BY, "alert_retry_job"),
    description="Another attempt at a deploy's pending deliveries: its alerts on Slack and the routed channels, its "
    "code host's statuses and comments (requested by radar_reconciler).",
)
periodic_alert_retry_job = dg.define_asset_job(
    "periodic_alert_retry_job",
    selection=dg.AssetSelection.assets("periodic_alerts"),
    description="Another attempt at a periodic check's pending Slack alerts (requested by radar_reconciler).",
)
