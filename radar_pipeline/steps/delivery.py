"""The delivery loop every destination's rows go through once claimed (warehouse/outbox.py): look for what an earlier
attempt may have delivered, send the rest in batches, settle each outcome, all by one set of rules.

- An earlier attempt that may have delivered a row (it timed out, or its run stopped mid-send) is looked for on the
  destination first, where its API can tell (`find`); found, the row is sent no more. Where it cannot tell, the row
  is sent again, said in the log (a destination that deduplicates, PagerDuty's dedup_key, keeps it once).
- A look that fails leaves the rows as they were, with the earlier attempt's doubt (`restore`), for a later run.
- A send that fails is retried later when it may pass (backoff, or what the destination asked), else final; when the
  request may have gone out (`unknown`) the doubt is this attempt's, else an earlier attempt's doubt the destination
  could not settle stays (`restore`). A destination that asked to wait (Retry-After) holds the rest of the batches
  back unsent.
- No transaction is open while the destination is called: each outcome is settled in a short one of its own.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from radar_pipeline.alerts.channel import ChannelError, Delivered
from radar_pipeline.warehouse import outbox
from radar_pipeline.warehouse.outbox import Claim, Row

RETRY_BASE = timedelta(minutes=1)  # the outbox's backoff after a retryable failure, doubling per attempt …
RETRY_CAP = timedelta(hours=1)  # … up to this
HISTORY_SLACK = timedelta(minutes=1)  # clock difference allowed when looking for an earlier attempt's delivery


@dataclass(frozen=True)
class Sent:
    """How a request ended without an error: sent (with what the destination made: its id, a Slack message's ts and
    channel id, a review comment's ids), or otherwise settled (`status`, with the reason in `error`)."""

    remote_id: str | None = None
    ts: str | None = None
    message_channel: str | None = None
    remote_ids: dict[str, int] | None = None
    status: str = "sent"
    error: str | None = None
    unknown: bool | None = None  # None: the doubt recorded stays (`sent` clears it)
    wait: timedelta | None = None  # pending: no attempt before this has passed

    def fields(self) -> dict[str, Any]:
        """The keyword arguments of outbox.settle for this outcome."""
        return {
            "remote_id": self.remote_id,
            "ts": self.ts,
            "message_channel": self.message_channel,
            "remote_ids": self.remote_ids,
            "error": self.error,
            "unknown": self.unknown,
            "wait": self.wait,
        }


def sent_of(delivered: Delivered) -> Sent:
    """A channel's answer (alerts/channel.py) as the outcome the outbox records."""
    return Sent(remote_id=delivered.remote_id, ts=delivered.ts, message_channel=delivered.message_channel)


Find = Callable[[list[Row], datetime], dict[int, Sent]]  # rows with an earlier attempt → by row id, what it made
Send = Callable[[list[Row]], Sent]


def finder(channel: Any, facts: Any) -> Find | None:
    """The look of a Channel's find_delivered (for the analysis of `facts`) over claimed rows: their keys and earlier
    delivery ids in, what was found by row id out; None when the channel cannot tell (can_check)."""
    if not channel.can_check:
        return None

    def find(rows: list[Row], since: datetime) -> dict[int, Sent]:
        by_key = {r.key: r for r in rows if r.key is not None}
        found = channel.find_delivered(facts, {k: str(r.earlier) for k, r in by_key.items()}, since)
        return {by_key[k].id: sent_of(d) for k, d in found.items() if k in by_key}

    return find


@dataclass
class Delivery:
    """One attempt's claimed rows on one destination, and how to settle them."""

    log: logging.Logger
    engine: sa.Engine
    name: str  # the destination, as the log names it
    claimed: Claim
    word: str = "delivered"  # what the log says an earlier attempt may have done ("posted": a Slack message)
    sent: int = 0  # rows settled sent by this attempt (found or sent)
    found: dict[int, Sent] = field(default_factory=dict)  # rows an earlier attempt was found to have delivered

    def settle(self, rows: Sequence[Row], status: str, **outcome: Any) -> None:
        """Record the outcome of these claimed rows in a short transaction of its own (outbox.settle)."""
        if rows:
            with self.engine.begin() as conn:
                outbox.settle(conn, self.claimed, rows, status, **outcome)
            if status == "sent":
                self.sent += len(rows)

    def look(self, rows: Sequence[Row], find: Find | None) -> list[Row] | None:
        """Of `rows`, those still to send once what an earlier attempt may have delivered is looked for with `find`
        (None: the destination cannot tell, and they are sent again); those found are settled sent. None when the
        destination cannot be read now: the rows wait, with their doubt, for a later run."""
        doubtful = [r for r in rows if r.earlier is not None and r.since is not None]
        if not doubtful:
            return list(rows)
        if find is None:
            self.log.warning(
                f"{self.name}: an earlier attempt got no answer and {self.name} cannot be asked whether it was "
                f"{self.word}: sending again (it may appear twice, unless {self.name} deduplicates it)"
            )
            return list(rows)
        since = min(r.since for r in doubtful if r.since is not None) - HISTORY_SLACK
        try:
            found = find(doubtful, since)
        except ChannelError as exc:
            self.log.error(f"{self.name}: cannot tell whether an earlier attempt was {self.word}: {exc}")
            status = "pending" if exc.retryable else "failed"
            self.settle(rows, status, error=str(exc), wait=retry_wait(self.claimed.attempt, exc), restore=True)
            return None
        for row in doubtful:
            if row.id in found:
                self.log.info(f"{self.name}: an earlier attempt was {self.word} after all: not sending it again")
                self.settle([row], "sent", **found[row.id].fields())
                self.found[row.id] = found[row.id]
        # Looked for and not found: the earlier attempt delivered nothing, and its doubt is settled.
        looked = {r.id for r in doubtful}
        return [replace(r, earlier=None, since=None) if r.id in looked else r for r in rows if r.id not in found]

    def send(self, batches: Sequence[Sequence[Row]], send: Send) -> None:
        """Send each batch (one request each) with `send`, and settle its rows by the outcome."""
        for i, batch in enumerate(batches):
            try:
                outcome = send(list(batch))
            except ChannelError as exc:
                self.log.error(f"{self.name}: {exc}")
                wait = retry_wait(max(r.attempt for r in batch), exc)
                status = "pending" if exc.retryable else "failed"
                # Sure that nothing went out (a refusal, a throttle, no connection): an earlier attempt's doubt stays,
                # and a remote id recorded before sending is dropped (outbox.settle's `restore`).
                self.settle(batch, status, error=str(exc), unknown=exc.unknown, wait=wait, restore=not exc.unknown)
                if exc.retry_after is not None:
                    rest = [r for later in batches[i + 1 :] for r in later]
                    self.settle(rest, "pending", error=f"not sent: {self.name} asked to wait", wait=wait, restore=True)
                    return
            else:
                self.settle(batch, outcome.status, **outcome.fields())


def retry_wait(attempt: int, error: ChannelError) -> timedelta:
    """How long the outbox waits before the next attempt: what the destination asked (Retry-After), else an
    exponential backoff from RETRY_BASE doubling per attempt up to RETRY_CAP."""
    if error.retry_after is not None:
        return timedelta(seconds=error.retry_after)  # ChannelError bounds it: 0 to a day
    return min(RETRY_CAP, RETRY_BASE * 2 ** max(0, attempt - 1))
