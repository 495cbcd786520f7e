"""The HTTP exchange the channels beyond Slack share (httpx): one request, bounded as a whole, its answer judged.

Each call is one attempt: the outbox (steps/channel_delivery.py) retries with backoff between runs. Every wait of a
request is bounded by the client's timeout and the whole request by twice it (an answer trickled byte by byte is cut
off); an answer over MAX_ANSWER bytes is not read, nor one that decompresses to more (requests ask for none,
`Accept-Encoding: identity`; a gzip or deflate answer from a server or proxy that compresses anyway is decoded within
that bound; another encoding is judged as it came: not the API's answer); redirects are not followed (a secret in a
header or a URL goes only where it was configured to go). How a request ends, as a ChannelError:
- nothing was sent (a refused connection, a name that does not resolve, a connect timeout): retryable, not unknown;
- the request went out and no whole answer came (a timeout, a reset): retryable and unknown (it may have been taken);
- 429: retryable, with its Retry-After; 408 and 5xx: retryable (502 and 504, a gateway's, also unknown: the request
  may have reached the server behind it);
- a redirect: final (not followed, the request was not taken);
- an answer that is not the API's (an HTML page from a proxy or a captive portal, a body that is not what the API
  answers): retryable and unknown;
- any other 4xx: final.
No error text shows a secret: each is replaced with *** before the text is cut, and URLs are shown without their
query string (config.masking.mask_query)."""

from __future__ import annotations

import json
import logging
import time
import zlib
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import httpx

from radar_pipeline.alerts.channel import ChannelError, retry_after
from radar_pipeline.config.masking import hidden, mask_query, quoted

DEFAULT_TIMEOUT = 10.0
MAX_ANSWER = 256 * 1024  # bytes of an answer read; the APIs answer a few hundred
SHOWN = 160  # characters of an answer quoted in an error
GATEWAY = {502, 504}  # a gateway's answers: the server behind it may have taken the request


@dataclass(frozen=True)
class Answer:
    """A whole answer: status, headers and body (at most MAX_ANSWER bytes)."""

    status: int
    headers: httpx.Headers
    body: bytes

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")

    def json(self) -> Any:
        """The body as JSON, or NOT_JSON."""
        try:
            return json.loads(self.body)
        except ValueError:
            return NOT_JSON

    @property
    def html(self) -> bool:
        """A web page (a proxy's, a captive portal's, a login page): not an API's answer."""
        kind = self.headers.get("content-type", "").lower()
        start = self.body.lstrip()[:15].lower()
        return "text/html" in kind or start.startswith((b"<!doctype", b"<html"))


NOT_JSON = object()


def check_timeout(timeout: float, who: str) -> float:
    """A client-side timeout in seconds, above 0 and at most 300."""
    if not 0 < timeout <= 300:
        raise ValueError(f"the {who} timeout must be above 0 and at most 300 seconds, not {timeout}")
    return float(timeout)


class Http:
    """One channel's HTTP client: its timeout, its secrets (never shown), its name in messages."""

    def __init__(self, who: str, secrets: tuple[str | None, ...], timeout: float = DEFAULT_TIMEOUT) -> None:
        self.who = who
        self.timeout = check_timeout(timeout, who)
        self.secrets = tuple(sorted({s for s in secrets if s and len(s) >= 4}, key=len, reverse=True))

    def request(
        self,
        method: str,
        url: str,
        *,
        json_body: Any = None,
        content: bytes | None = None,
        headers: dict[str, str] | None = None,
        params: Any = None,
    ) -> Answer:
        """One request; its whole answer, or ChannelError when none came (nothing sent: retryable; sent: unknown)."""
        deadline = time.monotonic() + 2 * self.timeout
        try:
            with httpx.Client(timeout=self.timeout, follow_redirects=False) as client:
                headers = {**(headers or {}), "Accept-Encoding": "identity"}
                with client.stream(
                    method, url, json=json_body, content=content, headers=headers, params=params
                ) as response:
                    data = bytearray()
                    for chunk in response.iter_raw():
                        data += chunk
                        if len(data) > MAX_ANSWER:
                            raise httpx.ReadError(f"an answer over {MAX_ANSWER} bytes, not read")
                        if time.monotonic() > deadline:
                            raise httpx.ReadTimeout(f"no whole answer within {2 * self.timeout:g} s")
                    body = _decoded(bytes(data), response.headers.get("content-encoding", ""))
                    return Answer(response.status_code, response.headers, body)
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:  # nothing was sent
            raise ChannelError(f"{self.who} could not be reached: {self.shown(_first_line(exc))}", True) from None
        except httpx.TransportError as exc:
            raise ChannelError(
                f"no answer from {self.who} (the request may have been taken): {self.shown(_first_line(exc))}",
                True,
                unknown=True,
            ) from None

    def refused(self, answer: Answer, what: str) -> ChannelError:
        """The ChannelError of an answer that is not a success (`what`: the API's own message, already quoted)."""
        status = answer.status
        if status == 429:
            limited = retry_after(answer.headers.get("retry-after"))
            return ChannelError(
                f"{self.who} rate-limited the request (HTTP 429, wait {limited:g} s): {what}", True, retry_after=limited
            )
        if 300 <= status < 400:  # the request was not taken: what answered sends it elsewhere, where it must not go
            where = mask_query(answer.headers.get("location", "")) or "nowhere"
            return ChannelError(
                f"{self.who} answered a redirect (HTTP {status} to {self.shown(where)}), not followed", False
            )
        if answer.html:
            return self.not_the_api(answer)
        if status == 408 or status >= 500:
            wait = retry_after(answer.headers["retry-after"]) if "retry-after" in answer.headers else None
            doubt = " (the request may have been taken)" if status in GATEWAY else ""
            return ChannelError(
                f"{self.who} failed (HTTP {status}){doubt}: {what}", True, unknown=status in GATEWAY, retry_after=wait
            )
        return ChannelError(f"{self.who} refused the request (HTTP {status}): {what}", False)

    def not_the_api(self, answer: Answer) -> ChannelError:
        """An answer that is not the API's (a web page, a redirect, a body the API never sends): the request went out
        and whether it was taken cannot be told."""
        return ChannelError(
            f"an answer that is not {self.who}'s (HTTP {answer.status}: {self.quote(answer.text)}); the request may "
            "have been taken",
            True,
            unknown=True,
        )

    def quote(self, text: str) -> str:
        """`text` on one line, without secrets in any form (masking.hidden), cut to SHOWN characters."""
        return quoted(text, self.secrets, SHOWN)

    def shown(self, text: str) -> str:
        """`text` without the secrets in any form (masking.hidden), printable."""
        return hidden(text, self.secrets)


class _NoQuery(logging.Filter):
    """httpx logs each request's URL (INFO): shown without its query string, which may be a secret (a Workflows
    webhook's sig=, a webhook's key)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(mask_query(str(a)) if isinstance(a, httpx.URL) else a for a in record.args)
        return True


logging.getLogger("httpx").addFilter(_NoQuery())


def url_secrets(url: str) -> tuple[str, ...]:
    """What of a URL must never be shown: the URL itself, its query string and each query value."""
    query = url.split("#", 1)[0].partition("?")[2]
    values = [part.partition("=")[2] for part in query.split("&")]
    return (url, query, *values, *(unquote(v) for v in values))


def _decoded(data: bytes, encoding: str) -> bytes:
    """An answer's body as sent before its Content-Encoding (gzip, deflate; another is left as it came), at most
    MAX_ANSWER bytes once decoded (a small compressed answer may decode to gigabytes); httpx.ReadError otherwise."""
    coding = encoding.strip().lower()
    if not data or coding not in ("gzip", "x-gzip", "deflate"):
        return data
    tries = (16 + zlib.MAX_WBITS,) if coding != "deflate" else (zlib.MAX_WBITS, -zlib.MAX_WBITS)  # zlib-wrapped or raw
    for wbits in tries:
        decoder = zlib.decompressobj(wbits)
        try:
            body = decoder.decompress(data, MAX_ANSWER + 1)
        except zlib.error:
            continue
        if len(body) > MAX_ANSWER:
            raise httpx.ReadError(f"an answer that decodes to over {MAX_ANSWER} bytes, not read")
        if not decoder.eof:
            raise httpx.ReadError(f"a {coding} answer cut short")
        return body
    raise httpx.ReadError(f"a {coding} answer that does not decode")


def _first_line(exc: Exception) -> str:
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
