"""The receiver's HTTP application (Starlette): deploy events posted by each enabled source, the gate's answer for
CI, liveness and readiness.

    POST /v1/deploys/<source>       a deploy event: 201 recorded, 200 already recorded (unchanged, or a replayed
                                    delivery of it), 202 ignored, 4xx refused with a one-line reason (nothing
                                    stored), 503 the warehouse is away
    POST /v1/labels                 a label (a token with the label scope): 201 stored, 200 stored before under
                                    its idempotency key, 400 naming the field, 409 a key used for another label
    POST /v1/slack/interactions     an alert's label button, signed by Slack: 200 within SLACK_DEADLINE_S, the
                                    label stored once however often Slack sends it; 401 a bad or stale signature
    POST /v1/comments/<host>        a pull/merge request comment's `/radar label …` line (github, gitlab: the
                                    source's secret): 201 stored, 200 a redelivery, 202 not a command, 400
    GET  /v1/deploys/<id>/gate      the gate's answer as JSON (`radar gate --format json`), its state as the status:
                                    200 pass, 409 fail, 422 inconclusive (200 with ?inconclusive_ok=1), 202 pending;
                                    ?wait=60s waits while it is pending (at most MAX_WAIT_S)
    GET  /healthz                   liveness: the process answers
    GET  /readyz                    readiness: the warehouse answers, with radar's schema, within READY_TIMEOUT_S

A source's check and reading of a body run in a worker thread (the event loop keeps answering), and every warehouse
call runs in one under a deadline (DB_DEADLINE_S): its own bounds (connect, statement, pool) end it first, and a
warehouse gone silent is answered 503 at the deadline while the thread is left to its TCP timeout. A deploy's
transaction is bounded by the same deadline (store): it never commits after its request was answered 503, except
when the warehouse goes silent during the COMMIT itself; a redelivery of a deploy stored then is answered 200.
Answers tell a caller only what it sent, never stored values it may not read. Nothing here prints or returns a secret.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, TypeVar

import anyio.to_thread
import sqlalchemy as sa
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from radar_pipeline.config import printable, scrub_secret, warehouse_url
from radar_pipeline.receiver import labels as label_requests
from radar_pipeline.receiver.sources import ID_PREFIXES
from radar_pipeline.receiver.sources.base import Parsed, Refused
from radar_pipeline.receiver.sources.common import bearer, same_token
from radar_pipeline.steps import gate as gate_step
from radar_pipeline.steps import labelling
from radar_pipeline.steps.labelling import slack_label
from radar_pipeline.warehouse import deploys, labels

log = logging.getLogger("radar.receiver")
T = TypeVar("T")

CONNECT_TIMEOUT_S = 3
STATEMENT_TIMEOUT_MS = 5_000
POOL_TIMEOUT_S = 3.0  # a request waits this long for a connection when all are busy: then 503
DB_DEADLINE_S = 8.0  # the most a request waits on the warehouse in all (connect 3 s + a statement 5 s)
COMMIT_S = 1.0  # a deploy's COMMIT is sent no later than this before DB_DEADLINE_S: it is answered by then
READY_TIMEOUT_S = 3.0
BODY_TIMEOUT_S = 5.0  # the whole body must arrive within this (a client that stops sending holds nothing)
MAX_WAIT_S = 60.0  # the gate's long poll: proxies commonly end idle requests after 60 s
SLACK_DEADLINE_S = 2.0  # Slack shows an error when an interaction is not answered within 3 s
SCOPE_WORDS = {"gate": "read the gate", "label": "label verdicts"}  # a token's scopes, in a 403's words
POLL_S = 2.0
MAX_DELIVERY_ID = 200
DELIVERY_ID = re.compile(rf"[\x21-\x7e]{{1,{MAX_DELIVERY_ID}}}")
GATE_STATUS = {0: 200, 1: 409, 3: 422, 4: 202}
MAX_HEADERS_BYTES = 16 * 1024  # the request line and headers: more is refused (400) before the app sees it
# uvicorn's settings for the receiver. uvicorn (0.54) has no time limit for a request's headers: a client sending them
# slowly holds a slot until limit_concurrency is reached, so an ingress in front bounds header time (docs/receiver.md).
SERVER: dict[str, Any] = {
    "http": "h11",  # the protocol whose header size limit is configurable
    "h11_max_incomplete_event_size": MAX_HEADERS_BYTES,
    "timeout_keep_alive": 5,  # an idle kept-alive connection is closed after 5 s
    "server_header": False,
    "limit_concurrency": 512,  # beyond it: 503 at once, not a queue that grows
    "timeout_graceful_shutdown": 15,
}


@dataclass(frozen=True)
class Receiver:
    """What the application serves: the warehouse, the enabled sources with their secrets, the CI tokens with their
    scopes, the body limit, the targets configured here, and the analysis times the gate tells due times by."""

    url: str
    sources: dict[str, tuple[ModuleType, list[str]]]
    tokens: list[tuple[str, frozenset[str]]]
    max_body_bytes: int
    configured_targets: tuple[str, ...] = ()
    times: Any = None  # RadarSettings: window_seconds, scrape_interval_seconds
    slack_signing_secret: str | None = field(default=None, repr=False)  # the Slack app's: its label buttons
    engine: sa.Engine = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "engine", receiver_engine(self.url))


def receiver_engine(url: str) -> sa.Engine:
    """A pooled engine whose every wait is bounded: connecting, each statement, and waiting for a free connection;
    a peer gone silent is found by TCP."""
    return sa.create_engine(
        warehouse_url(url),
        pool_size=8,
        max_overflow=4,
        pool_timeout=POOL_TIMEOUT_S,
        pool_pre_ping=True,
        connect_args={
            "connect_timeout": CONNECT_TIMEOUT_S,
            "options": f"-c statement_timeout={STATEMENT_TIMEOUT_MS} -c lock_timeout={STATEMENT_TIMEOUT_MS}",
            "tcp_user_timeout": 15_000,
            "keepalives": 1,
            "keepalives_idle": 10,
            "keepalives_interval": 5,
            "keepalives_count": 2,
        },
    )


class Replay(Exception):
    """A delivery id seen before."""


def store(receiver: Receiver, source: str, parsed: Parsed, until: float) -> deploys.Recorded:
    """Record the parsed event as `radar deploy` would, and its delivery id in the same transaction; a delivery seen
    before is the stored deploy again when that deploy is the event's and says the same (a redelivery after an
    answer that was lost), else Replay; deploys.DeployError when the event is refused.

    The transaction ends by `until` (time.monotonic()): statement_timeout, lock_timeout and
    idle_in_transaction_session_timeout are set once, at its start, to the time left then (each statement, lock wait
    and idle spell is bounded by that, not by what is left when it begins: one begun late may run past `until`), and
    the COMMIT is not sent after `until` (Refused 503, rolled back), so a request answered 503 at its deadline has
    stored nothing."""
    event = parsed.event
    assert event is not None
    with receiver.engine.begin() as conn:
        _bound(conn, until)
        if parsed.delivery_id is not None and (seen := _delivery(conn, source, parsed.delivery_id)) is not None:
            return _redelivered(conn, event, parsed.delivery_id, seen)
        recorded = deploys.record_in(conn, event, receiver.configured_targets)
        if parsed.delivery_id is not None:
            fresh = conn.execute(
                sa.text(
                    "INSERT INTO radar.webhook_delivery (source, delivery_id, deploy_id) VALUES (:s, :d, :id) "
                    "ON CONFLICT DO NOTHING RETURNING 1"
                ),
                {"s": source, "d": parsed.delivery_id, "id": event.deploy_id},
            ).scalar()
            seen = _delivery(conn, source, parsed.delivery_id) if fresh is None else None
            if seen is not None:  # the same delivery, received at the same moment by another request
                if recorded.inserted:
                    raise Replay(f"delivery {parsed.delivery_id!r} was received just now: a replay")
                recorded = _redelivered(conn, event, parsed.delivery_id, seen)
        _left_ms(until)
        return recorded


def _bound(conn: sa.Connection, until: float) -> None:
    """Bound the transaction by `until`: statement_timeout, lock_timeout and idle_in_transaction_session_timeout set
    to the time left now (Refused 503 when none is)."""
    conn.execute(
        sa.text(
            "SELECT set_config('statement_timeout', :ms, true), set_config('lock_timeout', :ms, true), "
            "set_config('idle_in_transaction_session_timeout', :ms, true)"
        ),
        {"ms": str(_left_ms(until))},
    )


def store_label(receiver: Receiver, label: labels.Label, until: float) -> labels.Stored:
    """Store a label as `radar label` would (steps.labelling.store_label: with what it does), once per idempotency
    key, in a transaction bounded as store's is (its COMMIT not sent after `until`); LabelError when a field is
    wrong (nothing stored)."""
    with receiver.engine.begin() as conn:
        _bound(conn, until)
        stored = labelling.store_label(conn, label)
        _left_ms(until)
        return stored


def _left_ms(until: float) -> int:
    """Milliseconds left before `until`; Refused(503) when none are (the transaction is rolled back)."""
    left = int((until - time.monotonic()) * 1000)
    if left <= 0:
        raise Refused(503, f"the warehouse did not answer within {DB_DEADLINE_S:.0f} s")
    return left


def _delivery(conn: sa.Connection, source: str, delivery_id: str) -> str | None:
    """The deploy id of a delivery seen before, or None."""
    return conn.execute(
        sa.text("SELECT deploy_id FROM radar.webhook_delivery WHERE source = :s AND delivery_id = :d"),
        {"s": source, "d": delivery_id},
    ).scalar()


def _redelivered(conn: sa.Connection, event: deploys.DeployEvent, delivery_id: str, deploy_id: str) -> deploys.Recorded:
    """A delivery seen before: its deploy, unchanged, when it is this event's and says the same; else Replay (when
    it was received is not told: a stored value)."""
    stored = deploys.get(conn, deploy_id) if deploy_id == event.deploy_id else None
    if stored is None or deploys.differing(event, stored):
        raise Replay(f"delivery {delivery_id!r} was received before with another deploy")
    return deploys.Recorded(stored, inserted=False)


def ready(receiver: Receiver) -> None:
    """The warehouse answers, with this receiver's table (sql/0019)."""
    with receiver.engine.connect() as conn:
        conn.execute(sa.text("SELECT 1 FROM radar.webhook_delivery LIMIT 1"))


def make_app(receiver: Receiver) -> Starlette:
    """The Starlette application serving `receiver`."""

    async def post_deploy(request: Request) -> Response:
        name = request.path_params["source"]
        try:
            if name not in receiver.sources:  # which ones are enabled is not told: callers may not read it
                raise Refused(404, f"no source {name!r} here")
            module, secrets = receiver.sources[name]
            body = await _body(request, receiver.max_body_bytes)
            params = dict(request.query_params)
            headers = {k.lower(): v for k, v in request.headers.items()}
            tokens = receiver.tokens if module.NAME == "generic" else []
            # off the event loop: an HMAC over the body and reading a large JSON body take CPU time that health
            # checks and other requests should not wait behind
            parsed = await anyio.to_thread.run_sync(_read, module, headers, body, secrets, tokens, params)
            if parsed.delivery_id is not None and not DELIVERY_ID.fullmatch(parsed.delivery_id):
                raise Refused(400, f"the delivery id is not 1-{MAX_DELIVERY_ID} printable ASCII characters")
            if parsed.event is None:
                return _line(202, f"ignored: {parsed.ignored or 'not a deploy'}")
            _owned(parsed.event.deploy_id, name)
            until = time.monotonic() + DB_DEADLINE_S - COMMIT_S
            recorded = await _warehouse(store, receiver, name, parsed, until)
        except Refused as exc:
            return _line(exc.status, exc.reason)
        except Replay as exc:
            return _line(409, f"refused: {exc}; nothing changed")
        except deploys.DeployConflict as exc:  # its message holds the stored values: named, not told
            return _line(409, f"deploy {exc.deploy_id!r} is already recorded with other values "
                         f"({', '.join(exc.fields)}); nothing changed")  # fmt: skip
        except deploys.UnknownTarget as exc:  # its message lists every known target
            return _line(400, f"target {exc.target!r} is not known here")
        except deploys.DeployError as exc:
            return _line(400, str(exc))
        event = recorded.event
        if not recorded.inserted:  # the stored time is not told: it may be another report's (a CI step's)
            return _line(200, f"deploy {event.deploy_id} to {event.target}: already recorded, unchanged")
        at = event.deployed_at.isoformat() if event.deployed_at else "?"  # this request's (or the warehouse's clock)
        return _line(201, f"deploy {event.deploy_id} to {event.target} at {at}: recorded")

    async def get_gate(request: Request) -> Response:
        deploy_id = request.path_params["deploy_id"]
        try:
            _authorize(request.headers, receiver.tokens, "gate")
            if not deploys.DEPLOY_ID.fullmatch(deploy_id):
                raise Refused(400, f"deploy id {deploy_id!r} is not a deploy id")
            wait = _wait(request.query_params.get("wait"))
            inconclusive_ok = request.query_params.get("inconclusive_ok", "").lower() in ("1", "true", "yes")
            deadline = time.monotonic() + wait
            while True:
                try:
                    view = await _warehouse(gate_step.read, receiver.engine, deploy_id, receiver.times)
                except Refused as exc:
                    if exc.status != 503 or time.monotonic() + POLL_S >= deadline:
                        raise
                    await asyncio.sleep(POLL_S)
                    continue
                if view is None:
                    raise Refused(404, f"deploy {deploy_id!r} is not recorded")
                state = view.state["state"]
                if state != "pending" or time.monotonic() >= deadline or await request.is_disconnected():
                    break
                await asyncio.sleep(max(0.0, min(POLL_S, deadline - time.monotonic())))
        except Refused as exc:
            return _line(exc.status, exc.reason)
        code = gate_step.exit_code(state, inconclusive_ok)
        return Response(
            gate_step.as_json(view, deploy_id, code) + "\n", GATE_STATUS[code], media_type="application/json"
        )

    async def post_label(request: Request) -> Response:
        try:
            _authorize(request.headers, receiver.tokens, "label")
            body = await _body(request, receiver.max_body_bytes)
            headers = {k.lower(): v for k, v in request.headers.items()}
            label = label_requests.label_of_json(headers, body)
        except Refused as exc:
            return _line(exc.status, exc.reason)
        return await _stored(label, "the same idempotency key")

    async def post_comment(request: Request) -> Response:
        host = request.path_params["host"]
        try:
            if host not in ("github", "gitlab") or host not in receiver.sources:
                raise Refused(404, f"no comments from {host!r} here")
            module, secrets = receiver.sources[host]
            body = await _body(request, receiver.max_body_bytes)
            headers = {k.lower(): v for k, v in request.headers.items()}
            await anyio.to_thread.run_sync(_authenticate, module, headers, body, secrets, [])
            label, ignored = label_requests.label_of_comment(host, headers, body)
        except Refused as exc:
            return _line(exc.status, exc.reason)
        if label is None:
            return _line(202, f"ignored: {ignored}")
        return await _stored(label, "a redelivery of the comment")

    async def _stored(label: labels.Label, again: str) -> Response:
        """Store the label and answer: 201 stored, 200 stored before (`again` says how that is known), 400 a field
        wrong (named), 409 its idempotency key used for another label, 503 the warehouse."""
        try:
            until = time.monotonic() + DB_DEADLINE_S - COMMIT_S
            stored = await _warehouse(store_label, receiver, label, until)
        except Refused as exc:
            return _line(exc.status, exc.reason)
        except labels.LabelConflict as exc:
            return _line(409, f"refused: {exc}; nothing stored")
        except labels.LabelError as exc:
            return _line(400, f"{exc}; nothing stored")
        row = stored.row
        said = "stored" if stored.inserted else f"already stored ({again}), unchanged"
        return _line(201 if stored.inserted else 200, f"label {row['label_id']} ({row['label']}): {said}")

    async def post_slack(request: Request) -> Response:
        # Slack wants an answer within 3 s: every wait here is bounded well within that (SLACK_DEADLINE_S).
        try:
            if receiver.slack_signing_secret is None:
                raise Refused(404, "Slack interactivity is not enabled here (RADAR_RECEIVER_SLACK_SIGNING_SECRET)")
            body = await _body(request, receiver.max_body_bytes, SLACK_DEADLINE_S)
            headers = {k.lower(): v for k, v in request.headers.items()}
            label_requests.slack_verified(headers, body, receiver.slack_signing_secret)
            label = slack_label(label_requests.slack_payload(body))
            if label is None:
                return Response(status_code=200)
            until = time.monotonic() + SLACK_DEADLINE_S - COMMIT_S
            await _warehouse(store_label, receiver, label, until, deadline=SLACK_DEADLINE_S)
        except Refused as exc:
            return _line(exc.status, exc.reason)
        except labels.LabelError as exc:
            return _line(400, f"{exc}; nothing stored")
        return Response(status_code=200)

    async def healthz(request: Request) -> Response:
        return _line(200, "ok")

    async def readyz(request: Request) -> Response:
        # Asked without a token (a probe): the why, which may name the warehouse's host, port and role, goes to the
        # receiver's log, not to whoever asks.
        try:
            await _warehouse(ready, receiver, deadline=READY_TIMEOUT_S)
        except Refused as exc:
            log.warning("not ready: %s", exc.reason)
            return _line(
                exc.status, "not ready: the warehouse does not answer as radar's (the receiver's log says why)"
            )
        return _line(200, "ready")

    async def _warehouse(call: Callable[..., T], *args: Any, deadline: float = DB_DEADLINE_S) -> T:
        return await in_worker(receiver.url, call, *args, deadline=deadline)

    return Starlette(
        routes=[
            Route("/v1/deploys/{source}", post_deploy, methods=["POST"]),
            Route("/v1/deploys/{deploy_id}/gate", get_gate, methods=["GET"]),
            Route("/v1/labels", post_label, methods=["POST"]),
            Route("/v1/slack/interactions", post_slack, methods=["POST"]),
            Route("/v1/comments/{host}", post_comment, methods=["POST"]),
            Route("/healthz", healthz, methods=["GET"]),
            Route("/readyz", readyz, methods=["GET"]),
        ]
    )


async def in_worker(url: str, call: Callable[..., T], *args: Any, deadline: float = DB_DEADLINE_S) -> T:
    """`call` in a worker thread, answered within `deadline`; a warehouse that fails or does not answer in time is
    Refused: 400 when it refused the data (a one-line reason, no detail of it), else 503 with the driver's first line
    (the password removed)."""
    try:
        return await asyncio.wait_for(anyio.to_thread.run_sync(call, *args, abandon_on_cancel=True), deadline)
    except (Refused, Replay, deploys.DeployError, labels.LabelError):
        raise
    except TimeoutError:
        raise Refused(503, f"the warehouse did not answer within {deadline:.0f} s") from None
    except (sa.exc.OperationalError, sa.exc.InterfaceError, sa.exc.TimeoutError) as exc:
        raise Refused(503, _failure("the warehouse did not answer", exc, url)) from None
    except sa.exc.ProgrammingError as exc:
        log.error("%s", _failure("the warehouse refused a statement", exc, url))
        raise Refused(503, "the warehouse lacks radar's schema, or refused us: run `radar db upgrade`") from None
    except (sa.exc.DataError, sa.exc.IntegrityError) as exc:
        log.warning("%s", _failure("the warehouse refused the event", exc, url))
        raise Refused(400, "the warehouse refused the event's values (a character or number it cannot store)") from None
    except sa.exc.DBAPIError as exc:
        log.error("%s", _failure("the warehouse failed", exc, url))
        raise Refused(503, "the warehouse failed the request: try again later") from None


def _owned(deploy_id: str, source: str) -> None:
    """A deploy id that starts as another source's ids do is refused (400): the generic source's token could
    otherwise claim an Argo CD sync's or a GitHub deployment's id before its own source records it."""
    for prefix, owner in ID_PREFIXES.items():
        if deploy_id.startswith(prefix) and owner != source:
            raise Refused(400, f"deploy_id {deploy_id!r} starts with {prefix!r}: only the {owner} source records those")


async def _body(request: Request, limit: int, within: float = BODY_TIMEOUT_S) -> bytes:
    """The body, read as it arrives and refused (413) the moment it passes `limit` bytes, whatever Content-Length
    said (or whether it said anything: chunked); 408 when it does not arrive `within` seconds."""
    length = request.headers.get("content-length")
    if length is not None and (not length.strip().isdigit() or int(length) > limit):
        raise Refused(413 if length.strip().isdigit() else 400,
                      f"the body is larger than {limit} bytes" if length.strip().isdigit()
                      else "Content-Length is not a number")  # fmt: skip
    chunks: list[bytes] = []
    size = 0

    async def read() -> None:
        nonlocal size
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise Refused(413, f"the body is larger than {limit} bytes")
            chunks.append(chunk)

    try:
        await asyncio.wait_for(read(), within)
    except TimeoutError:
        raise Refused(408, f"the body did not arrive within {within:.0f} s") from None
    except ClientDisconnect:
        raise Refused(400, "the client went away before the body ended") from None
    return b"".join(chunks)


def _read(
    module: ModuleType,
    headers: Mapping[str, str],
    body: bytes,
    secrets: list[str],
    tokens: list[tuple[str, frozenset[str]]],
    params: Mapping[str, str],
) -> Parsed:
    """The request authenticated (_authenticate) and read by its source (Refused when either refuses it)."""
    _authenticate(module, headers, body, secrets, tokens)
    return module.parse(headers, body, params)


def _authenticate(
    module: ModuleType,
    headers: Mapping[str, str],
    body: bytes,
    secrets: list[str],
    tokens: list[tuple[str, frozenset[str]]],
) -> None:
    """The source's own check against each of its secrets (every one compared); a bearer token known here without
    the scope to record deploys is told as such (403)."""
    refused: Refused | None = None
    accepted = False
    for secret in secrets:
        try:
            module.authenticate(headers, body, secret)
            accepted = True
        except Refused as exc:
            refused = exc
    if accepted:
        return
    given = bearer(headers)
    if any(same_token(given, token) for token, _ in tokens):
        raise Refused(403, "this token may not record deploys (its scopes do not include deploy)")
    raise refused or Refused(401, "no secret is configured for this source")


def _authorize(headers: Mapping[str, str], tokens: list[tuple[str, frozenset[str]]], scope: str) -> None:
    """The request's bearer token is one of `tokens` (each compared in constant time) with `scope`, else 401 (no or
    unknown token) or 403 (a token without the scope)."""
    given = bearer(headers)
    if given is None:
        raise Refused(401, "Authorization is missing: send 'Authorization: Bearer <token>'")
    scopes = [s for token, s in tokens if same_token(given, token)]
    if not scopes:
        raise Refused(401, "the bearer token is not known here")
    if scope not in scopes[0]:
        raise Refused(403, f"this token may not {SCOPE_WORDS[scope]} (its scopes: {', '.join(sorted(scopes[0]))})")


def _wait(value: str | None) -> float:
    """?wait=: seconds, or a duration such as 90s or 2m; capped at MAX_WAIT_S."""
    if value is None or value == "":
        return 0.0
    found = re.fullmatch(r"(\d{1,6}(?:\.\d+)?)(s|m)?", value.strip().lower())
    if found is None:
        raise Refused(400, f"wait {value!r} is not a duration such as 30s or 1m")
    seconds = float(found.group(1)) * (60 if found.group(2) == "m" else 1)
    return min(seconds, MAX_WAIT_S)


def _line(status: int, text: str) -> Response:
    """A one-line plain-text answer: control characters out, white space folded. After a refusal the connection is
    closed: the rest of a body refused unread (413, 408), or past a Content-Length that lied low, is not waited for
    nor read as another request."""
    headers = {"Connection": "close"} if status >= 400 else None
    return PlainTextResponse(" ".join(printable(text).split()) + "\n", status, headers=headers)


def _failure(what: str, exc: BaseException, url: str) -> str:
    """What failed and the driver's first line, without the password."""
    cause = getattr(exc, "orig", None) or exc
    first = next((line.strip() for line in str(cause).splitlines() if line.strip()), type(cause).__name__)
    return printable(scrub_secret(f"{what}: {type(cause).__name__}: {first}", url))


def configure(found: Any, url: str, configured_targets: list[str], times: Any) -> Receiver:
    """The Receiver the settings describe (`found`: RadarSettings.receiver): the sources RADAR_RECEIVER_SOURCES enables
    (unset: each one whose secret is set), each with its secret; ConfigError naming the variable when a source is
    enabled without its secret, is not a source, or nothing at all would be served."""
    from radar_pipeline.config import ConfigError
    from radar_pipeline.config.settings import variable
    from radar_pipeline.receiver.sources import SOURCES

    tokens_var = variable("receiver.tokens")
    tokens = found.token_scopes()

    def secrets(name: str) -> list[str]:
        if name == "generic":
            return [token for token, scopes in tokens if "deploy" in scopes]
        secret = found.secret(name)
        return [secret.get_secret_value()] if secret is not None else []

    def secret_var(name: str) -> str:
        if name == "generic":
            return f"{tokens_var} (a token whose scopes include deploy)"
        return variable(f"receiver.{name.replace('-', '_')}_secret")

    sources_var = variable("receiver.sources")
    names = found.sources if found.sources is not None else [n for n in SOURCES if secrets(n)]
    for name in names:
        if name not in SOURCES:
            raise ConfigError(f"{sources_var} names {name!r}, which is not a source (sources: {', '.join(SOURCES)})")
        if not secrets(name):
            raise ConfigError(f"{sources_var} enables {name} but {secret_var(name)} is not set: it would take anyone's")
    slack = found.slack_signing_secret
    if not names and not tokens and slack is None:
        raise ConfigError(
            f"nothing to serve: set a source's secret (e.g. {secret_var('github')}) or {tokens_var}, and "
            f"{sources_var} to choose among them"
        )
    return Receiver(
        url=url,
        sources={name: (SOURCES[name], secrets(name)) for name in names},
        tokens=tokens,
        max_body_bytes=found.max_body_bytes,
        configured_targets=tuple(configured_targets),
        times=times,
        slack_signing_secret=slack.get_secret_value() if slack is not None else None,
    )
