"""Later looks end to end through Dagster on real PostgreSQL (issue 29, docs/looks.md): a statement too sparse at
its deploy's first verdict, slowed ×3, is decided by a later look that deploy_look_sensor requests when it comes due;
the detection's verdict row says which look found it and when, its alert goes through the outbox (Slack's message
says "found … after deploy"), the deploy's state moves from inconclusive to fail and its commit status is sent again;
each look is requested once, decided verdicts never change, and the looks stop.

Time is compressed: W = 10 s, a scrape a second, so the looks come due 20 s, 40 s and 80 s after the deploy. The
counters are synthetic (store_counters), written for the whole 8W at once: a look reads only its own spans, and the
warehouse's clock decides when each is due.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import dagster as dg
import numpy as np
import pandas as pd
import pytest
import sqlalchemy as sa

from radar_pipeline.defs.alerts.code_host_statuses import code_host_statuses
from radar_pipeline.defs.alerts.regression_alerts import regression_alerts
from radar_pipeline.defs.deploys.deploy_looks import deploy_look_sensor, deploy_looks, deploy_looks_job
from radar_pipeline.defs.deploys.deploy_verdicts import deploy_verdicts, deploy_verdicts_job
from radar_pipeline.defs.resources import (
    AnalysisResource,
    ChannelsResource,
    CodeHostResource,
    SlackResource,
    TargetsResource,
    WarehouseResource,
)
from radar_pipeline.engine.budget import LOOK_SPANS
from radar_pipeline.warehouse import deploys
from radar_pipeline.warehouse.analysis import deploy_states

from . import fake_code_host
from .fake_code_host import TOKEN, FakeHost
from .helpers import every_attempt_fails, store_counters

W = 10  # seconds
ANALYSIS = AnalysisResource(window_seconds=W, scrape_interval_seconds=1, tolerance_floor_seconds=3)
TEXTS = {1: "SELECT * FROM orders WHERE id = $1", 2: "SELECT * FROM carts WHERE owner = $1", 7: "SELECT report($1)"}
COMMIT = "c0ffee" + "0123456789abcdef" * 2 + "01"
SPARSE = 7  # the statement the first verdict cannot decide
# Seconds from the deploy (in its first W) at which the sparse statement ran after it: 2 intervals, under the floor.
SPARSE_EARLY = (4, 8)


def _counters(at: datetime, rng: np.random.Generator) -> pd.DataFrame:
    """A scrape a second from 8W before the deploy to 8W after: two busy statements unchanged (20 calls a second,
    5% noise), and the sparse one (5 calls at a time, 5% noise) every other second before the deploy and from W after
    it, but only at SPARSE_EARLY within the first W after it, ×3 slower from the deploy on."""
    rows = []
    for queryid in (1, 2, SPARSE):
        calls, total = 1000, 1000.0
        for j in range(-8 * W, 8 * W + 1):
            if queryid == SPARSE:
                runs = j <= 0 or j in SPARSE_EARLY or j > W
                n, mean = (5 if runs else 0), 2.0 * (3.0 if j > 0 else 1.0)
            else:
                n, mean = 20, 0.5 * queryid
            if n:
                calls, total = calls + n, total + n * mean * rng.lognormal(-0.00125, 0.05)
            rows.append((queryid, at + timedelta(seconds=j), calls, total))
    return pd.DataFrame(rows, columns=["queryid", "captured_at", "calls", "total_exec_time"])


@pytest.fixture
def host() -> Iterator[FakeHost]:
    """GitHub's stand-in, knowing the deploy's repository and commit."""
    state = FakeHost("github", "acme/api", COMMIT, reviews=[12])
    server = fake_code_host.start(state)
    yield state
    server.shutdown()


@pytest.fixture
def deployed(warehouse) -> datetime:
    """The deploy lk-1 on target lk, 25 s ago: its first verdict (W + one scrape) and look 1 (2W + one scrape) are
    due, look 2 (4W) is not yet."""
    at = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=25)
    store_counters(warehouse, "lk", _counters(at, np.random.default_rng(29)), TEXTS)
    deploys.record(warehouse, deploys.DeployEvent("lk-1", "lk", at, service="shop", version="v2"))
    return at


def _resources(warehouse_url: str, slack, host: FakeHost) -> dict:
    return {
        "warehouse": WarehouseResource(url=warehouse_url),
        "analysis": ANALYSIS,
        "targets": TargetsResource(spec="lk=postgresql://nowhere.invalid/none"),
        "slack": SlackResource(token="xoxb-test-token", channel="#radar", base_url=slack.api_url),
        "channels": ChannelsResource(),
        "code_hosts": CodeHostResource(github_token=TOKEN, github_api_url=host.api_url, timeout_seconds=2.0),
    }


def _defs(resources: dict) -> dg.Definitions:
    return dg.Definitions(
        assets=[deploy_verdicts, deploy_looks, regression_alerts, code_host_statuses],
        jobs=[deploy_verdicts_job, deploy_looks_job],
        sensors=[deploy_look_sensor],
        resources=resources,
    )


def _execute(instance: dg.DagsterInstance, defs: dg.Definitions, request: dg.RunRequest) -> dg.ExecuteInProcessResult:
    """A run request launched as the daemon would: its job, partition, config and tags (run_key included)."""
    job = defs.resolve_job_def(request.job_name or deploy_looks_job.name)
    return job.execute_in_process(
        instance=instance,
        partition_key=request.partition_key,
        run_config=request.run_config,
        tags={**request.tags, "dagster/run_key": request.run_key or ""},
    )


def _rows(warehouse) -> pd.DataFrame:
    with warehouse.connect() as conn:
        return pd.read_sql(
            sa.text(
                "SELECT queryid, verdict, reason, look, look_end, change_factor FROM radar.verdict "
                "WHERE deploy_id = 'lk-1'"
            ),
            conn,
        ).set_index("queryid")


def _state(warehouse) -> pd.Series:
    with warehouse.connect() as conn:
        return deploy_states(conn, ["lk-1"]).iloc[0]


def _due(instance: dg.DagsterInstance, resources: dict) -> list[dg.RunRequest]:
    tick = deploy_look_sensor(dg.build_sensor_context(instance=instance, resources=resources))
    return list(tick.run_requests or []) if isinstance(tick, dg.SensorResult) else []


def test_a_late_detection_through_dagster(deployed, warehouse, warehouse_url, slack, host):
    with warehouse.begin() as conn:
        conn.execute(
            sa.text(
                "UPDATE radar.deploy_event SET commit_sha = :c, repository = 'acme/api', code_host = 'github', "
                "api_url = :u WHERE deploy_id = 'lk-1'"
            ),
            {"c": COMMIT, "u": host.api_url},
        )
    resources = _resources(warehouse_url, slack, host)
    defs = _defs(resources)
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("deploys", ["lk-1"])
        assert not _due(instance, resources)  # no first verdict yet: no look
        first = defs.resolve_job_def(deploy_verdicts_job.name).execute_in_process(
            instance=instance, partition_key="lk-1"
        )
        assert first.success
        rows = _rows(warehouse)
        assert rows.loc[SPARSE, "verdict"] == "insufficient_data" and rows.loc[SPARSE, "look"] == 0
        assert set(rows.loc[[1, 2], "verdict"]) == {"no_regression"}
        assert _state(warehouse)["state"] == "inconclusive"
        assert host.statuses and host.statuses[-1]["state"] != "failure"  # the first verdict's status

        # The latest look due now (1 at 25 s; a machine slower than that may have let look 2 or 3 come due too):
        # requested once, for this first verdict.
        (request,) = _due(instance, resources)
        look = request.run_config["ops"]["deploy_looks"]["config"]["look"]
        with warehouse.connect() as conn:
            elapsed = (conn.execute(sa.text("SELECT now()")).scalar_one() - deployed).total_seconds()
        assert 1 <= look <= 3 and LOOK_SPANS[look] * W + 1 <= elapsed
        assert request.tags["radar/look"] == str(look) and request.partition_key == "lk-1"
        sent_before = len(host.statuses)
        result = _execute(instance, defs, request)
        assert result.success
        materialized = result.asset_materializations_for_node("deploy_looks")[0].metadata
        assert materialized["look"].value == look and materialized["detected"].value == 1
        assert materialized["state_before"].value == "inconclusive" and materialized["state"].value == "fail"
        # its table names each statement by its text, not only its key
        (decided,) = [r.data for r in materialized["decided"].records if r.data["queryid"] == str(SPARSE)]
        assert decided["query"] == TEXTS[SPARSE] and decided["verdict"] == "detected"
        drawn = result.asset_materializations_for_node("regression_alerts")[0].metadata
        assert "chart_images" in drawn  # the late detection's alert drew its chart

        rows = _rows(warehouse)
        assert rows.loc[SPARSE, "verdict"] == "detected" and rows.loc[SPARSE, "look"] == look
        assert rows.loc[SPARSE, "look_end"] == deployed + timedelta(seconds=LOOK_SPANS[look] * W)
        assert rows.loc[SPARSE, "change_factor"] == pytest.approx(3.0, rel=0.1)
        assert set(rows.loc[[1, 2], "verdict"]) == {"no_regression"} and set(rows.loc[[1, 2], "look"]) == {0}
        state = _state(warehouse)
        assert state["state"] == "fail" and state["late_detected"] == 1 and state["looks_done"] == look

        with warehouse.connect() as conn:  # the late detection went through the outbox, once
            alerts = conn.execute(
                sa.text("SELECT queryid, status FROM radar.alert WHERE deploy_id = 'lk-1'")
            ).fetchall()
        assert [(int(q), s) for q, s in alerts] == [(SPARSE, "sent")]
        (post,) = slack.calls_to("/api/chat.postMessage")
        words = post.body.decode()
        assert f"found {LOOK_SPANS[look] * W} s after deploy lk-1 (later look {look})" in words
        assert len(host.statuses) > sent_before and host.statuses[-1]["state"] == "failure"  # sent again

        assert not _due(instance, resources)  # requested once; nothing is open any more: the looks stop

        # The alerts materialized again with nothing new to send (the deploy partition's latest materialization):
        # they still show the deploy's charts, those of the run that drew them.
        again = defs.resolve_job_def(deploy_looks_job.name).execute_in_process(
            instance=instance, partition_key="lk-1", asset_selection=[dg.AssetKey("regression_alerts")]
        )
        shown = again.asset_materializations_for_node("regression_alerts")[0].metadata
        assert shown["chart_images"] == drawn["chart_images"]
        assert shown["charts_from_run"].value == result.run_id

    # The CLI says which look decided each statement, and that later looks ran.
    from click.testing import CliRunner

    from radar_pipeline.cli import main

    env = {"RADAR_WAREHOUSE_URL": warehouse_url, "COLUMNS": "200"}
    shown = CliRunner().invoke(main, ["verdicts", "lk-1", "--format", "json"], env=env)
    assert shown.exit_code == 0, shown.output
    by_query = {v["queryid"]: v for v in json.loads(shown.output)}
    assert by_query[SPARSE]["look"] == look and by_query[1]["look"] == 0
    table = CliRunner().invoke(main, ["verdicts", "lk-1"], env=env)
    assert table.exit_code == 0, table.output
    assert f"deploy lk-1: fail (after {look} later look" in table.output
    assert f"{look} (+{LOOK_SPANS[look] * W} s)" in table.output


def test_looks_the_next_deploy_cuts_are_recorded_not_run_and_then_stop(deployed, warehouse):
    from radar_pipeline.steps.deploy_analysis import AnalysisRun, analyse_deploy
    from radar_pipeline.steps.looks import run_look
    from radar_pipeline.warehouse import looks

    # The target's next deploy 5 s after lk-1: no look can see more than the first verdict did.
    deploys.record(warehouse, deploys.DeployEvent("lk-2", "lk", deployed + timedelta(seconds=5)))
    run = AnalysisRun(warehouse, ANALYSIS.settings(), settle=ANALYSIS.settle)
    analyse_deploy(run, "lk-1")
    before = _rows(warehouse)
    assert before.loc[SPARSE, "verdict"] == "insufficient_data"
    with warehouse.connect() as conn:
        (due,) = [d for d in looks.due_looks(conn, timedelta(seconds=W), ANALYSIS.settle) if d.deploy_id == "lk-1"]
    assert due.look == 3  # every look is due once the next deploy began: the latest is asked for
    result = run_look(run, "lk-1", due.look)
    assert result.status == "cut" and result.span is None and result.decided.empty
    pd.testing.assert_frame_equal(_rows(warehouse), before)  # nothing decided, nothing changed
    with warehouse.connect() as conn:
        assert not [d for d in looks.due_looks(conn, timedelta(seconds=W), ANALYSIS.settle) if d.deploy_id == "lk-1"]
        stored = looks.looks_of(conn, "lk-1")
    assert stored[["look", "status"]].values.tolist() == [[3, "cut"]]
    assert _state(warehouse)["looks_done"] == 3


def test_a_look_never_changes_a_decided_verdict(deployed, warehouse):
    from radar_pipeline.steps.deploy_analysis import AnalysisRun, analyse_deploy
    from radar_pipeline.warehouse import looks

    run = AnalysisRun(warehouse, ANALYSIS.settings(), settle=ANALYSIS.settle)
    decided = analyse_deploy(run, "lk-1").verdicts
    cleared = decided[decided["queryid"] == 1].assign(verdict="detected", change_factor=9.0)
    with warehouse.begin() as conn:  # as a look that raced a re-analysis would try to write it
        written = looks.replace_open(conn, "lk-1", "lk", cleared, 2, deployed + timedelta(seconds=4 * W))
    assert written.empty
    rows = _rows(warehouse)
    assert rows.loc[1, "verdict"] == "no_regression" and rows.loc[1, "look"] == 0


def test_a_look_that_decides_an_open_statement_stores_its_tier(deployed, warehouse):
    # The look's row carries the tier of the look's verdict (sql/0036), and the deploy's state counts it.
    from radar_pipeline.steps.deploy_analysis import AnalysisRun, analyse_deploy
    from radar_pipeline.warehouse import looks

    run = AnalysisRun(warehouse, ANALYSIS.settings(), settle=ANALYSIS.settle)
    first = analyse_deploy(run, "lk-1").verdicts
    assert first.loc[first["queryid"] == SPARSE, "verdict"].item() in ("inconclusive", "insufficient_data")
    slower = first[first["queryid"] == SPARSE].assign(verdict="inconclusive", tier="probably_slower")
    with warehouse.begin() as conn:
        written = looks.replace_open(conn, "lk-1", "lk", slower, 1, deployed + timedelta(seconds=2 * W))
    assert len(written) == 1
    with warehouse.connect() as conn:
        tier = conn.execute(
            sa.text("SELECT tier FROM radar.verdict WHERE deploy_id = 'lk-1' AND queryid = :q"), {"q": SPARSE}
        ).scalar_one()
    assert tier == "probably_slower" and _state(warehouse)["probably_slower"] == 1


def test_old_deploys_get_no_looks_unless_a_reanalysis_replaced_their_looks(warehouse):
    from radar_pipeline.steps.deploy_analysis import AnalysisRun, analyse_deploy
    from radar_pipeline.warehouse import looks

    at = datetime.now(UTC).replace(microsecond=0) - timedelta(days=2)
    store_counters(warehouse, "lk", _counters(at, np.random.default_rng(30)), TEXTS)
    deploys.record(warehouse, deploys.DeployEvent("lk-old", "lk", at))
    run = AnalysisRun(warehouse, ANALYSIS.settings(), settle=ANALYSIS.settle)
    analyse_deploy(run, "lk-old")  # a backfill's first verdict: its looks are long past, and not news
    assert _open_of(warehouse, "lk-old")

    def due() -> list:
        with warehouse.connect() as conn:
            return [d for d in looks.due_looks(conn, timedelta(seconds=W), ANALYSIS.settle) if d.deploy_id == "lk-old"]

    assert not due()
    with warehouse.begin() as conn:  # looks had run on an earlier first verdict, which a re-analysis replaced
        conn.execute(
            sa.text(
                "INSERT INTO radar.deploy_look (deploy_id, target, look, basis, status, opened) "
                "SELECT 'lk-old', 'lk', 3, analysed_at - interval '1 day', 'done', 1 FROM radar.analysis "
                "WHERE deploy_id = 'lk-old'"
            )
        )
    # Run again in order, each look once, from look 1: a detection the earlier looks made at look 1 or 2 is not lost
    # to a single look 3 (each look spends its own share of the budget, as the first time).
    for look in (1, 2, 3):
        (again,) = due()
        assert again.look == look and again.rerun
        with warehouse.begin() as conn:
            conn.execute(
                sa.text(
                    "INSERT INTO radar.deploy_look (deploy_id, target, look, basis, status, opened) "
                    "SELECT 'lk-old', 'lk', :k, analysed_at, 'done', 1 FROM radar.analysis WHERE deploy_id = 'lk-old' "
                    "ON CONFLICT (deploy_id, target, look) DO UPDATE SET basis = EXCLUDED.basis"
                ),
                {"k": look},
            )
    assert not due()
    # The exception is bounded in time: a re-analysis more than HORIZON ago starts no looks any more.
    with warehouse.begin() as conn:
        conn.execute(sa.text("DELETE FROM radar.deploy_look WHERE deploy_id = 'lk-old' AND look < 3"))
        conn.execute(
            sa.text("UPDATE radar.deploy_look SET basis = basis - interval '3 days' WHERE deploy_id = 'lk-old'")
        )
    assert [d.look for d in due()] == [1]  # the re-analysis is recent: due again
    with warehouse.begin() as conn:
        conn.execute(
            sa.text(
                "UPDATE radar.analysis SET analysed_at = analysed_at - interval '2 days' WHERE deploy_id = 'lk-old'"
            )
        )
    assert not due()


def test_a_first_verdict_of_engine_2_5_spent_its_whole_budget_and_gets_no_looks(deployed, warehouse):
    from radar_pipeline.steps.deploy_analysis import AnalysisRun, analyse_deploy
    from radar_pipeline.steps.looks import LookRefused, run_look
    from radar_pipeline.warehouse import looks

    run = AnalysisRun(warehouse, ANALYSIS.settings(), settle=ANALYSIS.settle)
    analyse_deploy(run, "lk-1")

    def due() -> list:
        with warehouse.connect() as conn:
            return [d for d in looks.due_looks(conn, timedelta(seconds=W), ANALYSIS.settle) if d.deploy_id == "lk-1"]

    assert due()
    for version, looked in (("2.5.0", False), ("", False), ("2.10.1", True), ("2.6.0", True)):
        with warehouse.begin() as conn:  # as engine `version` stored it (engine 2.5 spent the whole B at look 0)
            conn.execute(
                sa.text(
                    "UPDATE radar.analysis SET engine_version = :v, settings = jsonb_set(settings, "
                    "'{engine_version}', to_jsonb(CAST(:v AS text))) WHERE deploy_id = 'lk-1'"
                ),
                {"v": version},
            )
        assert bool(due()) == looked, version
    with warehouse.begin() as conn:
        conn.execute(sa.text("UPDATE radar.analysis SET engine_version = '2.5.0' WHERE deploy_id = 'lk-1'"))
    before = _rows(warehouse)
    with pytest.raises(LookRefused, match=r"engine 2\.5\.0.*whole budget"):
        run_look(run, "lk-1", 1)
    pd.testing.assert_frame_equal(_rows(warehouse), before)


def _open_of(warehouse, deploy_id: str) -> int:
    with warehouse.connect() as conn:
        return conn.execute(
            sa.text(
                "SELECT count(*) FROM radar.verdict WHERE deploy_id = :d AND verdict IN ('inconclusive', "
                "'insufficient_data')"
            ),
            {"d": deploy_id},
        ).scalar_one()


def test_a_look_that_a_reanalysis_overtook_writes_nothing(deployed, warehouse):
    """A re-analysis that replaces the first verdict while a look is deciding (its basis read, its rows not yet
    written) wins: the look is refused inside its write transaction, and the re-analysis's rows stay as it wrote them.
    The look is held at its lock by another session while the re-analysis runs, as a slow look would be."""
    import threading

    from radar_pipeline.steps.deploy_analysis import AnalysisRun, analyse_deploy
    from radar_pipeline.steps.looks import LookRefused, run_look
    from radar_pipeline.warehouse import looks

    run = AnalysisRun(warehouse, ANALYSIS.settings(), settle=ANALYSIS.settle)
    analyse_deploy(run, "lk-1")
    outcome: dict[str, object] = {}

    def look() -> None:
        try:
            outcome["result"] = run_look(run, "lk-1", 1)
        except Exception as exc:  # noqa: BLE001 - the test reads what it was
            outcome["error"] = exc

    with warehouse.connect() as holder:
        looks.lock(holder, "lk-1")  # the look's lock, held
        thread = threading.Thread(target=look)
        thread.start()
        with warehouse.connect() as probe:  # wait until the look waits on it: it has read its basis and decided
            for _ in range(600):
                waiting = probe.execute(
                    sa.text(
                        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                        "AND wait_event = 'advisory' AND datname = current_database()"
                    )
                ).scalar_one()
                probe.rollback()
                if waiting or not thread.is_alive():
                    break
                thread.join(0.1)
        assert waiting, outcome
        analyse_deploy(run, "lk-1")  # the re-analysis replaces the first verdict meanwhile
        replaced = _rows(warehouse)
        holder.rollback()  # the look goes on
    thread.join(60)
    assert isinstance(outcome.get("error"), LookRefused), outcome
    assert "re-analys" in str(outcome["error"])
    pd.testing.assert_frame_equal(_rows(warehouse), replaced)  # nothing written onto the re-analysis's rows
    assert replaced.loc[SPARSE, "verdict"] == "insufficient_data"
    with warehouse.connect() as conn:
        assert looks.looks_of(conn, "lk-1").empty  # and no look recorded on it


def test_a_failed_look_is_recorded_and_the_sensor_moves_on(deployed, warehouse, warehouse_url, slack, host):
    """A look that fails (here: its first verdict's stored settings no longer read) is recorded as failed, so it
    stops being due: it would otherwise head the sensor's page until the next look or the horizon."""
    from radar_pipeline.steps.deploy_analysis import AnalysisRun, analyse_deploy
    from radar_pipeline.warehouse import looks

    run = AnalysisRun(warehouse, ANALYSIS.settings(), settle=ANALYSIS.settle)
    analyse_deploy(run, "lk-1")
    with warehouse.begin() as conn:
        conn.execute(
            sa.text("UPDATE radar.analysis SET settings = settings || '{\"bogus\": 1}' WHERE deploy_id = 'lk-1'")
        )
    resources = _resources(warehouse_url, slack, host)
    once = dg.define_asset_job("look_once", selection=["deploy_looks"])  # deploy_looks_job's step, not retried
    defs = dg.Definitions(assets=[deploy_verdicts, deploy_looks], jobs=[once], resources=resources)
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("deploys", ["lk-1"])
        (request,) = _due(instance, resources)
        look = request.run_config["ops"]["deploy_looks"]["config"]["look"]
        result = defs.resolve_job_def("look_once").execute_in_process(
            instance=instance,
            partition_key="lk-1",
            run_config=request.run_config,
            tags=request.tags,
            raise_on_error=False,
        )
        assert not result.success
        with warehouse.connect() as conn:
            stored = looks.looks_of(conn, "lk-1")
        assert stored[["look", "status", "run_id"]].values.tolist() == [[look, "failed", result.run_id]]
        assert _rows(warehouse).loc[SPARSE, "verdict"] == "insufficient_data"  # nothing decided
        with warehouse.connect() as conn:
            later = [d for d in looks.due_looks(conn, timedelta(seconds=W), ANALYSIS.settle) if d.deploy_id == "lk-1"]
        assert all(d.look > look for d in later)  # the failed look is due no more; a later one when it comes due


def test_the_looks_of_a_nightly_reanalysis_carry_its_tag(deployed, warehouse, warehouse_url, slack, host):
    """The nightly reanalysis records its alerts and statuses and never posts them: the looks that continue its
    first verdict do the same."""
    from radar_pipeline.defs.deploys.deploy_verdicts import REANALYSIS_TAG

    resources = _resources(warehouse_url, slack, host)
    defs = _defs(resources)
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("deploys", ["lk-1"])
        job = defs.resolve_job_def(deploy_verdicts_job.name)
        assert job.execute_in_process(instance=instance, partition_key="lk-1").success
        (request,) = _due(instance, resources)
        assert REANALYSIS_TAG not in request.tags  # a first verdict of its own: its looks post
        again = job.execute_in_process(instance=instance, partition_key="lk-1", tags={REANALYSIS_TAG: "true"})
        assert again.success
        (request,) = _due(instance, resources)
        assert request.tags[REANALYSIS_TAG] == "true"
        result = _execute(instance, defs, request)
        assert result.success
        assert result.asset_materializations_for_node("deploy_looks")[0].metadata["detected"].value == 1
        assert not slack.calls_to("/api/chat.postMessage")  # recorded in the outbox, never sent


def test_look_evidence_covers_decided_and_open_statements_over_the_look_s_spans(deployed, warehouse):
    # A joint test (fleet, group) at a later look needs every statement's evidence, its own verdict decided or not.
    from radar_pipeline.steps.looks import look_evidence, look_span

    settings = ANALYSIS.settings()
    span = look_span(settings, 1, deployed)
    assert span is not None
    found = look_evidence(warehouse, settings, "lk", deployed, span).set_index("queryid")
    assert set(found.index) == {1, 2, SPARSE}
    assert found["decidable"].all()  # the sparse one has enough calls by 2W
    assert found.loc[SPARSE, "n_after"] > found.loc[1, "n_after"] / 4  # it ran from W on, every other second
    assert np.exp(found.loc[SPARSE, "deploy_log_factor"]) == pytest.approx(3.0, rel=0.1)
    assert np.exp(found.loc[1, "deploy_log_factor"]) == pytest.approx(1.0, abs=0.05)
    assert (found["deploy_log_se"] > 0).all() and (found["deploy_dof"] > 1).all()
    only = look_evidence(
        warehouse,
        settings,
        "lk",
        deployed,
        span,
        found.reset_index().loc[[0], ["dbid", "userid", "queryid", "toplevel"]],
    )
    assert len(only) == 1


def test_a_late_detection_names_its_changes_and_charts_the_look_s_spans(deployed, warehouse):
    from radar_pipeline.steps.alert_delivery import chart_series, deploy_facts
    from radar_pipeline.steps.deploy_analysis import AnalysisRun, analyse_deploy
    from radar_pipeline.steps.looks import run_look
    from radar_pipeline.warehouse import alerts, catalog, looks

    def setting(value: str) -> list[dict]:
        return [
            {"kind": "setting", "identity": "work_mem", "dbid": None, "roleid": None, "relation": None,
             "name": "work_mem", "role": None, "database": None, "value": value}
        ]  # fmt: skip

    with warehouse.begin() as conn:  # work_mem lowered server-wide between two captures bracketing the deploy
        for i, (at, value) in enumerate(((deployed - timedelta(seconds=3), "65536kB"), (deployed, "1024kB"))):
            catalog.write_capture(conn, "lk", at, 5, {"setting": str(i)}, ["setting"], setting(value), server="s1")
    run = AnalysisRun(warehouse, ANALYSIS.settings(), settle=ANALYSIS.settle)
    analyse_deploy(run, "lk-1")
    assert _rows(warehouse).loc[SPARSE, "verdict"] == "insufficient_data"
    with warehouse.connect() as conn:
        (due,) = [d for d in looks.due_looks(conn, timedelta(seconds=W), ANALYSIS.settle) if d.deploy_id == "lk-1"]
    result = run_look(run, "lk-1", due.look)
    assert result.span is not None and result.status != "cut"
    with warehouse.connect() as conn:
        found = alerts.detections(conn, "lk-1")
        (late,) = found.itertuples()
        assert late.queryid == SPARSE and late.look == due.look
        # its named change, as a first verdict names it
        assert late.cause == "setting_changed", (late.cause, late.cause_detail)
        assert late.cause_detail.startswith("work_mem (65536kB → 1024kB) changed between"), late.cause_detail
        assert [c["kind"] for c in late.named_changes] == ["setting_changed"], late.named_changes
        # its chart over the look's spans, not the first window
        (series,) = chart_series(conn, deploy_facts(found, None), found).values()
    span = result.span
    assert series.index.max() == pd.Timestamp(deployed + span.after)
    assert series.index.min() <= pd.Timestamp(deployed - span.before + timedelta(seconds=2))
    assert span.after > timedelta(seconds=W)


def test_a_look_whose_run_was_terminated_is_asked_for_again_at_its_next_attempt_a_bounded_number_of_times(
    warehouse, warehouse_url, slack, host, monkeypatch
):
    """A run terminated (from the UI, by run monitoring, killed for memory) ends before the look's failure handler:
    nothing is recorded and the look stays due. The sensor asks for it again under the next attempt's run key (the
    same key would be skipped by Dagster), LOOK_ATTEMPTS times at most."""

    from radar_pipeline.steps import looks as steps_looks
    from radar_pipeline.steps.deploy_analysis import AnalysisRun, analyse_deploy
    from radar_pipeline.warehouse import looks

    monkeypatch.setattr(looks, "RETRY_BASE", timedelta(seconds=2))  # attempts 2, 6, 14 s after it fell due
    at = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=85)  # the last look (8W + 1 s) due
    store_counters(warehouse, "lk", _counters(at, np.random.default_rng(29)), TEXTS)
    deploys.record(warehouse, deploys.DeployEvent("lk-1", "lk", at, service="shop", version="v2"))
    analyse_deploy(AnalysisRun(warehouse, ANALYSIS.settings(), settle=ANALYSIS.settle), "lk-1")
    resources = _resources(warehouse_url, slack, host)
    once = dg.define_asset_job("look_once", selection=["deploy_looks"])  # a terminated run's step is not retried
    defs = dg.Definitions(assets=[deploy_verdicts, deploy_looks], jobs=[once], resources=resources)

    def terminated(*args, **kwargs):  # what a terminated run raises in the op
        raise dg.DagsterExecutionInterruptedError()

    monkeypatch.setattr(steps_looks, "run_look", terminated)
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("deploys", ["lk-1"])
        keys = every_attempt_fails(
            lambda: _due(instance, resources),
            lambda request: defs.resolve_job_def("look_once").execute_in_process(
                instance=instance,
                partition_key=request.partition_key,
                run_config=request.run_config,
                tags={**request.tags, "dagster/run_key": request.run_key or ""},
                raise_on_error=False,
            ),
        )
        with warehouse.connect() as conn:
            assert looks.looks_of(conn, "lk-1").empty  # no run recorded it
    look = keys[0].split(":")[2]
    assert [k.rsplit(":", 1)[0] for k in keys] == [keys[0].rsplit(":", 1)[0]] * len(keys)  # the same look …
    attempts = [int(k.rsplit(":", 1)[1]) for k in keys]
    assert attempts == sorted(set(attempts)) and attempts[-1] == looks.LOOK_ATTEMPTS - 1 and len(keys) >= 2
    assert look == str(len(LOOK_SPANS) - 1)


def test_a_late_detection_gets_the_first_verdict_s_rules_the_collateral_one_too(warehouse):
    # At the deploy a new write starts, heavy enough to crowd the database; the sparse statement slows at the same
    # moment. A first verdict names such a detection collateral of the write (engine collateral_culprits); a later
    # look must name the same cause, not leave it unexplained as a second copy of the decision did.
    from radar_pipeline.steps.deploy_analysis import AnalysisRun, analyse_deploy
    from radar_pipeline.steps.looks import run_look
    from radar_pipeline.warehouse import alerts, looks

    at = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=25)
    counters = _counters(at, np.random.default_rng(40))
    write, calls, total = 3, 0, 0.0
    rows = []
    for j in range(1, 8 * W + 1):  # from the first scrape after the deploy: 20 calls a second of 5 ms
        calls, total = calls + 20, total + 20 * 5.0
        rows.append((write, at + timedelta(seconds=j), calls, total))
    counters = pd.concat([counters, pd.DataFrame(rows, columns=counters.columns)], ignore_index=True)
    store_counters(warehouse, "lc", counters, {**TEXTS, write: "UPDATE stock SET n = n - 1 WHERE id = $1"})
    deploys.record(warehouse, deploys.DeployEvent("lc-1", "lc", at, service="shop", version="v2"))
    run = AnalysisRun(warehouse, ANALYSIS.settings(), settle=ANALYSIS.settle)
    analyse_deploy(run, "lc-1")
    with warehouse.connect() as conn:
        (due,) = [d for d in looks.due_looks(conn, timedelta(seconds=W), ANALYSIS.settle) if d.deploy_id == "lc-1"]
    run_look(run, "lc-1", due.look)
    with warehouse.connect() as conn:
        (late,) = alerts.detections(conn, "lc-1").itertuples()
    assert late.queryid == SPARSE and late.look == due.look
    assert late.cause == "collateral", (late.cause, late.cause_detail)
    assert late.cause_detail.startswith(f"collateral of queryid {write} ("), late.cause_detail
