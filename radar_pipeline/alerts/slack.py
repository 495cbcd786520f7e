"""Delivery through slack-sdk: a bot token and a channel (Web API, charts uploaded with files_upload_v2), or an
incoming webhook (text and blocks, no images).

Rate limits (429, honouring a Retry-After of up to RETRY_AFTER_CAP seconds), server errors (5xx) and refused
connections are retried by slack-sdk's retry handlers before a failure is reported; a longer Retry-After is reported
(DeliveryError.retry_after) for the outbox to wait out between runs. A timeout or a connection lost after the request
went out is never retried here: Slack may have posted the message, so the failure is reported with `unknown` set and
the next attempt first looks for the message (find_posted, token mode: each message carries its outbox delivery id in
its metadata)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.error import URLError

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError, SlackRequestError
from slack_sdk.http_retry.builtin_handlers import RateLimitErrorRetryHandler, ServerErrorRetryHandler
from slack_sdk.http_retry.handler import RetryHandler
from slack_sdk.http_retry.request import HttpRequest
from slack_sdk.http_retry.response import HttpResponse
from slack_sdk.http_retry.state import RetryState
from slack_sdk.webhook import WebhookClient

SLACK_API = "https://slack.com/api/"
RETRIES = 2
RETRY_AFTER_CAP = 30.0  # seconds: a longer Retry-After is waited out between runs, not inside one
EVENT_TYPE = "radar_alert"  # the metadata event type of radar's messages; its payload names the outbox delivery
HISTORY_PAGES = 5  # pages of 200 messages read when looking for an earlier attempt's message
# Slack errors worth trying again on the next run; any other error is final.
RETRYABLE_ERRORS = {"ratelimited", "internal_error", "fatal_error", "service_unavailable", "request_timeout"}


class DeliveryError(Exception):
    """Slack did not take the message, or may have. `retryable`: a later attempt may succeed; `unknown`: the request
    went out but no answer came (a timeout, a lost connection), so the message may have been posted; `retry_after`:
    the seconds Slack asked to wait (a 429)."""

    def __init__(self, message: str, retryable: bool, unknown: bool = False, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.unknown = unknown
        self.retry_after = retry_after


class CappedRateLimitRetryHandler(RateLimitErrorRetryHandler):
    """slack-sdk's 429 handler, retrying only when Retry-After is at most `cap` seconds."""

    def __init__(self, max_retry_count: int, cap: float) -> None:
        super().__init__(max_retry_count=max_retry_count)
        self.cap = cap

    def _can_retry(
        self,
        *,
        state: RetryState,
        request: HttpRequest,
        response: HttpResponse | None = None,
        error: Exception | None = None,
    ) -> bool:
        return response is not None and response.status_code == 429 and _retry_after(response.headers) <= self.cap


def _retry_after(headers: dict[str, Any]) -> float:
    for key, value in (headers or {}).items():
        if key.lower() == "retry-after":
            try:
                return float(value[0] if isinstance(value, list) else value)
            except (TypeError, ValueError):
                return 1.0
    return 1.0


def _refused_connection(error: Exception) -> bool:
    """A connection that was never made: nothing reached Slack, so sending again cannot post twice."""
    return isinstance(error, URLError) and isinstance(getattr(error, "reason", None), ConnectionRefusedError)


class RefusedConnectionRetryHandler(RetryHandler):
    """Retries a request whose connection was refused, and nothing else of the connection errors: after a reset or a
    timeout the message may have been posted, and sending it again could post it twice."""

    def _can_retry(
        self,
        *,
        state: RetryState,
        request: HttpRequest,
        response: HttpResponse | None = None,
        error: Exception | None = None,
    ) -> bool:
        return response is None and error is not None and _refused_connection(error)


def _handlers() -> list[RetryHandler]:
    return [
        CappedRateLimitRetryHandler(max_retry_count=RETRIES, cap=RETRY_AFTER_CAP),
        ServerErrorRetryHandler(max_retry_count=RETRIES),
        RefusedConnectionRetryHandler(max_retry_count=RETRIES),
    ]


@dataclass(frozen=True)
class Delivered:
    """Where the message went and its Slack timestamp (None for webhooks, which return none); charts uploaded."""

    channel: str
    ts: str | None
    charts: int
    chart_errors: list[str]


class SlackSender:
    """Sends one message (and its charts) to Slack, through the Web API or an incoming webhook."""

    def __init__(
        self,
        token: str | None = None,
        channel: str | None = None,
        webhook_url: str | None = None,
        base_url: str = SLACK_API,
        timeout: int = 10,
    ) -> None:
        if token and not channel:
            raise ValueError("RADAR_SLACK_TOKEN is set but RADAR_SLACK_CHANNEL is not: name the channel to post in")
        self.channel = channel if token else ("webhook" if webhook_url else None)
        self.timeout = timeout
        handlers = _handlers()
        self._web = (
            WebClient(token=token, base_url=base_url, timeout=timeout, retry_handlers=handlers) if token else None
        )
        self._hook = (
            WebhookClient(webhook_url, timeout=timeout, retry_handlers=handlers) if webhook_url and not token else None
        )

    @property
    def configured(self) -> bool:
        """Whether a bot token or a webhook was given (else alerts are only recorded and printed)."""
        return self._web is not None or self._hook is not None

    @property
    def can_check(self) -> bool:
        """Whether an earlier attempt's message can be looked for (a bot token: yes; a webhook: no)."""
        return self._web is not None

    def send(
        self,
        text: str,
        blocks: list[dict[str, Any]],
        charts: list[tuple[Path, str]] = (),  # type: ignore[assignment]
        delivery_id: str | None = None,
    ) -> Delivered:
        """Post the message, carrying `delivery_id` in its metadata (token mode); with a bot token, upload each
        (png, title) chart into its thread. Raises DeliveryError."""
        if self._web is not None:
            assert self.channel is not None
            metadata = {"event_type": EVENT_TYPE, "event_payload": {"delivery": delivery_id}} if delivery_id else None
            try:
                response = self._web.chat_postMessage(
                    channel=self.channel, text=text, blocks=blocks, unfurl_links=False, metadata=metadata
                )
            except SlackApiError as exc:
                raise _refused(exc) from None
            except (SlackRequestError, OSError) as exc:
                raise _unreachable(exc) from None
            ts = response.get("ts")
            channel_id = response.get("channel") or self.channel
            uploaded, errors = 0, []
            for path, title in charts:
                try:
                    self._web.files_upload_v2(
                        channel=channel_id, file=str(path), filename=path.name, title=title, thread_ts=ts
                    )
                    uploaded += 1
                except (SlackApiError, SlackRequestError, OSError) as exc:  # the message is out: a chart is extra
                    errors.append(f"{path.name}: {exc}".splitlines()[0])
            return Delivered(self.channel, ts, uploaded, errors)
        if self._hook is not None:
            try:
                result = self._hook.send(text=text, blocks=blocks, unfurl_links=False)
            except (SlackRequestError, OSError) as exc:
                raise _unreachable(exc, "the Slack webhook") from None
            if result.status_code != 200:
                raise DeliveryError(
                    f"the Slack webhook refused the message: {result.status_code} {result.body}",
                    _retryable(str(result.body), result.status_code),
                    retry_after=_retry_after(result.headers) if result.status_code == 429 else None,
                )
            return Delivered("webhook", None, 0, [])
        raise DeliveryError("Slack is not configured", False)

    def find_posted(self, delivery_ids: Iterable[str], since: datetime) -> dict[str, str]:
        """Of these outbox deliveries, those whose message is in the channel since `since`: delivery id → message ts.
        Token mode only (conversations.history with metadata; scope channels:history or groups:history). Raises
        DeliveryError when the history cannot be read."""
        if self._web is None or self.channel is None:
            raise DeliveryError("a webhook cannot look up the messages it posted", False)
        wanted = set(delivery_ids)
        found: dict[str, str] = {}
        cursor = None
        for _ in range(HISTORY_PAGES):
            try:
                page = self._web.conversations_history(
                    channel=self.channel,
                    oldest=f"{since.timestamp():.6f}",
                    include_all_metadata=True,
                    limit=200,
                    cursor=cursor,
                )
            except SlackApiError as exc:
                raise _refused(exc, "Slack refused to list the channel's messages") from None
            except (SlackRequestError, OSError) as exc:
                raise _unreachable(exc) from None
            for message in page.get("messages") or []:
                metadata = message.get("metadata") or {}
                delivery = (metadata.get("event_payload") or {}).get("delivery")
                if metadata.get("event_type") == EVENT_TYPE and delivery in wanted:
                    found.setdefault(delivery, message.get("ts"))
            cursor = (page.get("response_metadata") or {}).get("next_cursor")
            if not page.get("has_more") or not cursor or found.keys() == wanted:
                break
        return found


def _refused(exc: SlackApiError, what: str = "Slack refused the message") -> DeliveryError:
    error = exc.response.get("error", "") if exc.response is not None else ""
    status = exc.response.status_code if exc.response is not None else 0
    retry_after = _retry_after(exc.response.headers) if exc.response is not None and status == 429 else None
    return DeliveryError(f"{what}: {error or status}", _retryable(error, status), retry_after=retry_after)


def _unreachable(exc: Exception, who: str = "Slack") -> DeliveryError:
    if _refused_connection(exc):
        return DeliveryError(f"{who} could not be reached: {exc}", True)
    # A timeout or a connection lost once the request was out: the message may have been posted.
    return DeliveryError(f"no answer from {who} (the message may have been posted): {exc}", True, unknown=True)


def _retryable(error: str, status: int) -> bool:
    return status == 429 or status >= 500 or error in RETRYABLE_ERRORS
