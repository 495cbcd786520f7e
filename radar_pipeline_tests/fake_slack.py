"""A local HTTP server standing in for Slack's Web API and an incoming webhook, for the real slack-sdk client.

It answers chat.postMessage, chat.update (as Slack does: the channel's id — never its name — and the ts of a message
in it are required, else channel_not_found or message_not_found), the three steps of files_upload_v2
(files.getUploadURLExternal, the upload itself, files.completeUploadExternal) and a webhook URL, records every
request, and can be told to answer the next calls to a method with given statuses (a 429 with Retry-After, a 500)
before answering normally again.

For the outbox's faults it also keeps the messages it accepted (with their `metadata`), answers conversations.history
from them, and can be told to accept the next message but answer only after a delay (longer than the client's
timeout: the client cannot know the message was posted). What stands between radar and Slack can answer in ways Slack
never does (a TLS-inspecting proxy's or a captive portal's HTML page, an empty or cut body, JSON that is not an
object, a reset connection): `answer_next` makes the next calls answer so, with or without the message taken first.
"""

from __future__ import annotations

import json
import socket
import struct
import threading
import time
from collections import defaultdict, deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs


@dataclass
class Call:
    """One request the server received."""

    path: str
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> dict[str, Any]:
        if self.headers.get("content-type", "").startswith("application/json"):
            return json.loads(self.body)
        return {k: v[0] for k, v in parse_qs(self.body.decode()).items()}


@dataclass(frozen=True)
class Odd:
    """An answer Slack itself never gives: `body` with `status` and `content_type`, or, with `reset`, the connection
    closed with a TCP reset and no answer. With `taken`, the call is first handled as usual (a message is posted)."""

    status: int = 200
    body: bytes = b""
    content_type: str = "text/html; charset=utf-8"
    taken: bool = False
    reset: bool = False


PORTAL = b"<!DOCTYPE html><html><head><title>Sign in to the guest network</title></head><body>...</body></html>"


@dataclass
class FakeSlack:
    """The server's state: calls received and scripted failures per path."""

    calls: list[Call] = field(default_factory=list)
    script: dict[str, deque] = field(default_factory=lambda: defaultdict(deque))
    port: int = 0
    posted: list[dict[str, Any]] = field(default_factory=list)  # messages accepted, oldest first
    late: dict[str, deque] = field(default_factory=lambda: defaultdict(deque))  # delays of the next answers
    hang: dict[str, deque] = field(default_factory=lambda: defaultdict(deque))  # delays of the next lost requests
    odd: dict[str, deque] = field(default_factory=lambda: defaultdict(deque))  # answers Slack never gives

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api/"

    @property
    def webhook_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook/T000/B000/secret"

    def fail_next(self, path: str, *responses: tuple[int, dict[str, str]]) -> None:
        """Answer the next calls to `path` with these (status, headers), in order."""
        self.script[path].extend(responses)

    def calls_to(self, path: str) -> list[Call]:
        return [c for c in self.calls if c.path == path]

    def answer_late(self, path: str, *delays: float) -> None:
        """Accept the next calls to `path` as usual but send each answer only after these delays (seconds)."""
        self.late[path].extend(delays)

    def hold_next(self, path: str) -> threading.Event:
        """Accept the next call to `path` as usual but hold its answer until the returned event is set."""
        release = threading.Event()
        self.late[path].append(release)
        return release

    def lose_next(self, path: str, *delays: float) -> None:
        """Let the next calls to `path` time out without being taken: no answer for these delays (seconds), then a
        500 to a client that has given up."""
        self.hang[path].extend(delays)

    def answer_next(self, path: str, *answers: Odd) -> None:
        """Answer the next calls to `path` with these, in order, instead of Slack's answer."""
        self.odd[path].extend(answers)

    def messages(self) -> list[dict[str, Any]]:
        """The messages chat.postMessage accepted (a late answer included), oldest first."""
        return list(self.posted)


# Slack's documented limits (Block Kit reference and chat.postMessage): what Slack refuses with invalid_blocks /
# msg_too_long, the stand-in refuses too.
MAX_BLOCKS = 50
MAX_SECTION_TEXT = 3000
MAX_FIELDS = 10
MAX_FIELD_TEXT = 2000
MAX_HEADER = 150
MAX_CONTEXT_ELEMENTS = 10
MAX_TEXT = 40_000


def limit_errors(payload: dict[str, Any]) -> list[str]:
    """Where a chat.postMessage or webhook payload breaks Slack's limits (empty when Slack would take it)."""
    errors: list[str] = []
    blocks = payload.get("blocks") or []
    if isinstance(blocks, str):
        blocks = json.loads(blocks)
    text = payload.get("text") or ""
    if len(text) > MAX_TEXT:
        errors.append(f"text: {len(text)} characters > {MAX_TEXT}")
    if len(blocks) > MAX_BLOCKS:
        errors.append(f"{len(blocks)} blocks > {MAX_BLOCKS}")
    for i, block in enumerate(blocks):
        kind = block.get("type")
        if kind == "header" and len(block["text"]["text"]) > MAX_HEADER:
            errors.append(f"block {i}: header of {len(block['text']['text'])} characters > {MAX_HEADER}")
        if kind == "section":
            if "text" in block and len(block["text"]["text"]) > MAX_SECTION_TEXT:
                errors.append(f"block {i}: section text of {len(block['text']['text'])} > {MAX_SECTION_TEXT}")
            fields = block.get("fields") or []
            if len(fields) > MAX_FIELDS:
                errors.append(f"block {i}: {len(fields)} fields > {MAX_FIELDS}")
            errors += [
                f"block {i}: field {j} of {len(f['text'])} characters > {MAX_FIELD_TEXT}"
                for j, f in enumerate(fields)
                if len(f["text"]) > MAX_FIELD_TEXT
            ]
            if "text" not in block and not fields:
                errors.append(f"block {i}: a section needs text or fields")
        if kind == "actions":  # Block Kit: at most 25 elements; a button's text 75, value 2000, ids 255 characters
            elements = block.get("elements") or []
            if not 0 < len(elements) <= 25:
                errors.append(f"block {i}: {len(elements)} action elements (1–25)")
            for j, e in enumerate(elements):
                if e.get("type") != "button" or len(e["text"]["text"]) > 75 or len(e.get("value", "")) > 2000:
                    errors.append(f"block {i}: element {j} is not a button within its limits")
                if not 0 < len(e.get("action_id", "")) <= 255:
                    errors.append(f"block {i}: element {j}'s action_id is not 1–255 characters")
        if "block_id" in block:
            ids = [b.get("block_id") for b in blocks if "block_id" in b]
            if len(block["block_id"]) > 255 or ids.count(block["block_id"]) > 1:
                errors.append(f"block {i}: block_id longer than 255 characters or not unique in the message")
        if kind == "context":
            elements = block.get("elements") or []
            if not 0 < len(elements) <= MAX_CONTEXT_ELEMENTS:
                errors.append(f"block {i}: {len(elements)} context elements (1–{MAX_CONTEXT_ELEMENTS})")
            errors += [
                f"block {i}: context element {j} of {len(e.get('text', ''))} characters > {MAX_SECTION_TEXT}"
                for j, e in enumerate(elements)
                if len(e.get("text", "")) > MAX_SECTION_TEXT
            ]
    return errors


def start() -> tuple[FakeSlack, ThreadingHTTPServer]:
    """Start the server on a free loopback port; the caller shuts it down."""
    state = FakeSlack()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:  # keep the test output quiet
            pass

        def do_POST(self) -> None:  # noqa: N802 - the http.server API
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            path = self.path.split("?")[0]
            state.calls.append(Call(path, {k.lower(): v for k, v in self.headers.items()}, body))
            self.odd: Odd | None = None
            if state.script[path]:
                status, headers = state.script[path].popleft()
                self._answer(status, {"ok": False, "error": "scripted"}, headers)
                return
            if state.hang[path]:
                self._answer(500, {"ok": False, "error": "lost"}, delay=state.hang[path].popleft())
                return
            self.odd = state.odd[path].popleft() if state.odd[path] else None
            if self.odd is not None and not self.odd.taken:
                self._answer(0, None)
                return
            delay = state.late[path].popleft() if state.late[path] else 0.0  # a scripted late answer is this call's
            if path in ("/api/chat.postMessage", "/api/chat.update") or path.startswith("/hook/"):
                broken = limit_errors(state.calls[-1].json)
                if broken and path.startswith("/hook/"):  # as Slack answers a webhook: 400 and the error code
                    self._answer(400, None, raw=b"invalid_blocks", delay=delay)
                    return
                if broken:  # … and the Web API: 200 with ok false
                    self._answer(200, {"ok": False, "error": "invalid_blocks", "errors": broken}, delay=delay)
                    return
            if path.startswith("/hook/"):
                state.posted.append({"channel": "webhook", "ts": None, **state.calls[-1].json})
                self._answer(200, None, {}, raw=b"ok", delay=delay)
            elif path == "/api/chat.postMessage":
                ts = f"1764000000.{len(state.calls):06d}"
                state.posted.append(_message(state.calls[-1].json, ts))
                self._answer(200, {"ok": True, "channel": CHANNEL_ID, "ts": ts}, delay=delay)
            elif path == "/api/chat.update":
                self._answer(200, _update(state.posted, state.calls[-1].json), delay=delay)
            elif path == "/api/conversations.history":
                self._answer(200, _history(state.posted, state.calls[-1].json), delay=delay)
            elif path == "/api/files.getUploadURLExternal":
                file_id = f"F{len(state.calls)}"
                self._answer(
                    200,
                    {"ok": True, "upload_url": f"http://127.0.0.1:{state.port}/upload/{file_id}", "file_id": file_id},
                )
            elif path.startswith("/upload/"):
                self._answer(200, None, {}, raw=b"OK - 1")
            elif path == "/api/files.completeUploadExternal":
                self._answer(200, {"ok": True, "files": [{"id": "F1", "title": "chart"}]})
            else:
                self._answer(404, {"ok": False, "error": "unknown_method"})

        def _answer(
            self,
            status: int,
            payload: dict | None,
            headers: dict[str, str] | None = None,
            raw: bytes = b"",
            delay: float | threading.Event = 0.0,
        ) -> None:
            # The message is already recorded as posted; the client may have given up by the time this answer comes.
            if isinstance(delay, threading.Event):
                delay.wait(120)
            elif delay:
                time.sleep(delay)
            data = raw if payload is None else json.dumps(payload).encode()
            kind = "text/plain" if payload is None else "application/json"
            odd = self.odd
            if odd is not None and odd.reset:
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                self.connection.close()  # with a zero linger: a reset, not an orderly close
                self.close_connection = True
                return
            if odd is not None:
                status, data, kind = odd.status, odd.body, odd.content_type
            try:
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)
            except OSError:  # the client timed out and closed the connection
                pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.port = server.server_address[1]
    # a short poll: shutdown() waits for it at every test's teardown (0.5 s by default)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    return state, server


CHANNEL_ID = "C0RADAR"  # the id of the one channel the stand-in posts in, whatever name it was given


def _update(posted: list[dict[str, Any]], request: dict[str, Any]) -> dict[str, Any]:
    """chat.update: the message of that ts in the channel of that id gets the new text and blocks (Slack's errors for
    an argument missing, a channel named rather than given by id, a ts of no message there, nothing to show)."""
    channel, ts = request.get("channel"), request.get("ts")
    if not channel or not ts:
        return {"ok": False, "error": "invalid_arguments"}
    if channel != CHANNEL_ID:
        return {"ok": False, "error": "channel_not_found"}
    found = [m for m in posted if m.get("ts") == ts and m.get("channel") != "webhook"]
    if not found:
        return {"ok": False, "error": "message_not_found"}
    if not request.get("text") and not request.get("blocks"):
        return {"ok": False, "error": "no_text"}
    blocks = request.get("blocks")
    found[0].update(text=request.get("text", found[0]["text"]), edited=True)
    if blocks is not None:
        found[0]["blocks"] = json.loads(blocks) if isinstance(blocks, str) else blocks
    return {"ok": True, "channel": CHANNEL_ID, "ts": ts, "text": found[0]["text"]}


def _message(request: dict[str, Any], ts: str) -> dict[str, Any]:
    """A posted message as conversations.history returns it; form-encoded JSON fields decoded."""
    message: dict[str, Any] = {"type": "message", "ts": ts, "text": request.get("text", ""), "at": time.time()}
    metadata = request.get("metadata")
    if isinstance(metadata, str):
        metadata = json.loads(metadata)
    if metadata:
        message["metadata"] = metadata
    message["channel"] = request.get("channel")
    return message


def _history(posted: list[dict[str, Any]], request: dict[str, Any]) -> dict[str, Any]:
    """conversations.history: the channel's messages newer than `oldest`, newest first, metadata only when asked."""
    oldest = float(request.get("oldest") or 0)
    with_metadata = str(request.get("include_all_metadata", "")).lower() in ("1", "true")
    messages = [
        {k: v for k, v in m.items() if k not in ("channel", "at") and (with_metadata or k != "metadata")}
        for m in reversed(posted)
        # the fake's ts are not times: `oldest` is compared with when the message arrived
        if m.get("channel") == request.get("channel") and m["at"] > oldest
    ]
    return {"ok": True, "messages": messages, "has_more": False}
