"""regression_alerts: one Slack message per deploy with regressions, through an outbox so nothing is sent twice; and a
Slack message when one of radar's own runs fails."""

import os
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any

import dagster as dg
import numpy as np
import pandas as pd
import sqlalchemy as sa

from radar_pipeline.alerts.chart import render_chart
from radar_pipeline.alerts.render import DeployFacts, Regression, escape, render
from radar_pipeline.alerts.slack import DeliveryError, SlackSender
from radar_pipeline.collector.plan_shape import summary
from radar_pipeline.defs.deploys import deploy_verdicts, deploys_partitions
from radar_pipeline.defs.resources import WarehouseResource
from radar_pipeline.engine import EngineSettings
from radar_pipeline.engine.samples import window_samples
from radar_pipeline.pgss_model import KEY, statement_keys
from radar_pipeline.warehouse import alerts as outbox
from radar_pipeline.warehouse.analysis import read_window

DAGSTER_URL_VAR = "RADAR_DAGSTER_URL"
CHART_DIR_VAR = "RADAR_CHART_DIR"  # where chart images are kept (default: a new temporary folder per deploy)
NO_CHANNEL = "-"


class SlackResource(dg.ConfigurableResource):
    """Slack, from RADAR_SLACK_TOKEN and RADAR_SLACK_CHANNEL (a bot: messages and chart images) or
    RADAR_SLACK_WEBHOOK_URL (an incoming webhook: messages without images). Neither: alerts are recorded as skipped
    and the message is written to the run log."""

    token: str = ""
    channel: str = ""
    webhook_url: str = ""
    base_url: str = "https://slack.com/api/"

    def sender(self) -> SlackSender:
        """A sender for the configured mode: bot token and channel, webhook, or none."""
        return SlackSender(
            token=self.token or None,
            channel=self.channel or None,
            webhook_url=self.webhook_url or None,
            base_url=self.base_url,
        )


def slack_from_environment() -> SlackResource:
    """The Slack resource as configured: secrets are resolved at run time through EnvVar, only when they are set."""
    fields: dict[str, Any] = {}
    for field, var in (("token", "RADAR_SLACK_TOKEN"), ("webhook_url", "RADAR_SLACK_WEBHOOK_URL")):
        if os.environ.get(var):
            fields[field] = dg.EnvVar(var)
    if os.environ.get("RADAR_SLACK_CHANNEL"):
        fields["channel"] = os.environ["RADAR_SLACK_CHANNEL"]
    return SlackResource(**fields)


@dg.asset(
    partitions_def=deploys_partitions,
    deps=[deploy_verdicts],
    group_name="analysis",
    description="Slack alerts for the deploy's regressions (outbox: radar.alert).",
)
def regression_alerts(
    context: dg.AssetExecutionContext, warehouse: WarehouseResource, slack: SlackResource
) -> dg.MaterializeResult:
    """Send what is not yet sent of the deploy's regressions, in one message, and record every attempt."""
    deploy_id = context.partition_key
    with warehouse.engine().begin() as conn:
        outbox.lock(conn, deploy_id)
        found = outbox.detections(conn, deploy_id)
        if found.empty:
            return dg.MaterializeResult(metadata={"regressions": 0, "note": "no regression detected for this deploy"})
        metadata = deliver(context, conn, slack.sender(), found, _facts(found))
        metadata["statuses"] = dg.MetadataValue.json(outbox.statuses(conn, deploy_id))
    return dg.MaterializeResult(metadata=metadata)


def deliver(
    context: dg.AssetExecutionContext, conn: sa.Connection, sender: SlackSender, found: pd.DataFrame, facts: DeployFacts
) -> dict[str, Any]:
    """Send, in one message, what is not yet sent of one analysis's regressions on one target (`found`, from
    outbox.detections), and record every attempt in the outbox; the caller holds the analysis's lock."""
    channel = sender.channel or NO_CHANNEL
    keys = statement_keys(found)
    outbox.enqueue(conn, facts.deploy_id, facts.target, keys, channel)
    todo = set(outbox.pending(conn, facts.deploy_id, facts.target, channel))
    todo_rows = found[[k in todo for k in keys]]
    metadata: dict[str, Any] = {"regressions": len(found), "to_send": len(todo_rows), "channel": channel}
    if todo_rows.empty:
        return metadata
    text, blocks = render(facts, [_regression(r) for r in todo_rows.itertuples()])
    metadata["message"] = dg.MetadataValue.json({"text": text, "blocks": blocks})
    pending_keys = [k for k in keys if k in todo]
    charts = _charts(conn, facts, todo_rows) if channel != "webhook" else []
    metadata["charts"] = dg.MetadataValue.json([str(p) for p, _ in charts])

    def mark(status: str, **kwargs: Any) -> None:
        outbox.mark(conn, facts.deploy_id, facts.target, channel, pending_keys, status, **kwargs)

    if not sender.configured:
        context.log.info(f"Slack is not configured; the alert would read:\n{text}\n{_plain(blocks)}")
        for path, _ in charts:
            context.log.info(f"chart: {path}")
        mark("skipped")
        return metadata
    try:
        delivered = sender.send(text, blocks, charts)
    except DeliveryError as exc:
        context.log.error(f"Slack: {exc}")
        mark("pending" if exc.retryable else "failed", error=str(exc))
    else:
        mark("sent", ts=delivered.ts)
        metadata["message_ts"] = delivered.ts or ""
        for error in delivered.chart_errors:
            context.log.warning(f"Slack: a chart was not uploaded: {error}")
    return metadata


def run_url(run_id: str | None) -> str | None:
    """The run's page in the Dagster UI (at RADAR_DAGSTER_URL, default http://localhost:3000)."""
    if not run_id:
        return None
    return f"{os.environ.get(DAGSTER_URL_VAR, 'http://localhost:3000').rstrip('/')}/runs/{run_id}"


def _facts(found: pd.DataFrame) -> DeployFacts:
    first = found.iloc[0]
    return DeployFacts(
        deploy_id=str(first.deploy_id),
        target=str(first.target),
        deployed_at=pd.Timestamp(first.deployed_at).to_pydatetime(),
        service=first.service,
        version=first.version,
        url=first.url,
        run_url=run_url(first.run_id),
    )


def _regression(row: Any) -> Regression:
    plan = row.plan_diff if isinstance(row.plan_diff, dict) else None
    return Regression(
        queryid=int(row.queryid),
        query=row.query or f"queryid {row.queryid}",
        mean_before_ms=float(row.mean_before_ms),
        mean_after_ms=float(row.mean_after_ms),
        change_factor=float(row.change_factor),
        confidence=float(row.confidence),
        change_at=pd.Timestamp(row.change_at).to_pydatetime(),
        calls_before=int(row.calls_before),
        calls_after=int(row.calls_after),
        cause=str(row.cause),
        plan_summary=summary(plan) if plan else None,
        factor_low=None if pd.isna(row.factor_low) else float(row.factor_low),
        factor_high=None if pd.isna(row.factor_high) else float(row.factor_high),
    )


def _charts(conn: sa.Connection, facts: DeployFacts, rows: pd.DataFrame) -> list[tuple[Path, str]]:
    """A PNG per regression from the analysed window's interval means."""
    settings = EngineSettings.from_dict(rows["settings"].iloc[0])
    lo, hi = facts.deployed_at - settings.window, facts.deployed_at + settings.window
    window = read_window(conn, facts.target, lo, hi, only=rows[KEY])
    counters = window.counters.drop(columns=["fingerprint"])
    samples = window_samples(counters, _ns(lo), _ns(hi))
    by_key = {tuple(k): i for i, k in enumerate(window.keys[KEY].itertuples(index=False))}
    folder = chart_folder(facts.deploy_id)
    charts = []
    for row in rows.itertuples():
        group = by_key.get((int(row.dbid), int(row.userid), int(row.queryid), bool(row.toplevel)))
        if group is None:
            continue
        code = list(samples.keys).index(group)
        start, stop = samples.offsets[code], samples.offsets[code + 1]
        ends = [datetime.fromtimestamp(e / 1e9, tz=facts.deployed_at.tzinfo) for e in samples.end[start:stop]]
        means = samples.time[start:stop] / samples.calls[start:stop]
        if facts.period:
            title = f"queryid {row.queryid} on {facts.target}: ×{row.change_factor:.2f} in {facts.deploy_id}"
        else:
            title = f"queryid {row.queryid}: ×{row.change_factor:.2f} after deploy {facts.deploy_id}"
        path = render_chart(
            folder / (f"{facts.target}-{row.queryid}.png" if facts.period else f"{row.queryid}.png"),
            np.array(ends),
            means,
            facts.deployed_at,
            pd.Timestamp(row.change_at).to_pydatetime(),
            None if facts.period else settings.tolerance,
            float(row.segment_mean_before_ms),
            float(row.segment_mean_after_ms),
            title,
            "split between the periods" if facts.period else "deploy",
        )
        charts.append((path, title))
    return charts


def chart_folder(partition_key: str) -> Path:
    """Where a partition's chart images go: RADAR_CHART_DIR/<partition> when set, else a new temporary folder."""
    chosen = os.environ.get(CHART_DIR_VAR)
    if chosen:
        return Path(chosen) / partition_key.replace(":", "_")
    return Path(tempfile.mkdtemp(prefix=f"radar-charts-{partition_key.replace(':', '_')}-"))


def _ns(moment: datetime) -> int:
    return int(pd.Timestamp(moment).value)


def _plain(blocks: list[dict[str, Any]]) -> str:
    """The blocks' text, one line each, for the run log."""
    lines = []
    for block in blocks:
        if "text" in block:
            lines.append(block["text"]["text"])
        for field in block.get("fields", []) + block.get("elements", []):
            lines.append(field["text"])
    return "\n".join(lines)


@dg.run_failure_sensor(
    name="slack_run_failure_sensor",
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Posts to Slack when one of radar's own runs fails (when Slack is configured).",
)
def slack_run_failure_sensor(context: dg.RunFailureSensorContext, slack: SlackResource) -> dg.SkipReason | None:
    """Tell the team that a radar run failed, with the job, the run and the error."""
    sender = slack.sender()
    if not sender.configured:
        return dg.SkipReason("Slack is not configured")
    run = context.dagster_run
    error = context.failure_event.message or "no error message"
    text = f"radar: run of {run.job_name} failed"
    blocks: list[dict[str, Any]] = [
        {"type": "section", "text": {"type": "mrkdwn", "text": f"*{text}*"}},
        {
            "type": "section",
            "fields": [
                {"type": "mrkdwn", "text": f"*Run:* <{run_url(run.run_id)}|{run.run_id[:8]}>"},
                {"type": "mrkdwn", "text": f"*Partition:* {run.tags.get('dagster/partition', '-')}"},
            ],
        },
        {"type": "context", "elements": [{"type": "mrkdwn", "text": _escape_error(error)}]},
    ]
    try:
        sender.send(text, blocks)
    except DeliveryError as exc:
        context.log.error(f"Slack: {exc}")
    return None


def _escape_error(error: str) -> str:
    return escape(error[:1500])
