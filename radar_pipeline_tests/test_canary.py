"""The canary arm on the embedded PostgreSQL 18 (docs/canary.md): a stable role and canary roles run the same
statement in the same minutes; one canary role is slowed by a role-level setting (its plan turns from an index scan
to a sequential scan); the real collector scrapes; the deploys are recorded with --canary-role through the CLI; the
canary analysis runs (the step, and through Dagster: canary_sensor's request, canary_verdicts' run); the slowed canary
is detected, the unslowed one is not; `radar gate` answers from the canary verdict; bad input gets a clear error."""

from __future__ import annotations

import dataclasses
import json
import logging
import random
import re
import socket
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import dagster as dg
import psycopg
import pytest
import sqlalchemy as sa
from click.testing import CliRunner

from radar_pipeline.alerts.code_hosts import HostClient
from radar_pipeline.cli import main
from radar_pipeline.config import Target
from radar_pipeline.defs.deploys.canary_verdicts import canary_sensor, canary_verdicts, canary_verdicts_job
from radar_pipeline.defs.deploys.deploy_verdicts import ANALYSIS_RETRY
from radar_pipeline.defs.resources import AnalysisResource, CodeHostResource, TargetsResource, WarehouseResource
from radar_pipeline.engine import EngineSettings
from radar_pipeline.steps.canary import CanaryUnavailable, analyse_canary, record_failure
from radar_pipeline.steps.code_host_delivery import deliver
from radar_pipeline.steps.deploy_analysis import AnalysisRun
from radar_pipeline.steps.snapshots import snapshot_target
from radar_pipeline.warehouse.database import make_engine

from . import fake_code_host
from .conftest import warehouse_copy
from .fake_code_host import TOKEN, FakeHost
from .helpers import COLLECTOR, collector_target

# A range of 300 rows by the primary key: an index scan, or with index scans off a sequential scan of 50,000 rows.
LOOKUP = "SELECT count(*), max(payload) FROM items WHERE id BETWEEN %s::int AND %s::int + 300"
# Paired intervals: with a dozen, the serial correlation's margin could leave the test about one degree of freedom;
# with 24, a loaded CI run left it about one too (a detection at ×45.8 shown with an interval from ×0.02).
ROUNDS = 40
CALLS = {"stable": 30, "slow": 10, "plain": 10}


@dataclass
class Canary:
    """The watched database, its target as the collector reaches it, the roles by part, and the two deploys."""

    target: Target
    roles: dict[str, str]
    deployed_at: datetime
    last_scrape: datetime


SETTLE = timedelta(seconds=1)  # scrape_interval_seconds of the AnalysisResource the Dagster tests configure


def _invoke(args: list[str], url: str):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(main, [*args, "--warehouse", url], env={"COLUMNS": None, "RADAR_TARGETS": None})


def _now(warehouse: sa.Engine) -> datetime:
    with warehouse.connect() as conn:
        return conn.execute(sa.text("SELECT now()")).scalar_one()


@pytest.fixture(scope="module")
def canary_scenario(pg18, warehouse_template) -> Iterator[tuple[Canary, str]]:
    """A database whose stable role and two canary roles run LOOKUP in the same minutes, the `slow` canary with
    index scans off (a sequential scan of 50,000 rows a call), after two deploys recorded through the CLI: cn-slow
    names the slow canary's role, cn-plain the unslowed one's. Built once for the module (its workload and scrapes
    took about 20 s a test): the watched database and its roles are only read by the tests, and the warehouse the
    scrapes and deploys went to is the template each test's own warehouse is copied from (`warehouse_url` below)."""
    database = pg18.new_database("canary")
    scenario = pg18.new_database("canary_warehouse", template=warehouse_template)
    scenario_url = pg18.pg.url(scenario, driver="postgresql+psycopg")
    warehouse = make_engine(scenario_url)
    suffix = uuid.uuid4().hex[:8]
    roles = {part: f"{part}_{suffix}" for part in ("stable", "slow", "plain", "idle")}
    pg18.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements", database)
    pg18.execute("CREATE TABLE items (id int PRIMARY KEY, payload text)", database)
    pg18.execute("INSERT INTO items SELECT g, md5(g::text) FROM generate_series(1, 50000) g", database)
    pg18.execute("ANALYZE items", database)
    for role in roles.values():
        pg18.execute(f"CREATE ROLE {role} LOGIN")
        pg18.execute(f"GRANT SELECT ON items TO {role}", database)
    for setting in ("enable_indexscan", "enable_bitmapscan", "enable_indexonlyscan"):
        pg18.execute(f"ALTER ROLE {roles['slow']} SET {setting} = off")
    target = Target(f"canary_{suffix}", pg18.pg.url(database))
    collector = collector_target(target)
    snapshot_target(collector, warehouse, exclude_role=COLLECTOR)  # the target is known to the warehouse
    for deploy_id, part in (("cn-slow", "slow"), ("cn-plain", "plain"), ("cn-idle", "idle")):
        recorded = _invoke(["deploy", "--target", target.name, "--id", deploy_id, "--canary-role", roles[part]],
                           scenario_url)  # fmt: skip
        assert recorded.exit_code == 0, recorded.output
    deployed_at = _now(warehouse)
    sessions = {part: psycopg.connect(target.dsn.replace("postgres@", f"{roles[part]}@"), autocommit=True)
                for part in CALLS}  # fmt: skip
    try:
        last = deployed_at
        rng = random.Random(29)
        calls = [part for part, n in CALLS.items() for _ in range(n)]
        for _ in range(ROUNDS):
            rng.shuffle(calls)  # interleaved in a random order: every arm meets the same load and the same neighbours
            for part in calls:
                low = rng.randrange(33_000, 49_000)  # one parameter type (int4) for every call: one queryid
                sessions[part].execute(LOOKUP, (low, low))
            last = snapshot_target(collector, warehouse, exclude_role=COLLECTOR).captured_at
    finally:
        for conn in sessions.values():
            conn.close()
    warehouse.dispose()
    # A template must have no session open while it is copied (the CLI's engine may keep its connection).
    pg18.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", params=(scenario,))
    yield Canary(collector, roles, deployed_at, last), scenario
    pg18.drop_database(scenario)
    pg18.drop_database(database)
    for role in roles.values():
        pg18.execute(f"DROP ROLE IF EXISTS {role}")


@pytest.fixture
def warehouse_url(request: pytest.FixtureRequest, pg18, warehouse_template: str) -> Iterator[str]:
    """conftest's fresh warehouse, for a test of the canary scenario a copy of the scenario's warehouse (its scrapes
    and the three deploys): each test changes its own copy only."""
    canary_test = "canary" in request.fixturenames
    template = request.getfixturevalue("canary_scenario")[1] if canary_test else warehouse_template
    yield from warehouse_copy(pg18, template)


@pytest.fixture
def canary(canary_scenario, warehouse_url) -> Canary:
    """The scenario (canary_scenario), its warehouse this test's own copy (warehouse_url)."""
    return canary_scenario[0]


def _run(warehouse: sa.Engine, canary: Canary) -> AnalysisRun:
    """An analysis run whose window W reaches the last scrape from the earliest deploy, able to reach the target,
    once the window and one scrape interval after it (the settle of the Dagster tests' resources) have passed."""
    window = canary.last_scrape - canary.deployed_at + timedelta(seconds=5)
    deadline = time.monotonic() + 60
    while _now(warehouse) < canary.deployed_at + window + SETTLE:  # closed by the warehouse's clock
        assert time.monotonic() < deadline
        time.sleep(0.1)
    return AnalysisRun(warehouse, EngineSettings(window=window), live_targets={canary.target.name: canary.target})


# The module's first canary test: its attempt numbers count from when the scenario's deploys fell due (attempt 1
# starts RETRY_BASE, 5 minutes, after), and the scenario is built once for the module, just before its first test.
def test_a_canary_analysis_not_stored_is_asked_for_again_until_its_horizon(canary, warehouse, warehouse_url):
    assert canary_verdicts_job.op_retry_policy == ANALYSIS_RETRY  # a blip is retried in the run
    window = _run(warehouse, canary).settings.window
    now = _now(warehouse)
    for deploy_id, at in (("cn-late", now - window - timedelta(minutes=21)), ("cn-old", now - timedelta(days=2))):
        recorded = _invoke(["deploy", "--target", canary.target.name, "--id", deploy_id, "--at", at.isoformat(),
                            "--canary-role", canary.roles["plain"]], warehouse_url)  # fmt: skip
        assert recorded.exit_code == 0, recorded.output
    with warehouse.begin() as conn:  # as if they had been reported when they happened
        conn.execute(
            sa.text("UPDATE radar.deploy_event SET received_at = deployed_at WHERE deploy_id IN ('cn-late', 'cn-old')")
        )
    resources = {
        "warehouse": WarehouseResource(url=warehouse_url),
        "analysis": AnalysisResource(window_seconds=window.total_seconds(), scrape_interval_seconds=1),
    }
    deadline = time.monotonic() + 60
    while _now(warehouse) < canary.deployed_at + window + timedelta(seconds=1):  # the fixture's deploys fall due
        assert time.monotonic() < deadline
        time.sleep(0.1)
    with dg.instance_for_test() as instance:
        result = canary_sensor(dg.build_sensor_context(instance=instance, resources=resources))
    assert isinstance(result, dg.SensorResult)
    keys = [r.run_key for r in result.run_requests or []]
    # the deploys just due first (attempt 0); cn-late's first runs, 20 minutes ago, failed: its attempt 2 now (the
    # attempts start 0, 5, 15, 35 minutes after the analysis fell due); cn-old is past the horizon
    assert keys[-1] == "canary:cn-late:2", keys
    assert sorted(keys[:-1]) == ["canary:cn-idle:0", "canary:cn-plain:0", "canary:cn-slow:0"], keys
    gate = _invoke(["gate", "cn-old", "--format", "json"], warehouse_url)
    answer = json.loads(gate.stdout)
    assert answer["canary"]["state"] == "error", answer
    assert answer["canary"]["error"].startswith("no canary analysis was stored within 24 h"), answer
    late = _invoke(["gate", "cn-late"], warehouse_url)
    assert late.exit_code == 4 and "waiting for the canary analysis" in late.stdout, late.output


def test_a_slowed_canary_is_detected_and_an_unslowed_one_is_not(canary, warehouse, warehouse_url):
    pending = _invoke(["gate", "cn-slow"], warehouse_url)
    assert pending.exit_code == 4, pending.output  # a canary deploy waits for its canary verdict
    assert "waiting for the canary analysis" in pending.stdout

    run = _run(warehouse, canary)
    slow = analyse_canary(run, "cn-slow")
    assert slow.error is None and slow.stable_role == canary.roles["stable"]
    lookup = slow.verdicts[slow.verdicts["calls_canary"] > 0]
    assert len(lookup) == 1, slow.verdicts
    row = lookup.iloc[0]
    assert row["verdict"] == "detected", row.to_dict()
    assert row["change_factor"] > 5 and row["factor_low"] > 1, row.to_dict()  # a sequential scan of 50,000 rows a call
    assert slow.state == "fail"

    plain = analyse_canary(run, "cn-plain")
    assert plain.error is None and plain.stable_role == canary.roles["stable"]
    decided = plain.verdicts[plain.verdicts["calls_canary"] > 0].iloc[0]
    assert decided["verdict"] in ("no_regression", "inconclusive"), decided.to_dict()
    assert decided["factor_low"] < 1.2 < decided["factor_high"] or decided["factor_high"] < 1.5
    assert plain.state in ("pass", "inconclusive")

    failed = _invoke(["gate", "cn-slow"], warehouse_url)
    assert failed.exit_code == 1, failed.output
    lines = failed.stdout.splitlines()
    assert lines[0] == "deploy cn-slow: fail"
    assert f"decided by the canary arm: role {canary.roles['slow']} against stable role {canary.roles['stable']}" in (
        failed.stdout
    )
    assert "before/after: pending" in failed.stdout  # no before/after analysis yet: the canary answered
    assert "FROM items WHERE id BETWEEN $1::int AND $2::int + $3" in failed.stdout
    answered = _invoke(["gate", "cn-plain", "--format", "json"], warehouse_url)
    assert answered.exit_code in (0, 3), answered.output
    assert '"before_after_state": "pending"' in answered.stdout and '"canary": {' in answered.stdout

    shown = _invoke(["verdicts", "cn-slow"], warehouse_url)
    assert shown.exit_code == 0, shown.output
    assert shown.stdout.startswith(f"canary role {canary.roles['slow']} against stable role {canary.roles['stable']} (")
    assert "fail; 1 detected" in shown.stdout and "no before/after verdicts yet" in shown.stdout
    scripted = _invoke(["verdicts", "cn-slow", "--canary", "--format", "json"], warehouse_url)
    assert scripted.exit_code == 0, scripted.output
    rows = [r for r in json.loads(scripted.stdout) if r["calls_canary"] > 0]
    assert [(r["verdict"], r["queryid"]) for r in rows] == [("detected", int(row["queryid"]))]


def test_bad_canary_input_gets_a_clear_error(canary, warehouse, warehouse_url):
    run = _run(warehouse, canary)
    idle = analyse_canary(run, "cn-idle")
    assert idle.state == "error"
    assert idle.error == (
        f"canary role {canary.roles['idle']!r} ran no statements on target {canary.target.name!r} in the canary window"
    )
    gate = _invoke(["gate", "cn-idle"], warehouse_url)  # the gate falls back to the before/after verdict, and says why
    assert gate.exit_code == 4 and "not analysed: canary role" in gate.stdout, gate.output

    recorded = _invoke(["deploy", "--target", canary.target.name, "--id", "cn-ghost", "--at",
                        canary.deployed_at.isoformat(), "--canary-role", "no_such_role_x"], warehouse_url)  # fmt: skip
    assert recorded.exit_code == 0, recorded.output
    ghost = analyse_canary(run, "cn-ghost")
    assert (
        ghost.error
        == f"canary role 'no_such_role_x' of deploy 'cn-ghost' is not a role on target {canary.target.name!r}"
    )
    with warehouse.connect() as conn:
        stored = conn.execute(
            sa.text("SELECT state, error FROM radar.canary_analysis WHERE deploy_id = 'cn-ghost'")
        ).one()
    assert stored.state == "error" and "no_such_role_x" in stored.error
    shown = _invoke(["verdicts", "cn-ghost"], warehouse_url)
    assert "error: canary role 'no_such_role_x'" in shown.stdout, shown.output


def test_canary_sensor_and_asset_decide_it_through_dagster(canary, warehouse, warehouse_url):
    window = _run(warehouse, canary).settings.window
    resources = {
        "warehouse": WarehouseResource(url=warehouse_url),
        "analysis": AnalysisResource(window_seconds=window.total_seconds(), scrape_interval_seconds=1),
        "targets": TargetsResource(spec=f"{canary.target.name}={canary.target.dsn}"),
        "code_hosts": CodeHostResource(),
    }
    deadline = time.monotonic() + 60
    while _now(warehouse) < canary.deployed_at + window + timedelta(seconds=1):
        assert time.monotonic() < deadline
        time.sleep(0.1)
    with dg.instance_for_test() as instance:
        result = canary_sensor(dg.build_sensor_context(instance=instance, resources=resources))
        assert isinstance(result, dg.SensorResult)
        requested = sorted(r.partition_key for r in result.run_requests or [])
        assert requested == ["cn-idle", "cn-plain", "cn-slow"]
        assert [r.run_key for r in result.run_requests or []][0].startswith("canary:")
        instance.add_dynamic_partitions("deploys", requested)
        done = dg.materialize([canary_verdicts], partition_key="cn-slow", resources=resources, instance=instance)
        assert done.success
        metadata = done.asset_materializations_for_node("canary_verdicts")[0].metadata
        assert metadata["state"].value == "fail" and metadata["detected"].value == 1
        idle = dg.materialize(
            [canary_verdicts], partition_key="cn-idle", resources=resources, instance=instance, raise_on_error=False
        )
        assert not idle.success  # bad input fails the run with its reason, stored, and is not asked for again
        again = canary_sensor(dg.build_sensor_context(instance=instance, resources=resources))
        assert isinstance(again, dg.SensorResult)
        assert sorted(r.partition_key for r in again.run_requests or []) == ["cn-plain"]


def _closed_port_target(target: Target) -> Target:
    """The target at a loopback port nothing listens on: the watched server unreachable."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return dataclasses.replace(target, dsn=re.sub(r"@[^/]+/", f"@127.0.0.1:{port}/", target.dsn))


def test_an_unreachable_target_does_not_make_a_canary_role_unknown(canary, warehouse, warehouse_url):
    run = _run(warehouse, canary)
    down = dataclasses.replace(run, live_targets={canary.target.name: _closed_port_target(canary.target)})
    with pytest.raises(CanaryUnavailable, match=f"canary role '{canary.roles['plain']}' of deploy 'cn-plain' cannot"):
        analyse_canary(down, "cn-plain")  # the warehouse knows no such role: nothing says it is none, so retried
    with warehouse.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM radar.canary_analysis")).scalar_one() == 0
    reached = analyse_canary(run, "cn-plain")
    assert reached.error is None and reached.canary_userid is not None
    again = analyse_canary(down, "cn-plain")  # the role's oid is stored now: resolved without the target
    assert again.error is None and again.canary_userid == reached.canary_userid
    assert again.stable_userid == reached.stable_userid and again.stable_role == canary.roles["stable"]

    # the last attempt's failure is stored as the canary analysis's error (never over a stored analysis)
    record_failure(down, "cn-idle", "the last attempt failed: CanaryUnavailable: away")
    record_failure(down, "cn-plain", "the last attempt failed: CanaryUnavailable: away")
    gate = _invoke(["gate", "cn-idle"], warehouse_url)
    assert "not analysed: the last attempt failed: CanaryUnavailable: away; the gate" in gate.stdout, gate.output
    with warehouse.connect() as conn:
        assert conn.execute(
            sa.text("SELECT state FROM radar.canary_analysis WHERE deploy_id = 'cn-plain'")
        ).scalar_one() in ("pass", "inconclusive")


def test_a_canary_deploys_commit_status_is_the_canarys_state(canary, warehouse):
    host = FakeHost("github", "acme/api", "c0ffee" + "0123456789abcdef" * 2 + "01", reviews=[])
    server = fake_code_host.start(host)
    try:
        with warehouse.begin() as conn:
            conn.execute(
                sa.text(
                    "UPDATE radar.deploy_event SET commit_sha = :c, repository = :r, code_host = 'github', "
                    "api_url = :u WHERE deploy_id = 'cn-slow'"
                ),
                {"c": host.commit, "r": host.repository, "u": host.api_url},
            )
        client = HostClient("github", host.api_url, TOKEN, 5.0)

        def send() -> dict:
            return deliver(logging.getLogger("test"), warehouse, {"github": client}, "cn-slow", timedelta(hours=1),
                           datetime.now(UTC), AnalysisResource())  # fmt: skip

        assert send()["note"] == "the deploy's canary analysis is not stored yet"  # as `radar gate`: pending
        analyse_canary(_run(warehouse, canary), "cn-slow")  # the canary arm detects: fail, before/after pending
        sent = send()
        client.close()
    finally:
        server.shutdown()
    assert sent["state"] == "fail" and sent["deliveries"] == {"commit_status": "sent", "review_comment": "skipped"}
    (status,) = host.statuses
    assert status["state"] == "failure", status
    assert status["description"].startswith(f"fail: canary role {canary.roles['slow']} against stable role"), status


def test_the_gate_waits_for_a_canary_analysis_due_later_under_a_longer_window(warehouse, warehouse_url, monkeypatch):
    # With a 6 h window the canary analysis of a deploy 25 h ago fell due 19 h ago: still asked for (its horizon is a
    # day after it fell due), so the gate waits for it. Under the default 30-minute window it would have been given up.
    from radar_pipeline.warehouse import deploys

    at = _now(warehouse) - timedelta(hours=25)
    event = deploys.DeployEvent("cn-long", "canary_long", at, canary_role="web_canary")
    deploys.record(warehouse, event, configured_targets=["canary_long"])
    with warehouse.begin() as conn:  # reported when it happened
        conn.execute(sa.text("UPDATE radar.deploy_event SET received_at = deployed_at WHERE deploy_id = 'cn-long'"))
    env = {"COLUMNS": None, "RADAR_TARGETS": None, "RADAR_WINDOW_SECONDS": "21600"}
    gate = CliRunner().invoke(main, ["gate", "cn-long", "--format", "json", "--warehouse", warehouse_url], env=env)
    answer = json.loads(gate.stdout)
    assert answer["canary"]["error"] is None and answer["canary"]["state"] is None, answer
    assert gate.exit_code == 4 and answer["state"] == "pending", answer
    # the commit status waits for it too (not the before/after state, "not analysed yet" here), by the times this
    # environment configures, as the daemon's canary_sensor
    with warehouse.begin() as conn:
        conn.execute(
            sa.text(
                "UPDATE radar.deploy_event SET commit_sha = :c, repository = 'acme/api', code_host = 'github' "
                "WHERE deploy_id = 'cn-long'"
            ),
            {"c": "c0ffee" + "0123456789abcdef" * 2 + "01"},
        )
    long = AnalysisResource(window_seconds=21600)
    status = deliver(logging.getLogger("test"), warehouse, {}, "cn-long", timedelta(days=2), datetime.now(UTC), long)
    assert status == {"note": "the deploy's canary analysis is not stored yet"}, status
    # past the horizon of the 6 h window (30 h and a scrape after the deploy) it is given up, and the gate says so
    with warehouse.begin() as conn:
        conn.execute(
            sa.text(
                "UPDATE radar.deploy_event SET deployed_at = deployed_at - interval '6 hours', "
                "received_at = received_at - interval '6 hours' WHERE deploy_id = 'cn-long'"
            )
        )
    gate = CliRunner().invoke(main, ["gate", "cn-long", "--format", "json", "--warehouse", warehouse_url], env=env)
    answer = json.loads(gate.stdout)
    assert answer["canary"]["state"] == "error", answer
    assert answer["canary"]["error"].startswith("no canary analysis was stored within 24 h"), answer


@pytest.fixture
def pagerduty():  # type: ignore[no-untyped-def]
    from . import fake_pagerduty

    state, http = fake_pagerduty.start()
    yield state
    http.shutdown()


def test_a_canary_detection_is_alerted_once_on_slack_and_pagerduty_through_dagster(
    canary, warehouse, warehouse_url, slack, pagerduty
):
    from radar_pipeline.defs.alerts.canary_alerts import canary_alerts
    from radar_pipeline.defs.resources import ChannelsResource, SlackResource
    from radar_pipeline.steps.channel_delivery import resolve_undetected

    from .fake_pagerduty import EVENTS

    window = _run(warehouse, canary).settings.window
    with warehouse.begin() as conn:  # text from outside (the statement, the roles' names) is escaped where shown
        conn.execute(sa.text("UPDATE radar.deploy_event SET service = '<!channel> *shop*' WHERE deploy_id = 'cn-slow'"))
    resources = {
        "warehouse": WarehouseResource(url=warehouse_url),
        "analysis": AnalysisResource(window_seconds=window.total_seconds(), scrape_interval_seconds=1),
        "targets": TargetsResource(spec=f"{canary.target.name}={canary.target.dsn}"),
        "code_hosts": CodeHostResource(),
        "slack": SlackResource(token="xoxb-test-token", channel="#radar", base_url=slack.api_url),
        "channels": ChannelsResource(pagerduty_routing_key="R" * 32, pagerduty_url=pagerduty.url),
    }
    from radar_pipeline.definitions import defs as radar_defs

    repository = radar_defs().get_repository_def()  # in the canary's run, and retried with the deploy's other alerts
    assert "canary_alerts" in {
        k.path[-1] for k in repository.get_job("canary_verdicts_job").asset_layer.executable_asset_keys
    }
    assert "canary_alerts" in {
        k.path[-1] for k in repository.get_job("alert_retry_job").asset_layer.executable_asset_keys
    }
    defs = dg.Definitions(assets=[canary_verdicts, canary_alerts], jobs=[canary_verdicts_job], resources=resources)
    job = defs.resolve_job_def("canary_verdicts_job")
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("deploys", ["cn-slow", "cn-plain"])
        for deploy_id in ("cn-slow", "cn-slow", "cn-plain"):  # the run again (a retry, a re-run) alerts nothing new
            assert job.execute_in_process(instance=instance, partition_key=deploy_id).success
    posts = [p.json for p in slack.calls_to("/api/chat.postMessage")]
    assert len(posts) == 1, posts  # cn-slow once; cn-plain detected nothing
    stable, slow = canary.roles["stable"], canary.roles["slow"]
    blocks = posts[0]["blocks"] if isinstance(posts[0]["blocks"], list) else json.loads(posts[0]["blocks"])
    shown = json.dumps(blocks[1:], ensure_ascii=False)  # the mrkdwn (the header is plain text, never parsed)
    assert f"canary role {slow} ×" in shown and f"against stable role {stable}, same minutes" in shown, shown
    assert "<!channel>" not in shown and "&lt;!channel&gt;" in shown, shown
    assert posts[0]["text"].startswith(f"Canary {slow} of deploy &lt;!channel&gt; *shop*"), posts[0]["text"]
    (incident,) = pagerduty.incidents
    (trigger,) = [c for c in pagerduty.calls_to(EVENTS) if c["event_action"] == "trigger"]
    assert f"canary role {slow} ×" in trigger["payload"]["summary"], trigger
    assert f"against stable role {stable}, same minutes" in trigger["payload"]["summary"], trigger
    with warehouse.connect() as conn:
        rows = conn.execute(
            sa.text("SELECT target, channel, status FROM radar.alert WHERE deploy_id = 'cn-slow' ORDER BY channel")
        ).all()
    assert rows == [
        (f"canary:{canary.target.name}", "#radar", "sent"),
        (f"canary:{canary.target.name}", "pagerduty", "sent"),
    ]
    # the before/after analysis announcing nothing never resolves the canary arm's incident
    from radar_pipeline.alerts.pagerduty import PagerDutyChannel

    channel = PagerDutyChannel("R" * 32, pagerduty.url)
    try:
        resolve_undetected(logging.getLogger("test"), warehouse, channel, "cn-slow", [])
    finally:
        channel.close()
    assert incident.status == "triggered"


def test_a_canary_alert_whose_send_timed_out_is_looked_for_in_the_channel_not_posted_twice(canary, warehouse, slack):
    from radar_pipeline.alerts.slack import SlackSender
    from radar_pipeline.steps.canary import deliver_canary_alerts

    analyse_canary(_run(warehouse, canary), "cn-slow")
    post = "/api/chat.postMessage"
    bot = SlackSender(token="xoxb-test-token", channel="C0RADAR", base_url=slack.api_url, timeout=3)
    log = logging.getLogger("test")

    def send() -> dict:
        return deliver_canary_alerts(log, warehouse, bot, [], "cn-slow", timedelta(hours=1), datetime.now(UTC))

    held = slack.hold_next(post)  # Slack takes the message and answers only after the client gave up
    try:
        send()
    finally:
        held.set()

    def outbox() -> list[tuple]:
        with warehouse.connect() as conn:
            return conn.execute(
                sa.text("SELECT status, outcome_unknown FROM radar.alert WHERE deploy_id = 'cn-slow'")
            ).all()

    assert outbox() == [("pending", True)] and len(slack.messages()) == 1
    with warehouse.begin() as conn:  # the backoff is over: the retry looks in the channel first
        conn.execute(sa.text("UPDATE radar.alert SET next_attempt_at = now() WHERE deploy_id = 'cn-slow'"))
    again = send()
    assert len(slack.calls_to(post)) == 1 and again["to_send"] == 0  # found posted: not sent again
    assert outbox() == [("sent", False)]
    assert send()["to_send"] == 0 and len(slack.calls_to(post)) == 1  # and a run after that sends nothing either


HOSTILE_SERVICE = "<!channel> *shop* [x](http://evil) {{DATE(2017-02-14T06:08:39Z)}} <b>b</b>"
CANARY_HOOK = (
    '{"summary": "{{ summary }}", "target": {{ target|tojson }}, "kind": "{{ kind }}", '
    '"canary": {{ canary|tojson }}, "regression": {{ regression|tojson }}}'
)


def test_a_canary_detection_says_what_it_is_on_every_channel_through_dagster(
    canary, warehouse, warehouse_url, slack, pagerduty
):
    """Teams, Grafana, PagerDuty and a webhook each say the canary role against the stable role over the same minutes,
    with both arms' means and calls, on the real target (not the outbox's `canary:<target>`), never "before/after
    deploy" or "change began"; text from outside escaped as each channel needs."""
    from radar_pipeline.alerts.teams import md
    from radar_pipeline.defs.alerts.canary_alerts import canary_alerts
    from radar_pipeline.defs.resources import ChannelsResource, SlackResource

    from . import fake_grafana, fake_webhook
    from .fake_pagerduty import EVENTS

    window = _run(warehouse, canary).settings.window
    with warehouse.begin() as conn:
        conn.execute(sa.text("UPDATE radar.deploy_event SET service = :s WHERE deploy_id = 'cn-slow'"),
                     {"s": HOSTILE_SERVICE})  # fmt: skip
    hook, hook_http = fake_webhook.start()
    grafana, grafana_http = fake_grafana.start()
    try:
        resources = {
            "warehouse": WarehouseResource(url=warehouse_url),
            "analysis": AnalysisResource(window_seconds=window.total_seconds(), scrape_interval_seconds=1),
            "targets": TargetsResource(spec=f"{canary.target.name}={canary.target.dsn}"),
            "code_hosts": CodeHostResource(),
            "slack": SlackResource(token="xoxb-test-token", channel="#radar", base_url=slack.api_url),
            "channels": ChannelsResource(
                pagerduty_routing_key="R" * 32,
                pagerduty_url=pagerduty.url,
                teams_webhook_url=hook.teams_url,
                grafana_url=grafana.url,
                grafana_token=fake_grafana.TOKEN,
                webhooks=json.dumps({"ops": {"url": hook.hook_url(), "template": CANARY_HOOK}}),
                webhook_allowed_hosts=f"127.0.0.1:{hook.port}",
            ),
        }
        defs = dg.Definitions(assets=[canary_verdicts, canary_alerts], jobs=[canary_verdicts_job], resources=resources)
        with dg.instance_for_test() as instance:
            instance.add_dynamic_partitions("deploys", ["cn-slow"])
            result = defs.resolve_job_def("canary_verdicts_job").execute_in_process(
                instance=instance, partition_key="cn-slow"
            )
            assert result.success
        teams_calls = [c for c in hook.delivered if c.path.startswith("/workflows/")]
        hook_calls = [c for c in hook.delivered if c.path.startswith("/hook/")]
    finally:
        hook_http.shutdown()
        grafana_http.shutdown()
    name, stable, slow = canary.target.name, canary.roles["stable"], canary.roles["slow"]
    with warehouse.connect() as conn:
        (row,) = conn.execute(
            sa.text("SELECT mean_canary_ms, mean_stable_ms, calls_canary, calls_stable, queryid "
                    "FROM radar.canary_verdict WHERE deploy_id = 'cn-slow' AND verdict = 'detected'")
        ).all()  # fmt: skip
        window_start, window_end = conn.execute(
            sa.text("SELECT window_start, window_end FROM radar.canary_analysis WHERE deploy_id = 'cn-slow'")
        ).one()

    # Teams: one card, the canary's words, escaped for the card's markdown
    (teams_call,) = teams_calls
    texts = _strings(teams_call.json)
    card = "\n".join(texts)
    assert any(t.startswith(f"Canary {md(slow)} of deploy") for t in texts), card
    assert f"stable role {md(stable)}" in card and "same minutes" in card, card
    assert f"on {md(name)}" in card and "canary:" not in card, card
    assert "Change began" not in card and "before" not in card and "after deploy" not in card, card
    assert f"{row.calls_stable:,} stable, {row.calls_canary:,} canary" in card, card
    assert f"{row.mean_stable_ms:.3f} ms stable" in card and f"{row.mean_canary_ms:.3f} ms canary" in card, card
    assert "\\*shop\\*" in card and "\\[x\\]" in card and "\\{\\{DATE" in card, card
    assert "[x](http" not in card.replace("\\[x\\](http", "") and "{{DATE" not in card.replace("\\{\\{DATE", ""), card

    # Grafana: the annotation's HTML text and tags
    (annotation,) = grafana.annotations
    text = annotation["text"]
    assert f"canary role {slow}" in text and f"stable role {stable}" in text and "same minutes" in text, text
    assert f"on {name}" in text and "canary:" not in text and "after deploy" not in text, text
    assert f"{row.mean_stable_ms:.3f} ms stable" in text and f"{row.mean_canary_ms:.3f} ms canary" in text, text
    assert f"{row.calls_stable:,} stable" in text and f"{row.calls_canary:,} canary" in text, text
    assert "&lt;!channel&gt;" in text and "<b>b</b>" not in text, text
    assert f"target:{name}" in annotation["tags"] and "kind:canary" in annotation["tags"], annotation["tags"]
    assert not [t for t in annotation["tags"] if t.startswith("target:canary:")], annotation["tags"]

    # PagerDuty: the summary, the source and the custom details
    (trigger,) = [c for c in pagerduty.calls_to(EVENTS) if c["event_action"] == "trigger"]
    payload = trigger["payload"]
    assert payload["source"] == name, payload
    summary = payload["summary"]
    assert f"canary role {slow}" in summary and f"stable role {stable}" in summary, summary
    assert f"on {name}:" in summary and "canary:" not in summary and "after deploy" not in summary, summary
    details = payload["custom_details"]
    assert details["target"] == name and details["canary_role"] == slow and details["stable_role"] == stable, details
    assert (details["calls_canary"], details["calls_stable"]) == (row.calls_canary, row.calls_stable), details
    assert details["mean_canary_ms"] == round(row.mean_canary_ms, 3), details
    assert details["mean_stable_ms"] == round(row.mean_stable_ms, 3), details
    assert details["window"] == [window_start.isoformat(), window_end.isoformat()], details
    assert not {"mean_before_ms", "mean_after_ms", "calls_before", "calls_after"} & set(details), details

    # The webhook: its documented fields
    (hook_call,) = hook_calls
    body = hook_call.json
    assert body["target"] == name and body["kind"] == "regression", body
    assert f"canary role {slow}" in body["summary"] and f"stable role {stable}" in body["summary"], body
    assert "after deploy" not in body["summary"] and "canary:" not in body["summary"], body
    assert body["canary"] == {
        "canary_role": slow,
        "stable_role": stable,
        "window_start": window_start.isoformat(),
        "window_end": window_end.isoformat(),
        "mean_canary_ms": row.mean_canary_ms,
        "mean_stable_ms": row.mean_stable_ms,
        "calls_canary": row.calls_canary,
        "calls_stable": row.calls_stable,
    }, body
    assert body["regression"]["change_at"] is None, body  # a canary has no moment its change began


def _strings(value) -> list[str]:  # type: ignore[no-untyped-def]
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [t for item in value for t in _strings(item)]
    if isinstance(value, dict):
        return [t for item in value.values() for t in _strings(item)]
    return []


def test_a_canary_analysis_stored_by_a_run_that_died_before_its_alerts_is_alerted_by_the_reconciler(
    canary, warehouse, warehouse_url, slack
):
    """A canary_verdicts run that stored the canary analysis and died before canary_alerts claimed its outbox rows
    leaves no row to retry, and canary_sensor asks no more: radar_reconciler notices the stored analysis with
    detections and no outbox rows (within the alert age limit) and requests alert_retry_job, whose canary_alerts
    sends it once; then it asks no more."""
    from radar_pipeline.defs.alerts.canary_alerts import canary_alerts
    from radar_pipeline.defs.alerts.regression_alerts import regression_alerts
    from radar_pipeline.defs.bands.query_history import query_history
    from radar_pipeline.defs.deploys.deploy_verdicts import deploy_verdicts
    from radar_pipeline.defs.reconcile.reconciler import alert_retry_job, radar_reconciler
    from radar_pipeline.defs.resources import ChannelsResource, ReconcilerResource, SlackResource
    from radar_pipeline.warehouse.canary import due_canaries

    window = _run(warehouse, canary).settings.window
    analysis = AnalysisResource(window_seconds=window.total_seconds(), scrape_interval_seconds=1)
    resources = {
        "warehouse": WarehouseResource(url=warehouse_url),
        "analysis": analysis,
        "targets": TargetsResource(spec=f"{canary.target.name}={canary.target.dsn}"),
        "code_hosts": CodeHostResource(),
        "slack": SlackResource(token="xoxb-test-token", channel="#radar", base_url=slack.api_url),
        "channels": ChannelsResource(),
        "reconciler": ReconcilerResource(backoff_seconds=0, grace_seconds=0),
    }
    defs = dg.Definitions(
        assets=[deploy_verdicts, regression_alerts, query_history, canary_verdicts, canary_alerts],
        jobs=[canary_verdicts_job, alert_retry_job],
        resources=resources,
    )

    def canary_requests(instance: dg.DagsterInstance) -> list[dg.RunRequest]:
        context = dg.build_sensor_context(instance=instance, resources=resources)
        result = radar_reconciler(context)
        return [r for r in result.run_requests or [] if r.job_name == alert_retry_job.name]

    def outbox() -> list[tuple]:
        with warehouse.connect() as conn:
            return conn.execute(
                sa.text("SELECT deploy_id, target, status FROM radar.alert WHERE deploy_id LIKE 'cn-%'")
            ).all()

    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("deploys", ["cn-slow", "cn-plain"])
        for deploy_id in (
            "cn-slow",
            "cn-plain",
        ):  # the run dies once canary_verdicts is stored: canary_alerts never ran
            stored = defs.resolve_job_def("canary_verdicts_job").execute_in_process(
                instance=instance, partition_key=deploy_id, asset_selection=[dg.AssetKey("canary_verdicts")]
            )
            assert stored.success
        assert outbox() == []
        with warehouse.connect() as conn:  # canary_sensor asks for neither again: both have a canary analysis
            due = [d.deploy_id for d in due_canaries(conn, timedelta(0))]
        assert not {"cn-slow", "cn-plain"} & set(due)
        with warehouse.begin() as conn:  # a canary window older than the alert age limit is no longer news
            conn.execute(sa.text("UPDATE radar.canary_analysis SET window_end = window_end - interval '3 days' "
                                 "WHERE deploy_id = 'cn-slow'"))  # fmt: skip
        assert canary_requests(instance) == []
        with warehouse.begin() as conn:
            conn.execute(sa.text("UPDATE radar.canary_analysis SET window_end = window_end + interval '3 days' "
                                 "WHERE deploy_id = 'cn-slow'"))  # fmt: skip
        (request,) = canary_requests(instance)  # cn-plain detected nothing: nothing to alert
        assert request.partition_key == "cn-slow", request
        (again,) = canary_requests(instance)  # a repeated tick before the run: the same run key (Dagster runs it once)
        assert again.run_key == request.run_key, (again, request)
        tags = {**request.tags, "dagster/run_key": request.run_key or ""}
        run = defs.resolve_job_def(alert_retry_job.name).execute_in_process(
            instance=instance, partition_key="cn-slow", tags=tags
        )
        assert run.success
        assert canary_requests(instance) == []  # its rows exist now: the outbox's own retries take over
    posts = [p.json for p in slack.calls_to("/api/chat.postMessage")]
    assert len(posts) == 1 and posts[0]["text"].startswith(f"Canary {canary.roles['slow']} of deploy"), posts
    assert outbox() == [("cn-slow", f"canary:{canary.target.name}", "sent")]
