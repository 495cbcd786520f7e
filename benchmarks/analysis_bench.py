"""Analysis benchmark: one deploy partition read from the warehouse, decided and written; then a backfill.

Run with `make bench-analysis` (or `.venv/bin/python benchmarks/analysis_bench.py`). It starts an embedded
PostgreSQL 18 as the warehouse and fills radar.pgss_snapshot by COPY with synthetic counters:

1. one partition: 5,000 queries × 60 one-minute scrapes each side of a deploy (every query moving every minute, the
   heaviest case), analysed by the same function the deploy_verdicts asset calls; read / engine / write seconds,
   median of 3, with the anchor of a bare `SELECT` of the same window's rows measured in the same run, and the
   server's own share of the read (a binary COPY of those rows to /dev/null on the server, no client);
2. a backfill: 200 deploys ten minutes apart over a history of 1,000 queries, analysed one after another as the
   backfill's runs would (partitions per minute), and 20 of them through Dagster's in-process materialize to show
   what a Dagster run adds to each partition;
3. a later look (issue 29): the same 5,000 statements, one-minute scrapes, analysed with before = after = 8 × W
   (4 h each side of the deploy, W = 30 min): the read of the span (analysis.read_window) and analyse() itself,
   median of 3, the engine's peak memory traced in one more run, and the server's share of the read as in 1;
4. query_history over those 200 deploys in order (points per second, against the analysis backfill of the same
   deploys), and one periodic check of the hour that holds the 5,000-query partition's deploy (against that
   partition's analysis).

`--partition-only` runs 1 and 3 alone.
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import sys
import tempfile
import time
import tracemalloc
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from radar_pipeline.defs.resources import AnalysisResource  # noqa: E402
from radar_pipeline.demo.local_postgres import LocalPostgres  # noqa: E402
from radar_pipeline.engine import EngineSettings, analyse  # noqa: E402
from radar_pipeline.engine.history import HistorySettings  # noqa: E402
from radar_pipeline.pgss_model import COUNTERS, KEY  # noqa: E402
from radar_pipeline.steps.deploy_analysis import AnalysisRun, analyse_deploy  # noqa: E402
from radar_pipeline.steps.history import update_history  # noqa: E402
from radar_pipeline.steps.periodic_check import analyse_period  # noqa: E402
from radar_pipeline.warehouse import analysis, deploys, migrations  # noqa: E402
from radar_pipeline.warehouse.database import driver, make_engine  # noqa: E402

START = datetime(2026, 11, 1, tzinfo=UTC)
COPIED = [  # the stored columns the benchmark writes, in the order of fill()'s rows (stddev_exec_time left NULL)
    "target",
    "captured_at",
    *KEY,
    *(c for c in COUNTERS if c != "stddev_exec_time"),
    "stats_since",
    "reset_before",
    "fingerprint",
]


def fill(engine: sa.Engine, target: str, queries: int, scrapes: int, regressed_from: int | None, seed: int) -> None:
    """COPY `scrapes` one-minute snapshots of `queries` statements (5% regress 2× from scrape `regressed_from`)."""
    rng = np.random.default_rng(seed)
    base = rng.lognormal(0.0, 1.0, queries)
    slower = np.where(rng.random(queries) < 0.05, 2.0, 1.0)
    calls = rng.integers(5, 50, (scrapes, queries))
    means = base[None, :] * rng.lognormal(-0.045, 0.3, (scrapes, queries))
    if regressed_from is not None:
        means[regressed_from:] *= slower[None, :]
    c, t = np.cumsum(calls, axis=0), np.cumsum(calls * means, axis=0)
    rows = np.cumsum(calls * 3, axis=0)
    times = [START + timedelta(minutes=i) for i in range(scrapes)]
    with engine.begin() as conn:
        conn.execute(
            sa.text("SELECT radar.ensure_pgss_snapshot_partitions(CAST(:d AS date), :n)"),
            {"d": START, "n": scrapes // 1440 + 2},
        )
        with driver(conn).cursor() as cur:
            with cur.copy("COPY radar.pgss_info_snapshot FROM STDIN") as copy:
                for at in times:
                    copy.write_row((target, at, 0, None, 180000, "1.12", queries, queries))
            buffer = io.StringIO()
            qid = np.arange(queries) + 1_000_000
            for i, at in enumerate(times):
                stamp = at.isoformat()
                for q in range(queries):
                    buffer.write(
                        f"{target}\t{stamp}\t5\t10\t{qid[q]}\tt\t{c[i, q]}\t{float(t[i, q])!r}\t{rows[i, q]}"
                        f"\t0\t{c[i, q] // 10}\t0\t0\t\\N\tf\t{qid[q]}\n"
                    )
            buffer.seek(0)
            # the columns named: stddev_exec_time (0007) is left null, as in rows stored before it
            with cur.copy(f"COPY radar.pgss_snapshot ({', '.join(COPIED)}) FROM STDIN") as copy:
                while chunk := buffer.read(1 << 20):
                    copy.write(chunk)
            cur.execute(
                "INSERT INTO radar.query SELECT %s, 5, 10, q, true, q, 'SELECT * FROM t' || q || ' WHERE id = $1', "
                "%s, %s, 0, 0, NULL, NULL FROM unnest(%s::bigint[]) q",
                (target, times[0], times[-1], qid.tolist()),
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partition-only", action="store_true", help="the 5,000-statement partition and later look")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="radar-analysis-bench-"))
    server = LocalPostgres(root / "warehouse", settings={"shared_buffers": "512MB", "work_mem": "64MB"}).start()
    try:
        url = server.url(driver="postgresql+psycopg")
        migrations.upgrade(url)
        engine = make_engine(url)
        settings = EngineSettings(window=timedelta(minutes=60))

        started = time.perf_counter()
        fill(engine, "one", 5000, 122, regressed_from=61, seed=1)
        print(f"loaded 5,000 × 122 snapshots in {time.perf_counter() - started:.1f} s")
        deploy_at = START + timedelta(minutes=61)
        deploys.record(engine, deploys.DeployEvent("one-deploy", "one", deploy_at))
        runs = [analyse_deploy(AnalysisRun(engine, settings), "one-deploy") for _ in range(3)]
        anchor = []
        for _ in range(3):
            t0 = time.perf_counter()
            with engine.connect() as conn:
                conn.execute(
                    sa.text(
                        "SELECT * FROM radar.pgss_snapshot "
                        "WHERE target = 'one' AND captured_at > :lo AND captured_at <= :hi"
                    ),
                    {"lo": deploy_at - settings.window, "hi": deploy_at + settings.window},
                ).fetchall()
            anchor.append(time.perf_counter() - t0)
        floor = [server_copy(engine, "one", deploy_at - settings.window, deploy_at + settings.window) for _ in range(3)]
        parts = {
            k: statistics.median(getattr(r.seconds, k) for r in runs) for k in ("read", "engine", "plans", "write")
        }
        total = sum(parts.values())
        counts = runs[-1].verdicts["verdict"].value_counts().to_dict()
        print(f"one partition: 5,000 queries × 60 scrapes each side ({len(runs[-1].verdicts)} verdicts: {counts})")
        print(
            f"  read {parts['read']:.3f} s + engine {parts['engine']:.3f} s + plan diffs {parts['plans']:.3f} s "
            f"+ write {parts['write']:.3f} s "
            f"= {total:.3f} s; anchor (bare SELECT of the window's rows) {statistics.median(anchor):.3f} s"
        )
        print(
            f"  the server alone: a binary COPY of the window's rows to /dev/null {statistics.median(floor):.3f} s; "
            f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
        )

        later_look(engine)
        if args.partition_only:
            return

        deploys_n, queries, spacing = 200, 1000, 10
        scrapes = deploys_n * spacing + 2 * 60 + 2
        started = time.perf_counter()
        fill(engine, "history", queries, scrapes, regressed_from=None, seed=2)
        print(f"loaded {queries:,} × {scrapes:,} snapshots in {time.perf_counter() - started:.1f} s")
        csv = root / "history.csv"
        lines = ["deploy_id,target,deployed_at"]
        for i in range(deploys_n):
            lines.append(f"h-{i},history,{(START + timedelta(minutes=61 + i * spacing)).isoformat()}")
        csv.write_text("\n".join(lines) + "\n")
        deploys.import_csv(engine, csv)
        window = EngineSettings(window=timedelta(minutes=30))
        started = time.perf_counter()
        for i in range(deploys_n):
            analyse_deploy(AnalysisRun(engine, window), f"h-{i}")
        raw = time.perf_counter() - started
        print(
            f"backfill, analysis only: {deploys_n} deploys × {queries:,} queries in {raw:.1f} s = "
            f"{deploys_n / raw * 60:,.0f} partitions per minute"
        )
        print(f"through Dagster: {dagster_rate(url, 20, window):,.0f} partitions per minute (20 in-process runs)")

        started = time.perf_counter()
        with engine.begin() as conn:
            points = sum(
                len(update_history(conn, f"h-{i}", HistorySettings(), window.min_calls).points)
                for i in range(deploys_n)
            )
        took = time.perf_counter() - started
        print(
            f"query_history over the same {deploys_n} deploys: {points:,} points in {took:.1f} s = "
            f"{deploys_n / took * 60:,.0f} deploys per minute ({raw / took:.1f}× the analysis backfill's rate)"
        )

        hourly = AnalysisResource(period_seconds=3600)
        started = time.perf_counter()
        done, failed = analyse_period(
            AnalysisRun(engine, hourly.periodic_settings()),
            "2026-11-01-01:00",
            START + timedelta(hours=2),
            hourly.settings().tolerance,
        )
        took = time.perf_counter() - started
        assert not failed
        sizes = ", ".join(f"{r.target} {len(r.verdicts):,} queries" for r in done)
        print(
            f"periodic check of one hour ({sizes}): {took:.2f} s; the 5,000-query deploy partition took {total:.2f} s"
        )
        engine.dispose()
    finally:
        server.destroy()


def later_look(engine: sa.Engine) -> None:
    """5,000 statements analysed 4 h (8 × W) either side of their deploy (module docstring, 3)."""
    settings = EngineSettings()  # W = 30 min
    span = 8 * settings.window
    scrapes = int(2 * span / timedelta(minutes=1)) + 2
    started = time.perf_counter()
    fill(engine, "late", 5000, scrapes, regressed_from=scrapes // 2, seed=3)
    print(f"loaded 5,000 × {scrapes} snapshots in {time.perf_counter() - started:.1f} s")
    deploy_at = START + timedelta(minutes=scrapes // 2)
    reads, decides = [], []
    for _ in range(3):
        started = time.perf_counter()
        with engine.connect() as conn:
            window = analysis.read_window(conn, "late", deploy_at - span, deploy_at + span)
        reads.append(time.perf_counter() - started)
        started = time.perf_counter()
        out = analyse(window.counters, deploy_at, settings, before=span, after=span)
        decides.append(time.perf_counter() - started)
    tracemalloc.start()
    analyse(window.counters, deploy_at, settings, before=span, after=span)
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    floor = [server_copy(engine, "late", deploy_at - span, deploy_at + span) for _ in range(3)]
    read, decide = statistics.median(reads), statistics.median(decides)
    print(
        f"later look, 5,000 queries × {int(span / timedelta(minutes=1))} scrapes each side (before = after = 8 × W, "
        f"{len(window.counters):,} rows): read {read:.3f} s + engine {decide:.3f} s = {read + decide:.3f} s, "
        f"engine peak {peak:.0f} MiB ({out['verdict'].value_counts().to_dict()}); the server alone: a binary COPY of "
        f"the span's rows to /dev/null {statistics.median(floor):.3f} s; load average "
        f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )


def server_copy(engine: sa.Engine, target: str, lo: datetime, hi: datetime) -> float:
    """Seconds the server takes to scan and send (to /dev/null, on the server) the stored rows in (lo, hi] of the
    columns the analysis reads, in binary: the floor of the read's server side, with no client."""
    columns = ", ".join(name for name, _ in analysis.SAMPLE_FIELDS)
    started = time.perf_counter()
    with engine.connect() as conn:
        conn.execute(
            sa.text(
                f"COPY (SELECT {columns} FROM radar.pgss_snapshot WHERE target = '{target}' "
                f"AND captured_at > '{lo.isoformat()}' AND captured_at <= '{hi.isoformat()}') TO '/dev/null' "
                "(FORMAT binary)"
            )
        )
    return time.perf_counter() - started


def dagster_rate(url: str, n: int, settings: EngineSettings) -> float:
    import dagster as dg

    from radar_pipeline.defs.deploys.deploy_verdicts import deploy_verdicts
    from radar_pipeline.defs.resources import TargetsResource, WarehouseResource

    resources = {
        "warehouse": WarehouseResource(url=url),
        "analysis": AnalysisResource(window_seconds=settings.window.total_seconds()),
        "targets": TargetsResource(spec="history=postgresql://nowhere.invalid/none"),  # plans: none to capture
    }
    with dg.instance_for_test() as instance:
        keys = [f"h-{i}" for i in range(n)]
        instance.add_dynamic_partitions("deploys", keys)
        started = time.perf_counter()
        for key in keys:
            assert dg.materialize([deploy_verdicts], partition_key=key, resources=resources, instance=instance).success
        return n / (time.perf_counter() - started) * 60


if __name__ == "__main__":
    main()
