"""Engine benchmark: 10,000 queries × 120 intervals through analyse(), against two anchors measured in the same run.

Run with `make bench-engine` (or `.venv/bin/python benchmarks/engine_bench.py [--queries N]`).

- ours: analyse() from cumulative counters (1.21 million snapshot rows) through the whole decision, for two mixes:
  "typical", 3% of queries regressed 2× at the deploy (the rest unchanged, so most stop at the pre-filter), with the
  rows sorted as the warehouse delivers them and shuffled; and "all candidates", every query regressed, so every
  series goes through E-divisive and the call-level test. Both sorted mixes run again with every query's history
  estimates (analyse's `history`: ρ and dispersion from the half window before the deploy, counted as a day of
  intervals), which the test then combines with the window's. Median of 5 runs after a warm-up, and the peak memory
  traced during one run (tracemalloc sees numpy's and pandas' allocations).
- anchors, like for like: the series that reached E-divisive in the run they are compared with (the typical mix's
  candidates; all 10,000 series for "all candidates"), looped one at a time through Apache Otava's E-divisive
  statistic (PairDistanceCalculator, from a Python list) and MongoDB's signal-processing-algorithms C extension
  (distance matrix and t-values), each in a virtual environment this script creates under benchmarks/.anchors (they
  pin numpy versions incompatible with each other). Only the statistic and its best split are computed there, not a
  permutation test: less work than analyse() does.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from radar_pipeline.engine import analyse  # noqa: E402
from radar_pipeline.engine.noise import noise_estimates, noise_sums  # noqa: E402

HERE = Path(__file__).resolve().parent
ANCHORS = {
    "otava": ("apache-otava==0.8.0", "Apache Otava 0.8.0, PairDistanceCalculator (numpy)"),
    "spa": ("signal-processing-algorithms==2.1.6", "MongoDB signal-processing-algorithms 2.1.6 (C extension)"),
}
DEPLOY = pd.Timestamp("2026-11-29 12:00", tz="UTC")
INTERVALS = 120
SCRAPE = pd.Timedelta(seconds=30)


def series(queries: int, regressed_share: float, seed: int = 0) -> tuple[pd.DataFrame, np.ndarray]:
    """Counters for `queries` queries over 121 scrapes (60 each side of the deploy), and their interval means."""
    rng = np.random.default_rng(seed)
    regressed = rng.random(queries) < regressed_share
    base = rng.lognormal(0.0, 1.0, queries)
    after = np.arange(INTERVALS) >= INTERVALS // 2
    means = base[:, None] * np.where(after[None, :] & regressed[:, None], 2.0, 1.0)
    means = means * rng.lognormal(-0.045, 0.3, (queries, INTERVALS))
    calls = rng.integers(5, 50, (queries, INTERVALS))
    c = np.concatenate([np.zeros((queries, 1)), np.cumsum(calls, axis=1)], axis=1)
    t = np.concatenate([np.zeros((queries, 1)), np.cumsum(calls * means, axis=1)], axis=1)
    times = DEPLOY + SCRAPE * np.arange(-INTERVALS // 2, INTERVALS // 2 + 1)
    frame = pd.DataFrame(
        {
            "query_key": np.repeat(np.arange(queries), INTERVALS + 1),
            "captured_at": np.tile(times, queries),
            "calls": c.ravel().astype(np.int64),
            "total_exec_time": t.ravel(),
        }
    )
    return frame, means


def history_of(frame: pd.DataFrame) -> pd.DataFrame:
    """Every query's history estimates, from its intervals before the deploy, counted as a day's worth."""
    before = noise_estimates(noise_sums(frame, DEPLOY - SCRAPE * INTERVALS, DEPLOY, block=SCRAPE * (INTERVALS // 2)))
    return before.assign(intervals=1440)


def time_ours(frame: pd.DataFrame, history: pd.DataFrame | None = None) -> tuple[float, float, dict, np.ndarray]:
    analyse(frame, DEPLOY, prior=history)  # warm-up
    runs = []
    for _ in range(5):
        started = time.perf_counter()
        out = analyse(frame, DEPLOY, prior=history)
        runs.append(time.perf_counter() - started)
    tracemalloc.start()
    analyse(frame, DEPLOY, prior=history)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    # the floors and the pre-filter stop a statement before E-divisive (engine 2.5 says why one it stopped is not
    # cleared in three more reasons)
    stopped = ["floor_samples", "floor_calls", "below_threshold", "interval_spans_threshold", "interval_too_wide"]
    reached = ~out["reason"].isin([*stopped, "history_conflict"]).to_numpy()
    return statistics.median(runs), peak / 2**20, out["verdict"].value_counts().to_dict(), reached


def anchor_python(name: str) -> Path:
    """The anchor's virtual environment, created on first use."""
    venv = HERE / ".anchors" / name
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", ANCHORS[name][0]], check=True)
    return python


def time_anchor(name: str, matrix_path: Path) -> dict:
    proc = subprocess.run(
        [str(anchor_python(name)), str(HERE / "anchor_runner.py"), name, str(matrix_path)],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=10_000)
    args = parser.parse_args()

    typical, typical_means = series(args.queries, 0.03)
    everything, matrix = series(args.queries, 1.0, seed=1)
    ours = {
        "typical (3% regressed), sorted": time_ours(typical),
        "typical, rows shuffled": time_ours(typical.sample(frac=1.0, random_state=0)),
        "all candidates (100% regressed)": time_ours(everything),
        "typical, sorted, with history": time_ours(typical, history_of(typical)),
        "all candidates, with history": time_ours(everything, history_of(everything)),
    }
    # Each run is compared with the anchors looping over the series that run sent through E-divisive.
    workloads = {"typical": typical_means[ours["typical (3% regressed), sorted"][3]], "all": matrix}
    compared = {
        "typical (3% regressed), sorted": "typical",
        "typical, rows shuffled": "typical",
        "all candidates (100% regressed)": "all",
        "typical, sorted, with history": "typical",
        "all candidates, with history": "all",
    }
    anchors: dict[str, dict[str, dict]] = {}
    for load, values in workloads.items():
        matrix_path = HERE / ".anchors" / f"series-{load}.npy"
        matrix_path.parent.mkdir(parents=True, exist_ok=True)
        np.save(matrix_path, values)
        anchors[load] = {name: time_anchor(name, matrix_path) for name in ANCHORS}

    print(f"{args.queries:,} queries × {INTERVALS} intervals ({len(typical):,} counter rows), median of 5 runs")
    print(f"{'analyse() mix':<34}{'seconds':>9}{'peak MiB':>10}{'to E-div':>10}  verdicts")
    for name, (seconds, peak, verdicts, reached) in ours.items():
        print(f"{name:<34}{seconds:>9.4f}{peak:>10.1f}{int(reached.sum()):>10}  {verdicts}")
    print()
    print(f"{'anchor (statistic only, looped over the same series)':<60}{'series':>8}{'seconds':>9}{'× ours':>9}")
    for name, (seconds, _, _, _) in ours.items():
        for anchor, result in anchors[compared[name]].items():
            label = f"{ANCHORS[anchor][1].split(',')[0]} vs {name}"
            print(f"{label:<60}{result['series']:>8}{result['seconds']:>9.3f}{result['seconds'] / seconds:>9.1f}")


if __name__ == "__main__":
    main()
