"""Fleet decisions at later looks on real PostgreSQL, through Dagster (docs/fleets.md): a release deployed to six
targets, a small step (×1.4) on every target that the release's first final decision leaves open, found by a later
look of the release that release_look_sensor requests once when it is due; the detection alerted once ("found … after
the release"); decided keys kept; each look number spent once; a member's next deploy cutting its spans; partial
releases and failed looks.

Time is compressed as in test_looks.py: W = 10 s, a scrape a second, so the release's looks come due 21 s, 41 s and
81 s after its deploys. The counters are synthetic, written for the whole 8W either side at once: a look reads only its
own spans, and the warehouse's clock decides when each is due.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import dagster as dg
import numpy as np
import pandas as pd
import pytest
import sqlalchemy as sa

from radar_pipeline.alerts.render import span_words
from radar_pipeline.defs.deploys.deploy_verdicts import deploy_verdicts
from radar_pipeline.defs.deploys.release_looks import release_look_sensor, release_looks_job
from radar_pipeline.defs.deploys.release_verdicts import release_verdicts
from radar_pipeline.defs.resources import AnalysisResource, SlackResource, TargetsResource, WarehouseResource
from radar_pipeline.engine.budget import LOOK_SPANS, look_budget
from radar_pipeline.steps.deploy_analysis import AnalysisRun, analyse_deploy
from radar_pipeline.steps.releases import (
    FINAL,
    ReleaseLookRefused,
    decide_release,
    due_release_looks,
    record_failed_release_look,
    run_release_look,
)
from radar_pipeline.warehouse import deploys

from .helpers import every_attempt_fails, store_counters

W = 10  # seconds
ANALYSIS = AnalysisResource(window_seconds=W, scrape_interval_seconds=1, tolerance_floor_seconds=3)
SETTINGS = ANALYSIS.settings()
TARGETS = [f"shard-{i}" for i in range(6)]
TEXTS = {1: "SELECT * FROM orders WHERE customer_id = $1", 2: "SELECT * FROM items WHERE id = $1", 3: "SELECT 1"}
STEP, NOISE, SEED = 1.4, 0.3, 5


def counters(at: datetime, seed: int) -> pd.DataFrame:
    """One target's cumulative counters, a scrape a second from 8W before the deploy to 8W after: per statement a
    target-specific level and call rate, 30% interval noise; statement 1 ×STEP from the deploy on."""
    rng = np.random.default_rng(seed)
    rows = []
    for queryid in TEXTS:
        base = rng.lognormal(0.0, 0.3) * queryid
        rate = int(rng.integers(15, 30))
        calls, total = 1000, 1000.0
        for j in range(-8 * W, 8 * W + 1):
            factor = STEP if queryid == 1 and j > 0 else 1.0
            if j > -8 * W:
                mean = base * factor * rng.lognormal(-(NOISE**2) / 2, NOISE)
                calls, total = calls + rate, total + rate * mean
            rows.append((queryid, at + timedelta(seconds=j), calls, total))
    return pd.DataFrame(rows, columns=["queryid", "captured_at", "calls", "total_exec_time"])


def release_at(warehouse: sa.Engine, ago: timedelta, release_id: str = "rel-9") -> datetime:
    """Six targets' counters stored and their deploys recorded in the release, `ago` before now (none analysed)."""
    at = datetime.now(UTC).replace(microsecond=0) - ago
    for i, target in enumerate(TARGETS):
        store_counters(warehouse, target, counters(at, seed=1000 * SEED + i), TEXTS, dbid=5 + i)
        event = deploys.DeployEvent(f"{release_id}-{target}", target, at, release_id=release_id)
        deploys.record(warehouse, event, configured_targets=[target])
    return at


def stored(warehouse: sa.Engine, release_id: str = "rel-9") -> pd.DataFrame:
    with warehouse.connect() as conn:
        return pd.read_sql(
            sa.text("SELECT * FROM radar.release_verdict WHERE release_id = :r ORDER BY fingerprint"),
            conn,
            params={"r": release_id},
        ).set_index("fingerprint")


def release_looks(warehouse: sa.Engine, release_id: str = "rel-9") -> list[tuple]:
    with warehouse.connect() as conn:
        return [
            tuple(r)
            for r in conn.execute(
                sa.text("SELECT look, kind, status FROM radar.release_look WHERE release_id = :r ORDER BY look"),
                {"r": release_id},
            )
        ]


def _due(instance: dg.DagsterInstance, resources: dict) -> list[dg.RunRequest]:
    tick = release_look_sensor(dg.build_sensor_context(instance=instance, resources=resources))
    return list(tick.run_requests or []) if isinstance(tick, dg.SensorResult) else []


def test_a_small_step_left_open_at_the_release_s_first_look_is_found_by_a_later_look_through_dagster(
    warehouse, warehouse_url, slack
):
    at = release_at(warehouse, timedelta(seconds=45))  # look 2 (4W + 1 s) is due, look 3 (8W + 1 s) not yet
    resources = {
        "warehouse": WarehouseResource(url=warehouse_url),
        "analysis": ANALYSIS,
        "targets": TargetsResource(spec=" ".join(f"{t}=postgresql://nowhere.invalid/none" for t in TARGETS)),
        "slack": SlackResource(token="xoxb-test-token", channel="#radar", base_url=slack.api_url),
    }
    defs = dg.Definitions(
        assets=[deploy_verdicts, release_verdicts],
        jobs=[release_looks_job],
        sensors=[release_look_sensor],
        resources=resources,
    )
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("deploys", [f"rel-9-{t}" for t in TARGETS])
        for target in TARGETS:
            assert not _due(instance, resources)  # partial (or nothing decided): no later look
            result = dg.materialize(
                [deploy_verdicts, release_verdicts],
                partition_key=f"rel-9-{target}",
                resources=resources,
                instance=instance,
            )
            assert result.success
        first = stored(warehouse)
        # the release's first final decision leaves the step open; no target's own verdict finds it
        assert (first["status"] == FINAL).all() and (first["look"] == 0).all()
        assert first.loc[1, "verdict"] == "inconclusive", first.loc[1].to_dict()
        assert first.loc[1, "factor"] > 1.1 and first.loc[1, "targets"] == 6
        kept = first.loc[[2, 3]]
        assert set(kept["verdict"]) == {"no_regression"}
        assert first["family_weight"].sum() == pytest.approx(1.0)
        with warehouse.connect() as conn:
            own = conn.execute(
                sa.text("SELECT count(*) FROM radar.verdict WHERE queryid = 1 AND verdict = 'detected'")
            ).scalar_one()
        assert own == 0
        assert not slack.calls_to("/api/chat.postMessage")

        # the latest look due now (2 at 45 s; a machine slower than that may have let look 3 come due): requested once
        (request,) = _due(instance, resources)
        look = request.run_config["ops"]["release_look"]["config"]["look"]
        (again,) = _due(instance, resources)  # a tick before the run ends asks for the same run: Dagster skips it
        assert again.run_key == request.run_key or again.run_config["ops"]["release_look"]["config"]["look"] > look
        with warehouse.connect() as conn:
            elapsed = (conn.execute(sa.text("SELECT now()")).scalar_one() - at).total_seconds()
        assert look in (2, 3) and LOOK_SPANS[look] * W + 1 <= elapsed
        assert request.run_key.startswith(f"release-look:rel-9:{look}:")
        assert request.tags["radar/release"] == "rel-9" and request.tags["radar/release-look"] == str(look)
        assert request.run_config["ops"]["release_look"]["config"]["release_id"] == "rel-9"
        job = defs.resolve_job_def(release_looks_job.name)
        ran = job.execute_in_process(
            instance=instance, run_config=request.run_config, tags={**request.tags, "dagster/run_key": request.run_key}
        )
        assert ran.success
        (output,) = [e for e in ran.all_events if e.event_type_value == "STEP_OUTPUT"]
        metadata = output.event_specific_data.metadata
        assert metadata["look"].value == look and metadata["detected"].value == 1 and metadata["open_before"].value == 1

        after = stored(warehouse)
        step = after.loc[1]
        assert step["verdict"] == "detected" and step["look"] == look
        assert step["look_after"] == timedelta(seconds=LOOK_SPANS[look] * W)
        assert step["budget_share"] == pytest.approx(look_budget(0.1, look) * first.loc[1, "family_weight"])
        assert step["family_weight"] == first.loc[1, "family_weight"]  # fixed: nothing handed on from decided keys
        assert step["factor_low"] < STEP < step["factor_high"]
        cols = ["verdict", "look", "factor", "p_family", "budget_share"]
        pd.testing.assert_frame_equal(after.loc[[2, 3], cols], kept[cols])  # decided keys are kept
        assert release_looks(warehouse) == [(0, "basis", "done"), (look, "timed", "done")]

        # alerted once, saying when
        (post,) = slack.calls_to("/api/chat.postMessage")
        assert post.json["text"] == "Release rel-9: 1 statement slower across its fleet"
        blocks = post.json["blocks"] if isinstance(post.json["blocks"], list) else json.loads(post.json["blocks"])
        words = json.dumps(blocks, ensure_ascii=False)
        when = span_words(timedelta(seconds=LOOK_SPANS[look] * W))  # "40 s" (look 2), "1.33 min" (look 3)
        assert TEXTS[1] in words and f"found {when} after the release (look {look})" in words

        assert not _due(instance, resources)  # requested once; nothing open any more: the looks stop
        # a retry of a run that stored the look (and then failed) delivers what it stored, deciding nothing again
        rerun = job.execute_in_process(instance=instance, run_config=request.run_config, tags=request.tags)
        assert rerun.success
        (output,) = [e for e in rerun.all_events if e.event_type_value == "STEP_OUTPUT"]
        assert output.event_specific_data.metadata["detected"].value == 1
        assert output.event_specific_data.metadata["to_send"].value == 0
        # release_verdicts run again (a retry, a member's rerun on the same basis) keeps the decision as it is
        again = decide_release(warehouse, "rel-9", SETTINGS)
        assert again.look == look and set(again.detected["fingerprint"]) == {1}
    assert len(slack.calls_to("/api/chat.postMessage")) == 1
    assert release_looks(warehouse) == [(0, "basis", "done"), (look, "timed", "done")]


def test_a_look_waits_for_every_member_and_a_next_deploy_cuts_a_member_s_spans(warehouse):
    at = release_at(warehouse, timedelta(seconds=30))  # look 1 (2W + 1 s) is due, look 2 (4W + 1 s) not yet
    run = AnalysisRun(warehouse, SETTINGS, settle=ANALYSIS.settle)
    for target in TARGETS[:-1]:
        analyse_deploy(run, f"rel-9-{target}")
    assert decide_release(warehouse, "rel-9", SETTINGS).status == "partial"
    with warehouse.connect() as conn:  # a partial release has no later look: the fleet waits for every member
        assert not due_release_looks(conn, SETTINGS, ANALYSIS.settle)
    with pytest.raises(ReleaseLookRefused, match="has no final decision yet"):
        run_release_look(warehouse, SETTINGS, "rel-9", 1, ANALYSIS.settle)

    analyse_deploy(run, f"rel-9-{TARGETS[-1]}")
    first = decide_release(warehouse, "rel-9", SETTINGS)
    assert first.status == FINAL and first.look == 0
    with pytest.raises(ReleaseLookRefused, match=r"look 2 of release 'rel-9' is due at"):
        run_release_look(warehouse, SETTINGS, "rel-9", 2, ANALYSIS.settle)
    # shard-0 deployed again 15 s after the release: its spans stop there (the next deploy's change never enters)
    deploys.record(warehouse, deploys.DeployEvent("next-0", "shard-0", at + timedelta(seconds=15)))
    with warehouse.connect() as conn:
        (due,) = due_release_looks(conn, SETTINGS, ANALYSIS.settle)
    assert (due.release_id, due.look) == ("rel-9", 1)
    before = stored(warehouse)
    result = run_release_look(warehouse, SETTINGS, "rel-9", 1, ANALYSIS.settle)
    cut = result.spans["rel-9-shard-0"]
    assert cut.cut and cut.after == timedelta(seconds=15) and not result.spans["rel-9-shard-1"].cut
    assert result.after == timedelta(seconds=2 * W)
    after = stored(warehouse)
    reopened = before.index[before["verdict"] == "inconclusive"]
    assert (after.loc[reopened, "look"] == 1).all() and (after.drop(index=reopened)["look"] == 0).all()
    assert len(reopened) and (after.loc[reopened, "family_weight"] == before.loc[reopened, "family_weight"]).all()
    share = look_budget(0.1, 1) * after.loc[reopened, "family_weight"]
    assert np.allclose(after.loc[reopened, "budget_share"], share)
    # a look number is spent once
    with pytest.raises(ReleaseLookRefused, match="has taken look 1 already"):
        run_release_look(warehouse, SETTINGS, "rel-9", 1, ANALYSIS.settle)

    # a failed look is recorded, due no more, and spends nothing; a later basis decision takes the next number
    import logging

    record_failed_release_look(warehouse, "rel-9", 2, "run-x", logging.getLogger("test"))
    assert release_looks(warehouse)[-1] == (2, "timed", "failed")
    with warehouse.connect() as conn:
        assert not [d for d in due_release_looks(conn, SETTINGS, ANALYSIS.settle) if d.look <= 2]
    for target in TARGETS:  # the nightly reanalysis reaches every member: a new basis spends look 3
        analyse_deploy(run, f"rel-9-{target}")
    redone = decide_release(warehouse, "rel-9", SETTINGS)
    assert redone.look == 3 and (redone.verdicts["look"] == 3).all()
    assert release_looks(warehouse)[-1] == (3, "basis", "done")
    with warehouse.connect() as conn:  # the schedule is spent: no later look any more
        assert not due_release_looks(conn, SETTINGS, ANALYSIS.settle)


def test_a_release_s_looks_due_long_ago_are_not_run(warehouse):
    release_at(warehouse, timedelta(days=2), release_id="old-1")
    run = AnalysisRun(warehouse, SETTINGS, settle=ANALYSIS.settle)
    for target in TARGETS:
        analyse_deploy(run, f"old-1-{target}")
    decision = decide_release(warehouse, "old-1", SETTINGS)
    assert decision.status == FINAL
    with warehouse.connect() as conn:
        assert not due_release_looks(conn, SETTINGS, ANALYSIS.settle)


def test_a_failed_release_look_is_recorded_due_no_more_and_a_retry_records_it_done(warehouse, warehouse_url, slack):
    from radar_pipeline.defs.deploys.release_looks import release_look

    release_at(warehouse, timedelta(seconds=45))
    run = AnalysisRun(warehouse, SETTINGS, settle=ANALYSIS.settle)
    for target in TARGETS:
        analyse_deploy(run, f"rel-9-{target}")
    decide_release(warehouse, "rel-9", SETTINGS)
    before = stored(warehouse)
    with warehouse.begin() as conn:  # the look's write fails (as a full disk would); a failure's record does not
        conn.execute(
            sa.text(
                "CREATE FUNCTION pg_temp_fail() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                "IF NEW.status = 'done' THEN RAISE EXCEPTION 'could not extend file (test)'; END IF; RETURN NEW; END $$"
            )
        )
        conn.execute(
            sa.text(
                "CREATE TRIGGER fail_looks BEFORE INSERT OR UPDATE ON radar.release_look FOR EACH ROW "
                "EXECUTE FUNCTION pg_temp_fail()"
            )
        )
    resources = {
        "warehouse": WarehouseResource(url=warehouse_url),
        "analysis": ANALYSIS,
        "slack": SlackResource(token="xoxb-test-token", channel="#radar", base_url=slack.api_url),
    }

    @dg.job
    def look_once() -> None:  # release_looks_job's op, not retried
        release_look()

    defs = dg.Definitions(jobs=[look_once], sensors=[release_look_sensor], resources=resources)
    with dg.instance_for_test() as instance:
        (request,) = _due(instance, resources)
        look = request.run_config["ops"]["release_look"]["config"]["look"]
        failed = defs.resolve_job_def("look_once").execute_in_process(
            instance=instance, run_config=request.run_config, tags=request.tags, raise_on_error=False
        )
        assert not failed.success
        assert release_looks(warehouse) == [(0, "basis", "done"), (look, "timed", "failed")]
        pd.testing.assert_frame_equal(stored(warehouse), before)  # nothing decided
        later = _due(instance, resources)
        assert all(r.run_config["ops"]["release_look"]["config"]["look"] > look for r in later)  # due no more

        with warehouse.begin() as conn:
            conn.execute(sa.text("DROP TRIGGER fail_looks ON radar.release_look"))
        retried = defs.resolve_job_def("look_once").execute_in_process(  # as the op's retry policy runs it again
            instance=instance, run_config=request.run_config, tags=request.tags
        )
        assert retried.success
    assert release_looks(warehouse) == [(0, "basis", "done"), (look, "timed", "done")]
    assert stored(warehouse).loc[1, "verdict"] == "detected"


def test_the_looks_of_a_release_the_nightly_reanalysis_analysed_carry_its_tag_and_post_nothing(
    warehouse, warehouse_url, slack
):
    from radar_pipeline.defs.deploys.deploy_verdicts import REANALYSIS_TAG

    release_at(warehouse, timedelta(seconds=45))
    resources = {
        "warehouse": WarehouseResource(url=warehouse_url),
        "analysis": ANALYSIS,
        "targets": TargetsResource(spec=" ".join(f"{t}=postgresql://nowhere.invalid/none" for t in TARGETS)),
        "slack": SlackResource(token="xoxb-test-token", channel="#radar", base_url=slack.api_url),
    }
    defs = dg.Definitions(jobs=[release_looks_job], sensors=[release_look_sensor], resources=resources)
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("deploys", [f"rel-9-{t}" for t in TARGETS])
        for target in TARGETS:  # every member's current analysis is the nightly reanalysis's
            result = dg.materialize(
                [deploy_verdicts, release_verdicts],
                partition_key=f"rel-9-{target}",
                resources=resources,
                instance=instance,
                tags={REANALYSIS_TAG: "true"},
            )
            assert result.success
        (request,) = _due(instance, resources)
        assert request.tags[REANALYSIS_TAG] == "true"
        ran = defs.resolve_job_def(release_looks_job.name).execute_in_process(
            instance=instance, run_config=request.run_config, tags={**request.tags, "dagster/run_key": request.run_key}
        )
        assert ran.success
    assert stored(warehouse).loc[1, "verdict"] == "detected"
    with warehouse.connect() as conn:
        rows = conn.execute(sa.text("SELECT status FROM radar.alert WHERE target = 'release:rel-9'")).scalars().all()
    assert rows == ["withheld"] and not slack.calls_to("/api/chat.postMessage")  # recorded, never sent


def test_a_release_look_whose_run_was_terminated_is_asked_for_again_at_its_next_attempt_a_bounded_number_of_times(
    warehouse, warehouse_url, slack, monkeypatch
):
    """A terminated run (from the UI, by run monitoring, killed for memory) ends before the look's failure record:
    the look stays due, and the sensor asks for it under the next attempt's run key, LOOK_ATTEMPTS times at most."""

    from radar_pipeline.defs.deploys.release_looks import release_look
    from radar_pipeline.steps import releases as steps_releases
    from radar_pipeline.warehouse import looks

    monkeypatch.setattr(looks, "RETRY_BASE", timedelta(seconds=2))  # attempts 2, 6, 14 s after it fell due
    release_at(warehouse, timedelta(seconds=85))  # every look due: the sensor asks for the last
    run = AnalysisRun(warehouse, SETTINGS, settle=ANALYSIS.settle)
    for target in TARGETS:
        analyse_deploy(run, f"rel-9-{target}")
    decide_release(warehouse, "rel-9", SETTINGS)
    resources = {
        "warehouse": WarehouseResource(url=warehouse_url),
        "analysis": ANALYSIS,
        "slack": SlackResource(token="xoxb-test-token", channel="#radar", base_url=slack.api_url),
    }

    @dg.job
    def look_once() -> None:  # release_looks_job's op: a terminated run's step is not retried
        release_look()

    def terminated(*args, **kwargs):  # what a terminated run raises in the op
        raise dg.DagsterExecutionInterruptedError()

    monkeypatch.setattr(steps_releases, "run_release_look", terminated)
    defs = dg.Definitions(jobs=[look_once], resources=resources)
    with dg.instance_for_test() as instance:
        # while a run of the look waits (for the analysis pool) or runs, no other attempt is asked for
        (request,) = _due(instance, resources)
        job = dg.Definitions(jobs=[release_looks_job], resources=resources).resolve_job_def(release_looks_job.name)
        queued = instance.create_run_for_job(job, run_config=request.run_config, tags=request.tags)  # not started
        assert _due(instance, resources) == []
        instance.delete_run(queued.run_id)
        keys = every_attempt_fails(
            lambda: _due(instance, resources),
            lambda request: defs.resolve_job_def("look_once").execute_in_process(
                instance=instance,
                run_config=request.run_config,
                tags={**request.tags, "dagster/run_key": request.run_key or ""},
                raise_on_error=False,
            ),
        )
    assert release_looks(warehouse) == [(0, "basis", "done")]  # no run recorded the look
    assert {k.rsplit(":", 1)[0] for k in keys} == {keys[0].rsplit(":", 1)[0]}  # the same look, basis …
    assert keys[0].split(":")[2] == str(len(LOOK_SPANS) - 1)
    attempts = [int(k.rsplit(":", 1)[1]) for k in keys]  # … at successive attempts, LOOK_ATTEMPTS at most
    assert attempts == sorted(set(attempts)) and attempts[-1] == looks.LOOK_ATTEMPTS - 1 and len(keys) >= 2


def test_a_release_look_s_fleet_alerts_older_than_the_alert_age_limit_are_withheld(warehouse, warehouse_url, slack):
    from radar_pipeline.defs.deploys.release_looks import release_look

    release_at(warehouse, timedelta(seconds=85))  # the last look (8W) is due: its after side closed 5 s ago
    run = AnalysisRun(warehouse, SETTINGS, settle=ANALYSIS.settle)
    for target in TARGETS:
        analyse_deploy(run, f"rel-9-{target}")
    decide_release(warehouse, "rel-9", SETTINGS)
    resources = {
        "warehouse": WarehouseResource(url=warehouse_url),
        "analysis": ANALYSIS,
        "slack": SlackResource(  # 3.6 s
            token="xoxb-test-token", channel="#radar", base_url=slack.api_url, alert_max_age_hours=0.001
        ),
    }

    @dg.job
    def look_once() -> None:
        release_look()

    defs = dg.Definitions(jobs=[look_once], resources=resources)
    with dg.instance_for_test() as instance:
        (request,) = _due(instance, resources)
        result = defs.resolve_job_def("look_once").execute_in_process(
            instance=instance, run_config=request.run_config, tags=request.tags
        )
        (output,) = [e for e in result.all_events if e.event_type_value == "STEP_OUTPUT"]
        metadata = output.event_specific_data.metadata
    assert metadata["detected"].value >= 1 and "ago: not sent" in metadata["withheld"].value
    assert slack.calls_to("/api/chat.postMessage") == []
    with warehouse.connect() as conn:
        rows = conn.execute(sa.text("SELECT DISTINCT status FROM radar.alert WHERE target = 'release:rel-9'"))
        assert rows.scalars().all() == ["withheld"]


def test_members_own_later_looks_before_the_release_s_first_decision_take_none_of_its_evidence(warehouse):
    """A member's own later look replaces the verdict rows of the statements it decides; when it ran before the
    release's first final decision (a late member, a staggered rollout) the release still decides on every member's
    evidence over its first look's spans, not on the rows no later look decided."""
    from radar_pipeline.engine.releases import fleet_verdicts
    from radar_pipeline.steps.looks import run_look
    from radar_pipeline.warehouse import releases as store

    release_at(warehouse, timedelta(seconds=85))  # every look of every member due
    run = AnalysisRun(warehouse, SETTINGS, settle=ANALYSIS.settle)
    for target in TARGETS:
        analyse_deploy(run, f"rel-9-{target}")
    with warehouse.connect() as conn:
        first = store.member_evidence(conn, store.release(conn, "rel-9").members)  # before any member's look
    first = first.assign(key=list(zip(first["fingerprint"], first["toplevel"], strict=True)))
    expected = fleet_verdicts(first, SETTINGS.threshold, SETTINGS.false_alert_budget, fleet_size=len(TARGETS))
    for target in TARGETS[:3]:  # three members' own last looks run first, deciding some of their statements
        run_look(run, f"rel-9-{target}", len(LOOK_SPANS) - 1)
    with warehouse.connect() as conn:
        replaced = conn.execute(sa.text("SELECT count(*) FROM radar.verdict WHERE look > 0")).scalar_one()
    assert replaced > 0
    decision = decide_release(warehouse, "rel-9", SETTINGS)
    assert decision.status == "final" and decision.look == 0
    got = decision.verdicts.set_index("fingerprint").sort_index()
    want = expected.assign(fingerprint=[k[0] for k in expected["key"]]).set_index("fingerprint").sort_index()
    assert list(got.index) == list(want.index)
    assert (got["targets"] == len(TARGETS)).all()
    np.testing.assert_allclose(got["factor"].astype(float), want["factor"].astype(float), rtol=1e-6)
    assert list(got["verdict"]) == list(want["verdict"])


def test_a_release_decided_anew_on_its_standing_basis_still_reads_the_members_replaced_statements(warehouse):
    """The replaced statements' evidence is not read while the last decision stands; when under the lock it turns out
    not to (a late member made the verdicts partial and left the release again), it is read after all."""
    from radar_pipeline.steps.looks import run_look

    release_at(warehouse, timedelta(seconds=85))
    run = AnalysisRun(warehouse, SETTINGS, settle=ANALYSIS.settle)
    for target in TARGETS:
        analyse_deploy(run, f"rel-9-{target}")
    for target in TARGETS[:3]:
        run_look(run, f"rel-9-{target}", len(LOOK_SPANS) - 1)
    assert decide_release(warehouse, "rel-9", SETTINGS).look == 0
    at = datetime.now(UTC).replace(microsecond=0)
    deploys.record(warehouse, deploys.DeployEvent("rel-9-late", "shard-9", at, release_id="rel-9"), ["shard-9"])
    assert decide_release(warehouse, "rel-9", SETTINGS).status == "partial"
    with warehouse.begin() as conn:  # the late member leaves the release again
        conn.execute(sa.text("UPDATE radar.deploy_event SET release_id = NULL WHERE deploy_id = 'rel-9-late'"))
    again = decide_release(warehouse, "rel-9", SETTINGS)
    assert again.status == "final" and again.look == 1
    assert (again.verdicts["targets"] == len(TARGETS)).all()
