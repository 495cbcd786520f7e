"""Plan capture and plan diffs on real PostgreSQL: an index dropped at a deploy, PostgreSQL 15 without plans, and a
statement that no longer plans."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import dagster as dg
import numpy as np
import psycopg
import pytest
import sqlalchemy as sa

from radar_pipeline import plan_shape
from radar_pipeline.config import Target
from radar_pipeline.defs.collection.plans import plan_snapshots
from radar_pipeline.defs.resources import AnalysisResource, ChannelsResource, TargetsResource, WarehouseResource
from radar_pipeline.engine import EngineSettings
from radar_pipeline.steps.deploy_analysis import AnalysisRun, analyse_deploy
from radar_pipeline.steps.plan_capture import capture_target
from radar_pipeline.warehouse import deploys
from radar_pipeline.warehouse import plans as stored_plans

from .helpers import (
    collector_target,
    drive,
    hourly_deploy_counters,
    run,
    scrape,
    store_counters,
    tolerance_covering,
    window_covering,
)

LOOKUP = "SELECT payload FROM probe WHERE id = %s"


def _probe_table(target: Target) -> None:
    run(target, "CREATE TABLE probe (id int, payload text)")
    run(target, "INSERT INTO probe SELECT g, md5(g::text) FROM generate_series(1, 50000) g")
    run(target, "CREATE INDEX probe_id_idx ON probe (id)")
    run(target, "ANALYZE probe")


def _lookup_queryid(warehouse, target: str) -> int:
    """The lookup's queryid, from its stored text (the analysis returns texts of detections only)."""
    with warehouse.connect() as conn:
        return conn.execute(
            sa.text(
                "SELECT DISTINCT queryid FROM radar.query WHERE target = :t AND query LIKE 'SELECT payload FROM probe%'"
            ),
            {"t": target},
        ).scalar_one()


def _plans(warehouse, target: str) -> list[tuple]:
    with warehouse.connect() as conn:
        return [
            tuple(r)
            for r in conn.execute(
                sa.text(
                    "SELECT p.root_node, p.source FROM radar.plan_snapshot p JOIN radar.query q USING "
                    "(target, dbid, userid, queryid, toplevel) WHERE p.target = :t AND q.query LIKE 'SELECT payload%' "
                    "ORDER BY p.captured_at"
                ),
                {"t": target},
            )
        ]


@pytest.mark.parametrize("server", ["pg18"], indirect=True)
def test_index_dropped_at_a_deploy_shows_in_the_plan_diff(app_db, warehouse):
    server, target = app_db
    _probe_table(target)
    collector = collector_target(target)
    nominal, scrape_every, samples = 3.0, 0.15, 20  # scrapes are counted; the window holds 20 each side

    def lookups(conn: psycopg.Connection) -> None:
        for i in range(10):
            conn.execute(LOOKUP, (i * 37 + 1,))

    drive(target, warehouse, lookups, scrape_every, 3)
    before = capture_target(collector, warehouse)
    assert before.source == "generic_plan" and before.reason == "pg_store_plans is not installed"
    assert _plans(warehouse, target.name) == [("Index Scan using probe_id_idx on probe", "generic_plan")]
    assert capture_target(collector, warehouse).stored == 0  # same shape: nothing new stored

    earlier = drive(target, warehouse, lookups, scrape_every, samples + 3)
    recorded = deploys.record(warehouse, deploys.DeployEvent("drop-index", target.name))
    at = recorded.event.deployed_at
    run(target, "DROP INDEX probe_id_idx")
    later = drive(target, warehouse, lookups, scrape_every, samples + 2)
    window = max(window_covering(earlier, at, samples, nominal), (later[samples] - at).total_seconds())
    drive(target, warehouse, lookups, scrape_every, 1, until=at + timedelta(seconds=window + scrape_every))
    tolerance = tolerance_covering(earlier, later, at, 1.0)
    settings = EngineSettings(window=timedelta(seconds=window), tolerance_floor=timedelta(seconds=tolerance))

    result = analyse_deploy(AnalysisRun(warehouse, settings, live_targets={target.name: collector}), "drop-index")
    lookup = result.verdicts.set_index("queryid").loc[_lookup_queryid(warehouse, target.name)]
    shown = ["verdict", "reason", "change_factor", "t_stat", "dof", "p_value", "p_family", "serial_correlation"]
    assert lookup.verdict == "detected" and lookup.cause == "plan_changed", lookup[shown].to_dict()
    diff = lookup.plan_diff
    print("plan diff:", json.dumps(diff, indent=1))  # shown with pytest -s
    assert diff["shape_changed"] and diff["root_changed"]
    assert diff["changes"] == ["Index Scan using probe_id_idx on probe → Seq Scan on probe"]
    assert diff["cost_after"] > diff["cost_before"]
    assert diff["cautions"] and "GENERIC_PLAN" in diff["cautions"][0]
    assert plan_shape.summary(diff).startswith("Index Scan using probe_id_idx on probe → Seq Scan on probe")
    assert _plans(warehouse, target.name) == [
        ("Index Scan using probe_id_idx on probe", "generic_plan"),
        ("Seq Scan on probe", "generic_plan"),
    ]
    with warehouse.connect() as conn:
        stored = conn.execute(
            sa.text("SELECT cause, plan_diff->>'summary' FROM radar.regression WHERE deploy_id = 'drop-index'"),
        ).fetchall()
    assert ("plan_changed", plan_shape.summary(diff)) in [tuple(r) for r in stored]
    assert recorded.inserted

    # The index comes back and its plan is stored, newest of all; a re-analysis still diffs the window's plans.
    run(target, "CREATE INDEX probe_id_idx ON probe (id)")
    scrape(target, warehouse)
    run(target, LOOKUP, 3, (7,))
    scrape(target, warehouse)
    assert capture_target(collector, warehouse).stored >= 1
    assert _plans(warehouse, target.name)[-1] == ("Index Scan using probe_id_idx on probe", "generic_plan")
    again = analyse_deploy(AnalysisRun(warehouse, settings, live_targets={target.name: collector}), "drop-index")
    redo = again.verdicts.set_index("queryid").loc[lookup.name]
    assert redo.cause == "plan_changed" and redo.plan_diff == diff


ECHO = "SELECT x.v, y.w FROM echo x JOIN kilo y ON y.id = x.id WHERE x.k = %s"
DELTA = ECHO.replace("echo x", "delta x")  # the same statement over a table of the same shape, behind the same alias


@pytest.mark.parametrize("server", ["pg18"], indirect=True)
def test_a_queryid_postgresql_18_shares_between_two_tables_is_said_and_gets_no_plan_diff(
    app_db, warehouse, warehouse_url, slack, monkeypatch
):
    """PostgreSQL 18 jumbles a table reference by its alias: the joins over echo and over delta are one
    pg_stat_statements entry, stored with echo's text. delta's index is dropped at the deploy, and the entry slows;
    echo's plan did not change. The detection says its queryid is shared (radar verdicts, Slack, the UI's table) and
    shows no plan diff, rather than echo's "plan unchanged" as if it were the statement's."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from radar_pipeline.defs.alerts.regression_alerts import regression_alerts
    from radar_pipeline.defs.deploys.deploy_verdicts import _metadata
    from radar_pipeline.defs.resources import SlackResource
    from radar_pipeline.pgss_model import SHARED_QUERYID_PLAN

    server, target = app_db
    for table in ("echo", "delta"):
        run(target, f"CREATE TABLE {table} (id int PRIMARY KEY, k int, v text)")
        run(target, f"INSERT INTO {table} SELECT g, g, md5(g::text) FROM generate_series(1, 50000) g")
        run(target, f"CREATE INDEX {table}_k_idx ON {table} (k)")
    run(target, "CREATE TABLE kilo (id int PRIMARY KEY, w text)")
    run(target, "INSERT INTO kilo SELECT g, md5(g::text) FROM generate_series(1, 50000) g")
    run(target, "ANALYZE")
    collector = collector_target(target)
    run(target, ECHO, 1, (1,))  # first: pg_stat_statements keeps echo's text
    run(target, DELTA, 1, (1,))
    with psycopg.connect(target.dsn, autocommit=True) as conn:
        entries = conn.execute(
            "SELECT queryid, calls, query FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database "
            "WHERE datname = current_database()) AND query LIKE 'SELECT x.v, y.w FROM %'"
        ).fetchall()
    assert [(calls, text) for _, calls, text in entries] == [(2, ECHO.replace("%s", "$1"))]  # PostgreSQL merged them
    queryid = int(entries[0][0])

    def joins(conn: psycopg.Connection) -> None:
        for i in range(5):
            conn.execute(ECHO, (i * 37 + 1,))
            conn.execute(DELTA, (i * 37 + 1,))

    nominal, scrape_every, samples = 3.0, 0.15, 20
    drive(target, warehouse, joins, scrape_every, 3)
    assert capture_target(collector, warehouse).stored >= 1  # echo's plan: the text's
    earlier = drive(target, warehouse, joins, scrape_every, samples + 3)
    at = deploys.record(warehouse, deploys.DeployEvent("shared-id", target.name)).event.deployed_at
    run(target, "DROP INDEX delta_k_idx")  # delta's half now scans delta; echo's plan is unchanged
    later = drive(target, warehouse, joins, scrape_every, samples + 2)
    window = max(window_covering(earlier, at, samples, nominal), (later[samples] - at).total_seconds())
    drive(target, warehouse, joins, scrape_every, 1, until=at + timedelta(seconds=window + scrape_every))
    tolerance = tolerance_covering(earlier, later, at, 1.0)
    settings = EngineSettings(window=timedelta(seconds=window), tolerance_floor=timedelta(seconds=tolerance))

    result = analyse_deploy(AnalysisRun(warehouse, settings, live_targets={target.name: collector}), "shared-id")
    joined = result.verdicts.set_index("queryid").loc[queryid]
    assert joined.verdict == "detected", joined[["verdict", "reason", "change_factor"]].to_dict()
    assert joined.queryid_shared_with == ["public.delta"]
    assert joined.plan_diff == {"unavailable": SHARED_QUERYID_PLAN} and joined.cause != "plan_changed"
    with warehouse.connect() as conn:
        stored = conn.execute(  # the joined statement's row (another statement may be detected beside it)
            sa.text(
                "SELECT queryid_shared_with, plan_diff FROM radar.regression WHERE deploy_id = 'shared-id' "
                "AND queryid = :q"
            ),
            {"q": queryid},
        ).one()
    assert tuple(stored) == (["public.delta"], {"unavailable": SHARED_QUERYID_PLAN})
    note = (
        "this queryid may cover statements over several tables (PostgreSQL 18 merges statements that differ only in "
        "table names behind the same alias): the same statement over public.delta gets it too"
    )

    printed = subprocess.run(
        [str(Path(sys.executable).parent / "radar"), "verdicts", "shared-id", "--warehouse", warehouse_url],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "160"},
    )
    assert printed.returncode == 0, printed.stderr
    assert f"caution, queryid {queryid}: {note}" in printed.stdout, printed.stdout
    (row,) = [r.data for r in _metadata(result)["detections"].records if r.data["queryid"] == str(queryid)]
    assert row["caution"].startswith(note) and "plan unchanged" not in row["plan"]

    bot = SlackResource(token="xoxb-test-token", channel="#radar", base_url=slack.api_url)
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("deploys", ["shared-id"])
        resources = {
            "warehouse": WarehouseResource(url=warehouse_url),
            "slack": bot,
            "channels": ChannelsResource(),
            "analysis": AnalysisResource(),
        }
        sent = dg.materialize([regression_alerts], partition_key="shared-id", resources=resources, instance=instance)
        assert sent.success
    body = slack.calls_to("/api/chat.postMessage")[-1].json
    blocks = body["blocks"] if isinstance(body["blocks"], list) else json.loads(body["blocks"])
    fields = [f["text"] for b in blocks for f in b.get("fields", []) + b.get("elements", [])]
    assert f"*Caution:* {note}, and its text is whichever came first" in fields
    assert f"*Plan:* no plan diff: {SHARED_QUERYID_PLAN}" in fields and "plan unchanged" not in json.dumps(blocks)

    # Past the bound on the checks an analysis makes, a detection is not looked into: null, not "none shared", and
    # echo's plan diff, shown, says it may be one table's of several.
    monkeypatch.setattr("radar_pipeline.steps.plan_diffs.SHARED_CHECKS", 0)
    unchecked = analyse_deploy(AnalysisRun(warehouse, settings, live_targets={target.name: collector}), "shared-id")
    alone = unchecked.verdicts.set_index("queryid").loc[queryid]
    assert alone.queryid_shared_with is None
    caution = "not checked whether PostgreSQL 18 gives this queryid to the same statement over other tables (only the 0"
    assert alone.plan_diff["queryid_not_checked"].startswith(caution)
    assert f"; caution: {caution}" in alone.plan_diff["summary"]


def test_an_unchecked_queryid_s_plan_diff_carries_a_caution_on_postgresql_18_not_on_15(warehouse):
    """A detection whose queryid was not checked for sharing (here its target is not configured, so no watched
    server is reached) keeps its plan diff from the stored plans, with a caution on PostgreSQL 18, where the queryid
    may cover the same statement over other tables, in the plan diff and its summary (the UI's and Slack's "plan");
    none on PostgreSQL 15, which computes a queryid from the table itself. The version is the one the target's
    scrapes stored; when none is known, the caution says that too."""
    from radar_pipeline.defs.deploys.deploy_verdicts import _metadata
    from radar_pipeline.steps.plan_diffs import not_checked

    at = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=240)  # the window (±200 s) closed 40 s ago
    texts = {31: "SELECT x.v FROM echo x WHERE x.id = $1"}
    plan = {"Plan": {"Node Type": "Index Scan", "Relation Name": "echo", "Index Name": "echo_pkey"}}
    stored = ("generic_plan", plan_shape.plan_hash(plan), "Index Scan using echo_pkey on echo", 8.0, plan)
    settings = EngineSettings(window=timedelta(seconds=200), tolerance_floor=timedelta(seconds=30))
    diffs, plans_shown, diff_rows = {}, {}, {}
    for name, version in (("new", 180000), ("old", 150000)):
        counters = hourly_deploy_counters(
            at, np.random.default_rng(3), list(texts), 1, lambda q, d: 3.0 if d >= 0 else 1.0
        )
        store_counters(warehouse, name, counters, texts, server_version_num=version)
        with warehouse.begin() as conn:
            for when in (at - timedelta(seconds=150), at + timedelta(seconds=100)):
                stored_plans.store(conn, name, when, {(5, 10, 31, True): stored}, {})
        deploys.record(warehouse, deploys.DeployEvent(f"unchecked-{name}", name, at))
        result = analyse_deploy(AnalysisRun(warehouse, settings), f"unchecked-{name}")
        (row,) = result.verdicts[result.verdicts["verdict"] == "detected"].itertuples()
        assert row.queryid_shared_with is None  # not asked
        diffs[name] = row.plan_diff
        metadata = _metadata(result)
        (plans_shown[name],) = [r.data["plan"] for r in metadata["detections"].records]
        # The UI's plan diffs and reasons: tables of plain cells, not JSON.
        assert isinstance(metadata["plan_diffs"], dg.TableMetadataValue)
        (diff_rows[name],) = [r.data for r in metadata["plan_diffs"].records]
        assert diff_rows[name]["query"] == result.texts[int(row.queryid)]  # the statement by its text, not its key
        assert {r.data["reason"]: r.data["statements"] for r in metadata["reasons"].records} == dict(
            result.verdicts["reason"].value_counts()
        )

    why = "the target is not among the configured targets, so the watched server was not reached"
    caution = (
        f"not checked whether PostgreSQL 18 gives this queryid to the same statement over other tables ({why}): this "
        "plan may be one table's of several"
    )
    assert diffs["new"]["queryid_not_checked"] == caution == not_checked(why, 180000)
    assert diffs["new"]["summary"] == plans_shown["new"] == f"plan unchanged; caution: {caution}"
    assert "queryid_not_checked" not in diffs["old"] and diffs["old"]["summary"] == plans_shown["old"]
    assert plans_shown["old"] == "plan unchanged"
    assert diff_rows["new"]["statement"].endswith("-31-top") and diff_rows["new"]["queryid_not_checked"] == caution
    assert diff_rows["new"]["summary"] == plans_shown["new"] and diff_rows["old"]["queryid_not_checked"] is None
    assert diff_rows["new"]["root_before"] == diff_rows["new"]["root_after"] == "Index Scan using echo_pkey on echo"
    assert "this server's PostgreSQL version is not known either" in not_checked(why, None)


@pytest.mark.parametrize("server", ["pg18"], indirect=True)
def test_a_statement_that_no_longer_plans_is_skipped_and_remembered(app_db, warehouse):
    server, target = app_db
    _probe_table(target)
    collector = collector_target(target)
    run(target, "CREATE TABLE doomed (a int)")
    run(target, "SELECT count(*) FROM doomed WHERE a = %s", 3, (1,))
    run(target, LOOKUP, 3, (5,))
    run(target, "SELECT 1")  # fine to plan, but nothing to look at
    scrape(target, warehouse)
    run(target, "DROP TABLE doomed")
    capture = capture_target(collector, warehouse)
    reasons = set(capture.skipped.values())
    assert any(r.startswith('EXPLAIN failed: relation "doomed" does not exist') for r in reasons)
    assert ("Index Scan using probe_id_idx on probe", "generic_plan") in _plans(warehouse, target.name)
    with warehouse.connect() as conn:
        skipped = conn.execute(sa.text("SELECT count(*) FROM radar.plan_skip WHERE target = :t"), {"t": target.name})
        assert skipped.scalar_one() == len(capture.skipped)
    run(target, LOOKUP, 3, (6,))
    scrape(target, warehouse)
    again = capture_target(collector, warehouse)
    assert not any("doomed" in r for r in again.skipped.values())  # not retried within a day

    # The collector's EXPLAINs are in pg_stat_statements now; the next snapshot leaves them out.
    scrape(target, warehouse)
    with warehouse.connect() as conn:
        explains = conn.execute(
            sa.text("SELECT count(*) FROM radar.query WHERE target = :t AND query ILIKE 'EXPLAIN%'"), {"t": target.name}
        ).scalar_one()
    assert explains == 0


def test_postgresql_15_has_generic_plans_from_a_prepared_statement_and_writes_nothing(
    pg15, pg18, warehouse, warehouse_url
):
    """Before PostgreSQL 16 (no EXPLAIN (GENERIC_PLAN)) the generic plan comes from a statement prepared under
    plan_cache_mode = force_generic_plan, through the same asset; an UPDATE is planned, not run; the collector's own
    PREPARE, SET and DEALLOCATE are never stored as the application's statements."""
    databases = []
    try:
        targets = []
        for server in (pg15, pg18):
            name = server.new_database("plans")
            databases.append((server, name))
            server.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements", name)
            target = Target(f"plans{server.major}", server.pg.url(name))
            _probe_table(target)
            run(target, LOOKUP, 3, (9,))
            run(target, "UPDATE probe SET payload = %s WHERE id = %s", 3, ("x", 7))
            scrape(target, warehouse)
            targets.append(collector_target(target))
        spec = " ".join(f"{t.name}={t.dsn}" for t in targets)
        with dg.instance_for_test() as instance:
            result = dg.materialize(
                [plan_snapshots],
                resources={"warehouse": WarehouseResource(url=warehouse_url), "targets": TargetsResource(spec=spec)},
                instance=instance,
            )
        assert result.success
        meta = result.asset_materializations_for_node("plan_snapshots")[0].metadata
        assert not meta["unavailable_targets"].value
        for target in targets:
            assert ("Index Scan using probe_id_idx on probe", "generic_plan") in _plans(warehouse, target.name)
            scrape(target, warehouse)  # the collector's own statements are in pg_stat_statements now
        with warehouse.connect() as conn:
            roots = dict(
                conn.execute(
                    sa.text(
                        "SELECT p.target, p.root_node FROM radar.plan_snapshot p JOIN radar.query q USING "
                        "(target, dbid, userid, queryid, toplevel) WHERE q.query LIKE 'UPDATE probe%'"
                    )
                ).all()
            )
            own = conn.execute(  # the collector's PREPARE, SET, RESET, DEALLOCATE and EXPLAIN, whoever ran them
                sa.text(
                    "SELECT array_agg(query) FROM radar.query "
                    "WHERE query ~* 'radar_generic_plan|plan_cache_mode|^(/\\*.*\\*/ *)?EXPLAIN'"
                )
            ).scalar_one()
        assert roots == {"plans15": "ModifyTable on probe", "plans18": "ModifyTable on probe"}, roots
        assert not own, own
        (server, name) = databases[0]
        with psycopg.connect(server.pg.dsn(name)) as conn:  # planned, never run: the rows are as the test left them
            assert conn.execute("SELECT count(*) FROM probe WHERE payload = 'x'").fetchone() == (1,)
    finally:
        for server, name in databases:
            server.drop_database(name)


PLAN_A = {
    "Plan": {
        "Node Type": "Hash Join",
        "Join Type": "Inner",
        "Total Cost": 120.5,
        "Plan Rows": 10,
        "Plans": [
            {
                "Node Type": "Index Scan",
                "Relation Name": "orders",
                "Index Name": "orders_customer_idx",
                "Total Cost": 8,
            },
            {"Node Type": "Hash", "Total Cost": 30, "Plans": [{"Node Type": "Seq Scan", "Relation Name": "customers"}]},
        ],
    }
}


def test_plan_shape_ignores_costs_and_names_scan_changes():
    import copy

    cheaper = copy.deepcopy(PLAN_A)
    cheaper["Plan"]["Total Cost"] = 1.0
    cheaper["Plan"]["Plan Rows"] = 99999
    assert plan_shape.plan_hash(PLAN_A) == plan_shape.plan_hash(cheaper)
    seq = copy.deepcopy(PLAN_A)
    seq["Plan"]["Plans"][0] = {"Node Type": "Seq Scan", "Relation Name": "orders", "Total Cost": 900}
    seq["Plan"]["Total Cost"] = 1205.0
    assert plan_shape.plan_hash(seq) != plan_shape.plan_hash(PLAN_A)
    d = plan_shape.diff(PLAN_A, seq, "pg_store_plans", "pg_store_plans")
    assert d["changes"] == ["Index Scan using orders_customer_idx on orders → Seq Scan on orders"]
    assert d["root_before"] == d["root_after"] == "Hash Join (Inner)" and not d["root_changed"]
    assert d["cost_factor"] == pytest.approx(10.0) and d["cautions"] == []
    assert (
        plan_shape.summary(d)
        == "Index Scan using orders_customer_idx on orders → Seq Scan on orders (estimated cost ×10.0)"
    )
    assert plan_shape.summary(plan_shape.diff(PLAN_A, PLAN_A)) == "plan unchanged"
    with pytest.raises(ValueError, match="not an EXPLAIN"):
        plan_shape.root({"nope": 1})


def _pgss_count(target: Target, like: str) -> int:
    with psycopg.connect(target.dsn, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM pg_stat_statements WHERE query LIKE %s", (like,)).fetchone()
    return int(row[0]) if row else 0


@pytest.mark.parametrize("server", ["pg18"], indirect=True)
def test_plan_capture_refuses_roles_that_could_reset_statistics_and_plans_dml_with_the_readme_grants(
    app_db, warehouse, warehouse_url
):
    server, target = app_db
    _probe_table(target)
    collector = collector_target(target)
    # A function wrongly marked IMMUTABLE: planning `SELECT tick()` evaluates it.
    run(
        target,
        "CREATE FUNCTION tick() RETURNS int IMMUTABLE LANGUAGE sql AS 'SELECT 1 FROM pg_stat_statements_reset()'",
    )
    run(target, "SELECT tick()")
    run(target, LOOKUP, 3, (4,))
    run(target, "UPDATE probe SET payload = payload WHERE id = %s", 3, (5,))
    scrape(target, warehouse)

    refused = capture_target(target, warehouse)  # the application's superuser
    assert refused.source is None and "a superuser" in (refused.reason or "") and refused.tried == 0
    assert _pgss_count(target, "SELECT payload FROM probe%") == 1  # nothing was reset

    run(target, "GRANT EXECUTE ON FUNCTION pg_stat_statements_reset TO radar_collector")
    try:
        resetter = capture_target(collector, warehouse)
        assert resetter.source is None and "may execute pg_stat_statements_reset" in (resetter.reason or "")
    finally:
        run(target, "REVOKE EXECUTE ON FUNCTION pg_stat_statements_reset FROM radar_collector")

    with dg.instance_for_test() as instance:
        result = dg.materialize(
            [plan_snapshots],
            resources={
                "warehouse": WarehouseResource(url=warehouse_url),
                "targets": TargetsResource(spec=f"{target.name}={collector.dsn}"),
            },
            instance=instance,
        )
    meta = result.asset_materializations_for_node("plan_snapshots")[0].metadata
    assert _pgss_count(target, "SELECT payload FROM probe%") == 1  # planning tick() was refused its reset
    reasons = {r.data["reason"] for r in meta["skipped_statements"].records}
    assert any("permission denied for function pg_stat_statements_reset" in r for r in reasons), reasons
    with warehouse.connect() as conn:
        roots = {
            r[0]
            for r in conn.execute(
                sa.text("SELECT root_node FROM radar.plan_snapshot WHERE target = :t"), {"t": target.name}
            )
        }
    assert "ModifyTable on probe" in roots and "Index Scan using probe_id_idx on probe" in roots


@pytest.mark.parametrize("server", ["pg18"], indirect=True)
def test_pg_store_plans_is_read_per_its_plan_format_and_falls_back_to_generic_plan(app_db):
    """pg_store_plans is not installable here (no Debian or PyPI package): a schema of our own mimics its view and
    pg_store_plans_jsonplan(), the raw (short JSON) and json formats included, to test how they are read."""
    from radar_pipeline.collector import plans, session

    server, target = app_db
    _probe_table(target)
    collector = collector_target(target)
    full = json.dumps({"Plan": {"Node Type": "Index Only Scan", "Relation Name": "probe", "Total Cost": 4.3}})
    short = full.replace('"Node Type"', '"t"')
    run(target, "CREATE SCHEMA mimic")
    run(
        target,
        "CREATE FUNCTION mimic.pg_store_plans_jsonplan(text) RETURNS text LANGUAGE sql "
        "AS $$ SELECT replace($1, '\"t\"', '\"Node Type\"') $$",
    )
    run(
        target,
        "CREATE VIEW mimic.pg_store_plans AS SELECT d.oid AS dbid, r.oid AS userid, 77::bigint AS queryid, "
        "CASE current_setting('pg_store_plans.plan_format', true) WHEN 'json' THEN %s ELSE %s END AS plan, "
        "now() AS last_call FROM pg_database d, pg_roles r WHERE d.datname = current_database() "
        "AND r.rolname = 'postgres'".replace("%s", "'{}'").format(full, short),
    )
    run(target, "GRANT USAGE ON SCHEMA mimic TO radar_collector")
    run(target, "GRANT SELECT ON ALL TABLES IN SCHEMA mimic TO radar_collector")
    with session.connect(collector) as conn:
        dboid, userid = conn.execute(
            "SELECT d.oid, r.oid FROM pg_database d, pg_roles r "
            "WHERE d.datname = current_database() AND r.rolname = 'postgres'"
        ).fetchone()  # type: ignore[misc]
        source = plans.PlanSource(plans.STORE_PLANS, None, dboid, "mimic")
        key, text = (dboid, userid, 77, True), "SELECT payload FROM probe WHERE id = $1"

        def captured(fmt: str | None) -> tuple[str, str]:
            conn.execute(
                "RESET pg_store_plans.plan_format" if fmt is None else f"SET pg_store_plans.plan_format = {fmt}"
            )
            origin, plan = plans.capture(conn, source, key, text)
            return origin, plan["Plan"]["Node Type"]

        assert captured(None) == (plans.STORE_PLANS, "Index Only Scan")  # raw by default: inflated
        assert captured("raw") == (plans.STORE_PLANS, "Index Only Scan")
        assert captured("json") == (plans.STORE_PLANS, "Index Only Scan")  # read as it is
        assert captured("text") == (plans.GENERIC_PLAN, "Index Scan")  # no shape in text: GENERIC_PLAN
        assert plans.capture(conn, source, (dboid, userid, 78, True), text)[0] == plans.GENERIC_PLAN  # no row
    run(
        target,
        "CREATE OR REPLACE FUNCTION mimic.pg_store_plans_jsonplan(text) RETURNS text LANGUAGE sql "
        "AS $$ SELECT 'not json' $$",
    )
    with session.connect(collector) as conn:
        assert plans.capture(conn, source, key, text)[0] == plans.GENERIC_PLAN  # any failure: GENERIC_PLAN
    run(target, "REVOKE USAGE ON SCHEMA mimic FROM radar_collector")
    with session.connect(collector) as conn:
        assert plans.capture(conn, source, key, text)[0] == plans.GENERIC_PLAN
