"""The durable outbox against the real slack-sdk and a local Slack: rows are committed before anything is sent, an
attempt whose outcome is unknown is looked for before it is sent again (token mode), a long Retry-After is waited out
between runs, and old or reanalysed deploys are recorded without a post. Each test says what was lost or duplicated."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta

import dagster as dg
import pytest
import sqlalchemy as sa

from radar_pipeline.defs.alerts.regression_alerts import regression_alerts
from radar_pipeline.defs.deploys.deploy_verdicts import REANALYSIS_TAG
from radar_pipeline.defs.resources import AnalysisResource, ChannelsResource, SlackResource, WarehouseResource

from . import fake_slack
from .fake_slack import PORTAL, Odd
from .test_alerts import _alert, _outbox, analysed  # noqa: F401 - the fixture is used by name

POST = "/api/chat.postMessage"
# The client's bound when the stand-in holds its answer (a timeout): short, so the suite does not wait out 10 s a case.
HELD_TIMEOUT = 3


def _bot(slack: fake_slack.FakeSlack, **kwargs: object) -> SlackResource:
    return SlackResource(token="xoxb-test-token", channel="C0RADAR", base_url=slack.api_url, **kwargs)  # type: ignore[arg-type]


def _row(warehouse) -> dict:
    with warehouse.connect() as conn:
        row = conn.execute(
            sa.text(
                "SELECT status, attempts, message_ts, outcome_unknown, delivery_id, "
                "extract(epoch FROM next_attempt_at - now()) AS wait_s FROM radar.alert"
            )
        ).one()
    return dict(row._mapping)


def _backoff_passes(warehouse, lease: bool = False) -> None:
    """Drive time through the recorded timestamps: the backoff (and, with `lease`, a stopped run's lease) is over."""
    with warehouse.begin() as conn:
        conn.execute(sa.text("UPDATE radar.alert SET next_attempt_at = now()"))
        if lease:
            conn.execute(sa.text("UPDATE radar.alert SET claimed_at = claimed_at - interval '1 day'"))


def _wait_for(condition, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def test_an_answer_after_the_timeout_is_found_in_the_channel_not_posted_again(analysed, warehouse_url, slack):  # noqa: F811
    held = slack.hold_next(POST)  # Slack takes the message, answers only after the client gave up
    first, log = _alert(warehouse_url, _bot(slack, timeout_seconds=HELD_TIMEOUT))
    held.set()
    assert first.success and "may have been posted" in log
    row = _row(analysed)
    assert (row["status"], row["outcome_unknown"]) == ("pending", True)
    assert len(slack.messages()) == 1
    assert slack.messages()[0]["metadata"]["event_payload"]["delivery"] == str(row["delivery_id"])

    _backoff_passes(analysed)
    second, log = _alert(warehouse_url, _bot(slack))
    assert second.success and "posted after all" in log
    assert len(slack.calls_to("/api/conversations.history")) == 1
    assert len(slack.calls_to(POST)) == 1  # duplicated: nothing
    assert _outbox(analysed) == [(11, "C0RADAR", "sent", 2, slack.messages()[0]["ts"])]


def test_a_run_killed_after_slack_accepted_does_not_post_twice(analysed, warehouse_url, slack):  # noqa: F811
    """The outbox row is committed (`sending`, with its delivery id) before the message goes out; the run dies
    before it can mark `sent`; the next attempt, after the lease, finds the message in the channel."""
    slack.answer_late(POST, 60.0)
    script = (
        "import dagster as dg\n"
        "from radar_pipeline.defs.alerts.regression_alerts import regression_alerts\n"
        "from radar_pipeline.defs.resources import AnalysisResource, ChannelsResource, SlackResource\n"
        "from radar_pipeline.defs.resources import WarehouseResource\n"
        "with dg.instance_for_test() as instance:\n"
        "    instance.add_dynamic_partitions('deploys', ['d-7'])\n"
        "    dg.materialize([regression_alerts], partition_key='d-7', instance=instance, resources={\n"
        f"        'warehouse': WarehouseResource(url={warehouse_url!r}), 'channels': ChannelsResource(),\n"
        "        'analysis': AnalysisResource(),\n"
        f"        'slack': SlackResource(token='xoxb-test-token', channel='C0RADAR', base_url={slack.api_url!r},\n"
        "                               timeout_seconds=120)})\n"
    )
    child = subprocess.Popen([sys.executable, "-c", script], env=os.environ.copy())
    try:
        _wait_for(lambda: len(slack.messages()) == 1, "the message to reach Slack")
        sending = _row(analysed)
        assert sending["status"] == "sending" and sending["delivery_id"] is not None  # committed before the send
        with analysed.connect() as conn:  # and no transaction is open on the outbox while Slack is called
            open_tx = conn.execute(
                sa.text(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                    "AND state LIKE 'idle in transaction%' AND pid <> pg_backend_pid()"
                )
            ).scalar_one()
        assert open_tx == 0
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert _row(analysed)["status"] == "sending"  # the run died before marking it

    _backoff_passes(analysed, lease=True)
    again, log = _alert(warehouse_url, _bot(slack))
    assert again.success and "posted after all" in log
    assert len(slack.calls_to(POST)) == 1  # lost: nothing; duplicated: nothing
    assert _row(analysed)["status"] == "sent"


def test_a_long_retry_after_is_waited_out_between_runs(analysed, warehouse_url, slack):  # noqa: F811
    slack.fail_next(POST, (429, {"Retry-After": "600"}))
    first, _ = _alert(warehouse_url, _bot(slack))
    assert first.success and len(slack.calls_to(POST)) == 1  # not retried inside the run
    row = _row(analysed)
    assert row["status"] == "pending" and 590 < row["wait_s"] <= 600
    waiting, _ = _alert(warehouse_url, _bot(slack))
    assert waiting.asset_materializations_for_node("regression_alerts")[0].metadata["to_send"].value == 0
    assert len(slack.calls_to(POST)) == 1
    _backoff_passes(analysed)
    assert _alert(warehouse_url, _bot(slack))[0].success
    assert len(slack.calls_to(POST)) == 2 and _row(analysed)["status"] == "sent"


def test_a_webhook_cannot_check_and_sends_again(analysed, warehouse_url, slack):  # noqa: F811
    """What webhook mode guarantees: at least once. After a timeout the message is sent again, and may appear twice."""
    held = slack.hold_next(slack.webhook_url.split(str(slack.port))[1])  # answered after the client gave up
    hook = SlackResource(webhook_url=slack.webhook_url, timeout_seconds=HELD_TIMEOUT)
    first, _ = _alert(warehouse_url, hook)
    held.set()
    assert first.success and _row(analysed)["outcome_unknown"]
    _backoff_passes(analysed)
    second, log = _alert(warehouse_url, hook)
    assert second.success and "may appear twice" in log
    assert len(slack.messages()) == 2 and _row(analysed)["status"] == "sent"


def test_alerts_of_an_old_deploy_are_recorded_not_sent(analysed, warehouse_url, slack):  # noqa: F811
    result, _ = _alert(warehouse_url, _bot(slack, alert_max_age_hours=0.01))  # the window closed 100 s ago
    assert result.success and not slack.calls_to(POST)
    row = _row(analysed)
    assert row["status"] == "withheld"


def test_the_reanalysis_never_posts(analysed, warehouse_url, slack):  # noqa: F811
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("deploys", ["d-7"])
        result = dg.materialize(
            [regression_alerts],
            partition_key="d-7",
            resources={
                "warehouse": WarehouseResource(url=warehouse_url),
                "analysis": AnalysisResource(),
                "slack": _bot(slack),
                "channels": ChannelsResource(),
            },
            instance=instance,
            tags={REANALYSIS_TAG: "true"},
        )
    assert result.success and not slack.calls_to(POST)
    assert _row(analysed)["status"] == "withheld"


@pytest.mark.parametrize("value", ["0", "-1", "abc", "9000"])
def test_the_age_limit_is_validated(value):
    from radar_pipeline.config import ConfigError
    from radar_pipeline.config.settings import settings

    with pytest.raises(ConfigError, match="RADAR_ALERT_MAX_AGE_HOURS"):
        settings(environ={"RADAR_ALERT_MAX_AGE_HOURS": value})
    assert settings(environ={}).alert_max_age_hours == 24.0
    assert settings(environ={"RADAR_ALERT_MAX_AGE_HOURS": "2.5"}).alert_max_age_hours == 2.5


JSON = "application/json; charset=utf-8"
HISTORY = "/api/conversations.history"
HOOK = "/hook/T000/B000/secret"
# Every way an answer can come, and what it means. Slack's own answers: its JSON (the Web API), `ok` or an error code
# (a webhook). Anything else stood between radar and Slack (a proxy's or a captive portal's page, a cut or empty body,
# JSON that is not an object, a reset, a timeout): whether Slack got the message cannot be told.
ANSWERS = {
    "slack's refusal": (Odd(200, b'{"ok": false, "error": "channel_not_found"}', JSON), "refused"),
    "an html page with 200": (Odd(200, PORTAL), "unknown"),
    "malformed json": (Odd(200, b'{"ok": tr', JSON), "unknown"),
    "an empty body": (Odd(200, b"", JSON), "unknown"),
    "a json list": (Odd(200, b"[]", JSON), "unknown"),
    "a json string": (Odd(200, b'"ok"', JSON), "unknown"),
    "json null": (Odd(200, b"null", JSON), "unknown"),
    "an object that is not slack's": (Odd(200, b'{"message": "Forbidden"}', JSON), "unknown"),
    "bytes that are not utf-8": (Odd(200, b"\xff\xfe<html>", "text/html; charset=utf-8"), "unknown"),
    "an html page with 403": (Odd(403, PORTAL), "unknown"),
    "an html page with 502": (Odd(502, PORTAL), "unknown"),
    "a connection reset": (Odd(reset=True), "unknown"),
    "a timeout": (None, "unknown"),
}
HOOK_ANSWERS = {
    "slack's refusal": (Odd(404, b"channel_not_found", "text/plain"), "refused"),
    "an html page with 200": (Odd(200, PORTAL), "unknown"),
    "an empty body": (Odd(200, b"", "text/plain"), "unknown"),
    "json": (Odd(200, b'{"ok": true}', JSON), "unknown"),
    "an html page with 502": (Odd(502, PORTAL), "unknown"),
    "a connection reset": (Odd(reset=True), "unknown"),
    "a timeout": (None, "unknown"),
}


def _outcome(call) -> str:  # type: ignore[no-untyped-def]
    from radar_pipeline.alerts.slack import DeliveryError

    try:
        call()
    except DeliveryError as exc:
        if exc.unknown:
            assert exc.retryable and "may have been posted" in str(exc)
            assert "<" not in str(exc)[160:] and len(str(exc)) < 300  # a page is quoted short, not whole
            return "unknown"
        assert not exc.retryable
        return "refused"
    return "delivered"


def _give(slack: fake_slack.FakeSlack, path: str, answer: Odd | None) -> threading.Event:
    """Script the next answer to `path`; a timeout (None) is an answer held until the returned event is set, which
    the test sets once the client (HELD_TIMEOUT) has given up."""
    if answer is None:
        return slack.hold_next(path)
    slack.answer_next(path, answer, answer, answer)  # the first try and any retry inside it
    return threading.Event()


@pytest.mark.parametrize("name", list(ANSWERS))
def test_every_answer_to_a_post_is_delivered_refused_or_unknown(slack, name):
    from radar_pipeline.alerts.slack import SlackSender

    answer, expected = ANSWERS[name]
    bot = SlackSender(token="xoxb-t", channel="C0RADAR", base_url=slack.api_url, timeout=HELD_TIMEOUT)
    assert _outcome(lambda: bot.send("x", [], delivery_id="d1")) == "delivered"
    held = _give(slack, POST, answer)
    assert _outcome(lambda: bot.send("x", [], delivery_id="d2")) == expected
    held.set()


@pytest.mark.parametrize("name", list(HOOK_ANSWERS))
def test_every_answer_to_a_webhook_is_delivered_refused_or_unknown(slack, name):
    from radar_pipeline.alerts.slack import SlackSender

    answer, expected = HOOK_ANSWERS[name]
    hook = SlackSender(webhook_url=slack.webhook_url, timeout=HELD_TIMEOUT)
    assert _outcome(lambda: hook.send("x", [])) == "delivered"
    held = _give(slack, HOOK, answer)
    assert _outcome(lambda: hook.send("x", [])) == expected
    held.set()


@pytest.mark.parametrize("name", [*ANSWERS, "messages that are not a list"])
def test_every_answer_to_the_history_lookup_is_read_refused_or_unknown(slack, name):
    from radar_pipeline.alerts.channel import Delivered
    from radar_pipeline.alerts.slack import SlackSender

    answer, expected = ANSWERS.get(name, (Odd(200, b'{"ok": true, "messages": "none"}', JSON), "unknown"))
    bot = SlackSender(token="xoxb-t", channel="C0RADAR", base_url=slack.api_url, timeout=HELD_TIMEOUT)
    bot.send("x", [], delivery_id="d1")
    since = datetime.now(UTC) - timedelta(minutes=1)
    key = (5, 10, 11, True)
    assert bot.find_delivered(None, {key: "d1"}, since) == {key: Delivered(ts=slack.messages()[0]["ts"])}
    held = _give(slack, HISTORY, answer)
    assert _outcome(lambda: bot.find_delivered(None, {key: "d1"}, since)) == expected
    held.set()


@pytest.mark.parametrize("taken", [False, True], ids=["not-posted", "posted"])
def test_an_html_page_instead_of_slacks_answer_is_retried_after_a_look_in_the_history(
    analysed,  # noqa: F811
    warehouse_url,
    slack,
    taken,
):
    """A TLS-inspecting proxy or a captive portal answers 200 with its page: the message may or may not have reached
    Slack. It was marked `failed` for good (lost when it had not); now it waits, and the next attempt looks first."""
    slack.answer_next(POST, Odd(200, PORTAL, taken=taken))
    first, log = _alert(warehouse_url, _bot(slack))
    assert first.success and "not Slack's (HTTP 200: <!DOCTYPE html>" in log
    row = _row(analysed)
    assert (row["status"], row["outcome_unknown"]) == ("pending", True)

    _backoff_passes(analysed)
    second, log = _alert(warehouse_url, _bot(slack))
    assert second.success and len(slack.calls_to(HISTORY)) == 1
    assert len(slack.messages()) == 1  # lost: nothing; duplicated: nothing
    assert len(slack.calls_to(POST)) == (1 if taken else 2)
    assert _row(analysed)["status"] == "sent" and ("posted after all" in log) == taken


def test_a_malformed_history_answer_leaves_the_alert_pending_and_the_run_finishes(analysed, warehouse_url, slack):  # noqa: F811
    """The look in the history got a 200 with a cut JSON body: the run crashed on a JSONDecodeError and left the row
    `sending` for its lease. Now the row waits as `pending` and the next attempt looks again."""
    held = slack.hold_next(POST)  # answered after the client gave up
    _alert(warehouse_url, _bot(slack, timeout_seconds=HELD_TIMEOUT))
    held.set()
    _backoff_passes(analysed)
    slack.answer_next(HISTORY, Odd(200, b'{"ok": true, "messages": [{"ts": "17', JSON))
    second, log = _alert(warehouse_url, _bot(slack))
    assert second.success and "cannot tell whether an earlier attempt was posted" in log
    row = _row(analysed)
    assert (row["status"], row["outcome_unknown"]) == ("pending", True) and row["wait_s"] > 0
    assert len(slack.calls_to(POST)) == 1

    _backoff_passes(analysed)
    third, log = _alert(warehouse_url, _bot(slack))
    assert third.success and "posted after all" in log
    assert len(slack.calls_to(POST)) == 1 and len(slack.messages()) == 1
    assert _row(analysed)["status"] == "sent"


@pytest.mark.parametrize("mode", ["webhook", "webhook, JSON-escaped", "token"])
def test_a_page_that_echoes_the_webhook_url_or_the_token_is_quoted_without_it(analysed, warehouse_url, slack, mode):  # noqa: F811
    """A proxy's plain-text page quoted the webhook URL (or the Authorization header) it blocked: the first 80
    characters of it went into the outbox's last_error, the run's log and Dagster's event log. A JSON page writes
    each / of it as \\/ (issue 40: the token was kept)."""
    if mode == "webhook":
        resource, path = SlackResource(webhook_url=slack.webhook_url), HOOK
        page = f"Blocked by the egress policy (rule 12): POST {slack.webhook_url}\nPath: {HOOK}\n"
    elif mode == "webhook, JSON-escaped":
        resource, path = SlackResource(webhook_url=slack.webhook_url), HOOK
        echoed = json.dumps({"url": slack.webhook_url}).replace("/", "\\/")
        page = f"Blocked by the egress policy (rule 12): {echoed}\n"
    else:
        resource, path = _bot(slack), POST
        page = "Blocked by the egress policy (rule 12): Authorization: Bearer xoxb-test-token\n"
    slack.answer_next(path, *[Odd(403, page.encode(), "text/plain; charset=utf-8")] * 3)
    result, log = _alert(warehouse_url, resource)
    assert result.success and "(HTTP 403: Blocked by the egress policy (rule 12)" in log
    with analysed.connect() as conn:
        (stored,) = conn.execute(sa.text("SELECT last_error FROM radar.alert")).scalars()
    assert "***" in stored, stored
    for text in (stored, log):
        pieces = ("xoxb-test-token", "/hook/", "T000/B000", "T000\\/B000", "hook\\/")
        assert not any(piece in text for piece in pieces), text


def test_a_retry_after_beyond_any_clock_is_clamped(analysed, warehouse_url, slack):  # noqa: F811
    """Retry-After `inf` cannot be a timedelta (clamped to a day); `-5` or `1.5` would crash slack-sdk's own wait
    (it sleeps int(Retry-After)): not retried inside the run, waited out between runs."""
    for asked, low, high in (("inf", 23 * 3600, 24 * 3600), ("-5", -60, 1), ("1.5", -60, 2)):
        with analysed.begin() as conn:
            conn.execute(sa.text("UPDATE radar.alert SET status = 'pending', attempts = 0, next_attempt_at = NULL"))
        before = len(slack.calls_to(POST))
        slack.fail_next(POST, (429, {"Retry-After": asked}))
        first, _ = _alert(warehouse_url, _bot(slack))
        assert first.success and len(slack.calls_to(POST)) - before == 1, asked
        row = _row(analysed)
        assert row["status"] == "pending" and low < row["wait_s"] <= high and not row["outcome_unknown"], (asked, row)


def test_one_outbox_takes_the_three_tables_rows_and_keeps_their_names_as_views(pg18):
    """sql/0043 moves every row of radar.alert, radar.channel_event and radar.code_host_delivery into radar.outbox,
    each field kept, and the old names still read, update and delete those rows (views, for one release)."""
    from yoyo import read_migrations

    from radar_pipeline.warehouse import migrations
    from radar_pipeline.warehouse.database import make_engine

    name = pg18.new_database("outbox_move")
    url = pg18.pg.url(name, driver="postgresql+psycopg")
    every = read_migrations(str(migrations.SQL_DIR))
    backend = migrations._backend(url)
    with backend.lock():
        backend.apply_migrations(backend.to_apply(type(every)([m for m in every if m.id < "0043"], every.post_apply)))
    backend.connection.close()
    engine = make_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(
                sa.text(
                    "INSERT INTO radar.deploy_event (deploy_id, target, deployed_at, source) "
                    "VALUES ('d-1', 'main', now(), 'cli');"
                    "INSERT INTO radar.alert (deploy_id, target, dbid, userid, queryid, toplevel, channel, status, "
                    "attempts, last_error, message_ts, message_channel, remote_id, outcome_unknown, delivery_id) "
                    "VALUES ('d-1', 'main', 5, 10, -42, true, 'C0RADAR', 'sent', 2, 'earlier: 500', '171.1', "
                    "'C0RADARID', NULL, false, gen_random_uuid()), "
                    "('d-1', 'main', 5, 10, 43, false, 'pagerduty', 'pending', 1, NULL, NULL, NULL, 'dedup-1', "
                    "true, gen_random_uuid());"
                    "INSERT INTO radar.channel_event (channel, kind, subject, deploy_id, target, status, remote_id, "
                    "dbid, userid, queryid, toplevel) VALUES "
                    "('pagerduty', 'resolve', 'unsent d-1 main 5 10 43 false', 'd-1', 'main', 'pending', NULL, "
                    "5, 10, 43, false), ('grafana', 'deploy_mark', 'd-1', 'd-1', 'main', 'sent', '77', "
                    "NULL, NULL, NULL, NULL);"
                    "INSERT INTO radar.code_host_delivery (deploy_id, kind, state, analysed_at, status, remote_ids) "
                    "VALUES ('d-1', 'review_comment', 'fail', '2026-12-01 10:00+00', 'sent', '{\"12\": 9001}')"
                )
            )
            before = {
                view: sorted(map(tuple, conn.execute(sa.text(f"SELECT * FROM radar.{view}")).fetchall()), key=str)
                for view in ("alert", "channel_event", "code_host_delivery")
            }
        assert migrations.upgrade(url) == [m.id for m in every if m.id >= "0043"]
        with engine.begin() as conn:
            after = {
                view: sorted(map(tuple, conn.execute(sa.text(f"SELECT * FROM radar.{view}")).fetchall()), key=str)
                for view in before
            }
            assert after == before  # every field of every row, under the old names
            kinds = conn.execute(sa.text("SELECT kind, channel FROM radar.outbox ORDER BY id")).fetchall()
            assert sorted(kinds) == sorted(
                [
                    ("detection", "C0RADAR"),
                    ("detection", "pagerduty"),
                    ("resolve", "pagerduty"),
                    ("deploy_mark", "grafana"),
                    ("review_comment", "code_host"),
                ]
            )
            conn.execute(sa.text("UPDATE radar.alert SET status = 'withheld' WHERE channel = 'pagerduty'"))
            conn.execute(sa.text("DELETE FROM radar.channel_event WHERE kind = 'deploy_mark'"))
            left = conn.execute(sa.text("SELECT kind, status FROM radar.outbox ORDER BY kind, status")).fetchall()
        assert [tuple(r) for r in left] == [
            ("detection", "sent"),
            ("detection", "withheld"),
            ("resolve", "pending"),
            ("review_comment", "sent"),
        ]
    finally:
        engine.dispose()
        pg18.drop_database(name)
