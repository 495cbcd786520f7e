"""Fleet verdicts on real PostgreSQL (docs/fleets.md): a release deployed to six targets, counters stored for each,
analysed by the real steps, decided jointly, stored, shown by `radar verdicts` and alerted through the outbox.

Per target (levels, call rates and noise differ between targets), four statements over ±20 minutes, a scrape a
minute: 1 slows ×1.4 on every target — too little for any one target's verdict, plain in their combination; 2 slows
×3 on shard-3 alone (that target's own verdict finds it; the fleet verdict says "only on shard-3"); 3 and 4 stay.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import sqlalchemy as sa

from radar_pipeline.engine import EngineSettings
from radar_pipeline.steps.deploy_analysis import AnalysisRun, analyse_deploy
from radar_pipeline.steps.releases import (
    FINAL,
    PARTIAL,
    decide_release,
    decide_release_of,
    deliver_fleet_alerts,
    with_text,
)
from radar_pipeline.warehouse import deploys
from radar_pipeline.warehouse.releases import INFERRED_PREFIX, ReleaseError, release_of_deploy

from .helpers import store_counters

SETTINGS = EngineSettings(window=timedelta(minutes=20))
TARGETS = [f"shard-{i}" for i in range(6)]
TEXTS = {
    1: "SELECT * FROM orders WHERE customer_id = $1",
    2: "SELECT * FROM carts WHERE owner = $1",
    3: "SELECT * FROM items WHERE id = $1",
    4: "UPDATE sessions SET seen = now() WHERE id = $1",
}
FLEET_STEP, ONE_TARGET_STEP, LONE = 1.4, 3.0, "shard-3"


def counters(deploy_at: datetime, target: int, seed: int) -> pd.DataFrame:
    """One target's cumulative counters (queryid, captured_at, calls, total_exec_time): 20 scrapes a minute apart
    each side of the deploy; per statement a target-specific level, call rate and interval noise."""
    rng = np.random.default_rng(seed)
    rows = []
    for queryid in TEXTS:
        base = rng.lognormal(0.0, 0.5) * queryid
        rate = int(rng.integers(30, 80))
        noise = rng.uniform(0.2, 0.3)
        calls, total = 0, 0.0
        for j in range(-20, 21):
            step = (queryid == 1 and j > 0) * (FLEET_STEP - 1) + (queryid == 2 and j > 0 and target == 3) * (
                ONE_TARGET_STEP - 1
            )
            if j > -20:
                mean = base * (1 + step) * rng.lognormal(-(noise**2) / 2, noise)
                calls, total = calls + rate, total + rate * mean
            rows.append((queryid, deploy_at + timedelta(minutes=j), calls, total))
    return pd.DataFrame(rows, columns=["queryid", "captured_at", "calls", "total_exec_time"])


def record(warehouse: sa.Engine, deploy_id: str, target: str, at: datetime, **fields: str) -> None:
    """A deploy event, as `radar deploy` records it."""
    deploys.record(warehouse, deploys.DeployEvent(deploy_id, target, at, **fields), configured_targets=[target])


@pytest.fixture
def fleet(warehouse):
    """Six targets' counters stored and their deploys recorded in release rel-1 (none analysed yet)."""
    at = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(hours=3)
    for i, target in enumerate(TARGETS):
        store_counters(warehouse, target, counters(at, i, seed=200 + i), TEXTS, dbid=5 + i)
        record(warehouse, f"rel-1-{target}", target, at, release_id="rel-1")
    return at


def own_verdict(warehouse: sa.Engine, target: str, queryid: int) -> str:
    """The target's own verdict of the statement at its deploy in rel-1."""
    with warehouse.connect() as conn:
        return conn.execute(
            sa.text("SELECT verdict FROM radar.verdict WHERE deploy_id = :d AND queryid = :q"),
            {"d": f"rel-1-{target}", "q": queryid},
        ).scalar_one()


def test_a_small_consistent_step_is_found_jointly_and_a_lone_one_only_on_its_target(warehouse, warehouse_url, fleet):
    decisions = []
    for target in TARGETS:
        analyse_deploy(AnalysisRun(warehouse, SETTINGS), f"rel-1-{target}")
        decisions.append(decide_release_of(warehouse, f"rel-1-{target}", SETTINGS))
    first, last = decisions[0], decisions[-1]
    # a release of which one member is analysed combines nothing yet; partial until every member is analysed
    assert first.status == PARTIAL and first.verdicts.empty
    assert decisions[-2].status == PARTIAL and set(decisions[-2].verdicts["verdict"]) == {"pending"}
    assert last.status == FINAL and last.look == 0

    # no target's own verdict finds the ×1.45 step; the fleet's does, on every target
    assert [own_verdict(warehouse, t, 1) for t in TARGETS].count("detected") == 0
    by_key = last.verdicts.set_index("fingerprint")
    step = by_key.loc[1]
    assert step["verdict"] == "detected", step.to_dict()
    assert step["consistent"] and step["report"] == f"×{step['factor']:.2f} on 6 of 6 targets"
    assert step["factor_low"] < FLEET_STEP < step["factor_high"] and step["targets"] == 6
    assert step["p_family"] <= 0.05  # the first look spends half of B = 0.1

    # ×3 on shard-3 alone: its own verdict finds it; the fleet's names it
    assert own_verdict(warehouse, LONE, 2) == "detected"
    lone = by_key.loc[2]
    assert list(lone["only_on"]) == [LONE] and lone["report"].startswith(f"only on {LONE} ×")
    assert lone["verdict"] != "detected", lone.to_dict()
    assert set(by_key.loc[[3, 4], "verdict"]) <= {"no_regression", "inconclusive"}

    # stored, idempotent: deciding again stores the same rows and spends the same look
    with warehouse.connect() as conn:
        stored = pd.read_sql("SELECT * FROM radar.release_verdict ORDER BY fingerprint", conn)
        looks = conn.execute(sa.text("SELECT look FROM radar.release_look WHERE release_id = 'rel-1'")).all()
    again = decide_release(warehouse, "rel-1", SETTINGS)
    with warehouse.connect() as conn:
        stored_again = pd.read_sql("SELECT * FROM radar.release_verdict ORDER BY fingerprint", conn)
    assert looks == [(0,)] and again.look == 0
    pd.testing.assert_frame_equal(stored.drop(columns="decided_at"), stored_again.drop(columns="decided_at"))

    # shown by `radar verdicts` for a deploy of the release
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "radar"), "verdicts", "rel-1-shard-0", "--warehouse", warehouse_url],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "220"},
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("release rel-1 "))
    assert lines[head].startswith("release rel-1 (final, 6 of 6 deploys analysed): 1 fleet detection among 4 ")
    assert lines[head + 1].split()[0] == "detected" and "on 6 of 6 targets" in lines[head + 1]
    assert TEXTS[1] in lines[head + 1]
    assert any(f"only on {LONE}" in line for line in lines[head + 1 :])

    # alerted through the outbox, once
    import logging

    from radar_pipeline.alerts.slack import SlackSender  # made with no token and no webhook: recorded, not sent

    log = logging.getLogger("test")
    sent = deliver_fleet_alerts(log, warehouse, SlackSender(), with_text(warehouse, again))
    assert sent["to_send"] == 1 and TEXTS[1] in str(sent["message"])
    assert deliver_fleet_alerts(log, warehouse, SlackSender(), again)["to_send"] == 0
    with warehouse.connect() as conn:
        rows = conn.execute(
            sa.text("SELECT deploy_id, target, queryid, status FROM radar.alert WHERE target LIKE 'release:%'")
        ).all()
    assert rows == [("rel-1-shard-0", "release:rel-1", 1, "skipped")]


def test_a_late_member_makes_the_release_partial_then_spends_the_next_look(warehouse, fleet):
    for target in TARGETS[:3]:
        analyse_deploy(AnalysisRun(warehouse, SETTINGS), f"rel-1-{target}")
    assert decide_release(warehouse, "rel-1", SETTINGS).status == PARTIAL
    for target in TARGETS[3:5]:
        analyse_deploy(AnalysisRun(warehouse, SETTINGS), f"rel-1-{target}")
    with warehouse.begin() as conn:  # shard-5 joins the release late: five members decided first
        conn.execute(sa.text("UPDATE radar.deploy_event SET release_id = NULL WHERE deploy_id = 'rel-1-shard-5'"))
    assert decide_release(warehouse, "rel-1", SETTINGS).look == 0
    with warehouse.begin() as conn:
        conn.execute(sa.text("UPDATE radar.deploy_event SET release_id = 'rel-1' WHERE deploy_id = 'rel-1-shard-5'"))
    late = decide_release(warehouse, "rel-1", SETTINGS)
    assert late.status == PARTIAL and late.look is None and set(late.verdicts["verdict"]) == {"pending"}
    analyse_deploy(AnalysisRun(warehouse, SETTINGS), "rel-1-shard-5")
    final = decide_release(warehouse, "rel-1", SETTINGS)
    assert final.status == FINAL and final.look == 1
    assert (final.verdicts["budget_share"] <= 0.1 * 0.2 + 1e-12).all()  # look 1 spends LOOK_SPENDING[1] of B


def test_bad_releases_are_named_and_nothing_is_stored(warehouse):
    at = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(hours=3)
    with pytest.raises(ReleaseError, match=r"unknown release 'nope': no deploy carries it"):
        decide_release(warehouse, "nope", SETTINGS)
    record(warehouse, "solo-1", "shard-0", at, release_id="solo")
    with pytest.raises(ReleaseError, match=r"release 'solo' was deployed to 1 target only \(shard-0\)"):
        decide_release(warehouse, "solo", SETTINGS)
    assert "a fleet verdict needs 2 or more" in str(decide_release_of(warehouse, "solo-1", SETTINGS))
    with warehouse.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM radar.release_verdict")).scalar_one() == 0
        assert conn.execute(sa.text("SELECT count(*) FROM radar.release_look")).scalar_one() == 0


def test_a_release_is_inferred_from_service_and_version_within_the_span_and_explicit_ids_win(warehouse):
    at = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(hours=5)
    same = {"service": "shop", "version": "v7"}
    record(warehouse, "inf-a", "shard-0", at, **same)
    record(warehouse, "inf-b", "shard-1", at + timedelta(minutes=40), **same)
    record(warehouse, "inf-c", "shard-2", at + timedelta(minutes=50), **same, release_id="explicit-7")
    record(warehouse, "inf-d", "shard-3", at + timedelta(minutes=61), **same)  # past the span of inf-a
    record(warehouse, "inf-e", "shard-4", at + timedelta(minutes=90), **{**same, "version": "v8"})
    with warehouse.connect() as conn:
        assert release_of_deploy(conn, "inf-a") == release_of_deploy(conn, "inf-b") == INFERRED_PREFIX + "inf-a"
        assert release_of_deploy(conn, "inf-c") == "explicit-7"
        assert release_of_deploy(conn, "inf-d") is None  # alone in its group
        assert release_of_deploy(conn, "inf-e") is None
        assert release_of_deploy(conn, "no-such-deploy") is None
    partial = decide_release(warehouse, INFERRED_PREFIX + "inf-a", SETTINGS)
    assert sorted(partial.release.members["deploy_id"]) == ["inf-a", "inf-b"] and partial.status == PARTIAL
    with pytest.raises(ReleaseError, match="unknown release 'inferred:inf-b'"):
        decide_release(warehouse, INFERRED_PREFIX + "inf-b", SETTINGS)  # not the first of its group


def test_release_verdicts_runs_after_each_member_s_analysis_in_dagster_and_alerts_once(
    warehouse, warehouse_url, fleet, slack
):
    import dagster as dg

    from radar_pipeline.definitions import defs
    from radar_pipeline.defs.deploys.deploy_verdicts import deploy_verdicts
    from radar_pipeline.defs.deploys.release_verdicts import release_verdicts
    from radar_pipeline.defs.resources import AnalysisResource, SlackResource, TargetsResource, WarehouseResource

    job = defs().get_repository_def().get_job("deploy_verdicts_job")
    assert {"deploy_verdicts", "release_verdicts"} <= {k.path[-1] for k in job.asset_layer.executable_asset_keys}
    retry = defs().get_repository_def().get_job("alert_retry_job")  # a fleet alert's failed send is retried too
    assert {k.path[-1] for k in retry.asset_layer.executable_asset_keys} == {
        "regression_alerts",
        "release_verdicts",
        "canary_alerts",
        "code_host_statuses",
    }
    resources = {
        "warehouse": WarehouseResource(url=warehouse_url),
        "analysis": AnalysisResource(window_seconds=1200, scrape_interval_seconds=60),
        "targets": TargetsResource(spec=" ".join(f"{t}=postgresql://nowhere.invalid/none" for t in TARGETS)),
        "slack": SlackResource(token="xoxb-test-token", channel="#radar", base_url=slack.api_url),
    }
    metadata = []
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("deploys", [f"rel-1-{t}" for t in TARGETS])
        for target in TARGETS:
            result = dg.materialize(
                [deploy_verdicts, release_verdicts],
                partition_key=f"rel-1-{target}",
                resources=resources,
                instance=instance,
            )
            assert result.success
            metadata.append(result.asset_materializations_for_node("release_verdicts")[0].metadata)
    assert metadata[0]["status"].value == "partial" and metadata[0]["members_analysed"].value == "1 of 6"
    last = metadata[-1]
    assert last["status"].value == "final" and last["fleet_detections"].value == 1 and last["to_send"].value == 1
    posts = [p.json for p in slack.calls_to("/api/chat.postMessage")]
    assert [p["text"] for p in posts] == ["Release rel-1: 1 statement slower across its fleet"]  # once
    blocks = posts[0]["blocks"] if isinstance(posts[0]["blocks"], list) else json.loads(posts[0]["blocks"])
    assert TEXTS[1] in blocks[2]["text"]["text"] and "on 6 of 6 targets" in blocks[3]["fields"][0]["text"]

    # alert_retry_job's run delivers what is stored and decides nothing, even when the members were analysed again
    from radar_pipeline.defs.alerts.regression_alerts import regression_alerts
    from radar_pipeline.defs.reconcile.reconciler import alert_retry_job
    from radar_pipeline.defs.resources import ChannelsResource

    for target in TARGETS:
        analyse_deploy(AnalysisRun(warehouse, SETTINGS), f"rel-1-{target}")
    retry_defs = dg.Definitions(
        assets=[regression_alerts, release_verdicts],
        jobs=[alert_retry_job],
        resources={**resources, "channels": ChannelsResource()},
    )
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("deploys", ["rel-1-shard-0"])
        result = retry_defs.resolve_job_def("alert_retry_job").execute_in_process(
            instance=instance, partition_key="rel-1-shard-0"
        )
        assert result.success
        retried = result.asset_materializations_for_node("release_verdicts")[0].metadata
    assert retried["status"].value == "final" and retried["look"].value == 0 and retried["to_send"].value == 0
    with warehouse.connect() as conn:
        assert conn.execute(sa.text("SELECT look FROM radar.release_look")).scalars().all() == [0]
    assert len(slack.calls_to("/api/chat.postMessage")) == 1


def test_a_fleet_alert_whose_send_timed_out_is_looked_for_in_the_channel_not_posted_twice(warehouse, fleet, slack):
    import logging

    from radar_pipeline.alerts.slack import SlackSender

    for target in TARGETS:
        analyse_deploy(AnalysisRun(warehouse, SETTINGS), f"rel-1-{target}")
    decision = with_text(warehouse, decide_release(warehouse, "rel-1", SETTINGS))
    assert len(decision.detected) == 1
    post = "/api/chat.postMessage"
    bot = SlackSender(token="xoxb-test-token", channel="C0RADAR", base_url=slack.api_url, timeout=3)
    log = logging.getLogger("test")
    held = slack.hold_next(post)  # Slack takes the message and answers only after the client gave up
    try:
        deliver_fleet_alerts(log, warehouse, bot, decision)
    finally:
        held.set()

    def outbox() -> list[tuple]:
        with warehouse.connect() as conn:
            return conn.execute(
                sa.text("SELECT status, outcome_unknown FROM radar.alert WHERE target = 'release:rel-1'")
            ).all()

    assert outbox() == [("pending", True)] and len(slack.messages()) == 1
    with warehouse.begin() as conn:  # the backoff is over
        conn.execute(sa.text("UPDATE radar.alert SET next_attempt_at = now() WHERE target = 'release:rel-1'"))
    again = deliver_fleet_alerts(log, warehouse, bot, decision)
    assert len(slack.calls_to("/api/conversations.history")) == 1
    assert len(slack.calls_to(post)) == 1 and again["to_send"] == 0  # found posted: not sent again
    assert outbox() == [("sent", False)]


def test_a_final_decision_is_kept_at_its_look_and_only_a_changed_basis_spends_the_next(warehouse, fleet):
    for target in TARGETS:
        analyse_deploy(AnalysisRun(warehouse, SETTINGS), f"rel-1-{target}")
    first = decide_release(warehouse, "rel-1", SETTINGS)
    assert first.status == FINAL and first.look == 0 and set(first.detected["fingerprint"]) == {1}

    def stored() -> pd.DataFrame:
        with warehouse.connect() as conn:
            return pd.read_sql("SELECT * FROM radar.release_verdict ORDER BY fingerprint", conn).drop(
                columns="decided_at"
            )

    before = stored()
    # a member's later look replaces its open statements' rows with the longer window's evidence: here statement 3
    # ×3 on every target. The release is not tested again at look 0 on it: the decision stands, as stored.
    with warehouse.begin() as conn:
        conn.execute(
            sa.text(
                "UPDATE radar.verdict SET look = 1, deploy_log_factor = ln(3), deploy_log_se = 0.01 "
                "WHERE deploy_id LIKE 'rel-1-%' AND queryid = 3"
            )
        )
    again = decide_release(warehouse, "rel-1", SETTINGS)
    assert again.status == FINAL and again.look == 0 and set(again.detected["fingerprint"]) == {1}
    pd.testing.assert_frame_equal(before, stored())
    with warehouse.connect() as conn:
        assert conn.execute(sa.text("SELECT look FROM radar.release_look")).scalars().all() == [0]

    # the nightly reanalysis reaches the members one run at a time: the decision stands until it has reached them all,
    # then the next look decides, on the members' first looks
    analyse_deploy(AnalysisRun(warehouse, SETTINGS), "rel-1-shard-2")
    assert decide_release(warehouse, "rel-1", SETTINGS).look == 0
    pd.testing.assert_frame_equal(before, stored())
    for target in TARGETS:
        if target != "shard-2":
            analyse_deploy(AnalysisRun(warehouse, SETTINGS), f"rel-1-{target}")
    with warehouse.begin() as conn:  # later looks at four of the reanalysed members
        conn.execute(
            sa.text(
                "UPDATE radar.verdict SET look = 1, deploy_log_factor = ln(3), deploy_log_se = 0.01 "
                "WHERE deploy_id LIKE 'rel-1-%' AND deploy_id NOT IN ('rel-1-shard-4', 'rel-1-shard-5') "
                "AND queryid = 3"
            )
        )
    redone = decide_release(warehouse, "rel-1", SETTINGS)
    assert redone.status == FINAL and redone.look == 1
    # a later look's evidence is no fleet evidence: the statements it replaced are read again from the members'
    # counters over their first looks' spans (nothing changed there), so every member still brings its evidence
    three = redone.verdicts.set_index("fingerprint").loc[3]
    assert list(three["member_targets"]) == TARGETS and three["verdict"] != "detected" and three["factor"] < 1.2
    assert (redone.verdicts["budget_share"] <= 0.1 * 0.2 + 1e-12).all()
    assert decide_release(warehouse, "rel-1", SETTINGS).look == 1

    # the retry of a failed send only reads what is stored: it decides nothing and records no look
    from radar_pipeline.steps.releases import stored_decision_of

    analyse_deploy(AnalysisRun(warehouse, SETTINGS), "rel-1-shard-4")
    kept = stored_decision_of(warehouse, "rel-1-shard-0")
    assert (
        kept.status == FINAL
        and kept.look == 1
        and set(kept.detected["fingerprint"]) == set(redone.detected["fingerprint"])
    )
    with warehouse.connect() as conn:
        assert conn.execute(sa.text("SELECT look FROM radar.release_look ORDER BY look")).scalars().all() == [0, 1]


def test_fleet_verdicts_for_scripts_beside_unchanged_per_target_rows(warehouse, warehouse_url, fleet):
    import csv
    import io

    from click.testing import CliRunner

    from radar_pipeline.cli import main
    from radar_pipeline.warehouse.analysis import verdicts_of

    for target in TARGETS:
        analyse_deploy(AnalysisRun(warehouse, SETTINGS), f"rel-1-{target}")
        decide_release_of(warehouse, f"rel-1-{target}", SETTINGS)

    def radar(*args: str):  # type: ignore[no-untyped-def]
        return CliRunner().invoke(main, [*args, "--warehouse", warehouse_url], env={"COLUMNS": None})

    # the per-target rows keep their columns, one object per verdict, nothing of the fleet among them
    with warehouse.connect() as conn:
        own = verdicts_of(conn, "rel-1-shard-0")
    per_target = radar("verdicts", "rel-1-shard-0", "--format", "json")
    assert per_target.exit_code == 0, per_target.output
    rows = json.loads(per_target.stdout)
    assert len(rows) == len(own) and all(list(r) == list(rows[0]) for r in rows)
    assert "release_id" not in rows[0] and "report" not in rows[0] and rows[0]["target"] == "shard-0"

    # the fleet verdicts: one object per statement key of the release, its report and member targets
    fleet_json = radar("verdicts", "rel-1-shard-0", "--fleet", "--format", "json")
    assert fleet_json.exit_code == 0, fleet_json.output
    fleet_rows = json.loads(fleet_json.stdout)
    assert [r["fingerprint"] for r in fleet_rows][:1] == [1] and len(fleet_rows) == len(TEXTS)
    first = fleet_rows[0]
    assert first["release_id"] == "rel-1" and first["verdict"] == "detected" and first["status"] == "final"
    assert first["report"].endswith("on 6 of 6 targets") and first["query"] == TEXTS[1]
    assert isinstance(first["member_targets"], list) and first["look"] == 0
    lone = next(r for r in fleet_rows if r["fingerprint"] == 2)
    assert lone["only_on"] == [LONE]
    fleet_csv = radar("verdicts", "rel-1-shard-3", "--fleet", "--format", "csv")  # any member gives the release's
    assert fleet_csv.exit_code == 0, fleet_csv.output
    table = list(csv.DictReader(io.StringIO(fleet_csv.stdout)))
    assert [r["fingerprint"] for r in table] == [str(r["fingerprint"]) for r in fleet_rows]
    assert json.loads(next(r["only_on"] for r in table if r["fingerprint"] == "2")) == [LONE]  # JSON text in a cell

    # the table: the fleet's part alone
    fleet_table = radar("verdicts", "rel-1-shard-0", "--fleet")
    assert fleet_table.exit_code == 0 and fleet_table.stdout.startswith("release rel-1 (final, 6 of 6"), (
        fleet_table.output
    )

    # a deploy in no release says so, naming it
    record(warehouse, "alone-1", "shard-0", fleet + timedelta(minutes=30))
    alone = radar("verdicts", "alone-1", "--fleet", "--format", "json")
    assert alone.exit_code == 1 and "no fleet verdicts for 'alone-1'" in alone.output, alone.output


@pytest.mark.parametrize("change", ["late member deployed earlier", "anchor's target redeployed"])
def test_a_fleet_detection_is_alerted_once_whatever_members_come_later(warehouse, fleet, slack, change):
    import logging

    from radar_pipeline.alerts.slack import SlackSender

    for target in TARGETS:
        analyse_deploy(AnalysisRun(warehouse, SETTINGS), f"rel-1-{target}")
    log = logging.getLogger("test")
    bot = SlackSender(token="xoxb-test-token", channel="C0RADAR", base_url=slack.api_url)
    first = with_text(warehouse, decide_release(warehouse, "rel-1", SETTINGS))
    assert len(first.detected) == 1 and deliver_fleet_alerts(log, warehouse, bot, first)["to_send"] == 1
    if change == "late member deployed earlier":  # a seventh target's deploy, recorded late, a minute before the rest
        at, target, deploy_id = fleet - timedelta(minutes=1), "shard-6", "rel-1-shard-6"
        store_counters(warehouse, target, counters(at, 6, seed=206), TEXTS, dbid=11)
    else:  # the first member's deploy recorded again under a new id (its target now counts by that deploy)
        at, target, deploy_id = fleet, "shard-0", "rel-1-shard-0-again"
    record(warehouse, deploy_id, target, at, release_id="rel-1")
    analyse_deploy(AnalysisRun(warehouse, SETTINGS), deploy_id)
    again = with_text(warehouse, decide_release(warehouse, "rel-1", SETTINGS))
    assert again.status == FINAL and again.look == 1 and len(again.detected) == 1
    assert deliver_fleet_alerts(log, warehouse, bot, again)["to_send"] == 0
    assert len(slack.calls_to("/api/chat.postMessage")) == 1
    with warehouse.connect() as conn:
        filed = conn.execute(sa.text("SELECT DISTINCT deploy_id FROM radar.alert WHERE target = 'release:rel-1'"))
        assert [r[0] for r in filed] == ["rel-1-shard-0"]


def test_fleet_alerts_of_a_release_older_than_the_alert_age_limit_are_withheld_in_dagster(
    warehouse, warehouse_url, fleet, slack
):
    import dagster as dg

    from radar_pipeline.defs.deploys.release_verdicts import release_verdicts
    from radar_pipeline.defs.resources import AnalysisResource, SlackResource, WarehouseResource

    for target in TARGETS:  # the release was deployed 3 h ago: its windows closed 2 h 40 min ago
        analyse_deploy(AnalysisRun(warehouse, SETTINGS), f"rel-1-{target}")
    resources = {
        "warehouse": WarehouseResource(url=warehouse_url),
        "analysis": AnalysisResource(window_seconds=1200, scrape_interval_seconds=60),
        "slack": SlackResource(
            token="xoxb-test-token", channel="#radar", base_url=slack.api_url, alert_max_age_hours=1.0
        ),
    }
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("deploys", ["rel-1-shard-0"])
        result = dg.materialize(
            [release_verdicts], partition_key="rel-1-shard-0", resources=resources, instance=instance
        )
        assert result.success
        metadata = result.asset_materializations_for_node("release_verdicts")[0].metadata
    assert metadata["fleet_detections"].value == 1 and "more than 1 h ago" in metadata["withheld"].value
    assert slack.calls_to("/api/chat.postMessage") == []
    with warehouse.connect() as conn:
        rows = conn.execute(sa.text("SELECT status FROM radar.alert WHERE target = 'release:rel-1'")).scalars().all()
    assert rows == ["withheld"]


def test_fleet_verdicts_for_scripts_give_a_later_look_s_after_side_in_seconds_and_name_an_unknown_deploy(
    warehouse, warehouse_url, fleet
):
    import csv
    import io
    import warnings

    from click.testing import CliRunner

    from radar_pipeline.cli import main

    for target in TARGETS:
        analyse_deploy(AnalysisRun(warehouse, SETTINGS), f"rel-1-{target}")
    decide_release(warehouse, "rel-1", SETTINGS)
    with warehouse.begin() as conn:  # as a later look (after 40 min) stores a key it decided
        conn.execute(
            sa.text(
                "UPDATE radar.release_verdict SET look = 1, look_after = interval '40 minutes' "
                "WHERE release_id = 'rel-1' AND fingerprint = 3"
            )
        )

    def radar(*args: str):  # type: ignore[no-untyped-def]
        return CliRunner().invoke(main, [*args, "--warehouse", warehouse_url], env={"COLUMNS": None})

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no pandas warning on the way
        as_json = radar("verdicts", "rel-1-shard-0", "--fleet", "--format", "json")
        as_csv = radar("verdicts", "rel-1-shard-0", "--fleet", "--format", "csv")
    assert as_json.exit_code == 0 and as_csv.exit_code == 0, as_json.output + as_csv.output
    rows = {r["fingerprint"]: r for r in json.loads(as_json.stdout)}
    cells = {int(r["fingerprint"]): r for r in csv.DictReader(io.StringIO(as_csv.stdout))}
    assert "look_after" not in rows[3] and rows[3]["look_after_s"] == 2400.0 and rows[1]["look_after_s"] is None
    assert float(cells[3]["look_after_s"]) == 2400.0 and cells[1]["look_after_s"] == ""
    assert {"family_weight", "look_after_s"} <= set(rows[3])

    nope = radar("verdicts", "no-such-deploy", "--fleet")
    assert nope.exit_code != 0 and "deploy 'no-such-deploy' does not exist" in nope.output
