"""Delivery through slack-sdk: a bot token and a channel (Web API, charts uploaded with files_upload_v2), or an
incoming webhook (text and blocks, no images). Rate limits (429, honouring Retry-After) and server errors (5xx) are
retried by slack-sdk's own retry handlers before a failure is reported."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError, SlackRequestError
from slack_sdk.http_retry.builtin_handlers import (
    ConnectionErrorRetryHandler,
    RateLimitErrorRetryHandler,
    ServerErrorRetryHandler,
)
from slack_sdk.webhook import WebhookClient

SLACK_API = "https://slack.com/api/"
RETRIES = 2
# Slack errors worth trying again on the next run; any other error is final.
RETRYABLE_ERRORS = {"ratelimited", "internal_error", "fatal_error", "service_unavailable", "request_timeout"}


class DeliveryError(Exception):
    """Slack did not take the message. `retryable` says whether a later attempt may succeed."""

    def __init__(self, message: str, retryable: bool) -> None:
        super().__init__(message)
        self.retryable = retryable


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
        handlers = [
            RateLimitErrorRetryHandler(max_retry_count=RETRIES),
            ServerErrorRetryHandler(max_retry_count=RETRIES),
            ConnectionErrorRetryHandler(max_retry_count=RETRIES),
        ]
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

    def send(self, text: str, blocks: list[dict[str, Any]], charts: list[tuple[Path, str]] = ()) -> Delivered:  # type: ignore[assignment]
        """Post the message; with a bot token, upload each (png, title) chart into its thread. Raises DeliveryError."""
        if self._web is not None:
            assert self.channel is not None
            try:
                response = self._web.chat_postMessage(
                    channel=self.channel, text=text, blocks=blocks, unfurl_links=False
                )
            except SlackApiError as exc:
                error = exc.response.get("error", "") if exc.response is not None else ""
                status = exc.response.status_code if exc.response is not None else 0
                raise DeliveryError(
                    f"Slack refused the message: {error or status}", _retryable(error, status)
                ) from None
            except (SlackRequestError, OSError) as exc:
                raise DeliveryError(f"Slack could not be reached: {exc}", True) from None
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
                raise DeliveryError(f"the Slack webhook could not be reached: {exc}", True) from None
            if result.status_code != 200:
                raise DeliveryError(
                    f"the Slack webhook refused the message: {result.status_code} {result.body}",
                    _retryable(str(result.body), result.status_code),
                )
            return Delivered("webhook", None, 0, [])
        raise DeliveryError("Slack is not configured", False)


def _retryable(error: str, status: int) -> bool:
    return status == 429 or status >= 500 or error in RETRYABLE_ERRORS
