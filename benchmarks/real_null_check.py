"""Real-data null check: a steady workload on an embedded PostgreSQL 18, and null deploys analysed along it.

Run with `.venv/bin/python benchmarks/real_null_check.py [--seconds 480] [--window 90] [--scrape 3]`.

Nothing changes during the run, so every detection is a false alert. The workload: about 300 statement shapes over
20 tables (single-row SELECTs of different column lists, single-row UPDATEs that bloat their tables as the run goes
on, range counts, INSERTs into growing log tables), called from two connections with Zipf-like frequencies (a few hot
shapes, many sparse ones), throttled to a few hundred calls a second. The collector's own scrape (its real code,
`collector.pgss.scrape`, as a role of its own so its statements are left out) runs every `--scrape` seconds into
memory; then a null deploy every 15 s, each with `--window` seconds either side, goes through `analyse()` with the
default budget, with and without stddev_exec_time. With `--history S`, the first S seconds are the statements'
history instead: their noise is estimated from it as production estimates it from earlier days (engine.noise, blocks
of W), and every null deploy after it is analysed both on its window alone and with that history.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import tempfile
import threading
import time
from datetime import timedelta
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psycopg  # noqa: E402

from radar_pipeline.collector.pgss import read_extension, scrape  # noqa: E402
from radar_pipeline.collector.session import connect  # noqa: E402
from radar_pipeline.config import Target  # noqa: E402
from radar_pipeline.demo.local_postgres import LocalPostgres  # noqa: E402
from radar_pipeline.engine import EngineSettings, analyse  # noqa: E402
from radar_pipeline.engine.noise import noise_estimates, noise_sums  # noqa: E402
from radar_pipeline.pgss_model import KEY  # noqa: E402

TABLES = 20
ROWS = 2000
COLLECTOR = "radar_null_collector"


def shapes() -> list[tuple[str, str]]:
    """(statement, kind) for every shape of the workload; kind says which parameter it takes."""
    out = []
    columns = ["a", "b", "c", "d", "e"]
    for i in range(TABLES):
        table = f"t{i:02d}"
        for cols in itertools.islice(
            (c for r in (1, 2, 3) for c in itertools.combinations(columns, r)), 10
        ):  # ten column lists a table
            out.append((f"SELECT {', '.join(cols)} FROM {table} WHERE id = %s", "id"))
        out.append((f"UPDATE {table} SET a = a + 1 WHERE id = %s", "id"))
        out.append((f"UPDATE {table} SET e = e + 1, d = d * 1.0001 WHERE id = %s", "id"))
        out.append((f"SELECT count(*) FROM {table} WHERE b < %s", "small"))
        out.append((f"INSERT INTO log{i % 4} (v, note) VALUES (%s, 'x')", "small"))
    return out


def setup(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        conn.execute(f"CREATE ROLE {COLLECTOR} LOGIN")
        conn.execute(f"GRANT pg_read_all_stats TO {COLLECTOR}")
        for i in range(TABLES):
            conn.execute(
                f"CREATE TABLE t{i:02d} (id int PRIMARY KEY, a int, b int, c text, d float8, e int) "
                "WITH (autovacuum_enabled = off)"
            )
            conn.execute(
                f"INSERT INTO t{i:02d} SELECT g, g % 97, g % 1000, md5(g::text), g / 7.0, 0 "
                f"FROM generate_series(1, {ROWS}) g"
            )
        for j in range(4):
            conn.execute(f"CREATE TABLE log{j} (id bigserial PRIMARY KEY, v int, note text)")
        conn.execute("ANALYZE")
        conn.execute("SELECT pg_stat_statements_reset()")


def worker(dsn: str, stop: threading.Event, rate: float, seed: int, counts: list[int]) -> None:
    rng = np.random.default_rng(seed)
    work = shapes()
    weights = 1.0 / np.arange(1, len(work) + 1) ** 1.1  # Zipf-like: a few hot shapes, many sparse ones
    weights /= weights.sum()
    order = rng.permutation(len(work))
    with psycopg.connect(dsn, autocommit=True) as conn:
        started = time.monotonic()
        done = 0
        while not stop.is_set():
            for index in rng.choice(len(work), size=50, p=weights):
                statement, kind = work[order[index]]
                value = int(rng.integers(1, ROWS + 1)) if kind == "id" else int(rng.integers(1, 100))
                conn.execute(statement, (value,))
                done += 1
            ahead = done / rate - (time.monotonic() - started)
            if ahead > 0:
                stop.wait(ahead)
    counts.append(done)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=480.0, help="how long the workload runs")
    parser.add_argument("--window", type=float, default=90.0, help="W, seconds each side of a null deploy")
    parser.add_argument("--scrape", type=float, default=3.0, help="seconds between scrapes")
    parser.add_argument("--rate", type=float, default=150.0, help="calls a second per connection (two connections)")
    parser.add_argument("--history", type=float, default=0.0, help="seconds at the start that serve as history")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="radar-null-") as tmp:
        pg = LocalPostgres(Path(tmp) / "data").start()
        try:
            setup(pg.dsn())
            target = Target("null", pg.dsn(user=COLLECTOR))
            stop = threading.Event()
            counts: list[int] = []
            threads = [
                threading.Thread(target=worker, args=(pg.dsn(), stop, args.rate, seed, counts)) for seed in (1, 2)
            ]
            for thread in threads:
                thread.start()
            frames = []
            with connect(target) as conn:
                ext = read_extension(conn, target)
                deadline = time.monotonic() + args.seconds
                next_at = time.monotonic()
                while time.monotonic() < deadline:
                    got = scrape(conn, target, ext, exclude_role=COLLECTOR)
                    frames.append(got.statements.assign(captured_at=pd.Timestamp(got.info.captured_at)))
                    next_at += args.scrape
                    stop.wait(max(0.0, next_at - time.monotonic()))
            stop.set()
            for thread in threads:
                thread.join()
        finally:
            pg.stop()

    counters = pd.concat(frames, ignore_index=True)
    counters["captured_at"] = pd.to_datetime(counters["captured_at"], utc=True)
    counters["query_key"] = pd.factorize(pd.MultiIndex.from_frame(counters[KEY]))[0]
    first, last = counters["captured_at"].min(), counters["captured_at"].max()
    window = timedelta(seconds=args.window)
    settings = EngineSettings(window=window, tolerance_floor=timedelta(seconds=2 * args.scrape))
    history_end = first + pd.Timedelta(seconds=args.history)
    known = None
    if args.history > 0:
        known = noise_estimates(noise_sums(counters, first, history_end, block=window))
    deploys = pd.date_range(history_end + window, last - window, freq=pd.Timedelta(seconds=15))
    calls = sum(counts)
    print(
        f"workload: {args.seconds:.0f} s, {counters['query_key'].nunique()} statements seen, {calls:,} calls "
        f"({calls / args.seconds:.0f}/s), {len(frames)} scrapes every {args.scrape:g} s"
    )
    print(f"{len(deploys)} null deploys, W = {args.window:g} s, tolerance {settings.tolerance.total_seconds():g} s")
    arms = [("with stddev", counters, None), ("means only", counters.drop(columns="stddev_exec_time"), None)]
    if known is not None:
        usable = int((known["intervals"] >= settings.prior_min_intervals).sum())
        print(
            f"history: the first {args.history:g} s, estimates for {len(known)} statements, {usable} with at least "
            f"{settings.prior_min_intervals} intervals (median {int(known['intervals'].median())})"
        )
        arms += [(name + ", history", frame, known) for name, frame, _ in arms]
    totals = {name: 0 for name, _, _ in arms}
    decided = []
    for at in deploys:
        for name, frame, history in arms:
            out = analyse(frame, at, settings, prior=history)
            found = out[out["verdict"] == "detected"]
            totals[name] += len(found)
            if name == "with stddev":
                decided.append(int((out["verdict"] != "insufficient_data").sum()))
            for row in found.itertuples():
                print(
                    f"  {name}: deploy {at:%H:%M:%S} key {row.query_key} ×{row.change_factor:.2f} "
                    f"[×{row.factor_low:.2f}, ×{row.factor_high:.2f}] p_family {row.p_family:.2g}"
                )
        reasons = out["reason"].value_counts().to_dict()
    print(f"decided per deploy: median {int(np.median(decided))} (last deploy's reasons: {reasons})")
    for name, total in totals.items():
        print(f"false alerts, {name}: {total} in {len(deploys)} null deploys ({total / len(deploys):.3f} per deploy)")


if __name__ == "__main__":
    main()
