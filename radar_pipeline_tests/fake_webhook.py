"""A local HTTP server standing in for a Microsoft Teams Workflows webhook and for a generic webhook receiver.

A Workflows webhook (path /workflows/…) holds Teams' contract: the URL's signature (`sig=`, else 401), a JSON body
(415 otherwise) of at most MAX_TEAMS bytes (413 over it, Teams' message limit), a message of type "message" whose
attachments are Adaptive Cards (version 1.0 to 1.5, a body of elements whose texts are strings; 400 otherwise, with
Power Automate's JSON error), answered 202 with no body when taken. A generic receiver (path /hook/…) takes JSON
(415 for any other content type, 400 for a body that is not JSON) and answers 200. Every request is recorded.

`answer_next` scripts the next answers: a status with headers and a body (a 429 with Retry-After, a 500, an HTML page
from a proxy), a late answer (the request taken, its answer sent only after a delay: the client times out), a lost
request (no answer for a while, not taken), an answer trickled a byte at a time, a gzip-compressed answer (from a
proxy that compresses whatever the request's Accept-Encoding), or a reset connection."""

from __future__ import annotations

import gzip
import json
import socket
import struct
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

MAX_TEAMS = 28 * 1024  # Teams' limit on a message, its card included
SIG = "s3cr3t-sig-0123456789abcdef"
PORTAL = b"<!DOCTYPE html><html><head><title>Sign in to the guest network</title></head><body>...</body></html>"


@dataclass
class Call:
    """One request the server received."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)


@dataclass(frozen=True)
class Mode:
    """A scripted answer: `status`, `headers`, `body` (of `content_type`) instead of the usual one; with `taken`, the
    request is first handled as usual (recorded as delivered). `delay`: seconds before answering; `reset`: the
    connection closed with a TCP reset instead of an answer."""

    status: int = 200
    body: bytes = b""
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)
    taken: bool = False
    delay: float = 0.0
    reset: bool = False
    usual: bool = False  # the usual answer, only late (with `delay`): the request is taken
    trickle: float = 0.0  # seconds between the body's bytes: an answer that never quite stops coming
    gzip: bool = False  # the body sent gzip-compressed (Content-Encoding: gzip)
    hold: threading.Event | None = None  # answer only once this is set (the test's release, not a fixed delay)


def send(handler: BaseHTTPRequestHandler, mode: Mode) -> None:
    """Write `mode`'s answer (compressed when it says so), after its delay, or reset the connection instead; a client
    that gave up is no error."""
    if mode.delay:
        time.sleep(mode.delay)
    if mode.hold is not None:
        mode.hold.wait(120)
    if mode.reset:
        handler.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        handler.connection.close()
        handler.close_connection = True
        return
    body = gzip.compress(mode.body) if mode.gzip else mode.body
    try:
        handler.send_response(mode.status)
        handler.send_header("Content-Type", mode.content_type)
        handler.send_header("Content-Length", str(len(body)))
        if mode.gzip:
            handler.send_header("Content-Encoding", "gzip")
        for key, value in mode.headers.items():
            handler.send_header(key, value)
        handler.end_headers()
        if mode.trickle:
            for byte in body:
                handler.wfile.write(bytes([byte]))
                handler.wfile.flush()
                time.sleep(mode.trickle)
        else:
            handler.wfile.write(body)
    except OSError:  # the client gave up and closed the connection
        pass


@dataclass
class FakeWebhook:
    """The server's state: requests received, what was delivered, the scripted answers."""

    calls: list[Call] = field(default_factory=list)
    delivered: list[Call] = field(default_factory=list)
    script: deque = field(default_factory=deque)
    port: int = 0

    @property
    def teams_url(self) -> str:
        return (
            f"http://127.0.0.1:{self.port}/workflows/0a1b2c/triggers/manual/paths/invoke"
            f"?api-version=1&sp=%2Ftriggers%2Fmanual%2Frun&sv=1.0&sig={SIG}"
        )

    def hook_url(self, name: str = "ops") -> str:
        return f"http://127.0.0.1:{self.port}/hook/{name}"

    def answer_next(self, *modes: Mode) -> None:
        """Answer the next requests with these, in order."""
        self.script.extend(modes)

    def hold_next(self) -> threading.Event:
        """Take the next request as usual but hold its answer until the returned event is set."""
        release = threading.Event()
        self.script.append(Mode(usual=True, hold=release))
        return release


def teams_errors(message: Any) -> list[str]:
    """Where a Workflows message breaks what Teams takes (empty when it would post it)."""
    if not isinstance(message, dict) or message.get("type") != "message":
        return ["not a message: type must be 'message'"]
    attachments = message.get("attachments")
    if not isinstance(attachments, list) or not attachments:
        return ["attachments must be a non-empty list"]
    errors: list[str] = []
    for i, attachment in enumerate(attachments):
        if attachment.get("contentType") != "application/vnd.microsoft.card.adaptive":
            errors.append(f"attachment {i}: contentType is not an Adaptive Card")
            continue
        card = attachment.get("content")
        if not isinstance(card, dict) or card.get("type") != "AdaptiveCard":
            errors.append(f"attachment {i}: content is not an AdaptiveCard")
            continue
        version = str(card.get("version", ""))
        if version not in ("1.0", "1.1", "1.2", "1.3", "1.4", "1.5"):
            errors.append(f"attachment {i}: unsupported card version {version!r}")
        body = card.get("body")
        if not isinstance(body, list):
            errors.append(f"attachment {i}: body must be a list")
            continue
        for j, element in enumerate(body):
            kind = element.get("type")
            if kind == "TextBlock" and not isinstance(element.get("text"), str):
                errors.append(f"element {j}: a TextBlock needs text")
            elif kind == "FactSet":
                facts = element.get("facts")
                if not isinstance(facts, list) or not all(
                    isinstance(f.get("title"), str) and isinstance(f.get("value"), str) for f in facts
                ):
                    errors.append(f"element {j}: facts need a title and a value")
            elif kind not in ("TextBlock", "FactSet", "ColumnSet", "Container", "ActionSet", "Image"):
                errors.append(f"element {j}: unknown element type {kind!r}")
    return errors


def _error(code: str, message: str) -> bytes:
    return json.dumps({"error": {"code": code, "message": message}}).encode()


def start() -> tuple[FakeWebhook, ThreadingHTTPServer]:
    """Start the server on a free loopback port; the caller shuts it down."""
    state = FakeWebhook()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:  # noqa: N802 - the http.server API
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            split = urlsplit(self.path)
            call = Call(
                "POST", split.path, parse_qs(split.query), {k.lower(): v for k, v in self.headers.items()}, body
            )
            state.calls.append(call)
            mode = state.script.popleft() if state.script else None
            if mode is not None and not (mode.taken or mode.usual):
                self._send(mode)
                return
            status, kind, data = self._usual(call)
            if 200 <= status < 300:
                state.delivered.append(call)
            if mode is not None and mode.usual:
                mode = Mode(status=status, body=data, content_type=kind, delay=mode.delay, hold=mode.hold)
            self._send(mode or Mode(status=status, body=data, content_type=kind))

        def _usual(self, call: Call) -> tuple[int, str, bytes]:
            kind = call.headers.get("content-type", "")
            if call.path.startswith("/workflows/"):
                if call.query.get("sig") != [SIG]:
                    return 401, "application/json", _error("DirectApiAuthorizationRequired", "bad signature")
                if len(call.body) > MAX_TEAMS:
                    return 413, "application/json", _error("MessageTooLarge", f"{len(call.body)} bytes > {MAX_TEAMS}")
                if not kind.startswith("application/json"):
                    return 415, "application/json", _error("UnsupportedMediaType", kind)
                try:
                    errors = teams_errors(call.json)
                except ValueError:
                    errors = ["the body is not JSON"]
                if errors:
                    return 400, "application/json", _error("InvalidRequestContent", "; ".join(errors))
                return 202, "text/plain", b""
            if call.path.startswith("/hook/"):
                if not kind.startswith("application/json"):
                    return 415, "text/plain", b"expected application/json"
                try:
                    json.loads(call.body)
                except ValueError:
                    return 400, "text/plain", b"the body is not JSON"
                return 200, "application/json", b'{"ok":true}'
            return 404, "text/plain", b"not found"

        def _send(self, mode: Mode) -> None:
            send(self, mode)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.port = server.server_address[1]
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    return state, server


def closed_port() -> int:
    """A loopback port nothing listens on: a connection to it is refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
