"""Statements decided together (issue 29, groups) on real PostgreSQL with synthetic counters stored in the warehouse:
fifteen statements of one shape over fifteen tables, each a little slower from the deploy on (as lowering work_mem for
the application's role slowed them in the issue's lab), decided through the real steps: the group is detected and
stored, its members' verdicts say they belong to it, `radar verdicts` shows both, and the group is alerted once
through the outbox (by its heaviest member).

Each statement is scraped every 10 s for 200 s each side, 3 calls an interval (60 a side), each interval's mean with
35% log-normal noise: too noisy for any one of them to be detected at ×1.4, plain in the fifteen together.
"""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import sqlalchemy as sa

from radar_pipeline.alerts.render import escape, render
from radar_pipeline.engine import EngineSettings, Verdict
from radar_pipeline.engine.budget import look_budget
from radar_pipeline.steps.alert_delivery import deploy_facts, regression_of
from radar_pipeline.steps.deploy_analysis import AnalysisRun, analyse_deploy
from radar_pipeline.steps.groups import shape_key
from radar_pipeline.warehouse import alerts, deploys
from radar_pipeline.warehouse.analysis import deploy_states
from radar_pipeline.warehouse.groups import groups_of

from .helpers import store_counters

SETTINGS = EngineSettings(window=timedelta(seconds=200), tolerance_floor=timedelta(seconds=30))
SHAPE = "SELECT k, count(*) FROM t{:02d} WHERE v > $1 GROUP BY k ORDER BY count(*) DESC"
SLOWED = {100 + i: SHAPE.format(i) for i in range(1, 16)}  # queryid → text
OTHERS = {
    201: "SELECT * FROM orders WHERE id = $1",
    202: "UPDATE carts SET total = $1 WHERE owner = $2",
    203: "SELECT count(*) FROM customers",
}


def _counters(at: datetime, factor: float, rng: np.random.Generator) -> pd.DataFrame:
    """41 scrapes 10 s apart centred on `at`: the fifteen at 2 ms × `factor` from the deploy on, the others at 1 ms,
    3 calls an interval with 35% log-normal noise on each interval's mean."""
    rows = []
    for queryid in [*SLOWED, *OTHERS]:
        count, total = 1000, 1000 * 2.0
        for j in range(-20, 21):
            mean = (2.0 if queryid in SLOWED else 1.0) * (factor if j > 0 and queryid in SLOWED else 1.0)
            count, total = count + 3, total + 3 * mean * rng.lognormal(-(0.35**2) / 2, 0.35)
            rows.append((queryid, at + timedelta(seconds=10 * j), count, total))
    return pd.DataFrame(rows, columns=["queryid", "captured_at", "calls", "total_exec_time"])


@pytest.fixture
def recorded(warehouse) -> datetime:
    """Two deploys a target each, their windows closed an hour ago: `slowed` (the fifteen ×1.4) and `steady`."""
    at = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)
    rng = np.random.default_rng(29)
    for deploy_id, factor in (("slowed", 1.4), ("steady", 1.0)):
        store_counters(warehouse, deploy_id, _counters(at, factor, rng), {**SLOWED, **OTHERS})
        deploys.record(warehouse, deploys.DeployEvent(deploy_id, deploy_id, at))
    return at


def _verdicts(warehouse, deploy_id: str) -> pd.DataFrame:
    with warehouse.connect() as conn:
        return pd.read_sql(
            sa.text("SELECT queryid, verdict, group_regressed FROM radar.verdict WHERE deploy_id = :d"),
            conn,
            params={"d": deploy_id},
        ).set_index("queryid")


def test_statements_of_one_shape_a_little_slower_are_found_together(recorded, warehouse, warehouse_url):
    run = AnalysisRun(warehouse, SETTINGS)
    found = analyse_deploy(run, "slowed")
    verdicts = _verdicts(warehouse, "slowed")
    assert (verdicts.loc[list(SLOWED), "verdict"] != Verdict.DETECTED).all()  # none of them alone

    with warehouse.connect() as conn:
        stored = groups_of(conn, "slowed")
    shape = stored[stored["kind"] == "shape"]
    assert len(shape) == 1 and shape["group_id"].iloc[0] == f"shape:{shape_key(SLOWED[101])}"
    group = shape.iloc[0]
    assert group["verdict"] == Verdict.DETECTED and group["members"] == group["statements"] == 15
    assert sorted(group["member_queryid"]) == sorted(SLOWED)
    assert group["factor_low"] < 1.4 < group["factor_high"] and group["factor_low"] > 1.1
    assert group["sentence"].startswith("15 statements of this shape slowed as a group, typically ×")
    # The budget: a fifth of the first look's to the groups (the shape's alone here: one role), the rest to the
    # statements.
    first_look = look_budget(SETTINGS.false_alert_budget, 0)
    assert group["budget_share"] == pytest.approx(first_look * 0.2 / len(stored))
    assert found.verdicts["budget_share"].sum() == pytest.approx(first_look * 0.8)
    # A detected group fails its deploy, as a detection does: the gate and the commit status read this.
    assert (found.state["state"], found.state["groups_detected"], found.state["detected"]) == ("fail", 1, 0)

    marked = verdicts.loc[list(SLOWED), "group_regressed"]
    assert (marked == f"in a group that regressed: {group['sentence']}").all()
    assert not verdicts.loc[list(OTHERS), "group_regressed"].fillna("").str.contains("of this shape").any()

    # Shown by `radar verdicts`: the group above the table, each member's mark below it.
    shown = subprocess.run(
        [str(Path(sys.executable).parent / "radar"), "verdicts", "slowed", "--all", "--warehouse", warehouse_url],
        capture_output=True,
        text=True,
        timeout=120,
        env={"COLUMNS": "200", "PATH": str(Path(sys.executable).parent)},
    )
    assert shown.returncode == 0, shown.stderr
    assert f"group detected: {group['sentence']}" in shown.stdout
    assert f"queryid 101 is in a group that regressed: {group['sentence']}" in shown.stdout
    gated = subprocess.run(
        [str(Path(sys.executable).parent / "radar"), "gate", "slowed", "--warehouse", warehouse_url],
        capture_output=True,
        text=True,
        timeout=120,
        env={"COLUMNS": "200", "PATH": str(Path(sys.executable).parent)},
    )
    assert gated.returncode == 1, gated.stdout + gated.stderr
    assert "1 group of statements decided together detected" in gated.stdout

    # Alerted through the outbox once, as the budget counts a group: by its member with the most execution time
    # after the deploy, its message saying the alert is the group's; the other fourteen keep their own verdicts and
    # their mark, without an alert each (one false group detection is not fifteen false alerts).
    with warehouse.connect() as conn:
        to_alert = alerts.detections(conn, "slowed")
        after = pd.read_sql(
            sa.text(
                "SELECT queryid, calls_after * mean_after_ms AS time_after FROM radar.verdict "
                "WHERE deploy_id = 'slowed'"
            ),
            conn,
        ).set_index("queryid")["time_after"]
    heaviest = int(after.loc[list(SLOWED)].idxmax())
    assert list(to_alert["queryid"]) == [heaviest] and to_alert["change_at"].notna().all()
    alert = to_alert.iloc[0]
    assert alert["represents"] == group["sentence"] and alert["verdict"] == verdicts.loc[heaviest, "verdict"]
    assert alert["group_regressed"] == (
        "alerted for its group, as the member with the most execution time after the deploy (its own verdict: "
        f"{alert['verdict']}); the group regressed: {group['sentence']}"
    )
    text, blocks = render(deploy_facts(to_alert, None), [regression_of(r) for r in to_alert.itertuples()])
    fields = [f["text"] for b in blocks if b.get("type") == "section" for f in b.get("fields", [])]
    assert f"*Group:* {escape(alert['group_regressed'])}" in fields
    assert text.startswith("1 query slower")

    # A re-analysis replaces the groups with the verdicts, in the same transaction.
    analyse_deploy(run, "slowed")
    with warehouse.connect() as conn:
        again = groups_of(conn, "slowed")
    assert len(again) == len(stored)


def test_a_steady_deploy_has_its_groups_decided_and_none_regressed(recorded, warehouse):
    analyse_deploy(AnalysisRun(warehouse, SETTINGS), "steady")
    with warehouse.connect() as conn:
        stored = groups_of(conn, "steady")
    assert list(stored["kind"]) == ["shape"]  # one role: no role group (it would be every statement)
    assert (stored["verdict"] != Verdict.DETECTED).all()
    assert _verdicts(warehouse, "steady")["group_regressed"].isna().all()
    with warehouse.connect() as conn:
        assert alerts.detections(conn, "steady").empty
    with warehouse.connect() as conn:
        assert deploy_states(conn, ["steady"]).iloc[0]["groups_detected"] == 0


def test_a_shape_is_the_statement_without_its_relations_names():
    same = (
        "SELECT o.id, o.total FROM orders_1 o WHERE o.c > $1 AND o.d = 3 LIMIT $2",
        "SELECT x.id, x.total FROM orders_2 AS x WHERE x.c > $3 AND x.d = 5 LIMIT $4",
        "select o.id,   o.total from orders_3 o where o.c > $1 and o.d = 3 limit $2",
    )
    assert len({shape_key(t) for t in same}) == 1 and shape_key(same[0]) is not None
    other_column = "SELECT o.id, o.amount FROM orders_1 o WHERE o.c > $1 AND o.d = 3 LIMIT $2"
    other_operator = "SELECT o.id, o.total FROM orders_1 o WHERE o.c < $1 AND o.d = 3 LIMIT $2"
    assert shape_key(other_column) != shape_key(same[0]) != shape_key(other_operator)
    assert shape_key(SHAPE.format(1)) == shape_key(SHAPE.format(2))
    # Utility statements, several statements and what does not parse have no shape.
    assert shape_key("SET work_mem = '64kB'") is None
    assert shape_key("SELECT 1; SELECT 2") is None and shape_key("SELEC x FROM") is None


def test_a_setting_changed_for_the_role_at_the_deploy_groups_the_role_s_statements(warehouse):
    """`ALTER ROLE app SET work_mem = '64kB'` caught between two catalog captures at the deploy (radar.catalog_fact,
    issue 28): the statements the role runs form a group named by the change, decided beside the shape's."""
    at = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)
    store_counters(warehouse, "work-mem", _counters(at, 1.4, np.random.default_rng(31)), {**SLOWED, **OTHERS})
    deploys.record(warehouse, deploys.DeployEvent("work-mem", "work-mem", at))
    with warehouse.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO radar.catalog_fact (target, kind, identity, dbid, roleid, relation, name, role, database, "
                "value, first_seen_at, last_seen_before) VALUES "
                "('work-mem', 'role_setting', 'app/work_mem', NULL, 10, NULL, 'work_mem', 'app', NULL, '4MB', "
                ":first, NULL), "
                "('work-mem', 'role_setting', 'app/work_mem', NULL, 10, NULL, 'work_mem', 'app', NULL, '64kB', "
                ":after, :before)"
            ),
            {"first": at - timedelta(days=1), "after": at + timedelta(seconds=5), "before": at - timedelta(seconds=5)},
        )
    analyse_deploy(AnalysisRun(warehouse, SETTINGS), "work-mem")
    with warehouse.connect() as conn:
        stored = groups_of(conn, "work-mem").set_index("kind")
    assert sorted(stored.index) == ["change", "shape"]
    change = stored.loc["change"]
    assert change["statements"] == len(SLOWED) + len(OTHERS)
    assert "statements touched by the change (work_mem for role app (4MB → 64kB)" in change["label"]
    assert change["verdict"] == Verdict.DETECTED and stored.loc["shape", "verdict"] == Verdict.DETECTED
    marks = _verdicts(warehouse, "work-mem")["group_regressed"]
    assert marks.loc[101].count(" slowed as a group, typically ×") == 2  # in both groups
    assert marks.loc[list(OTHERS)].str.contains("work_mem for role app").all()
    # Both groups' heaviest member is one statement (the change's group holds the shape's): one alert for the two,
    # beside any member detected on its own.
    with warehouse.connect() as conn:
        to_alert = alerts.detections(conn, "work-mem")
    stands = to_alert[to_alert["represents"].notna()]
    assert len(stands) == 1 and int(stands["queryid"].iloc[0]) in SLOWED
    assert stands["represents"].iloc[0] == f"{change['sentence']}; {stored.loc['shape', 'sentence']}"
    assert (to_alert.loc[to_alert["represents"].isna(), "verdict"] == Verdict.DETECTED).all()


def test_a_member_s_mark_stays_when_a_later_look_replaces_its_row(recorded, warehouse):
    """The first verdict detects the shape's group and marks its fifteen members; a later look that decides one of
    them replaces its verdict row (its own verdict, which look found it) and keeps the mark — it still belongs to a
    group that regressed — and a later look run on the deploy leaves every member's mark as it was."""
    from radar_pipeline.steps.looks import run_look
    from radar_pipeline.warehouse import looks

    run = AnalysisRun(warehouse, SETTINGS)
    found = analyse_deploy(run, "slowed")
    marks = _verdicts(warehouse, "slowed")["group_regressed"]
    assert marks.loc[list(SLOWED)].notna().all()
    member = found.verdicts[found.verdicts["queryid"] == 101].assign(verdict="detected", change_factor=1.5)
    with warehouse.begin() as conn:  # as look 1 writes a member it decided
        written = looks.replace_open(conn, "slowed", "slowed", member, 1, recorded + 2 * SETTINGS.window)
    assert len(written) == 1
    after = _verdicts(warehouse, "slowed")
    assert after.loc[101, "verdict"] == "detected" and after.loc[101, "group_regressed"] == marks.loc[101]

    run_look(run, "slowed", 2)  # whatever it decides, no mark is lost, none is added twice
    again = _verdicts(warehouse, "slowed")["group_regressed"]
    pd.testing.assert_series_equal(again.loc[list(SLOWED)], marks.loc[list(SLOWED)])
    with warehouse.connect() as conn:
        stored = groups_of(conn, "slowed")
    assert list(stored["look"]) == [0]  # the group was decided at the first look: not tested again


def test_the_members_shared_load_is_read_from_their_before_side(warehouse):
    """steps.groups.before_noise reads the group's members over 8W before the deploy from the warehouse, one column
    per member by its query_key in the window, nothing after the deploy: on a target where every statement's
    interval mean carries the server's load (one common factor an interval), the members' design effect is large;
    on one without, it stays near 1."""
    from radar_pipeline.engine.groups import before_calls, shared_noise
    from radar_pipeline.steps.groups import before_noise, form_groups
    from radar_pipeline.warehouse import analysis

    at = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)
    rng = np.random.default_rng(31)
    load = rng.lognormal(0, 0.5, 81)  # per interval, shared by every statement of the loaded target
    designs = {}
    for target, shared in (("loaded", True), ("quiet", False)):
        rows = []
        for queryid in [*SLOWED, *OTHERS]:
            count, total = 1000, 2000.0
            for j in range(-60, 21):
                mean = 2.0 * (load[j + 60] if shared else 1.0) * rng.lognormal(0, 0.2)
                count, total = count + 3, total + 3 * mean
                rows.append((queryid, at + timedelta(seconds=10 * j), count, total))
        frame = pd.DataFrame(rows, columns=["queryid", "captured_at", "calls", "total_exec_time"])
        store_counters(warehouse, target, frame, {**SLOWED, **OTHERS})
        with warehouse.connect() as conn:
            window = analysis.read_window(conn, target, at - SETTINGS.window, at + SETTINGS.window)
            (group,) = [g for g in form_groups(conn, target, window, at, at) if g.kind == "shape"]
            calls = before_calls(window.counters, at, SETTINGS.window)
            series = before_noise(conn, target, window.keys, [group], at, SETTINGS, calls)
        assert sorted(series.columns) == sorted(group.members)  # the window's query_keys
        assert len(series) == 60 and series.index.max() <= pd.Timestamp(at).value  # the before side only
        noise = shared_noise(series, list(group.members))
        assert noise is not None
        designs[target] = noise.of(np.ones(len(group.members), dtype=bool))[0]
    assert designs["loaded"] > 5 and designs["quiet"] < 2, designs


def test_a_large_group_s_shared_noise_is_read_from_its_busiest_members_alone(warehouse):
    """steps.groups.before_noise reads at most the sample's cap of a group's members over 8W before the deploy — the
    busiest by their calls on the before side of the window already read, never the after side's — so a group of
    thousands costs the read of a few hundred: here the fifteen of one shape, 2 to 16 calls an interval before the
    deploy (the busiest the reverse of their order after it), read with a cap of 4: the four busiest before, nothing
    of the others; the design effect then carries their correlation to the eleven not read."""
    from radar_pipeline.engine.groups import before_calls, shared_noise
    from radar_pipeline.steps.groups import before_noise, form_groups
    from radar_pipeline.warehouse import analysis

    at = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)
    rng = np.random.default_rng(37)
    load = rng.lognormal(0, 0.5, 81)
    busy = {queryid: 2 + i for i, queryid in enumerate([*SLOWED, *OTHERS])}  # calls an interval before the deploy
    rows = []
    for queryid in [*SLOWED, *OTHERS]:
        count, total = 1000, 2000.0
        for j in range(-60, 21):
            calls = busy[queryid] if j <= 0 else 20 - busy[queryid]
            count, total = count + calls, total + calls * 2.0 * load[j + 60] * rng.lognormal(0, 0.2)
            rows.append((queryid, at + timedelta(seconds=10 * j), count, total))
    frame = pd.DataFrame(rows, columns=["queryid", "captured_at", "calls", "total_exec_time"])
    store_counters(warehouse, "large", frame, {**SLOWED, **OTHERS})
    with warehouse.connect() as conn:
        window = analysis.read_window(conn, "large", at - SETTINGS.window, at + SETTINGS.window)
        (group,) = [g for g in form_groups(conn, "large", window, at, at) if g.kind == "shape"]
        calls = before_calls(window.counters, at, SETTINGS.window)
        series = before_noise(conn, "large", window.keys, [group], at, SETTINGS, calls, cap=4)
        everyone = before_noise(conn, "large", window.keys, [group], at, SETTINGS, calls)
    queryids = window.keys["queryid"]
    assert len(group.members) == 15
    assert sorted(int(queryids[c]) for c in series.columns) == [112, 113, 114, 115]  # the four busiest before
    assert len(series) == 60 and series.index.max() <= pd.Timestamp(at).value  # the before side only
    assert sorted(everyone.columns) == sorted(group.members)  # within the cap: every member
    sampled, full = shared_noise(series, list(group.members)), shared_noise(everyone, list(group.members))
    assert sampled is not None and full is not None and sampled.sampled is not None
    assert int(sampled.sampled.sum()) == 4 and full.sampled is None
    all_used = np.ones(15, dtype=bool)
    assert sampled.of(all_used)[0] > 5 and full.of(all_used)[0] > 5  # the load carried to the eleven not read
