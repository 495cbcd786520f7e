"""The collector and the write path against real PostgreSQL 18 and 15: rows, interval means, resets, eviction."""

from __future__ import annotations

import pandas as pd
import pytest
import sqlalchemy as sa

from radar_pipeline.pgss_model import ScrapeInfo
from radar_pipeline.warehouse import snapshots

from .helpers import intervals, run, scrape, scrape_times, snapshot_rows, statement

SLEEP = "SELECT pg_sleep(%s)"
COUNT = "SELECT count(*) FROM items WHERE grp = %s"


def test_known_workload_gives_rows_and_interval_means(app_db, warehouse):
    server, target = app_db
    run(target, SLEEP, 1, (0.001,))
    run(target, COUNT, 1, (3,))
    first = scrape(target, warehouse)
    assert first.new_statements >= 2 and first.stored_rows == first.new_statements

    run(target, SLEEP, 10, (0.005,))
    second = scrape(target, warehouse)
    run(target, SLEEP, 10, (0.02,))
    third = scrape(target, warehouse)

    sleep_key = statement(target, "SELECT pg_sleep($1)")
    count_key = statement(target, "SELECT count(*) FROM items WHERE grp = $1")
    got = intervals(warehouse, target.name, sleep_key)
    times = scrape_times(warehouse, target.name)
    assert got["calls"].tolist() == [10, 10]
    # Each interval's mean is its own calls' (pg_sleep guarantees a floor, not a ceiling: no upper bound on a timing).
    # Cumulative means would put the second under 20 ms; intervals mixed together would give both the same mean.
    first_ms, second_ms = got["mean_exec_time_ms"].tolist()
    assert first_ms >= 5.0 and second_ms >= 20.0 and second_ms - first_ms >= 10.0
    assert got["interval_start"].tolist() == times[:2]
    assert got["interval_end"].tolist() == times[1:]
    assert second.stored_rows >= 1 and third.stored_rows >= 1

    # The count statement did not run again: its counters did not move, so it has exactly its first row.
    assert len(snapshot_rows(warehouse, target.name, count_key)) == 1
    assert intervals(warehouse, target.name, count_key).empty


def test_absent_row_means_no_calls_and_places_the_interval(app_db, warehouse):
    server, target = app_db
    run(target, SLEEP, 1, (0.001,))
    scrape(target, warehouse)
    scrape(target, warehouse)  # idle: no row for the statement
    run(target, SLEEP, 4, (0.002,))
    scrape(target, warehouse)

    sleep_key = statement(target, "SELECT pg_sleep($1)")
    times = scrape_times(warehouse, target.name)
    assert len(snapshot_rows(warehouse, target.name, sleep_key)) == 2
    got = intervals(warehouse, target.name, sleep_key)
    # The calls happened after the idle scrape, so the interval starts there, not at the statement's last row.
    assert got["interval_start"].tolist() == [times[1]]
    assert got["calls"].tolist() == [4]


def test_reset_between_scrapes_excludes_that_interval(app_db, warehouse):
    server, target = app_db
    run(target, SLEEP, 1, (0.001,))
    scrape(target, warehouse)
    run(target, SLEEP, 5, (0.001,))
    scrape(target, warehouse)
    run(target, "SELECT pg_stat_statements_reset()")
    run(target, SLEEP, 3, (0.001,))
    across = scrape(target, warehouse)
    run(target, SLEEP, 4, (0.001,))
    scrape(target, warehouse)

    sleep_key = statement(target, "SELECT pg_sleep($1)")
    rows = snapshot_rows(warehouse, target.name, sleep_key)
    assert rows["reset_before"].tolist() == [False, False, True, False]
    assert across.resets_seen >= 1
    got = intervals(warehouse, target.name, sleep_key)
    assert got["calls"].tolist() == [5, 4]


def test_statement_evicted_then_back_is_not_one_interval(app_db, warehouse):
    server, target = app_db
    run(target, COUNT, 3, (1,))
    scrape(target, warehouse)
    count_key = statement(target, "SELECT count(*) FROM items WHERE grp = $1")
    # Removes only this entry, as an eviction would (a partial reset does not move the server's stats_reset).
    run(target, "SELECT pg_stat_statements_reset(0, 0, %s)", params=(count_key[1],))
    gone = scrape(target, warehouse)
    assert gone.missing_statements >= 1
    run(target, COUNT, 2, (1,))
    back = scrape(target, warehouse)
    run(target, COUNT, 4, (1,))
    scrape(target, warehouse)

    rows = snapshot_rows(warehouse, target.name, count_key)
    # Back with calls=2 after 3: the drop alone would show it, but the flag comes from seeing it gone.
    assert rows["calls"].tolist() == [3, 2, 6]
    assert rows["reset_before"].tolist() == [False, True, False]
    assert back.resets_seen >= 1
    assert intervals(warehouse, target.name, count_key)["calls"].tolist() == [4]
    with warehouse.connect() as conn:
        missing = conn.execute(
            sa.text("SELECT missing_since FROM radar.query WHERE target = :t AND queryid = :q"),
            {"t": target.name, "q": count_key[1]},
        ).scalar_one()
    assert missing is None


def test_eviction_pressure_reports_dealloc(tmp_path, warehouse):
    from radar_pipeline.config import Target
    from radar_pipeline.demo.local_postgres import LocalPostgres

    with LocalPostgres(tmp_path / "small", settings={"pg_stat_statements.max": "100"}) as pg:
        import psycopg

        with psycopg.connect(pg.dsn(), autocommit=True) as conn:
            conn.execute("CREATE EXTENSION pg_stat_statements")
            conn.execute("CREATE TABLE t (a int)")
        target = Target("small", pg.url())
        scrape(target, warehouse)
        with psycopg.connect(pg.dsn(), autocommit=True) as conn:
            for k in range(1, 251):
                conn.execute("SELECT " + ", ".join(["a"] * k) + " FROM t")
        result = scrape(target, warehouse)
    assert result.dealloc_since_last is not None and result.dealloc_since_last > 0
    assert result.statements <= 100


def test_repeated_write_of_one_scrape_stores_nothing_twice(app_db, warehouse):
    server, target = app_db
    run(target, SLEEP, 2, (0.001,))
    scrape(target, warehouse)
    with warehouse.connect() as conn:
        before = conn.execute(sa.text("SELECT count(*) FROM radar.pgss_snapshot")).scalar_one()
        at = conn.execute(sa.text("SELECT max(captured_at) FROM radar.pgss_info_snapshot")).scalar_one()
    info = ScrapeInfo(target.name, at, 180000, "1.12", 0, None)
    statements = pd.DataFrame(
        [[1, 10, 42, True, 5, 1.0, 5, 0, 0, 0, 0.0, 0.0, None]],
        columns=[*snapshots.KEY, *snapshots.COUNTERS, "stats_since"],
    )
    with warehouse.begin() as conn:
        state = snapshots.lock_and_load_state(conn, target.name, statements)
        plan = snapshots.plan_snapshot(state, statements, None)
        key = (1, 10, 42, True)
        result = snapshots.write_snapshot(conn, info, state, plan, {key: "SELECT 1"}, {key: 7}, {})
    assert result.duplicate
    with warehouse.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM radar.pgss_snapshot")).scalar_one() == before


@pytest.mark.parametrize("server", ["pg18"], indirect=True)
def test_stats_since_is_stored_where_the_server_has_it(app_db, warehouse):
    server, target = app_db
    run(target, SLEEP, 1, (0.001,))
    scrape(target, warehouse)
    rows = snapshot_rows(warehouse, target.name, statement(target, "SELECT pg_sleep($1)"))
    assert rows["stats_since"].notna().all()


def test_pg15_has_no_stats_since(pg15, warehouse):
    name = pg15.new_database("app")
    try:
        pg15.execute("CREATE EXTENSION pg_stat_statements", name)
        from radar_pipeline.config import Target

        target = Target("app15", pg15.pg.url(name))
        run(target, SLEEP, 1, (0.001,))
        scrape(target, warehouse)
        rows = snapshot_rows(warehouse, target.name)
        assert len(rows) and rows["stats_since"].isna().all()
    finally:
        pg15.drop_database(name)


@pytest.mark.parametrize(("dealloc", "with_since"), [(6, False), (5, False), (6, True)])
def test_without_stats_since_a_dealloc_marks_the_least_called_statements_as_reset(dealloc, with_since):
    """PostgreSQL 14–16: a statement evicted and back before the next scrape, now with more calls than it had, shows
    nothing in its numbers; when dealloc moved, the least-called statements' next intervals are excluded."""
    import pandas as pd

    from radar_pipeline.pgss_model import COUNTERS, KEY
    from radar_pipeline.warehouse.snapshots import TargetState, plan_snapshot

    ids = list(range(1, 21))
    since = pd.Timestamp("2026-11-29 10:00", tz="UTC") if with_since else pd.NaT
    queries = pd.DataFrame(
        {
            "dbid": 5,
            "userid": 10,
            "queryid": ids,
            "toplevel": True,
            "fingerprint": ids,
            "last_calls": [10 * q for q in ids],
            "last_total_exec_time": [10.0 * q for q in ids],
            "last_stats_since": since,
            "missing_since": pd.NaT,
        }
    )
    statements = queries[KEY].copy()
    for column in COUNTERS:
        statements[column] = 0
    statements["calls"] = [10 * q + 50 for q in ids]  # every one moved; the first may have been evicted and back
    statements["total_exec_time"] = [10.0 * q + 50 for q in ids]
    statements["stats_since"] = since
    state = TargetState(queries=queries, ignored=set(), last_dealloc=5)
    plan = plan_snapshot(state, statements, None, dealloc)
    flagged = sorted(plan.rows.loc[plan.rows["reset_before"], "queryid"])
    assert flagged == ([1, 2] if dealloc > 5 and not with_since else [])


def test_the_catalogue_read_leaves_out_statements_gone_until_they_are_back(app_db, warehouse):
    """A scrape reads the catalogue of the statements the previous scrape listed, and of the scraped ones it did not
    (back after an eviction) by key; statements gone from the view stay unread, however many a catalogue gathers."""
    from radar_pipeline.collector import pgss, session

    server, target = app_db
    run(target, COUNT, 3, (1,))
    scrape(target, warehouse)
    count_key = statement(target, "SELECT count(*) FROM items WHERE grp = $1")
    run(target, "SELECT pg_stat_statements_reset(0, 0, %s)", params=(count_key[1],))
    scrape(target, warehouse)  # marks it gone

    def state_now() -> pd.DataFrame:
        with session.connect(target) as conn:
            scraped = pgss.scrape(conn, target, pgss.read_extension(conn, target)).statements
        with warehouse.begin() as conn:
            return snapshots.lock_and_load_state(conn, target.name, scraped).queries

    def read(queries: pd.DataFrame) -> pd.DataFrame:
        return queries[(queries["dbid"] == count_key[0]) & (queries["queryid"] == count_key[1])]

    with warehouse.connect() as conn:
        stored = conn.execute(
            sa.text("SELECT count(*) FROM radar.query WHERE target = :t AND missing_since IS NOT NULL"),
            {"t": target.name},
        ).scalar_one()
    assert stored >= 1
    assert read(state_now()).empty  # gone, and not in this scrape: not read
    run(target, COUNT, 2, (1,))
    back = read(state_now())
    assert len(back) == 1 and back["missing_since"].notna().all() and back["last_calls"].tolist() == [3]
