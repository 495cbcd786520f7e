"""Named changes stay in their deploy's span (issue 39, target "no named change from outside a deploy's spans in 20
deploys made 10 s apart"), on a real PostgreSQL 18 through radar's own collector.

Run with `.venv/bin/python benchmarks/named_span_lab.py [--deploys 20] [--apart 10] [--window 4]`. One embedded
PostgreSQL 18 holds the watched database (20 tables of 20,000 rows, each with an index on k and its own lookup `SELECT
count(*) FROM t<i> WHERE k = $1` called by two application threads) and the warehouse. A scrape every second through
`snapshot_target` (the catalog read every scrape: catalog_interval 1 s). Deploy i is recorded at d_i, 10 s after
the one before, and drops t<i>'s index as it is recorded: its lookup turns to a sequential scan. Each deploy is
then analysed with W each side and a tolerance of two scrapes (analyse_deploy, the first verdict), and every named
change on every row of every deploy is checked against that deploy's span [d_i − W, d_i + W]: a change seen before
the span began, or first seen after it ended, is outside. Prints each deploy's verdict on its own lookup, the
detections naming their own deploy's drop, and the changes named outside their span (the target: none).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from radar_pipeline.config import Target  # noqa: E402
from radar_pipeline.demo.local_postgres import LocalPostgres  # noqa: E402
from radar_pipeline.engine import EngineSettings  # noqa: E402
from radar_pipeline.steps.deploy_analysis import AnalysisRun, analyse_deploy  # noqa: E402
from radar_pipeline.steps.snapshots import snapshot_target  # noqa: E402
from radar_pipeline.warehouse import deploys, migrations  # noqa: E402
from radar_pipeline.warehouse.database import make_engine  # noqa: E402

TABLES = 20


def watched_server(root: Path) -> tuple[LocalPostgres, sa.Engine, Target]:
    """An embedded PostgreSQL 18 holding the watched database `shop` (pg_stat_statements created) and the migrated
    warehouse: the server, the warehouse's engine and the target."""
    server = LocalPostgres(root / "data").start()
    with psycopg.connect(server.dsn("postgres"), autocommit=True) as conn:
        conn.execute("CREATE DATABASE shop")
        conn.execute("CREATE DATABASE warehouse")
    with psycopg.connect(server.dsn("shop"), autocommit=True) as conn:
        conn.execute("CREATE EXTENSION pg_stat_statements")
    url = server.url("warehouse", driver="postgresql+psycopg")
    migrations.upgrade(url)
    return server, make_engine(url), Target("shop", server.url("shop"))


def collecting(target: Target, warehouse: sa.Engine, stop: threading.Event, every: float = 1.0) -> threading.Thread:
    """A started thread scraping the target through radar's collector every `every` seconds until `stop` is set."""

    def collect() -> None:
        while not stop.is_set():
            started = time.monotonic()
            snapshot_target(target, warehouse, catalog_interval=timedelta(seconds=1))
            stop.wait(max(0.0, every - (time.monotonic() - started)))

    thread = threading.Thread(target=collect, daemon=True)
    thread.start()
    return thread


def shut(server: LocalPostgres, stop: threading.Event, threads: list[threading.Thread]) -> None:
    """Stop the lab's threads (`stop` set, each joined) and then its server, whose data goes with it."""
    stop.set()
    for thread in threads:
        thread.join(timeout=30)
    server.destroy()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deploys", type=int, default=20)
    parser.add_argument("--apart", type=float, default=10.0, help="seconds between deploys")
    parser.add_argument("--window", type=float, default=4.0, help="W, seconds each side of a deploy")
    args = parser.parse_args()
    server, warehouse, target = watched_server(Path(tempfile.mkdtemp(prefix="radar-named-span-")))
    stop = threading.Event()
    threads: list[threading.Thread] = []
    try:
        with psycopg.connect(server.dsn("shop"), autocommit=True) as conn:
            for i in range(TABLES):
                conn.execute(f"CREATE TABLE t{i} (id int PRIMARY KEY, k int, pad text)")
                conn.execute(f"INSERT INTO t{i} SELECT g, g % 2000, repeat('x', 40) FROM generate_series(1, 20000) g")
                conn.execute(f"CREATE INDEX t{i}_k_idx ON t{i} (k)")
                conn.execute(f"ANALYZE t{i}")

        def app(seed: int) -> None:
            rng = random.Random(seed)
            with psycopg.connect(server.dsn("shop"), autocommit=True) as conn:
                while not stop.is_set():
                    conn.execute(f"SELECT count(*) FROM t{rng.randrange(TABLES)} WHERE k = %s", (rng.randrange(2000),))
                    time.sleep(0.002)

        threads = [threading.Thread(target=app, args=(s,), daemon=True) for s in range(2)]
        for thread in threads:
            thread.start()
        threads.append(collecting(target, warehouse, stop))
        time.sleep(args.window + 3)  # the first deploy's before side
        times: list[datetime] = []
        with psycopg.connect(server.dsn("shop"), autocommit=True) as conn:
            for i in range(args.deploys):
                at = datetime.now(UTC)
                deploys.record(warehouse, deploys.DeployEvent(f"d{i}", "shop", at))
                times.append(at)
                conn.execute(f"DROP INDEX t{i % TABLES}_k_idx")
                time.sleep(max(0.0, args.apart - (datetime.now(UTC) - at).total_seconds()))
        time.sleep(args.window + 2)  # the last deploy's after side, and a scrape after it
        stop.set()
        for thread in threads:
            thread.join(timeout=30)

        with psycopg.connect(server.dsn("shop"), autocommit=True) as conn:
            lookups = {
                int(text.split(" FROM t")[1].split()[0]): int(q)
                for q, text in conn.execute(
                    "SELECT queryid, query FROM pg_stat_statements "
                    "WHERE query LIKE 'SELECT count(*) FROM t% WHERE k =%'"
                )
            }
        settings = EngineSettings(window=timedelta(seconds=args.window), tolerance_floor=timedelta(seconds=2))
        own = outside = named = detected = 0
        for i, at in enumerate(times):
            result = analyse_deploy(AnalysisRun(warehouse, settings), f"d{i}")
            lo, hi = at - settings.window, at + settings.window
            verdicts = result.verdicts
            detected += int((verdicts["verdict"] == "detected").sum())
            for row in verdicts[verdicts["queryid"] == lookups.get(i % TABLES)].itertuples():
                print(
                    f"d{i}: t{i % TABLES}'s lookup {row.verdict} ({row.reason}) ×{row.change_factor:.2f}, "
                    f"{row.n_before}/{row.n_after} intervals"
                )
            for row in verdicts.itertuples():
                if not isinstance(row.named_changes, str):
                    continue
                for change in json.loads(row.named_changes):
                    named += 1
                    first = datetime.fromisoformat(change["first_seen_after"])
                    last = change.get("last_seen_before")
                    before = datetime.fromisoformat(last) if last else None
                    if first <= lo or (before is not None and before >= hi):
                        outside += 1
                        print(f"d{i}: {change['kind']} {change['name']} outside [{lo:%T}, {hi:%T}]: {last} → {first}")
                    elif change["name"].endswith(f"t{i % TABLES}_k_idx") and row.verdict == "detected":
                        own += 1
        print(
            f"{args.deploys} deploys {args.apart:g} s apart, W = {args.window:g} s, scrapes every second: "
            f"{detected} detections, {own} naming their own deploy's dropped index, {named} named changes in all, "
            f"{outside} outside their deploy's span"
        )
    finally:
        shut(server, stop, threads)


if __name__ == "__main__":
    main()
