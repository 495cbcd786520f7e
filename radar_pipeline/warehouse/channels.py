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
from radar_pipeline.warehouse.alerts import LABELLED_ALERTS, MAX_ATTEMPTS, SETTLED

RESOLVE, DEPLOY_MARK, MESSAGE_UPDATE = "resolve", "deploy_mark", "message_update"
# Closing an incident is never noise: a resolve is never withheld when it is enqueued, and one recorded withheld
# earlier (an older version withheld the reanalysis's and old analyses' resolves) becomes pending again.
REVIVE = (
    "ON CONFLICT (channel, kind, subject) DO UPDATE SET status = 'pending', attempts = 0, next_attempt_at = NULL, "
    "outcome_unknown = false, last_error = NULL, deploy_id = EXCLUDED.deploy_id, created_at = now() "
    "WHERE radar.channel_event.status = 'withheld'"
)
# A resolve waiting for its trigger (sql/0021): its key until the trigger is sent, unique per radar.alert row.
WAITING_SUBJECT = (
    "concat_ws(' ', 'unsent', a.deploy_id, a.target, a.dbid::text, a.userid::text, a.queryid::text, a.toplevel::text)"
)
# A waiting resolve's trigger: the radar.alert row it names (columns of radar.channel_event w).
TRIGGER = (
    "radar.alert t WHERE t.deploy_id = w.deploy_id AND t.target = w.target AND t.channel = w.channel "
    "AND t.dbid = w.dbid AND t.userid = w.userid AND t.queryid = w.queryid AND t.toplevel = w.toplevel"
)
# A trigger row that may have made something on its channel: its remote id is recorded with its first attempt
# (outbox.expect_remote) and dropped only when no attempt can have delivered it (a refusal, a throttle, no
# connection), so any end (sent, skipped, withheld, failed) with a remote id is resolved.
MAY_HAVE_OPENED = "remote_id IS NOT NULL"
# A row that waits for its trigger (still pending or sending, or ended with nothing to resolve): not due.
BLOCKED = (
    f"(w.queryid IS NOT NULL AND NOT EXISTS (SELECT 1 FROM {TRIGGER} AND t.status NOT IN ('pending', 'sending') "
    f"AND t.{MAY_HAVE_OPENED}))"
)


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
) -> int:
    """A resolve for each of the analysis's detections this channel took or may have taken (MAY_HAVE_OPENED: sent,
    or attempted without a sure refusal, whatever its end) whose statement the analysis no longer announces (`still`:
    the (target, key) it does), pending; one recorded withheld before (by a version that withheld resolves) is made
    pending again. Returns how many were added or revived."""
    return conn.execute(
        sa.text(
            "INSERT INTO radar.channel_event (channel, kind, subject, deploy_id, target) "
            "SELECT a.channel, :k, a.remote_id, a.deploy_id, a.target FROM radar.alert a "
            f"WHERE a.deploy_id = :d AND a.channel = :c AND a.{MAY_HAVE_OPENED} "
            # the canary arm's rows (target canary:<target>) are its own analysis's, not the before/after's to resolve
            "AND a.target NOT LIKE 'canary:%' "
            "AND (a.target, a.dbid, a.userid, a.queryid, a.toplevel) NOT IN (SELECT * FROM unnest("
            "  CAST(:t AS text[]), CAST(:db AS oid[]), CAST(:u AS oid[]), CAST(:q AS bigint[]), "
            "  CAST(:l AS boolean[]))) "
            f"{REVIVE}"
        ),
        {
            "k": RESOLVE,
            "d": analysis_id,
            "c": channel,
            "t": [t for t, _ in still],
            "db": [k[0] for _, k in still],
            "u": [k[1] for _, k in still],
            "q": [k[2] for _, k in still],
            "l": [k[3] for _, k in still],
        },
    ).rowcount


def enqueue_recovered_resolves(conn: sa.Connection, channel: str, analysis_id: str) -> int:
    """A resolve for each detection this channel took whose periodic episode this periodic analysis closed
    (radar.regression_episode.recovered_by): for a trigger that ended with something to resolve (MAY_HAVE_OPENED),
    due now; for one still waiting (pending or sending: throttled, or its outcome unknown), a resolve of the
    trigger's own analysis that is claimed only once the trigger ends (claim), so an incident opened after its
    recovery is closed too. One statement (one snapshot): a trigger settled meanwhile is one or the other, never
    neither. A resolve recorded withheld before is made pending again. Returns how many were added or revived."""
    return conn.execute(
        sa.text(
            "INSERT INTO radar.channel_event "
            "(channel, kind, subject, deploy_id, target, dbid, userid, queryid, toplevel) "
            f"SELECT a.channel, :k, CASE WHEN s.waits THEN {WAITING_SUBJECT} ELSE a.remote_id END, "
            "  CASE WHEN s.waits THEN a.deploy_id ELSE :d END, a.target, CASE WHEN s.waits THEN a.dbid END, "
            "  CASE WHEN s.waits THEN a.userid END, CASE WHEN s.waits THEN a.queryid END, "
            "  CASE WHEN s.waits THEN a.toplevel END "
            "FROM radar.regression_episode e JOIN radar.alert a ON a.deploy_id = e.opened_by AND a.target = e.target "
            "AND a.dbid = e.dbid AND a.userid = e.userid AND a.queryid = e.queryid AND a.toplevel = e.toplevel "
            "CROSS JOIN LATERAL (SELECT a.status IN ('pending', 'sending') AS waits) s "
            f"WHERE e.recovered_by = :d AND a.channel = :c AND (s.waits OR a.{MAY_HAVE_OPENED}) {REVIVE}"
        ),
        {"k": RESOLVE, "d": analysis_id, "c": channel},
    ).rowcount


def enqueue_labelled(conn: sa.Connection, label_id: int) -> tuple[int, int]:
    """What an intended label closes, on the channels: a resolve for each of its alerts that may have opened
    something (MAY_HAVE_OPENED; one still being sent waits for its trigger, as enqueue_recovered_resolves's), under
    the alert's own analysis, whose retry run delivers it; and an update of each Slack message that carried one (its
    message ts: the message is drawn again with its labels), pending again when updated before. Returns (resolves,
    message updates) added or revived."""
    resolves = conn.execute(
        sa.text(
            "INSERT INTO radar.channel_event "
            "(channel, kind, subject, deploy_id, target, dbid, userid, queryid, toplevel) "
            f"SELECT a.channel, :k, CASE WHEN s.waits THEN {WAITING_SUBJECT} ELSE a.remote_id END, a.deploy_id, "
            "  a.target, CASE WHEN s.waits THEN a.dbid END, CASE WHEN s.waits THEN a.userid END, "
            "  CASE WHEN s.waits THEN a.queryid END, CASE WHEN s.waits THEN a.toplevel END "
            f"FROM {LABELLED_ALERTS} a CROSS JOIN LATERAL (SELECT a.status = 'sending' AS waits) s "
            f"WHERE a.{MAY_HAVE_OPENED} {REVIVE}"
        ),
        {"k": RESOLVE, "label": label_id},
    ).rowcount
    updates = conn.execute(
        sa.text(
            "INSERT INTO radar.channel_event (channel, kind, subject, deploy_id, target) "
            "SELECT DISTINCT a.channel, :k, a.message_ts, a.deploy_id, a.target "
            f"FROM {LABELLED_ALERTS} a WHERE a.message_ts IS NOT NULL "
            "ON CONFLICT (channel, kind, subject) DO UPDATE SET status = 'pending', attempts = 0, "
            # an attempt in flight settles nothing (its claim is gone): the next one draws the latest labels
            "next_attempt_at = NULL, outcome_unknown = false, last_error = NULL, created_at = now(), "
            "delivery_id = NULL, claimed_at = NULL"
        ),
        {"k": MESSAGE_UPDATE, "label": label_id},
    ).rowcount
    return resolves, updates


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
    remote: str = ""  # what to act on: the subject, or (a resolve that waited for its trigger) the trigger's remote id


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
    conn.execute(
        sa.text(
            "UPDATE radar.channel_event w SET status = 'skipped', last_error = 'its trigger was never sent: nothing "
            f"to resolve' WHERE {where} AND status = 'pending' AND queryid IS NOT NULL "
            f"AND EXISTS (SELECT 1 FROM {TRIGGER} AND t.status IN ('skipped', 'withheld', 'failed') "
            "AND t.remote_id IS NULL)"
        ),
        params,
    )
    rows = conn.execute(
        sa.text(
            "WITH due AS (SELECT channel, kind, subject, delivery_id, claimed_at, "
            "  (status = 'sending' OR outcome_unknown) AS unknown FROM radar.channel_event w "
            f"  WHERE {where} AND attempts < :max AND NOT {BLOCKED} AND ("
            "    (status = 'pending' AND coalesce(next_attempt_at, '-infinity') <= now()) "
            "    OR (status = 'sending' AND claimed_at < now() - :lease)) FOR UPDATE) "
            "UPDATE radar.channel_event w SET status = 'sending', claimed_at = now(), attempts = w.attempts + 1, "
            "  delivery_id = CAST(:id AS uuid), outcome_unknown = due.unknown "
            "FROM due WHERE w.channel = due.channel AND w.kind = due.kind AND w.subject = due.subject "
            "RETURNING w.subject, w.target, w.attempts, due.delivery_id, due.claimed_at, due.unknown, "
            f"  coalesce((SELECT t.remote_id FROM {TRIGGER}), w.subject) AS remote"
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
            str(r.remote),
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
            f"{SETTLED} "
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
    """Withhold the analysis's deploy marks still waiting to be sent (too old to be news; a resolve is always sent);
    returns how many."""
    return conn.execute(
        sa.text(
            "UPDATE radar.channel_event SET status = 'withheld', last_error = :n, outcome_unknown = false "
            "WHERE deploy_id = :d AND status = 'pending' AND kind = :k"
        ),
        {"d": analysis_id, "n": note, "k": DEPLOY_MARK},
    ).rowcount


def statuses(conn: sa.Connection, analysis_id: str) -> dict[str, int]:
    """How many of the analysis's channel events are in each status, as 'kind status'."""
    rows = conn.execute(
        sa.text("SELECT kind || ' ' || status, count(*) FROM radar.channel_event WHERE deploy_id = :d GROUP BY 1"),
        {"d": analysis_id},
    )
    return {r[0]: int(r[1]) for r in rows}


def marks_due(
    conn: sa.Connection, channels: list[str], max_age: timedelta, lease: timedelta, limit: int = 100
) -> list[str]:
    """The reported deploys (not imported) of the last `max_age` whose mark is due on one of `channels`: not enqueued
    yet, pending past its backoff, or left `sending` past `lease` by a run that stopped. Oldest first."""
    rows = conn.execute(
        sa.text(
            "SELECT e.deploy_id FROM radar.deploy_event e CROSS JOIN unnest(CAST(:c AS text[])) AS c(name) "
            "LEFT JOIN radar.channel_event m ON m.channel = c.name AND m.kind = :k AND m.subject = e.deploy_id "
            "WHERE e.source <> 'import' AND e.deployed_at > now() - :age AND (m.channel IS NULL OR m.attempts < :max "
            "  AND (m.status = 'pending' AND coalesce(m.next_attempt_at, '-infinity') <= now() "
            "    OR m.status = 'sending' AND m.claimed_at < now() - :lease)) "
            "GROUP BY e.deploy_id ORDER BY min(e.deployed_at), e.deploy_id LIMIT :limit"
        ),
        {"c": channels, "k": DEPLOY_MARK, "age": max_age, "max": MAX_ATTEMPTS, "lease": lease, "limit": limit},
    )
    return [r[0] for r in rows]
