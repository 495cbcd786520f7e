"""Every channel beyond Slack in one real run of regression_alerts: PagerDuty, Microsoft Teams, Grafana and a generic
webhook, each configured the way the definitions configure them (ChannelsResource), each on the wire against its
loopback stand-in, with the real warehouse's outbox; and the checks made when the definitions load."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import dagster as dg
import pytest
import sqlalchemy as sa

from radar_pipeline.config import ConfigError
from radar_pipeline.config.settings import settings
from radar_pipeline.defs.deploys.deploy_marks import deploy_mark_sensor, deploy_marks_job
from radar_pipeline.defs.resources import ChannelsResource, WarehouseResource, destinations
from radar_pipeline.warehouse import deploys

from . import fake_grafana, fake_pagerduty, fake_webhook
from .fake_webhook import Mode
from .test_alerts import analysed  # noqa: F401 - the fixture is used by name
from .test_channels import KEY, _alert, _backoff_passes, _rows
from .test_channels_outlets import TEMPLATE


@pytest.fixture
def stand_ins() -> Iterator[tuple[fake_pagerduty.FakePagerDuty, fake_webhook.FakeWebhook, fake_grafana.FakeGrafana]]:
    pd, pd_http = fake_pagerduty.start()
    hook, hook_http = fake_webhook.start()
    grafana, grafana_http = fake_grafana.start()
    yield pd, hook, grafana
    for http in (pd_http, hook_http, grafana_http):
        http.shutdown()


def _every_channel(pd, hook, grafana, **kwargs: object) -> ChannelsResource:  # type: ignore[no-untyped-def]
    return ChannelsResource(
        pagerduty_routing_key=KEY,
        pagerduty_url=pd.url,
        teams_webhook_url=hook.teams_url,
        grafana_url=grafana.url,
        grafana_token=fake_grafana.TOKEN,
        webhooks=json.dumps({"ops": {"url": hook.hook_url("ops"), "template": TEMPLATE}}),
        webhook_allowed_hosts=f"127.0.0.1:{hook.port}",
        **kwargs,  # type: ignore[arg-type]
    )


def test_one_run_reaches_every_routed_channel_once(analysed, warehouse_url, stand_ins):  # noqa: F811
    pd, hook, grafana = stand_ins
    result, log = _alert(warehouse_url, _every_channel(pd, hook, grafana))
    assert result.success
    assert len(pd.incidents) == 1 and len(pd.changes) == 1
    teams = [c for c in hook.delivered if c.path.startswith("/workflows/")]
    posted = [c for c in hook.delivered if c.path == "/hook/ops"]
    assert len(teams) == 1 and teams[0].json["attachments"][0]["contentType"].endswith("card.adaptive")
    assert len(posted) == 1 and posted[0].json["queryid"] == 11 and posted[0].headers["idempotency-key"]
    kinds = sorted(t for a in grafana.annotations for t in a["tags"] if t.startswith("kind:"))
    assert kinds == ["kind:deploy", "kind:regression"]
    assert {a["tags"][0] for a in grafana.annotations} == {"radar"}
    assert sorted((r["channel"], r["status"]) for r in _rows(analysed)) == [
        ("grafana", "sent"),
        ("pagerduty", "sent"),
        ("teams", "sent"),
        ("webhook:ops", "sent"),
    ]
    for secret in (KEY, fake_grafana.TOKEN, fake_webhook.SIG):
        assert secret not in log

    again, _ = _alert(warehouse_url, _every_channel(pd, hook, grafana))
    assert again.success
    assert len(hook.delivered) == 2 and len(grafana.annotations) == 2 and len(pd.incidents) == 1


def test_routing_keeps_each_outcome_to_its_channels(analysed, warehouse_url, stand_ins):  # noqa: F811
    pd, hook, grafana = stand_ins
    routes = "regression=teams deploy=grafana"
    result, _ = _alert(warehouse_url, _every_channel(pd, hook, grafana, routes=routes))
    assert result.success
    assert (
        not pd.calls_to(fake_pagerduty.EVENTS)
        and not pd.changes
        and [c.path.split("/")[1] for c in hook.delivered] == ["workflows"]
    )
    assert [t for a in grafana.annotations for t in a["tags"] if t.startswith("kind:")] == ["kind:deploy"]


def test_a_grafana_timeout_after_it_added_the_annotation_is_still_one(analysed, warehouse_url, stand_ins):  # noqa: F811
    """Grafana can be asked: the next attempt finds the annotation by its delivery tag and does not add it again."""
    pd, hook, grafana = stand_ins
    grafana.answer_next(Mode(usual=True, delay=3.0))  # the first POST (the deploy's mark) is taken, answered late
    grafana.answer_next(Mode(usual=True, delay=3.0))  # and so is the detection's
    first, log = _alert(warehouse_url, _every_channel(pd, hook, grafana, routes="regression=grafana deploy=grafana",
                                                      timeout_seconds=1.0))  # fmt: skip
    assert first.success
    assert len(grafana.annotations) == 2
    with analysed.connect() as conn:
        waiting = conn.execute(
            sa.text(
                "SELECT count(*) FROM (SELECT outcome_unknown FROM radar.alert WHERE channel = 'grafana' UNION ALL "
                "SELECT outcome_unknown FROM radar.channel_event WHERE channel = 'grafana') x WHERE outcome_unknown"
            )
        ).scalar_one()
    assert waiting == 2
    _backoff_passes(analysed)
    second, _ = _alert(warehouse_url, _every_channel(pd, hook, grafana, routes="regression=grafana deploy=grafana"))
    assert second.success and len(grafana.annotations) == 2  # found, not added again
    assert [(r["channel"], r["status"]) for r in _rows(analysed)] == [("grafana", "sent")]
    assert [r["status"] for r in _rows(analysed, "radar.channel_event")] == ["sent"]


@pytest.mark.parametrize(
    ("environment", "message"),
    [
        (
            {"RADAR_WEBHOOKS": '{"ops": {"url": "https://evil.example.net/x", "template": "{}"}}',
             "RADAR_WEBHOOK_ALLOWED_HOSTS": "hooks.example.com"},
            "RADAR_WEBHOOKS (ops)",
        ),
        (
            {"RADAR_WEBHOOKS": '{"ops": {"url": "https://hooks.example.com/x", "template": "{{ x.__class__ }}"}}',
             "RADAR_WEBHOOK_ALLOWED_HOSTS": "hooks.example.com"},
            "RADAR_WEBHOOKS (ops)",
        ),
        (
            {"RADAR_TEAMS_WEBHOOK_URL": "https://prod.logic.azure.com/workflows/1?sig=abc",
             "RADAR_CHANNEL_ROUTES": "deploy=teams"},
            "RADAR_CHANNEL_ROUTES routes deploy to teams, which cannot take it",
        ),
        ({"RADAR_CHANNEL_ROUTES": "regression=webhook:ops"}, "RADAR_CHANNEL_ROUTES routes regression to webhook:ops, "
                                                              "which is not configured (set RADAR_WEBHOOKS"),
    ],
)  # fmt: skip
def test_the_load_refuses_a_channel_it_cannot_send_to(monkeypatch, environment, message):
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as refused:
        destinations(settings())["channels"]
    assert str(refused.value).startswith(message) and "\n" not in str(refused.value), str(refused.value)
    assert "sig=abc" not in str(refused.value)


def test_the_load_keeps_every_channels_secret_out_of_its_config(monkeypatch):
    secrets = {
        "RADAR_TEAMS_WEBHOOK_URL": "https://prod.logic.azure.com/workflows/1?sig=Teams0secret",
        "RADAR_GRAFANA_URL": "https://grafana.example.com",
        "RADAR_GRAFANA_TOKEN": "glsa_Grafana0secret",
        "RADAR_WEBHOOKS": '{"ops": {"url": "https://hooks.example.com/x?k=Hook0secret", "template": "{}"}}',
        "RADAR_WEBHOOK_ALLOWED_HOSTS": "hooks.example.com",
    }
    for name, value in secrets.items():
        monkeypatch.setenv(name, value)
    resource = destinations(settings())["channels"]
    shown = repr(resource) + str(resource.model_dump())
    assert not [s for s in ("Teams0secret", "Grafana0secret", "Hook0secret") if s in shown], shown


_CURSORS: dict[int, str | None] = {}  # the sensor's cursor per instance, kept between ticks as the daemon does


def _tick(instance: dg.DagsterInstance, resources: dict) -> dg.ExecuteInProcessResult | None:
    """One real tick of deploy_mark_sensor against the warehouse, and the run it requested (None: it requested none)."""
    cursor = _CURSORS.get(id(instance))
    tick = deploy_mark_sensor(dg.build_sensor_context(instance=instance, resources=resources, cursor=cursor))
    if isinstance(tick, dg.SkipReason):
        return None
    _CURSORS[id(instance)] = tick.cursor
    (request,) = tick.run_requests or []
    tags = {**request.tags, "dagster/run_key": request.run_key or ""}
    job = dg.Definitions(jobs=[deploy_marks_job], resources=resources).resolve_job_def(deploy_marks_job.name)
    return job.execute_in_process(instance=instance, tags=tags, raise_on_error=False)


def test_a_deploy_is_marked_soon_after_it_is_recorded(analysed, warehouse_url, stand_ins):  # noqa: F811
    """The marks go out from deploy_mark_sensor's run, before any analysis: a deploy never analysed is marked too, a
    throttled mark is retried by a later tick, an imported or old deploy is not marked, and regression_alerts finds
    the marks sent."""
    pd, hook, grafana = stand_ins
    with analysed.begin() as conn:  # d-7's analysis has not run its alerts: nothing is marked yet
        conn.execute(sa.text("DELETE FROM radar.channel_event"))
    now = datetime.now(UTC).replace(microsecond=0)
    for event in (
        deploys.DeployEvent("d-8", "main", now - timedelta(seconds=20), service="api", version="v8"),  # no analysis
        deploys.DeployEvent("d-old", "main", now - timedelta(days=3), service="api", version="v0"),
        deploys.DeployEvent("d-imp", "main", now - timedelta(hours=1), source="import"),
    ):
        deploys.record(analysed, event)
    channels = _every_channel(pd, hook, grafana, routes="regression=teams deploy=pagerduty,grafana")
    resources = {"warehouse": WarehouseResource(url=warehouse_url), "channels": channels}
    pd.throttle_next(fake_pagerduty.CHANGES, "1")
    with dg.instance_for_test() as instance:
        run = _tick(instance, resources)
        assert run is not None and run.success
        assert sorted(c["payload"]["custom_details"]["deploy_id"] for c in pd.changes) == ["d-8"]  # d-7's was throttled
        assert sorted(t for a in grafana.annotations for t in a["tags"] if t.startswith("deploy:")) == [
            "deploy:d-7",
            "deploy:d-8",
        ]
        assert _tick(instance, resources) is None  # the throttled mark waits out its backoff: no run
        _backoff_passes(analysed)
        again = _tick(instance, resources)
        assert again is not None and again.success
        assert sorted(c["payload"]["custom_details"]["deploy_id"] for c in pd.changes) == ["d-7", "d-8"]
        assert _tick(instance, resources) is None  # nothing more is due
    rows = {(r["channel"], r["subject"], r["status"]) for r in _rows(analysed, "radar.channel_event")}
    assert rows == {(c, d, "sent") for c in ("pagerduty", "grafana") for d in ("d-7", "d-8")}

    result, _ = _alert(warehouse_url, channels)  # the deploy's alerts: the marks are already sent
    assert result.success and len(pd.changes) == 2
    assert len([a for a in grafana.annotations if "kind:deploy" in a["tags"]]) == 2


def test_no_tick_runs_without_a_channel_routed_deploys(analysed, warehouse_url, stand_ins):  # noqa: F811
    pd, hook, grafana = stand_ins
    channels = _every_channel(pd, hook, grafana, routes="regression=pagerduty")
    resources = {"warehouse": WarehouseResource(url=warehouse_url), "channels": channels}
    with dg.instance_for_test() as instance:
        tick = deploy_mark_sensor(dg.build_sensor_context(instance=instance, resources=resources))
    assert isinstance(tick, dg.SkipReason) and "no channel is routed deploys" in str(tick.skip_message)


def test_a_failed_marks_run_is_not_repeated_every_tick(analysed, warehouse_url, stand_ins, monkeypatch):  # noqa: F811
    """A run that fails before it records anything (a bug, here) fails visibly, and the next tick waits its backoff
    instead of requesting another run at once; after it, what is due is requested again."""
    from radar_pipeline.defs.deploys import deploy_marks as module
    from radar_pipeline.steps import channel_delivery

    pd, hook, grafana = stand_ins
    channels = _every_channel(pd, hook, grafana, routes="deploy=pagerduty")
    resources = {"warehouse": WarehouseResource(url=warehouse_url), "channels": channels}

    def broken(*args: object) -> None:
        raise RuntimeError("a bug before anything is recorded")

    monkeypatch.setattr(channel_delivery, "mark_recent_deploys", broken)
    with dg.instance_for_test() as instance:
        run = _tick(instance, resources)
        assert run is not None and not run.success and not pd.changes
        tick = deploy_mark_sensor(dg.build_sensor_context(instance=instance, resources=resources))
        assert isinstance(tick, dg.SkipReason) and "failed" in str(tick.skip_message)
        monkeypatch.undo()
        monkeypatch.setattr(module, "FAILED_RUN_BACKOFF_S", 0)
        again = _tick(instance, resources)
        assert again is not None and again.success and len(pd.changes) == 1


def test_the_mark_sensor_names_a_stuck_run_backs_off_and_counts_its_requests(
    analysed,  # noqa: F811
    warehouse_url,
    stand_ins,
    monkeypatch,
):
    """An unfinished run is named in the skip (with its status and age); failed runs in a row double the wait; a
    request carries dagster/max_runtime (run monitoring ends a stuck run) and a run key from the cursor's counter
    (started from the clock, so a reset cursor cannot bring back a key Dagster would skip)."""
    from radar_pipeline.defs.deploys import deploy_marks as module

    pd, hook, grafana = stand_ins
    channels = _every_channel(pd, hook, grafana, routes="deploy=pagerduty")
    resources = {"warehouse": WarehouseResource(url=warehouse_url), "channels": channels}
    job = dg.Definitions(jobs=[deploy_marks_job], resources=resources).resolve_job_def(deploy_marks_job.name)

    def tick(cursor: str | None = None) -> dg.SensorResult | dg.SkipReason:
        return deploy_mark_sensor(dg.build_sensor_context(instance=instance, resources=resources, cursor=cursor))

    with dg.instance_for_test() as instance:
        stuck = instance.create_run_for_job(job, status=dg.DagsterRunStatus.STARTED)
        skipped = tick()
        assert isinstance(skipped, dg.SkipReason)
        assert f"run {stuck.run_id} of deploy_marks_job is started for" in str(skipped.skip_message)
        instance.report_run_failed(stuck)
        skipped = tick()
        assert isinstance(skipped, dg.SkipReason) and "last 1 run(s)" in str(skipped.skip_message)
        assert "300 s after" in str(skipped.skip_message)
        instance.report_run_failed(instance.create_run_for_job(job, status=dg.DagsterRunStatus.STARTED))
        skipped = tick()
        assert isinstance(skipped, dg.SkipReason) and "last 2 run(s)" in str(skipped.skip_message)
        assert "600 s after" in str(skipped.skip_message)  # doubled
        monkeypatch.setattr(module, "FAILED_RUN_BACKOFF_S", 0)
        before = int(time.time())
        first = tick()
        assert isinstance(first, dg.SensorResult) and first.run_requests
        (request,) = first.run_requests
        assert request.tags["dagster/max_runtime"] == "900"
        count = int((request.run_key or "").rsplit(":", 1)[1])
        assert before <= count <= time.time() and first.cursor == str(count + 1)
        later = tick(first.cursor)
        assert isinstance(later, dg.SensorResult) and later.run_requests
        assert (later.run_requests[0].run_key or "").endswith(f":{count + 1}") and later.cursor == str(count + 2)
