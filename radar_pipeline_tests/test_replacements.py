"""What statement texts tell the impact (steps/replacements.py), on the texts pg_stat_statements really stores: a
migration's DDL, transaction control and an ORM rewrite run on PostgreSQL 18 and 15, classified and compared."""

from __future__ import annotations

import json
from contextlib import nullcontext

import psycopg

from radar_pipeline.collector.fingerprint import relations
from radar_pipeline.engine.impact import CONTROL, PLANNABLE, SIMILAR_SHAPE, UTILITY
from radar_pipeline.steps.replacements import heavier_form, shape, similarity, statement_class
from radar_pipeline.warehouse.migrations import SQL_DIR

LIST = "SELECT id, customer_id FROM orders WHERE customer_id = %s"
WIDER = "SELECT id, customer_id, total FROM orders WHERE customer_id = %s"
OTHER = "SELECT count(*) FROM orders WHERE id < %s"


def test_stored_texts_are_classified_and_rewrites_recognised(server):
    db = server.new_database("replace")
    try:
        server.execute("CREATE EXTENSION pg_stat_statements", db)
        server.execute("CREATE TABLE orders (id int PRIMARY KEY, customer_id int, total numeric)", db)
        with psycopg.connect(server.pg.dsn(db), autocommit=True) as conn:
            conn.execute("SELECT pg_stat_statements_reset()")
            conn.execute("CREATE INDEX orders_customer_idx ON orders (customer_id)")
            conn.execute("ALTER TABLE orders ADD COLUMN note text")
            conn.execute("DROP INDEX orders_customer_idx")
            with conn.transaction():
                conn.execute("SET LOCAL work_mem = '8MB'")
                conn.execute(LIST, (1,))
                conn.execute(WIDER, (1,))
                conn.execute(OTHER, (3,))
            conn.execute("BEGIN")
            conn.execute("SAVEPOINT s1")
            conn.execute("ROLLBACK")
            here = "SELECT oid FROM pg_database WHERE datname = current_database()"
            texts = [r[0] for r in conn.execute(f"SELECT query FROM pg_stat_statements WHERE dbid = ({here})")]
    finally:
        server.drop_database(db)
    classes = {t: statement_class(t) for t in texts}
    for start in ("CREATE", "ALTER", "DROP"):
        (text,) = [t for t in texts if t.upper().startswith(start)]
        assert classes[text] == UTILITY, text
    for start in ("SET", "BEGIN", "SAVEPOINT", "ROLLBACK"):
        for text in [t for t in texts if t.upper().startswith(start)]:
            assert classes[text] == CONTROL, text
    assert any(t.upper().startswith("BEGIN") for t in texts), texts  # BEGIN is stored (transaction control)
    (old,) = [t for t in texts if t.startswith("SELECT id, customer_id FROM")]
    (new,) = [t for t in texts if t.startswith("SELECT id, customer_id, total")]
    (other,) = [t for t in texts if t.startswith("SELECT count(*)")]
    assert classes[old] == classes[new] == PLANNABLE
    assert relations(old) == relations(new) == relations(other) == {"orders"}
    assert similarity(shape(old), shape(new)) >= SIMILAR_SHAPE  # the ORM's added column: a rewrite
    assert similarity(shape(old), shape(other)) < SIMILAR_SHAPE  # another statement on the same table


BY_ID = "SELECT id, total FROM orders WHERE id = %s"
BY_CUSTOMER = "SELECT id, total FROM orders WHERE customer_id = %s"
EAGER = "SELECT o.id, o.total, c.name FROM orders o JOIN customers c ON c.id = o.customer_id WHERE o.id = %s"
EAGER_BY_CUSTOMER = (
    "SELECT o.id, o.total, c.name FROM orders o JOIN customers c ON c.id = o.customer_id WHERE o.customer_id = %s"
)
# Statements the application runs (load, never the deploy's own) and the deploy's DDL, as pg_stat_statements stores
# them; transaction control with a leading comment (PostgreSQL 17 and later store `SAVEPOINT $1`, which does not parse).
APPLICATION = (
    "CALL touch(%s)",
    "DECLARE c CURSOR FOR SELECT id FROM orders",
    "EXPLAIN SELECT id FROM orders WHERE id = 1",
    "VACUUM orders",
    "ANALYZE orders",
    "TRUNCATE scratch",
    "REFRESH MATERIALIZED VIEW totals",
)
DEPLOY = (
    "CREATE VIEW open_orders AS SELECT id FROM orders",
    "CREATE FUNCTION f() RETURNS int LANGUAGE sql AS 'SELECT 1'",
    "CREATE SEQUENCE s",
    "CREATE TYPE mood AS ENUM ('a', 'b')",
    "GRANT SELECT ON orders TO PUBLIC",
    "COMMENT ON TABLE orders IS 'orders'",
    "REINDEX TABLE orders",
    "DO $$BEGIN PERFORM 1; END$$",
)


def test_only_ddl_is_the_deploy_s_and_comments_do_not_hide_control(server):
    """The deploy's own statements are its DDL (and DO blocks, how migrations run conditional DDL); CALL, COPY,
    DECLARE, EXPLAIN, VACUUM, ANALYZE, TRUNCATE and REFRESH are the application's load. Transaction control keeps its
    class behind a leading comment: PostgreSQL 15 stores the comment, 18 drops it but stores `SAVEPOINT $1`, which
    does not parse, and such a text with a comment before it is classed by its first keyword after the comment."""
    db = server.new_database("classes")
    try:
        server.execute("CREATE EXTENSION pg_stat_statements", db)
        server.execute("CREATE TABLE orders (id int PRIMARY KEY, customer_id int, total numeric)", db)
        server.execute("CREATE TABLE scratch (id int)", db)
        server.execute("CREATE MATERIALIZED VIEW totals AS SELECT sum(total) FROM orders", db)
        server.execute("CREATE PROCEDURE touch(n int) LANGUAGE sql AS 'SELECT n'", db)
        with psycopg.connect(server.pg.dsn(db), autocommit=True) as conn:
            conn.execute("SELECT pg_stat_statements_reset()")
            for text in APPLICATION:
                with conn.transaction() if text.startswith("DECLARE") else nullcontext():
                    conn.execute(text, (1,) if "%s" in text else None)
            with conn.cursor().copy("COPY orders TO STDOUT") as copy:
                for _ in copy:
                    pass
            for text in DEPLOY:
                conn.execute(text)
            conn.execute("BEGIN")
            conn.execute("/* app */ SAVEPOINT s1")
            conn.execute("-- x\nRELEASE s1")
            conn.execute("/* app */ COMMIT")
            here = "SELECT oid FROM pg_database WHERE datname = current_database()"
            texts = [r[0] for r in conn.execute(f"SELECT query FROM pg_stat_statements WHERE dbid = ({here})")]
    finally:
        server.drop_database(db)

    def stored(start: str) -> str:
        (text,) = [t for t in texts if start in t]
        return text

    for text in (*APPLICATION, "COPY orders TO STDOUT"):
        assert statement_class(stored(text.split(" ")[0] + " ")) == PLANNABLE, stored(text.split(" ")[0] + " ")
    for text in DEPLOY:
        assert statement_class(stored(text[:14])) == UTILITY, stored(text[:14])
    control = [t for t in texts if any(w in t for w in ("SAVEPOINT", "RELEASE", "COMMIT"))]
    for text in control:
        assert statement_class(text) == CONTROL, text
    # the texts PostgreSQL 17 and later store for them, which the parser rejects
    assert statement_class("/* app */ SAVEPOINT $1") == CONTROL
    assert statement_class("-- x\nRELEASE $1") == CONTROL
    assert statement_class("/* a */ -- b\n  CREATE INDEX $1 ON t (a)") == UTILITY


def test_a_lookup_by_another_column_is_no_rewrite(server):
    """Two lookups on one table by different columns (by id, by customer_id) share all but their predicate: not one
    statement rewritten, while the ORM's added column still is."""
    db = server.new_database("lookups")
    try:
        server.execute("CREATE EXTENSION pg_stat_statements", db)
        server.execute("CREATE TABLE orders (id int PRIMARY KEY, customer_id int, total numeric)", db)
        with psycopg.connect(server.pg.dsn(db), autocommit=True) as conn:
            conn.execute("SELECT pg_stat_statements_reset()")
            for text in (BY_ID, BY_CUSTOMER, LIST, WIDER):
                conn.execute(text, (1,))
            texts = [r[0] for r in conn.execute("SELECT query FROM pg_stat_statements WHERE query LIKE 'SELECT id,%'")]
    finally:
        server.drop_database(db)
    by_id, by_customer, old, new = (
        [t for t in texts if t.startswith(s.split("%")[0])][0] for s in (BY_ID, BY_CUSTOMER, LIST, WIDER)
    )
    assert relations(by_id) == relations(by_customer) == {"orders"}
    assert similarity(shape(by_id), shape(by_customer)) < SIMILAR_SHAPE
    assert similarity(shape(old), shape(new)) >= SIMILAR_SHAPE
    assert not heavier_form((relations(by_id), shape(by_id)), (relations(by_customer), shape(by_customer)))


def test_a_lookup_loaded_with_a_relation_is_its_heavier_form(server):
    """An ORM that starts loading the customer with each order (a join, aliases) runs the same lookup in a heavier
    form: alike in little (the join adds most of the tree) but reading the old's table and comparing its column; the
    same join looking up by customer is not it."""
    db = server.new_database("heavier")
    try:
        server.execute("CREATE EXTENSION pg_stat_statements", db)
        server.execute("CREATE TABLE customers (id int PRIMARY KEY, name text)", db)
        server.execute("CREATE TABLE orders (id int PRIMARY KEY, customer_id int, total numeric)", db)
        with psycopg.connect(server.pg.dsn(db), autocommit=True) as conn:
            conn.execute("SELECT pg_stat_statements_reset()")
            for text in (BY_ID, EAGER, EAGER_BY_CUSTOMER):
                conn.execute(text, (1,))
            stored = {r[0] for r in conn.execute("SELECT query FROM pg_stat_statements WHERE query LIKE 'SELECT %'")}
    finally:
        server.drop_database(db)
    by_id, eager, by_customer = (
        [t for t in stored if t.startswith(s.split("%")[0])][0] for s in (BY_ID, EAGER, EAGER_BY_CUSTOMER)
    )
    assert similarity(shape(by_id), shape(eager)) < SIMILAR_SHAPE and relations(by_id) != relations(eager)
    assert heavier_form((relations(by_id), shape(by_id)), (relations(eager), shape(eager)))
    assert not heavier_form((relations(by_id), shape(by_id)), (relations(by_customer), shape(by_customer)))
    assert not heavier_form((relations(eager), shape(eager)), (relations(by_id), shape(by_id)))  # lighter, not heavier


def test_the_kind_check_is_added_without_a_long_lock():
    """Migration 0026 widens radar.statement_change's CHECK without holding ACCESS EXCLUSIVE while it scans the
    table: the constraint is added NOT VALID and validated afterwards, outside the migration's transaction (yoyo's
    `transactional: false`), each statement safe to run again."""
    from pglast import parser
    from yoyo import read_migrations

    (migration,) = [m for m in read_migrations(str(SQL_DIR)) if m.id == "0026_replaced_statements"]
    migration.load()
    assert migration.use_transactions is False
    text = (SQL_DIR / "0026_replaced_statements.sql").read_text()
    commands = [
        cmd["AlterTableCmd"]
        for s in json.loads(parser.parse_sql_json(text))["stmts"]
        for cmd in s["stmt"]["AlterTableStmt"]["cmds"]
    ]
    added = [c for c in commands if c["subtype"] == "AT_AddConstraint"]
    assert added and all(c["def"]["Constraint"].get("skip_validation") for c in added)
    validated = [c["name"] for c in commands if c["subtype"] == "AT_ValidateConstraint"]
    assert validated == [c["def"]["Constraint"]["conname"] for c in added]
    assert all(c.get("missing_ok") for c in commands if c["subtype"] in ("AT_DropConstraint", "AT_AddColumn"))


def test_a_read_is_one_select_that_writes_nothing():
    # (the analysis parses a statement's whole stored text: one cut short may parse as something it is not)
    from radar_pipeline.steps.replacements import reads_only

    assert reads_only("SELECT coalesce(sum(total), $1) FROM orders WHERE customer_id = $2")
    for writes in (
        "SELECT id FROM jobs WHERE state = $1 LIMIT $2 FOR UPDATE SKIP LOCKED",
        "SELECT nextval($1)",
        "SELECT create_order($1)",  # the application's function may write
        "SELECT * INTO copy FROM orders",
        "WITH gone AS (DELETE FROM jobs RETURNING id) SELECT count(*) FROM gone",
        "UPDATE orders SET total = $1",
    ):
        assert not reads_only(writes), writes
