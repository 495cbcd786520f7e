"""Microsoft Teams through a Workflows webhook (the successor of the retired Office 365 connectors): one message per
analysis and target, an Adaptive Card with the Slack message's content.

The card is the Slack message (alerts.render.render: title, the deploy's fields with its state and load lines, the
load changes, each shown regression's statement and fields, the summary of the rest, the link to the Dagster run; a
canary analysis's detections: render_canary's message, the canary role against the stable role over the same minutes)
turned into Adaptive Card elements: a field list becomes a FactSet, a statement a monospaced TextBlock. Every text is
escaped for the card's markdown (emphasis, links, lists, and the {{DATE()}} functions of TextBlocks), and the card is
kept within Teams' message limit (MAX_PAYLOAD): texts are cut shorter, step by step, until it fits.

Delivery is at least once: a Workflows webhook answers 202 when it accepts a message and offers no way to find a
message again, so a request whose answer was lost is sent again. The webhook's URL carries its signature (`sig=`): it
is shown only without its query string."""

from __future__ import annotations

import json
import re
from datetime import datetime
from typing import Any

from radar_pipeline.alerts.channel import ChannelError, Delivered, Detection
from radar_pipeline.alerts.outlet_http import DEFAULT_TIMEOUT, Http, url_secrets
from radar_pipeline.alerts.render import AnalysisFacts, render, render_canary
from radar_pipeline.config import printable
from radar_pipeline.config.masking import mask_query
from radar_pipeline.pgss_model import Key

# Teams refuses a message over 28 KB (Microsoft's "Limits and specifications for Microsoft Teams": 28 KB per
# message, the card included); the card is kept under it with room for what the Workflow adds around it.
MAX_PAYLOAD = 27 * 1024
CARD_VERSION = "1.4"
CUTS = (None, 1200, 500, 200, 80)  # the longest text of one element, tried in turn until the card fits
_LABEL = re.compile(r"\*([^*\n]+)\*\s*")  # a Slack field's or context's "*Label:* " at its start
_LINK = re.compile(r"<([^<>|]+)\|([^<>]*)>")  # a Slack link render made: <url|label>, both escaped
_CODE = re.compile(r"`([^`]*)`")
# emphasis, code, links (a ( or ) cannot make one without a [ ]), {{DATE()}} functions, HTML-like tags
_MD_SPECIAL = re.compile(r"([\\`*_~\[\]{}<>])")
_NUMBERED = re.compile(r"(\d+)[.)](?= |$)")  # "1." or "1)" at a text's start: the card would make it a list


class TeamsChannel:
    """Posts an analysis's detections on one target to a Microsoft Teams Workflows webhook as an Adaptive Card."""

    name = "teams"
    per_detection = False
    can_check = False

    def __init__(self, url: str, timeout: float = DEFAULT_TIMEOUT) -> None:
        if not url.startswith(("https://", "http://127.0.0.1", "http://localhost", "http://[::1]")):
            raise ValueError(f"the Teams webhook URL must be https: {mask_query(url)}")
        self._url = url
        self._http = Http("Microsoft Teams", url_secrets(url), timeout)

    def __repr__(self) -> str:
        return f"TeamsChannel({mask_query(self._url)!r})"

    def notify(self, facts: AnalysisFacts, detections: list[Detection], delivery_id: str) -> Delivered:
        """Post one card for these detections; raises ChannelError (its text without the URL's secret)."""
        body = encode(payload(facts, detections))
        answer = self._http.request(
            "POST", self._url, content=body, headers={"Content-Type": "application/json; charset=utf-8"}
        )
        if answer.status in (200, 202) and not answer.html:
            return Delivered(None)
        if 200 <= answer.status < 300:
            raise self._http.not_the_api(answer)
        data = answer.json()
        error = data.get("error") if isinstance(data, dict) else None
        message = error.get("message") or error.get("code") if isinstance(error, dict) else None
        what = self._http.quote(message if isinstance(message, str) else answer.text)
        if answer.status == 413:
            what = f"the message is over Teams' size limit ({len(body):,} bytes sent): {what}"
        raise self._http.refused(answer, what)

    def find_delivered(self, facts: AnalysisFacts, earlier: dict[Key, str], since: datetime) -> dict[Key, Delivered]:
        """A Workflows webhook cannot tell what it delivered: never called (can_check is False)."""
        raise ChannelError("a Teams Workflows webhook cannot look up the messages it posted", False)


def encode(message: dict[str, Any]) -> bytes:
    """The request body as sent (its length is what Teams' limit counts)."""
    return json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode()


def payload(facts: AnalysisFacts, detections: list[Detection]) -> dict[str, Any]:
    """The Workflows message: one Adaptive Card with the Slack message's content, within MAX_PAYLOAD bytes (a canary
    analysis's: render_canary's, the canary role against the stable role over the same minutes)."""
    regressions = [d.regression for d in detections if d.regression is not None]
    changes = [d.change for d in detections if d.change is not None]
    if facts.canary is not None:
        _, blocks = render_canary(facts, regressions)
    else:
        _, blocks = render(facts, regressions, changes)
    for cut in CUTS:
        message = _message(_card(blocks, cut))
        if len(encode(message)) <= MAX_PAYLOAD:
            return message
    # Never reached with render's bounds (MAX_SHOWN regressions, texts of bounded length): the title and the link.
    note = {"type": "TextBlock", "wrap": True, "text": md("The full message is too large for Teams: see the run.")}
    return _message(_card(blocks[:1], 80) + [note] + _card(blocks[-1:], None))


def _message(body: list[dict[str, Any]]) -> dict[str, Any]:
    card = {
        "type": "AdaptiveCard",
        "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
        "version": CARD_VERSION,
        "msteams": {"width": "Full"},
        "body": body,
    }
    return {
        "type": "message",
        "attachments": [
            {"contentType": "application/vnd.microsoft.card.adaptive", "contentUrl": None, "content": card}
        ],
    }


def _card(blocks: list[dict[str, Any]], cut: int | None) -> list[dict[str, Any]]:
    """Slack's blocks as Adaptive Card elements, each text at most `cut` characters (None: as render made them)."""
    body: list[dict[str, Any]] = []
    divider = False
    for block in blocks:
        kind = block.get("type")
        element: dict[str, Any] | None = None
        if kind == "divider":
            divider = True
            continue
        if kind == "header":
            text = md(_cut(block["text"]["text"], cut))
            element = {"type": "TextBlock", "text": text, "size": "Large", "weight": "Bolder", "wrap": True}
        elif kind == "section" and "fields" in block:
            facts = [_fact(field["text"], cut) for field in block["fields"]]
            element = {"type": "FactSet", "facts": facts}
        elif kind == "section":
            text = block["text"]["text"]
            if text.startswith("```") and text.endswith("```") and len(text) >= 6:
                code = md(_cut(_unslack(text[3:-3]), cut))
                element = {"type": "TextBlock", "text": code, "fontType": "Monospace", "wrap": True}
            else:
                element = {"type": "TextBlock", "text": _labelled(text, cut), "wrap": True}
        elif kind == "context":
            texts = [_labelled(e.get("text", ""), cut) for e in block.get("elements", [])]
            element = {"type": "TextBlock", "text": " ".join(texts), "size": "Small", "isSubtle": True, "wrap": True}
        if element is not None:
            if divider:
                element.update(separator=True, spacing="Medium")
                divider = False
            body.append(element)
    return body


def _fact(text: str, cut: int | None) -> dict[str, str]:
    match = _LABEL.match(text)
    label = match.group(1).rstrip(":") if match else ""
    return {"title": md(_unslack(label)), "value": _inline(text[match.end() :] if match else text, cut)}


def _labelled(text: str, cut: int | None) -> str:
    """A Slack mrkdwn text with a bold label at its start as card markdown."""
    match = _LABEL.match(text)
    if not match:
        return _inline(text, cut)
    return f"**{md(_unslack(match.group(1)))}** {_inline(text[match.end() :], cut)}"


def _inline(text: str, cut: int | None) -> str:
    """A Slack mrkdwn value (escaped text, render's links, code spans) as card markdown, its text cut to `cut`."""
    out: list[str] = []
    left = cut
    for i, part in enumerate(_LINK.split(_CODE.sub(r"\1", text))):
        if i % 3 == 0:  # text
            plain = _unslack(part)
            if left is not None:
                plain = _cut(plain, left) if left > 0 else ""
                left -= len(plain)
            out.append(md(plain))
        elif i % 3 == 1:  # a link's URL, its label next
            url = _unslack(part)
        else:
            out.append(link(url, _unslack(part)))
    return "".join(out)


def link(url: str, label: str) -> str:
    """A markdown link to an http(s) URL (a ) or a space in it percent-encoded); any other URL as plain text."""
    if not url.startswith(("https://", "http://")):
        return md(f"{label} ({url})")
    safe = "".join(f"%{ord(c):02X}" if c in '()<> "' or c.isspace() else c for c in printable(url))
    return f"[{md(label)}]({safe})"


def md(text: str) -> str:
    """Outside text made literal in Adaptive Card markdown: one line, each character the markdown (or a TextBlock's
    {{DATE()}} function) would act on backslash-escaped, a list marker at its start too."""
    escaped = _MD_SPECIAL.sub(r"\\\1", " ".join(printable(text).split()))
    numbered = _NUMBERED.match(escaped)
    if numbered:
        return f"{numbered.group(1)}\\{escaped[numbered.end(1) :]}"
    return f"\\{escaped}" if escaped[:1] in ("-", "+") else escaped


def _unslack(text: str) -> str:
    """render's Slack escaping undone (it escapes only &, < and >)."""
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def _cut(text: str, limit: int | None) -> str:
    return text if limit is None or len(text) <= limit else text[: max(limit - 1, 0)] + "…"
