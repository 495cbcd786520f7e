"""The outbox (radar.outbox, sql/0043): every delivery radar makes, to every destination, written before anything is
sent and claimed and settled by one set of rules.

- A row is a detection (a statement per channel per analysis), a resolve (close what a detection opened), a deploy
  mark, a Slack message update, or a code host's commit status, deployment status or review comment.
- An attempt claims the rows due (`claim`: pending past their backoff, or left `sending` past the lease by a run that
  stopped mid-send) under a new delivery id, in a transaction of its own, under `lock`; it sends; it records each
  outcome in another (`settle`), which touches only rows that attempt still holds.
- A row an attempt may have delivered (outcome_unknown, or left `sending`) carries that attempt's delivery id and time
  (Row.earlier, Row.since), for the next attempt to look for on the destination before sending again.
- A retryable failure waits (next_attempt_at) and is final after MAX_ATTEMPTS attempts.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import sqlalchemy as sa

from radar_pipeline.pgss_model import KEY, Key, statement_key

MAX_ATTEMPTS = 8  # a retryable failure keeps a row pending until it has been tried this many times
LEASE = timedelta(minutes=15)  # a row `sending` longer than this was left by a run that stopped mid-send
DETECTION, RESOLVE, DEPLOY_MARK, MESSAGE_UPDATE = "detection", "resolve", "deploy_mark", "message_update"
EVENT_KINDS = (RESOLVE, DEPLOY_MARK, MESSAGE_UPDATE)  # a channel's own rows beside its detections
CODE_HOST = "code_host"  # the channel of the code hosts' rows
CODE_HOST_KINDS = ("commit_status", "deployment_status", "review_comment")  # in the order they are sent
_ORDER = {kind: i for i, kind in enumerate((DETECTION, RESOLVE, DEPLOY_MARK, MESSAGE_UPDATE, *CODE_HOST_KINDS))}
INTENDED_UNSENT = "labelled intended before it was sent: not sent"

# A resolve waiting for its trigger (a detection still being sent): its subject until the trigger is sent, unique
# per detection row (alias a).
WAITING_SUBJECT = (
    "concat_ws(' ', 'unsent', a.analysis_id, a.target, a.dbid::text, a.userid::text, a.queryid::text, a.toplevel::text)"
)
# A waiting resolve's trigger: the detection row it names (columns of the resolve, alias w).
TRIGGER = (
    f"radar.outbox t WHERE t.kind = '{DETECTION}' AND t.analysis_id = w.analysis_id AND t.target = w.target "
    "AND t.channel = w.channel AND t.dbid = w.dbid AND t.userid = w.userid AND t.queryid = w.queryid "
    "AND t.toplevel = w.toplevel"
)
# A detection that may have made something on its channel: its remote id is recorded with its first attempt
# (expect_remote) and dropped only when no attempt can have delivered it (a refusal, a throttle, no connection), so
# any end (sent, skipped, withheld, failed) with a remote id is resolved.
MAY_HAVE_OPENED = "remote_id IS NOT NULL"
# A resolve that waits for its trigger (still pending or sending, or ended with nothing to resolve): not due.
BLOCKED = (
    f"(w.kind = '{RESOLVE}' AND w.queryid IS NOT NULL AND NOT EXISTS (SELECT 1 FROM {TRIGGER} "
    f"AND t.status NOT IN ('pending', 'sending') AND t.{MAY_HAVE_OPENED}))"
)
# A withheld or aged-out row keeps the doubt that an earlier attempt delivered it only where a later analysis may send
# it again (a code host's row: a re-analysis looks for its comment before it posts one); elsewhere it is final.
WITHHELD_DOUBT = f"CASE WHEN channel = '{CODE_HOST}' THEN outcome_unknown ELSE false END"
DUE = (
    "((status = 'pending' AND coalesce(next_attempt_at, '-infinity') <= now()) "
    "OR (status = 'sending' AND claimed_at < now() - :lease))"
)
# Closing an incident is never noise: a resolve is never withheld when it is enqueued, and one recorded withheld
# earlier (an older version withheld the reanalysis's and old analyses' resolves) becomes pending again.
REVIVE = (
    "ON CONFLICT (channel, kind, subject) DO UPDATE SET status = 'pending', attempts = 0, next_attempt_at = NULL, "
    "outcome_unknown = false, last_error = NULL, analysis_id = EXCLUDED.analysis_id, created_at = now() "
    "WHERE radar.outbox.status = 'withheld'"
)
# The detections (alias a) of what an intended label (:label) closes: the verdicts it stands for
# (radar.intended_verdict) and the periodic episodes it closed (their opening analysis's rows).
LABELLED = (
    f"(SELECT a.* FROM radar.outbox a JOIN ("
    "  SELECT deploy_id, target, dbid, userid, queryid, toplevel FROM radar.intended_verdict WHERE label_id = :label "
    "  UNION SELECT opened_by, target, dbid, userid, queryid, toplevel FROM radar.regression_episode "
    "  WHERE intended_label = :label"
    f") s ON s.deploy_id = a.analysis_id AND s.target = a.target AND s.dbid = a.dbid AND s.userid = a.userid "
    f"AND s.queryid = a.queryid AND s.toplevel = a.toplevel WHERE a.kind = '{DETECTION}')"
)


@dataclass(frozen=True)
class Row:
    """One claimed row: what it is, its attempt number, and (when an earlier attempt may have delivered it) that
    attempt's delivery id and claim time."""

    id: int
    kind: str
    target: str  # "" for a code host's row
    key: Key | None  # a detection's statement
    subject: str  # "" for a detection
    attempt: int
    unknown: bool  # an earlier attempt may have delivered it
    earlier: str | None  # that attempt's delivery id, when recorded
    since: datetime | None  # when that attempt claimed it
    remote: str = ""  # what to act on: the subject, or (a resolve that waited for its trigger) the trigger's remote id
    state: str = ""  # a code host's row: the deploy state it carries
    analysed_at: datetime | None = None  # ... and the analysis it reports
    remote_ids: dict[str, int] = field(default_factory=dict)  # a review comment's: request number → comment id


@dataclass(frozen=True)
class Claim:
    """The rows one attempt took, under its delivery id."""

    delivery_id: str
    rows: list[Row]

    @property
    def keys(self) -> list[Key]:
        """The claimed detections' statement keys."""
        return [r.key for r in self.rows if r.key is not None]

    @property
    def attempt(self) -> int:
        """The highest attempt number among the rows, this one included."""
        return max((r.attempt for r in self.rows), default=0)

    @property
    def earlier(self) -> dict[Key, str]:
        """The detections an earlier attempt may have delivered → that attempt's delivery id."""
        return {r.key: r.earlier for r in self.rows if r.key is not None and r.earlier is not None}

    @property
    def since(self) -> datetime | None:
        """When the oldest of those earlier attempts began."""
        return min((r.since for r in self.rows if r.earlier is not None and r.since is not None), default=None)

    def of(self, keys: Sequence[Key]) -> list[Row]:
        """The claimed detections of these statement keys."""
        wanted = set(keys)
        return [r for r in self.rows if r.key in wanted]


def lock(conn: sa.Connection, analysis_id: str) -> None:
    """Serialise claiming the analysis's rows for this transaction (held for a claim only, never while sending)."""
    conn.execute(
        sa.text("SELECT pg_advisory_xact_lock(hashtextextended('radar.outbox:' || :d, 0))"), {"d": analysis_id}
    )


def claim(
    conn: sa.Connection,
    analysis_id: str,
    kinds: Sequence[str],
    lease: timedelta = LEASE,
    channel: str | None = None,
    target: str | None = None,
) -> Claim:
    """Take the analysis's rows of `kinds` (on `channel`, of `target`, when given) that are due: pending past their
    backoff, or left `sending` longer than `lease`. They become `sending` under a new delivery id, one more attempt
    each. The caller commits this before sending anything, under `lock`. A row left `sending` with no attempt left
    fails ('it may have been delivered'); a resolve whose trigger ended with nothing to resolve is skipped."""
    delivery_id = str(uuid.uuid4())
    scope = "w.analysis_id = :d AND w.kind = ANY(CAST(:kinds AS text[]))"
    scope += " AND w.channel = :c" if channel is not None else ""
    scope += " AND w.target = :t" if target is not None else ""
    params = {
        "d": analysis_id,
        "kinds": list(kinds),
        "c": channel,
        "t": target,
        "lease": lease,
        "id": delivery_id,
        "max": MAX_ATTEMPTS,
    }
    conn.execute(
        sa.text(
            "UPDATE radar.outbox w SET status = 'failed', outcome_unknown = true, last_error = 'stopped while "
            f"sending, out of attempts: it may have been delivered' WHERE {scope} AND status = 'sending' "
            "AND claimed_at < now() - :lease AND attempts >= :max"
        ),
        params,
    )
    conn.execute(
        sa.text(
            "UPDATE radar.outbox w SET status = 'skipped', last_error = 'its trigger was never sent: nothing to "
            f"resolve' WHERE {scope} AND w.kind = '{RESOLVE}' AND status = 'pending' AND queryid IS NOT NULL "
            f"AND EXISTS (SELECT 1 FROM {TRIGGER} AND t.status IN ('skipped', 'withheld', 'failed') "
            "AND t.remote_id IS NULL)"
        ),
        params,
    )
    rows = conn.execute(
        sa.text(
            "WITH due AS (SELECT id, delivery_id, claimed_at, (status = 'sending' OR outcome_unknown) AS unknown "
            f"  FROM radar.outbox w WHERE {scope} AND attempts < :max AND NOT {BLOCKED} AND {DUE} FOR UPDATE) "
            "UPDATE radar.outbox w SET status = 'sending', claimed_at = now(), attempts = w.attempts + 1, "
            "  delivery_id = CAST(:id AS uuid), outcome_unknown = due.unknown "
            f"FROM due WHERE w.id = due.id RETURNING w.id, w.kind, w.target, {', '.join('w.' + k for k in KEY)}, "
            "  w.subject, w.state, w.analysed_at, w.attempts, w.remote_ids, due.delivery_id, due.claimed_at, "
            f"  due.unknown, coalesce((SELECT t.remote_id FROM {TRIGGER}), w.subject) AS remote"
        ),
        params,
    ).fetchall()
    claimed = [
        Row(
            id=int(r.id),
            kind=r.kind,
            target=r.target or "",
            key=statement_key([getattr(r, k) for k in KEY]) if r.kind == DETECTION else None,
            subject=r.subject or "",
            attempt=int(r.attempts),
            unknown=bool(r.unknown),
            earlier=str(r.delivery_id) if r.unknown and r.delivery_id is not None and r.claimed_at else None,
            since=r.claimed_at if r.unknown else None,
            remote=str(r.remote or ""),
            state=r.state or "",
            analysed_at=r.analysed_at,
            remote_ids=dict(r.remote_ids or {}),
        )
        for r in rows
    ]
    claimed.sort(key=lambda r: (_ORDER[r.kind], r.target, r.key or (0, 0, 0, False), r.subject))
    return Claim(delivery_id, claimed)


def settle(
    conn: sa.Connection,
    claimed: Claim,
    rows: Sequence[Row],
    status: str,
    *,
    error: str | None = None,
    unknown: bool | None = None,
    wait: timedelta | None = None,
    restore: bool = False,
    remote_id: str | None = None,
    remote_ids: dict[str, int] | None = None,
    ts: str | None = None,
    message_channel: str | None = None,
) -> None:
    """Record how an attempt on these claimed rows ended: sent (with the destination's `remote_id`, a review comment's
    `remote_ids`, a Slack message's `ts` and the channel id it went to), skipped, withheld, failed, or pending again
    (retryable: no new attempt before `wait` has passed). A retryable failure after MAX_ATTEMPTS attempts is final.

    `unknown`: whether this attempt may have delivered them (None: the doubt recorded stays; `sent` clears it).
    `restore` (this attempt sent nothing): the rows an earlier attempt may have delivered get that attempt's delivery
    id and time back, so the next attempt still looks for it, and the others lose the remote id recorded before
    sending (expect_remote: nothing of theirs can be on the channel). A code host's row that recorded a newer analysis
    while this attempt was sending becomes pending again, for that one. Only rows still claimed by this attempt are
    touched: one that overran its lease cannot overwrite what a newer attempt recorded."""
    if not rows:
        return
    newer = "(state, analysed_at) IS DISTINCT FROM (:state, CAST(:analysed_at AS timestamptz))"
    conn.execute(
        sa.text(
            "UPDATE radar.outbox SET last_error = :error, message_ts = coalesce(:ts, message_ts), "
            "message_channel = coalesce(:message_channel, message_channel), "
            "remote_id = CASE WHEN :clear THEN NULL ELSE coalesce(:remote, remote_id) END, "
            "remote_ids = coalesce(CAST(:ids AS jsonb), remote_ids), "
            "sent_at = CASE WHEN :status = 'sent' THEN now() ELSE sent_at END, "
            "delivery_id = coalesce(CAST(:earlier AS uuid), delivery_id), "
            "claimed_at = CASE WHEN :earlier IS NULL THEN claimed_at ELSE :since END, "
            "outcome_unknown = CASE WHEN :status = 'sent' THEN false "
            "  ELSE coalesce(CAST(:unknown AS boolean), outcome_unknown) OR :earlier IS NOT NULL END, "
            "next_attempt_at = CASE WHEN :status = 'pending' THEN now() + CAST(:wait AS interval) END, "
            f"attempts = CASE WHEN {newer} THEN 0 ELSE attempts END, "
            f"status = CASE WHEN {newer} THEN 'pending' "
            "  WHEN :status = 'pending' AND attempts >= :max THEN 'failed' ELSE :status END "
            "WHERE id = :row AND delivery_id = CAST(:claim AS uuid)"
        ),
        [
            {
                "row": r.id,
                "claim": claimed.delivery_id,
                "status": status,
                "error": error,
                "unknown": unknown,
                "wait": wait or timedelta(0),
                "max": MAX_ATTEMPTS,
                "earlier": r.earlier if restore else None,
                "since": r.since if restore and r.earlier is not None else None,
                "clear": restore and r.earlier is None,
                "remote": remote_id,
                "ids": None if remote_ids is None else json.dumps(remote_ids),
                "ts": ts,
                "message_channel": message_channel,
                "state": r.state or None,
                "analysed_at": r.analysed_at,
            }
            for r in rows
        ],
    )


def expect_remote(conn: sa.Connection, claimed: Claim, remote: dict[Key, str]) -> None:
    """Record, on claimed detections before they are sent, the remote id their request will have (a PagerDuty
    dedup_key): from then on what they may have made on the channel can be closed (a resolve), whatever the row's end;
    settle clears it when an attempt surely made nothing."""
    rows = [(r.id, remote[r.key]) for r in claimed.rows if r.key in remote]
    if rows:
        conn.execute(
            sa.text("UPDATE radar.outbox SET remote_id = :r WHERE id = :row AND delivery_id = CAST(:claim AS uuid)"),
            [{"row": i, "r": r, "claim": claimed.delivery_id} for i, r in rows],
        )


def enqueue_detections(
    conn: sa.Connection,
    analysis_id: str,
    target: str,
    keys: list[Key],
    channel: str,
    status: str = "pending",
    note: str | None = None,
) -> None:
    """Add a row for each detection not yet in the outbox for this channel: pending, or withheld with a note."""
    if keys:
        conn.execute(
            sa.text(
                "INSERT INTO radar.outbox (kind, analysis_id, target, dbid, userid, queryid, toplevel, channel, "
                f"status, last_error) VALUES ('{DETECTION}', :d, :t, :dbid, :userid, :queryid, :toplevel, :c, :s, :n) "
                "ON CONFLICT DO NOTHING"
            ),
            [
                {"d": analysis_id, "t": target, **dict(zip(KEY, k, strict=True)), "c": channel, "s": status, "n": note}
                for k in keys
            ],
        )


def enqueue_mark(
    conn: sa.Connection, channel: str, deploy_id: str, target: str, status: str = "pending", note: str | None = None
) -> None:
    """A row for the deploy's mark on this channel, unless it has one: pending, or withheld with a note."""
    conn.execute(
        sa.text(
            "INSERT INTO radar.outbox (channel, kind, subject, analysis_id, target, status, last_error) "
            f"VALUES (:c, '{DEPLOY_MARK}', :d, :d, :t, :s, :n) ON CONFLICT DO NOTHING"
        ),
        {"c": channel, "d": deploy_id, "t": target, "s": status, "n": note},
    )


def enqueue_undetected_resolves(
    conn: sa.Connection, channel: str, analysis_id: str, still: list[tuple[str, Key]]
) -> int:
    """A resolve for each of the analysis's detections this channel took or may have taken (MAY_HAVE_OPENED: sent,
    or attempted without a sure refusal, whatever its end) whose statement the analysis no longer announces (`still`:
    the (target, key) it does), pending; one recorded withheld before is made pending again. Returns how many were
    added or revived."""
    return conn.execute(
        sa.text(
            "INSERT INTO radar.outbox (channel, kind, subject, analysis_id, target) "
            f"SELECT a.channel, '{RESOLVE}', a.remote_id, a.analysis_id, a.target FROM radar.outbox a "
            f"WHERE a.kind = '{DETECTION}' AND a.analysis_id = :d AND a.channel = :c AND a.{MAY_HAVE_OPENED} "
            # the canary arm's rows (target canary:<target>) are its own analysis's, not the before/after's to resolve
            "AND a.target NOT LIKE 'canary:%' "
            "AND (a.target, a.dbid, a.userid, a.queryid, a.toplevel) NOT IN (SELECT * FROM unnest("
            "  CAST(:t AS text[]), CAST(:db AS oid[]), CAST(:u AS oid[]), CAST(:q AS bigint[]), "
            "  CAST(:l AS boolean[]))) "
            f"{REVIVE}"
        ),
        {
            "d": analysis_id,
            "c": channel,
            "t": [t for t, _ in still],
            "db": [k[0] for _, k in still],
            "u": [k[1] for _, k in still],
            "q": [k[2] for _, k in still],
            "l": [k[3] for _, k in still],
        },
    ).rowcount


# A resolve of detection row `a`: due now when the trigger may have opened something, or (the trigger still waits:
# s.waits) under the trigger's own analysis with its statement, claimed once the trigger ends (BLOCKED).
_RESOLVE_OF = (
    f"SELECT a.channel, '{RESOLVE}', CASE WHEN s.waits THEN {WAITING_SUBJECT} ELSE a.remote_id END, "
    "  {analysis}, a.target, CASE WHEN s.waits THEN a.dbid END, CASE WHEN s.waits THEN a.userid END, "
    "  CASE WHEN s.waits THEN a.queryid END, CASE WHEN s.waits THEN a.toplevel END "
)
_RESOLVE_INTO = (
    "INSERT INTO radar.outbox (channel, kind, subject, analysis_id, target, dbid, userid, queryid, toplevel) "
)


def enqueue_recovered_resolves(conn: sa.Connection, channel: str, analysis_id: str) -> int:
    """A resolve for each detection this channel took whose periodic episode this periodic analysis closed
    (radar.regression_episode.recovered_by): for a trigger that ended with something to resolve (MAY_HAVE_OPENED),
    due now; for one still waiting (pending or sending: throttled, or its outcome unknown), a resolve of the
    trigger's own analysis that is claimed only once the trigger ends, so an incident opened after its recovery is
    closed too. One statement (one snapshot): a trigger settled meanwhile is one or the other, never neither. A
    resolve recorded withheld before is made pending again. Returns how many were added or revived."""
    return conn.execute(
        sa.text(
            _RESOLVE_INTO
            + _RESOLVE_OF.format(analysis="CASE WHEN s.waits THEN a.analysis_id ELSE :d END")
            + "FROM radar.regression_episode e JOIN radar.outbox a ON a.analysis_id = e.opened_by "
            f"AND a.kind = '{DETECTION}' AND a.target = e.target AND a.dbid = e.dbid AND a.userid = e.userid "
            "AND a.queryid = e.queryid AND a.toplevel = e.toplevel "
            "CROSS JOIN LATERAL (SELECT a.status IN ('pending', 'sending') AS waits) s "
            f"WHERE e.recovered_by = :d AND a.channel = :c AND (s.waits OR a.{MAY_HAVE_OPENED}) {REVIVE}"
        ),
        {"d": analysis_id, "c": channel},
    ).rowcount


def enqueue_labelled(conn: sa.Connection, label_id: int) -> tuple[int, int]:
    """What an intended label closes, on the channels: a resolve for each of its detections that may have opened
    something (MAY_HAVE_OPENED; one still being sent waits for its trigger, as enqueue_recovered_resolves's), under
    the detection's own analysis, whose retry run delivers it; and an update of each Slack message that carried one
    (its message ts: the message is drawn again with its labels), pending again when updated before. Returns
    (resolves, message updates) added or revived."""
    resolves = conn.execute(
        sa.text(
            _RESOLVE_INTO
            + _RESOLVE_OF.format(analysis="a.analysis_id")
            + f"FROM {LABELLED} a CROSS JOIN LATERAL (SELECT a.status = 'sending' AS waits) s "
            f"WHERE a.{MAY_HAVE_OPENED} {REVIVE}"
        ),
        {"label": label_id},
    ).rowcount
    updates = conn.execute(
        sa.text(
            "INSERT INTO radar.outbox (channel, kind, subject, analysis_id, target) "
            f"SELECT DISTINCT a.channel, '{MESSAGE_UPDATE}', a.message_ts, a.analysis_id, a.target "
            f"FROM {LABELLED} a WHERE a.message_ts IS NOT NULL "
            "ON CONFLICT (channel, kind, subject) DO UPDATE SET status = 'pending', attempts = 0, "
            # an attempt in flight settles nothing (its claim is gone): the next one draws the latest labels
            "next_attempt_at = NULL, outcome_unknown = false, last_error = NULL, created_at = now(), "
            "delivery_id = NULL, claimed_at = NULL"
        ),
        {"label": label_id},
    ).rowcount
    return resolves, updates


def skip_labelled(conn: sa.Connection, label_id: int) -> int:
    """Skip the detections an intended label closes that are still waiting for their first or next attempt (it is no
    news: the team said they meant it); returns how many. One an earlier attempt may have delivered keeps its remote
    id, so what it may have opened is still resolved."""
    return conn.execute(
        sa.text(
            "UPDATE radar.outbox x SET status = 'skipped', last_error = :why, next_attempt_at = NULL "
            f"FROM {LABELLED} a WHERE x.id = a.id AND x.status = 'pending'"
        ),
        {"label": label_id, "why": INTENDED_UNSENT},
    ).rowcount


def enqueue_code_host(
    conn: sa.Connection,
    deploy_id: str,
    kinds: list[str],
    state: str,
    analysed_at: datetime,
    withhold: str | None = None,
    lease: timedelta = LEASE,
) -> None:
    """Record what the deploy's analysis (its `state`, `analysed_at`) asks of its code host: a row per kind not yet
    there (pending, or withheld with the reason); a row of an earlier analysis, or of another state, becomes pending
    again for this one (the status is sent anew, the comment edited in place), keeping the doubt that an earlier
    attempt posted. A row an attempt is sending now (within `lease`) stays that attempt's: it records this analysis,
    and that attempt's settle makes it pending again. A row left `sending` longer becomes pending with the doubt, and
    what its attempt records is ignored. Withheld: existing rows are left as they are."""
    if withhold is None:
        sending = "status = 'sending' AND claimed_at >= now() - :lease"
        conn.execute(
            sa.text(
                "UPDATE radar.outbox SET state = :s, analysed_at = :a, "
                f"  status = CASE WHEN {sending} THEN status ELSE 'pending' END, "
                f"  attempts = CASE WHEN {sending} THEN attempts ELSE 0 END, "
                f"  last_error = CASE WHEN {sending} THEN last_error END, created_at = now(), "
                f"  next_attempt_at = NULL, delivery_id = CASE WHEN {sending} THEN delivery_id END, "
                f"  outcome_unknown = outcome_unknown OR (status = 'sending' AND NOT ({sending})) "
                f"WHERE channel = '{CODE_HOST}' AND subject = :d AND (state, analysed_at) IS DISTINCT FROM (:s, :a)"
            ),
            {"d": deploy_id, "s": state, "a": analysed_at, "lease": lease},
        )
    conn.execute(
        sa.text(
            "INSERT INTO radar.outbox (channel, kind, subject, analysis_id, state, analysed_at, status, last_error) "
            f"SELECT '{CODE_HOST}', k, :d, :d, :s, :a, :status, :note FROM unnest(CAST(:kinds AS text[])) k "
            "ON CONFLICT DO NOTHING"
        ),
        {
            "d": deploy_id,
            "kinds": kinds,
            "s": state,
            "a": analysed_at,
            "status": "withheld" if withhold else "pending",
            "note": withhold,
        },
    )


def withhold_waiting(conn: sa.Connection, analysis_id: str, note: str, kinds: Sequence[str]) -> int:
    """Withhold the analysis's rows of `kinds` still waiting to be sent (too old to be news; never a resolve: closing
    an incident is never noise); returns how many (WITHHELD_DOUBT: what is kept of the doubt that an earlier attempt
    delivered them)."""
    return conn.execute(
        sa.text(
            f"UPDATE radar.outbox SET status = 'withheld', last_error = :n, outcome_unknown = {WITHHELD_DOUBT} "
            "WHERE analysis_id = :d "
            f"AND status = 'pending' AND kind = ANY(CAST(:kinds AS text[])) AND kind <> '{RESOLVE}'"
        ),
        {"d": analysis_id, "n": note, "kinds": list(kinds)},
    ).rowcount


def statuses(conn: sa.Connection, analysis_id: str, kinds: Sequence[str] = (DETECTION,)) -> dict[str, int]:
    """How many of the analysis's rows of `kinds` are in each status: by status alone for detections alone, else as
    'kind status'."""
    label = "status" if list(kinds) == [DETECTION] else "kind || ' ' || status"
    rows = conn.execute(
        sa.text(
            f"SELECT {label}, count(*) FROM radar.outbox WHERE analysis_id = :d "
            "AND kind = ANY(CAST(:kinds AS text[])) GROUP BY 1"
        ),
        {"d": analysis_id, "kinds": list(kinds)},
    )
    return {r[0]: int(r[1]) for r in rows}


def code_host_rows(conn: sa.Connection, deploy_id: str) -> dict[str, dict]:
    """The deploy's code-host rows by kind: status, state, attempts, last_error, remote_ids (for metadata and tests)."""
    found = conn.execute(
        sa.text(
            "SELECT kind, status, state, attempts, last_error, remote_ids FROM radar.outbox "
            f"WHERE channel = '{CODE_HOST}' AND subject = :d ORDER BY kind"
        ),
        {"d": deploy_id},
    )
    return {r.kind: {k: v for k, v in r._mapping.items() if k != "kind"} for r in found}


def message_keys(conn: sa.Connection, analysis_id: str, channel: str, ts: str) -> tuple[str | None, list[Key]]:
    """The channel id a Slack message went to (None when not recorded: the channel as configured is used) and the
    statement keys it carried, from the analysis's detections with that message ts."""
    rows = conn.execute(
        sa.text(
            f"SELECT message_channel, {', '.join(KEY)} FROM radar.outbox WHERE kind = '{DETECTION}' "
            "AND analysis_id = :d AND channel = :c AND message_ts = :ts "
            "ORDER BY target, dbid, userid, queryid, toplevel"
        ),
        {"d": analysis_id, "c": channel, "ts": ts},
    ).fetchall()
    ids = [r.message_channel for r in rows if r.message_channel]
    return (ids[0] if ids else None), [statement_key([getattr(r, k) for k in KEY]) for r in rows]


def marks_due(
    conn: sa.Connection, channels: list[str], max_age: timedelta, lease: timedelta, limit: int = 100
) -> list[str]:
    """The reported deploys (not imported) of the last `max_age` whose mark is due on one of `channels`: not enqueued
    yet, pending past its backoff, or left `sending` past `lease` by a run that stopped. Oldest first."""
    rows = conn.execute(
        sa.text(
            "SELECT e.deploy_id FROM radar.deploy_event e CROSS JOIN unnest(CAST(:c AS text[])) AS c(name) "
            f"LEFT JOIN (SELECT channel, subject, attempts, {DUE} AS due FROM radar.outbox "
            f"  WHERE kind = '{DEPLOY_MARK}') m ON m.channel = c.name AND m.subject = e.deploy_id "
            "WHERE e.source <> 'import' AND e.deployed_at > now() - :age "
            "AND (m.channel IS NULL OR m.attempts < :max AND m.due) "
            "GROUP BY e.deploy_id ORDER BY min(e.deployed_at), e.deploy_id LIMIT :limit"
        ),
        {"c": channels, "age": max_age, "max": MAX_ATTEMPTS, "lease": lease, "limit": limit},
    )
    return [r[0] for r in rows]
