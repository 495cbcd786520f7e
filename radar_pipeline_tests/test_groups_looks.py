"""Statements decided together at later looks (issue 29, groups, docs/groups.md), end to end through Dagster on real
PostgreSQL: fifteen statements of one shape, each ×1.4 from the deploy on, too noisy for the group to be found at the
first verdict, are found together by a later look that deploy_look_sensor requests while the group is undecided; the
group's verdict of that look is stored beside the first's, its members are marked, the deploy fails, and the group is
alerted once ("found … after deploy"). And a member's mark of a group the first verdict detected stays when a later
look replaces its row.

Time is compressed as in test_looks.py: W = 10 s, a scrape a second, the looks due 20 s, 40 s and 80 s after the
deploy; the deploy is recorded 90 s ago, so every look is due and the sensor asks for the latest (look 3, 8W).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import dagster as dg
import numpy as np
import pandas as pd
import pytest
import sqlalchemy as sa

from radar_pipeline.alerts.render import span_words
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
from radar_pipeline.engine.budget import GROUP_SHARE, LOOK_SPANS, look_budget
from radar_pipeline.warehouse import deploys, looks
from radar_pipeline.warehouse.analysis import deploy_states
from radar_pipeline.warehouse.groups import groups_of

from .helpers import store_counters

W = 10  # seconds
ANALYSIS = AnalysisResource(window_seconds=W, scrape_interval_seconds=1, tolerance_floor_seconds=3)
SHAPE = "SELECT k, count(*) FROM t{:02d} WHERE v > $1 GROUP BY k ORDER BY count(*) DESC"
MEMBERS = {100 + i: SHAPE.format(i) for i in range(1, 16)}  # queryid → text
OTHERS = {
    201: "SELECT * FROM orders WHERE id = $1",
    202: "UPDATE carts SET total = $1 WHERE owner = $2",
    203: "SELECT count(*) FROM customers",
}
NOISE = 0.7  # each interval's mean, log-normal: too noisy for the group at W, not at 8W
SEED = 3


def _counters(at: datetime, factor: float, rng: np.random.Generator) -> pd.DataFrame:
    """A scrape a second from 8W before the deploy to 8W after: the fifteen at 2 ms × `factor` from the deploy on,
    the others at 1 ms unchanged, 3 calls an interval, each interval's mean with NOISE log-normal noise."""
    rows = []
    for queryid in [*MEMBERS, *OTHERS]:
        count, total = 1000, 2000.0
        for j in range(-8 * W, 8 * W + 1):
            mean = (2.0 * (factor if j > 0 else 1.0)) if queryid in MEMBERS else 1.0
            count, total = count + 3, total + 3 * mean * rng.lognormal(-(NOISE**2) / 2, NOISE)
            rows.append((queryid, at + timedelta(seconds=j), count, total))
    return pd.DataFrame(rows, columns=["queryid", "captured_at", "calls", "total_exec_time"])


@pytest.fixture
def deployed(warehouse) -> datetime:
    """The deploy gl-1 on target gl, 90 s ago: its first verdict and every later look are due."""
    at = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=90)
    store_counters(warehouse, "gl", _counters(at, 1.4, np.random.default_rng(SEED)), {**MEMBERS, **OTHERS})
    deploys.record(warehouse, deploys.DeployEvent("gl-1", "gl", at, service="shop", version="v2"))
    return at


def _resources(warehouse_url: str, slack) -> dict:
    return {
        "warehouse": WarehouseResource(url=warehouse_url),
        "analysis": ANALYSIS,
        "targets": TargetsResource(spec="gl=postgresql://nowhere.invalid/none"),
        "slack": SlackResource(token="xoxb-test-token", channel="#radar", base_url=slack.api_url),
        "channels": ChannelsResource(),
        "code_hosts": CodeHostResource(),  # the deploy names no commit: no status to send
    }


def _due(instance: dg.DagsterInstance, resources: dict) -> list[dg.RunRequest]:
    tick = deploy_look_sensor(dg.build_sensor_context(instance=instance, resources=resources))
    return list(tick.run_requests or []) if isinstance(tick, dg.SensorResult) else []


def _group_rows(warehouse) -> pd.DataFrame:
    with warehouse.connect() as conn:
        return pd.read_sql(
            sa.text(
                "SELECT group_id, kind, look, look_end, verdict, members, budget_share, p_family, z_stat, factor, "
                "sentence "
                "FROM radar.group_verdict WHERE deploy_id = 'gl-1' ORDER BY look"
            ),
            conn,
        )


def _marks(warehouse) -> pd.Series:
    with warehouse.connect() as conn:
        return pd.read_sql(
            sa.text("SELECT queryid, verdict, group_regressed FROM radar.verdict WHERE deploy_id = 'gl-1'"), conn
        ).set_index("queryid")


def test_a_group_too_little_slower_for_the_first_look_is_found_by_a_later_one(
    deployed, warehouse, warehouse_url, slack
):
    resources = _resources(warehouse_url, slack)
    defs = dg.Definitions(
        assets=[deploy_verdicts, deploy_looks, regression_alerts, code_host_statuses],
        jobs=[deploy_verdicts_job, deploy_looks_job],
        sensors=[deploy_look_sensor],
        resources=resources,
    )
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("deploys", ["gl-1"])
        first = defs.resolve_job_def(deploy_verdicts_job.name).execute_in_process(
            instance=instance, partition_key="gl-1"
        )
        assert first.success
        (row,) = _group_rows(warehouse).to_dict("records")  # one group: the shape's fifteen (one role)
        assert row["kind"] == "shape" and row["look"] == 0 and row["verdict"] == "inconclusive"
        assert row["members"] == 15 and pd.isna(row["look_end"])
        group_id = row["group_id"]
        marks = _marks(warehouse)
        assert marks["group_regressed"].isna().all() and not (marks["verdict"] == "detected").any()
        with warehouse.connect() as conn:
            assert deploy_states(conn, ["gl-1"]).iloc[0]["state"] == "inconclusive"
        assert not slack.calls_to("/api/chat.postMessage")

        # Every statement's own verdict decided (as if the first verdict had cleared them): the group alone, still
        # undecided, keeps the deploy's looks due.
        with warehouse.begin() as conn:
            saved = conn.execute(
                sa.text(
                    "UPDATE radar.verdict SET verdict = 'no_regression' WHERE deploy_id = 'gl-1' "
                    "AND verdict IN ('inconclusive', 'insufficient_data') RETURNING queryid, verdict"
                )
            ).fetchall()
        assert saved
        (request,) = _due(instance, resources)
        look = request.run_config["ops"]["deploy_looks"]["config"]["look"]
        assert look == 3  # 90 s after the deploy: every look is due, the latest is asked for
        with warehouse.begin() as conn:  # the statements open again, as the first verdict left them
            conn.execute(
                sa.text(
                    "UPDATE radar.verdict SET verdict = 'inconclusive' WHERE deploy_id = 'gl-1' AND queryid = ANY(:q)"
                ),
                {"q": [int(r[0]) for r in saved]},
            )

        job = defs.resolve_job_def(deploy_looks_job.name)
        result = job.execute_in_process(
            instance=instance,
            partition_key=request.partition_key,
            run_config=request.run_config,
            tags={**request.tags, "dagster/run_key": request.run_key or ""},
        )
        assert result.success

        rows = _group_rows(warehouse)
        assert rows[["look", "verdict"]].values.tolist() == [[0, "inconclusive"], [3, "detected"]], rows[
            ["z_stat", "factor"]
        ]
        late = rows.iloc[1]
        assert late["group_id"] == group_id and late["members"] == 15
        assert late["look_end"] == deployed + timedelta(seconds=LOOK_SPANS[3] * W)
        # The group's share of look 3's budget: GROUP_SHARE of it, the deploy's only group.
        assert late["budget_share"] == pytest.approx(GROUP_SHARE * look_budget(0.1, 3))
        assert late["p_family"] <= late["budget_share"]
        marks = _marks(warehouse)
        members = marks.loc[list(MEMBERS)]
        assert members["group_regressed"].str.contains("slowed as a group", regex=False).all()
        assert members["group_regressed"].str.endswith("(later look 3)").all()
        assert marks.loc[list(OTHERS), "group_regressed"].isna().all()
        with warehouse.connect() as conn:
            state = deploy_states(conn, ["gl-1"]).iloc[0]
            shown = groups_of(conn, "gl-1")
            alerts = conn.execute(sa.text("SELECT queryid, status FROM radar.alert WHERE deploy_id = 'gl-1'")).all()
        assert state["state"] == "fail" and state["groups_detected"] == 1
        assert shown[["look", "verdict"]].values.tolist() == [[3, "detected"]]  # the group's latest verdict

        # Alerted once, by one member, as the look's news.
        assert len(alerts) == 1 and int(alerts[0][0]) in MEMBERS and alerts[0][1] == "sent"
        (post,) = slack.calls_to("/api/chat.postMessage")
        words = post.body.decode()
        found_after = span_words(timedelta(seconds=LOOK_SPANS[3] * W))
        assert f"found {found_after} after deploy gl-1 (later look 3)" in words, words
        assert "slowed as a group" in words

        assert not _due(instance, resources)  # the last look ran: the looks stop

    from click.testing import CliRunner

    from radar_pipeline.cli import main

    env = {"RADAR_WAREHOUSE_URL": warehouse_url, "COLUMNS": "200"}
    shown = CliRunner().invoke(main, ["verdicts", "gl-1", "--all"], env=env)
    assert shown.exit_code == 0, shown.output
    assert f"group detected at later look 3: {late['sentence']}" in shown.output
    assert "queryid 101 is in a group that regressed: " in shown.output


def test_a_group_decided_at_the_first_look_is_not_tested_again_and_keeps_no_look_due(deployed, warehouse):
    from radar_pipeline.steps.deploy_analysis import AnalysisRun, analyse_deploy
    from radar_pipeline.steps.looks import run_look

    run = AnalysisRun(warehouse, ANALYSIS.settings(), settle=ANALYSIS.settle)
    analyse_deploy(run, "gl-1")
    with warehouse.begin() as conn:  # the group decided, every statement too
        conn.execute(sa.text("UPDATE radar.group_verdict SET verdict = 'no_regression' WHERE deploy_id = 'gl-1'"))
        conn.execute(sa.text("UPDATE radar.verdict SET verdict = 'no_regression' WHERE deploy_id = 'gl-1'"))
    with warehouse.connect() as conn:
        assert not [d for d in looks.due_looks(conn, timedelta(seconds=W), ANALYSIS.settle) if d.deploy_id == "gl-1"]
    with warehouse.begin() as conn:  # a statement open again: the look runs, and leaves the decided group alone
        conn.execute(sa.text("UPDATE radar.verdict SET verdict = 'inconclusive' WHERE queryid = 201"))
    result = run_look(run, "gl-1", 3)
    assert result.status == "done"
    assert _group_rows(warehouse)[["look", "verdict"]].values.tolist() == [[0, "no_regression"]]


def test_the_migration_runs_again_and_keys_a_group_s_rows_by_look(warehouse):
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "sql" / "0034_group_looks.sql").read_text()
    with warehouse.begin() as conn:
        conn.exec_driver_sql(text)  # already applied by the fixture: a second run changes nothing
        key = conn.execute(
            sa.text(
                "SELECT array_agg(a.attname ORDER BY k.n) FROM pg_constraint c "
                "CROSS JOIN LATERAL unnest(c.conkey) WITH ORDINALITY AS k(attnum, n) "
                "JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.attnum "
                "WHERE c.conrelid = 'radar.group_verdict'::regclass AND c.contype = 'p'"
            )
        ).scalar_one()
    assert key == ["deploy_id", "target", "group_id", "look"]


def test_a_group_detected_at_the_first_look_is_alerted_once_over_all_looks(deployed, warehouse, warehouse_url, slack):
    """The group's representative is fixed when the group is detected (the first of its stored members, ordered by
    their execution time after the deploy at that look): a later look that rewrites the other members' rows with
    its longer after side (8W: eight times the calls) does not hand the group to another member, and the group is
    one alert, one message, over all looks."""
    resources = _resources(warehouse_url, slack)
    alerts_job = dg.define_asset_job("group_alerts", selection=[regression_alerts])
    defs = dg.Definitions(
        assets=[deploy_verdicts, deploy_looks, regression_alerts, code_host_statuses],
        jobs=[deploy_verdicts_job, alerts_job],
        resources=resources,
    )

    def alerts() -> list[tuple[int, str]]:
        with warehouse.connect() as conn:
            found = conn.execute(sa.text("SELECT queryid, status FROM radar.alert WHERE deploy_id = 'gl-1'")).all()
        return sorted((int(q), s) for q, s in found)

    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("deploys", ["gl-1"])
        assert (
            defs.resolve_job_def(deploy_verdicts_job.name)
            .execute_in_process(instance=instance, partition_key="gl-1")
            .success
        )
        with warehouse.begin() as conn:
            # As if the first verdict had detected the group, and its heaviest member had been cleared on its own
            # (so no later look rewrites that member's row); the others stay open for the later look.
            conn.execute(sa.text("UPDATE radar.group_verdict SET verdict = 'detected' WHERE deploy_id = 'gl-1'"))
            (heaviest,) = conn.execute(
                sa.text(
                    "SELECT queryid FROM radar.verdict WHERE deploy_id = 'gl-1' AND queryid = ANY(:q) "
                    "ORDER BY calls_after * mean_after_ms DESC, queryid LIMIT 1"
                ),
                {"q": list(MEMBERS)},
            ).one()
            conn.execute(
                sa.text("UPDATE radar.verdict SET verdict = 'no_regression' WHERE deploy_id = 'gl-1' AND queryid = :q"),
                {"q": heaviest},
            )
        assert defs.resolve_job_def("group_alerts").execute_in_process(instance=instance, partition_key="gl-1").success
        first = alerts()
        assert len(first) == 1 and first[0][1] == "sent"
        representative = first[0][0]
        assert len(slack.calls_to("/api/chat.postMessage")) == 1

        # A later look that clears the open members on their own (warehouse.looks.replace_open, as run_look writes
        # a look's decisions): their rows now carry the look's 8W after side, eight times the calls.
        with warehouse.begin() as conn:
            stored = pd.read_sql(
                sa.text(
                    "SELECT * FROM radar.verdict WHERE deploy_id = 'gl-1' AND queryid = ANY(:q) "
                    "AND verdict = 'inconclusive'"
                ),
                conn,
                params={"q": list(MEMBERS)},
            )
            assert len(stored) >= 2
            cleared = stored.assign(verdict="no_regression", calls_after=stored["calls_after"] * 8)
            looks.replace_open(conn, "gl-1", "gl", cleared, 3, deployed + timedelta(seconds=LOOK_SPANS[3] * W))
        with warehouse.connect() as conn:
            rows = pd.read_sql(
                sa.text(
                    "SELECT queryid, look, calls_after * mean_after_ms AS spent FROM radar.verdict "
                    "WHERE deploy_id = 'gl-1' AND queryid = ANY(:q) ORDER BY spent DESC"
                ),
                conn,
                params={"q": list(MEMBERS)},
            )
        assert int(rows.iloc[0]["queryid"]) != representative  # the heaviest now is another member, rewritten
        assert defs.resolve_job_def("group_alerts").execute_in_process(instance=instance, partition_key="gl-1").success
        assert alerts() == first
        assert len(slack.calls_to("/api/chat.postMessage")) == 1
