"""Statement keys (collector.fingerprint): one key across queryid rotation and parameter types, never one key for
statements whose text differs in anything but constants and parameter types."""

from __future__ import annotations

import psycopg
import pytest

from radar_pipeline.collector.fingerprint import fingerprint


def test_numbered_tables_and_partitions_keep_their_names():
    keys = {fingerprint(f"SELECT id, payload FROM t{i:02d} WHERE id = $1") for i in range(1, 21)}
    assert len(keys) == 20
    assert fingerprint("SELECT * FROM events_2026_11 WHERE a = $1") != fingerprint(
        "SELECT * FROM events_2026_12 WHERE a = $1"
    )
    assert fingerprint("SELECT * FROM s1.t WHERE a = $1") != fingerprint("SELECT * FROM s2.t WHERE a = $1")


def test_aliased_tables_keep_their_names():
    orders = fingerprint("SELECT x.id FROM orders x WHERE x.id = $1")
    assert orders != fingerprint("SELECT x.id FROM customers x WHERE x.id = $1")
    assert orders != fingerprint("SELECT x.id FROM orders x JOIN items y ON y.id = x.id WHERE x.id = $1")


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("SELECT * FROM t WHERE id = $1", "SELECT * FROM t WHERE id = $1::int8"),
        ("SELECT * FROM t WHERE id = $1::int2", "SELECT * FROM t WHERE id = CAST($1 AS bigint)"),
        ("SELECT * FROM t WHERE id = $1 AND b = $2", "SELECT * FROM t WHERE id = $7 AND b = $9"),
        ("SELECT * FROM t WHERE id = 5", "SELECT * FROM t WHERE id = $1"),
        ("SELECT * FROM t WHERE d > '2026-01-01'::date", "SELECT * FROM t WHERE d > $1::timestamptz"),
        ("SELECT  *\nFROM t -- a comment\nWHERE id = $1", "select * from t /* other */ where id = $1"),
    ],
)
def test_constants_parameter_types_comments_and_layout_do_not_count(a, b):
    assert fingerprint(a) == fingerprint(b)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("SELECT a FROM t WHERE id = $1", "SELECT b FROM t WHERE id = $1"),
        ("SELECT a FROM t WHERE id = $1", "SELECT a FROM t WHERE id > $1"),
        ("SELECT a FROM t x WHERE x.id = $1", "SELECT a FROM t y WHERE y.id = $1"),
        ("SELECT a::text FROM t", "SELECT a::int FROM t"),  # a cast of a column is part of the statement
        ("SELECT a FROM t ORDER BY a", "SELECT a FROM t ORDER BY a DESC"),
        ("SELECT a FROM t LIMIT $1", "SELECT a FROM t OFFSET $1"),
    ],
)
def test_everything_else_counts(a, b):
    assert fingerprint(a) != fingerprint(b)


def test_unparseable_text_falls_back_to_its_folded_text():
    assert fingerprint("SELEC  oops FROM") == fingerprint("selec oops from")
    assert fingerprint("SELEC oops FROM t01") != fingerprint("SELEC oops FROM t02")


def test_psycopg_integer_parameters_split_queryids_but_not_the_key(app_db):
    server, target = app_db
    with psycopg.connect(target.dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_statements_reset()")
        for value in (1, 40_000, 5_000_000_000):  # dumped as int2, int4, int8 parameters
            conn.execute("SELECT payload FROM items WHERE id = %s", (value,))
        rows = conn.execute(
            "SELECT queryid, query FROM pg_stat_statements WHERE query LIKE 'SELECT payload FROM items%'"
        ).fetchall()
    assert len({qid for qid, _ in rows}) >= 2  # what makes the key necessary
    assert len({fingerprint(text) for _, text in rows}) == 1


def test_stored_keys_are_recomputed_and_history_rows_that_merge_keep_one(warehouse):
    import sqlalchemy as sa

    from radar_pipeline.steps.statement_keys import rekey

    texts = {
        1: "SELECT * FROM t01 WHERE id = $1",
        2: "SELECT * FROM t02 WHERE id = $1",
        3: "SELECT * FROM t01 WHERE id = $1::int8",
    }
    with warehouse.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO radar.deploy_event (deploy_id, target, deployed_at, source) "
                "VALUES ('d', 'main', now(), 'cli')"
            )
        )
        for queryid, text in texts.items():  # what libpg_query's fingerprint gave: one key for all three
            conn.execute(
                sa.text(
                    "INSERT INTO radar.query VALUES "
                    "('main', 1, 10, :q, true, 777, :text, now(), now(), 0, 0, NULL, NULL)"
                ),
                {"q": queryid, "text": text},
            )
        for queryid in (1, 2, 3):  # a history point each; 1 and 3 now share a key: the one with more calls stays
            conn.execute(
                sa.text(
                    "INSERT INTO radar.query_history (target, fingerprint, deploy_id, deployed_at, dbid, userid, "
                    "queryid, toplevel, mean_ms, calls, begins_segment, segment, above_band, drift, seg_points, "
                    "seg_mean_ms, "
                    "points, segments, residual_ss, settings) VALUES ('main', :f, 'd', now(), 1, 10, :q, true, 1, :c, "
                    "true, 0, false, false, 1, 1, 1, 1, 0, '{}')"
                ),
                {"f": 777 + queryid, "q": queryid, "c": 100 * queryid},
            )
    assert rekey(warehouse) == 3
    with warehouse.connect() as conn:
        keys = dict(conn.execute(sa.text("SELECT queryid, fingerprint FROM radar.query")).all())
        history = dict(conn.execute(sa.text("SELECT queryid, fingerprint FROM radar.query_history")).all())
        assert conn.execute(sa.text("SELECT version FROM radar.key_version")).scalar_one() == 2
    assert keys == {q: fingerprint(t) for q, t in texts.items()}
    assert keys[1] == keys[3] != keys[2]
    assert history == {2: keys[2], 3: keys[3]}
    assert rekey(warehouse) == 0  # done once


def test_rekeying_waits_for_a_snapshot_in_progress(warehouse):
    """A scrape holding its target's lock (it read the old keys) finishes before the keys are rewritten, so it
    cannot write an old key back afterwards."""
    import threading
    import time

    import sqlalchemy as sa

    from radar_pipeline.steps.statement_keys import rekey
    from radar_pipeline.warehouse import snapshots

    with warehouse.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO radar.query VALUES "
                "('main', 1, 10, 1, true, 777, 'SELECT * FROM t01 WHERE id = $1', now(), now(), 0, 0, NULL, NULL)"
            )
        )
    done: list[int] = []
    with warehouse.connect() as scrape:
        scrape.begin()
        snapshots.lock_target(scrape, "main")
        worker = threading.Thread(target=lambda: done.append(rekey(warehouse)))
        worker.start()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # until rekey is seen waiting on the scrape's lock
            with warehouse.connect() as probe:
                waiting = probe.execute(
                    sa.text("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted")
                ).scalar_one()
            if waiting:
                break
            time.sleep(0.05)
        assert waiting and not done, "rekey did not wait for the scrape in progress"
        scrape.commit()
    worker.join(timeout=60)
    assert done == [1]
