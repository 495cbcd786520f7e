"""The Slack message for the regressions of a deploy, or of a periodic check: plain text for notifications, Block Kit
for the channel."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

MAX_QUERY = 300  # characters of query text per regression
# Slack's documented limits (Block Kit reference: blocks, section, header, text object; chat.postMessage):
MAX_BLOCKS = 50
MAX_SECTION_TEXT = 3000
MAX_FIELDS = 10
MAX_FIELD_TEXT = 2000
MAX_HEADER = 150
MAX_CONTEXT_ELEMENTS = 10
MAX_FALLBACK = 3000  # Slack truncates text past 40,000 characters; notifications show far less
BLOCKS_PER_REGRESSION = 4  # divider, query, numbers, plan
MAX_SHOWN = 10  # regressions shown in one message: 2 + 10 × 4 + 2 = 44 blocks; the rest summarised with a link
SEVERITY = {"fleet_wide": "low (fleet-wide shift: an outside cause is suspected)"}


@dataclass(frozen=True)
class AnalysisFacts:
    """What the header says about the analysis: a deploy's, or a periodic check's (`period` set: service, version and
    url are empty).

    analysis_id: the deploy id, or `periodic:<hour>`; split_at: where the window is split (the deploy's time, or the
    start of the latest period)."""

    analysis_id: str
    target: str
    split_at: datetime
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


def escape_within(text: str, limit: int) -> str:
    """`text` escaped and, when the escaped form is longer than `limit` characters, cut (never inside an entity)
    so that it and a closing … fit."""
    escaped = escape(text)
    if len(escaped) <= limit:
        return escaped
    out: list[str] = []
    used = 0
    for char in text:
        piece = escape(char)
        if used + len(piece) > limit - 1:
            break
        out.append(piece)
        used += len(piece)
    return "".join(out) + "…"


def link(url: str) -> str:
    """A URL made safe inside Slack's <url|label>: escaped, and a | (which would end the URL) percent-encoded."""
    return escape(url).replace("|", "%7C")


def excerpt(query: str, limit: int = MAX_QUERY) -> str:
    """The query's text on one line, cut to `limit` characters, escaped, with no backticks to break a code span."""
    one_line = " ".join(query.split()).replace("`", "'")
    if len(one_line) > limit:
        one_line = one_line[: limit - 1] + "…"
    return escape_within(one_line, MAX_SECTION_TEXT - 6)


def render(facts: AnalysisFacts, regressions: list[Regression]) -> tuple[str, list[dict[str, Any]]]:
    """(fallback text, blocks) of one message for the deploy's regressions, within Slack's limits whatever their
    number: the first MAX_SHOWN (the caller orders them, worst first) in full, the rest summarised with a link."""
    title = _title(facts, len(regressions))
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": _cut(title, MAX_HEADER), "emoji": False}},
        {"type": "section", "fields": _analysis_fields(facts)},
    ]
    for r in regressions[:MAX_SHOWN]:
        blocks.append({"type": "divider"})
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": f"```{excerpt(r.query)}```"}})
        blocks.append({"type": "section", "fields": _regression_fields(facts, r)})
        if r.plan_summary:
            plan = escape_within(r.plan_summary, MAX_SECTION_TEXT - 10)
            blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": f"*Plan:* {plan}"}]})
    if len(regressions) > MAX_SHOWN:
        rest = regressions[MAX_SHOWN:]
        worst = max(r.change_factor for r in rest)
        where = f"<{link(facts.run_url)}|all of them in Dagster>, or " if facts.run_url else ""
        sql = f"SELECT * FROM radar.regression WHERE deploy_id = '{escape_within(facts.analysis_id, 300)}'"
        blocks.append(
            {
                "type": "section",
                "text": {
                    "type": "mrkdwn",
                    "text": f"*… and {len(rest)} more* (up to ×{worst:.2f}): {where}`{sql}`",
                },
            }
        )
    if facts.run_url:
        blocks.append(
            {
                "type": "context",
                "elements": [{"type": "mrkdwn", "text": f"<{link(facts.run_url)}|Analysis run in Dagster>"}],
            }
        )
    # The fallback text is parsed like mrkdwn in notifications: escaped, so a service named <!channel> mentions no one.
    return escape_within(title, MAX_FALLBACK), blocks


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _title(facts: AnalysisFacts, count: int) -> str:
    plural = "query" if count == 1 else "queries"
    if facts.period:
        start, end = (t.strftime("%Y-%m-%d %H:%M") for t in facts.period)
        return f"{count} {plural} slower on {facts.target} with no deploy behind it (periodic check {start}–{end})"
    what = " ".join(p for p in (facts.service, facts.version) if p) or facts.analysis_id
    return f"{count} {plural} slower after deploy {what} on {facts.target}"


def _analysis_fields(facts: AnalysisFacts) -> list[dict[str, str]]:
    if facts.period:
        start, end = facts.period
        return [
            {
                "type": "mrkdwn",
                "text": f"*Period:* {start.isoformat(timespec='seconds')} → {end.isoformat(timespec='seconds')}",
            },
            {"type": "mrkdwn", "text": f"*Compared with:* the {_duration(end - start)} before it"},
            {"type": "mrkdwn", "text": f"*Check:* {escape_within(facts.analysis_id, 500)}"},
        ]
    deploy_text = escape_within(facts.analysis_id, 500)
    if facts.url and len(link(facts.url)) <= MAX_FIELD_TEXT - 600:
        deploy_text = f"<{link(facts.url)}|{deploy_text}>"
    return [
        {"type": "mrkdwn", "text": f"*Deploy:* {deploy_text}"},
        {"type": "mrkdwn", "text": f"*At:* {facts.split_at.isoformat(timespec='seconds')}"},
        {"type": "mrkdwn", "text": f"*Service:* {escape_within(facts.service or '-', MAX_FIELD_TEXT - 20)}"},
        {"type": "mrkdwn", "text": f"*Version:* {escape_within(facts.version or '-', MAX_FIELD_TEXT - 20)}"},
    ]


def _regression_fields(facts: AnalysisFacts, r: Regression) -> list[dict[str, str]]:
    if facts.period:
        began = r.change_at.isoformat(timespec="seconds")
    else:
        began = f"{(r.change_at - facts.split_at).total_seconds():+.0f} s from the deploy"
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
        {"type": "mrkdwn", "text": f"*Cause:* {escape_within(cause, MAX_FIELD_TEXT - 20)}"},
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


def render_run_failure(
    job_name: str, run_id: str, partition: str | None, error: str, run_url: str | None
) -> tuple[str, list[dict[str, Any]]]:
    """(fallback text, blocks) of the message that one of radar's own runs failed: the job, the run and the error."""
    text = _cut(f"radar: run of {job_name} failed", MAX_FALLBACK)
    run = f"<{link(run_url)}|{run_id[:8]}>" if run_url and len(link(run_url)) < 1500 else run_id[:8]
    blocks: list[dict[str, Any]] = [
        {"type": "section", "text": {"type": "mrkdwn", "text": f"*{escape_within(text, MAX_SECTION_TEXT - 2)}*"}},
        {
            "type": "section",
            "fields": [
                {"type": "mrkdwn", "text": f"*Run:* {run}"},
                {"type": "mrkdwn", "text": f"*Partition:* {escape_within(partition or '-', MAX_FIELD_TEXT - 20)}"},
            ],
        },
        {"type": "context", "elements": [{"type": "mrkdwn", "text": escape_within(error, 1500)}]},
    ]
    return text, blocks
