"""The newer pg_stat_statements counters on real PostgreSQL (issue 28, item 3): stored where the server's extension has
them and null where it lacks them (Debian's 15 has no parallel workers, wal_buffers_full or JIT deform time), read back
the same from a compacted day, and a real spill to disk named by the engine from the stored counters."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import psycopg
import sqlalchemy as sa

from radar_pipeline.engine import EngineSettings, analyse, explain_detections
from radar_pipeline.pgss_model import OPTIONAL_COUNTERS
from radar_pipeline.steps.decide import AnalysisRun, decide_span
from radar_pipeline.warehouse import compaction
from radar_pipeline.warehouse.analysis import read_cause_counters, read_window

from .helpers import scrape, snapshot_rows, statement

NOT_ON_15 = {"wal_buffers_full", "jit_deform_time", "parallel_workers_to_launch", "parallel_workers_launched"}
SORT = "SELECT count(*) FROM (SELECT g FROM generate_series(1, %s) g ORDER BY g DESC OFFSET 0) s"
UPDATE = "UPDATE items SET payload = md5(payload) WHERE grp = %s"
PARALLEL = "SELECT count(*) FROM items WHERE payload > %s"


def _workload(dsn: str, jit: bool) -> None:
    """A sort that spills (work_mem at its least), an UPDATE that writes WAL, a parallel scan and, where the server
    has JIT, a JIT-compiled one; planning tracked."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET pg_stat_statements.track_planning = on")
        conn.execute("SET work_mem = '64kB'")
        for _ in range(3):
            conn.execute(SORT, (50_000,))
            conn.execute(UPDATE, (3,))
        conn.execute(
            "SET parallel_setup_cost = 0; SET parallel_tuple_cost = 0; SET min_parallel_table_scan_size = 0; "
            "SET max_parallel_workers_per_gather = 2"
        )
        conn.execute(PARALLEL, ("0",))
        if jit:
            conn.execute("SET jit = on; SET jit_above_cost = 0; SET jit_inline_above_cost = 0")
            conn.execute(PARALLEL, ("1",))


def test_newer_counters_stored_where_the_server_has_them_and_read_back_compacted(app_db, warehouse):
    server, target = app_db
    jit = server.execute("SELECT pg_jit_available()", target.dsn.rsplit("/", 1)[1])[0][0]
    _workload(target.dsn, jit)
    scrape(target, warehouse)

    rows = snapshot_rows(warehouse, target.name).set_index("queryid")
    lacking = NOT_ON_15 if server.major == 15 else set()
    for name in OPTIONAL_COUNTERS:
        assert rows[name].isna().all() == (name in lacking), name
        assert rows[name].notna().all() == (name not in lacking), name
    sort, update, parallel = (
        rows.loc[statement(target, like)[1]]
        for like in ("SELECT count(*) FROM (SELECT g FROM generate_series%", "UPDATE items%", "%payload > $1")
    )
    assert sort.calls == 3 and sort.temp_blks_read > 0 and sort.temp_blks_written > 0
    assert sort.plans == 3 and sort.total_plan_time > 0
    assert update.wal_bytes > 10_000  # three UPDATEs of 200 rows
    if server.major >= 18:
        assert parallel.parallel_workers_to_launch > 0 and parallel.parallel_workers_launched > 0
        assert sort.parallel_workers_to_launch == 0
    if jit:
        assert parallel.jit_functions > 0 and parallel.jit_generation_time > 0

    # Compacted (today's partition, for the test: compaction leaves ended days to its schedule), the day reads back the
    # same, nulls included.
    with warehouse.connect() as conn:
        before = conn.execute(sa.text("SELECT * FROM radar.pgss_sample ORDER BY queryid, captured_at")).all()
    day = datetime.now(UTC).date()
    with warehouse.begin() as conn:
        compaction.ensure_partition(conn, day)
    with warehouse.begin() as conn:
        assert compaction.compact_day(conn, day) == len(before)
    with warehouse.connect() as conn:
        assert not conn.execute(sa.text(f"SELECT count(*) FROM radar.{compaction.raw_partition(day)}")).scalar()
        after = conn.execute(sa.text("SELECT * FROM radar.pgss_sample ORDER BY queryid, captured_at")).all()
    assert after == before


def test_a_real_spill_to_disk_is_named_from_the_stored_counters(pg18, warehouse):
    # A sort slowed at a "deploy" that lowered work_mem: before it sorts in memory, after it spills to disk. Its
    # sleep makes it the server's heaviest statement before the deploy by far (pg_stat_statements is server-wide: the
    # warehouse's own statements share the analysis's family budget, weighted by their time before, and on a loaded
    # machine they take longer: at 0.1 s a scrape it was left inconclusive once in CI) and ×3 after.
    database = pg18.new_database("spill")
    try:
        pg18.execute("CREATE EXTENSION pg_stat_statements", database)
        from radar_pipeline.config import Target

        target = Target(name="spill", dsn=pg18.pg.url(database))
        statement_sql = "SELECT pg_sleep(%s), (" + SORT.replace("%s", "%s::int") + ")"
        with psycopg.connect(target.dsn, autocommit=True) as conn:
            conn.execute("SET work_mem = '64MB'")
            scrape(target, warehouse)
            for _ in range(6):
                for _ in range(5):
                    conn.execute(statement_sql, (0.06, 20_000))
                scrape(target, warehouse)
            deploy_at = datetime.now(UTC)
            conn.execute("SET work_mem = '64kB'")
            for _ in range(6):
                for _ in range(5):
                    conn.execute(statement_sql, (0.18, 20_000))
                scrape(target, warehouse)
        span = timedelta(minutes=10)
        settings = EngineSettings(window=span)
        lo, hi = deploy_at - span, deploy_at + span
        with warehouse.connect() as conn:
            window = read_window(conn, target.name, lo, hi)
        # pg_stat_statements is server-wide: the warehouse's own statements on this server are left out of the family
        queryid = statement(target, "SELECT pg_sleep($1), (SELECT count(*)%")[1]
        ours = window.keys.index[window.keys["queryid"] == queryid]
        counters = window.counters[window.counters["query_key"].isin(ours)]
        # The window's read carries what deciding needs; the temp blocks are read after, for the detection alone.
        decided = analyse(counters, deploy_at, settings)
        assert "temp_blks_written" not in counters and decided.iloc[0].cause != "temp_spill"
        with warehouse.connect() as conn:
            causes = read_cause_counters(conn, target.name, lo, hi, window, list(ours))
        out = explain_detections(causes, decided, deploy_at, settings)
        assert len(out) == 1
        row = out.iloc[0]
        assert row.verdict == "detected", row.to_dict()
        assert row.temp_blks_per_call_before == 0 and row.temp_blks_per_call_after > 0
        assert row.cause == "temp_spill"
        assert row.cause_detail.startswith("temp blocks written per call 0 → ")
        assert row.cause_detail.endswith("(spilled to disk)")
        # The analysis itself (a deploy's, a periodic check's, a backfill's) names it so, with the same figures.
        decided_window = decide_span(AnalysisRun(warehouse, settings), "spill", target.name, deploy_at)
        stored = decided_window.verdicts.set_index("queryid").loc[queryid]
        assert (stored.verdict, stored.cause, stored.cause_detail) == ("detected", "temp_spill", row.cause_detail)
        assert (stored.temp_blks_per_call_before, stored.temp_blks_per_call_after) == (0, row.temp_blks_per_call_after)
    finally:
        pg18.drop_database(database)
