"""A local HTTP server standing in for PagerDuty's Events API v2 (events and change events), for radar's client.

It enforces the documented contract: a JSON object with a 32-character routing_key; event_action trigger, acknowledge
or resolve; a trigger's payload.summary (at most 1024 characters), payload.source and payload.severity (critical,
error, warning, info); a dedup_key of at most 255 characters, required to acknowledge or resolve; a change event's
payload.summary. A good event is answered 202 {"status": "success", "dedup_key": ...}, a bad one 400 {"status":
"invalid event", "errors": [...]}. It keeps incidents as PagerDuty does: a trigger whose dedup_key has an open
incident adds to it (no second incident), a resolve closes it, a trigger after that opens a new one.

Faults, scripted per path: a 429 (with or without Retry-After), an answer held until the test releases it (the event
taken, the client timed out), answers PagerDuty never gives (a proxy's HTML 502, a reset, an empty body), with or
without the event taken first.
"""

from __future__ import annotations

import json
import socket
import struct
import threading
from collections import defaultdict, deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from .fake_slack import Odd
from .fake_webhook import Mode, send

EVENTS, CHANGES = "/v2/enqueue", "/v2/change/enqueue"
SEVERITIES = ("critical", "error", "warning", "info")
ACTIONS = ("trigger", "acknowledge", "resolve")


@dataclass
class Incident:
    """An incident: its dedup_key, status (triggered, acknowledged, resolved) and the triggers it took."""

    dedup_key: str
    status: str
    triggers: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class FakePagerDuty:
    """The server's state: requests received, incidents (oldest first), change events, scripted answers."""

    port: int = 0
    requests: list[tuple[str, bytes]] = field(default_factory=list)
    incidents: list[Incident] = field(default_factory=list)
    changes: list[dict[str, Any]] = field(default_factory=list)
    script: dict[str, deque] = field(default_factory=lambda: defaultdict(deque))  # (status, headers) or Odd
    held: dict[str, deque] = field(default_factory=lambda: defaultdict(deque))
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def throttle_next(self, path: str, retry_after: str | None = None) -> None:
        """Answer the next request to `path` 429, with Retry-After when given; the event is not taken."""
        self.script[path].append((429, {"Retry-After": retry_after} if retry_after is not None else {}))

    def answer_next(self, path: str, *answers: Odd) -> None:
        """Answer the next requests to `path` with these (an answer PagerDuty never gives), in order."""
        self.script[path].extend(answers)

    def hold_next(self, path: str) -> threading.Event:
        """Take the next event to `path` as usual but hold its answer until the returned event is set."""
        release = threading.Event()
        self.held[path].append(release)
        return release

    def open_incidents(self) -> list[Incident]:
        return [i for i in self.incidents if i.status != "resolved"]

    def calls_to(self, path: str) -> list[dict[str, Any]]:
        """The JSON bodies received at `path` (None for one that was not JSON)."""
        out = []
        for p, body in self.requests:
            if p == path:
                try:
                    out.append(json.loads(body))
                except ValueError:
                    out.append(None)
        return out

    def take(self, path: str, body: Any) -> tuple[int, dict[str, Any]]:
        """PagerDuty's answer to `body` at `path`, applying the event when it is valid."""
        errors = _errors(path, body)
        if errors:
            return 400, {"status": "invalid event", "message": "Event object is invalid", "errors": errors}
        with self.lock:
            if path == CHANGES:
                self.changes.append(body)
                return 202, {"status": "success", "message": "Change event processed"}
            key = body.get("dedup_key") or f"pd-{len(self.incidents) + 1:08d}"
            open_ = [i for i in self.incidents if i.dedup_key == key and i.status != "resolved"]
            action = body["event_action"]
            if action == "trigger":
                incident = open_[0] if open_ else Incident(key, "triggered")
                if not open_:
                    self.incidents.append(incident)
                incident.triggers.append(body)
            elif open_:
                open_[0].status = "resolved" if action == "resolve" else "acknowledged"
            return 202, {"status": "success", "message": "Event processed", "dedup_key": key}


def _errors(path: str, body: Any) -> list[str]:
    if not isinstance(body, dict):
        return ["Event object is not a JSON object"]
    errors = []
    key = body.get("routing_key")
    if not (isinstance(key, str) and len(key) == 32):
        errors.append("'routing_key' must be a 32-character string")
    payload = body.get("payload")
    if path == CHANGES:
        if not (isinstance(payload, dict) and isinstance(payload.get("summary"), str) and payload["summary"]):
            errors.append("'payload.summary' is missing or blank")
        elif len(payload["summary"]) > 1024:
            errors.append("'payload.summary' is longer than 1024 characters")
        return errors
    action = body.get("event_action")
    if action not in ACTIONS:
        errors.append("'event_action' is invalid (must be one of trigger, acknowledge, resolve)")
    dedup = body.get("dedup_key")
    if dedup is not None and not (isinstance(dedup, str) and 0 < len(dedup) <= 255):
        errors.append("'dedup_key' must be a string of at most 255 characters")
    if action in ("acknowledge", "resolve") and dedup is None:
        errors.append("'dedup_key' is required for acknowledge and resolve")
    if action == "trigger":
        if not isinstance(payload, dict):
            return [*errors, "'payload' is missing"]
        for name in ("summary", "source", "severity"):
            if not (isinstance(payload.get(name), str) and payload[name]):
                errors.append(f"'payload.{name}' is missing or blank")
        if isinstance(payload.get("summary"), str) and len(payload["summary"]) > 1024:
            errors.append("'payload.summary' is longer than 1024 characters")
        if payload.get("severity") not in SEVERITIES:
            errors.append("'payload.severity' must be one of critical, error, warning, info")
    return errors


def start() -> tuple[FakePagerDuty, ThreadingHTTPServer]:
    """Start the server on a free loopback port; the caller shuts it down."""
    state = FakePagerDuty()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:  # noqa: N802 - the http.server API
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            path = self.path.split("?")[0]
            state.requests.append((path, raw))
            if path not in (EVENTS, CHANGES):
                self._answer(404, b'{"status": "not found"}')
                return
            scripted = state.script[path].popleft() if state.script[path] else None
            if isinstance(scripted, tuple):
                status, headers = scripted
                self._answer(
                    status,
                    json.dumps(
                        {
                            "status": "throttle event",
                            "message": "Requests for this service are arriving too quickly. Please retry later.",
                        }
                    ).encode(),
                    headers,
                )
                return
            if scripted is not None and not scripted.taken:
                self._odd(scripted)
                return
            if self.headers.get("Content-Type", "").split(";")[0] != "application/json":
                self._answer(400, json.dumps({"status": "invalid event", "errors": ["Content-Type"]}).encode())
                return
            try:
                body = json.loads(raw)
            except ValueError:
                body = None
            status, answer = state.take(path, body)
            if state.held[path]:
                state.held[path].popleft().wait(120)
            if scripted is not None:
                self._odd(scripted)
                return
            self._answer(status, json.dumps(answer).encode())

        def _odd(self, odd: Odd) -> None:
            if odd.reset:
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                self.connection.close()
                self.close_connection = True
                return
            self._answer(odd.status, odd.body, content_type=odd.content_type)

        def _answer(
            self, status: int, data: bytes, headers: dict | None = None, content_type: str = "application/json"
        ) -> None:
            send(self, Mode(status=status, body=data, content_type=content_type, headers=headers or {}))

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.port = server.server_address[1]
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    return state, server
