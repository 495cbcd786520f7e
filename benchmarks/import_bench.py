"""`radar deploy import` benchmark: ROWS deploys from one CSV file into an empty warehouse.

Run with `make bench-import` (or `.venv/bin/python benchmarks/import_bench.py [--rows N] [--runs R]`). It starts an
embedded PostgreSQL 18 as the warehouse (fsync off, as every benchmark here) and writes a CSV of N deploys with every
column (deploy_id, target, deployed_at, service, version, url), one minute apart. Then, R times, each in a fresh
migrated database:

1. `radar deploy import FILE` as a user runs it, a process of its own (interpreter start, imports, every row read and
   checked, the rows stored in one transaction): its wall time and its own CPU time (user + system);
2. the same command on the same file again: every row is found stored and nothing is written;
3. in this process, the parts: `read_csv` (reading and checking every row, Python on one core) and `import_csv` (that,
   plus the warehouse's checks and the INSERTs).

It prints the machine's cores and load average before and after: the wall time is mostly the command's CPU time,
which stretches with the load when other processes want the same cores.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from radar_pipeline.demo.local_postgres import LocalPostgres  # noqa: E402
from radar_pipeline.warehouse import deploys, migrations  # noqa: E402
from radar_pipeline.warehouse.database import make_engine  # noqa: E402

RADAR = Path(sys.executable).parent / "radar"
TARGET = "main"
FIRST = datetime(2025, 1, 1, tzinfo=UTC)


def write_csv(path: Path, rows: int) -> None:
    """A deploy CSV with every column, one deploy a minute from FIRST."""
    with path.open("w") as out:
        out.write("deploy_id,target,deployed_at,service,version,url\n")
        for i in range(rows):
            at = (FIRST + timedelta(minutes=i)).isoformat()
            out.write(f"d-{i:07d},{TARGET},{at},shop/api,{i:012x},https://ci.example/acme/api/runs/{i}\n")


def cli(csv: Path, url: str) -> tuple[float, float, str]:
    """`radar deploy import` in a process of its own: wall seconds, its CPU seconds, its output."""
    env = {**os.environ, "RADAR_WAREHOUSE_URL": url, "RADAR_TARGETS": f"{TARGET}=postgresql://nowhere.invalid/none"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    proc = subprocess.run([str(RADAR), "deploy", "import", str(csv)], capture_output=True, text=True, env=env)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"radar deploy import failed: {proc.stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, proc.stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()

    root = Path(tempfile.mkdtemp(prefix="radar-import-bench-"))
    server = LocalPostgres(root / "warehouse").start()
    try:
        csv = root / "deploys.csv"
        write_csv(csv, args.rows)
        print(f"{os.cpu_count()} cores; load average {os.getloadavg()[0]:.1f} before; {args.rows:,} rows, every column")
        first, again, read, whole = [], [], [], []
        for run in range(args.runs):
            name = f"import_{run}"
            with psycopg.connect(server.dsn(), autocommit=True) as conn:
                conn.execute(f'CREATE DATABASE "{name}"')
            url = server.url(name, driver="postgresql+psycopg")
            migrations.upgrade(url)
            wall, cpu, said = cli(csv, url)
            first.append((wall, cpu))
            print(f"run {run + 1}: radar deploy import {wall:.2f} s (its CPU {cpu:.2f} s): {said}")
            wall, cpu, said = cli(csv, url)
            again.append((wall, cpu))
            print(f"        the same file again {wall:.2f} s (its CPU {cpu:.2f} s): {said}")
            engine = make_engine(url)
            with engine.begin() as conn:
                conn.exec_driver_sql("DELETE FROM radar.deploy_event")
            started = time.perf_counter()
            deploys.read_csv(csv)
            read.append(time.perf_counter() - started)
            started = time.perf_counter()
            deploys.import_csv(engine, csv, [TARGET])
            whole.append(time.perf_counter() - started)
            engine.dispose()
        med = statistics.median
        print(
            f"median of {args.runs}: radar deploy import {med(w for w, _ in first):.2f} s "
            f"(CPU {med(c for _, c in first):.2f} s), again {med(w for w, _ in again):.2f} s; in-process read_csv "
            f"{med(read):.2f} s, import_csv {med(whole):.2f} s; load average {os.getloadavg()[0]:.1f} after"
        )
    finally:
        server.destroy()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
