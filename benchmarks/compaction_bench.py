"""Compaction benchmark: bytes per stored sample raw and compacted, over a realistic day of one target.

Run with `make bench-compact` (or `.venv/bin/python benchmarks/compaction_bench.py`). It starts an embedded
PostgreSQL 18 as the warehouse and fills one day partition of radar.pgss_snapshot by COPY with a day of one-minute
scrapes of 5,000 statements, about 10% of them moving in any minute as the snapshot benchmark models, but mixed as a
real server's are: 300 statements move every minute, 700 in one minute of five, and 4,000 about once an hour (each
moving minute drawn at random). Counters grow as pg_stat_statements' do: calls, rows and blocks in proportion to the
calls, execution time and its stddev as doubles with every bit used, stats_since fixed (PostgreSQL 17+), no block
read time (track_io_timing is off by default); `--mix every-minute` moves every statement every minute instead (the
analysis benchmark's heaviest case). Then it compacts the day as the pgss_compaction asset does and prints:

- bytes per sample raw and compacted (pg_total_relation_size of the day's partitions: table, TOAST and indexes, over
  the samples they hold), and the average over a 14-day retention with the newest day raw;
- the compaction's seconds;
- a window read (`read_window`, one hour) and `radar.pgss_intervals` over the same hour on the raw day and on the
  compacted day (median of 3), and whether both read the same.
"""

from __future__ import annotations

import argparse
import io
import resource
import statistics
import sys
import tempfile
import time
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from radar_pipeline.demo.local_postgres import LocalPostgres  # noqa: E402
from radar_pipeline.pgss_model import COUNTERS, KEY  # noqa: E402
from radar_pipeline.steps.compaction import compact_history  # noqa: E402
from radar_pipeline.warehouse import migrations  # noqa: E402
from radar_pipeline.warehouse.analysis import read_window  # noqa: E402
from radar_pipeline.warehouse.compaction import raw_partition  # noqa: E402
from radar_pipeline.warehouse.database import driver, make_engine  # noqa: E402

RETENTION_DAYS = 14
SCRAPES = 1440
# (statements, chance of moving in a given minute, median calls in a moving minute)
MIXES = {
    "realistic": [(300, 1.0, 200.0), (700, 0.2, 20.0), (4000, 1 / 60, 2.0)],
    # the analysis benchmark's heaviest case: every statement moving every minute (7.2 million samples a day)
    "every-minute": [(5000, 1.0, 20.0)],
}
COLUMNS = ["target", "captured_at", *KEY, *COUNTERS, "stats_since", "reset_before", "fingerprint"]


def day_of_samples(day: date, seed: int, mix: str = "realistic") -> tuple[list[datetime], pd.DataFrame]:
    """The scrape times of one day and the stored rows of its moving statements (COLUMNS but the target)."""
    rng = np.random.default_rng(seed)
    start = datetime.combine(day, datetime.min.time(), tzinfo=UTC)
    jitter = rng.integers(0, 2_000_000, SCRAPES)  # microseconds after the minute at which the scrape read the view
    times = [start + timedelta(minutes=i, microseconds=int(j)) for i, j in enumerate(jitter)]
    frames = []
    queryid = 1_000_000
    for statements, chance, median_calls in MIXES[mix]:
        moving = rng.random((SCRAPES, statements)) < chance
        rate = rng.lognormal(np.log(median_calls), 1.0, statements)
        calls = np.where(moving, 1 + rng.poisson(rate, (SCRAPES, statements)), 0)
        mean_ms = rng.lognormal(0.0, 1.5, statements)
        spent = calls * mean_ms * rng.lognormal(0.0, 0.3, (SCRAPES, statements))
        rows_per_call = rng.choice([1, 1, 10, 100], statements)
        blocks_per_call = rows_per_call * 3 + rng.integers(0, 5, statements)
        reads = rng.poisson(np.maximum(calls * 0.02, 0))
        temp = np.where(rng.random(statements) < 0.05, 8, 0)[None, :] * calls
        base = rng.integers(1_000, 10_000_000, statements)
        cum = {
            "calls": base + np.cumsum(calls, axis=0),
            "total_exec_time": base * mean_ms + np.cumsum(spent, axis=0),
            "rows": base * rows_per_call + np.cumsum(calls * rows_per_call, axis=0),
            "shared_blks_hit": base * blocks_per_call + np.cumsum(calls * blocks_per_call, axis=0),
            "shared_blks_read": base // 50 + np.cumsum(reads, axis=0),
            "temp_blks_written": np.cumsum(temp, axis=0),
        }
        stddev = mean_ms[None, :] * (0.5 + 0.4 * np.sin(np.cumsum(spent, axis=0) / (1 + base)) ** 2)
        scrape, statement = np.nonzero(moving)
        since = start - timedelta(days=3) + pd.to_timedelta(rng.integers(0, 86_400_000_000, statements), unit="us")
        frame = pd.DataFrame(
            {
                "captured_at": np.asarray(times, dtype=object)[scrape],
                "dbid": 5,
                "userid": 10,
                "queryid": queryid + statement,
                "toplevel": True,
                **{name: values[scrape, statement] for name, values in cum.items()},
                "shared_blk_read_time": 0.0,
                "stddev_exec_time": stddev[scrape, statement],
                "stats_since": np.asarray(since)[statement],
                "reset_before": False,
                "fingerprint": (queryid + statement) * 7919,
            }
        )
        frames.append(frame)
        queryid += statements
    return times, pd.concat(frames, ignore_index=True)


def store(engine: sa.Engine, target: str, day: date, times: list[datetime], rows: pd.DataFrame) -> None:
    """COPY the day's scrape rows and statement rows into the warehouse."""
    with engine.begin() as conn:
        conn.execute(sa.text("SELECT radar.ensure_pgss_snapshot_partitions(:d, 1)"), {"d": day})
        with driver(conn).cursor() as cur:
            with cur.copy("COPY radar.pgss_info_snapshot FROM STDIN") as copy:
                for at in times:
                    copy.write_row((target, at, 0, None, 180000, "1.11", 5000, 500))
            buffer = io.StringIO()
            rows.insert(0, "target", target)
            rows.to_csv(
                buffer, sep="\t", header=False, index=False, na_rep="\\N", float_format=lambda x: repr(float(x))
            )
            buffer.seek(0)
            with cur.copy(f"COPY radar.pgss_snapshot ({', '.join(COLUMNS)}) FROM STDIN") as copy:
                while chunk := buffer.read(1 << 20):
                    copy.write(chunk)


def stored_bytes(conn: sa.Connection, table: str) -> int:
    """Table, TOAST and indexes of one relation (a day's partition)."""
    return int(conn.execute(sa.text("SELECT pg_total_relation_size(CAST(:t AS regclass))"), {"t": table}).scalar())


def reads(engine: sa.Engine, target: str, lo: datetime, hi: datetime) -> tuple[float, float, pd.DataFrame, list]:
    """Median seconds of read_window and of radar.pgss_intervals over (lo, hi], and what they read."""
    window_s, intervals_s = [], []
    for _ in range(3):
        with engine.connect() as conn:
            started = time.perf_counter()
            window = read_window(conn, target, lo, hi)
            window_s.append(time.perf_counter() - started)
            started = time.perf_counter()
            intervals = conn.execute(
                sa.text(
                    "SELECT * FROM radar.pgss_intervals(:t, :lo, :hi) ORDER BY dbid, userid, queryid, interval_end"
                ),
                {"t": target, "lo": lo, "hi": hi},
            ).all()
            intervals_s.append(time.perf_counter() - started)
    frame = window.counters.merge(window.keys, left_on="query_key", right_index=True, suffixes=("", "_key"))
    return statistics.median(window_s), statistics.median(intervals_s), frame, intervals


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=17)
    parser.add_argument("--mix", choices=list(MIXES), default="realistic")
    parser.add_argument(
        "--bin-dir",
        type=Path,
        help="another PostgreSQL's bin folder (e.g. /usr/lib/postgresql/15/bin); default: the embedded 18",
    )
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="radar-compaction-bench-"))
    settings = {"shared_buffers": "256MB", "work_mem": "64MB"}
    server = (
        LocalPostgres(root / "warehouse", bin_dir=args.bin_dir, settings=settings)
        if args.bin_dir
        else LocalPostgres(root / "warehouse", settings=settings)
    ).start()
    try:
        url = server.url(driver="postgresql+psycopg")
        migrations.upgrade(url)
        engine = make_engine(url)
        day = datetime.now(UTC).date() - timedelta(days=2)
        times, rows = day_of_samples(day, args.seed, args.mix)
        samples = len(rows)
        store(engine, "bench", day, times, rows)
        with engine.begin() as conn:
            conn.execute(sa.text("ANALYZE radar.pgss_snapshot"))
        with engine.connect() as conn:
            raw_bytes = stored_bytes(conn, f"radar.{raw_partition(day)}")
            info_bytes = stored_bytes(conn, "radar.pgss_info_snapshot")
        lo = datetime.combine(day, datetime.min.time(), tzinfo=UTC) + timedelta(hours=12)
        hi = lo + timedelta(hours=1)
        raw_window_s, raw_intervals_s, raw_window, raw_intervals = reads(engine, "bench", lo, hi)

        started = time.perf_counter()
        compacted = compact_history(engine)
        compact_s = time.perf_counter() - started
        with engine.connect() as conn:
            compact_bytes = stored_bytes(conn, f"radar.pgss_compact_p{day:%Y%m%d}")
            left_raw = stored_bytes(conn, f"radar.{raw_partition(day)}")
            compact_rows = conn.execute(sa.text("SELECT count(*) FROM radar.pgss_compact")).scalar_one()
            version = conn.execute(sa.text("SHOW server_version")).scalar_one()
            method = conn.execute(
                sa.text(
                    "SELECT attcompression FROM pg_attribute "
                    "WHERE attname = 'calls' AND attrelid = CAST(:p AS regclass)"
                ),
                {"p": f"radar.pgss_compact_p{day:%Y%m%d}"},
            ).scalar_one()
            method = {"p": "pglz", "l": "lz4"}.get(method, method)
        window_s, intervals_s, window, intervals = reads(engine, "bench", lo, hi)
        same_window = (
            raw_window.sort_values(["query_key", "captured_at"])
            .reset_index(drop=True)
            .equals(window.sort_values(["query_key", "captured_at"]).reset_index(drop=True))
        )
        engine.dispose()

        per_raw = raw_bytes / samples
        per_compact = (compact_bytes + left_raw) / samples
        average = (per_raw + (RETENTION_DAYS - 1) * per_compact) / RETENTION_DAYS
        print(f"PostgreSQL {version}, compression {method}")
        print(
            f"one target, one day: {samples:,} samples of 5,000 statements ({len(times):,} scrapes); "
            f"{args.mix} mix (statements, chance of moving in a minute, median calls): {MIXES[args.mix]}"
        )
        print(f"raw:       {raw_bytes / 2**20:8.1f} MiB  {per_raw:6.1f} bytes per sample")
        print(
            f"compacted: {compact_bytes / 2**20:8.1f} MiB  {per_compact:6.1f} bytes per sample "
            f"({compact_rows:,} rows; the emptied raw partition keeps {left_raw:,} bytes, counted)"
        )
        print(
            f"{RETENTION_DAYS}-day retention, newest day raw: {average:.1f} bytes per sample "
            f"((raw + {RETENTION_DAYS - 1} × compacted) / {RETENTION_DAYS}); "
            f"scrape rows (radar.pgss_info_snapshot) add {info_bytes / samples:.1f} bytes per sample, either form"
        )
        print(f"compaction of the day: {compact_s:.2f} s ({compacted[0].samples:,} samples)")
        print(
            f"window read (read_window, 1 h): raw {raw_window_s:.3f} s, compacted {window_s:.3f} s "
            f"({window_s / raw_window_s:.1f}×); same rows: {same_window}"
        )
        print(
            f"radar.pgss_intervals (1 h): raw {raw_intervals_s:.3f} s, compacted {intervals_s:.3f} s "
            f"({intervals_s / raw_intervals_s:.1f}×); same intervals: {raw_intervals == intervals} ({len(intervals):,})"
        )
        peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"peak memory (max RSS of this process): {peak_mib:,.0f} MiB")
    finally:
        server.destroy()


if __name__ == "__main__":
    main()
