"""Plan capture benchmark: what one plan capture run costs on a target of ~400 active statements.

Run with `make bench-plans` (or `.venv/bin/python benchmarks/plan_capture_bench.py [--top-n N] [--rotation-n R]
[--runs K]`; by default RADAR_PLAN_TOP_N's and RADAR_PLAN_ROTATION_N's defaults, 6 runs). It starts two embedded
PostgreSQL 18 servers (the watched one and the warehouse, migrated) and, on the watched one, 40 tables and 400
statement shapes (10 per table: lookups, ranges, joins, aggregates, typed literals as `interval '1 day'` and
`date '…'`, UPDATEs, and a few utility statements), planned by the collector's own role (plan capture refuses a
superuser). Every shape runs once and is scraped; then each run makes 10% of the shapes run (a different tenth each
time, the first ten shapes busier), scrapes, and captures plans, and the script prints per run: statements tried (the
busiest, new, rotation), plans stored, skipped, seconds, and CPU-seconds in this process (radar), in the watched
server and in the warehouse; then the EXPLAIN (GENERIC_PLAN) cost per statement tried, and how many runs it took for
every active statement to have a plan. A last run ("aged") finds every plan older than REPLAN_AFTER, so the whole
rotation is due: the most a run costs.
"""

from __future__ import annotations

import argparse
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

from daemon_harness import tree_cpu  # noqa: E402

from radar_pipeline.config import Target  # noqa: E402
from radar_pipeline.demo.local_postgres import LocalPostgres  # noqa: E402
from radar_pipeline.steps.plan_capture import DEFAULT_ROTATION_N, DEFAULT_TOP_N, capture_target  # noqa: E402
from radar_pipeline.steps.snapshots import snapshot_target  # noqa: E402
from radar_pipeline.warehouse import migrations  # noqa: E402
from radar_pipeline.warehouse.database import make_engine  # noqa: E402
from radar_pipeline.warehouse.plans import REPLAN_AFTER  # noqa: E402

TABLES = 40
COLLECTOR = "radar_collector"
SHAPES = [
    ("SELECT v FROM t{t} WHERE id = %s", (1,)),
    ("SELECT id, v FROM t{t} WHERE grp = %s ORDER BY id LIMIT 10", (3,)),
    ("SELECT count(*) FROM t{t} WHERE id BETWEEN %s AND %s", (1, 50)),
    ("SELECT t{t}.v, t{u}.v FROM t{t} JOIN t{u} USING (id) WHERE t{t}.grp = %s", (2,)),
    ("SELECT grp, count(*) FROM t{t} GROUP BY grp HAVING count(*) > %s", (5,)),
    ("SELECT * FROM t{t} WHERE at > now() - interval '1 day' AND grp = %s", (4,)),
    ("SELECT id FROM t{t} WHERE day = date '2026-01-01' OR v LIKE %s", ("a%",)),
    ("UPDATE t{t} SET v = %s WHERE id = %s", ("x", 7)),
    ("SELECT max(id) FROM t{t} WHERE v = %s", ("y",)),
    ("ANALYZE t{t}", None),  # a utility statement: found unplannable once, not retried each run
]
STATEMENTS = TABLES * len(SHAPES)


def statement(i: int) -> tuple[str, tuple | None]:
    table, shape = divmod(i, len(SHAPES))
    text, params = SHAPES[shape]
    return text.format(t=table, u=(table + 1) % TABLES), params


def run_statements(dsn: str, indices: list[int], times: int = 1) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for i in indices:
            text, params = statement(i)
            for _ in range(times):
                conn.execute(text, params)  # type: ignore[arg-type]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top-n", type=int, default=DEFAULT_TOP_N)
    parser.add_argument("--rotation-n", type=int, default=DEFAULT_ROTATION_N)
    parser.add_argument("--runs", type=int, default=6)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="radar-plan-bench-"))
    watched = LocalPostgres(root / "watched", settings={"pg_stat_statements.max": "10000"}).start()
    store = LocalPostgres(root / "warehouse").start()
    try:
        with psycopg.connect(watched.dsn(), autocommit=True) as conn:
            conn.execute("CREATE EXTENSION pg_stat_statements")
            conn.execute(f"CREATE ROLE {COLLECTOR} LOGIN IN ROLE pg_read_all_stats")
            for t in range(TABLES):
                conn.execute(
                    f"CREATE TABLE t{t} AS SELECT g AS id, g % 20 AS grp, md5(g::text) AS v, "
                    "now() - g * interval '1 minute' AS at, date '2026-01-01' + g % 30 AS day "
                    "FROM generate_series(1, 2000) g"
                )
                conn.execute(f"CREATE INDEX ON t{t} (id)")
            conn.execute(f"GRANT SELECT, UPDATE ON ALL TABLES IN SCHEMA public TO {COLLECTOR}")
            conn.execute("SELECT pg_stat_statements_reset()")
        url = store.url(driver="postgresql+psycopg")
        migrations.upgrade(url)
        engine = make_engine(url)
        target = Target("bench", watched.url())
        collector = Target("bench", watched.url(user=COLLECTOR))

        run_statements(watched.dsn(), list(range(STATEMENTS)))
        snapshot_target(target, engine)
        assert watched.pid is not None and store.pid is not None
        print(
            f"{STATEMENTS} statement shapes on the watched server; plan_top_n {args.top_n}, "
            f"plan_rotation_n {args.rotation_n}"
        )
        header = ("run", "tried", "busiest", "new", "rotation", "stored", "skipped", "s", "radar CPU", "server", "wh")
        print("{:<5}{:>7}{:>9}{:>6}{:>10}{:>8}{:>9}{:>8}{:>11}{:>8}{:>6}".format(*header))
        per_statement: list[float] = []
        all_planned_after = None
        moving = STATEMENTS // 10
        for r in range(args.runs + 1):
            aged = r == args.runs  # the last run: every plan an hour old, so the whole rotation is due
            if aged:
                with engine.begin() as conn:
                    conn.execute(
                        sa.text("UPDATE radar.plan_check SET checked_at = checked_at - :age"), {"age": REPLAN_AFTER}
                    )
            elif r:
                start = (r * moving) % STATEMENTS
                run_statements(watched.dsn(), list(range(10)), times=20)  # the busy ones
                run_statements(watched.dsn(), [(start + k) % STATEMENTS for k in range(moving)])
                snapshot_target(target, engine)
            own, server, warehouse = time.process_time(), tree_cpu(watched.pid), tree_cpu(store.pid)
            started = time.perf_counter()
            capture = capture_target(collector, engine, args.top_n, rotation_n=args.rotation_n)
            seconds = time.perf_counter() - started
            cpu = (time.process_time() - own, tree_cpu(watched.pid) - server, tree_cpu(store.pid) - warehouse)
            assert capture.error is None and capture.source == "generic_plan", capture
            if capture.tried >= 100:
                per_statement.append(seconds / capture.tried)
            planned = capture.planned
            print(
                f"{'aged' if aged else r + 1:<5}{capture.tried:>7}{planned.get('busiest', 0):>9}"
                f"{planned.get('new', 0):>6}"
                f"{planned.get('rotation', 0):>10}{capture.stored:>8}{len(capture.skipped):>9}{seconds:>8.3f}"
                f"{cpu[0]:>11.3f}{cpu[1]:>8.3f}{cpu[2]:>6.3f}"
            )
            with engine.connect() as conn:
                unplanned = conn.execute(
                    sa.text(
                        "SELECT count(*) FROM radar.query q WHERE q.target = 'bench' AND q.query NOT LIKE 'ANALYZE%' "
                        "AND q.query ~ ' t[0-9]+ ' AND NOT EXISTS (SELECT 1 FROM radar.plan_check c WHERE "
                        "(c.target, c.dbid, c.userid, c.queryid, c.toplevel) = "
                        "(q.target, q.dbid, q.userid, q.queryid, q.toplevel))"
                    )
                ).scalar_one()
            if unplanned == 0 and all_planned_after is None and not aged:
                all_planned_after = r + 1
        with engine.connect() as conn:
            reasons = conn.execute(
                sa.text("SELECT left(reason, 60), count(*) FROM radar.plan_skip GROUP BY 1 ORDER BY 2 DESC")
            ).fetchall()
        engine.dispose()
        print("skipped, by reason:", "; ".join(f"{reason} ({n})" for reason, n in reasons))
        each = statistics.median(per_statement)
        print(f"seconds per statement tried (wall time / tried, runs of 100 or more), median: {each:.5f}")
        print(f"every workload statement had a plan after run {all_planned_after}")
    finally:
        watched.destroy()
        store.destroy()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
