"""Delivery to the channels beyond Slack (alerts/channel.py: PagerDuty, Teams, Grafana, webhooks) through the outbox,
with Slack's rules (steps/alert_delivery.py): rows are committed before anything is sent (claimed under a new
delivery id in a transaction of their own), no transaction is held while a channel is called, each outcome is
recorded in a short transaction of its own, retryable failures wait (backoff, or the channel's Retry-After) for a
later run (radar_reconciler), and an analysis too old, or the nightly reanalysis, records its new triggers and marks
as withheld; its resolves are always sent (closing an incident is never noise).

Every row is radar.outbox's (warehouse/outbox.py): a detection (one per statement per channel), a resolve, a deploy
mark, and an update of a Slack message once its regression was labelled intended (update_messages). A row an earlier
attempt may have delivered (it timed out, or its run stopped mid-send) is looked for on the channel first when the
channel can tell (can_check); otherwise it is sent again, which a channel that deduplicates (PagerDuty's dedup_key)
turns into one incident.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import numpy as np
import pandas as pd
import sqlalchemy as sa

from radar_pipeline.alerts.channel import (
    Channel,
    Delivered,
    DeployMarker,
    DeployNotice,
    Detection,
    Resolver,
)
from radar_pipeline.alerts.channels import DEPLOY, LOAD_CHANGE, REGRESSION, Routed
from radar_pipeline.alerts.render import AnalysisFacts, render
from radar_pipeline.alerts.slack import SlackSender
from radar_pipeline.config import printable
from radar_pipeline.pgss_model import KEY, Key, statement_keys
from radar_pipeline.steps.alert_delivery import change_of, regression_of
from radar_pipeline.steps.delivery import Delivery, Find, Sent, finder, sent_of
from radar_pipeline.warehouse import outbox
from radar_pipeline.warehouse.outbox import Row

UNDETECTED, RECOVERED, NO_RESOLVES = "undetected", "recovered", "none"  # which resolves deliver_routed sends
NO_LONGER = "no longer announced by the analysis: not sent"


def detections_of(
    found: pd.DataFrame, changes: pd.DataFrame | None, outcomes: frozenset[str] | set[str]
) -> dict[Key, Detection]:
    """The analysis's detections a channel routed `outcomes` takes, by statement key: its regressions (alerts.detections
    rows) and its load changes (alerts.load_changes rows); a statement both slower and surging is its regression."""
    out: dict[Key, Detection] = {}
    if REGRESSION in outcomes and len(found):
        out.update(
            {
                k: Detection(k, regression=regression_of(r))
                for k, r in zip(statement_keys(found), found.itertuples(), strict=True)
            }
        )
    if LOAD_CHANGE in outcomes and changes is not None and len(changes):
        for k, r in zip(statement_keys(changes), changes.itertuples(), strict=True):
            out.setdefault(k, Detection(k, change=change_of(r)))
    return out


def deliver(
    log: logging.Logger,
    engine: sa.Engine,
    channel: Channel,
    facts: AnalysisFacts,
    detections: dict[Key, Detection],
    withhold: str | None = None,
) -> dict[str, Any]:
    """Send what is due of one analysis's detections on one target to `channel`, through the outbox (detection rows
    under the channel's name): one request per detection when the channel is per_detection, else one for them all.
    With `withhold` (a reason), new rows are recorded withheld and nothing is sent. Returns what the run's metadata
    shows (never a secret)."""
    name = channel.name
    metadata: dict[str, Any] = {"detections": len(detections), "sent": 0}
    with engine.begin() as conn:
        outbox.lock(conn, facts.analysis_id)
        if withhold is not None:
            outbox.enqueue_detections(
                conn, facts.analysis_id, facts.target, list(detections), name, status="withheld", note=withhold
            )
            metadata["withheld"] = withhold
            return metadata
        outbox.enqueue_detections(conn, facts.analysis_id, facts.target, list(detections), name)
        claimed = outbox.claim(conn, facts.analysis_id, [outbox.DETECTION], channel=name, target=facts.target)
        expected = getattr(channel, "remote_id_of", None)  # a resolver's id known before sending (a dedup_key)
        if callable(expected):
            remote = {k: expected(facts, detections[k]) for k in claimed.keys if k in detections}
            outbox.expect_remote(conn, claimed, remote)
    if not claimed.rows:
        return metadata
    delivery = Delivery(log, engine, name, claimed)
    gone = [r for r in claimed.rows if r.key not in detections]
    delivery.settle(gone, "skipped", error=NO_LONGER)  # rows of statements a re-analysis no longer announces
    look = finder(channel, facts)
    todo = delivery.look([r for r in claimed.rows if r.key in detections], look)
    if todo is None:
        return metadata
    batches = [[r] for r in todo] if channel.per_detection else ([todo] if todo else [])

    def send(rows: list[Row]) -> Sent:
        delivered = channel.notify(facts, [detections[r.key] for r in rows if r.key is not None], claimed.delivery_id)
        return sent_of(delivered)

    delivery.send(batches, send)
    metadata["sent"] = delivery.sent - len(delivery.found)
    return metadata


def resolve_undetected(
    log: logging.Logger, engine: sa.Engine, resolver: Resolver, analysis_id: str, still: list[tuple[str, Key]]
) -> dict[str, Any]:
    """Resolve what `resolver` opened for the analysis's detections that it no longer announces (a re-analysis
    cleared them); `still`: the (target, key) it announces now. Never withheld, not even in the nightly reanalysis or
    for an old analysis: closing an incident is never noise (only new triggers and marks are withheld)."""
    with engine.begin() as conn:
        outbox.lock(conn, analysis_id)
        outbox.enqueue_undetected_resolves(conn, resolver.name, analysis_id, still)
    return deliver_resolves(log, engine, resolver, analysis_id)


def resolve_recovered(log: logging.Logger, engine: sa.Engine, resolver: Resolver, analysis_id: str) -> dict[str, Any]:
    """Resolve what `resolver` opened for the periodic detections whose episode this periodic analysis closed."""
    with engine.begin() as conn:
        outbox.lock(conn, analysis_id)
        outbox.enqueue_recovered_resolves(conn, resolver.name, analysis_id)
    return deliver_resolves(log, engine, resolver, analysis_id)


def deliver_resolves(log: logging.Logger, engine: sa.Engine, resolver: Resolver, analysis_id: str) -> dict[str, Any]:
    """Send the analysis's resolves due on `resolver` (resolving twice is harmless: no earlier attempt is looked
    for); one that waits for its trigger is due once the trigger is sent, and closes the trigger's remote id."""
    return _deliver_events(
        log, engine, resolver.name, analysis_id, outbox.RESOLVE, lambda e, d: resolver.resolve(e.remote, d)
    )


def update_messages(
    log: logging.Logger,
    engine: sa.Engine,
    sender: SlackSender,
    analysis_id: str,
    found: pd.DataFrame,
    changes: pd.DataFrame | None,
    facts_of: Callable[[str, pd.DataFrame], AnalysisFacts],
) -> dict[str, Any]:
    """Update the analysis's Slack messages a label asked to update (outbox rows of kind message_update,
    enqueued with an intended label by steps.labelling.store_label): each is drawn again, as `deliver` drew it, from
    what it carried (its detection rows: `found`'s regressions, `changes`' load changes), each regression with its
    standing label, and replaced with chat.update, through the outbox (claimed, settled, retried with backoff by a
    later run). `facts_of(target, rows)` gives a message's header. Without a bot token they are skipped: a webhook
    cannot update what it posted."""
    from radar_pipeline.warehouse import labels

    name = sender.name
    with engine.begin() as conn:
        outbox.lock(conn, analysis_id)
        claimed = outbox.claim(conn, analysis_id, [outbox.MESSAGE_UPDATE], channel=name)
        standing = labels.standing_labels(conn, analysis_id) if claimed.rows else {}
    delivery = Delivery(log, engine, "Slack message update", claimed)

    def send(batch: list[Row]) -> Sent:
        (event,) = batch
        if not sender.can_check:
            return Sent(status="skipped", error="a webhook cannot update the messages it posted")
        with engine.connect() as conn:
            channel_id, keys = outbox.message_keys(conn, analysis_id, name, event.subject)
        carried = set(keys)
        rows = found[(found["target"] == event.target).to_numpy() & _among(statement_keys(found), carried)]
        shown = changes if changes is not None and len(changes) else pd.DataFrame(columns=["target", *KEY])
        detected = set(statement_keys(rows))
        moved = shown[(shown["target"] == event.target).to_numpy() & _among(statement_keys(shown), carried - detected)]
        if rows.empty and moved.empty:
            return Sent(status="skipped", error="the analysis no longer announces what the message carried")
        regressions = [
            replace(regression_of(r), label=standing.get((event.target, k)))
            for r, k in zip(rows.itertuples(), statement_keys(rows), strict=True)
        ]
        text, blocks = render(
            facts_of(event.target, rows if len(rows) else moved),
            regressions,
            [change_of(r) for r in moved.itertuples()],
            buttons=sender.buttons,
        )
        sender.update(channel_id or name, event.subject, text, blocks)
        return Sent()

    delivery.send([[r] for r in claimed.rows], send)
    due = len(claimed.rows)
    return {"message_updates_sent": delivery.sent, "message_updates_due": due} if due else {}


def _among(keys: list[Key], chosen: set[Key]) -> np.ndarray:
    """Per key: is it one of `chosen`?"""
    return np.array([k in chosen for k in keys], dtype=bool)


def mark_deploy(
    log: logging.Logger, engine: sa.Engine, marker: DeployMarker, notice: DeployNotice, withhold: str | None = None
) -> dict[str, Any]:
    """Mark the deploy on `marker` once (an outbox row of kind deploy_mark), or record it withheld with `withhold`'s
    reason."""
    with engine.begin() as conn:
        outbox.lock(conn, notice.deploy_id)
        outbox.enqueue_mark(
            conn, marker.name, notice.deploy_id, notice.target, "withheld" if withhold else "pending", withhold
        )
    if withhold:
        return {"withheld": withhold}

    def find(rows: list[Row], since: datetime) -> dict[int, Sent]:
        marks = {r.id: marker.find_marked(notice, str(r.earlier), since) for r in rows}
        return {i: sent_of(m) for i, m in marks.items() if m is not None}

    return _deliver_events(
        log,
        engine,
        marker.name,
        notice.deploy_id,
        outbox.DEPLOY_MARK,
        lambda _, d: marker.mark_deploy(notice, d),
        find if marker.can_check else None,
    )


def _deliver_events(
    log: logging.Logger,
    engine: sa.Engine,
    name: str,
    analysis_id: str,
    kind: str,
    send: Callable[[Row, str], Delivered],
    find: Find | None = None,
) -> dict[str, Any]:
    """Claim the analysis's due events of `kind` on channel `name`, send each (after looking for an earlier attempt's
    with `find`, when given: a resolve is not looked for, resolving twice is harmless), and record each outcome."""
    with engine.begin() as conn:
        outbox.lock(conn, analysis_id)
        claimed = outbox.claim(conn, analysis_id, [kind], channel=name)
    if not claimed.rows:
        return {}
    delivery = Delivery(log, engine, f"{name} {kind.replace('_', ' ')}", claimed)
    todo = delivery.look(claimed.rows, find) if find is not None else claimed.rows
    if todo is not None:
        delivery.send([[r] for r in todo], lambda rows: sent_of(send(rows[0], claimed.delivery_id)))
    return {f"{kind}s_sent": delivery.sent, f"{kind}s_due": len(claimed.rows)}


def announced(found: pd.DataFrame, changes: pd.DataFrame | None) -> list[tuple[str, Key]]:
    """The (target, statement key) of every detection and load change an analysis announces."""
    frames = [f for f in (found, changes) if f is not None and len(f)]
    return [(str(t), k) for f in frames for t, k in zip(f["target"], statement_keys(f), strict=True)]


def deploy_notice(event: Any) -> DeployNotice:
    """A deploy as a channel marks it, from its radar.deploy_event (warehouse.deploys.DeployEvent)."""
    return DeployNotice(
        deploy_id=event.deploy_id,
        target=event.target,
        deployed_at=event.deployed_at,
        service=event.service,
        version=event.version,
        url=event.url,
        run_url=event.run_url,
        commit_sha=event.commit_sha,
        repository=event.repository,
    )


def deliver_routed(
    log: logging.Logger,
    engine: sa.Engine,
    routed: list[Routed],
    analysis_id: str,
    facts: AnalysisFacts | None,
    found: pd.DataFrame,
    changes: pd.DataFrame | None,
    notice: DeployNotice | None = None,
    withhold: str | None = None,
    resolves: str = UNDETECTED,
) -> dict[str, Any]:
    """Everything of one analysis (on one target) for each routed channel, after Slack: the deploy's mark (`notice`),
    the detections (`facts` and `found`, `changes`), and the resolves (`resolves`): of what it opened and no longer
    announces (UNDETECTED: a deploy's re-analysis), of the periodic episodes this analysis closed (RECOVERED), or
    none (NO_RESOLVES). One channel's failure
    never stops the others: each is tried, and an unexpected error (not the channel's answer) is raised after them
    all. Returns each channel's record, by name, for the run's metadata."""
    metadata: dict[str, Any] = {}
    failures: list[Exception] = []
    for route in routed:
        shown: dict[str, Any] = {}
        channel = route.channel
        try:
            if notice is not None and DEPLOY in route.outcomes:
                shown.update(mark_deploy(log, engine, channel, notice, withhold))
            if facts is not None and route.outcomes & {REGRESSION, LOAD_CHANGE}:
                shown.update(
                    deliver(log, engine, channel, facts, detections_of(found, changes, route.outcomes), withhold)
                )
            if callable(getattr(channel, "resolve", None)) and resolves != NO_RESOLVES:
                if resolves == RECOVERED:
                    shown.update(resolve_recovered(log, engine, channel, analysis_id))
                else:
                    kept = announced(found, changes)
                    shown.update(resolve_undetected(log, engine, channel, analysis_id, kept))
        except Exception as exc:  # noqa: BLE001 - one channel's failure must not stop the others
            log.error(f"{route.name}: {type(exc).__name__}: {printable(str(exc).splitlines()[0] if str(exc) else '')}")
            shown["error"] = type(exc).__name__
            failures.append(exc)
        metadata[route.name] = shown
    if failures:
        raise failures[0]
    return metadata


def mark_recent_deploys(
    log: logging.Logger, engine: sa.Engine, routed: list[Routed], max_age: timedelta
) -> dict[str, Any]:
    """Mark every reported deploy of the last `max_age` whose mark is due on a channel routed deploys (not enqueued
    yet, or waiting past its backoff), through the outbox, soon after the deploy is recorded rather than after its
    analysis. One deploy's or channel's failure never stops the others: an unexpected error is raised after them
    all. Returns each deploy's record, by deploy id."""
    from radar_pipeline.warehouse import deploys

    marking = [r for r in routed if DEPLOY in r.outcomes]
    with engine.connect() as conn:
        due = outbox.marks_due(conn, [r.name for r in marking], max_age, outbox.LEASE)
    metadata: dict[str, Any] = {}
    failures: list[Exception] = []
    for deploy_id in due:
        with engine.connect() as conn:
            event = deploys.get(conn, deploy_id)
        if event is None:
            continue
        shown: dict[str, Any] = {}
        for route in marking:
            try:
                shown[route.name] = mark_deploy(log, engine, route.channel, deploy_notice(event))
            except Exception as exc:  # noqa: BLE001 - one channel's failure must not stop the others
                log.error(
                    f"{route.name}: {type(exc).__name__}: {printable(str(exc).splitlines()[0] if str(exc) else '')}"
                )
                shown[route.name] = {"error": type(exc).__name__}
                failures.append(exc)
        metadata[deploy_id] = shown
    if failures:
        raise failures[0]
    return metadata
