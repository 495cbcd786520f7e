"""Catalog benchmark: the CPU a target-scrape costs with the catalog and settings facts read (issue 28).

Run with `.venv/bin/python benchmarks/catalog_bench.py`. It starts two embedded PostgreSQL 18 servers (the watched one
and the warehouse) and gives the watched one 50 tables of 10 columns, each with a primary key and 3 more indexes, a
check constraint, a trigger and statistics, and a workload of 500 statements. It prints the median CPU-seconds (this
process, the watched server's processes, the warehouse server's) of: a target-scrape as the collector runs it (pgss
and the catalog, nothing changed in the catalog: digests only), the catalog read alone with nothing changed, and the
catalog read after an index was dropped (that kind read row by row and stored).
"""

from __future__ import annotations

import shutil
import statistics
import sys
import tempfile
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from daemon_harness import tree_cpu  # noqa: E402

from radar_pipeline.collector import session  # noqa: E402
from radar_pipeline.config import Target  # noqa: E402
from radar_pipeline.demo.local_postgres import LocalPostgres  # noqa: E402
from radar_pipeline.steps.snapshots import collect_catalog, snapshot_target  # noqa: E402
from radar_pipeline.warehouse import migrations  # noqa: E402
from radar_pipeline.warehouse.database import make_engine  # noqa: E402

TABLES, COLUMNS, STATEMENTS, REPEATS = 50, 10, 500, 9


def cpu(fn, pids: list[int]) -> tuple[float, ...]:  # type: ignore[no-untyped-def]
    """CPU-seconds of fn: in this process, then in each server's process tree."""
    import time

    own, servers = time.process_time(), [tree_cpu(p) for p in pids]
    fn()
    return (time.process_time() - own, *(tree_cpu(p) - s for p, s in zip(pids, servers, strict=True)))


def report(name: str, samples: list[tuple[float, ...]]) -> None:
    """One line: the medians per process and their total."""
    own, watched, warehouse = (statistics.median(s[i] for s in samples) for i in range(3))
    print(
        f"{name:<52} {own + watched + warehouse:6.3f} CPU-s (radar {own:.3f}, watched server {watched:.3f}, "
        f"warehouse {warehouse:.3f})"
    )


def main() -> None:
    root = Path(tempfile.mkdtemp(prefix="radar-catalog-bench-"))
    watched = LocalPostgres(root / "watched").start()
    store = LocalPostgres(root / "warehouse").start()
    try:
        with psycopg.connect(watched.dsn(), autocommit=True) as conn:
            conn.execute("CREATE EXTENSION pg_stat_statements")
            conn.execute("CREATE FUNCTION audit() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$")
            for t in range(TABLES):
                cols = ", ".join(f"c{c} int" for c in range(COLUMNS))
                conn.execute(f"CREATE TABLE t{t} (id int PRIMARY KEY, {cols}, CHECK (c0 >= 0))")
                for i in range(1, 4):
                    conn.execute(f"CREATE INDEX t{t}_c{i}_idx ON t{t} (c{i})")
                conn.execute(f"CREATE TRIGGER t{t}_audit BEFORE UPDATE ON t{t} FOR EACH ROW EXECUTE FUNCTION audit()")
                conn.execute(f"INSERT INTO t{t} SELECT g, {', '.join(['g'] * COLUMNS)} FROM generate_series(1, 100) g")
            conn.execute("ANALYZE")
            conn.execute("CREATE ROLE radar_collector LOGIN IN ROLE pg_read_all_stats")
            conn.execute("SELECT pg_stat_statements_reset()")
        url = store.url(driver="postgresql+psycopg")
        migrations.upgrade(url)
        engine = make_engine(url)
        target = Target("bench", watched.url(user="radar_collector"))
        assert watched.pid is not None and store.pid is not None
        pids = [watched.pid, store.pid]

        def workload() -> None:
            with psycopg.connect(watched.dsn(), autocommit=True) as conn, conn.pipeline():
                for i in range(STATEMENTS):
                    conn.execute(f"SELECT c{i % COLUMNS} FROM t{i % TABLES} WHERE c{i // TABLES % COLUMNS} = %s", (1,))

        workload()
        snapshot_target(target, engine, "radar_collector")  # the first: every statement and fact is new
        scrapes, idle, changed = [], [], []
        with session.connect(target) as conn:
            for r in range(REPEATS):
                workload()
                scrapes.append(cpu(lambda: snapshot_target(target, engine, "radar_collector"), pids))
                idle.append(cpu(lambda: collect_catalog(conn, target, engine), pids))
                with psycopg.connect(watched.dsn(), autocommit=True) as admin:
                    admin.execute(f"DROP INDEX t{r}_c1_idx")
                changed.append(cpu(lambda: collect_catalog(conn, target, engine), pids))
        engine.dispose()
        print(
            f"{TABLES} tables × {COLUMNS} columns, 4 indexes, a constraint and a trigger each; {STATEMENTS} statements"
        )
        print(f"medians of {REPEATS}; the servers' CPU counted in clock ticks (1/100 s)")
        report("target-scrape (pgss + catalog, catalog unchanged)", scrapes)
        report("catalog read alone, nothing changed (digests)", idle)
        report("catalog read alone, an index dropped (reread, stored)", changed)
    finally:
        watched.destroy()
        store.destroy()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
