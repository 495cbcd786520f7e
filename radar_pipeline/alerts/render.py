"""The Slack message for the regressions of a deploy, or of a periodic check: plain text for notifications, Block Kit
for the channel. Every text from outside (statements, deploy fields, target names, URLs) is escaped for mrkdwn where
it is placed, and the finished message is cleaned of control and bidi characters as `radar verdicts` does
(config.printable): a right-to-left override in a statement cannot reorder what the channel reads."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from radar_pipeline.config import printable
from radar_pipeline.pgss_model import shared_queryid_note

MAX_QUERY = 300  # characters of query text per regression
MAX_LABEL = 500  # characters of a label's words (who, the note) above its regression, once labelled
# Slack's documented limits (Block Kit reference: blocks, section, header, text object; chat.postMessage):
MAX_BLOCKS = 50
MAX_SECTION_TEXT = 3000
MAX_FIELDS = 10
MAX_FIELD_TEXT = 2000
MAX_HEADER = 150
MAX_CONTEXT_ELEMENTS = 10
MAX_FALLBACK = 3000  # Slack truncates text past 40,000 characters; notifications show far less
MAX_SHOWN = 10  # regressions shown in one message: 2 + 10 × 4 + 2 = 44 blocks; the rest summarised with a link
MAX_SHOWN_WITH_BUTTONS = 8  # with a row of label buttons each: 2 + 2 + 8 × 5 + 2 = 46 blocks
# The label buttons under each regression (docs/labels.md): their action_id is LABEL_ACTION and the label; Slack
# brings the interaction to the receiver, which stores the label (steps/labelling.py reads it back).
LABEL_ACTION = "radar_label:"
LABEL_BUTTONS = (("intended", "Intended"), ("false_alarm", "False alarm"), ("acknowledged", "Acknowledge"))
CANARY_CAUSE = "canary"  # a Regression's cause when the canary arm found it (render_canary; PagerDuty says so)
SEVERITY = {"fleet_wide": "low (fleet-wide shift: an outside cause is suspected)"}
MAX_CHANGES = 3  # load changes (new heavy statements, surges) shown in full, before the regressions: 3 blocks each
NO_DATA_BEFORE = "no data before the deploy"  # a target with no statement's calls stored before it, not a load of 0
CHANGE_WORDS = {
    "new": "new statement",
    "n_plus_one": "N+1: calls surged, latency unchanged",
    "surge": "call surge",
    "replaced": "a rewritten statement",  # render says which half and its partner
    "deploy_statement": "the deploy's own statement",
}


@dataclass(frozen=True)
class CanaryArms:
    """A canary analysis's two arms, as every channel names them (docs/canary.md): the watched target itself (the
    outbox files a canary's rows under `canary:<target>`, which is never shown), the canary and stable roles, and the
    window both arms were read over (the same minutes)."""

    target: str
    canary_role: str
    stable_role: str
    window: tuple[datetime, datetime]


@dataclass(frozen=True)
class TierNote:
    """A statement marked probably slower or improved, as a message names it: its factor (at the change) with the
    95% interval, its share of the execution time after the deploy (None: unknown), queryid, text and cause."""

    queryid: int
    query: str
    factor: float | None
    factor_low: float | None = None
    factor_high: float | None = None
    share: float | None = None
    cause: str | None = None  # a probably slower statement's, with its detail: "temp_spill (temp blocks … 0 → 1,024)"


TIERS_SHOWN = 3  # statements of each tier a message names, the busiest first


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
    # the target's execution time per minute of window before and after the split (radar.deploy_impact), when known
    # (before: None when no statement had calls before the split)
    load_ms_per_min: tuple[float | None, float] | None = None
    # the deploy's state (radar.deploy_state: fail, pass, inconclusive), its statements' verdict counts (verdict,
    # statements) and the share of its execution time after the deploy that is cleared, when known
    state: str | None = None
    verdict_counts: tuple[tuple[str, int], ...] = ()
    cleared_share: float | None = None
    # a canary analysis's (its detections are the canary role's against the stable role's over the same minutes, not
    # before against after: each channel says so); target is then the outbox's `canary:<target>`, shown_target the real
    canary: CanaryArms | None = None
    # the deploy's statements beyond their verdicts (sql/0036), the busiest first: open ones slower on their own
    # evidence (probably slower: the gate warns, it does not block) and cleared ones clearly faster (improved), with
    # how many of each there are in all
    probably_slower: tuple[TierNote, ...] = ()
    improved: tuple[TierNote, ...] = ()
    probably_slower_count: int = 0
    improved_count: int = 0


def shown_target(facts: AnalysisFacts) -> str:
    """The target a channel shows: the watched target itself, also for a canary analysis (facts.target is then the
    outbox's `canary:<target>`, kept apart from the before/after alerts of the same statements)."""
    return facts.canary.target if facts.canary is not None else facts.target


def canary_title(facts: AnalysisFacts, count: int) -> str:
    """A canary analysis's detections in one line, unescaped: "Canary web_canary of deploy shop v2 on orders-db: 1
    statement slower than stable role web in the same minutes"."""
    assert facts.canary is not None
    plural = "statement" if count == 1 else "statements"
    what = " ".join(p for p in (facts.service, facts.version) if p) or facts.analysis_id
    return (
        f"Canary {facts.canary.canary_role} of deploy {what} on {facts.canary.target}: {count} {plural} slower than "
        f"stable role {facts.canary.stable_role} in the same minutes"
    )


def canary_window_words(arms: CanaryArms) -> str:
    """The minutes both arms were read over: "2026-12-06T06:00:00+00:00 → 2026-12-06T06:30:00+00:00 (30 min)"."""
    start, end = arms.window
    return f"{start.isoformat(timespec='seconds')} → {end.isoformat(timespec='seconds')} ({span_words(end - start)})"


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
    history_intervals: float | None = None  # of its own history, the test combined with its window (0: window alone)
    shared_with: list[str] | None = None  # other tables PostgreSQL 18 gives its queryid to (pgss_model.SHARED_QUERYID)
    cause_detail: str | None = None  # the cause in words: the named change, the counters' figures, the culprit
    named_changes: list[str] | None = None  # every change named on its relations, database or role, in words
    undo_hint: str | None = None  # a statement that undoes the first named change, where one can be derived
    group: str | None = None  # the detected groups it belongs to, in words (steps/groups.py; None: none)
    look: int = 0  # the look that found it: 0 the first verdict, k > 0 a later look (issue 29)
    found_after: timedelta | None = None  # a later look's: how long after the deploy its after side ended
    key: tuple[int, int, int, bool] | None = None  # its statement key (dbid, userid, queryid, toplevel): its buttons'
    label: str | None = None  # its standing label in words ("intended by ana: the audit trigger"), once labelled
    # the rise its weekly rhythm alone explains (a periodic check's, engine/rhythm.py): mean_after_ms is then the
    # latest period at the earlier period's usual level (None: decided without one)
    expected_factor: float | None = None


@dataclass(frozen=True)
class LoadChange:
    """A statement whose load the deploy changed, as the message shows it (a radar.statement_change row)."""

    queryid: int
    query: str
    kind: str  # new, surge, n_plus_one, replaced (heavy: the half that started), deploy_statement
    calls_per_min_before: float
    calls_per_min_after: float
    exec_ms_per_min_before: float
    exec_ms_per_min_after: float
    mean_before_ms: float | None
    mean_after_ms: float | None
    share_of_time_after: float  # its share of the target's execution time after the split
    plan_summary: str | None = None  # its first stored plan
    partner_queryid: int | None = None  # replaced: the other half
    per_call_factor: float | None = None  # replaced: the new half's mean per call / the old half's


def replacement_words(partner_queryid: int, per_call_factor: float | None, started: bool) -> str:
    """A replaced half in words: "replaces queryid N (×4.0 per call)" for the statement that started, "replaced by
    queryid N (…)" for the one that stopped."""
    factor = (
        "" if per_call_factor is None or per_call_factor != per_call_factor else f" (×{per_call_factor:.1f} per call)"
    )
    return f"{'replaces' if started else 'replaced by'} queryid {partner_queryid}{factor}"


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
    one_line = " ".join(printable(query).split()).replace("`", "'")
    if len(one_line) > limit:
        one_line = one_line[: limit - 1] + "…"
    return escape_within(one_line, MAX_SECTION_TEXT - 6)


def render(
    facts: AnalysisFacts,
    regressions: list[Regression],
    changes: list[LoadChange] | None = None,
    buttons: bool = False,
) -> tuple[str, list[dict[str, Any]]]:
    """(fallback text, blocks) of one message for the deploy's regressions and load changes, within Slack's limits
    whatever their number. The database time and the load changes (new heavy statements, call surges: the first
    MAX_CHANGES, heaviest first) lead, since a collateral slowdown's cause is among them; then the first regressions
    (the caller orders them, worst first) in full, the rest summarised with a link. With `buttons`, each regression
    shown in full has a row of label buttons (label_buttons), and MAX_SHOWN_WITH_BUTTONS are shown."""
    changes = changes or []
    title = _title(facts, len(regressions), changes)
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": _cut(title, MAX_HEADER), "emoji": False}},
        {"type": "section", "fields": _analysis_fields(facts)},
    ]
    if facts.load_ms_per_min is not None:  # the summary, as one more field of the analysis
        blocks[1]["fields"].append({"type": "mrkdwn", "text": load_line(*facts.load_ms_per_min)})
    if facts.state is not None:
        blocks[1]["fields"].append({"type": "mrkdwn", "text": state_line(facts)})
    blocks.extend(tier_blocks(facts))
    for c in changes[:MAX_CHANGES]:
        blocks.append({"type": "divider"})
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": f"```{excerpt(c.query)}```"}})
        blocks.append({"type": "section", "fields": _change_fields(c)})
    if len(changes) > MAX_CHANGES:
        sql = f"SELECT * FROM radar.statement_change WHERE deploy_id = '{escape_within(facts.analysis_id, 300)}'"
        text = f"*… and {len(changes) - MAX_CHANGES} more load changes:* `{sql}`"
        blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": text}]})
    most = MAX_SHOWN_WITH_BUTTONS if buttons else MAX_SHOWN
    shown = most - min(len(changes), MAX_CHANGES) if changes else most
    for n, r in enumerate(regressions[:shown]):
        blocks.append({"type": "divider"})
        labelled = f"*Labelled {escape_within(' '.join(r.label.split()), MAX_LABEL)}*\n" if r.label else ""
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": f"{labelled}```{excerpt(r.query)}```"}})
        blocks.append({"type": "section", "fields": _regression_fields(facts, r)})
        if r.plan_summary:
            plan = escape_within(r.plan_summary, MAX_SECTION_TEXT - 10)
            blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": f"*Plan:* {plan}"}]})
        if buttons and r.key is not None:
            blocks.append(label_buttons(facts.analysis_id, facts.target, r.key, n))
    if len(regressions) > shown:
        rest = regressions[shown:]
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
    return clean(escape_within(title, MAX_FALLBACK)), clean(blocks)


def label_buttons(analysis_id: str, target: str, key: tuple[int, int, int, bool], n: int) -> dict[str, Any]:
    """An actions block of label buttons for one regression (the n-th of its message): each button's value names the
    verdict (the analysis, its target and the statement key), read back by button_subject."""
    value = json.dumps({"d": analysis_id, "t": target, "k": [int(k) for k in key[:3]] + [bool(key[3])]})
    return {
        "type": "actions",
        "block_id": f"radar-label-{n}",
        "elements": [
            {
                "type": "button",
                "action_id": LABEL_ACTION + label,
                "value": value,
                "text": {"type": "plain_text", "text": words, "emoji": False},
            }
            for label, words in LABEL_BUTTONS
        ],
    }


def button_subject(value: object) -> tuple[str, str, tuple[int, int, int, bool]] | None:
    """The verdict a label button's value names (analysis id, target, statement key), or None when it is not one."""
    try:
        found = json.loads(value) if isinstance(value, str) else {}
        analysis_id, target, (dbid, userid, queryid, toplevel) = found["d"], found["t"], found["k"]
    except (ValueError, TypeError, KeyError):
        return None
    numbers = (dbid, userid, queryid)
    if not (isinstance(analysis_id, str) and isinstance(target, str) and isinstance(toplevel, bool)):
        return None
    if not all(isinstance(x, int) and not isinstance(x, bool) and -(2**63) <= x < 2**63 for x in numbers):
        return None
    return analysis_id, target, (dbid, userid, queryid, toplevel)


def clean(value: Any) -> Any:
    """Every text in `value` (a text, or blocks: lists and dicts of them) without control and bidi characters. Only
    removes, so a text cut to a limit stays within it."""
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, list):
        return [clean(item) for item in value]
    if isinstance(value, dict):
        return {key: clean(item) for key, item in value.items()}
    return value


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _title(facts: AnalysisFacts, count: int, changes: list[LoadChange] | None = None) -> str:
    plural = "query" if count == 1 else "queries"
    if facts.period:
        start, end = (t.strftime("%Y-%m-%d %H:%M") for t in facts.period)
        return f"{count} {plural} slower on {facts.target} with no deploy behind it (periodic check {start}–{end})"
    what = " ".join(p for p in (facts.service, facts.version) if p) or facts.analysis_id
    parts = [f"{count} {plural} slower"] if count else []
    kinds = [c.kind for c in changes or []]
    for kind, one, many in (
        ("new", "new heavy statement", "new heavy statements"),
        ("n_plus_one", "N+1 surge", "N+1 surges"),
        ("surge", "call surge", "call surges"),
        ("replaced", "heavier rewritten statement", "heavier rewritten statements"),
    ):
        n = kinds.count(kind)
        if n:
            parts.append(f"{n} {one if n == 1 else many}")
    if not parts and facts.probably_slower_count:
        n = facts.probably_slower_count
        parts.append(f"{n} {'query' if n == 1 else 'queries'} probably slower (not proven)")
    return f"{', '.join(parts) or '0 queries slower'} after deploy {what} on {facts.target}"


def state_line(facts: AnalysisFacts) -> str:
    """The deploy's state with its statements' verdict counts and the share of its execution time cleared."""
    counts = ", ".join(f"{n:,} {verdict}" for verdict, n in facts.verdict_counts)
    share = "" if facts.cleared_share is None else f"; {facts.cleared_share:.0%} of the time after the deploy cleared"
    tiers = "".join(
        f"; {n:,} {words}"
        for n, words in ((facts.probably_slower_count, "probably slower"), (facts.improved_count, "improved"))
        if n
    )
    return f"*Deploy state:* {escape_within(facts.state or '-', 40)} ({counts}{share}{tiers})"


def cause_words(cause: str | None, detail: str | None) -> str | None:
    """A stored cause with its detail, as one phrase ("temp_spill (temp blocks written per call 0 → 1,024 …)"); None
    without a cause."""
    if not cause:
        return None
    return f"{cause} ({detail})" if detail else cause


def tier_note_words(note: TierNote) -> str:
    """A tiered statement's numbers, unescaped: "×3.35 (95% interval ×1.72 to ×6.52), 2.1% of the time after the
    deploy, queryid 42, cause: temp_spill (…)"."""
    words = "×?" if note.factor is None or note.factor != note.factor else f"×{note.factor:.2f}"
    if note.factor_low is not None and note.factor_high is not None and note.factor_low == note.factor_low:
        words += f" (95% interval ×{note.factor_low:.2f} to ×{note.factor_high:.2f})"
    if note.share is not None and note.share == note.share:
        words += f", {note.share:.1%} of the time after the deploy"
    cause = f", cause: {note.cause}" if note.cause else ""
    return f"{words}, queryid {note.queryid}{cause}"


def tier_blocks(facts: AnalysisFacts) -> list[dict[str, Any]]:
    """The deploy's probably-slower statements (a warning each: slower on its own evidence, not proven within the
    family's budget, so the gate does not block on it) and its improvements, at most TIERS_SHOWN of each with their
    texts escaped, the rest counted: one section and one context block at most."""
    blocks: list[dict[str, Any]] = []
    if facts.probably_slower_count:
        n = facts.probably_slower_count
        lines = [
            f"*:warning: {n} statement{'s' if n != 1 else ''} probably slower* (slower on its own evidence, not proven "
            "within the deploy's false-alert budget: the gate warns, it does not block)"
        ]
        for note in facts.probably_slower[:TIERS_SHOWN]:
            lines.append(f"• {escape_within(tier_note_words(note), 600)}: `{excerpt(note.query, 150)}`")
        if n > min(len(facts.probably_slower), TIERS_SHOWN):
            lines.append(
                f"… and {n - min(len(facts.probably_slower), TIERS_SHOWN)} more: `radar verdicts "
                f"{escape_within(facts.analysis_id, 300)}`"
            )
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": _cut("\n".join(lines), MAX_SECTION_TEXT)}})
    if facts.improved_count:
        n = facts.improved_count
        shown = facts.improved[:TIERS_SHOWN]
        named = "; ".join(f"{escape_within(tier_note_words(note), 600)} `{excerpt(note.query, 80)}`" for note in shown)
        more = " …" if n > len(shown) else ""
        text = f"*{n} statement{'s' if n != 1 else ''} faster:* {named}{more}"
        blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": _cut(text, MAX_SECTION_TEXT)}]})
    return blocks


def load_line(before: float | None, after: float) -> str:
    """The target's execution time per minute either side of the split, as the message's summary line (`before`
    None: no statement had calls before it)."""
    if before is None:
        return f"*Database time:* {after:,.1f} ms per minute after the deploy ({NO_DATA_BEFORE})"
    factor = f" (×{after / before:.2f})" if before > 0 else ""
    return f"*Database time:* {before:,.1f} → {after:,.1f} ms per minute{factor}"


def _change_fields(c: LoadChange) -> list[dict[str, str]]:
    what = CHANGE_WORDS.get(c.kind, c.kind)
    if c.kind == "replaced" and c.partner_queryid is not None:
        what = replacement_words(c.partner_queryid, c.per_call_factor, started=c.calls_per_min_before == 0)
        what += f", {c.share_of_time_after:.0%} of the database time after the deploy"
    elif c.kind == "new":
        what += f", {c.share_of_time_after:.0%} of the database time after the deploy"
    elif c.calls_per_min_before > 0:
        what += f", calls ×{c.calls_per_min_after / c.calls_per_min_before:.1f}"
    mean = (
        f"{c.mean_after_ms:.3f} ms"
        if c.mean_before_ms is None or c.mean_before_ms != c.mean_before_ms  # None or NaN: no calls before
        else f"{c.mean_before_ms:.3f} → {c.mean_after_ms:.3f} ms"
    )
    fields = [
        {"type": "mrkdwn", "text": f"*Load change:* {escape_within(what, MAX_FIELD_TEXT - 20)}"},
        {"type": "mrkdwn", "text": f"*Calls per minute:* {c.calls_per_min_before:,.1f} → {c.calls_per_min_after:,.1f}"},
        {"type": "mrkdwn", "text": f"*Mean:* {mean}"},
        {
            "type": "mrkdwn",
            "text": f"*Execution time:* {c.exec_ms_per_min_before:,.1f} → {c.exec_ms_per_min_after:,.1f} ms per minute",
        },
        {"type": "mrkdwn", "text": f"*queryid:* {c.queryid}"},
    ]
    if c.plan_summary:
        fields.append({"type": "mrkdwn", "text": f"*First plan:* {escape_within(c.plan_summary, 1500)}"})
    return fields


def _analysis_fields(facts: AnalysisFacts) -> list[dict[str, str]]:
    if facts.period:
        start, end = facts.period
        return [
            {
                "type": "mrkdwn",
                "text": f"*Period:* {start.isoformat(timespec='seconds')} → {end.isoformat(timespec='seconds')}",
            },
            {"type": "mrkdwn", "text": f"*Compared with:* the {span_words(end - start, spelled=True)} before it"},
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
    """A regression's fields: six always, and up to four optional ones (Also changed, To undo, Group, Caution), so
    never more than Slack's MAX_FIELDS per section (a later look's "found … after deploy" rides on Change began)."""
    if facts.period:
        began = r.change_at.isoformat(timespec="seconds")
    else:
        began = f"{(r.change_at - facts.split_at).total_seconds():+.0f} s from the deploy"
        if r.look > 0:  # when a later look found it, with when it began: a field of its own would make 11
            began += f"; {escape_within(found_line(r, facts.analysis_id), MAX_FIELD_TEXT - 80)}"
    cause = SEVERITY.get(r.cause, r.cause)
    interval = ""
    if r.factor_low is not None and r.factor_high is not None and r.factor_low == r.factor_low:  # not NaN
        interval = f", 95% interval ×{r.factor_low:.2f} to ×{r.factor_high:.2f}"
    noise = ""  # what the test's noise estimate rests on, where the verdict says (engine 2.4)
    if r.history_intervals is not None and r.history_intervals == r.history_intervals:  # not NaN
        noise = "; noise from this window alone"
        if r.history_intervals > 0:
            noise = f"; noise from {r.history_intervals:,.0f} intervals of its history"
    rhythm = ""
    if r.expected_factor is not None and r.expected_factor == r.expected_factor:  # not NaN
        rhythm = (
            f"; at the hour's usual level: measured ×{r.change_factor * r.expected_factor:.2f}, of which its weekly "
            f"rhythm explains ×{r.expected_factor:.2f}"
        )
    fields = [
        {
            "type": "mrkdwn",
            "text": f"*Mean:* {r.mean_before_ms:.3f} → {r.mean_after_ms:.3f} ms "
            f"(×{r.change_factor:.2f}{interval}{rhythm})",
        },
        {
            "type": "mrkdwn",
            "text": f"*Confidence:* {r.confidence:.4f} (1 − the family-adjusted p-value{noise})"
            if r.confidence == r.confidence  # not NaN: a group's member its own test did not reach has none
            else "*Confidence:* decided with its group",
        },
        {"type": "mrkdwn", "text": f"*Change began:* {began}"},
        {"type": "mrkdwn", "text": f"*Calls:* {r.calls_before:,} before, {r.calls_after:,} after"},
        {"type": "mrkdwn", "text": f"*Cause:* {escape_within(cause_line(r, cause), MAX_FIELD_TEXT - 20)}"},
        {"type": "mrkdwn", "text": f"*queryid:* {r.queryid}"},
    ]
    also = [c for c in r.named_changes or [] if c != r.cause_detail and c not in (r.cause_detail or "")]
    if also:
        also_text = escape_within("; ".join(also), MAX_FIELD_TEXT - 30)
        fields.append({"type": "mrkdwn", "text": f"*Also changed:* {also_text}"})
    if r.undo_hint:
        fields.append({"type": "mrkdwn", "text": f"*To undo:* {escape_within(r.undo_hint, MAX_FIELD_TEXT - 30)}"})
    if r.group:
        fields.append({"type": "mrkdwn", "text": f"*Group:* {escape_within(r.group, MAX_FIELD_TEXT - 30)}"})
    if r.shared_with:  # its text may not be the statement that slowed
        caution = escape_within(shared_queryid_note(r.shared_with), MAX_FIELD_TEXT - 20)
        fields.append({"type": "mrkdwn", "text": f"*Caution:* {caution}"})
    return fields


def found_line(r: Regression, deploy_id: str) -> str:
    """A later look's detection in words, unescaped: "found 2 h after deploy shop-v2 (look 2 of its later looks)"."""
    if r.found_after is None:
        return f"found by later look {r.look} after deploy {deploy_id}"
    return f"found {span_words(r.found_after)} after deploy {deploy_id} (later look {r.look})"


def span_words(span: timedelta, *, spelled: bool = False) -> str:
    """A span as a reader says it: "2 h", "1.5 h", "40 min", "20 s"; `spelled`, for "the … before it": "2 hours",
    "1.5 hours", "40 minutes", "20 seconds", and the unit alone for exactly one of it ("hour")."""
    seconds = span.total_seconds()
    short, long = ("h", "hour") if seconds >= 3600 else ("min", "minute") if seconds >= 60 else ("s", "second")
    count = seconds / {"h": 3600, "min": 60, "s": 1}[short]
    number = f"{count:,.0f}" if count >= 100 or count == int(count) else f"{count:.3g}"
    if not spelled:
        return f"{number} {short}"
    return long if count == 1 else f"{number} {long}s"


def cause_line(r: Regression, cause: str | None = None) -> str:
    """A regression's cause word with its words after it ("index_dropped: index public.orders_idx on … dropped
    between …"; the words alone where they begin with the word: "collateral of queryid …"), unescaped: each channel
    escapes it for where it shows it."""
    word = cause if cause is not None else r.cause
    if not r.cause_detail:
        return word
    return r.cause_detail if r.cause_detail.startswith(r.cause) else f"{word}: {r.cause_detail}"


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
    return clean(text), clean(blocks)


@dataclass(frozen=True)
class FleetRegression:
    """A statement a release slowed across its fleet (radar.release_verdict): its text, the report ("×1.40 on 8 of 8
    targets"), the fleet factor and its 95% interval, p_family and the targets combined."""

    query: str
    report: str
    factor: float
    factor_low: float
    factor_high: float
    p_family: float
    targets: int


def render_fleet(release_id: str, regressions: list[FleetRegression]) -> tuple[str, list[dict[str, Any]]]:
    """(fallback text, blocks) of one message for a release's fleet detections (docs/fleets.md), the first MAX_SHOWN
    in full; every outside text escaped."""
    plural = "s" if len(regressions) != 1 else ""
    title = f"Release {release_id}: {len(regressions)} statement{plural} slower across its fleet"
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": _cut(printable(title), MAX_HEADER), "emoji": False}}
    ]
    for r in regressions[:MAX_SHOWN]:
        blocks.append({"type": "divider"})
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": f"```{excerpt(r.query)}```"}})
        fields = [
            f"*Fleet:* {escape_within(printable(r.report), MAX_FIELD_TEXT - 10)}",
            f"*Factor:* ×{r.factor:.2f} (×{r.factor_low:.2f}–×{r.factor_high:.2f}, 95%)",
            f"*Confidence:* {1 - r.p_family:.4f} over {r.targets} targets",
        ]
        blocks.append({"type": "section", "fields": [{"type": "mrkdwn", "text": f} for f in fields]})
    if len(regressions) > MAX_SHOWN:
        sql = f"SELECT * FROM radar.release_verdict WHERE release_id = '{escape_within(release_id, 300)}'"
        text = f"*… and {len(regressions) - MAX_SHOWN} more:* `{sql}`"
        blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": text}]})
    return clean(escape_within(printable(title), MAX_FALLBACK)), clean(blocks)


def canary_words(canary_role: str, factor: float, stable_role: str) -> str:
    """The canary arm's finding in words: "canary role web_canary ×1.60 against stable role web, same minutes"."""
    return f"canary role {canary_role} ×{factor:.2f} against stable role {stable_role}, same minutes"


def render_canary(facts: AnalysisFacts, regressions: list[Regression]) -> tuple[str, list[dict[str, Any]]]:
    """(fallback text, blocks) of one message for a canary deploy's canary-arm detections (docs/canary.md; facts.canary
    names the arms): the canary role's statements slower than the stable role's over the same minutes, the first
    MAX_SHOWN in full; every outside text (statements, roles, deploy fields) escaped. Its fields are the canary's
    (both arms' means and calls, no moment a change began): Teams' card is made from them too."""
    arms = facts.canary
    assert arms is not None, "render_canary needs the canary analysis's arms (AnalysisFacts.canary)"
    title = canary_title(facts, len(regressions))
    fields = _analysis_fields(facts)
    fields.append({"type": "mrkdwn", "text": f"*Same minutes:* {canary_window_words(arms)}"})
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": _cut(printable(title), MAX_HEADER), "emoji": False}},
        {"type": "section", "fields": fields},
    ]
    for r in regressions[:MAX_SHOWN]:
        blocks.append({"type": "divider"})
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": f"```{excerpt(r.query)}```"}})
        interval = "" if r.factor_low is None else f" (×{r.factor_low:.2f}–×{r.factor_high:.2f}, 95%)"
        arm = canary_words(arms.canary_role, r.change_factor, arms.stable_role)
        lines = [
            f"*Canary arm:* {escape_within(printable(arm), MAX_FIELD_TEXT - 20)}",
            f"*Factor:* ×{r.change_factor:.2f}{interval}",
            f"*Mean:* {r.mean_before_ms:.3f} ms stable → {r.mean_after_ms:.3f} ms canary",
            f"*Calls:* {r.calls_before:,} stable, {r.calls_after:,} canary",
            f"*Confidence:* {r.confidence:.4f}",
            f"*queryid:* {r.queryid}",
        ]
        blocks.append({"type": "section", "fields": [{"type": "mrkdwn", "text": f} for f in lines]})
    if len(regressions) > MAX_SHOWN:
        sql = f"SELECT * FROM radar.canary_verdict WHERE deploy_id = '{escape_within(facts.analysis_id, 300)}'"
        text = f"*… and {len(regressions) - MAX_SHOWN} more:* `{sql}`"
        blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": text}]})
    if facts.run_url:
        link_text = f"<{link(facts.run_url)}|Canary analysis run in Dagster>"
        blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": link_text}]})
    return clean(escape_within(printable(title), MAX_FALLBACK)), clean(blocks)
