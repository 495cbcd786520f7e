"""Snapshot benchmark: 5,000 distinct statements in pg_stat_statements, scraped and written to the warehouse.

Run with `make bench` (or `.venv/bin/python benchmarks/snapshot_bench.py`). It starts two embedded PostgreSQL 18
servers (the watched one and the warehouse), so the watched server's pg_stat_statements holds only the workload. It
prints, for each kind of scrape, the median seconds, rows written per second and the ratio to an anchor measured in the
same run: a bare `SELECT * FROM pg_stat_statements` fetched by psycopg (texts included), the least any collector does.
Then the CPU of a typical scrape (in this process and in the warehouse server's processes) against the anchor's, the
warehouse bytes per stored row (table and index) and what one target costs per day when 10% of its statements run in a
given minute, plus the process's peak memory.
"""

from __future__ import annotations

import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psycopg
import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from daemon_harness import CLOCK_TICK, tree_cpu  # noqa: E402

from radar_pipeline.config import Target  # noqa: E402
from radar_pipeline.demo.local_postgres import LocalPostgres  # noqa: E402
from radar_pipeline.steps.snapshots import snapshot_target  # noqa: E402
from radar_pipeline.warehouse import migrations  # noqa: E402
from radar_pipeline.warehouse.database import make_engine  # noqa: E402

TABLES, COLUMNS = 50, 10  # 50 tables × 10 selected columns × 10 filter columns = 5,000 statement shapes
STATEMENTS = TABLES * COLUMNS * COLUMNS
REPEATS = 7
MOVING_SHARE = 0.10


def statement(i: int) -> str:
    table, rest = divmod(i, COLUMNS * COLUMNS)
    select, where = divmod(rest, COLUMNS)
    return f"SELECT c{select} FROM t{table} WHERE c{where} = %s"


def run_statements(dsn: str, indices: range | list[int]) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        with conn.pipeline():
            for i in indices:
                conn.execute(statement(i), (1,))


def timed(fn) -> float:  # type: ignore[no-untyped-def]
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def costed(fn, warehouse_pid: int, cpu: list[tuple[float, float]]) -> float:  # type: ignore[no-untyped-def]
    """Seconds of fn; appends to `cpu` its CPU-seconds in this process and in the warehouse server's processes."""
    own, server = time.process_time(), tree_cpu(warehouse_pid)
    seconds = timed(fn)
    cpu.append((time.process_time() - own, tree_cpu(warehouse_pid) - server))
    return seconds


def main() -> None:
    root = Path(tempfile.mkdtemp(prefix="radar-bench-"))
    watched = LocalPostgres(root / "watched", settings={"pg_stat_statements.max": "10000"}).start()
    store = LocalPostgres(root / "warehouse").start()
    try:
        with psycopg.connect(watched.dsn(), autocommit=True) as conn:
            conn.execute("CREATE EXTENSION pg_stat_statements")
            for t in range(TABLES):
                cols = ", ".join(f"c{c} int" for c in range(COLUMNS))
                conn.execute(f"CREATE TABLE t{t} ({cols})")
            conn.execute("SELECT pg_stat_statements_reset()")
        url = store.url(driver="postgresql+psycopg")
        migrations.upgrade(url)
        engine = make_engine(url)
        target = Target("bench", watched.url())

        run_statements(watched.dsn(), range(STATEMENTS))
        cold = timed(lambda: snapshot_target(target, engine))
        with psycopg.connect(watched.dsn(), autocommit=True) as conn:
            listed = conn.execute("SELECT count(*) FROM pg_stat_statements").fetchone()[0]

        def anchor() -> None:
            with psycopg.connect(watched.dsn(), autocommit=True) as conn:
                conn.execute("SELECT * FROM pg_stat_statements").fetchall()

        anchors, idle, typical, everything = [], [], [], []
        typical_cpu: list[tuple[float, float]] = []
        anchor_cpu: list[tuple[float, float]] = []
        assert store.pid is not None
        moving = max(1, int(STATEMENTS * MOVING_SHARE))
        for r in range(REPEATS):
            anchors.append(costed(anchor, store.pid, anchor_cpu))
            idle.append(timed(lambda: snapshot_target(target, engine)))
            start = (r * moving) % STATEMENTS
            run_statements(watched.dsn(), [(start + k) % STATEMENTS for k in range(moving)])
            typical.append(costed(lambda: snapshot_target(target, engine), store.pid, typical_cpu))
        for _ in range(3):
            run_statements(watched.dsn(), range(STATEMENTS))
            everything.append(timed(lambda: snapshot_target(target, engine)))

        with engine.connect() as conn:
            rows = conn.execute(sa.text("SELECT count(*) FROM radar.pgss_snapshot")).scalar_one()
            table_bytes = conn.execute(
                sa.text(
                    "SELECT sum(pg_total_relation_size(i.inhrelid)) FROM pg_inherits i "
                    "WHERE i.inhparent = 'radar.pgss_snapshot'::regclass"
                )
            ).scalar_one()
            info_bytes = conn.execute(sa.text("SELECT pg_total_relation_size('radar.pgss_info_snapshot')")).scalar_one()
            info_rows = conn.execute(sa.text("SELECT count(*) FROM radar.pgss_info_snapshot")).scalar_one()
        engine.dispose()

        anchor_s = statistics.median(anchors)
        per_row = float(table_bytes) / rows
        per_info = float(info_bytes) / info_rows
        day_rows = moving * 1440
        day_bytes = day_rows * per_row + 1440 * per_info
        print(f"statements in pg_stat_statements: {listed} (workload {STATEMENTS}); median of {REPEATS} runs")
        print(f"anchor: bare SELECT * FROM pg_stat_statements, fetched: {anchor_s:.4f} s")
        print(f"{'scrape':<44}{'seconds':>9}{'rows':>7}{'rows/s':>10}{'× anchor':>10}")
        for name, seconds, stored in [
            ("first (all new: texts read, fingerprinted)", [cold], listed),
            ("idle (nothing moved)", idle, 0),
            (f"typical ({MOVING_SHARE:.0%} of statements moved)", typical, moving),
            ("worst (every statement moved)", everything, STATEMENTS),
        ]:
            s = statistics.median(seconds)
            rate = f"{stored / s:,.0f}" if stored else "-"
            print(f"{name:<44}{s:>9.4f}{stored:>7}{rate:>10}{s / anchor_s:>10.2f}")
        radar_cpu = statistics.median(c[0] for c in typical_cpu)
        anchor_cpu_s = statistics.median(c[0] for c in anchor_cpu)
        server_cpu = statistics.median(c[1] for c in typical_cpu)
        print(
            f"CPU per typical scrape: {radar_cpu:.3f} s in radar's process ({radar_cpu / anchor_cpu_s:.2f} × the "
            f"anchor's {anchor_cpu_s:.3f} s), {server_cpu:.3f} s in the warehouse server (medians of {REPEATS}; the "
            f"server's counted in clock ticks of 1/{CLOCK_TICK} s)"
        )
        print(f"warehouse bytes per stored row (table + primary key): {per_row:,.0f} over {rows} rows")
        print(
            f"one target per day, {moving} of {STATEMENTS} statements moving each minute: "
            f"{day_rows:,} rows, {day_bytes / 2**20:,.1f} MiB"
        )
        peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"peak memory (max RSS of this process): {peak_mib:,.0f} MiB")
    finally:
        watched.destroy()
        store.destroy()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
