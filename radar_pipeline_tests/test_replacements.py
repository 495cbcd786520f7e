"""What statement texts tell the impact (steps/replacements.py), on the texts pg_stat_statements really stores: a
migration's DDL, transaction control and an ORM rewrite run on PostgreSQL 18 and 15, classified and compared."""

from __future__ import annotations

import psycopg

from radar_pipeline.collector.fingerprint import relations
from radar_pipeline.engine.impact import CONTROL, PLANNABLE, SIMILAR_SHAPE, UTILITY
from radar_pipeline.steps.replacements import shape, similarity, statement_class

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
