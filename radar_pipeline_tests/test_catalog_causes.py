"""Causes that name the change (issue 28): the catalog and settings facts of a watched database, collected in the
scrape by the collector's least-privilege role, stored only when they change, bracketed by the captures around each
change, named with a sentence and an undo, attached to the detections whose relations, database or role they touch,
and given as a detection's cause by the deploy's analysis."""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pandas as pd
import psycopg
import pytest
import sqlalchemy as sa

from radar_pipeline.collector import session
from radar_pipeline.config import Target
from radar_pipeline.engine.vocabulary import ChangeKind
from radar_pipeline.named_changes import NamedChange, ranked
from radar_pipeline.pgss_model import KEY
from radar_pipeline.steps.causes import name_changes
from radar_pipeline.steps.deploy_analysis import AnalysisRun, analyse_deploy
from radar_pipeline.steps.retention import apply_retention
from radar_pipeline.steps.snapshots import collect_catalog, snapshot_target
from radar_pipeline.warehouse import catalog, deploys

from .helpers import run
from .test_deploy_impact import LIST, LOOKUP, SETTINGS, store

EVERY = timedelta(milliseconds=1)  # every scrape reads the catalog (the cadence has its own test)
HOUR = timedelta(hours=1)
SCHEMA = """
CREATE TABLE orders (id int PRIMARY KEY, customer int, amount int);
CREATE INDEX orders_customer_idx ON orders (customer);
CREATE TABLE accounts (id int PRIMARY KEY, balance int);
CREATE TABLE events (id int, kind text);
CREATE TABLE invoices (id int, total int);
CREATE TABLE users (id int, email text);
INSERT INTO orders SELECT g, g % 50, g FROM generate_series(1, 500) g;
INSERT INTO accounts SELECT g, 100 FROM generate_series(1, 100) g;
INSERT INTO events SELECT g, 'k' || g % 3 FROM generate_series(1, 200) g;
INSERT INTO invoices SELECT g, g FROM generate_series(1, 100) g;
INSERT INTO users SELECT g, 'u' || g % 20 || '@example.com' FROM generate_series(1, 40) g;
CREATE FUNCTION audit() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$;
ANALYZE;
"""
# Autovacuum left out of the tests' tables: an autoanalyze between two captures is a change (statistics_changed), and
# the rows above were loaded in the transaction of their ANALYZE, so autovacuum would analyse them again at its whim.
QUIET = "".join(
    f"ALTER TABLE {t} SET (autovacuum_enabled = off);"
    for t in ("orders", "accounts", "events", "invoices", "users", "items")
)
QUIET += "ANALYZE items;"  # app_db's, never analysed: its first analyze before any capture, not between two
# The application's statements, one per changed table, one on an untouched table (items, from app_db).
WORKLOAD = {
    "orders": ("SELECT amount FROM orders WHERE customer = %s", (3,)),
    "accounts": ("UPDATE accounts SET balance = balance + %s WHERE id = %s", (1, 7)),
    "events": ("SELECT count(*) FROM events WHERE kind = %s", ("k1",)),
    "invoices": ("SELECT id FROM invoices WHERE total > %s", (90,)),
    "users": ("SELECT id FROM users WHERE email = %s", ("u1@example.com",)),
    "items": ("SELECT payload FROM items WHERE id = %s", (5,)),
}


@dataclass
class Watched:
    """A watched database with the schema above, its application role (which runs the workload) and the collector's
    least-privilege role (pg_read_all_stats, nothing else)."""

    server: object
    target: Target  # the superuser's
    collector: Target  # the collector role's
    database: str
    app_role: str
    collector_role: str

    def execute(self, sql: str) -> None:
        self.server.execute(sql, self.database)  # type: ignore[attr-defined]

    @property
    def dbid(self) -> int:
        return int(
            self.server.execute(  # type: ignore[attr-defined]
                "SELECT oid FROM pg_database WHERE datname = current_database()", self.database
            )[0][0]
        )

    def workload(self) -> None:
        for text, params in WORKLOAD.values():
            run(self.target, text, 2, params, user=self.app_role)


@pytest.fixture
def watched(app_db, monkeypatch) -> Iterator[Watched]:
    server, target = app_db
    database = target.dsn.rsplit("/", 1)[1]
    suffix = uuid.uuid4().hex[:8]
    app_role, collector_role = f"app_{suffix}", f"radar_collector_{suffix}"
    server.execute(f"CREATE ROLE {app_role} LOGIN")
    server.execute(f"CREATE ROLE {collector_role} LOGIN IN ROLE pg_read_all_stats")
    with psycopg.connect(server.pg.dsn(database), autocommit=True) as conn:
        conn.execute(SCHEMA)
        conn.execute(QUIET)
        conn.execute(f"GRANT ALL ON ALL TABLES IN SCHEMA public TO {app_role}")
    collector = Target(target.name, target.dsn.replace("postgres@", f"{collector_role}@"))
    yield Watched(server, target, collector, database, app_role, collector_role)
    server.drop_database(database)
    for role in (app_role, collector_role):
        server.execute(f"DROP ROLE IF EXISTS {role}")


def _scrape(watched: Watched, warehouse: sa.Engine, every: timedelta = EVERY) -> tuple[datetime, int]:
    """One scrape by the collector's role; returns the catalog capture's time and the versions it stored."""
    result = snapshot_target(watched.collector, warehouse, watched.collector_role, every)
    assert result.catalog_error is None, result.catalog_error
    with warehouse.connect() as conn:
        at = conn.execute(
            sa.text("SELECT max(captured_at) FROM radar.catalog_capture WHERE target = :t"), {"t": watched.target.name}
        ).scalar_one()
    return at, result.catalog_changes


def _wait_for_setting(watched: Watched, name: str, value: str) -> None:
    deadline = time.monotonic() + 30
    while watched.server.execute(f"SHOW {name}", watched.database)[0][0] != value:  # type: ignore[attr-defined]
        assert time.monotonic() < deadline, f"{name} never became {value} after pg_reload_conf()"
        time.sleep(0.1)


def store_in(server, database: str, warehouse: sa.Engine, deploy_id: str, statements: dict) -> tuple[datetime, Target]:
    """test_deploy_impact.store's synthetic counters of target 'main' around a deploy, living in the real database
    `database` (its dbid), and that database as target 'main'; returns the deploy's time and the target."""
    dbid = server.execute("SELECT oid FROM pg_database WHERE datname = current_database()", database)[0][0]
    deployed_at = store(warehouse, deploy_id, statements)
    with warehouse.begin() as conn:
        for table in ("pgss_snapshot", "query"):
            conn.execute(sa.text(f"UPDATE radar.{table} SET dbid = :d WHERE target = 'main'"), {"d": dbid})
    return deployed_at, Target("main", server.pg.url(database))


def capture_catalog(warehouse: sa.Engine, shop: Target, at: datetime) -> None:
    """One capture of the target's catalog, read by the collector and stored as taken at `at` (synthetic counters'
    times: the capture brackets their deploy)."""
    from radar_pipeline.collector import catalog as collector_catalog

    with session.connect(shop) as conn, warehouse.begin() as wconn:
        digests = collector_catalog.read_digests(conn, shop)
        kinds = catalog.kinds_to_read(wconn, shop.name, digests.dbid, digests.digests)
        facts = [vars(f) for f in collector_catalog.read_facts(conn, shop, kinds)]
        catalog.write_capture(wconn, shop.name, at, digests.dbid, digests.digests, kinds, facts)


def _wait_for_modifications(watched: Watched, tables: dict[str, int]) -> None:
    """Until the server's statistics show each table's modifications (a session's counts reach them when it ends)."""
    deadline = time.monotonic() + 30
    query = "SELECT relname, n_mod_since_analyze FROM pg_stat_user_tables"
    while not all(
        dict(watched.server.execute(query, watched.database)).get(t, 0) >= n  # type: ignore[attr-defined]
        for t, n in tables.items()
    ):
        assert time.monotonic() < deadline, f"the modifications of {tables} never reached pg_stat_user_tables"
        time.sleep(0.1)


def _detections(warehouse: sa.Engine, target: str, change_at: datetime, dbid: int | None = None) -> pd.DataFrame:
    """Each statement of the workload (of database `dbid`: the server's view holds earlier tests' too) as a detection
    changed at `change_at`, with the table it reads (`table`)."""
    tables = {text.replace("%s", "$1", 1).replace("%s", "$2"): table for table, (text, _) in WORKLOAD.items()}
    with warehouse.connect() as conn:
        rows = pd.read_sql(
            sa.text("SELECT dbid, userid, queryid, toplevel, query FROM radar.query WHERE target = :t"),
            conn,
            params={"t": target},
        )
    rows["table"] = rows["query"].map(tables)
    if dbid is not None:
        rows = rows[rows["dbid"] == dbid]
    rows = rows[rows["table"].notna()].drop_duplicates("table").reset_index(drop=True)
    assert set(rows["table"]) == set(WORKLOAD), rows
    rows["change_at"] = change_at
    rows["plan_diff"] = None
    return rows


def test_each_change_is_collected_bracketed_and_named(watched: Watched, warehouse):
    target = watched.target.name
    watched.workload()
    first, stored = _scrape(watched, warehouse)
    assert stored > 0  # the first capture is the state then
    watched.workload()
    quiet, stored = _scrape(watched, warehouse)
    assert stored == 0

    watched.execute("DROP INDEX orders_customer_idx")
    with pytest.raises(psycopg.errors.UniqueViolation):  # duplicates: the index stays, invalid
        watched.execute("CREATE UNIQUE INDEX CONCURRENTLY users_email_key ON users (email)")
    watched.execute("CREATE TRIGGER audit_update BEFORE UPDATE ON accounts FOR EACH ROW EXECUTE FUNCTION audit()")
    watched.execute("ALTER TABLE accounts ADD CONSTRAINT balance_positive CHECK (balance >= 0)")
    watched.execute("ALTER TABLE invoices ALTER COLUMN total TYPE bigint")
    # a table replaced by a new one (fewer than autovacuum's 50 rows, so nothing analyses it before the capture)
    watched.execute(
        "CREATE TABLE events_new (LIKE events); INSERT INTO events_new SELECT * FROM events LIMIT 10; "
        f"DROP TABLE events; ALTER TABLE events_new RENAME TO events; GRANT ALL ON events TO {watched.app_role}"
    )
    watched.execute(f"ALTER ROLE {watched.app_role} SET work_mem = '64kB'")
    watched.execute(f"ALTER DATABASE {watched.database} SET jit = off")
    watched.server.execute("ALTER SYSTEM SET random_page_cost = 7")  # type: ignore[attr-defined]
    try:
        watched.server.execute("SELECT pg_reload_conf()")  # type: ignore[attr-defined]
        _wait_for_setting(watched, "random_page_cost", "7")
        watched.workload()
        changed, stored = _scrape(watched, warehouse)
        assert stored > 0
    finally:
        watched.server.execute("ALTER SYSTEM RESET random_page_cost")  # type: ignore[attr-defined]
        watched.server.execute("SELECT pg_reload_conf()")  # type: ignore[attr-defined]
        _wait_for_setting(watched, "random_page_cost", "4")
    watched.execute(f"ALTER ROLE {watched.app_role} RESET work_mem")
    later, _ = _scrape(watched, warehouse)

    with warehouse.connect() as conn:
        conn.execute(sa.text("SET LOCAL TIME ZONE 'Asia/Kolkata'"))  # the sentences say UTC whatever the session's
        assert catalog.changes_between(conn, target, first, quiet) == []  # nothing changed: nothing named
        changes = catalog.changes_between(conn, target, quiet, changed)
        detections = _detections(warehouse, target, changed, watched.dbid)
        named = name_changes(conn, target, detections, quiet, changed)
        assert name_changes(conn, target, detections, first, quiet) == [[] for _ in range(len(detections))]
        after_reset = catalog.changes_between(conn, target, changed + timedelta(microseconds=1), later)
    span = f"between {quiet.astimezone(UTC):%H:%M:%S} and {changed.astimezone(UTC):%H:%M:%S}"
    by = {(c.kind, c.name): c for c in changes}
    assert all(c.last_seen_before == quiet and c.first_seen_after == changed for c in changes)
    expected = {
        (ChangeKind.INDEX_DROPPED, "orders_customer_idx"): (
            f"index orders_customer_idx on public.orders dropped {span}",
            "CREATE INDEX CONCURRENTLY orders_customer_idx ON public.orders USING btree (customer);",
        ),
        (ChangeKind.INDEX_INVALID, "users_email_key"): (
            f"index users_email_key on public.users left invalid {span}",
            "DROP INDEX CONCURRENTLY public.users_email_key;",
        ),
        (ChangeKind.TRIGGER_ADDED, "audit_update"): (
            f"trigger audit_update on public.accounts added {span}",
            "DROP TRIGGER audit_update ON public.accounts;",
        ),
        (ChangeKind.CONSTRAINT_ADDED, "balance_positive"): (
            f"constraint balance_positive on public.accounts added {span}",
            "ALTER TABLE public.accounts DROP CONSTRAINT balance_positive;",
        ),
        (ChangeKind.COLUMN_TYPE_CHANGED, "total"): (
            f"column total on public.invoices changed type {span}",
            "ALTER TABLE public.invoices ALTER COLUMN total TYPE integer;",
        ),
        (ChangeKind.STATISTICS_RESET, "public.events"): (
            f"statistics of public.events reset (no ANALYZE since) {span}",
            "ANALYZE public.events;",
        ),
        (ChangeKind.SETTING_CHANGED, "work_mem"): (
            f"work_mem for role {watched.app_role} (default → 64kB) changed {span}",
            f"ALTER ROLE {watched.app_role} RESET work_mem;",
        ),
        (ChangeKind.SETTING_CHANGED, "jit"): (
            f"jit in database {watched.database} (default → off) changed {span}",
            f"ALTER DATABASE {watched.database} RESET jit;",
        ),
        (ChangeKind.SETTING_CHANGED, "random_page_cost"): (
            f"random_page_cost (default → 7) changed {span}",
            "ALTER SYSTEM RESET random_page_cost; SELECT pg_reload_conf();",
        ),
    }
    for key, (sentence, undo) in expected.items():
        assert key in by, f"{key} not named; named: {sorted(by)}"
        assert (by[key].sentence(), by[key].undo) == (sentence, undo)
    assert (ChangeKind.TABLE_REWRITTEN, "public.invoices") in by  # ALTER COLUMN TYPE rewrote it
    assert {(c.kind, c.name) for c in after_reset} >= {(ChangeKind.SETTING_CHANGED, "work_mem")}
    reset_work_mem = next(c for c in after_reset if c.name == "work_mem")
    assert reset_work_mem.undo == f"ALTER ROLE {watched.app_role} SET work_mem = '64kB';"

    # which change touches which statement: its table's first (the most telling), the settings of its role after
    first_named = {
        row["table"]: ranked(found)[0] for row, found in zip(detections.to_dict("records"), named, strict=True)
    }
    assert first_named["orders"].kind == ChangeKind.INDEX_DROPPED
    assert first_named["users"].kind == ChangeKind.INDEX_INVALID
    assert first_named["accounts"].kind == ChangeKind.TRIGGER_ADDED
    assert first_named["invoices"].kind == ChangeKind.COLUMN_TYPE_CHANGED
    assert first_named["events"].kind == ChangeKind.STATISTICS_RESET
    assert first_named["items"].kind == ChangeKind.SETTING_CHANGED  # its own table untouched: the settings only
    for row, found in zip(detections.to_dict("records"), named, strict=True):
        relations = {c.relation for c in found if c.relation}
        assert relations <= {f"public.{row['table']}"}, (row["table"], relations)
        assert {c.name for c in found if c.kind == ChangeKind.SETTING_CHANGED} == {
            "work_mem",
            "random_page_cost",
            "jit",
        }
    # a statement with no stored text: its plan diff names the table (in words, or in a plan's JSON nodes)
    unknown = detections.iloc[[0, 0]].assign(queryid=[-1, -2], table=None)
    unknown["plan_diff"] = [
        {"removed": ["Index Scan using orders_customer_idx on orders"], "added": ["Seq Scan on orders"]},
        {"plans": [{"Plan": {"Node Type": "Seq Scan", "Relation Name": "events", "Schema": "public"}}]},
    ]
    with warehouse.connect() as conn:
        by_plan = name_changes(conn, target, unknown.reset_index(drop=True), quiet, changed)
    assert ranked(by_plan[0])[0].name == "orders_customer_idx"
    assert ranked(by_plan[1])[0].kind == ChangeKind.STATISTICS_RESET
    # a change whose bracket lies after the detection's change (beyond the tolerance) did not cause it
    early = detections.assign(change_at=quiet - timedelta(minutes=10))
    with warehouse.connect() as conn:
        assert name_changes(conn, target, early, quiet, changed) == [[] for _ in range(len(detections))]
        # nor one whose bracket ended before the detection's change (beyond the tolerance)
        late = detections.assign(change_at=changed + timedelta(minutes=10))
        assert name_changes(conn, target, late, quiet, changed) == [[] for _ in range(len(detections))]


def test_an_index_rebuilt_under_another_name_is_no_change(watched: Watched, warehouse):
    with session.connect(watched.collector) as conn:
        first = collect_catalog(conn, watched.collector, warehouse)
        watched.execute("CREATE INDEX CONCURRENTLY orders_customer_idx2 ON orders (customer)")
        watched.execute("DROP INDEX CONCURRENTLY orders_customer_idx")
        swapped = collect_catalog(conn, watched.collector, warehouse)
        watched.execute("CREATE INDEX orders_amount_idx ON orders (amount)")
        added = collect_catalog(conn, watched.collector, warehouse)
    assert first > 0 and swapped == 2 and added == 1  # the two versions are stored, and named as nothing
    with warehouse.connect() as conn:
        times = [r[0] for r in conn.execute(sa.text("SELECT captured_at FROM radar.catalog_capture ORDER BY 1"))]
        assert catalog.changes_between(conn, watched.target.name, times[0], times[1]) == []
        (change,) = catalog.changes_between(conn, watched.target.name, times[1], times[2])
    assert change.kind == ChangeKind.INDEX_ADDED and change.undo == "DROP INDEX CONCURRENTLY public.orders_amount_idx;"


def test_a_setting_that_changes_no_plan_is_never_read_so_a_secret_in_it_stays_on_the_server(
    watched: Watched, warehouse
):
    token = f"tok-{uuid.uuid4().hex}"
    watched.execute(f"ALTER ROLE {watched.app_role} SET app.api_token = '{token}'")
    watched.execute(f"ALTER DATABASE {watched.database} SET app.db_token = '{token}'")
    watched.execute("ALTER SYSTEM SET log_min_duration_statement = 987654")  # a server setting that changes no plan
    watched.execute(f"ALTER ROLE {watched.app_role} SET work_mem = '2MB'")
    try:
        watched.execute("SELECT pg_reload_conf()")
        _wait_for_setting(watched, "log_min_duration_statement", "987654ms")
        with session.connect(watched.collector) as conn:
            assert collect_catalog(conn, watched.collector, warehouse) > 0
        with warehouse.connect() as conn:
            stored = [r[0] for r in conn.execute(sa.text("SELECT row_to_json(f)::text FROM radar.catalog_fact f"))]
    finally:
        watched.execute("ALTER SYSTEM RESET log_min_duration_statement")
        watched.execute("SELECT pg_reload_conf()")
    assert not [row for row in stored if "987654" in row or "log_min_duration_statement" in row]
    assert not [row for row in stored if token in row or "app." in row]
    assert any("work_mem" in row and "2MB" in row for row in stored)  # what changes plans is read


def test_the_catalog_read_is_never_stored_as_the_watched_servers_load(watched: Watched, warehouse):
    # a collector without a role of its own (its statements not left out by role): recognised by its mark alone
    watched.workload()
    snapshot_target(watched.collector, warehouse, catalog_interval=EVERY)
    snapshot_target(
        watched.collector, warehouse, catalog_interval=EVERY
    )  # sees the first one's catalog statements in pg_stat_statements
    with warehouse.connect() as conn:
        texts = conn.execute(sa.text("SELECT query FROM radar.query WHERE query ILIKE '%pg_db_role_setting%'")).all()
    assert texts == []


def test_a_catalog_read_failure_does_not_fail_the_scrape(watched: Watched, warehouse):
    # the collector's role may no longer read one catalog of this database: the statements are still stored
    watched.execute("REVOKE SELECT ON pg_catalog.pg_db_role_setting FROM PUBLIC")
    watched.workload()
    result = snapshot_target(watched.collector, warehouse, watched.collector_role, EVERY)
    assert result.catalog_error is not None and "reading the catalog failed" in result.catalog_error
    assert "pg_db_role_setting" in result.catalog_error and result.stored_rows > 0
    with warehouse.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM radar.catalog_capture")).scalar_one() == 0
    watched.execute("GRANT SELECT ON pg_catalog.pg_db_role_setting TO PUBLIC")
    again = snapshot_target(watched.collector, warehouse, watched.collector_role, EVERY)
    assert again.catalog_error is None and again.catalog_changes > 0


def test_retention_keeps_what_later_changes_need(watched: Watched, warehouse):
    target = watched.target.name
    with session.connect(watched.collector) as conn:
        collect_catalog(conn, watched.collector, warehouse)
        watched.execute("DROP INDEX orders_customer_idx")
        collect_catalog(conn, watched.collector, warehouse)
        watched.execute("CREATE INDEX orders_customer_idx ON orders (customer)")
        collect_catalog(conn, watched.collector, warehouse)
    with warehouse.connect() as conn:
        captures = [r[0] for r in conn.execute(sa.text("SELECT captured_at FROM radar.catalog_capture ORDER BY 1"))]
        versions = conn.execute(sa.text("SELECT count(*) FROM radar.catalog_fact")).scalar_one()
    assert len(captures) == 3
    # everything older than tomorrow: only the last capture and each object's current version stay
    apply_retention(warehouse, 0, (captures[-1] + timedelta(days=1)).date())
    with warehouse.connect() as conn:
        kept = [r[0] for r in conn.execute(sa.text("SELECT captured_at FROM radar.catalog_capture"))]
        index = conn.execute(
            sa.text(
                "SELECT value FROM radar.catalog_fact WHERE target = :t AND kind = 'index' "
                "AND identity = 'public.orders.orders_customer_idx'"
            ),
            {"t": target},
        ).all()
        left = conn.execute(sa.text("SELECT count(*) FROM radar.catalog_fact")).scalar_one()
    assert kept == [captures[-1]]
    assert [r[0] for r in index] == ["CREATE INDEX orders_customer_idx ON public.orders USING btree (customer)"]
    assert 0 < left < versions


def test_the_named_change_becomes_the_cause_of_a_detection(pg18, warehouse):
    """Synthetic counters (as test_deploy_impact stores them) around a deploy, and real catalog facts captured before
    and after a real DROP INDEX, at times bracketing the deploy."""
    database = pg18.new_database("shop")
    try:
        pg18.execute(
            "CREATE TABLE orders (id int PRIMARY KEY, customer_id int); "
            "CREATE INDEX orders_customer_idx ON orders (customer_id); CREATE TABLE products (id int, name text)",
            database,
        )
        deployed_at, shop = store_in(
            pg18,
            database,
            warehouse,
            "shop-v2",
            {
                81: {"text": LIST, "calls": (20, 20), "ms": (2.0, 40.0)},  # reads orders: its index was dropped
                82: {"text": LOOKUP, "calls": (20, 20), "ms": (1.0, 8.0)},  # reads products: slowed, nothing named
            },
        )
        for at in (deployed_at - timedelta(seconds=40), deployed_at + timedelta(seconds=15)):
            capture_catalog(warehouse, shop, at)
            pg18.execute("DROP INDEX IF EXISTS orders_customer_idx", database)
        result = analyse_deploy(AnalysisRun(warehouse, SETTINGS), "shop-v2")
    finally:
        pg18.drop_database(database)
    verdicts = result.verdicts.set_index("queryid")
    assert (verdicts.loc[[81, 82], "verdict"] == "detected").all()
    span = f"between {deployed_at - timedelta(seconds=40):%H:%M:%S} and {deployed_at + timedelta(seconds=15):%H:%M:%S}"
    sentence = f"index orders_customer_idx on public.orders dropped {span}"
    undo = "CREATE INDEX CONCURRENTLY orders_customer_idx ON public.orders USING btree (customer_id);"
    untested = f"{sentence}; undo not tested: the target is not reachable from this run"  # no live target here
    assert tuple(verdicts.loc[81, ["cause", "cause_detail", "undo_hint"]]) == ("index_dropped", untested, undo)
    assert verdicts.loc[82, "cause"] != "index_dropped" and verdicts.loc[82, "named_changes"] is None
    with warehouse.connect() as conn:
        stored = conn.execute(
            sa.text(
                "SELECT cause, cause_detail, undo_hint, named_changes FROM radar.regression "
                "WHERE deploy_id = 'shop-v2' AND queryid = 81"
            )
        ).one()
    assert tuple(stored[:3]) == ("index_dropped", untested, undo)
    (change,) = [NamedChange.from_json(c) for c in stored[3]]
    assert change.kind == ChangeKind.INDEX_DROPPED and change.sentence() == sentence and change.undo == undo
    assert json.loads(json.dumps(stored[3]))[0]["sentence"] == sentence


def test_an_analyze_after_a_skewed_bulk_load_is_the_cause_of_a_detection_its_counters_do_not_explain(pg18, warehouse):
    """Synthetic counters around a deploy (a statement on orders ×20, nothing in its counters to explain it), and real
    catalog facts captured before and after a real skewed bulk load and ANALYZE of orders at times bracketing the
    deploy: the analysis names statistics_changed on the statement reading orders, with ANALYZE as its fix."""
    database = pg18.new_database("shop")
    try:
        pg18.execute(
            "CREATE TABLE orders (id int PRIMARY KEY, customer_id int) WITH (autovacuum_enabled = off); "
            "CREATE INDEX orders_customer_idx ON orders (customer_id); CREATE TABLE products (id int, name text)",
            database,
        )
        pg18.execute("INSERT INTO orders SELECT g, g % 100 FROM generate_series(1, 1000) g", database)
        pg18.execute("ANALYZE orders", database)
        slowed = {81: {"text": LIST, "calls": (20, 20), "ms": (2.0, 40.0)}}
        deployed_at, shop = store_in(pg18, database, warehouse, "shop-v3", slowed)
        capture_catalog(warehouse, shop, deployed_at - timedelta(seconds=40))
        # one customer's rows loaded in bulk, then analysed: its estimates (and a plan on them) move
        pg18.execute("INSERT INTO orders SELECT g, 7 FROM generate_series(1001, 50000) g", database)
        pg18.execute("ANALYZE orders", database)
        capture_catalog(warehouse, shop, deployed_at + timedelta(seconds=15))
        result = analyse_deploy(AnalysisRun(warehouse, SETTINGS), "shop-v3")
    finally:
        pg18.drop_database(database)
    row = result.verdicts.set_index("queryid").loc[81]
    assert row["verdict"] == "detected" and row["cause"] == "statistics_changed", row[["cause", "cause_detail"]]
    assert row["cause_detail"].startswith("table public.orders analysed (ANALYZE at ")
    assert row["undo_hint"] == "ANALYZE public.orders;"


def test_a_changed_plan_stays_the_cause_with_the_change_beside_it():
    """decide_span's rule: plan_changed whatever else holds; the named change in cause_detail and named_changes."""
    from radar_pipeline.steps.decide import _apply_named_changes

    at = datetime(2026, 12, 2, 18, 41, 35, tzinfo=UTC)
    change = NamedChange(
        ChangeKind.INDEX_DROPPED,
        "orders_customer_idx",
        "public.orders",
        5,
        None,
        at - timedelta(seconds=20),
        at,
        before="CREATE INDEX orders_customer_idx ON public.orders USING btree (customer)",
        undo="CREATE INDEX …;",
    )
    setting = NamedChange(ChangeKind.SETTING_CHANGED, "work_mem", None, None, "app", at - timedelta(seconds=20), at)
    frame = pd.DataFrame(
        {
            "cause": ["unexplained", "plan_changed", "more_rows"],
            "cause_detail": [None, None, None],
            "named_changes": [None, None, None],
            "undo_hint": [None, None, None],
        }
    )
    for column in KEY:
        frame[column] = 1
    _apply_named_changes(frame, frame.index, [[setting, change], [change], []], [False, True, False])
    assert list(frame["cause"]) == ["index_dropped", "plan_changed", "more_rows"]
    assert (
        frame.loc[0, "cause_detail"]
        == "index orders_customer_idx on public.orders dropped between 18:41:15 and 18:41:35"
    )
    assert frame.loc[1, "cause_detail"] == "plan changed; " + frame.loc[0, "cause_detail"]
    assert [c["kind"] for c in json.loads(frame.loc[0, "named_changes"])] == ["index_dropped", "setting_changed"]
    assert frame.loc[0, "undo_hint"] == "CREATE INDEX …;" and frame.loc[2, "named_changes"] is None


def _captures(warehouse: sa.Engine, target: str) -> list[datetime]:
    with warehouse.connect() as conn:
        return [
            r[0]
            for r in conn.execute(
                sa.text("SELECT captured_at FROM radar.catalog_capture WHERE target = :t ORDER BY 1"), {"t": target}
            )
        ]


def test_definitions_with_literals_are_stored_redacted_and_give_no_undo(watched: Watched, warehouse):
    """A webhook trigger carries its secret in its arguments, a partial index its literal: neither reaches the
    warehouse, and no undo is derived from a definition that lost a literal."""
    token = f"Bearer tok-{uuid.uuid4().hex}"
    watched.execute(
        "CREATE TRIGGER hook AFTER INSERT ON accounts FOR EACH ROW "
        f'EXECUTE FUNCTION audit(\'{{"Authorization":"{token}"}}\')'
    )
    watched.execute("CREATE INDEX events_k1_idx ON events (id) WHERE kind = 'k1'")
    with session.connect(watched.collector) as conn:
        collect_catalog(conn, watched.collector, warehouse)
        watched.execute("DROP TRIGGER hook ON accounts; DROP INDEX events_k1_idx")
        collect_catalog(conn, watched.collector, warehouse)
    first, second = _captures(warehouse, watched.target.name)
    with warehouse.connect() as conn:
        stored = [r[0] for r in conn.execute(sa.text("SELECT row_to_json(f)::text FROM radar.catalog_fact f"))]
        changes = {c.name: c for c in catalog.changes_between(conn, watched.target.name, first, second)}
    assert not [row for row in stored if "tok-" in row or "'k1'" in row]
    assert changes["hook"].kind == ChangeKind.TRIGGER_DROPPED and changes["hook"].undo is None
    assert "<redacted>" in (changes["hook"].before or "")
    assert changes["events_k1_idx"].kind == ChangeKind.INDEX_DROPPED and changes["events_k1_idx"].undo is None


def test_a_null_deploy_with_a_stats_reset_and_vacuum_names_nothing_and_an_analyze_names_its_table(
    watched: Watched, warehouse
):
    """pg_stat_reset() forgets every table's analyze times (and modification counts) and a VACUUM runs in the window:
    neither is a change, so nothing of them is named; the ANALYZE of orders in the same window is named on the
    statement reading orders alone (statistics_changed, listed: its cause only through a changed plan)."""
    watched.workload()
    before, _ = _scrape(watched, warehouse)
    watched.execute("SELECT pg_stat_reset()")
    watched.execute("ANALYZE orders")
    watched.execute("VACUUM accounts")
    watched.workload()
    after, _ = _scrape(watched, warehouse)
    with warehouse.connect() as conn:
        (analysed,) = catalog.changes_between(conn, watched.target.name, before, after)
        detections = _detections(warehouse, watched.target.name, after, watched.dbid)
        named = name_changes(conn, watched.target.name, detections, before, after)
    assert analysed.kind == ChangeKind.STATISTICS_CHANGED and analysed.relation == "public.orders"
    assert analysed.undo == "ANALYZE public.orders;"
    assert re.match(r"table public\.orders analysed \(ANALYZE at 20\S+\.\d{3}Z\) between ", analysed.sentence())
    assert {t: n for t, n in zip(detections["table"], named, strict=True) if n} == {"orders": [analysed]}


def test_a_bulk_load_that_outran_autovacuum_is_named_stale_then_its_analyze(watched: Watched, warehouse):
    """A table loaded with many times its rows, not analysed since (autovacuum off for it, as when a load outruns
    it): its statistics are named stale, with the ANALYZE and the autovacuum setting that keep them fresh; its
    ANALYZE at the next capture is named as such. A few writes (under autovacuum's threshold) name nothing."""
    watched.execute("ANALYZE events, invoices")  # the fixture's rows were loaded in the transaction of its ANALYZE
    watched.workload()
    before, _ = _scrape(watched, warehouse)
    watched.execute("INSERT INTO events SELECT g, 'k9' FROM generate_series(1, 5000) g")
    watched.execute("UPDATE invoices SET total = total + 1 WHERE id <= 5")
    _wait_for_modifications(watched, {"events": 5000, "invoices": 5})
    loaded, _ = _scrape(watched, warehouse)
    watched.execute("ANALYZE events")
    analysed, _ = _scrape(watched, warehouse)
    with warehouse.connect() as conn:
        (stale,) = catalog.changes_between(conn, watched.target.name, before, loaded)
        (fresh,) = catalog.changes_between(conn, watched.target.name, loaded + timedelta(microseconds=1), analysed)
    assert stale.kind == ChangeKind.STATISTICS_STALE and stale.relation == "public.events"
    assert stale.sentence().startswith("statistics of public.events stale")
    assert stale.undo == (
        "ANALYZE public.events; ALTER TABLE public.events SET (autovacuum_analyze_scale_factor = 0.02);"
    )
    assert fresh.kind == ChangeKind.STATISTICS_CHANGED and fresh.relation == "public.events"


def test_every_table_losing_its_statistics_at_once_is_no_change(warehouse):
    """A capture in which every table flips to 'not analysed' (a stats reset, a crash, a failover on a server without
    another signal) starts a new baseline; one table among many flipping is named."""
    t0 = datetime(2026, 12, 2, 8, 0, tzinfo=UTC)

    def facts(states: dict[str, str]) -> list[dict]:
        return [
            {
                "kind": "statistics",
                "identity": t,
                "dbid": 5,
                "roleid": None,
                "relation": t,
                "name": t,
                "role": None,
                "database": None,
                "value": v,
            }
            for t, v in states.items()
        ]

    tables = ["public.a", "public.b", "public.c"]
    captures = [
        dict.fromkeys(tables, "analysed"),
        dict.fromkeys(tables, "not analysed"),
        dict.fromkeys(tables, "analysed"),
        {**dict.fromkeys(tables, "analysed"), "public.b": "not analysed"},
    ]
    with warehouse.begin() as conn:
        for i, states in enumerate(captures):
            catalog.write_capture(
                conn,
                "flip",
                t0 + timedelta(minutes=i),
                5,
                {"statistics": str(i)},
                ["statistics"],
                facts(states),
                server="s1",
            )
    with warehouse.connect() as conn:
        assert catalog.changes_between(conn, "flip", t0, t0 + timedelta(minutes=2)) == []
        (named,) = catalog.changes_between(conn, "flip", t0 + timedelta(minutes=2), t0 + timedelta(minutes=3))
    assert named.kind == ChangeKind.STATISTICS_RESET and named.relation == "public.b"


def test_a_change_first_seen_after_a_later_deploy_is_never_named_for_an_earlier_one(warehouse):
    """Issue 39: deploy B's change, made seconds after deploy A's window closed and seen by the capture after it
    (its bracket reaching back into A's window), was named in A's report. It is B's: named for B, and in a span
    analysed for no deploy (the periodic check), never for A."""
    t0 = datetime(2026, 12, 3, 8, 0, tzinfo=UTC)
    fact = {"kind": "setting", "identity": "work_mem@app", "dbid": 5, "roleid": 10, "relation": None}
    fact |= {"name": "work_mem", "role": "app", "database": None}
    with warehouse.begin() as conn:
        for i, value in enumerate(("4MB", "4MB", "64kB")):
            digest = {"setting": value}
            facts = [{**fact, "value": value}]
            catalog.write_capture(conn, "split", t0 + timedelta(minutes=2 * i), 5, digest, ["setting"], facts, "s1")
    a, b = t0 + timedelta(seconds=90), t0 + timedelta(seconds=190)  # A's window: ±60 s; B deployed after it closed
    for deploy_id, at in (("split-a", a), ("split-b", b)):
        deploys.record(warehouse, deploys.DeployEvent(deploy_id, "split", at), configured_targets=["split"])
    window = timedelta(seconds=60)
    with warehouse.connect() as conn:
        (seen,) = catalog.changes_between(conn, "split", a - window, a + window)  # the bracket [t0+2m, t0+4m] overlaps
        assert seen.kind == ChangeKind.SETTING_CHANGED and seen.name == "work_mem"
        assert catalog.changes_between(conn, "split", a - window, a + window, deployed_at=a) == []
        (for_b,) = catalog.changes_between(conn, "split", b - window, b + window, deployed_at=b)
    assert for_b == seen


def test_a_statement_without_a_located_change_is_named_only_the_changes_around_its_deploy(warehouse):
    """Issue 39: a statement probably slower (no change located: no change_at) was named every change whose bracket
    overlapped the window, one straddling the window's end with no later deploy too (it may have happened after the
    window closed). Its changes are placed at the deploy, as its evidence is split there: a change whose bracket lies
    within the tolerance of the deploy is named, one whose bracket begins after the deploy plus the tolerance is not."""
    t0 = datetime(2026, 12, 3, 9, 0, tzinfo=UTC)
    fact = {"kind": "setting", "identity": "work_mem", "dbid": None, "roleid": None, "relation": None}
    fact |= {"name": "work_mem", "role": None, "database": None}
    with warehouse.begin() as conn:
        for i, value in enumerate(("4MB", "64kB", "64kB", "1MB")):
            facts = [{**fact, "value": value}]
            catalog.write_capture(
                conn, "edge", t0 + timedelta(minutes=2 * i), 5, {"setting": value}, ["setting"], facts
            )
    deployed_at = t0 + timedelta(seconds=100)  # the first change's bracket [t0, t0+2m] holds it
    window, tolerance = timedelta(minutes=5), timedelta(seconds=30)  # the second's [t0+4m, t0+6m] straddles the end
    row = {"dbid": 5, "userid": 10, "queryid": 1, "toplevel": True, "change_at": None, "plan_diff": None}
    located = {**row, "queryid": 2, "change_at": deployed_at}
    with warehouse.connect() as conn:
        everything = catalog.changes_between(conn, "edge", deployed_at - window, deployed_at + window)
        named = name_changes(
            conn,
            "edge",
            pd.DataFrame([row, located]),
            deployed_at - window,
            deployed_at + window,
            tolerance,
            deployed_at,
        )
    assert [c.after for c in everything] == ["64kB", "1MB"]
    assert [[c.after for c in changes] for changes in named] == [["64kB"], ["64kB"]]


def test_a_table_of_another_schema_is_not_touched_by_a_change_of_the_same_name(watched: Watched, warehouse):
    watched.execute(
        "CREATE SCHEMA billing; CREATE SCHEMA archive; "
        "CREATE TABLE billing.orders (id int, customer int); CREATE TABLE archive.orders (id int, customer int); "
        "CREATE INDEX archive_customer_idx ON archive.orders (customer); "
        "CREATE INDEX billing_customer_idx ON billing.orders (customer); "
        "CREATE SCHEMA shop; CREATE TABLE shop.ledger (id int, entry int); "
        "CREATE INDEX ledger_idx ON shop.ledger (entry)"
    )
    watched.workload()
    before, _ = _scrape(watched, warehouse)
    watched.execute("DROP INDEX archive.archive_customer_idx; DROP INDEX shop.ledger_idx")
    after, _ = _scrape(watched, warehouse)
    detections = _detections(warehouse, watched.target.name, after, watched.dbid)
    rows = detections.iloc[[0, 0, 0, 0]].assign(queryid=[-1, -2, -3, -4], table=None)
    rows["plan_diff"] = [
        {"plans": [{"Plan": {"Node Type": "Seq Scan", "Relation Name": "orders", "Schema": "billing"}}]},
        {"plans": [{"Plan": {"Node Type": "Seq Scan", "Relation Name": "orders", "Schema": "archive"}}]},
        {"removed": ["Seq Scan on orders"]},  # a bare name: public (the search path), not archive
        # a bare name found in one schema alone (the role's "$user", or a path the client set): that schema's
        {"removed": ["Seq Scan on ledger"]},
    ]
    with warehouse.connect() as conn:
        named = name_changes(conn, watched.target.name, pd.concat([detections, rows], ignore_index=True), before, after)
    by_table = dict(zip(detections["table"], named, strict=False))
    assert by_table["orders"] == []  # the application's bare `orders` is public.orders
    assert [c.name for c in named[len(detections) :][1]] == ["archive_customer_idx"]
    assert named[len(detections)] == [] and named[len(detections) + 2] == []
    assert [c.name for c in named[len(detections) + 3]] == ["ledger_idx"]


def test_a_target_repointed_at_another_database_starts_a_new_baseline(watched: Watched, warehouse):
    """The same target name, its DSN now another database (another schema entirely): its first capture there is
    its state, not a flood of changes."""
    other = watched.server.new_database("other")  # type: ignore[attr-defined]
    try:
        watched.server.execute(  # type: ignore[attr-defined]
            "CREATE TABLE orders (id int, note text); CREATE INDEX other_idx ON orders (note)", other
        )
        elsewhere = Target(watched.collector.name, watched.collector.dsn.rsplit("/", 1)[0] + "/" + other)
        with session.connect(watched.collector) as conn:
            collect_catalog(conn, watched.collector, warehouse)
        with session.connect(elsewhere) as conn:
            collect_catalog(conn, elsewhere, warehouse)
        first, second = _captures(warehouse, watched.target.name)
        with warehouse.connect() as conn:
            assert catalog.changes_between(conn, watched.target.name, first, second) == []
    finally:
        watched.server.drop_database(other)  # type: ignore[attr-defined]


def test_the_catalog_is_read_at_its_interval_or_after_a_deploy(watched: Watched, warehouse):
    target = watched.target.name
    _scrape(watched, warehouse, HOUR)
    _scrape(watched, warehouse, HOUR)
    assert len(_captures(warehouse, target)) == 1  # within the interval: the digests are not read again
    with warehouse.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO radar.deploy_event (deploy_id, target, deployed_at, source) VALUES (:d, :t, now(), 'cli')"
            ),
            {"d": f"cadence-{uuid.uuid4().hex[:6]}", "t": target},
        )
    _scrape(watched, warehouse, HOUR)
    assert len(_captures(warehouse, target)) == 2  # a deploy recorded since: read at the next scrape
    _scrape(watched, warehouse, HOUR)
    assert len(_captures(warehouse, target)) == 2


def test_only_changes_that_can_slow_a_statement_give_the_cause():
    from radar_pipeline.collector.plan_settings import affects_plans
    from radar_pipeline.steps.decide import _apply_named_changes

    at = datetime(2026, 12, 2, 18, 41, 35, tzinfo=UTC)
    added = NamedChange(ChangeKind.INDEX_ADDED, "o_idx", "public.orders", 5, None, at, at, undo="DROP INDEX …;")
    column = NamedChange(ChangeKind.COLUMN_ADDED, "note", "public.orders", 5, None, at, at)
    setting = NamedChange(ChangeKind.SETTING_CHANGED, "work_mem", None, None, "app", at, at, "4MB", "64kB", "SET …;")
    frame = pd.DataFrame({"cause": ["more_rows", "temp_spill"], "cause_detail": [None, None]})
    frame["named_changes"] = None
    frame["undo_hint"] = None
    _apply_named_changes(frame, frame.index, [[added, column], [added, setting]], [False, False])
    assert list(frame["cause"]) == ["more_rows", "setting_changed"]
    assert frame.loc[0, "cause_detail"] is None and frame.loc[0, "undo_hint"] is None
    assert [c["kind"] for c in json.loads(frame.loc[0, "named_changes"])] == ["index_added", "column_added"]
    assert frame.loc[1, "undo_hint"] == "SET …;"
    assert json.loads(frame.loc[1, "named_changes"])[0]["kind"] == "setting_changed"
    for name in ("statement_timeout", "lock_timeout", "track_io_timing", "maintenance_work_mem"):
        assert not affects_plans(name)


def test_statistics_give_the_cause_through_a_changed_plan_or_where_the_counters_name_none():
    """A table analysed in the span: the cause of a statement whose plan changed (statistics_changed, "plan changed;"
    and the analyze in its detail), and of one whose counters explain nothing; listed only beside a counter cause."""
    from radar_pipeline.steps.decide import _apply_named_changes

    at = datetime(2026, 12, 2, 18, 41, 35, tzinfo=UTC)
    analysed = NamedChange(
        ChangeKind.STATISTICS_CHANGED,
        "public.orders",
        "public.orders",
        5,
        None,
        at - timedelta(seconds=20),
        at,
        before="autoanalyze at 2026-12-02T17:00:00.000Z",
        after="autoanalyze at 2026-12-02T18:41:30.250Z",
        undo="ANALYZE public.orders;",
    )
    frame = pd.DataFrame({"cause": ["plan_changed", "unexplained", "more_rows"], "cause_detail": [None] * 3})
    frame["named_changes"] = None
    frame["undo_hint"] = None
    _apply_named_changes(frame, frame.index, [[analysed]] * 3, [True, False, False])
    assert list(frame["cause"]) == ["statistics_changed", "statistics_changed", "more_rows"]
    words = "table public.orders analysed (autoanalyze at 2026-12-02T18:41:30.250Z) between 18:41:15 and 18:41:35"
    assert list(frame["cause_detail"]) == [f"plan changed; {words}", words, None]
    assert list(frame["undo_hint"]) == ["ANALYZE public.orders;", "ANALYZE public.orders;", None]
    assert json.loads(frame.loc[2, "named_changes"])[0]["kind"] == "statistics_changed"


def test_a_setting_names_its_database_by_name():
    at = datetime(2026, 12, 2, 18, 41, 35, tzinfo=UTC)
    change = NamedChange(
        ChangeKind.SETTING_CHANGED, "jit", None, 16384, None, None, at, None, "off", None, database="shop"
    )
    assert change.sentence() == "jit in database shop (default → off) changed by 18:41:35"
    assert NamedChange.from_json(change.to_json()) == change
