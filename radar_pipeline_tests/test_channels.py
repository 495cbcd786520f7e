"""The channels beyond Slack through the outbox, with PagerDuty's Events API v2 as the channel: radar's client on the
wire against a loopback stand-in that enforces PagerDuty's contract (fake_pagerduty.py), the real warehouse, and real
Dagster runs of regression_alerts, periodic_alerts and radar_reconciler's requests. Each fault test says what was
lost or doubled: PagerDuty deduplicates triggers by dedup_key, so a trigger sent twice must still be one incident."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import dagster as dg
import pytest
import sqlalchemy as sa

from radar_pipeline.alerts.channel import ChannelError, Delivered, DeployNotice, Detection
from radar_pipeline.alerts.pagerduty import PagerDutyChannel, dedup_key, severity, trigger_event
from radar_pipeline.alerts.render import AnalysisFacts, LoadChange, Regression
from radar_pipeline.config import ConfigError
from radar_pipeline.config.settings import periodic_minute, periodic_start, settings
from radar_pipeline.defs.alerts.regression_alerts import regression_alerts
from radar_pipeline.defs.deploys.deploy_verdicts import REANALYSIS_TAG
from radar_pipeline.defs.periodic.periodic_check import periodic_definitions
from radar_pipeline.defs.reconcile.reconciler import alert_retry_job, radar_reconciler
from radar_pipeline.defs.resources import (
    AnalysisResource,
    ChannelsResource,
    SlackResource,
    TargetsResource,
    WarehouseResource,
    destinations,
)

from . import fake_pagerduty
from .fake_pagerduty import CHANGES, EVENTS
from .fake_slack import PORTAL, Odd
from .helpers import run_log_text
from .test_alerts import analysed  # noqa: F401 - the fixture is used by name
from .test_periodic import _key, timeline  # noqa: F401 - the fixture is used by name
from .test_reconciler import ANALYSIS, NOW, _check

KEY = "R0radarTestKey0000000000000000ab"  # a routing key's form: 32 letters and digits
SLOWED = (5, 10, 11, True)  # the statement the `analysed` deploy made 4× slower
HELD_TIMEOUT = 3  # the client's bound when the stand-in holds its answer


@pytest.fixture
def pagerduty() -> Iterator[fake_pagerduty.FakePagerDuty]:
    state, http = fake_pagerduty.start()
    yield state
    http.shutdown()


def _channels(pd: fake_pagerduty.FakePagerDuty, key: str = KEY, **kwargs: object) -> ChannelsResource:
    return ChannelsResource(pagerduty_routing_key=key, pagerduty_url=pd.url, **kwargs)  # type: ignore[arg-type]


def _alert(
    warehouse_url: str,
    channels: ChannelsResource,
    slack: SlackResource | None = None,
    tags: dict | None = None,
    raise_on_error: bool = True,
) -> tuple[dg.ExecuteInProcessResult, str]:
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("deploys", ["d-7"])
        result = dg.materialize(
            [regression_alerts],
            partition_key="d-7",
            resources={
                "warehouse": WarehouseResource(url=warehouse_url),
                "analysis": AnalysisResource(),
                "slack": slack or SlackResource(),
                "channels": channels,
            },
            instance=instance,
            tags=tags,
            raise_on_error=raise_on_error,
        )
        return result, run_log_text(instance, result.run_id)


def _periodic(
    warehouse_url: str, channels: ChannelsResource, slack: SlackResource
) -> tuple[list[dg.AssetsDefinition], dict[str, dg.ConfigurableResource]]:
    """The periodic check's two assets and the resources a run of them takes."""
    periodic = periodic_definitions(periodic_start(), periodic_minute())
    assets = [periodic.get_assets_def("periodic_verdicts"), periodic.get_assets_def("periodic_alerts")]
    resources = {
        "warehouse": WarehouseResource(url=warehouse_url),
        "analysis": AnalysisResource(),
        "targets": TargetsResource(spec=""),
        "slack": slack,
        "channels": channels,
    }
    return assets, resources


def _rows(warehouse, table: str = "radar.alert") -> list[dict]:
    columns = "queryid, " if table == "radar.alert" else "kind, subject, "
    with warehouse.connect() as conn:
        rows = conn.execute(
            sa.text(
                f"SELECT {columns} channel, status, attempts, remote_id, outcome_unknown, last_error, "
                f"extract(epoch FROM next_attempt_at - now()) AS wait_s FROM {table} "
                "WHERE channel <> '-' ORDER BY 1, 2"
            )
        )
        return [dict(r._mapping) for r in rows]


def _backoff_passes(warehouse, lease: bool = False) -> None:
    with warehouse.begin() as conn:
        for table in ("radar.alert", "radar.channel_event"):
            conn.execute(sa.text(f"UPDATE {table} SET next_attempt_at = now()"))
            if lease:
                conn.execute(sa.text(f"UPDATE {table} SET claimed_at = claimed_at - interval '1 day'"))


def _wait_for(condition, what: str, timeout: float = 60.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


# The client on the wire: every answer is delivered, refused (final) or retryable, unknown when it may have been taken.


def _facts(**kwargs: object) -> AnalysisFacts:
    return AnalysisFacts(
        analysis_id="d-1",
        target="main",
        split_at=datetime(2026, 11, 2, 10, tzinfo=UTC),
        service="api",
        version="v1",
        url="https://ci.example/1",
        run_url="http://localhost:3000/runs/r1",
        **kwargs,  # type: ignore[arg-type]
    )


def _regression(factor: float = 4.0, confidence: float = 0.999, low: float | None = None, text: str = "SELECT 1"):  # type: ignore[no-untyped-def]
    return Regression(
        queryid=11,
        query=text,
        mean_before_ms=1.0,
        mean_after_ms=factor,
        change_factor=factor,
        confidence=confidence,
        change_at=datetime(2026, 11, 2, 10, 1, tzinfo=UTC),
        calls_before=100,
        calls_after=100,
        cause="plan_change",
        plan_summary=None,
        factor_low=low,
    )


def _notice() -> DeployNotice:
    return DeployNotice("d-1", "main", datetime(2026, 11, 2, 10, tzinfo=UTC), "api", "v1", None, None)


def _outcome(call) -> str:  # type: ignore[no-untyped-def]
    try:
        call()
    except ChannelError as exc:
        assert KEY not in str(exc) and len(str(exc)) < 400, str(exc)
        if exc.unknown:
            assert exc.retryable
            return "unknown"
        return "retry" if exc.retryable else "refused"
    return "delivered"


ANSWERS = {
    "pagerduty's 400": (Odd(400, b'{"status": "invalid event", "errors": ["bad"]}', "application/json"), "refused"),
    "an html 502": (Odd(502, PORTAL), "unknown"),
    "an html page with 200": (Odd(200, PORTAL), "unknown"),
    "an empty 202": (Odd(202, b"", "application/json"), "unknown"),
    "json that is not an object": (Odd(202, b"[]", "application/json"), "unknown"),
    "a page echoing the key": (Odd(403, f"blocked: routing_key={KEY}".encode(), "text/plain"), "unknown"),
    "a connection reset": (Odd(reset=True), "unknown"),
    "a reset after the event was taken": (Odd(reset=True, taken=True), "unknown"),
}


@pytest.mark.parametrize("name", list(ANSWERS))
def test_every_answer_to_an_event_is_delivered_refused_or_unknown(pagerduty, name):
    answer, expected = ANSWERS[name]
    channel = PagerDutyChannel(KEY, pagerduty.url, timeout=HELD_TIMEOUT)
    detection = Detection(SLOWED, regression=_regression())
    assert _outcome(lambda: channel.notify(_facts(), [detection], "d1")) == "delivered"
    pagerduty.answer_next(EVENTS, answer)
    assert _outcome(lambda: channel.notify(_facts(), [detection], "d2")) == expected
    assert len(pagerduty.incidents) == 1  # whatever came back, one incident


def test_the_stand_in_holds_pagerdutys_contract(pagerduty):
    """What radar sends passes the contract; what breaks it is answered 400, which radar takes as final; a 429 asks to
    wait; a timeout after PagerDuty took the event is unknown; a trigger on an open dedup_key is the same incident, a
    resolve closes it, and a trigger after that opens another."""
    channel = PagerDutyChannel(KEY, pagerduty.url, timeout=HELD_TIMEOUT)
    detection = Detection(SLOWED, regression=_regression())
    for _ in range(2):
        assert channel.notify(_facts(), [detection], "d").remote_id == dedup_key("main", SLOWED, "d-1")
    assert len(pagerduty.incidents) == 1 and len(pagerduty.incidents[0].triggers) == 2
    channel.resolve(dedup_key("main", SLOWED, "d-1"), "d")
    assert not pagerduty.open_incidents()
    channel.resolve(dedup_key("main", SLOWED, "d-1"), "d")  # resolving what is closed: accepted
    channel.notify(_facts(), [detection], "d")
    assert len(pagerduty.incidents) == 2 and len(pagerduty.open_incidents()) == 1
    channel.mark_deploy(_notice(), "d")
    assert pagerduty.changes[0]["payload"]["summary"] == "Deploy d-1 (api v1) on main"

    bad = PagerDutyChannel(KEY[:31], pagerduty.url)
    with pytest.raises(ChannelError, match="refused the trigger .HTTP 400.: Event object is invalid .*routing_key"):
        bad.notify(_facts(), [detection], "d")
    with pytest.raises(ChannelError, match="refused the change event .HTTP 400"):
        bad.mark_deploy(_notice(), "d")
    pagerduty.throttle_next(EVENTS, "30")
    with pytest.raises(ChannelError) as throttled:
        channel.notify(_facts(), [detection], "d")
    assert throttled.value.retryable and not throttled.value.unknown and throttled.value.retry_after == 30
    held = pagerduty.hold_next(CHANGES)
    started = time.monotonic()
    assert _outcome(lambda: channel.mark_deploy(_notice(), "d")) == "unknown"
    held.set()
    assert time.monotonic() - started < HELD_TIMEOUT * 3  # the client's own bound


def test_the_trigger_carries_a_bounded_summary_severity_and_links():
    long = "SELECT " + "x, " * 2000 + "\x1b[2J\u202e FROM t"
    event = trigger_event(_facts(), Detection(SLOWED, regression=_regression(text=long)))
    payload = event["payload"]
    assert len(payload["summary"]) <= 1024 and "\x1b" not in payload["summary"] and "\u202e" not in payload["summary"]
    assert payload["summary"].startswith("radar: queryid 11 ×4.00 slower after deploy api v1 on main: SELECT x, x,")
    assert len(event["dedup_key"]) <= 255 and event["dedup_key"] == dedup_key("main", SLOWED, "d-1")
    assert dedup_key("main", SLOWED, "d-2") != event["dedup_key"] != dedup_key("other", SLOWED, "d-1")
    assert event["links"] == [
        {"href": "http://localhost:3000/runs/r1", "text": "Analysis run in Dagster"},
        {"href": "https://ci.example/1", "text": "Deploy d-1"},
    ]
    assert payload["custom_details"]["dagster_run"] == "http://localhost:3000/runs/r1"
    assert len(payload["custom_details"]["statement"]) <= 1000
    # The documented mapping: size and confidence.
    assert severity(_regression(4.0, 0.999)) == "critical"
    assert severity(_regression(4.0, 0.999, low=2.5)) == "error"  # the interval's low end is the size
    assert severity(_regression(2.5, 0.97)) == "error"
    assert severity(_regression(4.0, 0.9)) == "warning"
    change = LoadChange(12, "SELECT 2", "new", 0, 10, 0, 500, None, 50, 0.6)
    assert severity(change=change) == "warning"
    assert severity(change=LoadChange(12, "SELECT 2", "surge", 1, 10, 1, 50, 5, 5, 0.1)) == "info"


# Through the outbox, in Dagster runs.


def test_slack_takes_only_what_the_routes_send_it(analysed, warehouse_url, pagerduty, slack):  # noqa: F811
    """Named in RADAR_CHANNEL_ROUTES, Slack takes what is routed to it, like every channel: routed load changes only,
    a deploy's regression goes to PagerDuty and not to Slack (no message, no outbox row of Slack's)."""
    bot = SlackResource(token="xoxb-test-token", channel="C0RADAR", base_url=slack.api_url, outcomes=["load_change"])
    result, _ = _alert(warehouse_url, _channels(pagerduty, routes="regression=pagerduty load_change=slack"), bot)
    assert result.success and not slack.messages() and len(pagerduty.incidents) == 1
    assert [(r["channel"], r["status"]) for r in _rows(analysed)] == [("pagerduty", "sent")]
    metadata = result.asset_materializations_for_node("regression_alerts")[0].metadata
    assert "not routed" in metadata["note"].value


def test_slack_s_routes_come_from_the_settings_and_unnamed_it_takes_everything(monkeypatch):
    """The load decides what Slack takes: what the routes send it when they name it; everything it can when they do
    not (routes written before Slack could be routed keep it as it was); a route to an unconfigured Slack stops the
    load naming what configures it."""
    slack = {"RADAR_SLACK_TOKEN": "xoxb-1", "RADAR_SLACK_CHANNEL": "#radar", "RADAR_PAGERDUTY_ROUTING_KEY": KEY}
    for routes, outcomes in [
        (None, ["load_change", "regression"]),
        ("regression=pagerduty", ["load_change", "regression"]),
        ("regression=pagerduty,slack load_change=pagerduty", ["regression"]),
    ]:
        environ = slack | ({"RADAR_CHANNEL_ROUTES": routes} if routes else {})
        built = destinations(settings(environ=environ))
        assert built["slack"].outcomes == outcomes, routes  # type: ignore[attr-defined]
        assert [r.name for r in built["channels"].routed()] == ["pagerduty"]  # type: ignore[attr-defined]
    with pytest.raises(
        ConfigError, match="routes load_change to slack, which is not configured .set RADAR_SLACK_TOKEN"
    ):
        destinations(settings(environ={"RADAR_CHANNEL_ROUTES": "load_change=slack"}))
    with pytest.raises(ConfigError, match="routes deploy to slack, which cannot take it"):
        destinations(settings(environ=slack | {"RADAR_CHANNEL_ROUTES": "deploy=slack"}))


def test_a_deploy_with_a_regression_is_one_incident_and_one_change_event(analysed, warehouse_url, pagerduty, slack):  # noqa: F811
    bot = SlackResource(token="xoxb-test-token", channel="C0RADAR", base_url=slack.api_url)
    result, log = _alert(warehouse_url, _channels(pagerduty), bot)
    assert result.success
    assert len(slack.messages()) == 1  # Slack as before, first
    (incident,) = pagerduty.incidents
    assert incident.dedup_key == dedup_key("main", SLOWED, "d-7")
    (trigger,) = incident.triggers
    assert trigger["routing_key"] == KEY and trigger["payload"]["severity"] in ("critical", "error")
    assert trigger["payload"]["source"] == "main"
    assert trigger["links"][0] == {"href": "http://localhost:3000/runs/abcdef12-run", "text": "Analysis run in Dagster"}
    assert "<!channel>" in trigger["payload"]["summary"]  # PagerDuty shows plain text: nothing to escape but controls
    (change,) = pagerduty.changes
    assert change["payload"]["summary"] == "Deploy d-7 (api v7) on main"
    assert change["links"] == [{"href": "https://ci.example/runs/7", "text": "Deploy"}]
    assert [(r["queryid"], r["channel"], r["status"], r["remote_id"]) for r in _rows(analysed)] == [
        (11, "C0RADAR", "sent", None),
        (11, "pagerduty", "sent", incident.dedup_key),
    ]
    assert [(r["kind"], r["status"]) for r in _rows(analysed, "radar.channel_event")] == [("deploy_mark", "sent")]
    metadata = result.asset_materializations_for_node("regression_alerts")[0].metadata
    assert metadata["channels"].value["pagerduty"]["sent"] == 1
    assert KEY not in log and KEY not in str(metadata)  # the routing key: never in Dagster's event log

    again, _ = _alert(warehouse_url, _channels(pagerduty), bot)
    assert again.success and len(pagerduty.calls_to(EVENTS)) == 1 and len(pagerduty.changes) == 1
    assert len(slack.messages()) == 1


def test_a_timeout_after_pagerduty_took_the_trigger_is_one_incident(analysed, warehouse_url, pagerduty):  # noqa: F811
    held = pagerduty.hold_next(EVENTS)
    first, log = _alert(warehouse_url, _channels(pagerduty, timeout_seconds=HELD_TIMEOUT))
    held.set()
    assert first.success and "it may have been taken" in log
    (row,) = _rows(analysed)
    assert (row["status"], row["outcome_unknown"]) == ("pending", True)

    _backoff_passes(analysed)
    second, log = _alert(warehouse_url, _channels(pagerduty))
    assert second.success and "sending again" in log
    assert len(pagerduty.calls_to(EVENTS)) == 2  # sent twice …
    assert len(pagerduty.incidents) == 1  # … one incident: doubled, nothing; lost, nothing
    (row,) = _rows(analysed)
    assert (row["status"], row["attempts"], row["remote_id"]) == ("sent", 2, pagerduty.incidents[0].dedup_key)


def test_a_run_killed_between_claim_and_settle_is_one_incident(analysed, warehouse_url, pagerduty):  # noqa: F811
    """The row is committed `sending` before the trigger goes out; the run dies before it can mark it sent; after
    the lease the next attempt sends it again under the same dedup_key: still one incident."""
    held = pagerduty.hold_next(EVENTS)
    script = (
        "import dagster as dg\n"
        "from radar_pipeline.defs.alerts.regression_alerts import regression_alerts\n"
        "from radar_pipeline.defs.resources import AnalysisResource, ChannelsResource, SlackResource\n"
        "from radar_pipeline.defs.resources import WarehouseResource\n"
        "with dg.instance_for_test() as instance:\n"
        "    instance.add_dynamic_partitions('deploys', ['d-7'])\n"
        "    dg.materialize([regression_alerts], partition_key='d-7', instance=instance, resources={\n"
        f"        'warehouse': WarehouseResource(url={warehouse_url!r}), 'slack': SlackResource(),\n"
        "        'analysis': AnalysisResource(),\n"
        f"        'channels': ChannelsResource(pagerduty_routing_key={KEY!r}, pagerduty_url={pagerduty.url!r},\n"
        "                                     timeout_seconds=120)})\n"
    )
    child = subprocess.Popen([sys.executable, "-c", script], env=os.environ.copy())
    try:
        _wait_for(lambda: pagerduty.incidents, "the trigger to reach PagerDuty", timeout=120)
        (row,) = _rows(analysed)
        assert row["status"] == "sending"  # committed before the request
        with analysed.connect() as conn:  # and no transaction open on the outbox while PagerDuty is called
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
        held.set()
    assert _rows(analysed)[0]["status"] == "sending"

    _backoff_passes(analysed, lease=True)
    again, _ = _alert(warehouse_url, _channels(pagerduty))
    assert again.success
    assert len(pagerduty.incidents) == 1 and len(pagerduty.calls_to(EVENTS)) == 2
    assert _rows(analysed)[0]["status"] == "sent"


def test_a_429_with_retry_after_is_waited_out_between_runs(analysed, warehouse_url, pagerduty):  # noqa: F811
    pagerduty.throttle_next(EVENTS, "600")
    first, _ = _alert(warehouse_url, _channels(pagerduty))
    assert first.success and len(pagerduty.calls_to(EVENTS)) == 1  # not retried inside the run
    (row,) = _rows(analysed)
    assert row["status"] == "pending" and 590 < row["wait_s"] <= 600 and not row["outcome_unknown"]
    waiting, _ = _alert(warehouse_url, _channels(pagerduty))
    assert waiting.success and len(pagerduty.calls_to(EVENTS)) == 1  # still inside the wait
    _backoff_passes(analysed)
    assert _alert(warehouse_url, _channels(pagerduty))[0].success
    assert len(pagerduty.incidents) == 1 and _rows(analysed)[0]["status"] == "sent"


def test_a_400_is_final(analysed, warehouse_url, pagerduty):  # noqa: F811
    wrong = _channels(pagerduty, key=KEY[:31])  # PagerDuty refuses the event: no later attempt can succeed
    first, log = _alert(warehouse_url, wrong)
    assert first.success and "refused the trigger (HTTP 400)" in log
    (row,) = _rows(analysed)
    assert (row["status"], row["attempts"]) == ("failed", 1) and "routing_key" in row["last_error"]
    _backoff_passes(analysed)
    assert _alert(warehouse_url, wrong)[0].success
    assert len(pagerduty.calls_to(EVENTS)) == 1 and not pagerduty.incidents


@pytest.mark.parametrize("taken", [False, True], ids=["not-taken", "taken"])
def test_an_html_502_is_retried_and_stays_one_incident(analysed, warehouse_url, pagerduty, taken):  # noqa: F811
    pagerduty.answer_next(EVENTS, Odd(502, PORTAL, taken=taken))
    first, log = _alert(warehouse_url, _channels(pagerduty))
    assert first.success and "not PagerDuty's to the trigger (HTTP 502: <!DOCTYPE html>" in log
    (row,) = _rows(analysed)
    assert (row["status"], row["outcome_unknown"]) == ("pending", True)
    _backoff_passes(analysed)
    assert _alert(warehouse_url, _channels(pagerduty))[0].success
    assert len(pagerduty.incidents) == 1 and _rows(analysed)[0]["status"] == "sent"


def test_a_reanalysis_that_no_longer_detects_it_resolves_the_incident(analysed, warehouse_url, pagerduty):  # noqa: F811
    assert _alert(warehouse_url, _channels(pagerduty))[0].success
    assert len(pagerduty.open_incidents()) == 1
    with analysed.begin() as conn:  # the deploy's re-analysis cleared the statement
        conn.execute(sa.text("UPDATE radar.verdict SET verdict = 'no_regression' WHERE deploy_id = 'd-7'"))
    pagerduty.throttle_next(EVENTS, "5")  # the first resolve is throttled: it waits, and is sent by the next run
    result, _ = _alert(warehouse_url, _channels(pagerduty))
    assert result.success and len(pagerduty.open_incidents()) == 1
    (event,) = [r for r in _rows(analysed, "radar.channel_event") if r["kind"] == "resolve"]
    assert event["status"] == "pending" and event["subject"] == dedup_key("main", SLOWED, "d-7")
    _backoff_passes(analysed)
    assert _alert(warehouse_url, _channels(pagerduty))[0].success
    assert not pagerduty.open_incidents()
    resolves = [c for c in pagerduty.calls_to(EVENTS) if c["event_action"] == "resolve"]
    assert len(resolves) == 2 and resolves[-1]["dedup_key"] == dedup_key("main", SLOWED, "d-7")
    assert [(r["kind"], r["status"]) for r in _rows(analysed, "radar.channel_event")] == [
        ("deploy_mark", "sent"),
        ("resolve", "sent"),
    ]
    assert _alert(warehouse_url, _channels(pagerduty))[0].success  # nothing more
    assert len([c for c in pagerduty.calls_to(EVENTS) if c["event_action"] == "resolve"]) == 2


def test_routing_sends_each_outcome_where_it_is_routed(analysed, warehouse_url, pagerduty):  # noqa: F811
    result, _ = _alert(warehouse_url, _channels(pagerduty, routes="deploy=pagerduty"))
    assert result.success and not pagerduty.incidents and len(pagerduty.changes) == 1
    assert [r["channel"] for r in _rows(analysed)] == []  # no detection row for a channel not routed detections


def test_the_reanalysis_and_an_old_deploy_are_recorded_withheld(analysed, warehouse_url, pagerduty):  # noqa: F811
    result, _ = _alert(warehouse_url, _channels(pagerduty), tags={REANALYSIS_TAG: "true"})
    assert result.success and not pagerduty.requests
    assert {r["status"] for r in _rows(analysed) + _rows(analysed, "radar.channel_event")} == {"withheld"}
    with analysed.begin() as conn:
        conn.execute(sa.text("DELETE FROM radar.alert; DELETE FROM radar.channel_event"))
    old, _ = _alert(warehouse_url, _channels(pagerduty, alert_max_age_hours=0.01))  # closed 100 s ago
    assert old.success and not pagerduty.requests
    assert {r["status"] for r in _rows(analysed) + _rows(analysed, "radar.channel_event")} == {"withheld"}


def test_the_reconciler_retries_a_throttled_trigger_and_change_event(analysed, warehouse_url, pagerduty):  # noqa: F811
    channels = _channels(pagerduty)
    resources = {
        "warehouse": WarehouseResource(url=warehouse_url),
        "analysis": ANALYSIS,
        "slack": SlackResource(),
        "channels": channels,
        "reconciler": NOW,
    }
    defs = dg.Definitions(
        assets=[regression_alerts], jobs=[alert_retry_job], sensors=[radar_reconciler], resources=resources
    )
    pagerduty.throttle_next(EVENTS, "1")
    pagerduty.throttle_next(CHANGES, "1")
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("deploys", ["d-7"])
        job = defs.resolve_job_def("alert_retry_job")
        assert job.execute_in_process(instance=instance, partition_key="d-7").success
        assert not pagerduty.incidents and not pagerduty.changes
        _backoff_passes(analysed)
        context = dg.build_sensor_context(instance=instance, resources=resources)
        (request,) = radar_reconciler(context).run_requests
        assert (request.job_name, request.partition_key) == ("alert_retry_job", "d-7")
        tags = {**request.tags, "dagster/run_key": request.run_key or ""}
        assert job.execute_in_process(instance=instance, partition_key="d-7", tags=tags).success
    assert len(pagerduty.incidents) == 1 and len(pagerduty.changes) == 1
    assert {r["status"] for r in _rows(analysed) + _rows(analysed, "radar.channel_event")} == {"sent"}

    with analysed.begin() as conn:  # only a resolve waits (the detections were sent): still retried
        conn.execute(
            sa.text(
                "INSERT INTO radar.channel_event (channel, kind, subject, deploy_id, target) "
                "VALUES ('pagerduty', 'resolve', 'k-1', 'd-7', 'main')"
            )
        )
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("deploys", ["d-7"])
        context = dg.build_sensor_context(instance=instance, resources=resources)
        tick = radar_reconciler(context)
        (request,) = tick.run_requests
        assert request.partition_key == "d-7"
        assert _check(tick).metadata["alerts_due"].value == 1 and not _check(tick).passed  # nothing_waiting sees it

    with analysed.begin() as conn:  # a deploy mark waits: deploy_mark_sensor's (it needs no analysis), seen here
        conn.execute(sa.text("DELETE FROM radar.channel_event WHERE kind = 'resolve'"))
        conn.execute(sa.text("UPDATE radar.channel_event SET status = 'pending', next_attempt_at = now()"))
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("deploys", ["d-7"])
        tick = radar_reconciler(dg.build_sensor_context(instance=instance, resources=resources))
        assert not tick.run_requests
        assert _check(tick).metadata["alerts_due"].value == 1 and not _check(tick).passed


# Routing at load.


@pytest.mark.parametrize(
    ("environment", "message"),
    [
        ({"RADAR_CHANNEL_ROUTES": "pages=pagerduty"}, "RADAR_CHANNEL_ROUTES: 'pages' is not an outcome"),
        ({"RADAR_CHANNEL_ROUTES": "regression=opsgenie"}, "RADAR_CHANNEL_ROUTES: 'opsgenie' is not a channel"),
        (
            {"RADAR_CHANNEL_ROUTES": "regression=pagerduty"},
            "RADAR_CHANNEL_ROUTES routes regression to pagerduty, which is not configured "
            "(set RADAR_PAGERDUTY_ROUTING_KEY)",
        ),
        (
            {"RADAR_CHANNEL_ROUTES": "deploy=teams", "RADAR_PAGERDUTY_ROUTING_KEY": KEY},
            "RADAR_CHANNEL_ROUTES routes deploy to teams, which is not configured",
        ),
        ({"RADAR_PAGERDUTY_ROUTING_KEY": "not-a-key"}, "RADAR_PAGERDUTY_ROUTING_KEY must be a PagerDuty integration"),
    ],
)
def test_routing_errors_stop_the_load_naming_the_setting(monkeypatch, environment, message):
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as refused:
        destinations(settings())["channels"]
    assert str(refused.value).startswith(message) and "\n" not in str(refused.value)
    assert "not-a-key" not in str(refused.value)


def test_the_location_loads_routes_and_keeps_the_key_out_of_its_config(monkeypatch):
    monkeypatch.setenv("RADAR_PAGERDUTY_ROUTING_KEY", KEY)
    monkeypatch.setenv("RADAR_CHANNEL_ROUTES", "regression=pagerduty deploy=pagerduty")
    resource = destinations(settings())["channels"]
    assert KEY not in repr(resource) and KEY not in str(resource.model_dump())  # an EnvVar, resolved in the run
    routed = ChannelsResource(pagerduty_routing_key=KEY, routes="regression=pagerduty").routed()
    assert [(r.name, sorted(r.outcomes)) for r in routed] == [("pagerduty", ["regression"])]
    everything = ChannelsResource(pagerduty_routing_key=KEY).routed()
    assert sorted(everything[0].outcomes) == ["deploy", "load_change", "regression"]
    assert ChannelsResource().routed() == []


def test_the_periodic_checks_recovery_resolves_the_incident(timeline, warehouse, warehouse_url, pagerduty):  # noqa: F811
    """Statement 31 slows in hour 1 (reported: an incident), recovers in hour 4 (resolved) and slows again in hour 5
    (a new episode: a new incident)."""
    assets, resources = _periodic(warehouse_url, _channels(pagerduty, routes="regression=pagerduty"), SlackResource())
    opened = {}
    with dg.instance_for_test() as instance:
        for hour in range(1, 6):
            result = dg.materialize(assets, partition_key=_key(timeline, hour), resources=resources, instance=instance)
            assert result.success
            opened[hour] = [(i.dedup_key, i.status) for i in pagerduty.incidents]
    first = dedup_key("main", _statement(warehouse, 31), "periodic:" + _key(timeline, 1))
    again = dedup_key("main", _statement(warehouse, 31), "periodic:" + _key(timeline, 5))
    assert opened[1] == opened[3] == [(first, "triggered")]
    assert opened[4] == [(first, "resolved")]
    assert opened[5] == [(first, "resolved"), (again, "triggered")]
    assert not pagerduty.changes  # a periodic check has no deploy to mark
    with warehouse.connect() as conn:
        (row,) = conn.execute(sa.text("SELECT deploy_id, status FROM radar.channel_event")).fetchall()
    assert tuple(row) == ("periodic:" + _key(timeline, 4), "sent")


def test_the_periodic_check_sends_slack_only_what_the_routes_send_it(timeline, warehouse_url, pagerduty, slack):  # noqa: F811
    """Hour 1's reported regression goes to PagerDuty; Slack, routed load changes only, gets no message."""
    bot = SlackResource(token="xoxb-test-token", channel="C0RADAR", base_url=slack.api_url, outcomes=["load_change"])
    routes = "regression=pagerduty load_change=slack"
    assets, resources = _periodic(warehouse_url, _channels(pagerduty, routes=routes), bot)
    with dg.instance_for_test() as instance:
        result = dg.materialize(assets, partition_key=_key(timeline, 1), resources=resources, instance=instance)
    assert result.success and not slack.messages()
    assert [i.status for i in pagerduty.incidents] == ["triggered"]


def _statement(warehouse, queryid: int) -> tuple[int, int, int, bool]:  # type: ignore[no-untyped-def]
    with warehouse.connect() as conn:
        row = conn.execute(
            sa.text("SELECT DISTINCT dbid, userid, queryid, toplevel FROM radar.alert WHERE queryid = :q"),
            {"q": queryid},
        ).one()
    return (int(row[0]), int(row[1]), int(row[2]), bool(row[3]))


class Ledger:
    """A channel that can tell what it received (can_check), one request per analysis (not per_detection) and a
    deploy marker: the test's instrument for the outbox's generic path (a real warehouse, real Dagster runs); what it
    receives is kept in `received` (delivery id → keys), and `doubt` makes its next request be taken but answered as
    unknown, `blind` its next look-up fail."""

    name = "grafana"  # a kind that takes every outcome
    per_detection = False
    can_check = True

    def __init__(self) -> None:
        self.received: dict[str, list] = {}
        self.marks: dict[str, str] = {}
        self.calls: list[str] = []
        self.doubt = self.blind = 0

    def notify(self, facts, detections, delivery_id):  # type: ignore[no-untyped-def]
        self.calls.append("notify")
        self.received[delivery_id] = [d.key for d in detections]
        return self._answer(f"L-{len(self.received)}")

    def find_delivered(self, facts, earlier, since):  # type: ignore[no-untyped-def]
        self.calls.append("find_delivered")
        if self.blind:
            self.blind -= 1
            raise ChannelError("the ledger cannot be read now", True)
        return {k: Delivered(f"found-{d}") for k, d in earlier.items() if k in self.received.get(d, [])}

    def mark_deploy(self, notice, delivery_id):  # type: ignore[no-untyped-def]
        self.calls.append("mark_deploy")
        self.marks[delivery_id] = notice.deploy_id
        return self._answer(f"M-{len(self.marks)}")

    def find_marked(self, notice, delivery_id, since):  # type: ignore[no-untyped-def]
        self.calls.append("find_marked")
        return Delivered(f"found-{delivery_id}") if self.marks.get(delivery_id) == notice.deploy_id else None

    def _answer(self, remote: str) -> Delivered:
        if self.doubt:
            self.doubt -= 1
            raise ChannelError("no answer from the ledger (it may have been taken)", True, unknown=True)
        return Delivered(remote)


def test_a_channel_that_can_tell_is_asked_before_anything_is_sent_again(analysed, warehouse_url, monkeypatch):  # noqa: F811
    ledger = Ledger()
    monkeypatch.setattr(ChannelsResource, "factories", lambda self: {"grafana": lambda: ledger})
    ledger.doubt = 2  # the detections and the deploy mark: taken, answered as unknown
    assert _alert(warehouse_url, ChannelsResource())[0].success
    assert {(r["status"], r["outcome_unknown"]) for r in _rows(analysed) + _rows(analysed, "radar.channel_event")} == {
        ("pending", True)
    }
    _backoff_passes(analysed)
    ledger.blind = 1  # the look-up fails: nothing is sent, and the next attempt looks again for the same delivery
    assert _alert(warehouse_url, ChannelsResource())[0].success
    (row,) = _rows(analysed)
    assert (row["status"], row["outcome_unknown"]) == ("pending", True)
    _backoff_passes(analysed)
    assert _alert(warehouse_url, ChannelsResource())[0].success
    assert ledger.calls.count("notify") == 1 and ledger.calls.count("mark_deploy") == 1  # doubled: nothing
    (row,) = _rows(analysed)
    (mark,) = _rows(analysed, "radar.channel_event")
    assert (row["status"], row["remote_id"]) == ("sent", f"found-{next(iter(ledger.received))}")
    assert (mark["status"], mark["remote_id"]) == ("sent", f"found-{next(iter(ledger.marks))}")


def test_a_channel_that_breaks_does_not_stop_the_others(analysed, warehouse_url, pagerduty, monkeypatch):  # noqa: F811
    """The first channel raises what is not a channel's answer (a bug, say): PagerDuty after it is still served, and
    the run fails afterwards, so the break is seen; the broken channel's row waits for the reconciler."""
    broken = Ledger()
    broken.notify = lambda *args: (_ for _ in ()).throw(RuntimeError("a bug in a channel"))  # type: ignore[method-assign]
    real = _channels(pagerduty).factories()["pagerduty"]
    monkeypatch.setattr(ChannelsResource, "factories", lambda self: {"grafana": lambda: broken, "pagerduty": real})
    result, log = _alert(warehouse_url, ChannelsResource(), SlackResource(), raise_on_error=False)
    assert not result.success and "grafana: RuntimeError: a bug in a channel" in log
    assert len(pagerduty.incidents) == 1 and len(pagerduty.changes) == 1
    assert {(r["channel"], r["status"]) for r in _rows(analysed)} == {("grafana", "sending"), ("pagerduty", "sent")}


# A hostile review's findings: an incident must never stay open because of the outbox's own rules.


@pytest.mark.parametrize("why", ["reanalysis", "old deploy"])
def test_a_resolve_is_sent_in_the_reanalysis_and_for_an_old_deploy(analysed, warehouse_url, pagerduty, why):  # noqa: F811
    """An engine upgrade's nightly reanalysis (or a re-analysis past the alert age limit) clears a false positive: its
    incident is resolved (closing is never noise), and a resolve an older version recorded withheld is sent too."""
    assert _alert(warehouse_url, _channels(pagerduty))[0].success
    (incident,) = pagerduty.open_incidents()
    with analysed.begin() as conn:  # cleared; the older version had already recorded the resolve withheld
        conn.execute(sa.text("UPDATE radar.verdict SET verdict = 'no_regression' WHERE deploy_id = 'd-7'"))
        conn.execute(
            sa.text(
                "INSERT INTO radar.channel_event (channel, kind, subject, deploy_id, target, status, last_error) "
                "VALUES ('pagerduty', 'resolve', :k, 'd-7', 'main', 'withheld', 'reanalysis: not sent')"
            ),
            {"k": incident.dedup_key},
        )
    if why == "reanalysis":
        result, _ = _alert(warehouse_url, _channels(pagerduty), tags={REANALYSIS_TAG: "true"})
    else:
        result, _ = _alert(warehouse_url, _channels(pagerduty, alert_max_age_hours=0.01))  # closed 100 s ago
    assert result.success and not pagerduty.open_incidents()
    resolves = [c for c in pagerduty.calls_to(EVENTS) if c["event_action"] == "resolve"]
    assert [c["dedup_key"] for c in resolves] == [incident.dedup_key]
    assert ("resolve", "sent") in [(r["kind"], r["status"]) for r in _rows(analysed, "radar.channel_event")]


def test_a_trigger_sent_after_its_episode_recovered_is_resolved(timeline, warehouse, warehouse_url, pagerduty):  # noqa: F811
    """Hour 1's trigger is throttled; hour 4 recovers while it still waits; the retry then sends it: the incident it
    opens after its recovery is resolved in the same run, and the waiting resolve is never due before it."""
    from radar_pipeline.warehouse import reconcile as store

    assets, resources = _periodic(warehouse_url, _channels(pagerduty, routes="regression=pagerduty"), SlackResource())
    hour1 = "periodic:" + _key(timeline, 1)
    pagerduty.throttle_next(EVENTS, "3600")  # hour 1's trigger waits an hour (Retry-After)
    with dg.instance_for_test() as instance:
        for hour in range(1, 5):
            result = dg.materialize(assets, partition_key=_key(timeline, hour), resources=resources, instance=instance)
            assert result.success
        assert not pagerduty.incidents
        with warehouse.connect() as conn:
            (waits,) = conn.execute(
                sa.text("SELECT deploy_id, status FROM radar.channel_event WHERE kind = 'resolve'")
            ).fetchall()
            assert tuple(waits) == (hour1, "pending")
            assert not store.waiting_alerts(conn, timedelta(days=1), timedelta(minutes=10))  # the trigger backs off
        _backoff_passes(warehouse)
        with warehouse.connect() as conn:  # due: hour 1's trigger, and its resolve only with it
            assert [(w.analysis_id, w.rows) for w in store.waiting_alerts(conn, timedelta(days=1), timedelta(0))] == [
                (hour1, 1)
            ]
        retry = dg.materialize(
            assets, partition_key=_key(timeline, 1), resources=resources, instance=instance, selection=[assets[1]]
        )
        assert retry.success
    (incident,) = pagerduty.incidents
    assert incident.dedup_key == dedup_key("main", _statement(warehouse, 31), hour1)
    assert incident.status == "resolved"
    assert [c["event_action"] for c in pagerduty.calls_to(EVENTS)] == ["trigger", "trigger", "resolve"]
    assert {(r["kind"], r["status"]) for r in _rows(warehouse, "radar.channel_event")} == {("resolve", "sent")}


def _broken_slack(monkeypatch, slack) -> SlackResource:  # type: ignore[no-untyped-def]
    from radar_pipeline.alerts.slack import SlackSender

    def send(*args: object, **kwargs: object) -> None:
        raise RuntimeError("a bug in Slack's path")

    monkeypatch.setattr(SlackSender, "send", send)
    return SlackResource(token="xoxb-test-token", channel="C0RADAR", base_url=slack.api_url)


def test_slacks_error_does_not_keep_a_deploys_channels_from_their_deliveries(
    analysed,  # noqa: F811
    warehouse_url,
    pagerduty,
    slack,
    monkeypatch,
):
    result, log = _alert(warehouse_url, _channels(pagerduty), _broken_slack(monkeypatch, slack), raise_on_error=False)
    assert not result.success and "a bug in Slack's path" in log  # the run fails, visibly
    assert len(pagerduty.incidents) == 1 and len(pagerduty.changes) == 1


def test_an_error_in_one_periodic_step_does_not_stop_the_rest(
    timeline,  # noqa: F811
    warehouse,
    warehouse_url,
    pagerduty,
    slack,
    monkeypatch,
):
    assets, resources = _periodic(
        warehouse_url, _channels(pagerduty, routes="regression=pagerduty"), _broken_slack(monkeypatch, slack)
    )
    with dg.instance_for_test() as instance:
        result = dg.materialize(
            assets, partition_key=_key(timeline, 1), resources=resources, instance=instance, raise_on_error=False
        )
        log = run_log_text(instance, result.run_id)
    assert not result.success and "a bug in Slack's path" in log
    assert len(pagerduty.incidents) == 1  # the routed channels were served all the same


def test_one_targets_broken_channel_does_not_stop_the_next_targets(
    timeline,  # noqa: F811
    warehouse,
    warehouse_url,
    pagerduty,
    monkeypatch,
):
    """Hour 1 reports statement 31 on two targets; a channel breaks (not a channel's answer: a bug) on the first: the
    second target is still delivered on every channel, and the run fails afterwards."""
    assets, resources = _periodic(warehouse_url, ChannelsResource(), SlackResource())
    broken = Ledger()
    real_notify = broken.notify

    def notify(facts, detections, delivery_id):  # type: ignore[no-untyped-def]
        if facts.target == "aux":
            raise RuntimeError("a bug in a channel")
        return real_notify(facts, detections, delivery_id)

    broken.notify = notify  # type: ignore[method-assign]
    real = _channels(pagerduty).factories()["pagerduty"]
    monkeypatch.setattr(ChannelsResource, "factories", lambda self: {"grafana": lambda: broken, "pagerduty": real})
    hour1 = "periodic:" + _key(timeline, 1)
    with dg.instance_for_test() as instance:
        verdicts = dg.materialize(
            assets, partition_key=_key(timeline, 1), resources=resources, instance=instance, selection=[assets[0]]
        )
        assert verdicts.success
        with warehouse.begin() as conn:  # the same report on a second target, "aux" (sorted first)
            for table, where in (
                ("radar.analysis", "deploy_id = :d"),
                ("radar.verdict", "deploy_id = :d"),
                ("radar.regression_episode", "opened_by = :d"),
                ("radar.query", "target = 'main'"),
            ):
                columns = ", ".join(
                    conn.execute(
                        sa.text(
                            "SELECT quote_ident(column_name) FROM information_schema.columns WHERE table_schema = "
                            "'radar' AND table_name = :t AND is_generated = 'NEVER' ORDER BY ordinal_position"
                        ),
                        {"t": table.removeprefix("radar.")},
                    ).scalars()
                )
                conn.execute(
                    sa.text(f"CREATE TEMP TABLE copied AS SELECT {columns} FROM {table} WHERE {where}"), {"d": hour1}
                )
                conn.execute(sa.text("UPDATE copied SET target = 'aux'"))
                conn.execute(sa.text(f"INSERT INTO {table} ({columns}) SELECT * FROM copied; DROP TABLE copied"))
        alerts = dg.materialize(
            assets,
            partition_key=_key(timeline, 1),
            resources=resources,
            instance=instance,
            selection=[assets[1]],
            raise_on_error=False,
        )
        log = run_log_text(instance, alerts.run_id)
    assert not alerts.success and "grafana: RuntimeError: a bug in a channel" in log
    assert sorted(i.dedup_key for i in pagerduty.incidents) == sorted(
        dedup_key(t, _statement_of(warehouse, t, 31), hour1) for t in ("aux", "main")
    )
    assert len(broken.received) == 1  # main's, on the broken channel too


def _statement_of(warehouse, target: str, queryid: int) -> tuple[int, int, int, bool]:  # type: ignore[no-untyped-def]
    with warehouse.connect() as conn:
        row = conn.execute(
            sa.text(
                "SELECT DISTINCT dbid, userid, queryid, toplevel FROM radar.alert WHERE target = :t AND queryid = :q"
            ),
            {"t": target, "q": queryid},
        ).one()
    return (int(row[0]), int(row[1]), int(row[2]), bool(row[3]))


def test_a_trigger_that_may_have_opened_an_incident_is_resolved_when_it_ends_unsent(analysed, warehouse_url, pagerduty):  # noqa: F811
    """Attempt 1 times out after PagerDuty took the trigger; the re-analysis then drops the statement, so the retry
    skips the trigger: the incident it may have opened is resolved all the same (its dedup_key was recorded)."""
    held = pagerduty.hold_next(EVENTS)
    first, _ = _alert(warehouse_url, _channels(pagerduty, timeout_seconds=HELD_TIMEOUT))
    held.set()
    assert first.success and len(pagerduty.open_incidents()) == 1
    (row,) = _rows(analysed)
    assert (row["status"], row["remote_id"]) == ("pending", dedup_key("main", SLOWED, "d-7"))
    with analysed.begin() as conn:
        conn.execute(sa.text("UPDATE radar.verdict SET verdict = 'no_regression' WHERE deploy_id = 'd-7'"))
    _backoff_passes(analysed)
    assert _alert(warehouse_url, _channels(pagerduty))[0].success
    assert _rows(analysed)[0]["status"] in ("pending", "skipped")  # never sent again: no longer announced
    assert not pagerduty.open_incidents()
    assert [c["event_action"] for c in pagerduty.calls_to(EVENTS)] == ["trigger", "resolve"]
    with analysed.begin() as conn:  # it ends withheld (too old) or skipped: nothing more is sent
        conn.execute(sa.text("UPDATE radar.alert SET status = 'withheld' WHERE channel = 'pagerduty'"))
    _backoff_passes(analysed)
    assert _alert(warehouse_url, _channels(pagerduty))[0].success
    assert [c["event_action"] for c in pagerduty.calls_to(EVENTS)] == ["trigger", "resolve"]


def test_a_refused_trigger_is_never_resolved(analysed, warehouse_url, pagerduty):  # noqa: F811
    assert _alert(warehouse_url, _channels(pagerduty, key=KEY[:31]))[0].success  # 400: nothing opened
    (row,) = _rows(analysed)
    assert (row["status"], row["remote_id"]) == ("failed", None)
    with analysed.begin() as conn:
        conn.execute(sa.text("UPDATE radar.verdict SET verdict = 'no_regression' WHERE deploy_id = 'd-7'"))
    assert _alert(warehouse_url, _channels(pagerduty))[0].success
    assert [c["event_action"] for c in pagerduty.calls_to(EVENTS)] == ["trigger"]
    assert [r["kind"] for r in _rows(analysed, "radar.channel_event")] == ["deploy_mark"]


def test_a_waiting_resolve_closes_a_trigger_that_may_have_opened_and_ended_withheld(
    timeline,  # noqa: F811
    warehouse,
    warehouse_url,
    pagerduty,
):
    """Hour 1's trigger times out after PagerDuty took it; hour 4 recovers while it waits; it then ends withheld (too
    old): its waiting resolve is not skipped but sent, with the trigger's dedup_key."""
    assets, resources = _periodic(
        warehouse_url,
        _channels(pagerduty, routes="regression=pagerduty", timeout_seconds=HELD_TIMEOUT),
        SlackResource(),
    )
    hour1 = "periodic:" + _key(timeline, 1)
    held = pagerduty.hold_next(EVENTS)
    with dg.instance_for_test() as instance:
        for hour in range(1, 5):
            result = dg.materialize(assets, partition_key=_key(timeline, hour), resources=resources, instance=instance)
            assert result.success
            held.set()
        assert len(pagerduty.open_incidents()) == 1
        with warehouse.begin() as conn:  # as withhold_old does to a trigger still unsent after the age limit
            conn.execute(sa.text("UPDATE radar.alert SET status = 'withheld', outcome_unknown = false"))
        _backoff_passes(warehouse)
        retry = dg.materialize(
            assets, partition_key=_key(timeline, 1), resources=resources, instance=instance, selection=[assets[1]]
        )
        assert retry.success
    assert not pagerduty.open_incidents()
    resolves = [c for c in pagerduty.calls_to(EVENTS) if c["event_action"] == "resolve"]
    assert [c["dedup_key"] for c in resolves] == [dedup_key("main", _statement(warehouse, 31), hour1)]
    assert {(r["kind"], r["status"]) for r in _rows(warehouse, "radar.channel_event")} == {("resolve", "sent")}


def test_slacks_error_is_raised_even_when_the_channels_fail_too(analysed, warehouse_url, pagerduty, slack, monkeypatch):  # noqa: F811
    def broken(*args: object) -> None:
        raise RuntimeError("a bug in PagerDuty's path")

    monkeypatch.setattr(PagerDutyChannel, "mark_deploy", broken)
    result, log = _alert(warehouse_url, _channels(pagerduty), _broken_slack(monkeypatch, slack), raise_on_error=False)
    failure = result.failure_data_for_node("regression_alerts")
    assert failure is not None and failure.error is not None and failure.error.cause is not None
    assert failure.error.cause.message == "RuntimeError: a bug in Slack's path\n"  # the run's error, after the channels
    assert "Slack: RuntimeError: a bug in Slack's path" in log and "a bug in PagerDuty's path" in log
