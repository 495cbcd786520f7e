"""A Slack alert's label buttons, read back: the label an interaction with one of them gives (alerts/render.py draws
the buttons and encodes the verdict each one labels; the receiver verifies Slack's signature and stores the label)."""

from __future__ import annotations

import hashlib
from typing import Any

from radar_pipeline.alerts.render import LABEL_ACTION, button_subject
from radar_pipeline.warehouse.labels import Label, LabelError


def slack_label(payload: dict[str, Any]) -> Label | None:
    """The label a radar button gives (a `block_actions` interaction's payload), or None for an interaction that is
    not one of radar's buttons. Its idempotency key is made of the interaction's own ids (the user, the action's
    time stamp, block and action), which a request Slack resends carries unchanged: it lands once. LabelError names
    the part of the payload that is wrong."""
    if payload.get("type") != "block_actions":
        return None
    actions = payload.get("actions")
    action: dict[str, Any] = (
        actions[0] if isinstance(actions, list) and actions and isinstance(actions[0], dict) else {}
    )
    action_id = action.get("action_id")
    if not isinstance(action_id, str) or not action_id.startswith(LABEL_ACTION):
        return None
    found = payload.get("user")
    user: dict[str, Any] = found if isinstance(found, dict) else {}
    who = user.get("username") or user.get("name") or user.get("id")
    ids = [i for i in (user.get("id"), action.get("action_ts"), action.get("block_id"), action_id) if i]
    if not isinstance(who, str) or len(ids) != 4 or not all(isinstance(i, str) for i in ids):
        raise LabelError("payload", "a button's interaction names its user, action_ts and block_id")
    subject = button_subject(action.get("value"))
    if subject is None:
        raise LabelError("payload", "actions[0].value is not a radar button's value")
    analysis_id, target, (dbid, userid, queryid, toplevel) = subject
    return Label(
        label=action_id.removeprefix(LABEL_ACTION),
        labelled_by=f"slack:{who}",
        deploy_id=analysis_id,
        queryid=queryid,
        target=target,
        dbid=dbid,
        userid=userid,
        toplevel=toplevel,
        note="from the alert's button in Slack",
        source="slack",
        idempotency_key="slack:" + hashlib.sha256("\x1f".join(ids).encode()).hexdigest(),
    )
