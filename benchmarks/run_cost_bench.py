"""Run-cost benchmark: the CPU one `pgss_snapshot_job` run costs as Dagster runs it, against Dagster's own start-up.

Run with `make bench-run-cost` (or `.venv/bin/python benchmarks/run_cost_bench.py [--runs N]`). It makes the
embedded default in a temporary RADAR_HOME with `radar demo` (the shop's statements, scraped by the collector role),
then, N times in turn, measures the CPU (user + system, the process and its children) of:

1. `dagster job execute` of a job with one op that does nothing (`trivial_job.py` beside this file), in the run's
   process as pgss_snapshot_job runs: Dagster's own start-up, run bookkeeping and exit, the anchor;
2. `dagster job execute -m radar_pipeline.definitions -j pgss_snapshot_job`: the same plus loading radar's code
   location, scraping the target and writing what moved;
3. `python -c "from radar_pipeline.definitions import defs; defs()"`: the code location's load alone.

It prints each run and the medians, and the difference 2 − 1: what a snapshot run costs beyond Dagster's start-up
(issue 17 asks ≤ 2 CPU-seconds on this machine).
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
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from radar_pipeline.demo import environment  # noqa: E402

BIN = Path(sys.executable).parent


def cpu(command: list[str], env: dict[str, str], cwd: str) -> tuple[float, float]:
    """CPU seconds (user + system of the finished child processes) and wall seconds of one command."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(command, env=env, cwd=cwd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    used = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return used, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="radar-run-cost-"))
    os.environ[environment.HOME_VAR] = str(home)
    subprocess.run([str(BIN / "radar"), "demo"], check=True, stdout=subprocess.DEVNULL)
    embedded = environment.start(fresh=False)
    try:
        env = {**os.environ, **embedded.environment(), "DAGSTER_DISABLE_TELEMETRY": "1"}
        cwd = env["DAGSTER_HOME"]
        commands = {
            "Dagster's start-up (trivial job)": [
                str(BIN / "dagster"), "job", "execute", "-f", str(HERE / "trivial_job.py"), "-j", "trivial"
            ],
            "pgss_snapshot_job": [
                str(BIN / "dagster"), "job", "execute", "-m", "radar_pipeline.definitions", "-j", "pgss_snapshot_job"
            ],
            "load radar_pipeline.definitions": [
                str(BIN / "python"), "-c", "from radar_pipeline.definitions import defs; defs()"
            ],
        }  # fmt: skip
        seen: dict[str, list[float]] = {name: [] for name in commands}
        for run in range(args.runs):
            line = []
            for name, command in commands.items():
                used, wall = cpu(command, env, cwd)
                seen[name].append(used)
                line.append(f"{name} {used:.2f} CPU-s ({wall:.2f} s)")
            print(f"run {run + 1}: " + "; ".join(line), flush=True)
        median = {name: statistics.median(values) for name, values in seen.items()}
        for name, value in median.items():
            print(f"median {name}: {value:.2f} CPU-s")
        extra = median["pgss_snapshot_job"] - median["Dagster's start-up (trivial job)"]
        print(f"a snapshot run beyond Dagster's start-up: {extra:.2f} CPU-s")
    finally:
        embedded.stop()
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
