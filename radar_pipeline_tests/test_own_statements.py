"""The collector's own statements, and a dedicated collector role's, are never stored or analysed."""

from __future__ import annotations

import psycopg
import pytest
import sqlalchemy as sa

from radar_pipeline.collector.pgss import COLLECTOR_MARK, own_statement_reason
from radar_pipeline.config import Target

from .helpers import run, scrape


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("EXPLAIN (FORMAT JSON, GENERIC_PLAN) SELECT 1", "explain"),
        ("/* c */ explain select * from t where a = $1", "explain"),
        (f"SELECT {COLLECTOR_MARK} extversion FROM pg_extension WHERE extname = $1", "collector"),
        ("SELECT queryid, calls FROM pg_stat_statements", "reads_statistics_views"),
        ("select dealloc from public.pg_stat_statements_info", "reads_statistics_views"),
        ("SELECT * FROM pg_store_plans", "reads_statistics_views"),
        ("SELECT * FROM orders WHERE id = $1", None),
        ("SELECT explained FROM t", None),
    ],
)
def test_own_statement_reason(text, reason):
    assert own_statement_reason(text) == reason


def test_collector_statements_are_absent_when_it_shares_the_application_role(app_db, warehouse):
    server, target = app_db
    run(target, "SELECT count(*) FROM items")
    for _ in range(3):
        scrape(target, warehouse)
    run(target, "EXPLAIN (FORMAT JSON) SELECT * FROM items WHERE id = 1")
    run(target, "SELECT calls FROM pg_stat_statements LIMIT 1")
    scrape(target, warehouse)
    scrape(target, warehouse)

    with psycopg.connect(target.dsn, autocommit=True) as conn:
        own = {
            (int(d), int(q))
            for d, q, text in conn.execute("SELECT dbid, queryid, query FROM pg_stat_statements")
            if own_statement_reason(text)
        }
    assert own, "the collector's reads should be visible in pg_stat_statements"
    with warehouse.connect() as conn:
        stored = {
            tuple(map(int, r)) for r in conn.execute(sa.text("SELECT DISTINCT dbid, queryid FROM radar.pgss_snapshot"))
        }
        catalogued = {tuple(map(int, r)) for r in conn.execute(sa.text("SELECT dbid, queryid FROM radar.query"))}
        ignored = {
            tuple(map(int, r)) for r in conn.execute(sa.text("SELECT dbid, queryid FROM radar.ignored_statement"))
        }
    assert not own & stored
    assert not own & catalogued
    # What the collector ran in this target's database is remembered as ignored (by key only).
    dbid = next(iter(d for d, _ in stored))
    assert {k for k in own if k[0] == dbid} <= ignored
    assert any(1 for d, q in stored if d == dbid)


def test_dedicated_collector_role_is_left_out(app_db, warehouse):
    server, target = app_db
    role = f"radar_collector_{server.major}"
    server.execute(
        f"DO $$BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{role}') THEN "
        f"CREATE ROLE {role} LOGIN IN ROLE pg_read_all_stats; END IF; END$$"
    )
    server.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {role}", target.dsn.rsplit("/", 1)[1])
    as_role = Target(target.name, target.dsn.replace("postgres@", f"{role}@"))
    run(target, "SELECT count(*) FROM items")
    scrape(as_role, warehouse, exclude_role=role)
    run(as_role, "SELECT max(id) FROM items")  # a statement of the role's own, not the application's
    run(target, "SELECT count(*) FROM items")
    scrape(as_role, warehouse, exclude_role=role)

    role_oid = server.execute(f"SELECT oid FROM pg_roles WHERE rolname = '{role}'")[0][0]
    with warehouse.connect() as conn:
        userids = {int(r[0]) for r in conn.execute(sa.text("SELECT DISTINCT userid FROM radar.pgss_snapshot"))}
    assert role_oid not in userids
    assert userids  # the application's statements were stored
