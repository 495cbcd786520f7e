"""Catalog benchmark: the CPU a target-scrape costs with the catalog and settings facts read (issue 28).

Run with `.venv/bin/python benchmarks/catalog_bench.py [TABLES [REPEATS]]` (default 50 tables, 30 repeats). It starts
two embedded PostgreSQL 18 servers (the watched one and the warehouse) and gives the watched one TABLES tables of 10
columns, each with a primary key and 3 more indexes, a
check constraint, a trigger and statistics, and a workload of 500 statements. It prints the mean CPU-seconds (this
process, the watched server's processes, the warehouse server's) of: a target-scrape as the collector runs it (pgss
and the catalog, nothing changed in the catalog: digests only), the same scrape without the catalog read, the catalog
read alone in a new session with nothing changed, the digest statement alone, and after an index was dropped (that
kind read row by row and stored), and the wait samples alone (collector/waits.py, with SESSIONS sessions active). A
scrape reads the catalog at most every RADAR_CATALOG_INTERVAL (and after a deploy),
so the catalog's share of a scrape is the catalog read's cost times the scrape period over that interval.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path
from unittest import mock

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from daemon_harness import tree_cpu  # noqa: E402

from radar_pipeline.collector import catalog, session  # noqa: E402
from radar_pipeline.collector.waits import SAMPLES  # noqa: E402
from radar_pipeline.config import Target  # noqa: E402
from radar_pipeline.demo.local_postgres import LocalPostgres  # noqa: E402
from radar_pipeline.steps import snapshots  # noqa: E402
from radar_pipeline.steps.snapshots import collect_catalog, collect_waits, snapshot_target  # noqa: E402
from radar_pipeline.warehouse import migrations  # noqa: E402
from radar_pipeline.warehouse.database import make_engine  # noqa: E402

TABLES = int(sys.argv[1]) if len(sys.argv) > 1 else 50
REPEATS = int(sys.argv[2]) if len(sys.argv) > 2 else 30
COLUMNS, STATEMENTS = 10, 500
SESSIONS = 20


class Costs:
    """CPU-seconds summed over repeated calls (this process, the watched server's processes, the warehouse's): the
    servers' are counted in clock ticks of 1/100 s, so a sum over many calls, divided, is the only precise figure."""

    def __init__(self, pids: list[int]) -> None:
        self.pids, self.sums, self.calls = pids, [0.0, 0.0, 0.0], 0

    def add(self, fn) -> None:  # type: ignore[no-untyped-def]
        """Run fn once, adding its CPU-seconds."""
        servers = [tree_cpu(p) for p in self.pids]  # reading /proc costs this process CPU: not counted as fn's
        own = time.process_time()
        fn()
        own = time.process_time() - own
        spent = (own, *(tree_cpu(p) - s for p, s in zip(self.pids, servers, strict=True)))
        self.sums = [a + b for a, b in zip(self.sums, spent, strict=True)]
        self.calls += 1

    def line(self, name: str) -> str:
        """The mean per call, per process and in total."""
        own, watched, warehouse = (s / self.calls for s in self.sums)
        return (
            f"{name:<50} {own + watched + warehouse:6.3f} CPU-s (radar {own:.4f}, watched server {watched:.4f}, "
            f"warehouse {warehouse:.4f})"
        )


def main() -> None:
    root = Path(tempfile.mkdtemp(prefix="radar-catalog-bench-"))
    watched = LocalPostgres(root / "watched").start()
    store = LocalPostgres(root / "warehouse").start()
    try:
        with psycopg.connect(watched.dsn(), autocommit=True) as conn:
            conn.execute("CREATE EXTENSION pg_stat_statements")
            conn.execute("CREATE FUNCTION audit() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$")
            cols = ", ".join(f"c{c} int" for c in range(COLUMNS))
            ones = ", ".join(["g"] * COLUMNS)
            for first in range(0, TABLES, 1000):  # a DO block per 1,000 tables: each table's locks last to its end
                last = min(TABLES, first + 1000) - 1
                conn.execute(
                    f"DO $$ BEGIN FOR t IN {first}..{last} LOOP "
                    f"EXECUTE format('CREATE TABLE t%s (id int PRIMARY KEY, {cols}, CHECK (c0 >= 0))', t); "
                    "FOR i IN 1..3 LOOP EXECUTE format('CREATE INDEX t%s_c%s_idx ON t%s (c%s)', t, i, t, i); END LOOP; "
                    "EXECUTE format('CREATE TRIGGER t%s_audit BEFORE UPDATE ON t%s FOR EACH ROW "
                    "EXECUTE FUNCTION audit()', t, t); "
                    f"EXECUTE format('INSERT INTO t%s SELECT g, {ones} FROM generate_series(1, 100) g', t); "
                    "END LOOP; END $$"
                )
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
        # SESSIONS clients active the whole time (in pg_sleep), so the wait samples have sessions to group
        sleepers = [psycopg.connect(watched.dsn(), autocommit=True) for _ in range(SESSIONS)]
        for conn in sleepers:
            conn.pgconn.send_query(b"SELECT pg_sleep(3600)")
        with_catalog, without_catalog, idle, changed, digest, waits = (Costs(pids) for _ in range(6))
        for r in range(REPEATS):
            with psycopg.connect(watched.dsn(), autocommit=True) as admin:
                admin.execute(f"DROP INDEX t{r}_c1_idx")
            with session.connect(target) as conn:
                conn.execute("SELECT 1")
                changed.add(lambda: collect_catalog(conn, target, engine))
            snapshot_target(target, engine, "radar_collector")  # the DROP INDEX is a new statement: read its text
            workload()
            with_catalog.add(lambda: snapshot_target(target, engine, "radar_collector"))
            workload()
            with mock.patch.object(snapshots, "collect_catalog", return_value=0):  # the scrape as before issue 28
                without_catalog.add(lambda: snapshot_target(target, engine, "radar_collector"))
            with session.connect(target) as conn:  # the catalog read as a scrape makes it: in a new session
                conn.execute("SELECT 1")
                idle.add(lambda: collect_catalog(conn, target, engine))
                digest.add(lambda: catalog.read_digests(conn, target))
                waits.add(lambda: collect_waits(conn, target, engine))
        for conn in sleepers:
            conn.cancel_safe()
            conn.close()
        engine.dispose()
        print(
            f"{TABLES} tables × {COLUMNS} columns, 4 indexes, a constraint and a trigger each; {STATEMENTS} statements"
        )
        print(f"means of {REPEATS} calls each")
        print(with_catalog.line("target-scrape (pgss + catalog at its interval)"))
        print(without_catalog.line("target-scrape without the catalog read"))
        print(idle.line("catalog read, nothing changed (digests only)"))
        print(digest.line("digest statement alone"))
        print(changed.line("catalog read, an index dropped (reread, stored)"))
        print(waits.line(f"wait samples ({SAMPLES} instants, {SESSIONS} sessions active)"))
    finally:
        watched.destroy()
        store.destroy()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
