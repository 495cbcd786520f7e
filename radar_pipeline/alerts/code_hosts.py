"""GitHub and GitLab through their REST APIs (httpx): commit statuses, GitHub deployment statuses, and a comment on
the pull or merge request that merged a commit, found again by a hidden marker.

Every wait of a request (connect, send, read) is bounded by the client's timeout, and a whole request, however its host
trickles the answer, by REQUEST_BOUND seconds (an answer over MAX_ANSWER bytes is not read); a client is made for one
attempt, which starts no request after ATTEMPT_BUDGET seconds (well under the outbox's 15-minute lease: what is left
waits for the next attempt). A refused connection (nothing was
sent), a 5xx to an idempotent request, and a rate limit (429, or GitHub's 403 with Retry-After, x-ratelimit-remaining
0 or a "secondary rate limit" message) whose wait is at most RETRY_AFTER_CAP seconds are retried here, up to RETRIES
times; a longer wait is reported (HostError.retry_after) for the outbox to wait out between runs. A timeout, a
connection lost after the request went out, or a 5xx is retried here only for idempotent requests (a status: the same
state for the same context again); for a comment it is reported with `unknown` set (the host may have applied it),
and the next attempt looks for the comment's marker first. Any other answer is final: 401 (the token), 403 (its
permissions), 404 (repository, commit or request unknown, or unseen by the token), 422 (fields refused). No error
text shows the token.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx

from radar_pipeline.alerts.channel import ChannelError, retry_after
from radar_pipeline.config.masking import hidden, quoted

RETRIES = 2
RETRY_AFTER_CAP = 30.0  # seconds: a longer wait is waited out between runs, not inside one
SECONDARY_WAIT = 60.0  # GitHub: a secondary rate limit without a header asks for at least a minute
REQUEST_BOUND = 60.0  # seconds: a whole request, connect to the answer's last byte
ATTEMPT_BUDGET = 300.0  # seconds: an attempt starts no request after this
MAX_ANSWER = 32 * 2**20  # bytes of an answer read (a page of 100 comments of GitHub's 65,536 characters fits)
SHOWN = 200  # characters of a host's message quoted in an error
COMMENT_PAGES = 10  # pages of 100 comments read when looking for our marker
# The deploy's state as each host's status (docs/ci.md, "Commit statuses"): inconclusive is not a success on either,
# so a required "radar" check does not pass on what radar could not clear.
GITHUB_STATE = {"pass": "success", "fail": "failure", "inconclusive": "error", "pending": "pending"}
GITLAB_STATE = {"pass": "success", "fail": "failed", "inconclusive": "failed", "pending": "pending"}
CONTEXT = "radar"  # the status's context (GitHub) or name (GitLab)
NAMES = {"github": "GitHub", "gitlab": "GitLab"}


class HostError(ChannelError):
    """The code host did not take the request, or may have (ChannelError's `retryable`, `unknown`, `retry_after`);
    `status`: its HTTP status, when it answered."""

    def __init__(
        self,
        message: str,
        retryable: bool,
        unknown: bool = False,
        retry_after: float | None = None,
        status: int | None = None,
    ) -> None:
        super().__init__(message, retryable, unknown, retry_after)
        self.status = status


@dataclass(frozen=True)
class Review:
    """A pull request (GitHub) or merge request (GitLab) by its number (iid on GitLab)."""

    number: int


class HostClient:
    """One code host's REST API with a token (GitHub: Bearer; GitLab: PRIVATE-TOKEN), at `api_url`."""

    def __init__(self, kind: str, api_url: str, token: str, timeout: float = 10.0) -> None:
        if kind not in NAMES:
            raise ValueError(f"unknown code host {kind!r}")
        if not 0 < timeout <= 300:
            raise ValueError(f"the code host timeout must be above 0 and at most 300 seconds, not {timeout}")
        self.kind = kind
        self.name = NAMES[kind]
        self.api_url = api_url.rstrip("/")
        self._token = token
        headers = {"User-Agent": "radar-pipeline"}
        if kind == "github":
            headers |= {
                "Authorization": f"Bearer {token}",
                "Accept": "application/vnd.github+json",
                "X-GitHub-Api-Version": "2022-11-28",
            }
        else:
            headers["PRIVATE-TOKEN"] = token
        self._headers, self._timeout = headers, timeout
        self._http = self._client()
        self._bound = REQUEST_BOUND
        self._budget = ATTEMPT_BUDGET
        self._spent_at = time.monotonic() + ATTEMPT_BUDGET
        self._user: object = _UNKNOWN

    def _client(self) -> httpx.Client:
        return httpx.Client(headers=self._headers, timeout=self._timeout, follow_redirects=False)

    def close(self) -> None:
        """Close the connections."""
        self._http.close()

    # The operations radar needs, each one request (or one per page).

    def set_status(self, repository: str, sha: str, state: str, description: str, link: str | None) -> None:
        """The deploy's state (pass, fail, inconclusive, pending) as the commit's "radar" status."""
        if self.kind == "github":
            body = {"state": GITHUB_STATE[state], "description": description, "context": CONTEXT}
            self.call("POST", f"/repos/{repository}/statuses/{sha}", body | ({"target_url": link} if link else {}))
        else:
            body = {"state": GITLAB_STATE[state], "description": description, "name": CONTEXT}
            self.call(
                "POST",
                f"/projects/{_project(repository)}/statuses/{sha}",
                body | ({"target_url": link} if link else {}),
            )

    def set_deployment_status(
        self, repository: str, deployment_id: int, state: str, description: str, link: str | None
    ) -> None:
        """GitHub only: the deploy's state as a status of the GitHub deployment it came from."""
        body = {"state": GITHUB_STATE[state], "description": description} | ({"log_url": link} if link else {})
        self.call("POST", f"/repos/{repository}/deployments/{deployment_id}/statuses", body)

    def reviews(self, repository: str, sha: str) -> list[Review]:
        """The pull or merge requests that merged the commit (those merged; else the open ones that hold it)."""
        if self.kind == "github":
            found = self._list(self.call("GET", f"/repos/{repository}/commits/{sha}/pulls", params={"per_page": 100}))
            merged = [r for r in found if r.get("merged_at")]
            return [Review(int(r["number"])) for r in (merged or found) if _number(r.get("number"))]
        found = self._list(
            self.call("GET", f"/projects/{_project(repository)}/repository/commits/{sha}/merge_requests")
        )
        merged = [r for r in found if r.get("state") == "merged"]
        return [Review(int(r["iid"])) for r in (merged or found) if _number(r.get("iid"))]

    def find_comment(self, repository: str, review: Review, marker: str) -> int | None:
        """The id of the request's comment that holds `marker` (an earlier attempt's), or None; only the token's
        user's comments count when the host names that user (someone quoting our marker is not us)."""
        me = self._user_id()
        for page in range(1, COMMENT_PAGES + 1):
            comments = self._list(
                self.call("GET", self._comments(repository, review), params={"per_page": 100, "page": page})
            )
            for comment in comments:
                author = comment.get("user" if self.kind == "github" else "author")
                if me is not None and not (isinstance(author, dict) and author.get("id") == me):
                    continue
                if isinstance(comment.get("body"), str) and marker in comment["body"] and _number(comment.get("id")):
                    return int(comment["id"])
            if len(comments) < 100:
                return None
        return None

    def _user_id(self) -> int | None:
        """The token's user's id (GET /user, once per client); None when the host refuses to say (a GitHub App's
        installation token cannot read /user)."""
        if self._user is _UNKNOWN:
            try:
                found = self.call("GET", "/user")
            except HostError as exc:
                if exc.retryable:
                    raise
                found = None
            self._user = int(found["id"]) if isinstance(found, dict) and _number(found.get("id")) else None
        return self._user  # type: ignore[return-value]

    def post_comment(self, repository: str, review: Review, body: str) -> int:
        """Post a comment on the request; its id. Not idempotent: a lost answer raises HostError with `unknown`."""
        answer = self.call("POST", self._comments(repository, review), {"body": body}, idempotent=False)
        found = answer.get("id") if isinstance(answer, dict) else None
        if not _number(found):
            raise HostError(
                f"{self.name} answered the comment without its id: it may have been posted", True, unknown=True
            )
        return int(found)  # type: ignore[arg-type]

    def edit_comment(self, repository: str, review: Review, comment_id: int, body: str) -> None:
        """Replace the text of our comment (idempotent)."""
        if self.kind == "github":
            self.call("PATCH", f"/repos/{repository}/issues/comments/{comment_id}", {"body": body})
        else:
            self.call("PUT", f"{self._comments(repository, review)}/{comment_id}", {"body": body})

    def _comments(self, repository: str, review: Review) -> str:
        if self.kind == "github":
            return f"/repos/{repository}/issues/{review.number}/comments"
        return f"/projects/{_project(repository)}/merge_requests/{review.number}/notes"

    # The transport: bounded, retried where safe, every answer judged.

    def call(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        params: dict[str, Any] | None = None,
        idempotent: bool = True,
    ) -> Any:
        """One API request: the host's JSON answer (None for an empty success), retried as the module says; raises
        HostError, its text without the token."""
        for attempt in range(RETRIES + 1):
            if time.monotonic() >= self._spent_at:
                raise HostError(
                    f"this attempt's time budget for {self.name} ({self._budget:g} s) is spent: left for the next one",
                    True,
                )
            try:
                response = self._send(method, self.api_url + path, body, params)
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:  # nothing was sent
                error = HostError(f"{self.name} could not be reached: {self._shown(_first_line(exc))}", True)
            except httpx.TransportError as exc:
                error = HostError(
                    f"no answer from {self.name} (it may have been applied): {self._shown(_first_line(exc))}",
                    True,
                    unknown=True,
                )
                if not idempotent:
                    raise error from None
            else:
                judged = self._judge(method, response, idempotent)
                if not isinstance(judged, HostError):
                    return judged
                error = judged
                if not error.retryable or (error.unknown and not idempotent):
                    raise error
            pause = error.retry_after if error.retry_after is not None else 0.5 * 2**attempt
            if attempt == RETRIES or pause > RETRY_AFTER_CAP or time.monotonic() + pause >= self._spent_at:
                raise error
            time.sleep(pause)
        raise AssertionError("unreachable")

    def _send(
        self, method: str, url: str, body: dict[str, Any] | None, params: dict[str, Any] | None
    ) -> httpx.Response:
        """One request, its answer read whole within REQUEST_BOUND seconds (httpx bounds each wait, not the whole),
        in a thread of its own: a request past its bound is left to its client, closed, and a new client made."""
        http = self._http
        done: list[httpx.Response | Exception] = []

        def run() -> None:
            try:
                with http.stream(method, url, json=body, params=params) as response:
                    data = bytearray()
                    for chunk in response.iter_bytes():
                        data += chunk
                        if len(data) > MAX_ANSWER:
                            raise httpx.ReadError(f"an answer over {MAX_ANSWER} bytes, not read")
                    headers = {k: v for k, v in response.headers.items() if k != "content-encoding"}
                    done.append(httpx.Response(response.status_code, headers=headers, content=bytes(data)))
            except Exception as exc:  # noqa: BLE001 - handed to the caller's thread
                done.append(exc)

        worker = threading.Thread(target=run, name="radar-code-host-request", daemon=True)
        worker.start()
        worker.join(self._bound)
        if not done:
            self._http = self._client()
            http.close()  # the worker's reads fail once its socket is closed
            raise httpx.ReadTimeout(f"no whole answer within {self._bound:g} s")
        if isinstance(done[0], Exception):
            raise done[0]
        return done[0]

    def _judge(self, method: str, response: httpx.Response, idempotent: bool = True) -> Any:
        """The answer's JSON when it is a success, else the HostError it makes."""
        status = response.status_code
        try:
            data = response.json() if response.content else None
        except ValueError:
            data = _NOT_JSON
        if 200 <= status < 300:
            if data is _NOT_JSON:
                return HostError(
                    f"an answer that is not {self.name}'s (HTTP {status}: {self._quote(response.text)}); it may have "
                    "been applied",
                    True,
                    unknown=True,
                    status=status,
                )
            return data
        message = self._message(data, response.text)
        wait = _wait(response.headers, message)
        if status == 429 or (status == 403 and wait is not None):
            return HostError(
                f"{self.name} rate-limited {method} (HTTP {status}, wait {wait or 1:.0f} s): {message}",
                True,
                retry_after=wait or 1.0,
                status=status,
            )
        if status >= 500:
            doubt = "" if idempotent else " (it may have been applied)"
            return HostError(
                f"{self.name} failed (HTTP {status}){doubt}: {message}",
                True,
                unknown=not idempotent,
                retry_after=wait,
                status=status,
            )
        reasons = {
            401: "the token was refused",
            403: "the token may not do this",
            404: "not found (the repository, commit or request does not exist, or the token cannot see it)",
            422: "the fields were refused",
        }
        if 300 <= status < 400:
            reason = "a redirect, not followed (the token goes only to the configured API URL)"
        else:
            reason = reasons.get(status, "refused")
        return HostError(f"{self.name}: {status} {reason}: {message}", False, status=status)

    def _message(self, data: Any, text: str) -> str:
        if data is _NOT_JSON:
            return self._quote(text)
        found = data.get("message", data.get("error")) if isinstance(data, dict) else data
        if isinstance(data, dict) and data.get("errors"):
            found = f"{found} {json.dumps(data['errors'], default=str)}"
        return self._quote(found if isinstance(found, str) else json.dumps(found, default=str))

    def _list(self, data: Any) -> list[dict[str, Any]]:
        if not isinstance(data, list):
            raise HostError(f"an answer that is not a list: {self._quote(str(data))}", True)
        return [item for item in data if isinstance(item, dict)]

    def _quote(self, text: str) -> str:
        return quoted(text, [self._token], SHOWN)

    def _shown(self, text: str) -> str:
        """`text` without the token in any form (masking.hidden), printable."""
        return hidden(text, [self._token])


_NOT_JSON = object()
_UNKNOWN = object()


def _first_line(exc: Exception) -> str:
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _wait(headers: httpx.Headers, message: str) -> float | None:
    """The seconds a rate-limited answer asks to wait: Retry-After (seconds or a date), else the reset of an
    exhausted limit (x-ratelimit-reset, GitLab's RateLimit-Reset: epoch seconds, at least 1), else a minute for
    GitHub's secondary limit named only in its message; None when it is not a rate limit."""
    if "retry-after" in headers:
        return retry_after(headers["retry-after"], SECONDARY_WAIT)
    if headers.get("x-ratelimit-remaining", headers.get("ratelimit-remaining")) == "0":
        reset = headers.get("x-ratelimit-reset", headers.get("ratelimit-reset"))
        return max(1.0, retry_after(reset, SECONDARY_WAIT, epoch=True))
    return SECONDARY_WAIT if "rate limit" in message.lower() else None


def _project(repository: str) -> str:
    """A GitLab project's id for a URL path: its number, or its path with / encoded."""
    return quote(repository, safe="")


def _number(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0
