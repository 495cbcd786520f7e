"""Detection quality: how often the engine finds a real regression, and how often it reports one that is not there.

Run with `make bench-quality` (or `.venv/bin/python benchmarks/detection_quality.py [--queries N]`).

Each cell simulates N queries whose latency steps up by the given size some minutes after the deploy (detection rate)
and N queries with no change at all (false-detection rate), through the engine with its default settings (W = 30 min,
θ = 0.20, α = 0.05, floors 10 samples and 100 calls, tolerance 6 min). The noise model is the detection note's lab:
per-call latency log-normal with coefficient of variation CV, so the mean of c calls has CV/√c, optionally AR(1)-
correlated from one interval to the next. One factor varies per table; the others stay at the base case.

The second table checks the note's §8 price list, N ≈ 15.7·CV²/δ² calls per window for 80% power, against the
measured detection rate when each window holds exactly that many calls (spread over 30 one-minute scrapes).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from radar_pipeline.engine import analyse  # noqa: E402

DEPLOY = pd.Timestamp("2026-11-29 12:00", tz="UTC")
WINDOW_MIN = 30


@dataclass(frozen=True)
class Scenario:
    size: float = 0.5  # relative regression δ
    cv: float = 1.0  # per-call coefficient of variation
    calls: int = 50  # calls per scrape
    lag_min: float = 0.0  # the regression lands this long after the deploy
    phi: float = 0.0  # AR(1) autocorrelation of the interval means' noise
    scrape_s: int = 60  # scrape interval


def simulate(s: Scenario, queries: int, regressed: bool, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    every = pd.Timedelta(seconds=s.scrape_s)
    per_side = int(WINDOW_MIN * 60 // s.scrape_s)
    n = 2 * per_side
    ends = DEPLOY + every * np.arange(-per_side + 1, per_side + 1)  # interval i ends at ends[i]
    sigma = np.sqrt(np.log1p(s.cv**2 / s.calls))  # the mean of c log-normal calls, approximated as log-normal
    z = rng.standard_normal((queries, n))
    noise = np.empty_like(z)
    noise[:, 0] = z[:, 0]
    for i in range(1, n):  # stationary AR(1) with unit variance
        noise[:, i] = s.phi * noise[:, i - 1] + np.sqrt(1 - s.phi**2) * z[:, i]
    base = rng.lognormal(0.0, 1.0, queries)
    landed = np.asarray(ends > DEPLOY + pd.Timedelta(minutes=s.lag_min))
    factor = np.where(landed, 1.0 + s.size, 1.0) if regressed else np.ones(n)
    means = base[:, None] * factor[None, :] * np.exp(sigma * noise - sigma**2 / 2)
    c = np.concatenate([np.zeros((queries, 1)), np.cumsum(np.full((queries, n), s.calls), axis=1)], axis=1)
    t = np.concatenate([np.zeros((queries, 1)), np.cumsum(s.calls * means, axis=1)], axis=1)
    times = np.concatenate([[ends[0] - every], ends])
    return pd.DataFrame(
        {
            "query_key": np.repeat(np.arange(queries), n + 1),
            "captured_at": np.tile(times, queries),
            "calls": c.ravel().astype(np.int64),
            "total_exec_time": t.ravel(),
        }
    )


def rates(s: Scenario, queries: int, seed: int) -> tuple[float, float]:
    hit = (analyse(simulate(s, queries, True, seed), DEPLOY)["verdict"] == "detected").mean()
    false = (analyse(simulate(s, queries, False, seed + 1), DEPLOY)["verdict"] == "detected").mean()
    return float(hit), float(false)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=2000, help="queries per cell and arm")
    args = parser.parse_args()
    base = Scenario()
    grid = {
        "regression size δ": ("size", [0.1, 0.2, 0.3, 0.5, 1.0, 3.0]),
        "per-call CV": ("cv", [0.25, 0.5, 1.0, 2.0, 4.0]),
        "calls per scrape": ("calls", [1, 2, 5, 20, 200]),
        "lag after deploy (min)": ("lag_min", [0, 2, 5, 8, 15]),
        "AR(1) autocorrelation φ": ("phi", [0.0, 0.3, 0.6, 0.9]),
        "scrape interval (s)": ("scrape_s", [15, 30, 60, 120, 300]),
    }
    print(f"base case: {base}; {args.queries:,} regressed and {args.queries:,} unchanged queries per cell")
    print(f"{'factor':<26}{'value':>8}{'detected':>10}{'false':>9}")
    seed = 0
    for label, (field, values) in grid.items():
        for value in values:
            seed += 2
            hit, false = rates(replace(base, **{field: value}), args.queries, seed)
            print(f"{label:<26}{value:>8}{hit:>10.1%}{false:>9.2%}")
        print()

    print("§8 price list: calls per window N = 15.7·CV²/δ² for 80% power, spread over 30 one-minute scrapes")
    print(f"{'δ':>6}{'CV':>6}{'N':>8}{'calls/scrape':>14}{'detected':>10}{'false':>9}")
    for size in (0.2, 0.3, 0.5):
        for cv in (0.5, 1.0, 2.0):
            n_calls = 15.7 * cv**2 / size**2
            per_scrape = max(1, round(n_calls / 30))
            seed += 2
            hit, false = rates(replace(base, size=size, cv=cv, calls=per_scrape), args.queries, seed)
            print(f"{size:>6}{cv:>6}{n_calls:>8.0f}{per_scrape:>14}{hit:>10.1%}{false:>9.2%}")


if __name__ == "__main__":
    main()
