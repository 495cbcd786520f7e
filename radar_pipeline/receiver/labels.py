"""Labels over HTTP (docs/receiver.md, docs/labels.md): a JSON body posted with a token whose scopes include `label`,
and the buttons of a Slack alert (Slack's interactivity requests, signed with the app's signing secret). Both read a
request into a warehouse.labels.Label; the receiver stores it once per idempotency key. Pure: no I/O."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qs

from radar_pipeline.receiver.sources.base import Refused
from radar_pipeline.receiver.sources.common import header, json_object, obj, signed, text, whole
from radar_pipeline.warehouse.labels import Label

SLACK_MAX_AGE_S = 5 * 60  # Slack's advice: refuse a request whose timestamp is older than five minutes
COMMAND = "/radar"  # a review comment's line that starts so is a command (docs/labels.md, "From a pull request")
COMMAND_USAGE = "/radar label DEPLOY_ID QUERYID|group=GROUP_ID LABEL [FIXED_BY_DEPLOY] NOTE…"


def label_of_json(headers: Mapping[str, str], body: bytes) -> Label:
    """A label from `POST /v1/labels`: deploy_id, then queryid (with fleet: true for the fleet verdict), or group;
    label, note, by; fixed_by for `fixed`; target, dbid, userid narrow a queryid with several verdicts. The
    Idempotency-Key header (or idempotency_key in the body) makes a retried request land once. Refused(400) names
    the field that is wrong."""
    data = json_object(body)
    known = {"deploy_id", "queryid", "group", "fleet", "label", "note", "by", "fixed_by", "target", "dbid", "userid",
             "idempotency_key"}  # fmt: skip
    unknown = sorted(set(data) - known)
    if unknown:
        raise Refused(400, f"{unknown[0]} is not a field of a label (fields: {', '.join(sorted(known))})")
    fleet = data.get("fleet", False)
    if not isinstance(fleet, bool):
        raise Refused(400, "fleet must be true or false")
    key = header(headers, "idempotency-key") or text(data, "idempotency_key")
    return Label(
        label=text(data, "label", required=True) or "",
        labelled_by=text(data, "by", required=True) or "",
        deploy_id=text(data, "deploy_id", required=True) or "",
        queryid=_number(data, "queryid"),
        group_id=text(data, "group"),
        fleet=fleet,
        target=text(data, "target"),
        dbid=_number(data, "dbid"),
        userid=_number(data, "userid"),
        note=text(data, "note") or "",
        fixed_by=text(data, "fixed_by"),
        source="receiver",
        idempotency_key=key,
    )


def _number(data: Mapping[str, Any], name: str) -> int | None:
    """A whole number that fits PostgreSQL's bigint (queryids are signed), else Refused(400) naming it."""
    value = data.get(name)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not -(2**63) <= value < 2**63:
        raise Refused(400, f"{name} must be a whole number (a bigint)")
    return value


def slack_verified(headers: Mapping[str, str], body: bytes, secret: str, now: float | None = None) -> None:
    """Slack's request signature (docs: "Verifying requests from Slack"): X-Slack-Signature is `v0=` and the hex
    HMAC-SHA256 of `v0:{X-Slack-Request-Timestamp}:{body}` under the signing secret, compared in constant time; a
    timestamp more than SLACK_MAX_AGE_S from now (either way) is refused as a replay. Refused(401) otherwise, the
    secret never named."""
    stamp = header(headers, "x-slack-request-timestamp")
    signature = header(headers, "x-slack-signature")
    if stamp is None or signature is None:
        raise Refused(401, "X-Slack-Signature and X-Slack-Request-Timestamp are required: not a request from Slack")
    if not stamp.isdigit() or len(stamp) > 12:
        raise Refused(401, "X-Slack-Request-Timestamp is not a Unix time")
    if abs((time.time() if now is None else now) - int(stamp)) > SLACK_MAX_AGE_S:
        raise Refused(401, f"X-Slack-Request-Timestamp is more than {SLACK_MAX_AGE_S // 60} minutes from now: refused")
    if not signed(b"v0:" + stamp.encode() + b":" + body, signature, secret, prefix="v0="):
        raise Refused(401, "X-Slack-Signature does not match the request under RADAR_RECEIVER_SLACK_SIGNING_SECRET")


def slack_payload(body: bytes) -> dict[str, Any]:
    """The JSON of a Slack interaction (a form-encoded body with one `payload` field), else Refused(400)."""
    try:
        form = parse_qs(body.decode("utf-8"), strict_parsing=True)
    except (UnicodeDecodeError, ValueError):
        raise Refused(400, "the body is not a form with a payload field") from None
    raw = form.get("payload")
    if not raw or len(raw) != 1:
        raise Refused(400, "the body has no payload field: not a Slack interaction")
    return json_object(raw[0].encode())


def label_of_comment(host: str, headers: Mapping[str, str], body: bytes) -> tuple[Label | None, str]:
    """The label a `/radar label …` line of a new pull/merge request comment gives (GitHub's `issue_comment`
    `created`, GitLab's `note` event), by the comment's author, source code_host; or None and why it is not one
    (another event, no such line: answered 202, nothing stored). Its idempotency key is the host's comment id: a
    redelivery lands once. Refused(400) names what is wrong in the command (COMMAND_USAGE)."""
    data = json_object(body)
    if host == "github":
        event = header(headers, "x-github-event")
        if event != "issue_comment" or data.get("action") != "created":
            return None, f"event {event!r} ({data.get('action')!r}) is not a new issue_comment"
        comment = obj(data, "comment")
        said, ident = text(comment, "body", "comment."), whole(comment, "id", "comment.", required=True)
        who = text(obj(comment, "user", "comment."), "login", "comment.user.", required=True)
    else:
        if data.get("object_kind") != "note":
            return None, f"object_kind {data.get('object_kind')!r} is not note"
        note = obj(data, "object_attributes")
        said, ident = text(note, "note", "object_attributes."), whole(note, "id", "object_attributes.", required=True)
        who = text(obj(data, "user"), "username", "user.", required=True)
    line = next((part.strip() for part in (said or "").splitlines() if part.strip().startswith(COMMAND + " ")), None)
    if line is None:
        return None, f"no {COMMAND} line in the comment"
    words = line.split()
    if len(words) < 5 or words[1] != "label":
        raise Refused(400, f"the command is {COMMAND_USAGE}")
    deploy_id, subject, label, rest = words[2], words[3], words[4], words[5:]
    fixed_by = rest.pop(0) if label == "fixed" and rest else None
    group = subject.removeprefix("group=") if subject.startswith("group=") else None
    if group is None and not subject.lstrip("-").isdigit():
        raise Refused(400, f"queryid: {subject!r} is neither a queryid nor group=GROUP_ID ({COMMAND_USAGE})")
    return Label(
        label=label,
        labelled_by=f"{host}:{who}",
        deploy_id=deploy_id,
        queryid=int(subject) if group is None else None,
        group_id=group,
        note=" ".join(rest),
        fixed_by=fixed_by,
        source="code_host",
        idempotency_key=f"{host}-comment:{ident}",
    ), ""
