"""Labels stored with what they do: `store_label`, the one way radar stores a label (`radar label`, the receiver's
POST /v1/labels, Slack's buttons, a pull request's comment), applies an intended label in the label's own transaction
(docs/labels.md#intended-a-new-baseline); and a Slack alert's label buttons, read back: the label an interaction
with one of them gives (alerts/render.py draws the buttons and encodes the verdict each one labels; the receiver
verifies Slack's signature and stores the label)."""

from __future__ import annotations

import hashlib
from typing import Any

import sqlalchemy as sa

from radar_pipeline.alerts.render import LABEL_ACTION, button_subject
from radar_pipeline.steps.history import rejudge_from
from radar_pipeline.warehouse import episodes, labels, outbox
from radar_pipeline.warehouse.labels import Label, LabelError


def store_label(conn: sa.Connection, label: Label) -> labels.Stored:
    """Store `label` once (labels.add: LabelError names a wrong field, LabelConflict an idempotency key used for
    another label) and apply it, in the caller's transaction. An intended label, and one that replaces an intended
    label, judges its verdicts' history points again from their deploys on (the intended one begins a segment there;
    the other ends it). An intended label also closes the queries' open periodic episodes as intended, skips their
    alerts not sent yet, and enqueues the resolves of what their alerts opened and an update of each Slack message
    that carried them, which the alert's retry run delivers (radar_reconciler asks for it); what it did is recorded
    in radar.label_effect, without which an intended label cannot commit (sql/0040)."""
    stored = labels.add(conn, label)
    if not stored.inserted:
        return stored
    label_id = int(stored.row["label_id"])
    intended = stored.row["label"] == "intended"
    if not intended and not labels.replaces_intended(conn, label_id):
        return stored  # its verdicts' segments are as they were
    covered = conn.execute(
        sa.text(
            "SELECT DISTINCT deploy_id, target, dbid, userid, toplevel, fingerprint FROM radar.label_cover "
            "WHERE label_id = :l ORDER BY deploy_id, target"
        ),
        {"l": label_id},
    ).fetchall()
    by_deploy: dict[tuple[str, str], list[tuple[int, int, bool, int]]] = {}
    for r in covered:
        by_deploy.setdefault((r.deploy_id, r.target), []).append(
            (int(r.dbid), int(r.userid), bool(r.toplevel), int(r.fingerprint))
        )
    points = sum(rejudge_from(conn, d, t, queries) for (d, t), queries in by_deploy.items())
    if not intended:
        return stored
    closed = episodes.close_intended(conn, label_id)
    outbox.skip_labelled(conn, label_id)
    resolves, updates = outbox.enqueue_labelled(conn, label_id)
    effect = {
        "verdicts": len(labels.intended_verdicts(conn, label_id)),
        "history_points": points,
        "episodes_closed": closed,
        "resolves": resolves,
        "message_updates": updates,
    }
    labels.record_effect(conn, label_id, effect)
    return stored


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
