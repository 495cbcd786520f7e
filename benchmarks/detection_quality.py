"""Detection quality on a simulated fleet: false detections per analysis, recall, and a ceiling, in one run.

Run with `make bench-quality` (or `.venv/bin/python benchmarks/detection_quality.py [--statements N] [--runs R]`).

The fleet (radar_pipeline_tests/engine/fleet.py) is what one analysis of a production server sees: N statements with
calls per scrape log-uniform in 0.5–1,500, per-call CV 0.5–3, interval means overdispersed by 2–20% with AR(1)
φ in 0–0.8, one-minute scrapes, counters with stddev_exec_time generated consistently.

- null: nothing changes. False detections per deploy analysis (W = 30 min, default settings), and per day of
  periodic checks (window P = 1 h, tolerance the whole window, budget B/24 per check, as the periodic check runs);
  each is also measured without stddev_exec_time (interval means only).
- null at the boundary: the same deploy analyses with θ = 0, so every unchanged statement sits exactly on H0's
  boundary (after = (1 + θ) · before), where the budget's guarantee is hardest to keep: the least favourable null,
  which the plain null (20% inside H0) cannot show.
- stepped: 5% of statements step up (+30%, +50%, ×2, ×4) one minute after the deploy, 5% drift steadily through the
  window (+20% to +60% across it) with nothing at the deploy. Recall by step and by calls per scrape, the share of
  the execution time the steps added that belongs to detected statements, drifts detected, and false detections
  among the unchanged statements.
- ceiling, on the same stepped fleets: a call-level z-test at the true change point that knows each statement's
  per-call variance, overdispersion and AR(1) factor, at the same hypothesis (θ inside) and the same weighted
  Bonferroni budget share per statement as the engine.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from radar_pipeline.engine import EngineSettings, analyse  # noqa: E402
from radar_pipeline_tests.engine.fleet import DEPLOY, Fleet, draw  # noqa: E402

STEPS = (1.3, 1.5, 2.0, 4.0)
RATE_BINS = (0.5, 3.0, 30.0, 300.0, 1500.0)


def periodic_settings(budget_per_day: float = 0.1, period_s: float = 3600.0) -> EngineSettings:
    """What AnalysisResource.periodic_settings gives: window P, tolerance the whole window, budget B · P / day."""
    window = pd.Timedelta(seconds=period_s).to_pytimedelta()
    return EngineSettings(
        window=window,
        tolerance_floor=window,
        tolerance_fraction=1.0,
        false_alert_budget=budget_per_day * period_s / 86400,
    )


def ceiling(fleet: Fleet, budget_share: np.ndarray, threshold: float) -> np.ndarray:
    """Detected by the oracle z-test at the true split (see the module docstring); False where no share."""
    from scipy import stats

    c = fleet.calls.astype(np.float64)
    level = fleet.base[:, None] * np.where(np.arange(c.shape[1])[None, :] >= fleet.step_at, fleet.factor[:, None], 1.0)
    n = c.shape[1]
    lag = np.abs(np.arange(n)[:, None] - np.arange(n)[None, :])
    detected = np.zeros(len(c), dtype=bool)
    time_ = _realised_time(fleet)
    for i in np.flatnonzero(~np.isnan(budget_share)):
        var = []
        means = []
        for side in (slice(0, fleet.step_at), slice(fleet.step_at, n)):
            ci, li = c[i, side], level[i, side]
            calls = ci.sum()
            if calls == 0:
                break
            s2 = fleet.spread[i] ** 2
            cov = np.outer(ci * li, ci * li) * np.expm1(s2 * fleet.phi[i] ** lag[side, side])
            per_call = (fleet.cv[i] ** 2) * (ci * li**2 * np.exp(s2)).sum()
            var.append((cov.sum() + per_call) / calls**2 / (li @ ci / calls) ** 2)
            means.append(time_[i, side].sum() / calls)
        if len(means) < 2 or means[0] <= 0:
            continue
        z = (np.log(means[1] / means[0]) - np.log1p(threshold)) / np.sqrt(var[0] + var[1])
        detected[i] = stats.norm.sf(z) <= budget_share[i]
    return detected


def _realised_time(fleet: Fleet) -> np.ndarray:
    """Per interval ΔT from the fleet's counters."""
    n = fleet.calls.shape[1]
    t = fleet.counters["total_exec_time"].to_numpy().reshape(-1, n + 1)
    return np.diff(t, axis=1)


def null_runs(
    statements: int, runs: int, seed: int, periodic: bool, threshold: float | None = None
) -> dict[str, float]:
    settings = periodic_settings() if periodic else EngineSettings()
    if threshold is not None:
        settings = dataclasses.replace(settings, threshold=threshold)
    minutes = 60 if periodic else 30
    counts, counts_means, seconds = [], [], []
    for r in range(runs):
        fleet = draw(statements, seed + r, minutes=minutes)
        started = time.perf_counter()
        out = analyse(fleet.counters, DEPLOY, settings)
        seconds.append(time.perf_counter() - started)
        counts.append(int((out["verdict"] == "detected").sum()))
        plain = analyse(fleet.counters.drop(columns="stddev_exec_time"), DEPLOY, settings)
        counts_means.append(int((plain["verdict"] == "detected").sum()))
        decided = int((out["verdict"] != "insufficient_data").sum())
    scale = 24 if periodic else 1
    return {
        "false": sum(counts) / runs * scale,
        "false_means": sum(counts_means) / runs * scale,
        "total": sum(counts),
        "total_means": sum(counts_means),
        "decided": decided,
        "seconds": float(np.median(seconds)),
    }


def stepped_runs(statements: int, runs: int, seed: int) -> pd.DataFrame:
    rows = []
    for r in range(runs):
        fleet = draw(statements, seed + r, stepped=0.05, drifting=0.05, steps=STEPS)
        out = analyse(fleet.counters, DEPLOY)
        detected = (out["verdict"] == "detected").to_numpy()
        oracle = ceiling(fleet, out["budget_share"].to_numpy(), EngineSettings().threshold)
        real = _realised_time(fleet)
        after = slice(fleet.step_at, None)
        added = (real[:, after] * (1 - 1 / fleet.factor[:, None])).sum(axis=1)
        rows.append(
            pd.DataFrame(
                {
                    "factor": fleet.factor,
                    "rise": fleet.rise,
                    "rate": fleet.rate,
                    "added_ms": added,
                    "detected": detected,
                    "ceiling": oracle,
                    "reason": out["reason"].to_numpy(),
                }
            )
        )
    return pd.concat(rows, ignore_index=True)


def clear_cases(statements: int, seed: int) -> dict[str, float]:
    """Share detected of today's clear cases, on fleets with 100–1,500 calls a minute and the old lab's noise (per-call
    CV 0.5–3, overdispersion 2%, no serial correlation): a ×3 step a minute after the deploy (must be 100%), an
    improvement (÷2), a ×3 step 10 minutes before the deploy, and one 10 minutes after it (tolerance 6 min); and a
    sparse statement (3 calls a minute, 90 a side: below engine 1's floor) slowed ×4."""
    quiet = {"rate": (100.0, 1500.0), "phi": (0.0, 0.0), "spread": (0.02, 0.02)}
    cases = {
        "×3 at the deploy (≥ 100 calls/min)": {"steps": (3.0,), "lag_intervals": 1},
        "improvement ÷2": {"steps": (0.5,), "lag_intervals": 1},
        "×3 ten minutes before the deploy": {"steps": (3.0,), "lag_intervals": -10},
        "×3 ten minutes after the deploy": {"steps": (3.0,), "lag_intervals": 10},
        **{
            f"×4 at 3 calls a minute, per-call CV {cv:g}": {"steps": (4.0,), "rate": (3.0, 3.0), "cv": (cv, cv)}
            for cv in (0.5, 1.0, 2.0)
        },
    }
    out = {}
    for i, (name, case) in enumerate(cases.items()):
        fleet = draw(statements, seed + i, stepped=1.0, **{**quiet, **case})  # type: ignore[arg-type]
        out[name] = float((analyse(fleet.counters, DEPLOY)["verdict"] == "detected").mean())
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--statements", type=int, default=5000, help="statements per analysis")
    parser.add_argument("--runs", type=int, default=20, help="stepped analyses")
    parser.add_argument("--null-runs", type=int, default=100, help="null deploy analyses (and at the boundary)")
    parser.add_argument("--periodic-runs", type=int, default=100, help="null periodic checks")
    args = parser.parse_args()
    n, runs, null, checks = args.statements, args.runs, args.null_runs, args.periodic_runs

    deploy = null_runs(n, null, 1000, periodic=False)
    periodic = null_runs(n, checks, 2000, periodic=True)
    boundary = null_runs(n, null, 5000, periodic=False, threshold=0.0)
    print(f"null fleets: {null} analyses × {n:,} statements (about {deploy['decided']:,} decided per analysis)")
    print(f"{'false detections':<44}{'with stddev':>14}{'means only':>12}")
    print(
        f"{'per deploy analysis (budget 0.1)':<44}{deploy['false']:>14.3f}{deploy['false_means']:>12.3f}"
        f"   ({deploy['total']} / {deploy['total_means']} in {null} analyses)"
    )
    print(
        f"{'per day of hourly periodic checks (0.1/day)':<44}{periodic['false']:>14.3f}{periodic['false_means']:>12.3f}"
        f"   ({periodic['total']} / {periodic['total_means']} in {checks} checks, ×24)"
    )
    print(
        f"{'per deploy analysis at the boundary (θ = 0)':<44}{boundary['false']:>14.3f}{boundary['false_means']:>12.3f}"
        f"   ({boundary['total']} / {boundary['total_means']} in {null} analyses)"
    )
    print(f"analyse() median seconds per analysis: deploy {deploy['seconds']:.3f}, periodic {periodic['seconds']:.3f}")
    print()

    table = stepped_runs(n, runs, 3000)
    steps = table[table["factor"] > 1]
    drifts = table[table["rise"] > 0]
    unchanged = table[(table["factor"] == 1) & (table["rise"] == 0)]
    print(f"stepped fleets: {runs} analyses × {n:,} statements; {len(steps):,} steps, {len(drifts):,} drifts")
    print(f"{'step':<12}{'statements':>11}{'recall':>9}{'ceiling':>9}")
    for factor in STEPS:
        s = steps[steps["factor"] == factor]
        print(f"{'×' + format(factor, 'g'):<12}{len(s):>11}{s['detected'].mean():>9.1%}{s['ceiling'].mean():>9.1%}")
    print(f"{'calls/scrape':<12}{'statements':>11}{'recall':>9}{'ceiling':>9}   (all step sizes)")
    for lo, hi in zip(RATE_BINS[:-1], RATE_BINS[1:], strict=True):
        s = steps[(steps["rate"] >= lo) & (steps["rate"] < hi)]
        print(f"{f'{lo:g}–{hi:g}':<12}{len(s):>11}{s['detected'].mean():>9.1%}{s['ceiling'].mean():>9.1%}")
    share = steps.loc[steps["detected"], "added_ms"].sum() / steps["added_ms"].sum()
    share_ceiling = steps.loc[steps["ceiling"], "added_ms"].sum() / steps["added_ms"].sum()
    print(f"share of the added execution time detected: {share:.1%} (ceiling {share_ceiling:.1%})")
    print(f"drifts detected: {drifts['detected'].mean():.1%} ({int(drifts['detected'].sum())} of {len(drifts)})")
    print(f"drift reasons: {drifts['reason'].value_counts().to_dict()}")
    print(
        f"false detections among unchanged statements: {unchanged['detected'].sum() / runs:.3f} per analysis "
        f"({int(unchanged['detected'].sum())} in {runs})"
    )
    print()
    print("clear cases (1,000 statements each, 100–1,500 calls a minute unless said, no serial correlation): detected")
    for name, share in clear_cases(1000, 4000).items():
        print(f"  {name:<48}{share:>8.1%}")


if __name__ == "__main__":
    main()
