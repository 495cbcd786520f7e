"""The channels' own events in the outbox (radar.channel_event): a resolve (close what a detection's row opened on a
channel, when its statement recovered) and a deploy mark (a PagerDuty change event, a Grafana deploy annotation).
Written before anything is sent, with radar.alert's rules (warehouse.alerts): claimed in a transaction of its own,
settled in another, a lease for a run that stopped mid-send, MAX_ATTEMPTS, backoff."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

import sqlalchemy as sa

from radar_pipeline.pgss_model import Key
from radar_pipeline.warehouse.alerts import MAX_ATTEMPTS

RESOLVE, DEPLOY_MARK = "resolve", "deploy_mark"


def enqueue_mark(
    conn: sa.Connection, channel: str, deploy_id: str, target: str, status: str = "pending", note: str | None = None
) -> None:
    """A row for the deploy's mark on this channel, unless it has one: pending, or withheld with a note."""
    conn.execute(
        sa.text(
            "INSERT INTO radar.channel_event (channel, kind, subject, deploy_id, target, status, last_error) "
            "VALUES (:c, :k, :d, :d, :t, :s, :n) ON CONFLICT DO NOTHING"
        ),
        {"c": channel, "k": DEPLOY_MARK, "d": deploy_id, "t": target, "s": status, "n": note},
    )


def enqueue_undetected_resolves(
    conn: sa.Connection,
    channel: str,
    analysis_id: str,
    still: list[tuple[str, Key]],
    status: str = "pending",
    note: str | None = None,
) -> int:
    """A resolve for each of the analysis's detections this channel took (sent, with its remote id) whose statement the
    analysis no longer announces (`still`: the (target, key) it does): pending, or withheld with a note; returns how
    many were added."""
    return conn.execute(
        sa.text(
            "INSERT INTO radar.channel_event (channel, kind, subject, deploy_id, target, status, last_error) "
            "SELECT a.channel, :k, a.remote_id, a.deploy_id, a.target, :s, :n FROM radar.alert a "
            "WHERE a.deploy_id = :d AND a.channel = :c AND a.status = 'sent' AND a.remote_id IS NOT NULL "
            "AND (a.target, a.dbid, a.userid, a.queryid, a.toplevel) NOT IN (SELECT * FROM unnest("
            "  CAST(:t AS text[]), CAST(:db AS oid[]), CAST(:u AS oid[]), CAST(:q AS bigint[]), "
            "  CAST(:l AS boolean[]))) "
            "ON CONFLICT DO NOTHING"
        ),
        {
            "k": RESOLVE,
            "d": analysis_id,
            "c": channel,
            "s": status,
            "n": note,
            "t": [t for t, _ in still],
            "db": [k[0] for _, k in still],
            "u": [k[1] for _, k in still],
            "q": [k[2] for _, k in still],
            "l": [k[3] for _, k in still],
        },
    ).rowcount


def enqueue_recovered_resolves(conn: sa.Connection, channel: str, analysis_id: str) -> int:
    """A resolve for each detection this channel took (sent, with its remote id) whose periodic episode this periodic
    analysis closed (radar.regression_episode.recovered_by); returns how many were added."""
    return conn.execute(
        sa.text(
            "INSERT INTO radar.channel_event (channel, kind, subject, deploy_id, target) "
            "SELECT a.channel, :k, a.remote_id, :d, a.target FROM radar.regression_episode e "
            "JOIN radar.alert a ON a.deploy_id = e.opened_by AND a.target = e.target AND a.dbid = e.dbid "
            "AND a.userid = e.userid AND a.queryid = e.queryid AND a.toplevel = e.toplevel "
            "WHERE e.recovered_by = :d AND a.channel = :c AND a.status = 'sent' AND a.remote_id IS NOT NULL "
            "ON CONFLICT DO NOTHING"
        ),
        {"k": RESOLVE, "d": analysis_id, "c": channel},
    ).rowcount


@dataclass(frozen=True)
class Event:
    """One claimed row: what it is, its attempt, and (when an earlier attempt may have delivered it) that attempt's
    delivery id and claim time."""

    kind: str
    subject: str
    target: str
    attempt: int
    earlier: str | None
    since: datetime | None


def claim(conn: sa.Connection, analysis_id: str, channel: str, kind: str, lease: timedelta) -> tuple[str, list[Event]]:
    """Take the analysis's rows of this kind due on this channel (pending past their backoff, or left `sending` longer
    than `lease`) under a new delivery id, one more attempt each; the caller commits before sending (under
    warehouse.alerts.lock). Rows left `sending` with no attempt left fail ('it may have been sent')."""
    delivery_id = str(uuid.uuid4())
    where = "deploy_id = :d AND channel = :c AND kind = :k"
    params = {"d": analysis_id, "c": channel, "k": kind, "lease": lease, "id": delivery_id, "max": MAX_ATTEMPTS}
    conn.execute(
        sa.text(
            "UPDATE radar.channel_event SET status = 'failed', last_error = 'stopped while sending, out of attempts: "
            f"it may have been sent' WHERE {where} AND status = 'sending' AND claimed_at < now() - :lease "
            "AND attempts >= :max"
        ),
        params,
    )
    rows = conn.execute(
        sa.text(
            "WITH due AS (SELECT channel, kind, subject, delivery_id, claimed_at, "
            "  (status = 'sending' OR outcome_unknown) AS unknown FROM radar.channel_event "
            f"  WHERE {where} AND attempts < :max AND ("
            "    (status = 'pending' AND coalesce(next_attempt_at, '-infinity') <= now()) "
            "    OR (status = 'sending' AND claimed_at < now() - :lease)) FOR UPDATE) "
            "UPDATE radar.channel_event e SET status = 'sending', claimed_at = now(), attempts = e.attempts + 1, "
            "  delivery_id = CAST(:id AS uuid), outcome_unknown = due.unknown "
            "FROM due WHERE e.channel = due.channel AND e.kind = due.kind AND e.subject = due.subject "
            "RETURNING e.subject, e.target, e.attempts, due.delivery_id, due.claimed_at, due.unknown"
        ),
        params,
    ).fetchall()
    return delivery_id, [
        Event(
            kind,
            r.subject,
            r.target,
            int(r.attempts),
            str(r.delivery_id) if r.unknown and r.delivery_id is not None else None,
            r.claimed_at if r.unknown else None,
        )
        for r in rows
    ]


def settle(
    conn: sa.Connection,
    channel: str,
    event: Event,
    delivery_id: str,
    status: str,
    remote_id: str | None = None,
    error: str | None = None,
    unknown: bool = False,
    wait: timedelta | None = None,
    keep_earlier: bool = False,
) -> None:
    """Record how an attempt on a claimed row ended (as warehouse.alerts.settle): sent (with the channel's id),
    failed, or pending again after `wait` (`unknown`: it may have been delivered; a retryable failure after
    MAX_ATTEMPTS is final). Only a row still claimed by `delivery_id` is touched. `keep_earlier` (this attempt sent
    nothing): the earlier attempt's delivery id and time come back, so the next attempt still looks for it."""
    restore = keep_earlier and event.earlier is not None
    conn.execute(
        sa.text(
            "UPDATE radar.channel_event SET last_error = :error, remote_id = coalesce(:remote, remote_id), "
            "sent_at = CASE WHEN :status = 'sent' THEN now() ELSE sent_at END, "
            "delivery_id = coalesce(CAST(:earlier AS uuid), delivery_id), "
            "claimed_at = CASE WHEN :earlier IS NULL THEN claimed_at ELSE :since END, "
            "outcome_unknown = CASE WHEN :status = 'pending' THEN :unknown OR :earlier IS NOT NULL ELSE false END, "
            "next_attempt_at = CASE WHEN :status = 'pending' THEN now() + CAST(:wait AS interval) END, "
            "status = CASE WHEN :status = 'pending' AND attempts >= :max THEN 'failed' ELSE :status END "
            "WHERE channel = :c AND kind = :k AND subject = :s AND delivery_id = CAST(:claim AS uuid)"
        ),
        {
            "error": error,
            "remote": remote_id,
            "status": status,
            "earlier": event.earlier if restore else None,
            "since": event.since if restore else None,
            "unknown": unknown,
            "wait": wait or timedelta(0),
            "max": MAX_ATTEMPTS,
            "c": channel,
            "k": event.kind,
            "s": event.subject,
            "claim": delivery_id,
        },
    )


def withhold_waiting(conn: sa.Connection, analysis_id: str, note: str) -> int:
    """Withhold the analysis's channel events still waiting to be sent (too old to be news); returns how many."""
    return conn.execute(
        sa.text(
            "UPDATE radar.channel_event SET status = 'withheld', last_error = :n, outcome_unknown = false "
            "WHERE deploy_id = :d AND status = 'pending'"
        ),
        {"d": analysis_id, "n": note},
    ).rowcount


def statuses(conn: sa.Connection, analysis_id: str) -> dict[str, int]:
    """How many of the analysis's channel events are in each status, as 'kind status'."""
    rows = conn.execute(
        sa.text("SELECT kind || ' ' || status, count(*) FROM radar.channel_event WHERE deploy_id = :d GROUP BY 1"),
        {"d": analysis_id},
    )
    return {r[0]: int(r[1]) for r in rows}
