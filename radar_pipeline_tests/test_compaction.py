"""Compact history (sql/0013): ended snapshot days rewritten as compact rows read the same as before, by every reader;
compaction is atomic per day, safe to re-run, merges rows written late, and retention drops both forms."""

from __future__ import annotations

import math
from datetime import UTC, date, datetime, timedelta

import numpy as np
import pandas as pd
import pytest
import sqlalchemy as sa

from radar_pipeline.defs.resources import WarehouseResource
from radar_pipeline.pgss_model import COUNTERS, KEY, OPTIONAL_COUNTERS
from radar_pipeline.steps.compaction import compact_history
from radar_pipeline.steps.retention import apply_retention
from radar_pipeline.warehouse import analysis
from radar_pipeline.warehouse.analysis import read_costs, read_samples, read_window
from radar_pipeline.warehouse.compaction import raw_partition
from radar_pipeline.warehouse.database import driver

COLUMNS = ["target", "captured_at", *KEY, *COUNTERS, "stats_since", "reset_before", "fingerprint", *OPTIONAL_COUNTERS]
# PostgreSQL 15's extension (1.10) lacks these of the newer counters (sql/0024)
NOT_ON_15 = {"wal_buffers_full", "jit_deform_time", "parallel_workers_to_launch", "parallel_workers_launched"}
EVERY = timedelta(minutes=10)
TODAY = datetime.now(UTC).date()
FIRST = TODAY - timedelta(days=3)  # three ended days, then today's (raw) rows
START = datetime.combine(FIRST, datetime.min.time(), tzinfo=UTC)
ORDER = "target, dbid, userid, queryid, toplevel, captured_at"


def _history(seed: int = 3) -> tuple[dict[str, list[datetime]], list[tuple]]:
    """Scrape times per target and stored rows over three days and four hours of today, every 10 minutes: a statement
    moving at every scrape, a nested one beside it, one moving rarely, one new on the second day, one gone from the
    view for hours and back with its counters restarted (reset_before), one whose counters went down and whose
    stats_since moved, one with stddev null (stored before migration 0007) and without the newer counters (stored
    before 0024), one whose key changed mid-day and whose newer counters start mid-day (its extension updated), one
    with only PostgreSQL 15's newer counters, and a second target."""
    rng = np.random.default_rng(seed)
    times = {
        target: [START + i * EVERY + timedelta(microseconds=int(rng.integers(0, 3_000_000))) for i in range(456)]
        for target in ("t", "u")
    }
    rows: list[tuple] = []
    since = START - timedelta(days=9, microseconds=123)
    for target, queryid, toplevel in [("t", q, True) for q in range(1, 8)] + [("t", 1, False), ("u", 1, True)]:
        calls, total, rows_, hit, read = 1_000 * queryid, 12.5 * queryid, 0, 0, 0
        newer = dict.fromkeys(OPTIONAL_COUNTERS, 0)
        stats_since = since
        for i, at in enumerate(times[target]):
            day = i // 144
            reset = False
            if queryid == 3 and i % 23:  # rarely
                continue
            if queryid == 4 and i < 200:  # new on the second day
                continue
            if queryid == 5 and 300 <= i < 330:  # gone from the view for five hours
                continue
            if queryid == 5 and i == 330:  # back, counting from zero
                calls, total, reset = 0, 0.0, True
            if queryid == 6 and i == 100:  # went down without a flag (a reset the collector missed)
                calls, total = 3, 0.25
            if queryid == 6 and i == 400:
                stats_since = at - timedelta(seconds=5)
            n = int(rng.integers(1, 500))
            calls += n
            total += float(n * rng.lognormal(0.0, 1.0))
            rows_ += n * 3
            hit += n * int(rng.integers(2, 9))
            read += int(rng.poisson(2))
            stddev = None if queryid == 7 and day == 0 else float(rng.lognormal(0.0, 0.5))
            fingerprint = 7_000 + queryid + (1 if queryid == 2 and i >= 230 else 0)
            for name in OPTIONAL_COUNTERS:
                newer[name] += float(n * rng.lognormal(0.0, 1.0)) if name.endswith("_time") else n * (i % 5)
            known = {
                name: value
                if queryid != 7 and not (queryid == 2 and i < 250) and not (queryid == 6 and name in NOT_ON_15)
                else None
                for name, value in newer.items()
            }
            rows.append(
                (
                    target, at, 5, 10, queryid, toplevel, calls, total, rows_, hit, read, n % 3, float(n % 7) / 3,
                    stddev, stats_since if queryid != 7 else None, reset, fingerprint, *known.values(),
                )
            )  # fmt: skip
    return times, rows


def _store(warehouse: sa.Engine, times: dict[str, list[datetime]], rows: list[tuple]) -> None:
    with warehouse.begin() as conn:
        conn.execute(sa.text("SELECT radar.ensure_pgss_snapshot_partitions(:d, 4)"), {"d": FIRST})
        with driver(conn).cursor() as cur:
            with cur.copy("COPY radar.pgss_info_snapshot FROM STDIN") as copy:
                for target, scrapes in times.items():
                    for at in scrapes:
                        copy.write_row((target, at, 0, None, 180000, "1.11", 8, 8))
            with cur.copy(f"COPY radar.pgss_snapshot ({', '.join(COLUMNS)}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)


def _samples(warehouse: sa.Engine) -> list[tuple]:
    with warehouse.connect() as conn:
        return conn.execute(sa.text(f"SELECT * FROM radar.pgss_sample ORDER BY {ORDER}")).all()


def _intervals(warehouse: sa.Engine, windows: list[tuple[datetime, datetime]]) -> list[list[tuple]]:
    """The whole interval view, then radar.pgss_intervals over each window, for every target."""
    with warehouse.connect() as conn:
        read = [
            conn.execute(
                sa.text(f"SELECT * FROM radar.pgss_interval ORDER BY {ORDER.replace('captured_at', 'interval_end')}")
            ).all()
        ]
        for lo, hi in windows:
            for target in ("t", "u"):
                read.append(
                    conn.execute(
                        sa.text("SELECT * FROM radar.pgss_intervals(:t, :lo, :hi) ORDER BY dbid, queryid, toplevel, 8"),
                        {"t": target, "lo": lo, "hi": hi},
                    ).all()
                )
    return read


def _windows_read(warehouse: sa.Engine, windows: list[tuple[datetime, datetime]]) -> list[pd.DataFrame]:
    """read_window of target t over each window, whole and limited to two statements (as alert charts read it)."""
    frames = []
    with warehouse.connect() as conn:
        for lo, hi in windows:
            window = read_window(conn, "t", lo, hi)
            some = read_window(conn, "t", lo, hi, only=window.keys.iloc[[0, 2]])  # by their own index entries
            with pytest.MonkeyPatch.context() as patched:  # and by the window's scan, as many statements are read
                patched.setattr(analysis, "KEYED_FEW", 0)
                scanned = read_window(conn, "t", lo, hi, only=window.keys.iloc[[0, 2]])
            pd.testing.assert_frame_equal(scanned.counters, some.counters)
            pd.testing.assert_frame_equal(scanned.keys, some.keys)
            for read in (window, some):
                frames.append(
                    read.counters.merge(read.keys, left_on="query_key", right_index=True, suffixes=("", "_k"))
                )
    return frames


WINDOWS = [
    (START + timedelta(hours=30), START + timedelta(hours=31)),  # inside the second day: q5 gone, q4 new
    (START + timedelta(hours=23, minutes=30), START + timedelta(hours=24, minutes=30)),  # across a midnight
    (START + timedelta(hours=54), START + timedelta(hours=56)),  # q5 back after its reset
    (START + timedelta(hours=71), START + timedelta(hours=73)),  # the last compacted day and today's raw rows
    (START + timedelta(hours=16, minutes=37), START + timedelta(hours=17, minutes=1)),  # q3's last row hours back
]


def _raw_rows(warehouse: sa.Engine, day: date) -> int:
    with warehouse.connect() as conn:
        return conn.execute(sa.text(f"SELECT count(*) FROM radar.{raw_partition(day)}")).scalar_one()


def test_compacted_days_read_the_same_samples_windows_and_intervals(warehouse):
    times, rows = _history()
    _store(warehouse, times, rows)
    samples, intervals, windows = _samples(warehouse), _intervals(warehouse, WINDOWS), _windows_read(warehouse, WINDOWS)
    assert len(samples) == len(rows)
    assert all(len(w) for w in windows) and all(len(i) for i in intervals)

    outcomes = compact_history(warehouse, grace=timedelta(0))

    assert [(o.day, o.error) for o in outcomes] == [((FIRST + timedelta(days=d)).isoformat(), None) for d in range(3)]
    assert sum(o.samples for o in outcomes) == sum(1 for r in rows if r[1].date() < TODAY)
    today_rows = sum(1 for r in rows if r[1].date() == TODAY)
    assert [_raw_rows(warehouse, FIRST + timedelta(days=d)) for d in range(4)] == [0, 0, 0, today_rows]
    with warehouse.connect() as conn:
        per_day = conn.execute(sa.text("SELECT day, count(*) FROM radar.pgss_compact GROUP BY 1 ORDER BY 1")).all()
    assert [n for _, n in per_day] == [8, 9, 9]  # a row per statement per day (q4 from the second day)
    after = _samples(warehouse)
    assert after == samples  # every column of every sample, floats and times exact, nulls kept
    assert _intervals(warehouse, WINDOWS) == intervals
    for before, now in zip(windows, _windows_read(warehouse, WINDOWS), strict=True):
        pd.testing.assert_frame_equal(now, before)
    assert [(r.queryid, r.calls < 500) for r in after if r.reset_before] == [(5, True)]
    assert any(r.stddev_exec_time is None for r in after) and any(r.stats_since is None for r in after)
    assert not math.isnan(after[0].total_exec_time)


def _window_by_rule(rows: list[tuple], lo: datetime, hi: datetime) -> list[tuple]:
    """(queryid, toplevel, captured_at, calls) of target t's window (lo, hi] by the rule, from the stored rows: each
    statement's rows inside, after its last row at or before lo."""
    out = []
    for queryid, toplevel in sorted({(r[4], r[5]) for r in rows if r[0] == "t"}):
        mine = sorted((r[1], r[6]) for r in rows if r[0] == "t" and (r[4], r[5]) == (queryid, toplevel))
        inside = [(queryid, toplevel, at, calls) for at, calls in mine if lo < at <= hi]
        earlier = [(queryid, toplevel, at, calls) for at, calls in mine if at <= lo]
        out += (earlier[-1:] + inside) if inside else []
    return out


def test_a_window_cut_from_a_wider_span_is_the_window_read_alone(warehouse):
    """A run of several deploys reads their common span once and cuts each window from it (read_samples): the cut
    must be exactly read_window's, raw and compacted, for statements gone, back after a reset, rare or new."""
    times, rows = _history()
    _store(warehouse, times, rows)
    for compacted in (False, True):
        if compacted:
            assert compact_history(warehouse, grace=timedelta(0))
        with warehouse.connect() as conn:
            for lo, hi in WINDOWS:
                span = read_samples(conn, "t", lo - timedelta(hours=5), hi + timedelta(hours=3))
                alone, cut = read_window(conn, "t", lo, hi), span.window(lo, hi)
                assert len(cut.counters) < len(span.statement)
                pd.testing.assert_frame_equal(cut.counters, alone.counters)
                pd.testing.assert_frame_equal(cut.keys, alone.keys)
                got = cut.counters.merge(cut.keys[["queryid"]], left_on="query_key", right_index=True)
                columns = [got[c] for c in ("queryid", "toplevel", "captured_at", "calls")]
                assert list(zip(*columns, strict=True)) == _window_by_rule(rows, lo, hi)
            with pytest.raises(ValueError, match="is not inside the samples read"):
                span.window(lo - timedelta(hours=6), hi)
            with pytest.raises(ValueError, match="has no time zone"):  # the server and numpy would read it apart
                read_window(conn, "t", lo.replace(tzinfo=None), hi)
            # which days a backfill's run may read whole for several deploys (steps.deploy_analysis.shared_spans)
            costs = read_costs(conn, {"t": (START, START + timedelta(days=3, hours=4))})
            assert costs["t"].compacted_days == ({FIRST + timedelta(days=d) for d in range(3)} if compacted else set())
            assert costs["t"].compacted(START, START + timedelta(days=2, hours=23)) == compacted
            assert not costs["t"].compacted(START, START + timedelta(days=3, hours=1))  # today's rows are raw


def test_a_failure_mid_way_leaves_the_day_raw_and_a_rerun_finishes(warehouse):
    times, rows = _history()
    _store(warehouse, times, rows)
    samples = _samples(warehouse)
    second = FIRST + timedelta(days=1)
    held = _raw_rows(warehouse, second)
    # A reader of the second day holds it open: the compaction writes the day's compact rows, then cannot empty the
    # raw partition within its lock timeout and fails there.
    with warehouse.connect() as reader:
        reader.execute(sa.text(f"SELECT count(*) FROM radar.{raw_partition(second)}"))
        outcomes = compact_history(warehouse, grace=timedelta(0), lock_timeout=timedelta(milliseconds=300))
        assert [o.error is None for o in outcomes] == [True, False, True]
        assert "lock timeout" in (outcomes[1].error or "")
        reader.rollback()
    assert _raw_rows(warehouse, second) == held
    with warehouse.connect() as conn:
        days = conn.execute(sa.text("SELECT DISTINCT day FROM radar.pgss_compact ORDER BY 1")).scalars().all()
    assert days == [FIRST, FIRST + timedelta(days=2)]
    assert _samples(warehouse) == samples

    assert [o.day for o in compact_history(warehouse, grace=timedelta(0))] == [second.isoformat()]
    assert compact_history(warehouse, grace=timedelta(0)) == []  # nothing left to do: a re-run changes nothing
    assert _samples(warehouse) == samples


def test_rows_written_into_a_compacted_day_are_merged_by_the_next_compaction(warehouse):
    times, rows = _history()
    _store(warehouse, times, rows)
    compact_history(warehouse, grace=timedelta(0))
    last_day = FIRST + timedelta(days=2)
    late_at = datetime.combine(last_day, datetime.max.time(), tzinfo=UTC)  # a lagging clock's last scrape of the day
    late = [
        ("t", late_at, 5, 10, 1, True, 10**9, 1e9 + 0.5, 1, 2, 3, 4, 0.5, 1.5, None, False, 7_001, *range(15)),
        ("t", late_at, 5, 10, 99, True, 1, 1.0, 1, 1, 1, 1, 0.0, None, None, False, 7_099, *[None] * 15),  # first late
    ]
    _store(warehouse, {"t": [late_at]}, late)
    expected = _samples(warehouse)
    assert [o.day for o in compact_history(warehouse, grace=timedelta(0))] == [last_day.isoformat()]
    assert _raw_rows(warehouse, last_day) == 0
    assert _samples(warehouse) == expected


def test_days_compacted_before_the_newer_counters_read_them_as_null_and_take_late_rows(warehouse):
    # A day compacted before migration 0024 has no arrays for the newer counters: its samples read them as null, the
    # rest as before, and a late row with them is merged into it.
    times, rows = _history()
    _store(warehouse, times, rows)
    compact_history(warehouse, grace=timedelta(0))
    with warehouse.begin() as conn:
        conn.execute(sa.text(f"UPDATE radar.pgss_compact SET {', '.join(f'{c} = NULL' for c in OPTIONAL_COUNTERS)}"))
    raw = len(COLUMNS) - len(OPTIONAL_COUNTERS)  # the row type's columns before 0024
    old_form = [r[:raw] + (None,) * len(OPTIONAL_COUNTERS) if r[1].date() < TODAY else r for r in _expected(rows)]
    assert _samples(warehouse) == old_form
    last_day = FIRST + timedelta(days=2)
    late_at = datetime.combine(last_day, datetime.max.time(), tzinfo=UTC)
    _store(
        warehouse,
        {"t": [late_at]},
        [("t", late_at, 5, 10, 1, True, 10**9, 1e9 + 0.5, 1, 2, 3, 4, 0.5, 1.5, None, False, 7_001, *range(15))],
    )
    expected = _samples(warehouse)
    assert [o.day for o in compact_history(warehouse, grace=timedelta(0))] == [last_day.isoformat()]
    assert _samples(warehouse) == expected
    late = [r for r in expected if r[1] == late_at][0]
    assert late[-15:] == (0, 1.0, 2, 3.0, 4.0, 5, 6, 7, 8.0, 9.0, 10.0, 11.0, 12.0, 13, 14)


def test_the_current_day_and_the_grace_period_stay_raw(warehouse):
    times, rows = _history()
    _store(warehouse, times, rows)
    outcomes = compact_history(warehouse, grace=timedelta(days=2))
    assert [o.day for o in outcomes] == [FIRST.isoformat()]  # the two later days ended less than two days ago
    assert _raw_rows(warehouse, TODAY) > 0


def test_retention_drops_compacted_days_with_the_raw_ones(warehouse):
    times, rows = _history()
    _store(warehouse, times, rows)
    compact_history(warehouse, grace=timedelta(0))
    dropped = apply_retention(warehouse, keep_days=1, today=TODAY)
    kept_from = TODAY - timedelta(days=1)
    assert sorted(dropped) == sorted(
        f"{table}_p{FIRST + timedelta(days=d):%Y%m%d}" for d in range(2) for table in ("pgss_snapshot", "pgss_compact")
    )
    with warehouse.connect() as conn:
        days = conn.execute(sa.text("SELECT DISTINCT day FROM radar.pgss_compact")).scalars().all()
    assert days == [kept_from]
    left = _samples(warehouse)
    assert {r.captured_at.date() for r in left} == {kept_from, TODAY}
    assert left == [r for r in _expected(rows) if r[1] >= datetime.combine(kept_from, datetime.min.time(), tzinfo=UTC)]


def _expected(rows: list[tuple]) -> list[tuple]:
    """Stored rows in radar.pgss_snapshot's column order (stddev_exec_time after fingerprint, as migration 0007 added
    it, then the newer counters of 0024)."""
    last = ["stddev_exec_time", *OPTIONAL_COUNTERS]
    order = [c for c in COLUMNS if c not in last] + last
    index = [COLUMNS.index(c) for c in order]
    return sorted((tuple(r[i] for i in index) for r in rows), key=lambda r: (r[0], r[2], r[3], r[4], r[5], r[1]))


def test_rekeying_rewrites_the_keys_of_compacted_days(warehouse):
    from radar_pipeline.collector.fingerprint import fingerprint
    from radar_pipeline.steps.statement_keys import rekey

    times, rows = _history()
    _store(warehouse, times, rows)
    compact_history(warehouse, grace=timedelta(0))
    with warehouse.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO radar.query VALUES ('t', 5, 10, 1, true, 7001, 'SELECT * FROM t01 WHERE id = $1', "
                "now(), now(), 0, 0, NULL, NULL)"
            )
        )
        conn.execute(sa.text("UPDATE radar.key_version SET version = 1"))
    assert rekey(warehouse) == 1
    with warehouse.connect() as conn:
        keys = (
            conn.execute(
                sa.text(
                    "SELECT DISTINCT fingerprint FROM radar.pgss_sample WHERE target = 't' AND queryid = 1 AND toplevel"
                )
            )
            .scalars()
            .all()
        )
    assert keys == [fingerprint("SELECT * FROM t01 WHERE id = $1")]


def test_compaction_runs_through_dagster(warehouse_url, warehouse):
    import dagster as dg

    from radar_pipeline.definitions import defs
    from radar_pipeline.defs.collection.compaction import pgss_compaction

    repo = defs().get_repository_def()
    assert repo.has_job("pgss_compaction_job")
    schedule = repo.get_schedule_def("pgss_compaction_schedule")
    assert schedule.job_name == "pgss_compaction_job" and schedule.default_status == dg.DefaultScheduleStatus.RUNNING
    times, rows = _history()
    _store(warehouse, times, rows)
    result = dg.materialize([pgss_compaction], resources={"warehouse": WarehouseResource(url=warehouse_url)})
    assert result.success
    (materialization,) = result.asset_materializations_for_node("pgss_compaction")
    compacted = sum(1 for r in rows if r[1].date() < TODAY - timedelta(days=1))  # the day just ended waits its hour
    assert materialization.metadata["samples"].value >= compacted


def test_plan_capture_chooses_the_same_statements_from_compacted_days(warehouse):
    from radar_pipeline.warehouse.plans import candidates

    times, rows = _history()
    _store(warehouse, times, rows)
    with warehouse.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO radar.query SELECT 't', 5, 10, q, l, 7000 + q, 'SELECT ' || q, now(), now(), 0, 0, NULL, "
                "NULL FROM generate_series(1, 7) q, (VALUES (true), (false)) v(l)"
            )
        )

    def chosen() -> list:
        with warehouse.connect() as conn:
            return [candidates(conn, "t", 5, since, top_n=4) for since in (START, START + timedelta(hours=40))]

    before = chosen()
    compact_history(warehouse, grace=timedelta(0))
    assert chosen() == before and all(len(c) == 4 for c in before)


def test_a_newer_counter_after_a_gap_reads_back_as_stored(warehouse):
    # A newer counter known, then not (a scrape by an extension without it), then known again: 10, null, 15 reads
    # back 10, null, 15 after compaction (the 15 encoded against the 10, not whole), and so after a merge of late rows.
    at = [START + timedelta(hours=h) for h in range(4)]

    def row(i: int, value: int | None) -> tuple:
        newer = [None if value is None else value + n for n in range(len(OPTIONAL_COUNTERS))]
        return ("t", at[i], 5, 10, 1, True, 100 + i, 1.5 + i, i, i, i, 0, 0.0, 0.5, None, False, 7_001, *newer)

    _store(warehouse, {"t": at[:3]}, [row(0, 10), row(1, None), row(2, 15)])
    expected = _samples(warehouse)
    assert [r.plans for r in expected] == [10, None, 15] and [r.wal_bytes for r in expected] == [15, None, 20]
    compact_history(warehouse, grace=timedelta(0))
    assert _raw_rows(warehouse, FIRST) == 0
    assert _samples(warehouse) == expected
    _store(warehouse, {"t": at[3:]}, [row(3, 40)])
    expected = _samples(warehouse)
    compact_history(warehouse, grace=timedelta(0))
    assert _samples(warehouse) == expected and [r.plans for r in expected] == [10, None, 15, 40]
