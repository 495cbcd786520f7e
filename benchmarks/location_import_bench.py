"""Code-location import benchmark: the CPU a process pays to load radar's code location, beyond `import dagster`.

Run with `make bench-location` (or `.venv/bin/python benchmarks/location_import_bench.py [--runs N]`). N times in
turn, each in a fresh interpreter, it measures the CPU (user + system) of:

1. `python -c "import dagster"`: Dagster's own import, the anchor;
2. `python -c "from radar_pipeline.definitions import defs; defs()"`: the location as every Dagster process (each
   run, the daemon, the UI's code server) loads it: the import and the @dg.definitions load of every module of defs/.

It prints each run, the best of N of each (the figure least disturbed by other work on the machine) and their
difference, the location's cost beyond Dagster (issue 26 asks ≤ 1.0 CPU-s), with the load average before and after.
No database is needed: loading the location connects to nothing.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
from pathlib import Path

PYTHON = sys.executable
COMMANDS = {
    "import dagster": "import dagster",
    "load the location": "from radar_pipeline.definitions import defs; defs()",
}


def cpu(code: str) -> float:
    """CPU seconds (user + system) of one fresh interpreter running `code`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    env = {**os.environ, "DAGSTER_DISABLE_TELEMETRY": "1"}
    subprocess.run([PYTHON, "-c", code], env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    os.chdir(Path(__file__).resolve().parents[1])
    print(f"{os.cpu_count()} cores; load average {os.getloadavg()[0]:.1f} before")
    seen: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for run in range(args.runs):
        for name, code in COMMANDS.items():
            seen[name].append(cpu(code))
        print(f"run {run + 1}: " + "; ".join(f"{name} {values[-1]:.2f} CPU-s" for name, values in seen.items()))
    best = {name: min(values) for name, values in seen.items()}
    for name, value in best.items():
        print(f"best of {args.runs}, {name}: {value:.2f} CPU-s")
    print(f"the location beyond `import dagster`: {best['load the location'] - best['import dagster']:+.2f} CPU-s")
    print(f"load average {os.getloadavg()[0]:.1f} after")


if __name__ == "__main__":
    main()
