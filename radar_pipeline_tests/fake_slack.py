"""A local HTTP server standing in for Slack's Web API and an incoming webhook, for the real slack-sdk client.

It answers chat.postMessage, the three steps of files_upload_v2 (files.getUploadURLExternal, the upload itself,
files.completeUploadExternal) and a webhook URL, records every request, and can be told to answer the next calls to
a method with given statuses (a 429 with Retry-After, a 500) before answering normally again.
"""

from __future__ import annotations

import json
import threading
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


@dataclass
class FakeSlack:
    """The server's state: calls received and scripted failures per path."""

    calls: list[Call] = field(default_factory=list)
    script: dict[str, deque] = field(default_factory=lambda: defaultdict(deque))
    port: int = 0

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
            if state.script[path]:
                status, headers = state.script[path].popleft()
                self._answer(status, {"ok": False, "error": "scripted"}, headers)
                return
            if path == "/api/chat.postMessage" or path.startswith("/hook/"):
                broken = limit_errors(state.calls[-1].json)
                if broken:  # as Slack answers: 200 with ok false from the Web API, 400 from a webhook
                    status = 400 if path.startswith("/hook/") else 200
                    self._answer(status, {"ok": False, "error": "invalid_blocks", "errors": broken})
                    return
            if path.startswith("/hook/"):
                self._answer(200, None, {}, raw=b"ok")
            elif path == "/api/chat.postMessage":
                self._answer(200, {"ok": True, "channel": "C0RADAR", "ts": f"1764000000.{len(state.calls):06d}"})
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
            self, status: int, payload: dict | None, headers: dict[str, str] | None = None, raw: bytes = b""
        ) -> None:
            data = raw if payload is None else json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "text/plain" if payload is None else "application/json")
            self.send_header("Content-Length", str(len(data)))
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.port = server.server_address[1]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return state, server
