"""Delivery through slack-sdk: a bot token and a channel (Web API, charts uploaded with files_upload_v2), or an
incoming webhook (text and blocks, no images).

Rate limits (429, honouring a Retry-After of up to RETRY_AFTER_CAP seconds), server errors (5xx) and refused
connections are retried by slack-sdk's retry handlers before a failure is reported; a longer Retry-After is reported
(DeliveryError.retry_after) for the outbox to wait out between runs. A timeout or a connection lost after the request
went out is never retried here: Slack may have posted the message, so the failure is reported with `unknown` set and
the next attempt first looks for the message (find_delivered, token mode: each message carries its outbox delivery id in
its metadata).

Every answer is one of three: delivered (Slack's JSON with `ok` true; a webhook's `ok`), Slack's own refusal (its
JSON with an error code; a webhook's error code with a 4xx or 5xx), final unless the code or the status says it may
pass, or anything else — an HTML page from a proxy or a captive portal, an empty, cut or malformed body, JSON that is
not an object, a reset connection, a timeout — which is not Slack's answer, so its outcome is unknown: retried later,
after a look in the channel's history."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Sequence
from datetime import datetime
from http.client import HTTPException
from pathlib import Path
from typing import Any
from urllib.error import URLError
from urllib.parse import unquote, urlsplit

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError, SlackRequestError
from slack_sdk.http_retry.builtin_handlers import RateLimitErrorRetryHandler, ServerErrorRetryHandler
from slack_sdk.http_retry.handler import RetryHandler
from slack_sdk.http_retry.request import HttpRequest
from slack_sdk.http_retry.response import HttpResponse
from slack_sdk.http_retry.state import RetryState
from slack_sdk.webhook import WebhookClient

from radar_pipeline.alerts.channel import ChannelError, Delivered, Detection, retry_after
from radar_pipeline.alerts.render import AnalysisFacts, render
from radar_pipeline.config import printable
from radar_pipeline.config.masking import hidden
from radar_pipeline.pgss_model import Key

SLACK_API = "https://slack.com/api/"
RETRIES = 2
RETRY_AFTER_CAP = 30.0  # seconds: a longer Retry-After is waited out between runs, not inside one
EVENT_TYPE = "radar_alert"  # the metadata event type of radar's messages; its payload names the outbox delivery
HISTORY_PAGES = 5  # pages of 200 messages read when looking for an earlier attempt's message
# Slack errors worth trying again on the next run; any other error is final.
RETRYABLE_ERRORS = {"ratelimited", "internal_error", "fatal_error", "service_unavailable", "request_timeout"}
ERROR_CODE = re.compile(r"[a-z0-9_.]{1,100}")  # how Slack names its errors (invalid_blocks, channel_not_found, no_text)
# What slack-sdk raises when what answered is not Slack, or nothing did: a refused, reset, lost or timed-out connection
# (OSError), a broken HTTP exchange (HTTPException: a bad status line, a cut body), a body that is not UTF-8 or not
# JSON (ValueError), an unknown charset (LookupError), JSON that is not an object (AttributeError, TypeError on it).
NOT_AN_ANSWER = (SlackRequestError, OSError, HTTPException, ValueError, LookupError, AttributeError, TypeError)
NOT_JSON = "Received a response in a non-JSON format: "  # slack-sdk's error for a body that is not JSON
SDK_CUT = 100  # characters of such a body slack-sdk keeps (then "..."), cut before radar can mask a secret in it
SHOWN_BODY = 80  # characters of an answer that is not Slack's quoted in the error
NO_CHANNEL = "-"  # the outbox rows' channel when Slack is not set up (they are recorded, and the message printed)
SECRET_PART = 16  # a webhook URL's path part this long is its secret (24 characters), hidden on its own too


class DeliveryError(ChannelError):
    """Slack did not take the message, or may have (ChannelError's `retryable`, `unknown`, `retry_after`)."""


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
        if response is None or response.status_code != 429:
            return False
        value = _retry_after_header(response.headers)
        # slack-sdk sleeps int(Retry-After): only whole seconds from 0 to the cap are waited out here.
        return value is None or (value.strip().isdigit() and int(value) <= self.cap)


def _retry_after_header(headers: dict[str, Any]) -> str | None:
    for key, value in (headers or {}).items():
        if key.lower() == "retry-after":
            return str(value[0] if isinstance(value, list) else value)
    return None


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


class SlackSender:
    """Sends one message (and its charts) to Slack, through the Web API or an incoming webhook: a Channel
    (alerts/channel.py) of one message per analysis and target, named by its Slack channel ("webhook" for a webhook,
    NO_CHANNEL when neither is set). Beyond the protocol: `send` posts a message drawn elsewhere (a canary's, a
    release's), `notify` takes the charts the step drew from the warehouse, and `update` replaces a message posted."""

    per_detection = False

    def __init__(
        self,
        token: str | None = None,
        channel: str | None = None,
        webhook_url: str | None = None,
        base_url: str = SLACK_API,
        timeout: int = 10,
        buttons: bool = False,
    ) -> None:
        if token and not channel:
            raise ValueError("RADAR_SLACK_TOKEN is set but RADAR_SLACK_CHANNEL is not: name the channel to post in")
        if not 0 < timeout <= 300:  # slack-sdk's bound on each wait for Slack; 0 would make its sockets non-blocking
            raise ValueError(f"the Slack timeout must be 1 to 300 seconds, not {timeout}")
        self.channel = channel if token else ("webhook" if webhook_url else None)
        self.name = self.channel or NO_CHANNEL  # the outbox rows' channel
        self.timeout = timeout
        self.buttons = buttons  # label buttons under each regression (RADAR_SLACK_LABEL_BUTTONS)
        self._secrets = _secrets(token, webhook_url)
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
        (png, title) chart into its thread. Raises DeliveryError. No error text (a quoted page, an exception's)
        shows the bot token or the webhook URL: the outbox stores it and the run logs it."""
        if self._web is not None:
            metadata = {"event_type": EVENT_TYPE, "event_payload": {"delivery": delivery_id}} if delivery_id else None
            response = _call(
                self._secrets,
                "Slack refused the message",
                self._web.chat_postMessage,
                channel=self.channel,
                text=text,
                blocks=blocks,
                unfurl_links=False,
                metadata=metadata,
            )
            ts = _text(response.get("ts"))
            channel_id = _text(response.get("channel")) or self.channel
            errors = []
            for path, title in charts:
                try:
                    self._web.files_upload_v2(
                        channel=channel_id, file=str(path), filename=path.name, title=printable(title), thread_ts=ts
                    )
                except (SlackApiError, *NOT_AN_ANSWER) as exc:  # the message is out: a chart is extra
                    errors.append(
                        _shown(f"a chart was not uploaded: {path.name}: {exc}".splitlines()[0], self._secrets)
                    )
            return Delivered(ts=ts, message_channel=_text(response.get("channel")), warnings=tuple(errors))
        if self._hook is not None:
            try:
                result = self._hook.send(text=text, blocks=blocks, unfurl_links=False)
            except NOT_AN_ANSWER as exc:
                raise _unreachable(exc, self._secrets, "the Slack webhook") from None
            body = result.body.strip() if isinstance(result.body, str) else ""
            if result.status_code == 200 and body == "ok":
                return Delivered()
            if result.status_code == 429 or (result.status_code >= 400 and ERROR_CODE.fullmatch(body)):
                raise DeliveryError(
                    f"the Slack webhook refused the message: {result.status_code} "
                    f"{_shown(body, self._secrets)[:SHOWN_BODY]}",
                    _retryable(body, result.status_code),
                    retry_after=retry_after(_retry_after_header(result.headers)) if result.status_code == 429 else None,
                )
            raise _not_slack(result.status_code, result.body, self._secrets, "the Slack webhook")
        raise DeliveryError("Slack is not configured", False)

    def update(self, channel_id: str, ts: str, text: str, blocks: list[dict[str, Any]]) -> None:
        """Replace the text and blocks of a message radar posted (chat.update: the channel's id and the message's
        ts). Token mode only; raises DeliveryError as `send` does (a message deleted since: message_not_found,
        final)."""
        if self._web is None:
            raise DeliveryError("a webhook cannot update the messages it posted", False)
        _call(
            self._secrets,
            "Slack refused to update the message",
            self._web.chat_update,
            channel=channel_id,
            ts=ts,
            text=text,
            blocks=blocks,
        )

    def notify(
        self,
        facts: AnalysisFacts,
        detections: list[Detection],
        delivery_id: str,
        charts: Sequence[tuple[Path, str]] = (),
    ) -> Delivered:
        """The analysis's message of these detections (its regressions and load changes; a probably-slower statement
        is named from `facts`), posted as `send` posts it, with the (png, title) `charts`."""
        return self.send(*self.message(facts, detections), list(charts), delivery_id=delivery_id)

    def message(self, facts: AnalysisFacts, detections: list[Detection]) -> tuple[str, list[dict[str, Any]]]:
        """The text and blocks `notify` posts."""
        regressions = [d.regression for d in detections if d.regression is not None]
        changes = [d.change for d in detections if d.regression is None and d.change is not None]
        return render(facts, regressions, changes, buttons=self.buttons)

    def find_delivered(
        self, facts: AnalysisFacts | None, earlier: dict[Key, str], since: datetime
    ) -> dict[Key, Delivered]:
        """Of the rows an earlier attempt may have posted (key → its delivery id), those whose message is in the
        channel since `since`, with the message's ts (found by delivery id alone: `facts` is not needed). Token mode
        only (conversations.history with metadata; scope channels:history or groups:history). Raises DeliveryError
        when the history cannot be read (its text, as `send`'s, shows no secret)."""
        if self._web is None or self.channel is None:
            raise DeliveryError("a webhook cannot look up the messages it posted", False)
        wanted = set(earlier.values())
        found: dict[str, str] = {}
        cursor = None
        for _ in range(HISTORY_PAGES):
            page = _call(
                self._secrets,
                "Slack refused to list the channel's messages",
                self._web.conversations_history,
                channel=self.channel,
                oldest=f"{since.timestamp():.6f}",
                include_all_metadata=True,
                limit=200,
                cursor=cursor,
            )
            messages = page.get("messages")
            if not isinstance(messages, list):
                raise _not_slack(page.status_code, str(page.data), self._secrets, "Slack")
            for message in messages:
                metadata = _object(_object(message).get("metadata"))
                delivery = _text(_object(metadata.get("event_payload")).get("delivery"))
                if metadata.get("event_type") == EVENT_TYPE and delivery in wanted and _text(message.get("ts")):
                    found.setdefault(delivery, str(message["ts"]))
            cursor = _text(_object(page.get("response_metadata")).get("next_cursor"))
            if not page.get("has_more") or not cursor or found.keys() == wanted:
                break
        return {k: Delivered(ts=found[d]) for k, d in earlier.items() if d in found}


def _call(secrets: tuple[str, ...], what: str, method: Callable[..., Any], **arguments: Any) -> Any:
    """The SlackResponse of one Web API call with Slack's `ok` true; else the DeliveryError its answer makes, which
    shows none of `secrets`."""
    try:
        return method(**arguments)
    except SlackApiError as exc:
        raise _refused(exc, what, secrets) from None
    except NOT_AN_ANSWER as exc:
        raise _unreachable(exc, secrets) from None


def _refused(exc: SlackApiError, what: str, secrets: tuple[str, ...]) -> DeliveryError:
    response = exc.response
    status = response.status_code if response is not None else 0
    data = response.data if response is not None else None
    error = data.get("error") if isinstance(data, dict) and data.get("ok") is False else None
    if not isinstance(error, str) or not ERROR_CODE.fullmatch(error):
        error = None  # a page that is not Slack's (it may quote the Authorization header): never shown whole
    if status == 429:
        return DeliveryError(
            f"{what}: {error or status}", True, retry_after=retry_after(_retry_after_header(response.headers))
        )
    if error is None:
        return _not_slack(status, _unparsed(data), secrets, "Slack")
    return DeliveryError(f"{what}: {error}", _retryable(error, status))


def _unparsed(data: object) -> str:
    """What came instead of Slack's JSON: the body slack-sdk could not parse (it stands it in for the error), or the
    JSON it could."""
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, str) and error.startswith(NOT_JSON):
        body = error.removeprefix(NOT_JSON)
        if len(body) == SDK_CUT + 3 and body.endswith("..."):  # cut by slack-sdk: a secret the cut split shows in part,
            return body[:SDK_CUT].rpartition(" ")[0] + " …"  # which no masking knows: its last word goes
        return body
    return json.dumps(data, default=str)


def _not_slack(status: int, body: object, secrets: tuple[str, ...], who: str) -> DeliveryError:
    """An answer that is not Slack's (a proxy's or a captive portal's page, an empty or malformed body): the request
    went out and whether Slack got it cannot be told, so the outcome is unknown. The body is quoted short, without
    `secrets` (a proxy's page may echo the webhook URL or the Authorization header)."""
    shown = " ".join(_shown(str(body or ""), secrets).split())
    shown = f"{shown[:SHOWN_BODY]}…" if len(shown) > SHOWN_BODY else shown or "an empty body"
    return DeliveryError(
        f"an answer that is not {who}'s (HTTP {status}: {shown}); the message may have been posted",
        True,
        unknown=True,
    )


def _unreachable(exc: Exception, secrets: tuple[str, ...], who: str = "Slack") -> DeliveryError:
    first = _shown(f"{type(exc).__name__}: {exc}".splitlines()[0] if str(exc) else type(exc).__name__, secrets)
    if _refused_connection(exc):
        return DeliveryError(f"{who} could not be reached: {first}", True)
    # A timeout, a connection lost once the request was out, or an answer slack-sdk could not read: the message may
    # have been posted.
    what = "no answer from" if isinstance(exc, OSError) else "an unreadable answer from"
    return DeliveryError(f"{what} {who} (the message may have been posted): {first}", True, unknown=True)


def _secrets(token: str | None, webhook_url: str | None) -> tuple[str, ...]:
    """What an error text must not show, longest first: the bot token, the webhook URL, its path, and the part of
    that path long enough to be its secret (a page may quote the path with its / escaped)."""
    found = {token, webhook_url}
    if webhook_url:
        path = urlsplit(webhook_url).path
        found |= {
            path,
            *(form for part in path.split("/") if len(part) >= SECRET_PART for form in (part, unquote(part))),
        }
    return tuple(sorted((s for s in found if s and s != "/"), key=len, reverse=True))


class _NoBody(logging.Filter):
    """slack-sdk logs the first 100 characters of an answer that is not JSON at ERROR (a proxy's page may quote the
    Authorization header, and so the token): logged without them (the DeliveryError quotes them, masked)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str) and NOT_JSON in record.msg:
            record.msg, record.args = "Failed to decode Slack API response: an answer that is not JSON, not logged", ()
        return True


logging.getLogger("slack_sdk.web.base_client").addFilter(_NoBody())


def _shown(text: str, secrets: tuple[str, ...]) -> str:
    """`text` fit to store and log: without `secrets` in any form (masking.hidden), printable."""
    return hidden(text, secrets)


def _object(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _retryable(error: str, status: int) -> bool:
    return status == 429 or status >= 500 or error in RETRYABLE_ERRORS
