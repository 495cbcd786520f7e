"""A local HTTP server standing in for GitHub's or GitLab's REST API, for radar's httpx client.

It enforces what the real APIs enforce on the calls radar makes: the auth header (GitHub: `Authorization: Bearer`
or `token`, and a User-Agent; GitLab: `PRIVATE-TOKEN` or `Authorization: Bearer`), a JSON body with its required
fields, the allowed states, a status description of at most 140 characters (GitHub), a comment body of at most
65,536 characters (GitHub; GitLab: 1,000,000), known repositories, commits, deployments and requests (404, or
GitHub's 422 for an unknown commit). It keeps what it was sent: statuses, deployment statuses and comments (listed
back page by page, edited in place).

Faults on demand, per route (`status`, `deployment_status`, `pulls`, `list_comments`, `post_comment`,
`edit_comment`, `user`): `fail_next` answers with a given status, headers and body (401, 403, 404, 422, 5xx, 429 with
Retry-After, GitHub's rate limits); `drop_next` applies the request and then resets the connection without an
answer (the client cannot know it was applied); `late_next` applies it and answers after a delay; `fail_after_next`
applies it and answers with a failure (a 5xx from a proxy or the host after the write); `trickle_next` answers 200
without applying it, its body a byte at a time (each read of the client gets something, the answer never ends);
`hold_next` applies it and answers only when the test releases it. A `fail_next` body given as bytes is sent as it
is, as an HTML page (a proxy's, a captive portal's).
"""

from __future__ import annotations

import json
import re
import socket
import struct
import threading
import time
from collections import defaultdict, deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

TOKEN = "ghp_fakeTOKEN0123456789abcdefSECRET"
GITHUB_STATES = {"error", "failure", "pending", "success"}
GITHUB_DEPLOYMENT_STATES = {"error", "failure", "inactive", "in_progress", "queued", "pending", "success"}
GITLAB_STATES = {"pending", "running", "success", "failed", "canceled", "skipped"}
MAX_DESCRIPTION = 140  # GitHub: a status's description
MAX_COMMENT = {"github": 65_536, "gitlab": 1_000_000}
ECHO = "echo the request's headers"  # a body to `fail_next`: a page that quotes the request (a proxy's)

GITHUB_ROUTES = [
    ("GET", re.compile(r"/user"), "user"),
    ("POST", re.compile(r"/repos/(?P<repo>[^/]+/[^/]+)/statuses/(?P<sha>[^/]+)"), "status"),
    ("POST", re.compile(r"/repos/(?P<repo>[^/]+/[^/]+)/deployments/(?P<id>\d+)/statuses"), "deployment_status"),
    ("GET", re.compile(r"/repos/(?P<repo>[^/]+/[^/]+)/commits/(?P<sha>[^/]+)/pulls"), "pulls"),
    ("GET", re.compile(r"/repos/(?P<repo>[^/]+/[^/]+)/issues/(?P<n>\d+)/comments"), "list_comments"),
    ("POST", re.compile(r"/repos/(?P<repo>[^/]+/[^/]+)/issues/(?P<n>\d+)/comments"), "post_comment"),
    ("PATCH", re.compile(r"/repos/(?P<repo>[^/]+/[^/]+)/issues/comments/(?P<id>\d+)"), "edit_comment"),
]
GITLAB_ROUTES = [
    ("GET", re.compile(r"/api/v4/user"), "user"),
    ("POST", re.compile(r"/api/v4/projects/(?P<repo>[^/]+)/statuses/(?P<sha>[^/]+)"), "status"),
    ("GET", re.compile(r"/api/v4/projects/(?P<repo>[^/]+)/repository/commits/(?P<sha>[^/]+)/merge_requests"), "pulls"),
    ("GET", re.compile(r"/api/v4/projects/(?P<repo>[^/]+)/merge_requests/(?P<n>\d+)/notes"), "list_comments"),
    ("POST", re.compile(r"/api/v4/projects/(?P<repo>[^/]+)/merge_requests/(?P<n>\d+)/notes"), "post_comment"),
    (
        "PUT",
        re.compile(r"/api/v4/projects/(?P<repo>[^/]+)/merge_requests/(?P<n>\d+)/notes/(?P<id>\d+)"),
        "edit_comment",
    ),
]


@dataclass
class Call:
    """One request the server received (its route, when it matched one)."""

    method: str
    path: str
    route: str | None
    headers: dict[str, str]
    body: bytes


@dataclass
class FakeHost:
    """The server's state: the repository it knows, what it was sent, and the scripted faults per route."""

    kind: str  # github or gitlab
    repository: str
    commit: str
    reviews: list[int]  # the requests that merged the commit
    deployment: int = 4242
    token: str = TOKEN
    user: int = 77  # the token's user; comments by others can be added to `comments` with their "author"
    port: int = 0
    calls: list[Call] = field(default_factory=list)
    statuses: list[dict[str, Any]] = field(default_factory=list)
    deployment_statuses: list[dict[str, Any]] = field(default_factory=list)
    comments: dict[int, dict[str, Any]] = field(default_factory=dict)  # id → {"review", "body", "author"}
    failures: dict[str, deque] = field(default_factory=lambda: defaultdict(deque))
    drops: dict[str, deque] = field(default_factory=lambda: defaultdict(deque))
    delays: dict[str, deque] = field(default_factory=lambda: defaultdict(deque))
    after: dict[str, deque] = field(default_factory=lambda: defaultdict(deque))
    trickles: dict[str, deque] = field(default_factory=lambda: defaultdict(deque))
    holds: dict[str, deque] = field(default_factory=lambda: defaultdict(deque))
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.port}" + ("/api/v4" if self.kind == "gitlab" else "")

    def fail_next(self, route: str, *answers: tuple[int, dict[str, str], Any]) -> None:
        """Answer the next calls to `route` with these (status, headers, JSON body or ECHO), without applying them."""
        self.failures[route].extend(answers)

    def drop_next(self, route: str, count: int = 1) -> None:
        """Apply the next `count` calls to `route`, then reset each connection without an answer."""
        self.drops[route].extend([True] * count)

    def late_next(self, route: str, delay: float) -> None:
        """Apply the next call to `route`, then answer only after `delay` seconds."""
        self.delays[route].append(delay)

    def hold_next(self, route: str) -> threading.Event:
        """Apply the next call to `route`, then answer only once the returned event is set."""
        release = threading.Event()
        self.holds[route].append(release)
        return release

    def fail_after_next(self, route: str, answer: tuple[int, dict[str, str], Any]) -> None:
        """Apply the next call to `route`, then answer with this (status, headers, JSON body) instead of the result."""
        self.after[route].append(answer)

    def trickle_next(self, route: str, count: int = 1, seconds: float = 8.0) -> None:
        """Answer the next `count` calls to `route` with a body of 100,000 bytes sent a byte per 0.2 s, for `seconds`
        (then the connection is closed)."""
        self.trickles[route].extend([seconds] * count)

    def calls_to(self, route: str) -> list[Call]:
        return [c for c in self.calls if c.route == route]


def start(host: FakeHost) -> ThreadingHTTPServer:
    """Serve `host` on a free loopback port; the caller shuts the server down."""
    routes = GITHUB_ROUTES if host.kind == "github" else GITLAB_ROUTES

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802 - the http.server API
            self._handle()

        do_POST = do_PATCH = do_PUT = do_GET  # noqa: N815

        def _handle(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            parts = urlsplit(self.path)
            found = next(
                ((name, m) for method, pattern, name in routes if method == self.command
                 for m in [pattern.fullmatch(parts.path)] if m),
                (None, None),
            )  # fmt: skip
            route, match = found
            headers = {k.lower(): v for k, v in self.headers.items()}
            with host.lock:
                host.calls.append(Call(self.command, parts.path, route, headers, body))
            if route is None or match is None:
                self._send(404, {"message": "Not Found"})
                return
            if not self._authorised(headers):
                self._send(401, {"message": "Bad credentials" if host.kind == "github" else "401 Unauthorized"})
                return
            if host.trickles[route]:
                self._trickle(host.trickles[route].popleft())
                return
            if host.failures[route]:
                status, extra, payload = host.failures[route].popleft()
                if payload == ECHO:
                    payload = {"message": f"proxy error: {json.dumps(headers)}"}
                self._send(status, payload, extra)
                return
            params = {k: v[0] for k, v in parse_qs(parts.query).items()}
            try:
                data = json.loads(body) if body else {}
            except ValueError:
                self._send(400, {"message": "Problems parsing JSON"})
                return
            if self.command in ("POST", "PATCH", "PUT") and not headers.get("content-type", "").startswith(
                "application/json"
            ):
                self._send(415, {"message": "Unsupported Media Type"})
                return
            with host.lock:
                status, answer = _apply(
                    host, route, {k: unquote(v) for k, v in match.groupdict().items()}, data, params
                )
            if host.drops[route]:
                host.drops[route].popleft()
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                self.connection.close()  # applied, then a reset: no answer
                self.close_connection = True
                return
            if host.delays[route]:
                time.sleep(host.delays[route].popleft())
            if host.holds[route]:
                host.holds[route].popleft().wait(120)
            if host.after[route]:
                self._send(*host.after[route].popleft())
                return
            self._send(status, answer)

        def _trickle(self, seconds: float) -> None:
            self.close_connection = True
            try:
                self.send_response(200)
                self.send_header("Content-Type", "application/json; charset=utf-8")
                self.send_header("Content-Length", "100000")
                self.end_headers()
                self.wfile.write(b"[")
                until = time.monotonic() + seconds
                while time.monotonic() < until:
                    time.sleep(0.2)
                    self.wfile.write(b" ")
                    self.wfile.flush()
            except OSError:  # the client gave up
                pass

        def _authorised(self, headers: dict[str, str]) -> bool:
            if host.kind == "github":
                given = headers.get("authorization", "")
                return given in (f"Bearer {host.token}", f"token {host.token}") and bool(headers.get("user-agent"))
            return headers.get("private-token") == host.token or headers.get("authorization") == f"Bearer {host.token}"

        def _send(self, status: int, payload: Any, extra: dict[str, str] | None = None) -> None:
            raw = isinstance(payload, bytes)
            data = payload if raw else json.dumps(payload).encode() if payload is not None else b""
            try:
                self.send_response(status)
                self.send_header(
                    "Content-Type", "text/html; charset=utf-8" if raw else "application/json; charset=utf-8"
                )
                self.send_header("Content-Length", str(len(data)))
                for key, value in (extra or {}).items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)
            except OSError:  # the client gave up
                pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    host.port = server.server_address[1]
    # a short poll: shutdown() waits for it at every test's teardown (0.5 s by default)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    return server


def _invalid(field_name: str, message: str) -> tuple[int, dict[str, Any]]:
    return 422, {
        "message": "Validation Failed",
        "errors": [{"field": field_name, "code": "invalid", "message": message}],
    }


def _apply(host: FakeHost, route: str, path: dict[str, str], data: Any, params: dict[str, str]) -> tuple[int, Any]:
    """What the API does with a well-authorised request: its status and JSON answer."""
    github = host.kind == "github"
    if route == "user":
        return 200, {"id": host.user, "login" if github else "username": f"radar-bot-{host.user}"}
    if path["repo"] != host.repository:
        return 404, {"message": "Not Found" if github else "404 Project Not Found"}
    if not isinstance(data, dict):
        return 400, {"message": "Problems parsing JSON"}
    if route == "status":
        if path["sha"] != host.commit:
            return (422, {"message": f"No commit found for SHA: {path['sha']}"}) if github else (
                404, {"message": "404 References for commit Not Found"})  # fmt: skip
        states = GITHUB_STATES if github else GITLAB_STATES
        if data.get("state") not in states:
            return _invalid("state", f"state must be one of {sorted(states)}") if github else (
                400, {"error": "state does not have a valid value"})  # fmt: skip
        description = data.get("description")
        if description is not None and not isinstance(description, str):
            return _invalid("description", "not a string")
        if github and description is not None and len(description) > MAX_DESCRIPTION:
            return _invalid("description", "description is too long (maximum is 140 characters)")
        target = data.get("target_url")
        if target is not None and not (isinstance(target, str) and re.fullmatch(r"https?://\S+", target)):
            return _invalid("target_url", "target_url is not a URL")
        host.statuses.append(data)
        return 201, {"id": len(host.statuses), **data}
    if route == "deployment_status":
        if int(path["id"]) != host.deployment:
            return 404, {"message": "Not Found"}
        if data.get("state") not in GITHUB_DEPLOYMENT_STATES:
            return _invalid("state", "state is not included in the list")
        if len(data.get("description") or "") > MAX_DESCRIPTION:
            return _invalid("description", "description is too long (maximum is 140 characters)")
        host.deployment_statuses.append(data)
        return 201, {"id": len(host.deployment_statuses), **data}
    if route == "pulls":
        if path["sha"] != host.commit:
            return (422, {"message": "No commit found for SHA"}) if github else (404, {"message": "404 Not found"})
        if github:
            return 200, [{"number": n, "merged_at": "2026-12-01T00:00:00Z", "state": "closed"} for n in host.reviews]
        return 200, [{"iid": n, "state": "merged"} for n in host.reviews]
    number = int(path.get("n") or 0)
    if route in ("list_comments", "post_comment") and number not in host.reviews:
        return 404, {"message": "Not Found"}
    if route == "list_comments":
        page, per_page = int(params.get("page", "1")), min(100, int(params.get("per_page", "30")))
        mine = [{"id": i, **c} for i, c in sorted(host.comments.items()) if c["review"] == number]
        by = "user" if github else "author"
        return 200, [
            {"id": c["id"], "body": c["body"], by: {"id": c.get("author", host.user)}}
            for c in mine[(page - 1) * per_page : page * per_page]
        ]
    body = data.get("body")
    if not isinstance(body, str) or not body:
        return _invalid("body", "body is missing") if github else (400, {"error": "body is missing"})
    if len(body) > MAX_COMMENT[host.kind]:
        return _invalid("body", "body is too long (maximum is 65536 characters)") if github else (
            400, {"message": {"note": ["is too long (maximum is 1000000 characters)"]}})  # fmt: skip
    if route == "post_comment":
        comment_id = 1000 + len(host.comments) + 1
        host.comments[comment_id] = {"review": number, "body": body, "author": host.user}
        return 201, {"id": comment_id, "body": body}
    comment_id = int(path["id"])
    if comment_id not in host.comments or (not github and host.comments[comment_id]["review"] != number):
        return 404, {"message": "Not Found"}
    if host.comments[comment_id].get("author", host.user) != host.user:  # another user's comment
        return 403, {"message": "Must have admin rights to Repository." if github else "403 Forbidden"}
    host.comments[comment_id]["body"] = body
    return 200, {"id": comment_id, "body": body}
