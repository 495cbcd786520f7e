"""History estimates' cost (engine 2.3): the nightly sums of a day, and the read every analysis adds.

Run with `make bench-noise` (or `.venv/bin/python benchmarks/noise_bench.py [--queries N]`). It starts an embedded
PostgreSQL 18 as the warehouse, then:

2. the nightly step (steps.noise.update_noise) on one target's day of one-minute scrapes of `--queries` statements
   (analysis_bench.fill), read raw, then again after the day was compacted (steps.compaction), seconds each; the
   anchor is read_window over one hour of the same day, the analysis's own read, in the same run;
1. the analysis's read (steps.noise.prior_for: one grouped query over 7 days of radar.statement_noise, and the
   estimates) for a target of 5,000 statements on a warehouse holding 8 such targets × 14 days of sums, median of 5,
   against read_window of that target's ±30-minute window in the same run (the raw samples the analysis reads
   anyway), with the query's EXPLAIN (ANALYZE, BUFFERS) summary; and the peak memory of one read.
"""

from __future__ import annotations

import argparse
import io
import sys
import tempfile
import time
import tracemalloc
from datetime import timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from analysis_bench import START, fill  # noqa: E402
from hot_paths_bench import explain, timed  # noqa: E402

from radar_pipeline.demo.local_postgres import LocalPostgres  # noqa: E402
from radar_pipeline.steps.compaction import compact_history  # noqa: E402
from radar_pipeline.steps.noise import PRIOR_DAYS, prior_for, update_noise  # noqa: E402
from radar_pipeline.warehouse import migrations  # noqa: E402
from radar_pipeline.warehouse import noise as store  # noqa: E402
from radar_pipeline.warehouse.analysis import read_window  # noqa: E402
from radar_pipeline.warehouse.database import driver, make_engine  # noqa: E402

STATEMENTS, TARGETS, DAYS = 5000, 8, 14


def plan_nodes(plan: dict) -> str:
    """Execution time and the plan's nodes, outermost first (index named where one is used)."""
    nodes: list[str] = []

    def walk(node: dict) -> None:
        index = f" using {node['Index Name']}" if "Index Name" in node else ""
        nodes.append(f"{node['Node Type']}{index}")
        for child in node.get("Plans", []):
            walk(child)

    walk(plan["Plan"])
    return f"{plan['Execution Time']:.1f} ms: " + " > ".join(nodes)


def nightly(engine: sa.Engine, queries: int) -> None:
    fill(engine, "night", queries, 1441, regressed_from=None, seed=3)
    with engine.begin() as conn:
        conn.execute(sa.text("ANALYZE radar.pgss_snapshot"))
    hour = (START + timedelta(hours=12), START + timedelta(hours=13))
    with engine.connect() as conn:
        anchor = timed(lambda: read_window(conn, "night", *hour), 3, warm=True)
    days = (pd.Timestamp.now(tz="UTC").date() - START.date()).days + 2
    started = time.perf_counter()
    done = update_noise(engine, days=days)
    raw = time.perf_counter() - started
    assert [d.error for d in done] == [None] * len(done), done
    compact_history(engine)
    with engine.begin() as conn:
        conn.execute(sa.text("DELETE FROM radar.statement_noise_day"))
        conn.execute(sa.text("DELETE FROM radar.statement_noise"))
    with engine.connect() as conn:
        anchor_compacted = timed(lambda: read_window(conn, "night", *hour), 3, warm=True)
    started = time.perf_counter()
    update_noise(engine, days=days)
    compacted = time.perf_counter() - started
    samples = sum(d.samples for d in done)
    print(f"2. nightly sums of one day: {queries:,} statements × 1,440 scrapes ({samples:,} samples read)")
    print(f"   raw day        {raw:8.2f} s   (read_window of one hour of it: {anchor:.3f} s, × {raw / anchor:.1f})")
    print(
        f"   compacted day  {compacted:8.2f} s   (read_window of one hour of it: {anchor_compacted:.3f} s, "
        f"× {compacted / anchor_compacted:.1f})"
    )


def analysis_read(engine: sa.Engine) -> None:
    rng = np.random.default_rng(5)
    today = START.date() + timedelta(days=DAYS)
    with engine.begin() as conn:
        with driver(conn).cursor() as cur:
            buffer = io.StringIO()
            for t in range(TARGETS):
                for d in range(DAYS):
                    day = START.date() + timedelta(days=d)
                    sums = rng.random((STATEMENTS, 4))
                    for q in range(STATEMENTS):
                        s = sums[q]
                        buffer.write(
                            f"t{t}\t{day}\t5\t10\t{1_000_000 + q}\tt\t1400\t48\t"
                            + "\t".join(
                                repr(float(v)) for v in (s[0] * 1e5, s[0] * 70, s[1] * 1e4, s[2] * 1e3, s[3] * 5e2)
                            )
                            + "\n"
                        )
            buffer.seek(0)
            with cur.copy(f"COPY radar.statement_noise ({', '.join(store.COLUMNS)}) FROM STDIN") as copy:
                while chunk := buffer.read(1 << 20):
                    copy.write(chunk)
        conn.execute(sa.text("ANALYZE radar.statement_noise"))
    fill(engine, "t3", STATEMENTS, 61, regressed_from=None, seed=4)  # the window's samples, for its keys and anchor
    with engine.begin() as conn:
        conn.execute(sa.text("ANALYZE radar.pgss_snapshot"))
    lo, hi = START, START + timedelta(minutes=60)
    at = pd.Timestamp(today, tz="UTC") + pd.Timedelta(hours=12)  # a window on the day after the sums
    with engine.connect() as conn:
        window = read_window(conn, "t3", lo, hi)
        anchor = timed(lambda: read_window(conn, "t3", lo, hi), 5, warm=True)
        ours = timed(lambda: prior_for(conn, "t3", at, window.keys), 5, warm=True)
        tracemalloc.start()
        found = prior_for(conn, "t3", at, window.keys)
        peak = tracemalloc.get_traced_memory()[1] / 2**20
        tracemalloc.stop()
        before = at.date()
        plan = explain(
            conn,
            "SELECT dbid, userid, queryid, toplevel, sum(intervals), sum(sum_squares) FROM radar.statement_noise "
            "WHERE target = %(t)s AND day >= %(first)s AND day < %(before)s GROUP BY 1, 2, 3, 4",
            {"t": "t3", "first": before - timedelta(days=PRIOR_DAYS), "before": before},
        )
    rows = TARGETS * DAYS * STATEMENTS
    print(
        f"1. an analysis's read of its statements' history: {STATEMENTS:,} statements, {PRIOR_DAYS} of the "
        f"{DAYS} days of sums of {TARGETS} targets ({rows:,} rows)"
    )
    print(f"   prior_for    {ours:8.3f} s   ({0 if found is None else len(found):,} estimates, peak {peak:.1f} MiB)")
    print(f"   read_window    {anchor:8.3f} s   (±30 min of the same statements; prior_for is × {ours / anchor:.2f})")
    print(f"   EXPLAIN ANALYZE: {plan_nodes(plan)}")
    with engine.begin() as conn:  # the nightly part reads its own target only
        for table in ("radar.pgss_snapshot", "radar.pgss_info_snapshot", "radar.statement_noise"):
            conn.execute(sa.text(f"DELETE FROM {table}"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=1000, help="statements of the nightly day")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="radar-noise-bench-"))
    server = LocalPostgres(root / "warehouse", settings={"shared_buffers": "512MB", "work_mem": "64MB"}).start()
    try:
        url = server.url(driver="postgresql+psycopg")
        migrations.upgrade(url)
        engine = make_engine(url)
        analysis_read(engine)
        nightly(engine, args.queries)
        engine.dispose()
    finally:
        server.destroy()


if __name__ == "__main__":
    main()
