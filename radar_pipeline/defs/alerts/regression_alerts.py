"""Alerts in Dagster: regression_alerts (one Slack message per deploy with regressions, through the outbox) and a
Slack message when one of radar's own runs fails."""

from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import dagster as dg

from radar_pipeline.alerts.render import render_run_failure
from radar_pipeline.config import printable
from radar_pipeline.defs.deploys.deploy_verdicts import (
    RANGE_END,
    RANGE_START,
    REANALYSIS_TAG,
    deploy_verdicts,
    deploys_partitions,
)
from radar_pipeline.defs.metadata import CHART_IMAGES_LIMIT, OWNERS, chart_images, earlier_charts, status_counts
from radar_pipeline.defs.resources import AnalysisResource, ChannelsResource, SlackResource, WarehouseResource

if TYPE_CHECKING:
    import pandas as pd
    import sqlalchemy as sa

    from radar_pipeline.alerts.render import AnalysisFacts
    from radar_pipeline.warehouse.status import Tiered


@dg.asset(
    partitions_def=deploys_partitions,
    deps=[deploy_verdicts, "deploy_looks"],  # after a later look too (deploy_looks_job), when it found something
    group_name="analysis",
    kinds={"slack"},
    owners=OWNERS,
    description="Slack alerts for the deploy's regressions, new heavy statements, call surges and probably-slower "
    "statements (radar.outbox); then the routed channels beyond Slack: PagerDuty, Teams, Grafana, webhooks "
    "(radar.outbox).",
)
def regression_alerts(
    context: dg.AssetExecutionContext,
    warehouse: WarehouseResource,
    slack: SlackResource,
    channels: ChannelsResource,
    analysis: AnalysisResource,
) -> dg.MaterializeResult:
    """Send what is due of the deploy's regressions, in one message, and record every attempt; record them as
    withheld instead when the deploy's window closed more than the alert age limit ago, or in a reanalysis run. Then
    the same, and the deploy's mark and the resolves of what it no longer announces or a label closed, on each routed
    channel; then the updates of its Slack messages a label asked for."""
    from radar_pipeline.alerts.channels import LOAD_CHANGE, REGRESSION
    from radar_pipeline.alerts.render import TIERS_SHOWN
    from radar_pipeline.config.settings import CHANNEL_ROUTES_VAR
    from radar_pipeline.steps.alert_delivery import deliver, deploy_facts, withhold_reason
    from radar_pipeline.steps.channel_delivery import update_messages
    from radar_pipeline.warehouse import alerts, outbox
    from radar_pipeline.warehouse import analysis as analysis_store
    from radar_pipeline.warehouse.status import tiered_statements

    analysis_id = context.partition_key
    engine = warehouse.engine()
    with engine.connect() as conn:
        found = alerts.detections(conn, analysis_id)
        changes = alerts.load_changes(conn, analysis_id)
        slower = alerts.probably_slower(conn, analysis_id)
        either = next((rows for rows in (found, changes, slower) if len(rows)), found)
        load = alerts.load_summary(conn, analysis_id, str(either["target"].iloc[0])) if len(either) else None
        state = analysis_store.deploy_states(conn, [analysis_id])
        tiered = tiered_statements(conn, analysis_id, TIERS_SHOWN)
    reanalysis = context.run.tags.get(REANALYSIS_TAG) == "true"
    if either.empty:
        metadata: dict[str, Any] = {
            "regressions": 0,
            "note": "no regression, new heavy statement, call surge or probably-slower statement for this deploy",
        }
        metadata.update(_channels(context, engine, channels, analysis_id, None, found, changes, reanalysis))
        return dg.MaterializeResult(metadata=metadata)
    reason = withhold_reason(either, slack.alert_max_age, datetime.now(UTC), reanalysis=reanalysis)
    facts = replace(deploy_facts(either, slack.dagster_url or None), load_ms_per_min=load, **state_facts(state, tiered))
    # what RADAR_CHANNEL_ROUTES sends Slack (unnamed there: all of it)
    regressions, load_changes = slack.takes(REGRESSION), slack.takes(LOAD_CHANGE)
    mine = [rows if taken else rows.iloc[0:0] for rows, taken in ((found, regressions), (changes, load_changes))]
    mine.append(slower if regressions else slower.iloc[0:0])
    try:
        if any(len(rows) for rows in mine):
            metadata = as_metadata(
                deliver(
                    context.log,
                    engine,
                    slack.sender(),
                    mine[0],
                    facts,
                    withhold=reason,
                    changes=mine[1],
                    slower=mine[2],
                    chart_dir=analysis.chart_root,
                )
            )
        else:
            metadata = {"regressions": 0, "note": f"Slack is not routed this deploy's news ({CHANNEL_ROUTES_VAR})"}
    except Exception as exc:  # Slack's error never keeps the other channels from their deliveries: raised after them
        context.log.error(f"Slack: {type(exc).__name__}: {printable(str(exc).splitlines()[0] if str(exc) else '')}")
        try:
            _channels(context, engine, channels, analysis_id, facts, found, changes, reanalysis)
        except Exception as other:  # noqa: BLE001 - logged (deliver_routed logs each channel's); Slack's is raised
            context.log.error(f"channels: {type(other).__name__} (after Slack's error, which fails the run)")
        raise exc
    metadata.update(_channels(context, engine, channels, analysis_id, facts, found, changes, reanalysis))
    metadata.update(update_messages(context.log, engine, slack.sender(), analysis_id, found, changes, lambda *_: facts))
    with engine.begin() as conn:
        if reason is not None and not context.run.tags.get(REANALYSIS_TAG):
            metadata["withheld_waiting"] = outbox.withhold_waiting(conn, analysis_id, reason, [outbox.DETECTION])
        metadata.update(status_counts(outbox.statuses(conn, analysis_id)))
    if "chart_images" not in metadata:  # nothing new drawn: the partition's latest still shows the charts
        metadata.update(earlier_charts(context.instance, analysis_id))
    return dg.MaterializeResult(metadata=metadata)


def _channels(
    context: dg.AssetExecutionContext,
    engine: "sa.Engine",
    channels: ChannelsResource,
    analysis_id: str,
    facts: "AnalysisFacts | None",
    found: "pd.DataFrame",
    changes: "pd.DataFrame",
    reanalysis: bool,
) -> dict[str, Any]:
    """The deploy's deliveries to each routed channel beyond Slack (steps/channel_delivery.py), as metadata: the
    deploy's mark, its detections, the resolves of what it no longer announces; withheld when the deploy's window
    closed more than the alert age limit ago, or in a reanalysis run."""
    import pandas as pd

    from radar_pipeline.alerts.channels import close
    from radar_pipeline.steps.alert_delivery import withhold_reason
    from radar_pipeline.steps.channel_delivery import deliver_routed, deploy_notice
    from radar_pipeline.warehouse import alerts, deploys, outbox

    if not channels.factories():
        return {}
    with engine.connect() as conn:
        event = deploys.get(conn, analysis_id)
        window = alerts.analysis_window_end(conn, analysis_id)
    if event is None or window is None:
        return {}
    routed = channels.routed()
    reason = withhold_reason(
        pd.DataFrame({"window_end": [window]}), channels.alert_max_age, datetime.now(UTC), reanalysis=reanalysis
    )
    try:
        delivered = deliver_routed(
            context.log, engine, routed, analysis_id, facts, found, changes, deploy_notice(event), withhold=reason
        )
    finally:
        close(routed)
    if reason is not None and not reanalysis:
        with engine.begin() as conn:
            outbox.withhold_waiting(conn, analysis_id, reason, [outbox.DEPLOY_MARK])
    with engine.connect() as conn:
        counts = outbox.statuses(conn, analysis_id, outbox.EVENT_KINDS)
    return {
        "channels": dg.MetadataValue.json(delivered),
        **({"channel_events": dg.MetadataValue.json(counts)} if counts else {}),
    }


def state_facts(state: "pd.DataFrame", tiered: "Tiered | None" = None) -> dict[str, Any]:
    """The message's deploy state fields from the deploy's radar.deploy_state row (none when it has no row), and its
    statements marked probably slower or improved (warehouse.status.tiered_statements), when read."""
    import pandas as pd

    from radar_pipeline.alerts.render import TierNote, cause_words
    from radar_pipeline.engine import VERDICTS

    if state.empty:
        return {}
    row = state.iloc[0]
    share = row["cleared_share"]
    facts: dict[str, Any] = {
        "state": str(row["state"]),
        "verdict_counts": tuple((verdict, int(row[verdict])) for verdict in VERDICTS),
        "cleared_share": None if pd.isna(share) else float(share),
    }
    if tiered is not None:

        def notes(rows: list[dict[str, Any]]) -> tuple[TierNote, ...]:
            return tuple(
                TierNote(
                    queryid=int(r["queryid"]),
                    query=r["query"] or f"queryid {r['queryid']}",
                    factor=r["factor"],
                    factor_low=r["factor_low"],
                    factor_high=r["factor_high"],
                    share=r["share"],
                    cause=cause_words(r.get("cause"), r.get("cause_detail")),
                )
                for r in rows
            )

        facts.update(
            probably_slower=notes(tiered.probably_slower),
            improved=notes(tiered.improved),
            probably_slower_count=tiered.probably_slower_count,
            improved_count=tiered.improved_count,
        )
    return facts


def as_metadata(delivery: dict, chart_limit: int = CHART_IMAGES_LIMIT) -> dict:
    """A delivery's record as Dagster metadata: its message and chart list as JSON, the charts themselves as images
    within `chart_limit` characters (chart_images), the rest as they are."""
    metadata = {k: dg.MetadataValue.json(v) if k in ("message", "charts") else v for k, v in delivery.items()}
    images = chart_images(delivery.get("charts") or [], chart_limit)
    if images is not None:
        metadata["chart_images"] = images
    return metadata


def _partitions_of(tags: Mapping[str, str]) -> str | None:
    """The partition a run was for, or the range of partitions a backfill's run covered."""
    if (key := tags.get("dagster/partition")) is not None:
        return key
    first, last = tags.get(RANGE_START), tags.get(RANGE_END)
    return f"{first} … {last}" if first and last else None


@dg.run_failure_sensor(
    name="slack_run_failure_sensor",
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Posts to Slack when one of radar's own runs fails (when Slack is configured).",
)
def slack_run_failure_sensor(context: dg.RunFailureSensorContext, slack: SlackResource) -> dg.SkipReason | None:
    """Tell the team that a radar run failed, with the job, the run and the error."""
    from radar_pipeline.alerts.slack import DeliveryError
    from radar_pipeline.steps.alert_delivery import run_url

    sender = slack.sender()
    if not sender.configured:
        return dg.SkipReason("Slack is not configured")
    run = context.dagster_run
    text, blocks = render_run_failure(
        run.job_name,
        run.run_id,
        _partitions_of(run.tags),
        context.failure_event.message or "no error message",
        run_url(run.run_id, slack.dagster_url or None),
    )
    try:
        sender.send(text, blocks)
    except DeliveryError as exc:
        context.log.error(f"Slack: {exc}")
    return None
