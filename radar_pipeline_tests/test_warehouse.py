"""The warehouse schema: migrations, day partitions and retention."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest
import sqlalchemy as sa

from radar_pipeline.steps.retention import apply_retention
from radar_pipeline.warehouse import migrations


def test_upgrade_is_idempotent(warehouse_url):
    assert migrations.pending(warehouse_url) == []
    assert migrations.upgrade(warehouse_url) == []


def _partitions(warehouse) -> list[str]:
    with warehouse.connect() as conn:
        return [
            r[0]
            for r in conn.execute(
                sa.text(
                    "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
                    "WHERE i.inhparent = 'radar.pgss_snapshot'::regclass ORDER BY 1"
                )
            )
        ]


def test_retention_drops_expired_days_and_creates_the_next(warehouse):
    today = date(2026, 11, 29)
    with warehouse.begin() as conn:
        conn.execute(sa.text("SELECT radar.ensure_pgss_snapshot_partitions(:d, 20)"), {"d": today - timedelta(days=19)})
        old = datetime(2026, 11, 11, 12, tzinfo=UTC)
        conn.execute(
            sa.text(
                "INSERT INTO radar.pgss_snapshot "
                "VALUES ('t', :at, 1, 1, 1, true, 1, 1.0, 1, 0, 0, 0, 0.0, NULL, false, 1)"
            ),
            {"at": old},
        )
        conn.execute(
            sa.text("INSERT INTO radar.pgss_info_snapshot VALUES ('t', :at, 0, NULL, 180000, '1.12', 1, 1)"),
            {"at": old},
        )
        for queryid, seen in ((1, old), (2, datetime(2026, 11, 28, tzinfo=UTC))):
            conn.execute(
                sa.text(
                    "INSERT INTO radar.query VALUES ('t', 1, 1, :q, true, 1, 'SELECT 1', :at, :at, 1, 1, NULL, NULL)"
                ),
                {"q": queryid, "at": seen},
            )
        for check, end in (
            ("periodic:2026-11-11-11:00", old),
            ("periodic:2026-11-28-11:00", datetime(2026, 11, 28, 12, tzinfo=UTC)),
        ):
            conn.execute(
                sa.text(
                    "INSERT INTO radar.analysis (deploy_id, target, settings, engine_version, window_start, "
                    "window_end, queries, detected, no_regression, insufficient_data) "
                    "VALUES (:id, 't', '{}', '1', :end - interval '2 hours', :end, 2, 1, 1, 0)"
                ),
                {"id": check, "end": end},
            )
            for queryid, verdict, reason in ((1, "detected", "significant"), (3, "no_regression", "below_threshold")):
                conn.execute(
                    sa.text(
                        "INSERT INTO radar.verdict (deploy_id, target, dbid, userid, queryid, toplevel, fingerprint, "
                        "verdict, reason, n_before, n_after, calls_before, calls_after) "
                        "VALUES (:id, 't', 1, 1, :q, true, :q, :v, :r, 10, 10, 100, 100)"
                    ),
                    {"id": check, "q": queryid, "v": verdict, "r": reason},
                )
    dropped = apply_retention(warehouse, keep_days=14, today=today)
    assert dropped == [f"pgss_snapshot_p202611{d:02d}" for d in range(10, 15)]
    names = _partitions(warehouse)
    assert names[0] == "pgss_snapshot_p20261115"
    assert names[-1] == "pgss_snapshot_p20261201"  # today and two days ahead
    with warehouse.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM radar.pgss_info_snapshot")).scalar_one() == 0
        assert conn.execute(sa.text("SELECT queryid FROM radar.query ORDER BY 1")).scalars().all() == [1, 2]  # shown
        kept = conn.execute(sa.text("SELECT deploy_id, queryid FROM radar.verdict ORDER BY 1, 2")).all()
        assert kept == [
            ("periodic:2026-11-11-11:00", 1),
            ("periodic:2026-11-28-11:00", 1),
            ("periodic:2026-11-28-11:00", 3),
        ]
    assert apply_retention(warehouse, keep_days=14, today=today) == []


def test_partition_bounds_are_utc_days(warehouse):
    with warehouse.begin() as conn:
        conn.execute(sa.text("SET TIME ZONE 'America/New_York'"))
        conn.execute(sa.text("SELECT radar.ensure_pgss_snapshot_partitions('2026-03-08', 1)"))
        bound = conn.execute(
            sa.text("SELECT pg_get_expr(relpartbound, oid) FROM pg_class WHERE relname = 'pgss_snapshot_p20260308'")
        ).scalar_one()
    assert (
        "2026-03-07 19:00:00-05" in bound and "2026-03-08 20:00:00-04" in bound
    )  # New York moved to summer time that day


def test_read_window_brings_each_statements_last_earlier_row(warehouse):
    from radar_pipeline.warehouse.analysis import read_window

    lo = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
    rows = [
        # (queryid, minutes from lo, calls, reset_before)
        (1, -180, 10, False),  # idle for hours before the window: found by the per-statement look-up
        (1, 1, 20, False),
        (1, 2, 30, False),
        (2, -1, 5, False),
        (2, 1, 7, False),
        (2, 2, 3, True),  # the collector saw this statement vanish and come back
        (3, -5, 1, False),  # no row in the window: not part of it
    ]
    with warehouse.begin() as conn:
        conn.execute(sa.text("SELECT radar.ensure_pgss_snapshot_partitions('2026-11-29', 1)"))
        for queryid, minutes, calls, reset in rows:
            conn.execute(
                sa.text(
                    "INSERT INTO radar.pgss_snapshot VALUES "
                    "('t', :at, 1, 10, :q, true, :c, :c * 2.0, :c, 0, :c, 0, 0.0, NULL, :reset, :q)"
                ),
                {"at": lo + timedelta(minutes=minutes), "q": queryid, "c": calls, "reset": reset},
            )
    with warehouse.begin() as conn:
        window = read_window(conn, "t", lo, lo + timedelta(minutes=30))
    assert window.keys["queryid"].tolist() == [1, 2]
    c = window.counters
    assert c["query_key"].tolist() == [0, 0, 0, 1, 1, 1]
    assert c["calls"].tolist() == [10, 20, 30, 5, 7, 3]
    assert c["captured_at"].iloc[0] == lo - timedelta(hours=3)
    since = c["stats_since"].tolist()
    assert since[3] == since[4] != since[5]  # the reset changes the counters' epoch, so the engine drops that interval
    assert c["fingerprint"].tolist() == [1, 1, 1, 2, 2, 2]


def test_retention_cuts_at_utc_midnight_whatever_the_session_time_zone(warehouse):
    today = date(2026, 11, 29)
    cutoff = datetime(2026, 11, 15, tzinfo=UTC)  # 14 days back
    with warehouse.begin() as conn:
        database = conn.execute(sa.text("SELECT current_database()")).scalar_one()
        conn.execute(sa.text(f"ALTER DATABASE \"{database}\" SET timezone = 'Pacific/Honolulu'"))
        for at in (cutoff - timedelta(minutes=30), cutoff + timedelta(minutes=30)):
            conn.execute(
                sa.text("INSERT INTO radar.pgss_info_snapshot VALUES ('t', :at, 0, NULL, 180000, '1.12', 1, 1)"),
                {"at": at},
            )
    warehouse.dispose()  # new connections take the database's time zone
    apply_retention(warehouse, keep_days=14, today=today)
    with warehouse.connect() as conn:
        assert conn.execute(sa.text("SHOW timezone")).scalar_one() == "Pacific/Honolulu"
        kept = conn.execute(sa.text("SELECT captured_at FROM radar.pgss_info_snapshot")).scalars().all()
    assert kept == [cutoff + timedelta(minutes=30)]


def test_scrape_coverage_counts_the_gap_from_the_first_samples_interval_start(warehouse):
    from radar_pipeline.warehouse.analysis import window_health

    lo = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
    hi = lo + timedelta(minutes=30)
    with warehouse.begin() as conn:
        conn.execute(sa.text("SELECT radar.ensure_pgss_snapshot_partitions('2026-11-28', 3)"))
        # the scraper stopped for two hours: the window's first sample spans 10:00 → 12:01
        for at in [lo - timedelta(hours=2)] + [lo + timedelta(minutes=m) for m in range(1, 31)]:
            conn.execute(
                sa.text("INSERT INTO radar.pgss_info_snapshot VALUES ('t', :at, 0, NULL, 180000, '1.12', 1, 1)"),
                {"at": at},
            )
        health = window_health(conn, "t", lo, hi)
    assert health.scrapes == 30
    assert health.longest_gap_s == (2 * 3600 + 60)


def test_interval_function_reads_a_range_and_agrees_with_the_view(warehouse):
    import numpy as np
    import pandas as pd

    from .helpers import store_counters

    start = pd.Timestamp("2026-11-26 00:00", tz="UTC")
    times = start + pd.to_timedelta(np.arange(0, 3 * 24 * 60, 10), unit="min")  # three days, a scrape every 10 min
    frames = []
    for queryid in (1, 2, 3):
        calls = np.cumsum(np.full(len(times), 5 * queryid))
        if queryid == 3:  # idle for the first two days: its last row before the range is days old
            calls[: len(times) * 2 // 3] = 0
        frames.append(
            pd.DataFrame({"queryid": queryid, "captured_at": times, "calls": calls, "total_exec_time": calls * 1.5})
        )
    frame = pd.concat(frames)
    frame = frame[frame.groupby("queryid")["calls"].diff().fillna(1) != 0]  # no row when counters did not move
    store_counters(warehouse, "t", frame, {1: "SELECT 1", 2: "SELECT 2", 3: "SELECT 3"})
    lo, hi = pd.Timestamp("2026-11-28 12:00", tz="UTC"), pd.Timestamp("2026-11-28 13:00", tz="UTC")
    columns = "queryid, interval_start, interval_end, calls, total_exec_time, mean_exec_time_ms"
    with warehouse.connect() as conn:
        bounded = conn.execute(
            sa.text(f"SELECT {columns} FROM radar.pgss_intervals('t', :lo, :hi) ORDER BY 1, 3"), {"lo": lo, "hi": hi}
        ).all()
        viewed = conn.execute(
            sa.text(
                f"SELECT {columns} FROM radar.pgss_interval WHERE target = 't' AND interval_end > :lo "
                "AND interval_end <= :hi ORDER BY 1, 3"
            ),
            {"lo": lo, "hi": hi},
        ).all()
    assert bounded == viewed and len(bounded) == 3 * 6
    assert {r[0] for r in bounded} == {1, 2, 3}


@pytest.fixture
def radar_role_db(pg18):
    """A database owned by a login role named radar, as a new user sets the warehouse up (the role named after the
    product, so the default search_path "$user", public finds schema radar once the first migration made it)."""
    pg18.execute(
        "DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'radar') THEN CREATE ROLE radar LOGIN; "
        "END IF; END $$"
    )
    name = pg18.new_database("radar_owned")
    pg18.execute(f'ALTER DATABASE "{name}" OWNER TO radar')
    yield name, pg18.pg.url(name, user="radar", driver="postgresql+psycopg")
    pg18.drop_database(name)


@pytest.mark.parametrize("search_path", [None, "radar, public", 'radar, "$user", public'])
def test_upgrade_is_idempotent_when_the_role_is_named_radar(pg18, radar_role_db, search_path):
    name, url = radar_role_db
    if search_path is not None:
        pg18.execute(f'ALTER ROLE radar IN DATABASE "{name}" SET search_path = {search_path}')
    every = sorted(p.stem for p in migrations.SQL_DIR.glob("*.sql"))
    assert migrations.upgrade(url) == every
    for _ in range(2):
        assert migrations.pending(url) == []
        assert migrations.upgrade(url) == []
    history = pg18.execute(
        "SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.relname = "
        "'_yoyo_migration'",
        name,
    )
    assert history == [("public",)]  # one history, where the first upgrade put it


def test_upgrade_finds_the_history_an_earlier_radar_left(pg18, radar_role_db):
    """A warehouse upgraded by an earlier radar keeps its history where that put it; one where the second upgrade then
    failed (yoyo's tables made again, empty, in schema radar) is upgraded from the full history, nothing re-applied."""
    from yoyo import get_backend, read_migrations

    name, url = radar_role_db
    every = sorted(p.stem for p in migrations.SQL_DIR.glob("*.sql"))
    earlier = get_backend(url)  # what `radar db upgrade` did before: yoyo's tables in the search_path's first schema
    with earlier.lock():
        earlier.apply_migrations(earlier.to_apply(read_migrations(str(migrations.SQL_DIR))))
    earlier.connection.close()
    failed = get_backend(url)  # the second upgrade: schema radar comes first now, and holds no history
    with pytest.raises(Exception, match="already exists"), failed.lock():
        failed.apply_migrations(failed.to_apply(read_migrations(str(migrations.SQL_DIR))))
    failed.connection.close()
    assert pg18.execute("SELECT count(*) FROM radar._yoyo_migration", name) == [(0,)]
    assert migrations.pending(url) == []
    assert migrations.upgrade(url) == []
    assert len(pg18.execute("SELECT * FROM public._yoyo_migration", name)) == len(every)


def _write_one_scrape(warehouse, target: str, at: datetime, written=None, commit=None):
    """The write path of one scrape (one statement) of `target` at `at`; after writing, it sets `written` and waits
    for `commit` before its transaction commits."""
    import pandas as pd

    from radar_pipeline.pgss_model import COUNTERS, KEY, ScrapeInfo
    from radar_pipeline.warehouse import snapshots

    statements = pd.DataFrame(
        [[1, 10, 42, True, 5, 1.0, 5, 0, 0, 0, 0.0, 0.0, None]], columns=[*KEY, *COUNTERS, "stats_since"]
    )
    key = (1, 10, 42, True)
    with warehouse.begin() as conn:
        state = snapshots.lock_and_load_state(conn, target, statements)
        plan = snapshots.plan_snapshot(state, statements, None)
        info = ScrapeInfo(target, at, 180000, "1.12", 0, None)
        result = snapshots.write_snapshot(conn, info, state, plan, {key: "SELECT 1"}, {key: 7}, {})
        if written is not None:
            written.set()
        if commit is not None:
            assert commit.wait(300)
    return result


def test_concurrent_first_scrapes_of_a_new_day_both_store(warehouse):
    """Two targets' first scrapes of a UTC day with no partition yet: each transaction finds the day missing and
    creates it; the second waits for the first to commit, and must then take its partition, not fail (it used to fail
    with DuplicateTable, and its scrape was lost)."""
    import threading
    import time
    from concurrent.futures import ThreadPoolExecutor

    at = datetime(2031, 12, 1, 0, 0, 5, tzinfo=UTC)
    assert "pgss_snapshot_p20311201" not in _partitions(warehouse)
    written, commit = threading.Event(), threading.Event()
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(_write_one_scrape, warehouse, "one", at, written, commit)
        assert written.wait(300), first.exception(timeout=0) if first.done() else "the first scrape never wrote"
        second = pool.submit(_write_one_scrape, warehouse, "two", at)
        deadline = time.monotonic() + 300
        with warehouse.connect() as conn:  # the second is blocked behind the first's new partition
            while not conn.execute(
                sa.text(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                    "AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()"
                )
            ).scalar_one():
                assert not second.done(), second.exception()
                assert time.monotonic() < deadline, "the second scrape never waited for the first"
                time.sleep(0.05)
                conn.rollback()
        commit.set()
        results = [first.result(timeout=300), second.result(timeout=300)]
    assert [r.stored_rows for r in results] == [1, 1]
    with warehouse.connect() as conn:
        stored = conn.execute(sa.text("SELECT target FROM radar.pgss_snapshot ORDER BY target")).scalars().all()
    assert stored == ["one", "two"]
    assert "pgss_snapshot_p20311201" in _partitions(warehouse)
