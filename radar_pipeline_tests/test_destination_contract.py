"""One contract for every destination radar delivers to (issue 40), as one table of cases, each its real client on the
wire against its loopback stand-in: a delivery taken but not answered in time may have been delivered and was sent
once; an earlier delivery is found where the API allows looking, and a case whose API does not says so; no error
shows the destination's secret in any encoding an answer may echo it in; a webhook template that fails for some data
is final with its reason, and every other destination has no template step; an odd answer (a 200 that is not the
API's, a 429 with an absurd Retry-After) is a ChannelError with a sane wait, or a success only where the API's contract
makes it one."""

from __future__ import annotations

import base64
import json
import logging
import math
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any, ClassVar
from urllib.parse import quote

import pytest

from radar_pipeline.alerts.channel import ChannelError, Detection, retry_after
from radar_pipeline.alerts.render import AnalysisFacts, Regression

from . import fake_code_host, fake_grafana, fake_pagerduty, fake_slack, fake_webhook
from .fake_slack import Odd
from .fake_webhook import Mode
from .test_masking import ECHOES, SECRET, _decoded

TIMEOUT = 1  # the client's bound on each wait: a held answer is given up on after it
MAX_WAIT = 86400.0  # a day: the longest wait a ChannelError may ask for (channel.MAX_RETRY_AFTER)
AT = datetime(2026, 11, 29, 12, tzinfo=UTC)
FACTS = AnalysisFacts("shop-v2", "main", AT, "shop", "v2", "https://ci.example/deploys/42", "https://dagster.example/r")
KEY = (5, 10, 1001, True)
DETECTION = Detection(
    KEY,
    regression=Regression(
        1001, "SELECT * FROM orders WHERE id = $1", 1.5, 6.0, 4.0, 0.999, AT, 1200, 1300, "plan_changed", None
    ),
)
PAGE = "<html>403 Forbidden: Bearer {} refused (rule 12)</html>"  # a proxy's; short: Slack quotes 80 characters
PORTAL = fake_webhook.PORTAL  # a captive portal's page, on a 200
NOT_THE_APIS = b'{"unexpected": "shape"}'  # JSON, but none of the answers the API documents


class Destination:
    """One destination's adapter: its stand-in, its client built with a secret, one delivery under a delivery id, and
    what the stand-in applied. Every Channel (alerts/channel.py) delivers with `notify` and looks with
    `find_delivered`; the code hosts, which are not Channels, send and look their own way. `can_check` and `no_look`:
    whether (and else why not) an earlier delivery can be looked for; `no_template`: why a destination has no template
    step (only webhooks render one); `any_2xx`: the API's contract makes any 2xx a success, whatever its body (a
    Workflows webhook's and a receiver's); `waits_in_call`: the client documents waiting out a short Retry-After inside
    the call (code_hosts' module docstring); `no_resend`: why the client resends nothing inside a call after a timeout
    (empty where its docs say it resends an idempotent request: `resend_idempotent` makes one)."""

    name: ClassVar[str]
    can_check: ClassVar[bool] = False
    no_look: ClassVar[str] = ""
    no_template: ClassVar[str] = "its request is the API's fixed form: no user template is rendered"
    any_2xx: ClassVar[bool] = False
    waits_in_call: ClassVar[bool] = False
    no_resend: ClassVar[str] = "its one request may have been taken: resent only by the outbox, after a look if it can"
    own_secret: ClassVar[str]  # the secret the stand-in takes
    route: str  # the delivery request, where the stand-in is scripted by request (Slack, PagerDuty, code hosts)

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def client(self, secret: str | None = None, template: str | None = None) -> Any:
        raise NotImplementedError

    def deliver(self, client: Any, delivery_id: str) -> Any:
        return client.notify(FACTS, [DETECTION], delivery_id)

    def applied(self) -> int:
        """The deliveries the stand-in took."""
        raise NotImplementedError

    def requests(self) -> int:
        """The delivery requests the stand-in received, taken or not."""
        return len(self.state.calls_to(self.route))

    def hold_next(self) -> threading.Event:
        """Take the next delivery, hold its answer until the returned event is set."""
        return self.state.hold_next(self.route)

    def answer_next(self, status: int, body: bytes, content_type: str) -> None:
        """Answer the next delivery so instead of the API's answer, without taking it."""
        self.state.answer_next(self.route, Odd(status, body, content_type))

    def throttle_next(self, retry_after: str) -> None:
        """Answer the next delivery 429 with this Retry-After, without taking it."""
        raise NotImplementedError

    def error_answers(self, echo: str) -> list[tuple[int, bytes, str]]:
        """Error answers that echo `echo` where the secret sits: the API's own error form, and a proxy's page."""
        return [(403, PAGE.format(echo).encode(), "text/html; charset=utf-8")]

    def find(self, client: Any, delivery_id: str, since: datetime) -> bool:
        """Whether the delivery made under `delivery_id` since `since` is found (only where can_check)."""
        return KEY in client.find_delivered(FACTS, {KEY: delivery_id}, since)

    def client_can_check(self, client: Any) -> bool:
        return bool(client.can_check)

    def resend_idempotent(self, client: Any) -> list[Any]:
        """Make the idempotent request the client documents resending, its first answer held: what the stand-in
        applied."""
        raise NotImplementedError


class SlackBot(Destination):
    name = "slack-bot"
    can_check = True  # chat.postMessage's metadata carries the delivery id; conversations.history finds it
    own_secret = "xoxb-contract-0123456789"
    route = "/api/chat.postMessage"

    def start(self) -> None:
        self.state, self.server = fake_slack.start()

    def client(self, secret: str | None = None, template: str | None = None) -> Any:
        from radar_pipeline.alerts.slack import SlackSender

        token = secret or self.own_secret
        return SlackSender(token=token, channel="C0RADAR", base_url=self.state.api_url, timeout=TIMEOUT)

    def applied(self) -> int:
        return len(self.state.messages())

    def throttle_next(self, retry_after: str) -> None:
        self.state.fail_next(self.route, (429, {"Retry-After": retry_after}))


class SlackWebhook(SlackBot):
    name = "slack-webhook"
    can_check = False
    no_look = "an incoming webhook answers `ok` and nothing else: no id, no history to read"
    own_secret = "contractHookSecret012345"  # a webhook URL's last path part, 24 characters

    def client(self, secret: str | None = None, template: str | None = None) -> Any:
        from radar_pipeline.alerts.slack import SlackSender

        part = quote(secret or self.own_secret, safe="")
        self.route = f"/hook/T000/B000/{part}"
        return SlackSender(webhook_url=f"http://127.0.0.1:{self.state.port}{self.route}", timeout=TIMEOUT)


class PagerDuty(Destination):
    name = "pagerduty"
    no_look = "the Events API cannot be read; a trigger's dedup_key makes a second send the same incident"
    own_secret = "R0radarContractKey00000000000000"  # a routing key's form: 32 letters and digits
    route = fake_pagerduty.EVENTS

    def start(self) -> None:
        self.state, self.server = fake_pagerduty.start()

    def client(self, secret: str | None = None, template: str | None = None) -> Any:
        from radar_pipeline.alerts.pagerduty import PagerDutyChannel

        return PagerDutyChannel(secret or self.own_secret, self.state.url, timeout=TIMEOUT)

    def applied(self) -> int:
        return sum(len(incident.triggers) for incident in self.state.incidents)

    def throttle_next(self, retry_after: str) -> None:
        self.state.throttle_next(self.route, retry_after)

    def error_answers(self, echo: str) -> list[tuple[int, bytes, str]]:
        errors = [f"'routing_key' {echo} is not a known integration key"]
        own = {"status": "invalid event", "message": "Event object is invalid", "errors": errors}
        return [(400, _json(own), "application/json"), *super().error_answers(echo)]


class Teams(Destination):
    name = "teams"
    no_look = "a Workflows webhook answers 202 with no body and offers no way to find a message again"
    any_2xx = True  # Teams answers 202 with no body: any 2xx that is not a web page is taken as posted
    own_secret = fake_webhook.SIG
    PATH = "/workflows/"

    def start(self) -> None:
        self.state, self.server = fake_webhook.start()

    def client(self, secret: str | None = None, template: str | None = None) -> Any:
        from radar_pipeline.alerts.teams import TeamsChannel

        url = self.state.teams_url.replace(
            f"sig={fake_webhook.SIG}", f"sig={quote(secret or self.own_secret, safe='')}"
        )
        return TeamsChannel(url, timeout=TIMEOUT)

    def applied(self) -> int:
        return sum(1 for call in self.state.delivered if call.path.startswith(self.PATH))

    def requests(self) -> int:
        return sum(1 for call in self.state.calls if call.path.startswith(self.PATH))

    def hold_next(self) -> threading.Event:
        return self.state.hold_next()

    def answer_next(self, status: int, body: bytes, content_type: str) -> None:
        self.state.answer_next(Mode(status=status, body=body, content_type=content_type))

    def throttle_next(self, retry_after: str) -> None:
        self.state.answer_next(Mode(status=429, body=b"{}", headers={"Retry-After": retry_after}))

    def error_answers(self, echo: str) -> list[tuple[int, bytes, str]]:
        own = {"error": {"code": "DirectApiAuthorizationRequired", "message": f"The signature {echo} is not valid."}}
        return [(401, _json(own), "application/json"), *super().error_answers(echo)]


class Grafana(Destination):
    name = "grafana"
    can_check = True  # each annotation carries its delivery's tag; GET /api/annotations finds it by that tag
    own_secret = fake_grafana.TOKEN

    def start(self) -> None:
        self.state, self.server = fake_grafana.start()

    def client(self, secret: str | None = None, template: str | None = None) -> Any:
        from radar_pipeline.alerts.grafana import GrafanaChannel

        return GrafanaChannel(self.state.url, secret or self.own_secret, timeout=TIMEOUT)

    def applied(self) -> int:
        return len(self.state.annotations)

    def requests(self) -> int:
        return sum(1 for call in self.state.calls if call.method == "POST")

    def hold_next(self) -> threading.Event:
        return self.state.hold_next()

    def answer_next(self, status: int, body: bytes, content_type: str) -> None:
        self.state.answer_next(Mode(status=status, body=body, content_type=content_type))

    def throttle_next(self, retry_after: str) -> None:
        self.state.answer_next(
            Mode(status=429, body=b'{"message": "Too Many Requests"}', headers={"Retry-After": retry_after})
        )

    def error_answers(self, echo: str) -> list[tuple[int, bytes, str]]:
        return [(401, _json({"message": f"invalid API key: {echo}"}), "application/json"), *super().error_answers(echo)]


class Webhook(Teams):
    name = "webhook"
    no_look = "a receiver cannot be asked what it received; each request's Idempotency-Key lets it dedupe"
    no_template = ""
    any_2xx = True  # a receiver's success is any 2xx (docs/channels.md)
    own_secret = "hook-s3cret-0123456789"
    PATH = "/hook/"

    def client(self, secret: str | None = None, template: str | None = None) -> Any:
        from radar_pipeline.alerts.webhook import WebhookChannel

        here = [f"127.0.0.1:{self.state.port}"]
        headers = {"Authorization": f"Bearer {secret or self.own_secret}"}
        return WebhookChannel("contract", self.state.hook_url("contract"), template, here, headers, TIMEOUT)

    def error_answers(self, echo: str) -> list[tuple[int, bytes, str]]:
        own = (401, f"invalid token {echo}".encode(), "text/plain; charset=utf-8")
        return [own, (403, PAGE.format(echo).encode(), "text/html; charset=utf-8")]


class CodeHost(Destination):
    """A comment on the request that merged the deploy's commit: the code hosts' one delivery that is not idempotent
    (a status is the same state again, and retried inside the call on a timeout, as the module documents)."""

    kind: ClassVar[str]
    can_check = True  # the comment's hidden marker, among the token's user's comments
    waits_in_call = True  # a 429 asking for at most RETRY_AFTER_CAP seconds is waited out and retried in the call
    no_resend = ""  # a status is resent in the call after a timeout (the same state again), a comment never
    own_secret = fake_code_host.TOKEN
    REPOSITORY = "acme/api"
    route = "post_comment"

    def start(self) -> None:
        self.state = fake_code_host.FakeHost(self.kind, self.REPOSITORY, COMMIT, reviews=[12])
        self.server = fake_code_host.start(self.state)

    def client(self, secret: str | None = None, template: str | None = None) -> Any:
        from radar_pipeline.alerts.code_hosts import HostClient

        self.state.token = secret or self.own_secret  # the stand-in checks the token before any scripted answer
        return HostClient(self.kind, self.state.api_url, self.state.token, timeout=TIMEOUT)

    def deliver(self, client: Any, delivery_id: str) -> Any:
        from radar_pipeline.alerts.code_hosts import Review

        return client.post_comment(self.REPOSITORY, Review(12), f"radar: ×4.00 slower\n\n{_marker(delivery_id)}")

    def applied(self) -> int:
        return len(self.state.comments)

    def answer_next(self, status: int, body: bytes, content_type: str) -> None:
        payload = body if content_type.startswith("text/html") else json.loads(body)
        self.state.fail_next(self.route, (status, {}, payload))

    def throttle_next(self, retry_after: str) -> None:
        self.state.fail_next(self.route, (429, {"Retry-After": retry_after}, {"message": "API rate limit exceeded"}))

    def error_answers(self, echo: str) -> list[tuple[int, bytes, str]]:
        return [(401, _json({"message": f"Bad credentials: {echo}"}), "application/json"), *super().error_answers(echo)]

    def find(self, client: Any, delivery_id: str, since: datetime) -> bool:
        from radar_pipeline.alerts.code_hosts import Review

        return client.find_comment(self.REPOSITORY, Review(12), _marker(delivery_id)) is not None

    def client_can_check(self, client: Any) -> bool:
        return callable(getattr(client, "find_comment", None))

    def resend_idempotent(self, client: Any) -> list[Any]:
        held = self.state.hold_next("status")
        try:
            client.set_status(self.REPOSITORY, COMMIT, "fail", "radar: ×4.00 slower", None)
        finally:
            held.set()
        return self.state.statuses


class GitHub(CodeHost):
    name = "github"
    kind = "github"


class GitLab(CodeHost):
    name = "gitlab"
    kind = "gitlab"


COMMIT = "c0ffee" * 6 + "0123"
CASES: dict[str, type[Destination]] = {
    case.name: case for case in (SlackBot, SlackWebhook, PagerDuty, Teams, Grafana, Webhook, GitHub, GitLab)
}
# A template that renders the sample detections (and so passes validation at load) but divides by zero for a
# regression of 1,300 calls after: a failure only some data shows, at render.
FAILING_TEMPLATE = '{"per_call": {{ 100 // (regression.calls_after - 1300) if regression else 0 }}}'
TEMPLATES = {"webhook": FAILING_TEMPLATE}
ODD_WAITS = ["inf", "1e20", "-5", "nan"]


def _json(value: Any) -> bytes:
    return json.dumps(value).encode()


def _marker(delivery_id: str) -> str:
    return f"<!-- radar:delivery={delivery_id} -->"


def _shows_secret(text: str, echo: str) -> bool:
    """Whether `text` shows the secret or a part of it (six characters): as echoed, once each encoding is undone, or in
    a base64 token that decodes to a part of it."""
    decoded = _decoded(text)
    if ECHOES[echo] in text or any(SECRET[i : i + 6] in decoded for i in range(len(SECRET) - 5)):
        return True
    for token in text.replace("*", " ").split():
        padded = token + "=" * (-len(token) % 4)
        try:
            decoded_token = base64.b64decode(padded.replace("-", "+").replace("_", "/"), validate=True)
        except ValueError:
            continue
        if SECRET[:6].encode() in decoded_token or SECRET[-6:].encode() in decoded_token:
            return True
    return False


@pytest.fixture(params=list(CASES))
def dest(request: pytest.FixtureRequest) -> Iterator[Destination]:
    """Each destination's adapter with its stand-in started, stopped after the test."""
    case = CASES[request.param]()
    case.start()
    yield case
    case.stop()


def test_the_table_covers_every_destination_and_states_each_point():
    """Every destination has a case, and each case that cannot look, template or resend says why."""
    assert set(CASES) == {"slack-bot", "slack-webhook", "pagerduty", "teams", "grafana", "webhook", "github", "gitlab"}
    for name, case in CASES.items():
        assert case.can_check or case.no_look, name
        assert (name in TEMPLATES) != bool(case.no_template), name
        assert case.no_resend or case.resend_idempotent is not Destination.resend_idempotent, name


def unanswered(dest: Destination, client: Any, delivery_id: str) -> ChannelError:
    """The error of a delivery the stand-in took and held unanswered past the client's bound."""
    held = dest.hold_next()
    try:
        with pytest.raises(ChannelError) as error:
            dest.deliver(client, delivery_id)
    finally:
        held.set()
    return error.value


def test_a_delivery_taken_but_not_answered_in_time_may_have_been_delivered_and_went_once(dest):
    """A delivery taken but unanswered in the client's bound is unknown, retryable, received and applied once."""
    error = unanswered(dest, dest.client(), "contract-1")
    assert error.unknown and error.retryable, str(error)
    assert (dest.requests(), dest.applied()) == (1, 1)


def test_a_timeout_is_resent_inside_the_call_only_where_the_client_documents_it(dest):
    """A timeout is resent in the call only where the docs say so (a code host's status: the same state twice)."""
    if dest.no_resend:
        return
    applied = dest.resend_idempotent(dest.client())
    assert len(applied) == 2 and applied[0] == applied[1], applied


def test_an_earlier_delivery_is_found_where_the_api_allows_looking(dest):
    """An earlier delivery is found by its delivery id where the API can be read; elsewhere the case says why not."""
    client = dest.client()
    assert dest.client_can_check(client) is dest.can_check
    if not dest.can_check:
        assert dest.no_look
        return
    since = datetime.now(UTC) - timedelta(minutes=1)
    assert unanswered(dest, client, "contract-lost").unknown
    assert dest.find(client, "contract-lost", since)
    assert not dest.find(client, "contract-never-sent", since)


@pytest.mark.parametrize("echo", ECHOES)
def test_no_error_shows_the_secret_in_any_encoding_an_answer_echoes(dest, echo, caplog):
    """An error answer echoing the secret in any ECHOES encoding shows no part of it in the error or the logs."""
    caplog.set_level(logging.INFO)  # what a deployment logs by default, the client libraries' own loggers included
    client = dest.client(secret=SECRET)
    for status, body, content_type in dest.error_answers(ECHOES[echo]):
        dest.answer_next(status, body, content_type)
        with pytest.raises(ChannelError) as error:
            dest.deliver(client, "contract-echo")
        assert not _shows_secret(str(error.value), echo), str(error.value)
    assert dest.applied() == 0
    for record in caplog.records:
        assert not _shows_secret(record.getMessage(), echo), f"{record.name}: {record.getMessage()}"


def test_a_template_failing_at_render_is_final_with_its_reason(dest):
    """A webhook template failing at render for some data is final with its reason; no other case has a template."""
    if dest.name not in TEMPLATES:
        assert dest.no_template
        assert not hasattr(dest.client(), "_template")
        return
    client = dest.client(template=TEMPLATES[dest.name])  # it renders the sample detections at load
    with pytest.raises(ChannelError) as error:
        dest.deliver(client, "contract-template")
    assert not error.value.retryable and not error.value.unknown
    assert "template" in str(error.value) and "ZeroDivisionError" in str(error.value), str(error.value)
    assert dest.requests() == 0


@pytest.mark.parametrize("body", [PORTAL, NOT_THE_APIS], ids=["web-page", "json-not-the-apis"])
def test_a_200_that_is_not_the_apis_answer_may_have_been_delivered(dest, body):
    """A 200 that is not the API's answer is unknown, a success only where any 2xx is one (never a web page)."""
    client = dest.client()
    page = body.startswith(b"<!DOCTYPE")
    dest.answer_next(200, body, "text/html; charset=utf-8" if page else "application/json")
    if dest.any_2xx and not page:
        dest.deliver(client, "contract-odd")
        return
    with pytest.raises(ChannelError) as error:
        dest.deliver(client, "contract-odd")
    assert error.value.unknown and error.value.retryable, str(error.value)


@pytest.mark.parametrize("wait", ODD_WAITS)
def test_a_429_with_an_absurd_retry_after_asks_a_sane_wait(dest, wait):
    """A 429 with absurd Retry-After asks a finite wait of at most a day, or is waited out in the call if documented."""
    client = dest.client()
    dest.throttle_next(wait)
    try:
        dest.deliver(client, "contract-throttled")
    except ChannelError as error:
        assert error.retryable and not error.unknown, str(error)
        assert error.retry_after is not None and math.isfinite(error.retry_after), error.retry_after
        assert 0 <= error.retry_after <= MAX_WAIT, error.retry_after
        assert dest.applied() == 0
    else:
        assert dest.waits_in_call, f"{dest.name} took a 429 as delivered"
        assert (dest.requests(), dest.applied()) == (2, 1)


@pytest.mark.parametrize(
    ("value", "default", "epoch", "low", "high"),
    [
        ("17", 1.0, False, 17, 17),  # delay-seconds
        ("2.5", 1.0, False, 2.5, 2.5),
        (None, 1.0, False, 1, 1),  # absent: the caller's default (PagerDuty's and the code hosts' is a minute)
        (None, 60.0, False, 60, 60),
        ("soon", 60.0, False, 60, 60),  # garbage
        ("nan", 1.0, False, 1, 1),
        ("-5", 1.0, False, 0, 0),
        ("inf", 1.0, False, MAX_WAIT, MAX_WAIT),
        ("1e20", 1.0, False, MAX_WAIT, MAX_WAIT),
        (("date", 120), 1.0, False, 110, 121),  # an HTTP date, this many seconds from now
        (("date", -3600), 1.0, False, 0, 0),  # a date past
        (("epoch", 900), 60.0, True, 890, 901),  # a rate limit's reset, epoch seconds
        ("0", 60.0, True, 0, 0),  # a reset long past
        ("Wed, 21 Oct 2015 07:28:00 GMT", 60.0, True, 60, 60),  # a reset is never a date
    ],
)
def test_the_one_retry_after_reads_each_form(value, default, epoch, low, high):
    """Every client reads a wait with channel.retry_after: delay-seconds, an HTTP date, a reset in epoch seconds; an
    absent or unreadable value is the caller's default; the wait is bounded from 0 to a day."""
    if isinstance(value, tuple):  # a time from now, made when the test runs
        form, seconds = value
        at = datetime.now(UTC) + timedelta(seconds=seconds)
        value = format_datetime(at, usegmt=True) if form == "date" else str(int(at.timestamp()))
    assert low <= retry_after(value, default, epoch=epoch) <= high
