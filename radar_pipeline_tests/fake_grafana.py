"""A local HTTP server standing in for Grafana's annotations API (POST and GET /api/annotations).

It holds Grafana's contract: a service account token as `Authorization: Bearer` (401 otherwise, Grafana's JSON
message), a JSON body (415 otherwise) with a non-empty `text`, a `time` in epoch milliseconds, `tags` a list of
strings, optional `dashboardUID` (string) and `panelId` (number) (400 "bad request data" otherwise), answered
200 {"message": "Annotation added", "id": N}. A GET filters the stored annotations by every `tags` value given
(matchAny=false, Grafana's default; matchAny=true: any of them) and by `from`/`to` (epoch ms: an annotation from
`time` to `timeEnd` overlapping them), newest first, at most `limit` (100 by default).

`answer_next` scripts the next answers as fake_webhook's does (a 429 with Retry-After, a 500, an HTML page, a late
answer after the annotation was added, a reset). With `compress`, every answer is gzip-compressed whatever the
request's Accept-Encoding (a compressing proxy in front of Grafana, or Grafana's enable_gzip)."""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from .fake_webhook import Call, Mode, send

TOKEN = "glsa_s3rv1ce-acc0unt-t0ken_0123456789"
MIN_MS = 10**11  # 1973 in milliseconds, or 5138 in seconds: a time below it was given in seconds


@dataclass
class FakeGrafana:
    """The server's state: requests received, annotations stored, the scripted answers."""

    calls: list[Call] = field(default_factory=list)
    annotations: list[dict[str, Any]] = field(default_factory=list)
    script: deque = field(default_factory=deque)
    port: int = 0
    compress: bool = False

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def answer_next(self, *modes: Mode) -> None:
        """Answer the next requests with these, in order."""
        self.script.extend(modes)

    def hold_next(self) -> threading.Event:
        """Take the next request as usual but hold its answer until the returned event is set."""
        release = threading.Event()
        self.script.append(Mode(usual=True, hold=release))
        return release


def _message(text: str) -> bytes:
    return json.dumps({"message": text}).encode()


def annotation_errors(body: Any) -> str | None:
    """Why Grafana would refuse this annotation (None when it would add it)."""
    if not isinstance(body, dict):
        return "bad request data"
    if not isinstance(body.get("text"), str) or not body["text"].strip():
        return "bad request data: text is required"
    moment = body.get("time")
    if not isinstance(moment, int) or isinstance(moment, bool) or moment < MIN_MS:
        return "bad request data: time must be epoch milliseconds"
    if "timeEnd" in body and (not isinstance(body["timeEnd"], int) or body["timeEnd"] < moment):
        return "bad request data: timeEnd"
    tags = body.get("tags", [])
    if not isinstance(tags, list) or not all(isinstance(t, str) and t for t in tags):
        return "bad request data: tags must be a list of strings"
    if "dashboardUID" in body and not isinstance(body["dashboardUID"], str):
        return "bad request data: dashboardUID"
    if "panelId" in body and (not isinstance(body["panelId"], int) or isinstance(body["panelId"], bool)):
        return "bad request data: panelId"
    return None


def start() -> tuple[FakeGrafana, ThreadingHTTPServer]:
    """Start the server on a free loopback port; the caller shuts it down."""
    state = FakeGrafana()
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802 - the http.server API
            self._handle("GET")

        def do_POST(self) -> None:  # noqa: N802
            self._handle("POST")

        def _handle(self, method: str) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            split = urlsplit(self.path)
            headers = {k.lower(): v for k, v in self.headers.items()}
            call = Call(method, split.path, parse_qs(split.query), headers, body)
            state.calls.append(call)
            mode = state.script.popleft() if state.script else None
            if mode is not None and not (mode.taken or mode.usual):
                self._send(mode)
                return
            status, data = self._usual(call)
            self._send(
                Mode(status=status, body=data, delay=mode.delay if mode else 0.0, hold=mode.hold if mode else None)
            )

        def _usual(self, call: Call) -> tuple[int, bytes]:
            if call.path != "/api/annotations":
                return 404, _message("Not found")
            if call.headers.get("authorization") != f"Bearer {TOKEN}":
                return 401, _message("Unauthorized")
            if call.method == "GET":
                return 200, json.dumps(_find(state.annotations, call.query)).encode()
            if not call.headers.get("content-type", "").startswith("application/json"):
                return 415, _message("Unsupported Media Type")
            try:
                request = json.loads(call.body)
            except ValueError:
                return 400, _message("bad request data")
            error = annotation_errors(request)
            if error:
                return 400, _message(error)
            with lock:
                number = len(state.annotations) + 1
                state.annotations.append(
                    {
                        "id": number,
                        "time": request["time"],
                        "timeEnd": request.get("timeEnd", request["time"]),
                        "tags": request.get("tags", []),
                        "text": request["text"],
                        "dashboardUID": request.get("dashboardUID", ""),
                        "panelId": request.get("panelId", 0),
                        "created": int(time.time() * 1000),
                    }
                )
            return 200, json.dumps({"message": "Annotation added", "id": number}).encode()

        def _send(self, mode: Mode) -> None:
            send(self, replace(mode, gzip=mode.gzip or state.compress))

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.port = server.server_address[1]
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    return state, server


def _find(annotations: list[dict[str, Any]], query: dict[str, list[str]]) -> list[dict[str, Any]]:
    """GET /api/annotations: filtered by tags (all of them unless matchAny=true) and by from/to, newest first."""
    tags = set(query.get("tags", []))
    match_any = query.get("matchAny", ["false"])[0] == "true"
    start = int(query["from"][0]) if "from" in query else None
    end = int(query["to"][0]) if "to" in query else None
    limit = int(query.get("limit", ["100"])[0])
    found = []
    for a in sorted(annotations, key=lambda a: (a["time"], a["id"]), reverse=True):
        have = set(a["tags"])
        if tags and not (have & tags if match_any else tags <= have):
            continue
        if (end is not None and a["time"] > end) or (start is not None and a["timeEnd"] < start):
            continue
        found.append(a)
    return found[:limit]
