"""The seam between the outbox and the channels (Slack, PagerDuty, Microsoft Teams, Grafana, generic webhooks), and
ChannelError, the one error every destination's client raises (the code hosts' too).

The outbox (steps/alert_delivery.py and steps/channel_delivery.py, through steps/delivery.py) claims rows, calls a
Channel, and records the outcome; a Channel only maps what radar found to its API's request and reports how the
request ended. Each Channel holds its own client-side time bound and never puts a secret (routing key, token, URL with
a secret) in an error message."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from radar_pipeline.alerts.render import AnalysisFacts, LoadChange, Regression
from radar_pipeline.pgss_model import Key

MAX_RETRY_AFTER = 86400.0  # a day: a longer (or absurd) Retry-After is taken as a day


def retry_after(value: str | None, default: float = 1.0, *, epoch: bool = False) -> float:
    """The seconds a header asks to wait, every client's one reading: Retry-After's delay-seconds or HTTP date, or
    with `epoch` a rate limit's reset in epoch seconds (GitHub's x-ratelimit-reset, GitLab's RateLimit-Reset); from 0
    to MAX_RETRY_AFTER, `default` when absent, unreadable or NaN."""
    if value is None:
        return default
    try:
        seconds = float(value) - (time.time() if epoch else 0.0)
    except ValueError:
        if epoch:
            return default
        from email.utils import parsedate_to_datetime  # here: this module stays light to import

        try:
            seconds = parsedate_to_datetime(value).timestamp() - time.time()
        except (TypeError, ValueError):
            return default
    return min(max(seconds, 0.0), MAX_RETRY_AFTER) if seconds == seconds else default


class ChannelError(Exception):
    """The channel did not take the request, or may have. `retryable`: a later attempt may succeed; `unknown`: the
    request went out and no answer came (a timeout, a lost connection), so it may have been delivered; `retry_after`:
    the seconds the channel asked to wait (a 429's Retry-After), from 0 to MAX_RETRY_AFTER (1 for a NaN)."""

    def __init__(self, message: str, retryable: bool, unknown: bool = False, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.unknown = unknown
        # A host may ask for inf, 1e20, a negative wait or NaN (float() reads each): bounded here, for every channel.
        if retry_after is not None:
            retry_after = min(max(retry_after, 0.0), MAX_RETRY_AFTER) if retry_after == retry_after else 1.0
        self.retry_after = retry_after


@dataclass(frozen=True)
class Detection:
    """One outbox row's content: a statement's regression, or its load change (a new heavy statement, a surge)."""

    key: Key  # (dbid, userid, queryid, toplevel) on facts.target
    regression: Regression | None = None
    change: LoadChange | None = None


@dataclass(frozen=True)
class DeployNotice:
    """A deploy as a marker on a channel (a PagerDuty change event, a Grafana annotation)."""

    deploy_id: str
    target: str
    deployed_at: datetime
    service: str | None
    version: str | None
    url: str | None  # the deploy's link (radar deploy --url)
    run_url: str | None  # the CI run that deployed, when known
    commit_sha: str | None = None
    repository: str | None = None


@dataclass(frozen=True)
class Delivered:
    """What the channel answered to a request it took, stored with the outbox row: its id of what it created, when it
    gives one (a PagerDuty dedup_key, a Grafana annotation id), or a Slack message's ts and channel id (chat.update's
    keys); `warnings`: what went wrong without failing the delivery (a Slack chart not uploaded)."""

    remote_id: str | None = None
    ts: str | None = None
    message_channel: str | None = None
    warnings: tuple[str, ...] = ()


class Channel(Protocol):
    """A destination radar sends to through the outbox: PagerDuty, Teams, Grafana, webhooks and Slack (the code hosts
    are not one: their deliveries are a deploy's statuses and review comments, keyed by deploy, not detections)."""

    name: str  # the outbox row's channel: "pagerduty", "teams", "grafana", "webhook:<name>", Slack's channel
    per_detection: bool  # one request per detection (PagerDuty, Grafana, webhook), else one per analysis and target
    can_check: bool  # find_delivered works: the channel can tell whether an earlier attempt was delivered

    def notify(self, facts: AnalysisFacts, detections: list[Detection], delivery_id: str) -> Delivered:
        """Send these detections of one analysis on facts.target (exactly one when per_detection) under the outbox's
        delivery id; raise ChannelError when the channel did not take them, or may have."""
        ...

    def find_delivered(self, facts: AnalysisFacts, earlier: dict[Key, str], since: datetime) -> dict[Key, Delivered]:
        """Of the rows an earlier attempt may have delivered (key → that attempt's delivery id, claimed after
        `since`), those the channel shows were delivered. Only called when can_check; raises ChannelError."""
        ...


class DeployMarker(Protocol):
    """A channel that also marks each deploy (PagerDuty's change events, Grafana's deploy annotations)."""

    name: str
    can_check: bool  # find_marked works

    def mark_deploy(self, notice: DeployNotice, delivery_id: str) -> Delivered:
        """Mark the deploy under the outbox's delivery id; raise ChannelError when the channel did not take it, or
        may have."""
        ...

    def find_marked(self, notice: DeployNotice, delivery_id: str, since: datetime) -> Delivered | None:
        """The mark an earlier attempt (that delivery id, claimed after `since`) made, or None. Only called when
        can_check; raises ChannelError."""
        ...


class Resolver(Protocol):
    """A channel that closes what a detection opened when its statement recovers (PagerDuty's resolve)."""

    name: str

    def resolve(self, remote_id: str, delivery_id: str) -> Delivered:
        """Close what the detection's request made (its remote id: a dedup_key) under the outbox's delivery id; raise
        ChannelError when the channel did not take it, or may have. Resolving something already closed succeeds."""
        ...
