"""The code-host outbox (radar.code_host_delivery, sql/0018): one row per deploy per kind of delivery (commit status,
GitHub deployment status, review comment), claimed and settled as Slack's alerts are (warehouse.alerts)."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

import sqlalchemy as sa

from radar_pipeline.warehouse.alerts import LEASE, MAX_ATTEMPTS

KINDS = ("commit_status", "deployment_status", "review_comment")


def lock(conn: sa.Connection, deploy_id: str) -> None:
    """Serialise claiming the deploy's deliveries for this transaction (never held while sending)."""
    conn.execute(
        sa.text("SELECT pg_advisory_xact_lock(hashtextextended('radar.code_host:' || :d, 0))"), {"d": deploy_id}
    )


def enqueue(
    conn: sa.Connection,
    deploy_id: str,
    kinds: list[str],
    state: str,
    analysed_at: datetime,
    withhold: str | None = None,
    lease: timedelta = LEASE,
) -> None:
    """Record what the deploy's analysis (its `state`, `analysed_at`) asks to deliver: a row per kind not yet there
    (pending, or withheld with the reason); a row of an earlier analysis, or of another state, becomes pending again
    for this one (the status is sent anew, the comment edited in place), keeping the doubt that an earlier attempt
    posted (outcome_unknown). A row an attempt is sending now (within `lease`) stays that attempt's: it records this
    analysis, and that attempt's settle makes it pending again. A row left `sending` longer becomes pending with the
    doubt, and what its attempt records is ignored. Withheld: existing rows are left as they are."""
    if withhold is None:
        sending = "status = 'sending' AND claimed_at >= now() - :lease"
        conn.execute(
            sa.text(
                "UPDATE radar.code_host_delivery SET state = :s, analysed_at = :a, "
                f"  status = CASE WHEN {sending} THEN status ELSE 'pending' END, "
                f"  attempts = CASE WHEN {sending} THEN attempts ELSE 0 END, "
                f"  last_error = CASE WHEN {sending} THEN last_error END, created_at = now(), "
                f"  next_attempt_at = NULL, delivery_id = CASE WHEN {sending} THEN delivery_id END, "
                f"  outcome_unknown = outcome_unknown OR (status = 'sending' AND NOT ({sending})) "
                "WHERE deploy_id = :d AND (state, analysed_at) IS DISTINCT FROM (:s, :a)"
            ),
            {"d": deploy_id, "s": state, "a": analysed_at, "lease": lease},
        )
    conn.execute(
        sa.text(
            "INSERT INTO radar.code_host_delivery (deploy_id, kind, state, analysed_at, status, last_error) "
            "SELECT :d, k, :s, :a, :status, :note FROM unnest(CAST(:kinds AS text[])) k ON CONFLICT DO NOTHING"
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


@dataclass(frozen=True)
class Claimed:
    """One row an attempt took: its kind, the state to deliver and the analysis it comes from, its new delivery id and
    attempt number, whether an earlier attempt may have posted it, and the comments already known (request number →
    comment id)."""

    kind: str
    state: str
    analysed_at: datetime
    delivery_id: str
    attempt: int
    unknown: bool
    remote_ids: dict[str, int]


def claim(conn: sa.Connection, deploy_id: str, lease: timedelta) -> list[Claimed]:
    """Take the deploy's rows that are due (pending past their backoff, or left `sending` longer than `lease`): they
    become `sending` under a new delivery id, one more attempt each. The caller commits before sending, under `lock`.
    A row left `sending` out of attempts is failed."""
    conn.execute(
        sa.text(
            "UPDATE radar.code_host_delivery SET status = 'failed', outcome_unknown = true, last_error = 'stopped "
            "while sending, out of attempts: it may have been applied' WHERE deploy_id = :d AND status = 'sending' "
            "AND claimed_at < now() - :lease AND attempts >= :max"
        ),
        {"d": deploy_id, "lease": lease, "max": MAX_ATTEMPTS},
    )
    rows = conn.execute(
        sa.text(
            "UPDATE radar.code_host_delivery SET status = 'sending', claimed_at = now(), attempts = attempts + 1, "
            "  delivery_id = CAST(:id AS uuid), outcome_unknown = outcome_unknown OR status = 'sending' "
            "WHERE deploy_id = :d AND attempts < :max AND ("
            "  (status = 'pending' AND coalesce(next_attempt_at, '-infinity') <= now()) "
            "  OR (status = 'sending' AND claimed_at < now() - :lease)) "
            "RETURNING kind, state, analysed_at, attempts, outcome_unknown, remote_ids"
        ),
        {"d": deploy_id, "lease": lease, "id": (delivery_id := str(uuid.uuid4())), "max": MAX_ATTEMPTS},
    ).fetchall()
    order = {kind: i for i, kind in enumerate(KINDS)}
    return sorted(
        (
            Claimed(
                r.kind,
                r.state,
                r.analysed_at,
                delivery_id,
                int(r.attempts),
                bool(r.outcome_unknown),
                dict(r.remote_ids),
            )
            for r in rows
        ),
        key=lambda c: order[c.kind],
    )


def settle(
    conn: sa.Connection,
    deploy_id: str,
    claimed: Claimed,
    status: str,
    error: str | None = None,
    unknown: bool | None = None,
    wait: timedelta | None = None,
    remote_ids: dict[str, int] | None = None,
) -> None:
    """Record how the attempt on this row ended: sent, skipped, failed, or pending again (retryable: no attempt before
    `wait`); a retryable failure after MAX_ATTEMPTS attempts is final. `unknown`: whether this attempt, or an earlier
    one it could not rule out, may have posted (None: what is recorded stays); only `sent` clears that doubt. The
    comments known so far (`remote_ids`) are kept whatever the outcome. A row that recorded a newer analysis while this
    attempt was sending becomes pending again, for that one. Only a row still claimed by this attempt is touched."""
    newer = "(state, analysed_at) IS DISTINCT FROM (:state, CAST(:analysed_at AS timestamptz))"
    conn.execute(
        sa.text(
            "UPDATE radar.code_host_delivery SET last_error = :error, "
            "remote_ids = coalesce(CAST(:ids AS jsonb), remote_ids), "
            "sent_at = CASE WHEN :status = 'sent' THEN now() ELSE sent_at END, "
            "outcome_unknown = CASE WHEN :status = 'sent' THEN false "
            "  ELSE coalesce(CAST(:unknown AS boolean), outcome_unknown) END, "
            "next_attempt_at = CASE WHEN :status = 'pending' THEN now() + CAST(:wait AS interval) END, "
            f"attempts = CASE WHEN {newer} THEN 0 ELSE attempts END, "
            f"status = CASE WHEN {newer} THEN 'pending' "
            "  WHEN :status = 'pending' AND attempts >= :max THEN 'failed' ELSE :status END "
            "WHERE deploy_id = :d AND kind = :k AND delivery_id = CAST(:claim AS uuid)"
        ),
        {
            "d": deploy_id,
            "k": claimed.kind,
            "claim": claimed.delivery_id,
            "state": claimed.state,
            "analysed_at": claimed.analysed_at,
            "status": status,
            "error": error,
            "unknown": unknown,
            "wait": wait or timedelta(0),
            "max": MAX_ATTEMPTS,
            "ids": None if remote_ids is None else json.dumps(remote_ids),
        },
    )


def withhold_waiting(conn: sa.Connection, deploy_id: str, note: str) -> int:
    """Withhold the deploy's deliveries still waiting to be sent (too old to be news); returns how many. A doubt that
    an earlier attempt posted stays, for a later re-analysis to look before it posts."""
    return conn.execute(
        sa.text(
            "UPDATE radar.code_host_delivery SET status = 'withheld', last_error = :n "
            "WHERE deploy_id = :d AND status = 'pending'"
        ),
        {"d": deploy_id, "n": note},
    ).rowcount


def rows(conn: sa.Connection, deploy_id: str) -> dict[str, dict]:
    """The deploy's rows by kind: status, state, attempts, last_error, remote_ids (for metadata and tests)."""
    found = conn.execute(
        sa.text(
            "SELECT kind, status, state, attempts, last_error, remote_ids FROM radar.code_host_delivery "
            "WHERE deploy_id = :d ORDER BY kind"
        ),
        {"d": deploy_id},
    )
    return {r.kind: {k: v for k, v in r._mapping.items() if k != "kind"} for r in found}
