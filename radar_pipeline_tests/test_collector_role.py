"""The collector's role. One that could see nothing is reported, not left storing nothing: a role without
pg_read_all_stats, pg_stat_statements.track = none, compute_query_id = off. A server that has run no statement yet is
not blind, and neither is one where only the collector's own role has such a setting. The documented set-up of the
role (docs/databases.md) covers the tables the application's own role creates later."""

from __future__ import annotations

import re
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import psycopg
import pytest
import sqlalchemy as sa

from radar_pipeline.config import Target
from radar_pipeline.defs.collection.snapshots import ALL_TARGETS_CHECK, pgss_snapshots
from radar_pipeline.defs.resources import TargetsResource, WarehouseResource
from radar_pipeline.demo.local_postgres import LocalPostgres
from radar_pipeline.steps.snapshots import snapshot_targets

from .helpers import run, run_log_text


@pytest.fixture
def role(app_db) -> Iterator[str]:
    """A login role of this test's own, dropped afterwards with its grants (roles are server-wide)."""
    server, target = app_db
    name = f"radar_probe_{uuid.uuid4().hex[:8]}"
    server.execute(f"CREATE ROLE {name} LOGIN")
    yield name
    server.execute(f"DROP OWNED BY {name}", target.dsn.rsplit("/", 1)[1])
    server.execute(f"DROP ROLE {name}")


def _as(target: Target, role: str, name: str) -> Target:
    return Target(name, target.dsn.replace("postgres@", f"{role}@"))


def _materialize(warehouse_url: str, targets: list[Target]) -> tuple[dg.ExecuteInProcessResult, str]:
    with dg.instance_for_test() as instance:
        result = dg.materialize(
            [pgss_snapshots],
            resources={
                "warehouse": WarehouseResource(url=warehouse_url),
                "targets": TargetsResource(spec=" ".join(f"{t.name}={t.dsn}" for t in targets)),
            },
            instance=instance,
            raise_on_error=False,
        )
        return result, run_log_text(instance, result.run_id)


def _blind_beside_a_healthy_one(warehouse_url: str, warehouse: sa.Engine, healthy: Target, blind: Target) -> str:
    """Snapshot both through Dagster; the blind one must fail with its reason and the check must fail, the healthy
    one stored. Returns the blind one's reason."""
    run(healthy, "SELECT count(*) FROM items WHERE grp = %s", 3, (2,))
    result, text = _materialize(warehouse_url, [healthy, blind])
    assert result.success
    failed = result.asset_materializations_for_node("pgss_snapshots")[0].metadata["failed_targets"].value
    assert list(failed) == [blind.name], failed
    (check,) = result.get_asset_check_evaluations()
    assert check.check_name == ALL_TARGETS_CHECK and check.passed is False
    with warehouse.connect() as conn:
        stored = dict(conn.execute(sa.text("SELECT target, count(*) FROM radar.pgss_snapshot GROUP BY target")).all())
    assert stored.get(healthy.name, 0) > 0 and blind.name not in stored
    assert f"target {blind.name!r} was not scraped" in text
    return failed[blind.name]


def test_a_role_without_pg_read_all_stats_is_reported(app_db, role, warehouse_url, warehouse):
    server, target = app_db
    server.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {role}", target.dsn.rsplit("/", 1)[1])
    reason = _blind_beside_a_healthy_one(warehouse_url, warehouse, target, _as(target, role, "blind"))
    assert f"role {role!r} lacks pg_read_all_stats" in reason and f"GRANT pg_read_all_stats TO {role}" in reason


@pytest.mark.parametrize(
    ("setting", "value", "said"),
    [
        ("pg_stat_statements.track", "none", "pg_stat_statements.track is none for database"),
        ("compute_query_id", "off", "compute_query_id is off for database"),
    ],
)
def test_a_database_that_records_nothing_is_reported(app_db, role, warehouse_url, warehouse, setting, value, said):
    server, target = app_db
    database = target.dsn.rsplit("/", 1)[1]
    server.execute(f"GRANT pg_read_all_stats TO {role}")
    # Only the collector's own role: the application's sessions still record, so this is not blindness.
    server.execute(f"ALTER ROLE {role} SET {setting} = {value}")
    healthy = _as(target, role, "own_role_only")
    (outcome,) = snapshot_targets([healthy], warehouse, exclude_role=role)
    assert outcome.error is None, outcome.error

    server.execute(f"ALTER ROLE {role} RESET {setting}")
    server.execute(f'ALTER DATABASE "{database}" SET {setting} = {value}')
    other = server.new_database("other")
    try:
        server.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements", other)
        server.execute("CREATE TABLE items (id int, grp int)", other)
        elsewhere = Target("elsewhere", server.pg.url(other))
        reason = _blind_beside_a_healthy_one(warehouse_url, warehouse, elsewhere, Target("blind", target.dsn))
    finally:
        server.drop_database(other)
    assert said in reason and repr(database) in reason, reason


def test_an_idle_server_is_not_blind(tmp_path: Path, warehouse):
    """A new server that has run nothing but its set-up and the collector's own statements: its scrapes succeed."""
    with LocalPostgres(tmp_path / "idle") as pg:
        with psycopg.connect(pg.dsn(), autocommit=True) as conn:
            conn.execute("CREATE EXTENSION pg_stat_statements")
            conn.execute("CREATE ROLE radar_collector LOGIN IN ROLE pg_read_all_stats")
            conn.execute("SELECT pg_stat_statements_reset()")
        collector = Target("idle", pg.url(user="radar_collector"))
        outcomes = [snapshot_targets([collector], warehouse, exclude_role="radar_collector")[0] for _ in range(2)]
        superuser = snapshot_targets([Target("idle_su", pg.url())], warehouse)
    assert [o.error for o in outcomes + superuser] == [None, None, None]
    assert all(o.result is not None for o in outcomes + superuser)


def _documented_collector_sql() -> str:
    """The docs' SQL block that creates the collector's role (docs/databases.md)."""
    page = (Path(__file__).resolve().parents[1] / "docs" / "databases.md").read_text()
    blocks = re.findall(r"```sql\n(.*?)```", page, re.DOTALL)
    (block,) = [b for b in blocks if "CREATE ROLE radar_collector" in b]
    return textwrap.dedent(block)


@pytest.mark.parametrize("server", ["pg18"], indirect=True)
def test_the_documented_collector_role_covers_tables_the_application_s_role_creates_later(app_db):
    """Default privileges are per creating role: tables the application's role creates after the set-up (its next
    migration) must be readable by the collector, and plannable as DML with the optional grants."""
    server, target = app_db
    database = target.dsn.rsplit("/", 1)[1]
    suffix = uuid.uuid4().hex[:8]
    collector, app_role = f"radar_collector_{suffix}", f"app_role_{suffix}"
    server.execute(f"CREATE ROLE {app_role} LOGIN")
    server.execute(f"GRANT CREATE ON SCHEMA public TO {app_role}", database)
    sql = _documented_collector_sql().replace("radar_collector", collector).replace("app_role", app_role)
    try:
        with psycopg.connect(server.pg.dsn(database), autocommit=True) as conn:
            conn.execute(sql.replace("PASSWORD '...'", "PASSWORD 'pw'"))  # type: ignore[arg-type]
        with psycopg.connect(server.pg.dsn(database, user=app_role), autocommit=True) as conn:
            conn.execute("CREATE TABLE later (id int PRIMARY KEY, v text)")  # the application's next migration
        with psycopg.connect(server.pg.dsn(database, user=collector), autocommit=True) as conn:
            granted = conn.execute(
                "SELECT p, has_table_privilege('later', p) FROM unnest(ARRAY['SELECT', 'INSERT', 'UPDATE', 'DELETE']) p"
            ).fetchall()
            assert dict(granted) == {"SELECT": True, "INSERT": True, "UPDATE": True, "DELETE": True}
            plan = conn.execute("EXPLAIN (FORMAT JSON, GENERIC_PLAN) UPDATE later SET v = $1 WHERE id = $2").fetchone()
            assert plan is not None and plan[0][0]["Plan"]["Node Type"] == "ModifyTable"
    finally:
        server.execute(f"DROP OWNED BY {collector}, {app_role}", database)
        server.execute(f"DROP ROLE IF EXISTS {collector}")
        server.execute(f"DROP ROLE IF EXISTS {app_role}")
