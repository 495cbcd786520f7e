"""The Slack message for the regressions of a deploy, or of a periodic check: plain text for notifications, Block Kit
for the channel."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

MAX_QUERY = 300  # characters of query text per regression
MAX_SHOWN = 20  # regressions shown in one message; the rest are counted and left to radar.regression
SEVERITY = {"fleet_wide": "low (fleet-wide shift: an outside cause is suspected)"}


@dataclass(frozen=True)
class DeployFacts:
    """What the header says about the deploy, or about the period of a periodic check (`period` set: deploy_id is
    the analysis id, deployed_at the period's start, and service, version and url are empty)."""

    deploy_id: str
    target: str
    deployed_at: datetime
    service: str | None
    version: str | None
    url: str | None
    run_url: str | None  # the analysis run in the Dagster UI
    period: tuple[datetime, datetime] | None = None  # the latest period, compared with the one as long before it


@dataclass(frozen=True)
class Regression:
    """One detected regression as the message shows it."""

    queryid: int
    query: str
    mean_before_ms: float
    mean_after_ms: float
    change_factor: float
    confidence: float
    change_at: datetime
    calls_before: int
    calls_after: int
    cause: str
    plan_summary: str | None
    factor_low: float | None = None  # the 95% interval of the slowdown factor (engine 2)
    factor_high: float | None = None


def escape(text: str) -> str:
    """Escape &, < and > as Slack requires, so a query text can never mention a channel or a user or make a link."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def link(url: str) -> str:
    """A URL made safe inside Slack's <url|label>: escaped, and a | (which would end the URL) percent-encoded."""
    return escape(url).replace("|", "%7C")


def excerpt(query: str, limit: int = MAX_QUERY) -> str:
    """The query's text on one line, cut to `limit` characters, escaped, with no backticks to break a code span."""
    one_line = " ".join(query.split()).replace("`", "'")
    if len(one_line) > limit:
        one_line = one_line[: limit - 1] + "…"
    return escape(one_line)


def render(deploy: DeployFacts, regressions: list[Regression]) -> tuple[str, list[dict[str, Any]]]:
    """(fallback text, blocks) of one message for the deploy's regressions."""
    title = _title(deploy, len(regressions))
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": title[:150], "emoji": False}},
        {"type": "section", "fields": _deploy_fields(deploy)},
    ]
    for r in regressions[:MAX_SHOWN]:
        blocks.append({"type": "divider"})
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": f"```{excerpt(r.query)}```"}})
        blocks.append({"type": "section", "fields": _regression_fields(deploy, r)})
        if r.plan_summary:
            blocks.append(
                {"type": "context", "elements": [{"type": "mrkdwn", "text": f"*Plan:* {escape(r.plan_summary)}"}]}
            )
    if len(regressions) > MAX_SHOWN:
        blocks.append(
            {
                "type": "context",
                "elements": [
                    {
                        "type": "mrkdwn",
                        "text": f"… and {len(regressions) - MAX_SHOWN} more: "
                        f"SELECT * FROM radar.regression WHERE deploy_id = '{escape(deploy.deploy_id)}'",
                    }
                ],
            }
        )
    if deploy.run_url:
        blocks.append(
            {
                "type": "context",
                "elements": [{"type": "mrkdwn", "text": f"<{link(deploy.run_url)}|Analysis run in Dagster>"}],
            }
        )
    return title, blocks


def _title(deploy: DeployFacts, count: int) -> str:
    plural = "query" if count == 1 else "queries"
    if deploy.period:
        start, end = (t.strftime("%Y-%m-%d %H:%M") for t in deploy.period)
        return f"{count} {plural} slower on {deploy.target} with no deploy behind it (periodic check {start}–{end})"
    what = " ".join(p for p in (deploy.service, deploy.version) if p) or deploy.deploy_id
    return f"{count} {plural} slower after deploy {what} on {deploy.target}"


def _deploy_fields(deploy: DeployFacts) -> list[dict[str, str]]:
    if deploy.period:
        start, end = deploy.period
        return [
            {
                "type": "mrkdwn",
                "text": f"*Period:* {start.isoformat(timespec='seconds')} → {end.isoformat(timespec='seconds')}",
            },
            {"type": "mrkdwn", "text": f"*Compared with:* the {_duration(end - start)} before it"},
            {"type": "mrkdwn", "text": f"*Check:* {escape(deploy.deploy_id)}"},
        ]
    deploy_text = escape(deploy.deploy_id)
    if deploy.url:
        deploy_text = f"<{link(deploy.url)}|{deploy_text}>"
    return [
        {"type": "mrkdwn", "text": f"*Deploy:* {deploy_text}"},
        {"type": "mrkdwn", "text": f"*At:* {deploy.deployed_at.isoformat(timespec='seconds')}"},
        {"type": "mrkdwn", "text": f"*Service:* {escape(deploy.service or '-')}"},
        {"type": "mrkdwn", "text": f"*Version:* {escape(deploy.version or '-')}"},
    ]


def _regression_fields(deploy: DeployFacts, r: Regression) -> list[dict[str, str]]:
    if deploy.period:
        began = r.change_at.isoformat(timespec="seconds")
    else:
        began = f"{(r.change_at - deploy.deployed_at).total_seconds():+.0f} s from the deploy"
    cause = SEVERITY.get(r.cause, r.cause)
    interval = ""
    if r.factor_low is not None and r.factor_high is not None and r.factor_low == r.factor_low:  # not NaN
        interval = f", 95% interval ×{r.factor_low:.2f} to ×{r.factor_high:.2f}"
    return [
        {
            "type": "mrkdwn",
            "text": f"*Mean:* {r.mean_before_ms:.3f} → {r.mean_after_ms:.3f} ms (×{r.change_factor:.2f}{interval})",
        },
        {"type": "mrkdwn", "text": f"*Confidence:* {r.confidence:.4f} (1 − the family-adjusted p-value)"},
        {"type": "mrkdwn", "text": f"*Change began:* {began}"},
        {"type": "mrkdwn", "text": f"*Calls:* {r.calls_before:,} before, {r.calls_after:,} after"},
        {"type": "mrkdwn", "text": f"*Cause:* {escape(cause)}"},
        {"type": "mrkdwn", "text": f"*queryid:* {r.queryid}"},
    ]


def _duration(span: timedelta) -> str:
    seconds = int(span.total_seconds())
    if seconds % 3600 == 0:
        hours = seconds // 3600
        return "hour" if hours == 1 else f"{hours} hours"
    if seconds % 60 == 0:
        return f"{seconds // 60} minutes"
    return f"{seconds} seconds"
