"""Plans that ran, from auto_explain's entries in a real PostgreSQL 18 jsonlog (collector/auto_explain.py): a plan
capture takes the logged plan of a statement instead of EXPLAIN (GENERIC_PLAN), with the call's values redacted,
and says which source it used; a log it cannot read is said, and the statements are planned as without it; lines
that are not auto_explain plans are skipped."""

from __future__ import annotations

import json
import time
from pathlib import Path

import psycopg
import pytest
import sqlalchemy as sa

from radar_pipeline.collector.auto_explain import AUTO_EXPLAIN, logged_plans, parse_entry
from radar_pipeline.config import ConfigError, Target
from radar_pipeline.config.settings import settings
from radar_pipeline.defs.resources import TargetsResource, default_resources
from radar_pipeline.demo.local_postgres import LocalPostgres, embedded_bin_dir
from radar_pipeline.steps.plan_capture import capture_target

from .helpers import collector_target, scrape, statement

SECRET = "ana-secret@example.com"
LOOKUP = "SELECT id, total FROM orders WHERE note = %s AND id > %s"


@pytest.fixture
def logged_server(tmp_path):
    """An embedded PostgreSQL 18 logging to jsonlog in its data directory's log/ (the server's own user writes
    there), with auto_explain loaded into every session and logging every statement's plan as JSON."""
    pg = LocalPostgres(
        tmp_path / "data",
        bin_dir=embedded_bin_dir(),
        settings={
            "logging_collector": "on",
            "log_destination": "'jsonlog'",
            "session_preload_libraries": "'auto_explain'",
            "auto_explain.log_min_duration": "0",
            "auto_explain.log_format": "'json'",
        },
    ).start()
    try:
        yield pg, pg.data_dir / "log"
    finally:
        pg.destroy()


def test_a_plan_that_ran_is_taken_from_the_log_with_its_values_redacted(logged_server, warehouse):
    pg, logs = logged_server
    with psycopg.connect(pg.dsn("postgres"), autocommit=True) as conn:
        conn.execute("CREATE DATABASE shop")
    with psycopg.connect(pg.dsn("shop"), autocommit=True) as conn:
        conn.execute("CREATE EXTENSION pg_stat_statements")
        conn.execute("CREATE TABLE orders (id int PRIMARY KEY, note text, total numeric)")
        conn.execute("INSERT INTO orders SELECT g, 'n' || g, g FROM generate_series(1, 1000) g")
        conn.execute("ANALYZE orders")
    target = Target(name="logged", dsn=pg.url("shop"))
    scrape(target, warehouse)
    with psycopg.connect(target.dsn, autocommit=True) as conn:
        for _ in range(20):
            conn.execute(LOOKUP, (SECRET, 4242))
    scrape(target, warehouse)
    queryid = statement(target, "SELECT id, total FROM orders WHERE note = %")[1]
    # the collector writes its log on its own time: wait for the entry (a condition, bounded)
    deadline = time.monotonic() + 60
    while queryid not in logged_plans(logs, "shop") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert queryid in logged_plans(logs, "shop")
    assert logged_plans(logs, "postgres").get(queryid) is None  # another database's entries are not this one's

    collector = collector_target(target)  # plan capture runs as a role of its own, never a superuser
    capture = capture_target(collector, warehouse, auto_explain_log=logs)
    assert capture.auto_explain >= 1 and capture.auto_explain_error is None
    with warehouse.connect() as conn:
        source, plan = conn.execute(
            sa.text("SELECT source, plan FROM radar.plan_snapshot WHERE target = 'logged' AND queryid = :q"),
            {"q": queryid},
        ).one()
    assert source == AUTO_EXPLAIN
    words = json.dumps(plan)
    assert SECRET not in words and "4242" not in words and "Query Text" not in words
    assert "'<redacted>'" in words
    assert plan["Plan"]["Relation Name"] == "orders"

    # A log that cannot be read is said; the statements are planned as without it (GENERIC_PLAN on PostgreSQL 18).
    missing = logs / "gone" / "postgresql.json"
    with psycopg.connect(target.dsn, autocommit=True) as conn:
        for _ in range(20):
            conn.execute(LOOKUP, (SECRET, 4242))
    scrape(target, warehouse)
    again = capture_target(collector, warehouse, auto_explain_log=missing)
    assert again.auto_explain == 0 and str(missing) in (again.auto_explain_error or "")
    assert again.tried >= 1 and again.source == "generic_plan"


@pytest.mark.parametrize(
    "line",
    [
        b"",
        b"not json",
        b"[1, 2]",
        b'{"message": "connection authorized", "query_id": 7, "timestamp": "t"}',
        b'{"message": "duration: 1 ms  plan:\\n{not json", "query_id": 7, "timestamp": "t"}',
        b'{"message": "duration: 1 ms  plan:\\n{\\"Plan\\": 3}", "query_id": 7, "timestamp": "t"}',
        b'{"message": "duration: 1 ms  plan:\\n{\\"Plan\\": {}}", "query_id": 0, "timestamp": "t"}',
        b'{"message": "duration: 1 ms  plan:\\n{\\"Plan\\": {}}", "timestamp": "t"}',
        b'{"message": "duration: 1 ms  plan:\\nQuery Text: SELECT 1\\nResult", "query_id": 7, "timestamp": "t"}',
    ],
)
def test_lines_that_are_not_auto_explain_plans_are_skipped(line):
    assert parse_entry(line) is None


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("main", "item 1 is not target=/absolute/path"),
        ("main=log/postgresql.json", "item 1 is not target=/absolute/path"),
        ("main=/a other=/b main=/c", "target 'main' appears twice"),
    ],
)
def test_a_bad_auto_explain_setting_names_the_variable(value, words):
    with pytest.raises(ConfigError, match=words) as raised:
        settings(environ={"RADAR_AUTO_EXPLAIN_LOGS": value})
    assert str(raised.value).startswith("RADAR_AUTO_EXPLAIN_LOGS")


def test_an_auto_explain_log_of_no_target_is_refused(monkeypatch):
    monkeypatch.setenv("RADAR_AUTO_EXPLAIN_LOGS", "main=/var/log/pg other=/tmp/x")
    spec = "main=postgresql://u@h/db"
    resource = default_resources()["targets"]
    assert isinstance(resource, TargetsResource)
    with pytest.raises(ConfigError, match="RADAR_AUTO_EXPLAIN_LOGS: 'other' is not a target of RADAR_TARGETS"):
        resource.model_copy(update={"spec": spec}).auto_explain_logs()
    monkeypatch.setenv("RADAR_AUTO_EXPLAIN_LOGS", "main=/var/log/pg")
    resource = default_resources()["targets"]
    assert resource.model_copy(update={"spec": spec}).auto_explain_logs() == {"main": Path("/var/log/pg")}  # type: ignore[attr-defined]
