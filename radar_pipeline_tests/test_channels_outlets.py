"""Microsoft Teams, Grafana annotations and generic webhooks (alerts/teams.py, grafana.py, webhook.py), each with its
real HTTP client on the wire against a loopback stand-in that holds the API's contract (fake_webhook, fake_grafana):
the mapping from what radar found to each request, the limits, the escaping, and every kind of answer."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from radar_pipeline.alerts.channel import ChannelError, Delivered, DeployNotice, Detection
from radar_pipeline.alerts.render import AnalysisFacts, LoadChange, Regression

from . import fake_grafana, fake_webhook
from .fake_webhook import PORTAL, Mode

AT = datetime(2026, 11, 29, 12, tzinfo=UTC)
HOSTILE = "SELECT \"a\", 'b' FROM t WHERE x = '{{ 7*7 }}'\n\t-- *bold* _it_ [l](http://evil) <at>x</at> \x1b[31m\u202e"


def facts(**changed) -> AnalysisFacts:  # type: ignore[no-untyped-def]
    values = dict(
        analysis_id="shop-v2",
        target="main",
        split_at=AT,
        service="shop",
        version="v2",
        url="https://ci.example/deploys/42?a=1&b=(2)",
        run_url="http://localhost:3000/runs/abc",
        load_ms_per_min=(100.0, 250.0),
        state="fail",
        verdict_counts=(("detected", 1), ("no_regression", 40)),
        cleared_share=0.8,
    )
    values.update(changed)
    return AnalysisFacts(**values)  # type: ignore[arg-type]


def regression(i: int = 1, query: str = "SELECT * FROM orders WHERE customer_id = $1", plan: str | None = None):  # type: ignore[no-untyped-def]
    return Regression(
        queryid=1000 + i,
        query=query,
        mean_before_ms=1.5,
        mean_after_ms=4.5 + i,
        change_factor=3.0 + i,
        confidence=0.999,
        change_at=AT + timedelta(seconds=30),
        calls_before=1200,
        calls_after=1300,
        cause="plan_changed",
        plan_summary=plan or "Index Scan using orders_customer_idx → Seq Scan on orders",
        factor_low=2.5,
        factor_high=3.5,
    )


def detection(i: int = 1, **kwargs) -> Detection:  # type: ignore[no-untyped-def]
    return Detection(key=(5, 10, 1000 + i, True), regression=regression(i, **kwargs))


CHANGE = LoadChange(
    queryid=77,
    query="SELECT * FROM carts",
    kind="new",
    calls_per_min_before=0.0,
    calls_per_min_after=300.0,
    exec_ms_per_min_before=0.0,
    exec_ms_per_min_after=90.0,
    mean_before_ms=None,
    mean_after_ms=0.3,
    share_of_time_after=0.36,
)


@pytest.fixture(scope="module")
def hook() -> Iterator[fake_webhook.FakeWebhook]:
    """One stand-in for the module's tests (Teams' Workflows webhook and generic receivers); each test starts with
    no call recorded and no answer scripted."""
    state, http = fake_webhook.start()
    yield state
    http.shutdown()


@pytest.fixture
def webhook(hook: fake_webhook.FakeWebhook) -> fake_webhook.FakeWebhook:
    hook.calls.clear()
    hook.delivered.clear()
    hook.script.clear()
    return hook


def _texts(value) -> list[str]:  # type: ignore[no-untyped-def]
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [t for item in value for t in _texts(item)]
    if isinstance(value, dict):
        return [t for item in value.values() for t in _texts(item)]
    return []


# Microsoft Teams


def _teams(webhook: fake_webhook.FakeWebhook, timeout: float = 10.0):  # type: ignore[no-untyped-def]
    from radar_pipeline.alerts.teams import TeamsChannel

    return TeamsChannel(webhook.teams_url, timeout=timeout)


def _card(call: fake_webhook.Call) -> dict:
    message = call.json
    assert message["type"] == "message"
    (attachment,) = message["attachments"]
    assert attachment["contentType"] == "application/vnd.microsoft.card.adaptive"
    return attachment["content"]


def test_teams_posts_an_adaptive_card_with_the_slack_messages_content(webhook):
    from radar_pipeline.alerts.render import render

    channel = _teams(webhook)
    assert (channel.name, channel.per_detection, channel.can_check) == ("teams", False, False)
    result = channel.notify(facts(), [detection(1), Detection(key=(5, 10, 77, True), change=CHANGE)], "d-1")
    assert result.remote_id is None
    (call,) = webhook.delivered
    assert call.headers["content-type"].startswith("application/json")
    card = _card(call)
    assert card["type"] == "AdaptiveCard" and float(card["version"]) >= 1.4
    body = card["body"]
    assert body[0]["text"] == "1 query slower, 1 new heavy statement after deploy shop v2 on main"
    facts_shown = {f["title"]: f["value"] for f in body[1]["facts"]}
    assert facts_shown["Deploy"] == "[shop-v2](https://ci.example/deploys/42?a=1&b=%282%29)"
    assert facts_shown["Database time"] == "100.0 → 250.0 ms per minute (×2.50)"
    assert facts_shown["Deploy state"].startswith("fail (1 detected, 40 no\\_regression; 80% of the time")
    monospace = [e["text"] for e in body if e.get("fontType") == "Monospace"]
    assert monospace == ["SELECT \\* FROM carts", "SELECT \\* FROM orders WHERE customer\\_id = $1"]
    regression_facts = {f["title"]: f["value"] for f in body[-3]["facts"]}
    assert regression_facts["Mean"] == "1.500 → 5.500 ms (×4.00, 95% interval ×2.50 to ×3.50)"
    assert regression_facts["queryid"] == "1001"
    assert "Seq Scan on orders" in body[-2]["text"]
    assert body[-1]["text"] == "[Analysis run in Dagster](http://localhost:3000/runs/abc)"
    # the same content as Slack's message: every field Slack shows is a fact of the card
    _, blocks = render(facts(), [regression(1)], [CHANGE])
    slack_labels = [f["text"].split(":*")[0].lstrip("*") for b in blocks for f in b.get("fields", [])]
    card_labels = [f["title"] for e in body if e["type"] == "FactSet" for f in e["facts"]]
    assert card_labels == slack_labels


def test_teams_escapes_outside_text_for_the_cards_markdown(webhook):
    hostile_facts = facts(service="[x](http://evil) *s*", version="1. {{DATE(2017-02-14T06:08:39Z, SHORT)}}")
    _teams(webhook).notify(hostile_facts, [detection(1, query=HOSTILE)], "d-1")
    card = _card(webhook.delivered[0])
    texts = _texts(card["body"])
    joined = "\n".join(texts)
    assert "{{" not in joined and "\\{\\{DATE" in joined  # no TextBlock date function runs
    assert not re.search(r"(?<!\\)\]\(http://evil", joined) and "\\[x\\](http://evil)" in joined
    assert "\\*bold\\*" in joined and "\\_it\\_" in joined and "\\<at\\>" in joined
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e]", joined)
    statement = next(e["text"] for e in card["body"] if e.get("fontType") == "Monospace")
    assert "\n" not in statement and "\"a\", 'b'" in statement


@pytest.mark.parametrize("count", [1, 200])
def test_teams_keeps_the_card_within_teams_limit(webhook, count):
    from radar_pipeline.alerts.teams import MAX_PAYLOAD

    huge = "SELECT " + ", ".join(f"\"col_{i}\" <> '&'" for i in range(20_000))
    plan = "Seq Scan on orders " + "(cost=0.00..1.00) " * 2000
    long_facts = facts(service="s" * 5000, version="v" * 5000, analysis_id="d-" + "9" * 400)
    detections = [detection(i, query=huge, plan=plan) for i in range(count)]
    _teams(webhook).notify(long_facts, detections, "d-1")  # the stand-in answers 413 over Teams' limit
    (call,) = webhook.delivered
    assert len(call.body) <= MAX_PAYLOAD < fake_webhook.MAX_TEAMS
    texts = "\n".join(_texts(_card(call)["body"]))
    if count == 200:
        assert "… and 190 more" in texts and "all of them in Dagster" in texts
    assert texts.count("SELECT") >= min(count, 10)


def test_teams_shows_a_periodic_checks_detections(webhook):
    periodic = facts(analysis_id="periodic:2026-11-29-12:00", period=(AT, AT + timedelta(hours=1)), state=None)
    _teams(webhook).notify(periodic, [detection(1)], "d-1")
    body = _card(webhook.delivered[0])["body"]
    assert body[0]["text"].startswith("1 query slower on main with no deploy behind it (periodic check")
    assert {f["title"] for f in body[1]["facts"]} >= {"Period", "Compared with", "Check"}


def test_the_teams_stand_in_refuses_a_message_over_teams_limit(webhook):
    from radar_pipeline.alerts import teams

    message = teams._message([{"type": "TextBlock", "text": "x" * fake_webhook.MAX_TEAMS}])
    with pytest.raises(ChannelError) as error:
        _post_raw(webhook.teams_url, teams.encode(message))
    assert "413" in str(error.value) and not error.value.retryable


def _post_raw(url: str, body: bytes) -> None:
    from radar_pipeline.alerts.outlet_http import Http, url_secrets

    http = Http("Microsoft Teams", url_secrets(url))
    answer = http.request("POST", url, content=body, headers={"Content-Type": "application/json"})
    if answer.status != 202:
        raise http.refused(answer, http.quote(answer.text))


@pytest.mark.parametrize(
    ("mode", "retryable", "unknown", "retry_after", "words"),
    [
        (
            Mode(status=400, body=b'{"error":{"code":"InvalidRequestContent","message":"bad card"}}'),
            False,
            False,
            None,
            "bad card",
        ),
        (
            Mode(status=413, body=b'{"error":{"code":"MessageTooLarge","message":"too big"}}'),
            False,
            False,
            None,
            "size limit",
        ),
        (
            Mode(status=429, headers={"Retry-After": "17"}, body=b'{"error":{"code":"TooManyRequests"}}'),
            True,
            False,
            17.0,
            "429",
        ),
        (Mode(status=500, body=b'{"error":{"code":"InternalServerError","message":"boom"}}'), True, False, None, "500"),
        (Mode(status=502, body=b"{}"), True, True, None, "may have been taken"),
        (Mode(status=200, body=PORTAL, content_type="text/html"), True, True, None, "not Microsoft Teams"),
        (Mode(status=503, body=PORTAL, content_type="text/html"), True, True, None, "not Microsoft Teams"),
        (Mode(usual=True, delay=2.0), True, True, None, "no answer"),
        (Mode(reset=True), True, True, None, "no answer"),
    ],
    ids=["400", "413", "429", "500", "502", "html-200", "html-503", "timeout", "reset"],
)
def test_teams_answers(webhook, mode, retryable, unknown, retry_after, words):
    webhook.answer_next(mode)
    with pytest.raises(ChannelError) as error:
        _teams(webhook, timeout=0.5).notify(facts(), [detection()], "d-1")
    assert (error.value.retryable, error.value.unknown, error.value.retry_after) == (retryable, unknown, retry_after)
    assert words in str(error.value)
    assert fake_webhook.SIG not in str(error.value) and "sig=" not in str(error.value)


def test_an_answer_trickled_byte_by_byte_is_cut_off_at_twice_the_timeout(webhook):
    import time

    webhook.answer_next(Mode(status=202, body=b" " * 600, content_type="text/plain", trickle=0.05))
    started = time.monotonic()
    with pytest.raises(ChannelError) as error:
        _teams(webhook, timeout=0.5).notify(facts(), [detection()], "d-1")
    assert error.value.unknown and "no whole answer within 1 s" in str(error.value)
    assert time.monotonic() - started < 10  # each byte comes within the timeout: only the whole bound stops it


def test_teams_refused_connection_is_retryable_and_known_not_sent():
    from radar_pipeline.alerts.teams import TeamsChannel

    url = f"http://127.0.0.1:{fake_webhook.closed_port()}/workflows/x?sig={fake_webhook.SIG}"
    with pytest.raises(ChannelError) as error:
        TeamsChannel(url, timeout=2).notify(facts(), [detection()], "d-1")
    assert error.value.retryable and not error.value.unknown
    assert fake_webhook.SIG not in str(error.value)


def test_teams_never_shows_the_urls_signature(webhook, caplog):
    caplog.set_level(logging.DEBUG, logger="httpx")
    caplog.set_level(logging.DEBUG, logger="httpcore")
    from radar_pipeline.alerts.teams import TeamsChannel

    echo = f"<html>denied: sig={fake_webhook.SIG} of {webhook.teams_url}</html>".encode()
    webhook.answer_next(Mode(status=403, body=echo, content_type="text/html"))
    channel = TeamsChannel(webhook.teams_url)
    with pytest.raises(ChannelError) as error:
        channel.notify(facts(), [detection()], "d-1")
    assert fake_webhook.SIG not in str(error.value) and fake_webhook.SIG not in repr(channel)
    bad = TeamsChannel(webhook.teams_url.replace(fake_webhook.SIG, "wrong-signature-value"))
    with pytest.raises(ChannelError) as refused:
        bad.notify(facts(), [detection()], "d-1")
    assert "401" in str(refused.value) and not refused.value.retryable
    assert "wrong-signature-value" not in str(refused.value)
    assert "HTTP Request: POST" in caplog.text and "sig=" not in caplog.text and fake_webhook.SIG not in caplog.text


# Grafana annotations


@pytest.fixture(scope="module")
def grafana_server() -> Iterator[fake_grafana.FakeGrafana]:
    state, http = fake_grafana.start()
    yield state
    http.shutdown()


@pytest.fixture
def grafana(grafana_server: fake_grafana.FakeGrafana) -> fake_grafana.FakeGrafana:
    grafana_server.calls.clear()
    grafana_server.annotations.clear()
    grafana_server.script.clear()
    grafana_server.compress = False
    return grafana_server


def _grafana(grafana: fake_grafana.FakeGrafana, token: str = fake_grafana.TOKEN, **options):  # type: ignore[no-untyped-def]
    from radar_pipeline.alerts.grafana import GrafanaChannel

    return GrafanaChannel(grafana.url, token, **options)


NOTICE = DeployNotice(
    deploy_id="shop-v2",
    target="main",
    deployed_at=AT,
    service="shop",
    version="v2",
    url="https://ci.example/deploys/42",
    run_url="https://ci.example/runs/7",
    commit_sha="0123abcd",
    repository="acme/shop",
)


def test_grafana_annotates_a_detection_with_its_tags_time_and_text(grafana):
    channel = _grafana(grafana, dashboard_uid="db-1", panel_id=4)
    assert (channel.name, channel.per_detection, channel.can_check) == ("grafana", True, True)
    delivered = channel.notify(facts(), [detection(1, query=HOSTILE)], "out-17")
    (annotation,) = grafana.annotations
    assert delivered.remote_id == str(annotation["id"])
    assert annotation["time"] == int((AT + timedelta(seconds=30)).timestamp() * 1000)
    assert annotation["dashboardUID"] == "db-1" and annotation["panelId"] == 4
    assert annotation["tags"] == [
        "radar",
        "target:main",
        "service:shop",
        "kind:regression",
        "deploy:shop-v2",
        "radar-delivery:out-17/5.10.1001.t",
    ]
    text = annotation["text"]
    assert text.startswith("<b>radar: ×4.00 slower</b> on main after deploy shop-v2 (shop v2)")
    assert "&lt;at&gt;x&lt;/at&gt;" in text and "<at>" not in text  # outside text escaped for Grafana's HTML
    assert "&quot;a&quot;" in text and "\x1b" not in text and "\u202e" not in text
    assert '<a href="https://ci.example/deploys/42?a=1&amp;b=(2)">deploy</a>' in text
    assert '<a href="http://localhost:3000/runs/abc">analysis run in Dagster</a>' in text
    change = channel.notify(facts(service=None), [Detection(key=(5, 10, 77, True), change=CHANGE)], "out-18")
    assert grafana.annotations[1]["tags"][:3] == ["radar", "target:main", "kind:new"]
    assert grafana.annotations[1]["time"] == int(AT.timestamp() * 1000) and change.remote_id == "2"
    periodic = facts(analysis_id="periodic:2026-11-29-12:00", period=(AT, AT + timedelta(hours=1)))
    channel.notify(periodic, [detection(2)], "out-19")
    assert "check:periodic:2026-11-29-12:00" in grafana.annotations[2]["tags"]


def test_grafana_tags_stay_within_grafanas_length_and_apart(grafana):
    channel = _grafana(grafana)
    long_target = "t" * 300
    channel.notify(facts(target=long_target + "a"), [detection(1)], "x" * 200)
    channel.notify(facts(target=long_target + "b"), [detection(1)], "x" * 200)
    first, second = (a["tags"] for a in grafana.annotations)
    assert all(len(tag) <= 100 for tag in first + second)
    assert first[1] != second[1]  # the target tags, cut, still differ


def test_grafana_marks_a_deploy(grafana):
    channel = _grafana(grafana)
    delivered = channel.mark_deploy(NOTICE, "out-5")
    (annotation,) = grafana.annotations
    assert delivered.remote_id == str(annotation["id"]) and annotation["time"] == int(AT.timestamp() * 1000)
    assert annotation["tags"] == [
        "radar",
        "target:main",
        "service:shop",
        "kind:deploy",
        "deploy:shop-v2",
        "radar-delivery:out-5",
    ]
    assert annotation["text"].startswith("<b>Deploy shop-v2</b> (shop v2) on main<br>\ncommit 0123abcd in acme/shop")
    assert '<a href="https://ci.example/runs/7">CI run</a>' in annotation["text"]


def test_grafana_finds_what_an_earlier_attempt_added_and_only_that(grafana):
    channel = _grafana(grafana)
    since = AT + timedelta(hours=1)
    grafana.answer_next(Mode(usual=True, delay=1.5))  # taken, the answer lost to the client's timeout
    with pytest.raises(ChannelError) as lost:
        _grafana(grafana, timeout=0.4).notify(facts(), [detection(1)], "out-1")
    assert lost.value.unknown and lost.value.retryable
    (key_1, key_2) = (detection(1).key, detection(2).key)
    found = channel.find_delivered(facts(), {key_1: "out-1", key_2: "out-2"}, since)
    assert found == {key_1: Delivered(str(grafana.annotations[0]["id"]))}
    # another delivery of the same statement, or the same delivery of another statement, is not it
    assert channel.find_delivered(facts(), {key_1: "out-9"}, since) == {}
    assert channel.find_delivered(facts(), {key_2: "out-1"}, since) == {}
    get = grafana.calls[-1]
    assert get.method == "GET" and get.query["tags"] == ["radar", "radar-delivery:out-1/5.10.1002.t"]
    assert get.query["matchAny"] == ["false"] and "from" in get.query and "to" in get.query
    assert channel.find_marked(NOTICE, "out-5", since) is None
    marked = channel.mark_deploy(NOTICE, "out-5")
    assert channel.find_marked(NOTICE, "out-5", since) == marked
    assert channel.find_marked(NOTICE, "out-6", since) is None


def test_grafana_refuses_a_bad_token_without_showing_it(grafana):
    channel = _grafana(grafana, token="glsa_wrong_token_value_0001")
    with pytest.raises(ChannelError) as error:
        channel.notify(facts(), [detection()], "out-1")
    assert "401" in str(error.value) and "token was refused" in str(error.value) and not error.value.retryable
    assert "glsa_wrong_token_value_0001" not in str(error.value) + repr(channel)
    with pytest.raises(ChannelError):
        channel.find_marked(NOTICE, "out-1", AT)
    assert grafana.annotations == []


def test_grafanas_stand_in_holds_the_annotation_contract(grafana):
    from radar_pipeline.alerts.outlet_http import Http

    http = Http("Grafana", ())
    headers = {"Authorization": f"Bearer {fake_grafana.TOKEN}"}
    seconds = {"time": int(AT.timestamp()), "text": "x", "tags": ["radar"]}
    for body in (seconds, {"time": 1764417600000, "tags": ["a"]}, {"time": 1764417600000, "text": "x", "tags": [1]}):
        answer = http.request("POST", grafana.url + "/api/annotations", json_body=body, headers=headers)
        assert answer.status == 400, body
    assert http.request("POST", grafana.url + "/api/annotations", json_body=seconds).status == 401
    assert grafana.annotations == []


@pytest.mark.parametrize(
    ("mode", "retryable", "unknown", "retry_after", "words"),
    [
        (Mode(status=400, body=b'{"message":"bad request data"}'), False, False, None, "bad request data"),
        (Mode(status=403, body=b'{"message":"Permission denied"}'), False, False, None, "may not add"),
        (Mode(status=429, headers={"Retry-After": "30"}, body=b'{"message":"Too many"}'), True, False, 30.0, "429"),
        (Mode(status=500, body=b'{"message":"Failed to save annotation"}'), True, False, None, "Failed to save"),
        (Mode(status=504, body=b"gateway timeout", content_type="text/plain"), True, True, None, "may have been"),
        (Mode(status=200, body=PORTAL, content_type="text/html"), True, True, None, "not Grafana"),
        (Mode(status=200, body=b'{"message":"Annotation added"}'), True, True, None, "not Grafana"),
        (Mode(status=302, headers={"Location": "https://sso.example/login?t=1"}), False, False, None, "redirect"),
        (Mode(usual=True, delay=2.0), True, True, None, "no answer"),
        (Mode(reset=True), True, True, None, "no answer"),
    ],
    ids=["400", "403", "429", "500", "504", "html", "no-id", "redirect", "timeout", "reset"],
)
def test_grafana_answers(grafana, mode, retryable, unknown, retry_after, words):
    grafana.answer_next(mode)
    with pytest.raises(ChannelError) as error:
        _grafana(grafana, timeout=0.5).notify(facts(), [detection()], "out-1")
    assert (error.value.retryable, error.value.unknown, error.value.retry_after) == (retryable, unknown, retry_after)
    assert words in str(error.value) and fake_grafana.TOKEN not in str(error.value)


def test_grafana_lookups_report_odd_answers(grafana):
    channel = _grafana(grafana, timeout=0.5)
    grafana.answer_next(Mode(status=200, body=b'{"not":"a list"}'))
    with pytest.raises(ChannelError) as error:
        channel.find_delivered(facts(), {detection().key: "out-1"}, AT)
    assert error.value.unknown
    grafana.answer_next(Mode(status=429, headers={"Retry-After": "5"}))
    with pytest.raises(ChannelError) as limited:
        channel.find_marked(NOTICE, "out-1", AT)
    assert limited.value.retry_after == 5.0


def test_grafana_refused_connection_is_retryable_and_known_not_sent():
    from radar_pipeline.alerts.grafana import GrafanaChannel

    channel = GrafanaChannel(f"http://127.0.0.1:{fake_webhook.closed_port()}", fake_grafana.TOKEN, timeout=2)
    with pytest.raises(ChannelError) as error:
        channel.mark_deploy(NOTICE, "out-1")
    assert error.value.retryable and not error.value.unknown


# Generic webhooks

TEMPLATE = """{
  "text": "radar: {{ summary }}",
  "statement": {{ query|tojson }},
  "statement_quoted": "{{ query }}",
  "kind": "{{ kind }}",
  "factor": {{ regression.change_factor if regression else none }},
  "service": {{ service|tojson }},
  "queryid": {{ statement.queryid }},
  "links": {"deploy": {{ deploy_url|tojson }}, "run": {{ run_url|tojson }}},
  "key": "{{ idempotency_key }}"
}"""


def _hook(webhook: fake_webhook.FakeWebhook, template: str = TEMPLATE, **options):  # type: ignore[no-untyped-def]
    from radar_pipeline.alerts.webhook import WebhookChannel

    return WebhookChannel("ops", webhook.hook_url(), template, [f"127.0.0.1:{webhook.port}"], **options)


def test_a_webhook_posts_the_templates_json_with_an_idempotency_key(webhook):
    channel = _hook(webhook, headers={"Authorization": "Bearer hook-secret-123"})
    assert (channel.name, channel.per_detection, channel.can_check) == ("webhook:ops", True, False)
    assert channel.notify(facts(), [detection(1, query=HOSTILE)], "out-3").remote_id is None
    (call,) = webhook.delivered
    assert call.headers["content-type"].startswith("application/json")
    assert re.fullmatch(r"radar-[0-9a-f]{40}", call.headers["idempotency-key"])
    assert body_key(call) == call.headers["idempotency-key"]
    assert call.headers["authorization"] == "Bearer hook-secret-123"
    body = call.json
    shown = " ".join(HOSTILE.replace("\x1b", "").replace("\u202e", "").split())
    assert body["statement"] == body["statement_quoted"] == shown  # quotes, newlines, {{ }} kept as text, escaped
    assert "{{ 7*7 }}" in body["statement"] and "49" not in body["statement"]
    assert body["text"] == "radar: ×4.00 slower on main after deploy shop v2 (queryid 1001)"
    assert (body["kind"], body["factor"], body["service"], body["queryid"]) == ("regression", 4.0, "shop", 1001)
    assert body["links"] == {
        "deploy": "https://ci.example/deploys/42?a=1&b=(2)",
        "run": "http://localhost:3000/runs/abc",
    }
    channel.notify(facts(service=None), [Detection(key=(5, 10, 77, True), change=CHANGE)], "out-4")
    second = webhook.delivered[1].json
    assert (second["kind"], second["factor"], second["service"]) == ("new", None, None)


def test_a_template_that_fails_only_for_some_detections_fails_that_delivery_finally_and_says_why(webhook):
    """Issue 40: a template that rendered the samples, and raised for a later detection something no TemplateError
    (a filter's assertion: `truncate` with a negative length, here for a negative queryid), left its outbox row
    `sending`, retried forever, and the run red. Whatever the user's template raises is its fault: final, said, and
    nothing sent."""
    template = '{"q": {{ (query | truncate(statement.queryid * 10)) | tojson }}}'
    channel = _hook(webhook, template=template)  # it renders the samples (queryids 1 and 2)
    channel.notify(facts(), [detection(1)], "out-5")
    with pytest.raises(ChannelError) as error:
        channel.notify(facts(), [detection(-1005)], "out-6")  # queryid −5: truncate(−50)
    assert not error.value.retryable and not error.value.unknown
    assert "the template of webhook:ops failed: AssertionError" in str(error.value)
    assert len(webhook.delivered) == 1


def test_every_documented_field_is_in_the_payload_and_given_to_the_template():
    from pathlib import Path

    from radar_pipeline.alerts.webhook import fields, payload

    body = payload(facts(), detection(1), "out-1")
    (found,) = body["detections"]
    names = set(body) | set(body["analysis"]) | set(found) | {f"statement.{k}" for k in found["statement"]}
    names |= {f"regression.{k}" for k in found["regression"]}
    change = payload(facts(), Detection((1, 2, 3, True), change=CHANGE), "x")["detections"][0]["change"]
    names |= {f"change.{k}" for k in change}
    doc = (Path(__file__).resolve().parents[1] / "docs" / "channels.md").read_text()
    assert not [name for name in sorted(names) if f"`{name}`" not in doc]
    assert json.loads(json.dumps(body)) == body  # every field is a JSON value (times as text, NaN as null)
    given = fields(body)
    assert set(given) == set(body["analysis"]) | set(found) | {"delivery_id", "idempotency_key", "payload"}
    assert (given["version"], given["payload"]["version"], given["regression"]) == ("v2", "1", found["regression"])


def test_nan_numbers_reach_the_template_as_null(webhook):
    from dataclasses import replace

    odd = Detection((5, 10, 1, True), regression=replace(regression(1), factor_low=float("nan")))
    template = '{% if regression %}{"low": {{ regression.factor_low|tojson }}, "low2": {{ regression.factor_low }}}'
    template += "{% else %}{}{% endif %}"
    _hook(webhook, template).notify(facts(), [odd], "out-1")
    assert webhook.delivered[0].json == {"low": None, "low2": None}


@pytest.mark.parametrize(
    ("url", "template", "hosts", "words"),
    [
        ("https://hooks.example.com/x", '{"a": 1', ["hooks.example.com"], "syntax error|valid JSON"),
        ("https://hooks.example.com/x", '{"a": {% if %}}', ["hooks.example.com"], "syntax error on line 1"),
        (
            "https://hooks.example.com/x",
            '{"a": "{{ query.__class__.__mro__ }}"}',
            ["hooks.example.com"],
            "sandbox|unsafe",
        ),
        ("https://hooks.example.com/x", '{"a": "{{ query * 100000000 }}"}', ["hooks.example.com"], "over 256 MB"),
        ("https://hooks.example.com/x", '{"a": "{{ no_such_field }}"}', ["hooks.example.com"], "no_such_field"),
        ("https://hooks.example.com/x", '{"a": {{ no_such_field|tojson }}}', ["hooks.example.com"], "no_such_field"),
        ("https://hooks.example.com/x", '{"a": {{ query }}}', ["hooks.example.com"], "valid JSON"),
        ("https://hooks.example.com/x", '{"f": {{ regression.change_factor }}}', ["hooks.example.com"], "load change"),
        ("https://evil.example.com/x?token=abc123", "{}", ["hooks.example.com"], "'evil.example.com:443' are not in"),
        ("https://hooks.example.com.evil.io/x", "{}", ["hooks.example.com"], "are not in"),
        ("https://example.com/x", "{}", ["*.example.com"], "are not in"),
        ("https://hooks.example.com:22/x", "{}", ["hooks.example.com"], "'hooks.example.com:22' are not in"),
        ("https://hooks.example.com/x", "{}", ["hooks.example.com:8443"], "'hooks.example.com:443' are not in"),
        ("http://[::1]:9000/x", "{}", ["[::1]"], r"'\[::1\]:9000' are not in"),
        ("https://hooks.example.com:99999/x", "{}", ["hooks.example.com"], "not a port number"),
        (
            "https://hooks.example.com/x",
            '{"a": {{ statement.queryid * 1e308 * 10 }}}',
            ["hooks.example.com"],
            "not JSON compliant",
        ),
        (
            "https://hooks.example.com/x",
            '{"a": {{ (statement.queryid * 1e308 * 10)|tojson }}}',
            ["hooks.example.com"],
            "not JSON",
        ),
        ("https://hooks.example.com/x", '{"a": Infinity}', ["hooks.example.com"], "Infinity is not JSON"),
        ("https://hooks.example.com/x", '{"a": NaN}', ["hooks.example.com"], "NaN is not JSON"),
        ("https://hooks.example.com/x", '{"a": 1, "b": {"a": 2, "a": 3}}', ["hooks.example.com"], "'a' is given twice"),
        ("http://hooks.example.com/x?token=abc123", "{}", ["hooks.example.com"], "must be https"),
        ("https://u:abc123@hooks.example.com/x", "{}", ["hooks.example.com"], "user name or password"),
        ("ftp://hooks.example.com/x", "{}", ["hooks.example.com"], "https:// URL"),
        ("https://hooks.example.com/x", "{}", [], "RADAR_WEBHOOK_ALLOWED_HOSTS is empty"),
    ],
)
def test_webhook_validation_names_the_setting_and_shows_no_secret(url, template, hosts, words):
    from radar_pipeline.alerts.webhook import validate
    from radar_pipeline.config import ConfigError

    with pytest.raises(ConfigError, match=words) as error:
        validate(url, template, hosts)
    assert str(error.value).startswith("RADAR_WEBHOOKS") and "abc123" not in str(error.value)


def test_webhook_validation_takes_good_urls_and_templates():
    from radar_pipeline.alerts.webhook import validate

    validate("https://a.hooks.example.com:8443/x?k=1", TEMPLATE, ["*.hooks.example.com:8443"])
    validate("http://127.0.0.1:9000/x", "{% if regression %}{}{% else %}[]{% endif %}", ["127.0.0.1:9000"])
    validate("http://127.0.0.1/x", "{}", ["127.0.0.1"])  # no port: the scheme's own
    validate("https://hooks.example.com:443/x", "{}", ["hooks.example.com"])
    for entry in ("[::1]:9000", "[::1]:9000 ", "[::1]:9000"):
        validate("http://[::1]:9000/x", "{}", [entry])
    for entry in ("::1", "[::1]"):
        validate("http://[::1]/x", "{}", [entry])
    validate("https://HOOKS.example.com/x", '{"n": {{ statement.queryid }}}', ["hooks.example.com"])


def configured_channels(environ: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """The channels beyond Slack that `environ` configures, made as a run makes them (defs.resources.destinations:
    the settings tree, secrets through Dagster's EnvVar)."""
    from radar_pipeline.config.settings import settings
    from radar_pipeline.defs.resources import ChannelsResource, destinations

    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    resource = destinations(settings(environ=environ))["channels"].process_config_and_initialize()
    assert isinstance(resource, ChannelsResource)
    return [make() for make in resource.factories().values()]


def test_webhooks_come_from_the_settings_and_are_checked_at_load(tmp_path, monkeypatch):
    from radar_pipeline.config import ConfigError
    from radar_pipeline.config.settings import settings

    template_file = tmp_path / "ops.json.j2"
    template_file.write_text(TEMPLATE)
    hooks = {
        "ops": {"url": "https://hooks.example.com/radar?key=k3y-value", "template_file": str(template_file)},
        "chat": {"url": "https://chat.acme.io/in", "template": "{}", "headers": {"X-Token": "t0ken-value"}},
    }
    environ = {"RADAR_WEBHOOKS": json.dumps(hooks), "RADAR_WEBHOOK_ALLOWED_HOSTS": "hooks.example.com, *.acme.io"}
    channels = configured_channels(environ, monkeypatch)
    assert [c.name for c in channels] == ["webhook:ops", "webhook:chat"]
    assert "k3y-value" not in repr(channels) and configured_channels({}, monkeypatch) == []
    hooks["chat"]["url"] = "https://chat.elsewhere.io/in"
    with pytest.raises(
        ConfigError, match=r"RADAR_WEBHOOKS \(chat\): the URL's host and port 'chat.elsewhere.io:443' are not"
    ):
        configured_channels({**environ, "RADAR_WEBHOOKS": json.dumps(hooks)}, monkeypatch)
    for bad, words in (
        ("[1]", "JSON object"),
        ('{"Bad Name": {"url": "https://hooks.example.com", "template": "{}"}}', "name"),
        ('{"ops": {"url": "https://h.example.com", "template": "{}", "template_file": "/t"}}', "not both"),
        ('{"ops": {"url": "https://hooks.example.com", "template": "{}", "method": "PUT"}}', "unknown keys"),
        ('{"ops": {"url": "https://hooks.example.com", "template": "{}", "headers": {"X": "caf\u00e9"}}}', "ASCII"),
    ):
        with pytest.raises(ConfigError, match=words):
            settings(environ={**environ, "RADAR_WEBHOOKS": bad})
    with pytest.raises(ConfigError, match="RADAR_WEBHOOK_ALLOWED_HOSTS is not"):
        settings(environ={"RADAR_WEBHOOKS": json.dumps(hooks)})


def test_a_template_that_fails_on_a_detection_is_a_final_error(webhook):
    template = '{% if regression %}{"f": {{ regression.change_factor }}}{% else %}{"x": 1}{% endif %}'
    channel = _hook(webhook, template)
    odd = Detection((5, 10, 1, True))  # neither a regression nor a load change: the else branch
    channel.notify(facts(), [odd], "out-1")
    assert webhook.delivered[-1].json == {"x": 1}


@pytest.mark.parametrize(
    ("mode", "retryable", "unknown", "retry_after", "words"),
    [
        (Mode(status=400, body=b"bad payload", content_type="text/plain"), False, False, None, "bad payload"),
        (Mode(status=404, body=b"no such hook", content_type="text/plain"), False, False, None, "404"),
        (Mode(status=429, headers={"Retry-After": "12"}), True, False, 12.0, "429"),
        (Mode(status=503, body=b"down", content_type="text/plain"), True, False, None, "503"),
        (Mode(status=200, body=PORTAL, content_type="text/html"), True, True, None, "not webhook:ops"),
        (Mode(usual=True, delay=2.0), True, True, None, "no answer"),
        (Mode(reset=True), True, True, None, "no answer"),
    ],
    ids=["400", "404", "429", "503", "html", "timeout", "reset"],
)
def test_webhook_answers(webhook, mode, retryable, unknown, retry_after, words):
    webhook.answer_next(mode)
    with pytest.raises(ChannelError) as error:
        _hook(webhook, timeout=0.5).notify(facts(), [detection()], "out-1")
    assert (error.value.retryable, error.value.unknown, error.value.retry_after) == (retryable, unknown, retry_after)
    assert words in str(error.value)


def test_webhook_success_answers_and_secrets(webhook):
    from radar_pipeline.alerts.webhook import WebhookChannel

    for status in (200, 201, 202, 204):
        webhook.answer_next(Mode(status=status, usual=False, taken=True))
        _hook(webhook).notify(facts(), [detection()], "out-1")
    url = webhook.hook_url() + "?key=k3y-value-9"
    echo = f"<html>denied {url} Bearer hook-secret-123</html>".encode()
    webhook.answer_next(Mode(status=403, body=echo, content_type="text/html"))
    here = [f"127.0.0.1:{webhook.port}"]
    channel = WebhookChannel("ops", url, "{}", here, headers={"Authorization": "Bearer hook-secret-123"})
    with pytest.raises(ChannelError) as error:
        channel.notify(facts(), [detection()], "out-1")
    assert "k3y-value-9" not in str(error.value) and "hook-secret-123" not in str(error.value)
    port = fake_webhook.closed_port()
    refused = WebhookChannel("ops", f"http://127.0.0.1:{port}/x", "{}", [f"127.0.0.1:{port}"])
    with pytest.raises(ChannelError) as unreachable:
        refused.notify(facts(), [detection()], "out-1")
    assert unreachable.value.retryable and not unreachable.value.unknown


def test_the_documented_example_template_renders_what_the_docs_say(webhook):
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[1] / "docs" / "channels.md").read_text()
    template = re.search(r"```jinja\n(.*?)```", doc, re.S).group(1)  # type: ignore[union-attr]
    _hook(webhook, template).notify(facts(), [detection(1)], "out-1")
    assert webhook.delivered[0].json == {
        "text": "radar: ×4.00 slower on main after deploy shop v2 (queryid 1001)",
        "severity": "critical",
        "details": {
            "target": "main",
            "deploy": "shop-v2",
            "service": "shop",
            "statement": "SELECT * FROM orders WHERE customer_id = $1",
            "queryid": 1001,
            "factor": 4.0,
            "links": {"deploy": "https://ci.example/deploys/42?a=1&b=(2)", "run": "http://localhost:3000/runs/abc"},
        },
    }


def test_teams_and_grafana_come_from_the_settings(monkeypatch):
    from radar_pipeline.config import ConfigError
    from radar_pipeline.config.settings import settings

    assert configured_channels({}, monkeypatch) == []
    url = "https://prod-1.westeurope.logic.azure.com/workflows/1/invoke?sv=1.0&sig=Tm8secret"
    (teams,) = configured_channels({"RADAR_TEAMS_WEBHOOK_URL": url}, monkeypatch)
    assert "Tm8secret" not in repr(teams) and "/workflows/1/invoke?***" in repr(teams)
    monkeypatch.delenv("RADAR_TEAMS_WEBHOOK_URL")
    environ = {
        "RADAR_GRAFANA_URL": "https://grafana.example.com/g/",
        "RADAR_GRAFANA_TOKEN": "glsa_Gf6secret",
        "RADAR_GRAFANA_DASHBOARD_UID": "radar-db",
        "RADAR_GRAFANA_PANEL_ID": "7",
    }
    (grafana,) = configured_channels(environ, monkeypatch)
    assert "Gf6secret" not in repr(grafana)
    assert grafana._api == "https://grafana.example.com/g/api/annotations"
    assert grafana._place == {"dashboardUID": "radar-db", "panelId": 7}
    for bad, words in (
        ({"RADAR_GRAFANA_URL": "https://g.example.com"}, "RADAR_GRAFANA_TOKEN is not"),
        ({"RADAR_GRAFANA_TOKEN": "glsa_Gf6secret"}, "RADAR_GRAFANA_URL is not"),
        ({**environ, "RADAR_GRAFANA_DASHBOARD_UID": "a b"}, "RADAR_GRAFANA_DASHBOARD_UID must be"),
        ({**environ, "RADAR_GRAFANA_PANEL_ID": "x"}, "RADAR_GRAFANA_PANEL_ID must be a whole number"),
        ({"RADAR_TEAMS_WEBHOOK_URL": url.replace("https", "http")}, "RADAR_TEAMS_WEBHOOK_URL must be an https"),
        ({"RADAR_WEBHOOK_ALLOWED_HOSTS": "a.example.com, bad host"}, "RADAR_WEBHOOK_ALLOWED_HOSTS must list"),
        ({"RADAR_WEBHOOK_ALLOWED_HOSTS": "a.example.com:99999"}, "RADAR_WEBHOOK_ALLOWED_HOSTS must list"),
        ({"RADAR_WEBHOOK_ALLOWED_HOSTS": "[::1]x"}, "RADAR_WEBHOOK_ALLOWED_HOSTS must list"),
    ):
        with pytest.raises(ConfigError, match=words) as error:
            settings(environ=bad)
        assert "Gf6secret" not in str(error.value) and "Tm8secret" not in str(error.value)
    hosts = settings(environ={"RADAR_WEBHOOK_ALLOWED_HOSTS": "[::1]:8080, Hooks.Example.com:8443, *.acme.io"})
    assert hosts.webhook_allowed_hosts == ["[::1]:8080", "hooks.example.com:8443", "*.acme.io"]


def body_key(call: fake_webhook.Call) -> str | None:
    """The `key` a template put in the body (TEMPLATE's: its idempotency_key)."""
    return call.json.get("key")


def test_the_idempotency_key_is_the_same_for_every_attempt_at_a_row(webhook):
    from radar_pipeline.alerts.webhook import WebhookChannel

    template = '{"key": "{{ idempotency_key }}", "delivery": "{{ delivery_id }}"}'
    ops = _hook(webhook, template)
    chat = WebhookChannel("chat", webhook.hook_url("chat"), template, [f"127.0.0.1:{webhook.port}"])
    ops.notify(facts(), [detection(1)], "claim-a")  # an attempt whose answer was lost ...
    ops.notify(facts(), [detection(1)], "claim-b")  # ... and the retry, under a new claim
    first, retry = webhook.delivered
    assert first.headers["idempotency-key"] == retry.headers["idempotency-key"] == body_key(first) == body_key(retry)
    assert (first.json["delivery"], retry.json["delivery"]) == ("claim-a", "claim-b")
    ops.notify(facts(), [detection(2)], "claim-a")  # another statement
    ops.notify(facts(analysis_id="shop-v3"), [detection(1)], "claim-a")  # another deploy
    ops.notify(facts(target="replica"), [detection(1)], "claim-a")  # another target
    chat.notify(facts(), [detection(1)], "claim-a")  # another webhook
    keys = [call.headers["idempotency-key"] for call in webhook.delivered[1:]]
    assert len(set(keys)) == len(keys) == 5


def test_compressed_answers_are_read_decoded_and_bounded(grafana, webhook):
    grafana.compress = True  # every answer gzip-compressed, as from a compressing proxy
    channel = _grafana(grafana)
    added = channel.notify(facts(), [detection(1)], "out-1")
    assert added == Delivered(str(grafana.annotations[0]["id"]))
    since = AT + timedelta(hours=1)
    assert channel.find_delivered(facts(), {detection(1).key: "out-1"}, since) == {detection(1).key: added}
    assert channel.find_marked(NOTICE, "out-5", since) is None
    assert {call.headers.get("accept-encoding") for call in grafana.calls} == {"identity"}
    refusal = json.dumps({"error": {"code": "InvalidRequestContent", "message": "card version 9 is not known"}})
    webhook.answer_next(Mode(status=400, body=refusal.encode(), gzip=True))
    with pytest.raises(ChannelError, match="card version 9 is not known") as refused:
        _teams(webhook).notify(facts(), [detection()], "out-1")
    assert not refused.value.retryable
    bomb = b"{" + b" " * 8_000_000 + b"}"  # 8 MB of JSON, about 8 KB compressed
    webhook.answer_next(Mode(status=200, body=bomb, gzip=True))
    with pytest.raises(ChannelError, match="decodes to over 262144 bytes") as bounded:
        _teams(webhook).notify(facts(), [detection()], "out-1")
    assert bounded.value.retryable and bounded.value.unknown
    webhook.answer_next(Mode(status=200, body=b"{}", headers={"Content-Encoding": "gzip"}))  # says gzip, is not
    with pytest.raises(ChannelError, match="does not decode") as broken:
        _hook(webhook).notify(facts(), [detection()], "out-1")
    assert broken.value.unknown


# A render process's caps: 256 MB and 10 s (an idle render takes about 0.15 s). The loop's tests lower the time cap to
# 2 s for the loop's render only: they hold that the loop is stopped, which no load can prevent.
FOREVER = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"


@pytest.mark.parametrize(
    ("template", "words"),
    [
        ('{"a": "{{ query * 100000000 }}"}', "needed over 256 MB of memory"),
        ('{% set ns = namespace(s="x") %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{}',
         "needed over 256 MB of memory"),
        ('{% set ns = namespace(l=[0]) %}{% for i in range(40) %}{% set ns.l = ns.l + ns.l %}{% endfor %}{}',
         "needed over 256 MB of memory"),
        ('[{% for i in range(100) %}"{{ "x" * 500000 }}",{% endfor %}1]', "rendered over 524,288 bytes"),
        (FOREVER + "{}", "ran over 2 seconds: stopped"),
        ("{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}", "failed: RecursionError"),
    ],
    ids=["repeat", "doubling-text", "doubling-list", "body", "forever", "recursion"],
)  # fmt: skip
def test_a_template_is_stopped_by_its_render_process_caps_when_the_definitions_load(monkeypatch, template, words):
    """Each of these would take the machine's memory or run forever in the code location's process: in the render
    process, its cap stops it, and the load fails naming the webhook and the cap. The parent's memory stays small."""
    import tracemalloc

    from radar_pipeline.alerts import webhook
    from radar_pipeline.config import ConfigError

    if "forever" in words or "2 seconds" in words:
        monkeypatch.setattr(webhook, "RENDER_SECONDS", 2.0)
    tracemalloc.start()
    try:
        with pytest.raises(ConfigError, match=words) as error:
            webhook.validate("https://hooks.example.com/x", template, ["hooks.example.com"])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert str(error.value).startswith("RADAR_WEBHOOKS: for ")
    assert peak < 5_000_000, f"{peak:,} bytes at the peak"


@pytest.mark.parametrize(
    ("stop", "words"),
    [
        (FOREVER, "ran over 2 seconds: stopped"),
        ("{{ query * 1000000000 }}", "needed over 256 MB of memory"),
        ('{{ "%d" % query }}', "failed: TypeError"),
    ],
    ids=["forever", "memory", "raises"],
)
def test_a_template_stopped_only_for_some_data_fails_that_delivery_finally_with_its_reason_and_no_secret(
    webhook, monkeypatch, caplog, stop, words
):
    """It renders the samples (the load passes), and is stopped for a detection with a negative queryid: that
    delivery is final with the reason, nothing is sent, no header or query string is shown, the next one is sent."""
    from radar_pipeline.alerts import webhook as hooks

    caplog.set_level(logging.DEBUG)
    template = "{% if statement.queryid < 0 %}" + stop + '{% endif %}{"q": {{ statement.queryid }}}'
    channel = hooks.WebhookChannel(
        "ops",
        webhook.hook_url() + "?key=k3y-value-9",
        template,
        [f"127.0.0.1:{webhook.port}"],
        headers={"Authorization": "Bearer hook-secret-123"},
    )
    monkeypatch.setattr(hooks, "RENDER_SECONDS", 2.0)  # the normal renders (the load's, the next one) keep 10 s
    with pytest.raises(ChannelError) as error:
        channel.notify(facts(), [detection(-1005)], "out-1")
    monkeypatch.undo()
    assert not error.value.retryable and not error.value.unknown
    assert f"the template of webhook:ops {words}" in str(error.value), str(error.value)
    shown = f"{error.value} {error.value!r} {channel!r} {caplog.text}"
    assert "hook-secret-123" not in shown and "k3y-value-9" not in shown
    assert webhook.calls == []
    channel.notify(facts(), [detection(1)], "out-2")
    assert webhook.delivered[0].json == {"q": 1001}


def test_without_a_template_a_webhook_posts_the_versioned_payload(webhook):
    """The default: the fixed payload (version 1, Alertmanager's shape: an envelope and a list of detections), through
    the real client to the stand-in, no render process, no secret in it."""
    from radar_pipeline.alerts.webhook import WebhookChannel

    channel = WebhookChannel(
        "ops", webhook.hook_url(), None, [f"127.0.0.1:{webhook.port}"], headers={"X-Token": "t0ken-value-77"}
    )
    channel.notify(facts(), [detection(1, query=HOSTILE)], "out-1")
    channel.notify(facts(period=(AT, AT + timedelta(hours=1))), [Detection((5, 10, 77, True), change=CHANGE)], "out-2")
    first, second = webhook.delivered
    assert "t0ken-value-77" not in first.body.decode() and first.headers["x-token"] == "t0ken-value-77"
    body = first.json
    assert list(body) == ["version", "status", "webhook", "delivery_id", "idempotency_key", "analysis", "detections"]
    assert (body["version"], body["status"], body["webhook"], body["delivery_id"]) == ("1", "firing", "ops", "out-1")
    assert body["idempotency_key"] == first.headers["idempotency-key"]
    assert body["analysis"] == {
        "analysis_id": "shop-v2",
        "deploy_id": "shop-v2",
        "periodic": False,
        "period_start": None,
        "period_end": None,
        "target": "main",
        "service": "shop",
        "version": "v2",
        "deploy_url": "https://ci.example/deploys/42?a=1&b=(2)",
        "run_url": "http://localhost:3000/runs/abc",
        "split_at": "2026-11-29T12:00:00+00:00",
        "state": "fail",
        "load_ms_per_min_before": 100.0,
        "load_ms_per_min_after": 250.0,
    }
    (found,) = body["detections"]
    assert (found["kind"], found["change"], found["canary"]) == ("regression", None, None)
    assert found["summary"] == "×4.00 slower on main after deploy shop v2 (queryid 1001)"
    assert found["statement"] == {"dbid": 5, "userid": 10, "queryid": 1001, "toplevel": True}
    assert found["query"] == " ".join(HOSTILE.replace("\x1b", "").replace("\u202e", "").split())
    regression = found["regression"]
    assert (regression["change_factor"], regression["factor_low"], regression["factor_high"]) == (4.0, 2.5, 3.5)
    assert (regression["cause"], regression["change_at"]) == ("plan_changed", "2026-11-29T12:00:30+00:00")
    periodic = second.json
    assert (periodic["analysis"]["periodic"], periodic["analysis"]["deploy_id"]) == (True, None)
    assert periodic["analysis"]["period_end"] == "2026-11-29T13:00:00+00:00"
    assert (periodic["detections"][0]["kind"], periodic["detections"][0]["regression"]) == ("new", None)
    assert periodic["detections"][0]["change"]["share_of_time_after"] == 0.36
    assert periodic["idempotency_key"] != body["idempotency_key"]


def test_a_bounded_template_still_does_what_templates_do(webhook):
    template = """{
  "list": [{% for q in [1, 2, 3] %}{{ q }}{% if not loop.last %}, {% endif %}{% endfor %}],
  "joined": {{ range(3)|map("string")|join("-")|tojson }},
  "line": "{{ "%-8s|%5.1f" % (service, regression.change_factor if regression else 0) }}",
  "fmt": "{{ "{:>6}".format(statement.queryid) }}",
  "pad": "{{ kind|center(12) }}",
  "cat": "{{ service ~ "/" ~ version }}",
  "big": {{ (2 ** 64) * statement.queryid }},
  "text": {{ (query ~ " " ~ summary)|wordwrap(40)|tojson }},
  "indented": {{ statement|tojson(indent=2) }},
  "sorted": [{% for k, v in statement|dictsort %}"{{ k }}={{ v }}"{% if not loop.last %}, {% endif %}{% endfor %}],
  "filtered": "{{ "%s@%s (%d)"|format(service, target, statement.queryid) }}",
  "named": "{{ "%(s)s/%(v)s" % {"s": service, "v": version} }}",
  "mapped": "{{ "{s}:{n:>5}".format_map({"s": service, "n": statement.queryid}) }}",
  "short": "{{ query|truncate(20) }}",
  "rule": "{{ "=" * 40 }}",
  "million": {{ 10 ** 12 }},
  "share": "{{ "{:.1%}".format(0.256) }}",
  "long": {{ (("%s" % query) * 100)|length }}
}"""
    _hook(webhook, template).notify(facts(), [detection(1)], "out-1")
    body = webhook.delivered[0].json
    assert body["list"] == [1, 2, 3] and body["joined"] == "0-1-2" and body["cat"] == "shop/v2"
    assert (body["line"], body["fmt"], body["pad"]) == ("shop    |  4.0", "  1001", " regression ")
    assert body["big"] == 2**64 * 1001 and "orders" in body["text"]
    assert body["indented"] == {"dbid": 5, "userid": 10, "queryid": 1001, "toplevel": True}
    assert body["sorted"] == ["dbid=5", "queryid=1001", "toplevel=true", "userid=10"]
    assert (body["filtered"], body["named"], body["mapped"]) == ("shop@main (1001)", "shop/v2", "shop: 1001")
    assert body["short"] == "SELECT * FROM...", body["short"]
    assert (body["rule"], body["million"], body["share"]) == ("=" * 40, 10**12, "25.6%")
    assert body["long"] == 100 * len("SELECT * FROM orders WHERE customer_id = $1")


def test_a_canary_detection_escapes_its_roles_for_each_channel(webhook, grafana):
    """A canary arm's detection on Teams, Grafana and a webhook (the stand-ins), with role names holding what each
    channel's markup acts on: escaped for each, shown on the real target, never the outbox's canary:<target>."""
    from dataclasses import replace

    from radar_pipeline.alerts.pagerduty import trigger_event
    from radar_pipeline.alerts.render import CANARY_CAUSE, CanaryArms
    from radar_pipeline.alerts.teams import md

    canary_role, stable_role = "web*_[x](http://evil)_{{DATE(2017-02-14T06:08:39Z)}}", "<b>stable</b>\u202e"
    arms = CanaryArms("main", canary_role, stable_role, (AT, AT + timedelta(minutes=30)))
    shown = facts(target="canary:main", canary=arms)
    found = Detection(key=(5, 10, 1001, True), regression=replace(regression(1), cause=CANARY_CAUSE))
    _teams(webhook).notify(shown, [found], "out-1")
    card = "\n".join(_texts(_card(webhook.delivered[-1])))
    assert f"canary role {md(canary_role)}" in card and f"stable role {md('<b>stable</b>')}" in card, card
    assert "[x](http" not in card.replace("\\[x\\](http", "") and "\u202e" not in card and "canary:" not in card
    _grafana(grafana).notify(shown, [found], "out-2")
    (annotation,) = grafana.annotations
    assert "&lt;b&gt;stable&lt;/b&gt;" in annotation["text"] and "<b>stable" not in annotation["text"], annotation
    assert "\u202e" not in annotation["text"] and "target:main" in annotation["tags"], annotation
    assert annotation["timeEnd"] - annotation["time"] == 30 * 60 * 1000, annotation  # a region over the window
    _hook(webhook).notify(shown, [found], "out-3")
    body = webhook.delivered[-1].json
    assert (
        "\u202e" not in body["text"] and "canary:" not in body["text"] and "stable role <b>stable</b>" in body["text"]
    )
    event = trigger_event(shown, found)
    assert event["payload"]["source"] == "main" and "\u202e" not in event["payload"]["summary"], event
    assert event["payload"]["custom_details"]["stable_role"] == "<b>stable</b>", event
