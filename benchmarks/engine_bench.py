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
- issue 29's input: 10,000 statements × 121 scrapes, every one a candidate (each regressed 2× at the deploy, so it
  passes the pre-filter and steps 5–8 run for all), with stddev_exec_time (consistent cumulative per-call variances)
  and stats_since, in three row orders: sorted by key and time (as the warehouse reads them), generation order (scrape
  by scrape, as a collector writes them) and shuffled. Each is timed next to its anchor, a bare numpy E-divisive +
  Welch core on the same series (`bare_core`: the energy statistic at every split of every series, its best split,
  and Welch's t-test of the interval means there), alternating the two in the same run so both see the same load:
  the minimum of `--repeat` runs of each, their ratio, analyse's CPU seconds (all its threads: the samples' column
  copies and sums of squares, steps 5–7 and E-divisive use both cores) and its peak memory traced in one more run.
  The load average is printed before and after (the cores may be shared). `--issue-only` runs this part alone.
"""

from __future__ import annotations

import argparse
import json
import os
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


def issue_input(queries: int, seed: int = 3) -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
    """Issue 29's input: counters of `queries` statements over 121 scrapes, every one 2× slower after the deploy, with
    stddev_exec_time (each interval's calls drawn with per-call CV ≈ 1, accumulated onto an entry that already holds
    a history, as pg_stat_statements does) and stats_since; rows sorted by key and time. Also the interval means and
    calls ([queries, 120]) the anchor is given."""
    rng = np.random.default_rng(seed)
    base = rng.lognormal(0.0, 1.0, queries)
    after = np.arange(INTERVALS) >= INTERVALS // 2
    means = base[:, None] * np.where(after[None, :], 2.0, 1.0) * rng.lognormal(-0.045, 0.3, (queries, INTERVALS))
    calls = rng.integers(5, 50, (queries, INTERVALS))
    within = means**2 * rng.chisquare(calls - 1)  # each interval's own Σ (x − mean)² over its calls
    first_calls = rng.integers(1000, 5000, queries).astype(np.float64)
    first_mean = base * rng.lognormal(0.0, 0.1, queries)
    c = np.empty((queries, INTERVALS + 1))
    t, m2 = np.empty_like(c), np.empty_like(c)
    c[:, 0], t[:, 0], m2[:, 0] = first_calls, first_calls * first_mean, first_calls * first_mean**2
    for i in range(INTERVALS):  # Chan et al.'s parallel-variance update, as the extension accumulates it
        c[:, i + 1] = c[:, i] + calls[:, i]
        t[:, i + 1] = t[:, i] + calls[:, i] * means[:, i]
        jump = (t[:, i] / c[:, i] - means[:, i]) ** 2
        m2[:, i + 1] = m2[:, i] + within[:, i] + c[:, i] * calls[:, i] / c[:, i + 1] * jump
    times = DEPLOY + SCRAPE * np.arange(-INTERVALS // 2, INTERVALS // 2 + 1)
    frame = pd.DataFrame(
        {
            "query_key": np.repeat(np.arange(queries, dtype=np.int64), INTERVALS + 1),
            "captured_at": np.tile(times, queries),
            "calls": c.ravel().astype(np.int64),
            "total_exec_time": t.ravel(),
            "stddev_exec_time": np.sqrt(m2 / c).ravel(),
            "stats_since": pd.DatetimeIndex(np.repeat(pd.Timestamp("2026-11-28", tz="UTC"), c.size)),
        }
    )
    return frame, means, calls


def row_orders(frame: pd.DataFrame, queries: int) -> dict[str, pd.DataFrame]:
    """The issue's three row orders of a key-and-time-sorted frame with INTERVALS + 1 rows per statement."""
    by_scrape = np.arange(len(frame)).reshape(queries, INTERVALS + 1).T.ravel()
    return {
        "sorted by key and time": frame,
        "generation order": frame.iloc[by_scrape].reset_index(drop=True),
        "shuffled": frame.sample(frac=1.0, random_state=0).reset_index(drop=True),
    }


def bare_core(means: np.ndarray, chunk: int = 512) -> np.ndarray:
    """The anchor: E-divisive's energy statistic at every admissible split of every series (pair distances summed
    one diagonal at a time, time-major, `chunk` series at a time so the working set stays in cache, one thread), its
    argmax, and Welch's one-sided t-test of the interval means either side of it; the p-values."""
    from scipy import stats

    length = means.shape[1]
    m = max(3, length // 10)
    na = np.arange(length + 1, dtype=np.float64)[:, None]
    nb = length - na
    pairs_a, pairs_b, cross = na * (na - 1) / 2, nb * (nb - 1) / 2, na * nb
    p = np.empty(len(means))
    for lo in range(0, len(means), chunk):
        x = np.ascontiguousarray(means[lo : lo + chunk].T)  # [L, series]
        to_earlier, to_later, dist = np.zeros_like(x), np.zeros_like(x), np.empty_like(x)
        for d in range(1, length):
            part = dist[: length - d]
            np.subtract(x[d:], x[:-d], out=part)
            np.abs(part, out=part)
            to_earlier[d:] += part
            to_later[:-d] += part
        within_a = np.zeros((length + 1, x.shape[1]))
        np.cumsum(to_earlier, axis=0, out=within_a[1:])
        within_b = np.zeros((length + 1, x.shape[1]))
        np.cumsum(to_later[::-1], axis=0, out=within_b[-2::-1])
        with np.errstate(divide="ignore", invalid="ignore"):
            q = (
                cross
                / length
                * (2 * (within_a[-1] - within_a - within_b) / cross - within_a / pairs_a - within_b / pairs_b)
            )
        q[:m], q[length - m + 1 :] = -np.inf, -np.inf
        k = np.argmax(q, axis=0)
        before = np.arange(length)[:, None] < k[None, :]
        a_n, b_n = k.astype(np.float64), length - k.astype(np.float64)
        a_mean = np.where(before, x, 0.0).sum(axis=0) / a_n
        b_mean = np.where(before, 0.0, x).sum(axis=0) / b_n
        a_var = np.where(before, (x - a_mean) ** 2, 0.0).sum(axis=0) / (a_n - 1)
        b_var = np.where(before, 0.0, (x - b_mean) ** 2).sum(axis=0) / (b_n - 1)
        u_a, u_b = a_var / a_n, b_var / b_n
        dof = (u_a + u_b) ** 2 / (u_a**2 / (a_n - 1) + u_b**2 / (b_n - 1))
        p[lo : lo + chunk] = stats.t.sf((b_mean - a_mean) / np.sqrt(u_a + u_b), dof)
    return p


def issue_part(queries: int, repeat: int) -> None:
    """Issue 29's input in its three row orders, each against the bare core in the same run (module docstring)."""
    frame, means, _ = issue_input(queries)
    print(f"issue 29's input: {queries:,} statements × {INTERVALS + 1} scrapes, all candidates, with stddev_exec_time")
    print(f"and stats_since ({len(frame):,} rows); minimum of {repeat} runs each, alternating with the anchor")
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())} ({os.cpu_count()} cores)")
    print(f"{'row order':<26}{'analyse s':>10}{'CPU s':>8}{'anchor s':>10}{'× anchor':>10}{'peak MiB':>10}  verdicts")
    for name, rows in row_orders(frame, queries).items():
        analyse(rows, DEPLOY)  # warm-up
        bare_core(means)
        ours, cpu, anchor = [], [], []
        for _ in range(repeat):
            started, used = time.perf_counter(), time.process_time()
            out = analyse(rows, DEPLOY)
            ours.append(time.perf_counter() - started)
            cpu.append(time.process_time() - used)
            started = time.perf_counter()
            bare_core(means)
            anchor.append(time.perf_counter() - started)
        tracemalloc.start()
        analyse(rows, DEPLOY)
        peak = tracemalloc.get_traced_memory()[1] / 2**20
        tracemalloc.stop()
        counts = out["verdict"].value_counts().to_dict()
        print(
            f"{name:<26}{min(ours):>10.3f}{min(cpu):>8.3f}{min(anchor):>10.3f}{min(ours) / min(anchor):>10.1f}"
            f"{peak:>10.1f}  {counts}"
        )
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=7, help="runs of issue 29's input per row order (minimum)")
    parser.add_argument("--issue-only", action="store_true", help="issue 29's input alone")
    args = parser.parse_args()
    issue_part(args.queries, args.repeat)
    if args.issue_only:
        return

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
