"""Detection quality on a simulated fleet: false detections per analysis, recall, and a ceiling, in one run.

Run with `make bench-quality` (or `.venv/bin/python benchmarks/detection_quality.py [--statements N] [--runs R]`).

The fleet (radar_pipeline/lab/fleet.py) is what one analysis of a production server sees: N statements with
calls per scrape log-uniform in 0.5–1,500, per-call CV 0.5–3, interval means overdispersed by 2–20% with AR(1)
φ in 0–0.8, one-minute scrapes, counters with stddev_exec_time generated consistently.

- null: nothing changes. False detections per deploy analysis (W = 30 min, default settings), and per day of
  periodic checks (window P = 1 h, tolerance the whole window, budget B/24 per check, as the periodic check runs);
  each is also measured without stddev_exec_time (interval means only).
- null at the boundary: the same deploy analyses with θ = 0, so every unchanged statement sits exactly on H0's
  boundary (after = (1 + θ) · before), where the budget's guarantee is hardest to keep: the least favourable null,
  which the plain null (20% inside H0) cannot show; the periodic checks' fleets are analysed with θ = 0 too.
- stepped: 5% of statements step up (+30%, +50%, ×2, ×4) one minute after the deploy, 5% drift steadily through the
  window (+20% to +60% across it) with nothing at the deploy. Recall by step and by calls per scrape, the share of
  the execution time the steps added that belongs to detected statements, drifts detected, and false detections
  among the unchanged statements.
- ceiling, on the same stepped fleets: a call-level z-test at the true change point that knows each statement's
  per-call variance, overdispersion and AR(1) factor, at the same hypothesis (θ inside), the same budget shares and
  the same family rule as the engine (engine 2.6: the weighted step-up of engine/fdr.py); and its share of the added
  execution time with the budget spread otherwise (uniformly, by execution time only) and with no family control
  (α = 0.05 per statement).
- unlike: the deploy nulls again (plain and at the boundary), with each statement's history drawn unlike its window
  (UNLIKE: the window 3× busier, 2× more overdispersed, or with twice the AR(1) φ), as a deploy at a peak hour or on a
  bad day meets the days before it.

- clearing (engine 2.5): the share of the truly regressed statements (the steps, all beyond θ) called `no_regression`
  (a wrong "cleared": target ≤ 5%), and on the null deploy analyses the share of the execution time after the deploy
  held by cleared statements at the first verdict, and how many of those deploys would pass (radar.deploy_state: at
  least 90% of it cleared, nothing detected).

Every fleet is analysed twice in the same run: on its window alone (`analyse` without `history`: the detection of
engine 2.2.0) and with each statement's noise estimated from its own history, as production estimates it
(engine.noise over `--history-intervals` one-minute scrapes before the window, drawn with the statement's own calls
per scrape, CV, overdispersion, φ and level; fleet.history_estimates).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from radar_pipeline.engine import ENGINE_VERSION, EngineSettings, Verdict, analyse  # noqa: E402
from radar_pipeline.engine.decision import family_weights  # noqa: E402
from radar_pipeline.lab.fleet import DEPLOY, Fleet, draw, history_estimates, oracle_evidence  # noqa: E402

STEPS = (1.3, 1.5, 2.0, 4.0)
CEILINGS = ("ceiling_w0", "ceiling_w1", "ceiling_alpha")
RATE_BINS = (0.5, 3.0, 30.0, 300.0, 1500.0)
HISTORY_SEED = 77_000  # added to a fleet's seed for its history's
PASS_SHARE = 0.9  # radar.deploy_state's default: the share of the execution time after the deploy cleared to pass
JOBS = 1  # processes the runs are spread over (--jobs)
T = TypeVar("T")


def with_history(fleet: Fleet, seed: int, settings: EngineSettings, intervals: int) -> pd.DataFrame:
    """The fleet's history estimates from `intervals` scrapes before its window."""
    return history_estimates(fleet, intervals, HISTORY_SEED + seed, DEPLOY - pd.Timedelta(settings.window))


def periodic_settings(budget_per_day: float = 0.1, period_s: float = 3600.0) -> EngineSettings:
    """What AnalysisResource.periodic_settings gives: window P, tolerance the whole window, budget B · P / day."""
    window = pd.Timedelta(seconds=period_s).to_pytimedelta()
    return EngineSettings(
        window=window,
        tolerance_floor=window,
        tolerance_fraction=1.0,
        false_alert_budget=budget_per_day * period_s / 86400,
    )


def ceiling(
    fleet: Fleet, budget_share: np.ndarray, threshold: float, rule: str = EngineSettings().family_rule
) -> np.ndarray:
    """Detected by the oracle z-test at the true split (see the module docstring), the family decided by `rule` as
    the engine decides it ("fdr": the weighted step-up over the shares, "bonferroni": each alone at its share) with
    the budget the shares sum to, or "none": each alone at its share with no family; False where no share."""
    from radar_pipeline.engine import fdr

    p = oracle_p(fleet, np.flatnonzero(~np.isnan(budget_share)), threshold)
    if rule == "none":
        return ~np.isnan(p) & (p <= np.nan_to_num(budget_share, nan=0.0))
    budget = float(np.nansum(budget_share))
    decide = fdr.bonferroni if rule == "bonferroni" else fdr.step_up
    return decide(p, np.nan_to_num(budget_share, nan=0.0) / budget, budget)[0]


def oracle_p(fleet: Fleet, rows: np.ndarray, threshold: float) -> np.ndarray:
    """The one-sided p of the oracle z-test at the true split for the statements `rows` (NaN elsewhere, and where a
    side has no calls)."""
    from scipy import stats

    y, var = oracle_evidence(fleet, rows)
    return stats.norm.sf((y - np.log1p(threshold)) / np.sqrt(var))


def _realised_time(fleet: Fleet) -> np.ndarray:
    """Per interval ΔT from the fleet's counters."""
    n = fleet.calls.shape[1]
    t = fleet.counters["total_exec_time"].to_numpy().reshape(-1, n + 1)
    return np.diff(t, axis=1)


# Histories unlike their window: the window is busier (a peak-hour deploy against a day's average), more
# overdispersed, or more serially correlated than the days its statements' noise was estimated from.
UNLIKE = {
    "busier": ("window 3× busier (calls per interval)", lambda f: dataclasses.replace(f, rate=f.rate / 3)),
    "noisier": ("window 2× more overdispersed", lambda f: dataclasses.replace(f, spread=f.spread / 2)),
    "correlated": ("window's AR(1) φ 2× its history's", lambda f: dataclasses.replace(f, phi=f.phi / 2)),
}


def null_runs(
    statements: int,
    runs: int,
    seed: int,
    periodic: bool,
    history: int,
    threshold: float | None = None,
    unlike: bool = False,
    boundary: bool = False,
) -> dict[str, float]:
    """False detections per analysis (per day for the periodic check) on null fleets, for four arms: with
    stddev_exec_time or on interval means only, each on the window alone and with history; with `unlike`, also with
    each of the UNLIKE histories (arms sd_<name>, means_<name>); with `boundary`, every arm also with θ = 0 on the
    same fleets (arms <arm>@0). Per arm also (`cleared_<arm>`) the mean share of the execution time after the split
    held by cleared statements, and (`pass_<arm>`) the share of the analyses that would pass."""
    settings = periodic_settings() if periodic else EngineSettings()
    if threshold is not None:
        settings = dataclasses.replace(settings, threshold=threshold)
    task = functools.partial(_null_run, statements, settings, 60 if periodic else 30, history, unlike, boundary)
    done = _each(task, [seed + r for r in range(runs)])
    scale = 24 if periodic else 1
    result: dict[str, float] = {
        "decided": done[-1][2],
        "seconds": float(np.median([seconds for _, seconds, _ in done])),
    }
    for arm in [a for a in done[0][0] if not a.endswith("_cleared")]:
        total = sum(counts[arm] for counts, _, _ in done)
        result[arm] = total / runs * scale
        result[arm + "_total"] = total
    for arm in [a for a in done[0][0] if a.endswith("_cleared")]:  # shares, not counts
        shares = [counts[arm] for counts, _, _ in done]
        result[arm] = float(np.mean(shares))
        result[arm.replace("_cleared", "_pass")] = float(np.mean([share >= PASS_SHARE for share in shares]))
    return result


def _null_run(
    statements: int, settings: EngineSettings, minutes: int, history: int, unlike: bool, boundary: bool, seed: int
) -> tuple[dict[str, float], float, int]:
    """One null fleet's false detections per arm, the seconds of its analysis with history, and how many
    statements were decided."""
    fleet = draw(statements, seed, minutes=minutes)
    known = with_history(fleet, seed, settings, history)
    plain = fleet.counters.drop(columns="stddev_exec_time")
    cases = [
        ("sd", fleet.counters, None),
        ("means", plain, None),
        ("sd_h", fleet.counters, known),
        ("means_h", plain, known),
    ]
    for name, (_, change) in UNLIKE.items() if unlike else ():
        other = with_history(change(fleet), seed, settings, history)
        cases += [(f"sd_{name}", fleet.counters, other), (f"means_{name}", plain, other)]
    counts: dict[str, float] = {}
    seconds = 0.0
    for arm, counters, estimates in cases:
        started = time.perf_counter()
        out = analyse(counters, DEPLOY, settings, prior=estimates)
        if arm == "sd_h":
            seconds = time.perf_counter() - started
        counts[arm] = int((out["verdict"] == Verdict.DETECTED).sum())
        counts[arm + "_cleared"] = cleared_share(out)
        decided = int((out["verdict"] != "insufficient_data").sum())
        if boundary:
            at_zero = analyse(counters, DEPLOY, dataclasses.replace(settings, threshold=0.0), prior=estimates)
            counts[arm + "@0"] = int((at_zero["verdict"] == Verdict.DETECTED).sum())
    return counts, seconds, decided


def cleared_share(out: pd.DataFrame) -> float:
    """The share of the execution time after the split held by cleared statements, as radar.deploy_state counts it
    (calls_after × mean_after_ms over every statement of the analysis)."""
    time_after = (out["calls_after"] * out["mean_after_ms"]).where(out["calls_after"] > 0, 0.0)
    total = float(time_after.sum())
    return float(time_after[out["verdict"] == Verdict.NO_REGRESSION].sum()) / total if total > 0 else float("nan")


def _each(task: Callable[[int], T], seeds: list[int]) -> list[T]:
    """task(seed) for every seed, in JOBS processes (each run is seeded, so the result does not depend on them)."""
    if JOBS == 1:
        return [task(seed) for seed in seeds]
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(JOBS) as pool:
        return list(pool.map(task, seeds))


def stepped_runs(statements: int, runs: int, seed: int, history: int) -> pd.DataFrame:
    """Per statement of `runs` stepped fleets: its truth, and whether the engine (alone, with history) and the
    ceilings detected it."""
    task = functools.partial(_stepped_run, statements, history)
    return pd.concat(_each(task, [seed + r for r in range(runs)]), ignore_index=True)


def _stepped_run(statements: int, history: int, seed: int) -> pd.DataFrame:
    fleet = draw(statements, seed, stepped=0.05, drifting=0.05, steps=STEPS)
    out = analyse(fleet.counters, DEPLOY)
    known = with_history(fleet, seed, EngineSettings(), history)
    out_h = analyse(fleet.counters, DEPLOY, prior=known)
    detected = (out["verdict"] == Verdict.DETECTED).to_numpy()
    theta = EngineSettings().threshold
    oracle = ceiling(fleet, out["budget_share"].to_numpy(), theta)
    real = _realised_time(fleet)
    # The ceiling under other allocations of the same budget (time weight 0 and 1) and with no family control at
    # all (α = 0.05 per statement): what any test could reach on this lab.
    decidable = ~np.isnan(out["budget_share"].to_numpy())
    before = real[:, : fleet.intervals_before].sum(axis=1)
    budget = EngineSettings().false_alert_budget
    others = {
        f"ceiling_w{w:g}": ceiling(fleet, budget * family_weights(before, decidable, w), theta) for w in (0.0, 1.0)
    }
    others["ceiling_alpha"] = ceiling(fleet, np.where(decidable, 0.05, np.nan), theta, rule="none")
    after = slice(fleet.step_at, None)
    added = (real[:, after] * (1 - 1 / fleet.factor[:, None])).sum(axis=1)
    return pd.DataFrame(
        {
            "factor": fleet.factor,
            "rise": fleet.rise,
            "rate": fleet.rate,
            "added_ms": added,
            "detected": detected,
            "history": (out_h["verdict"] == Verdict.DETECTED).to_numpy(),
            "cleared": (out["verdict"] == Verdict.NO_REGRESSION).to_numpy(),
            "cleared_h": (out_h["verdict"] == Verdict.NO_REGRESSION).to_numpy(),
            "ceiling": oracle,
            **others,
            "reason": out["reason"].to_numpy(),
            "reason_h": out_h["reason"].to_numpy(),
        }
    )


def clear_cases(statements: int, seed: int, history: int) -> dict[str, tuple[float, float]]:
    """Share detected of today's clear cases, on fleets with 100–1,500 calls a minute and the old lab's noise (per-call
    CV 0.5–3, overdispersion 2%, no serial correlation): a ×3 step a minute after the deploy (must be 100%), an
    improvement (÷2), a ×3 step 10 minutes before the deploy, and one 10 minutes after it (tolerance 6 min); and a
    sparse statement (3 calls a minute, 90 a side: below engine 1's floor) slowed ×4. Window alone, with history."""
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
        known = with_history(fleet, seed + i, EngineSettings(), history)
        out[name] = tuple(  # type: ignore[assignment]
            float((analyse(fleet.counters, DEPLOY, prior=h)["verdict"] == Verdict.DETECTED).mean())
            for h in (None, known)
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--statements", type=int, default=5000, help="statements per analysis")
    parser.add_argument("--runs", type=int, default=20, help="stepped analyses")
    parser.add_argument("--null-runs", type=int, default=100, help="null deploy analyses (and at the boundary)")
    parser.add_argument("--periodic-runs", type=int, default=100, help="null periodic checks")
    parser.add_argument("--history-intervals", type=int, default=1440, help="one-minute scrapes of history")
    parser.add_argument("--jobs", type=int, default=1, help="processes to spread the runs over (same results)")
    args = parser.parse_args()
    global JOBS
    JOBS = max(args.jobs, 1)
    n, runs, null, checks, past = args.statements, args.runs, args.null_runs, args.periodic_runs, args.history_intervals

    print(f"engine {ENGINE_VERSION}; window alone (= engine 2.2.0) vs with {past} intervals of history")
    deploy = null_runs(n, null, 1000, periodic=False, history=past, unlike=True)
    periodic = null_runs(n, checks, 2000, periodic=True, history=past, boundary=True)
    boundary = null_runs(n, null, 5000, periodic=False, history=past, threshold=0.0, unlike=True)
    print(f"null fleets: {null} analyses × {n:,} statements (about {deploy['decided']:,} decided per analysis)")
    print(f"{'false detections':<44}{'alone: stddev':>14}{'means':>8}{'history: stddev':>17}{'means':>8}")
    for title, got, suffix, count in (
        ("per deploy analysis (budget 0.1)", deploy, "", f"in {null} analyses"),
        ("per day of hourly periodic checks (0.1/day)", periodic, "", f"in {checks} checks, ×24"),
        ("per deploy analysis at the boundary (θ = 0)", boundary, "", f"in {null} analyses"),
        ("per day of periodic checks at the boundary", periodic, "@0", f"in {checks} checks, ×24"),
    ):
        arms = [arm + suffix for arm in ("sd", "means", "sd_h", "means_h")]
        figures = "".join(f"{got[arm]:>{width}.3f}" for arm, width in zip(arms, (14, 8, 17, 8), strict=True))
        totals = " / ".join(str(got[arm + "_total"]) for arm in arms)
        print(f"{title:<44}{figures}   ({totals} {count})")
    print(f"analyse() with history, median seconds: deploy {deploy['seconds']:.3f}, periodic {periodic['seconds']:.3f}")
    print(f"with a history unlike the window ({null} analyses each): stddev / means, plain null and at the boundary")
    for name, (title, _) in UNLIKE.items():
        row = f"  {title:<42}"
        for got in (deploy, boundary):
            sd, means = (f"{kind}_{name}" for kind in ("sd", "means"))
            row += f"{got[sd]:>8.3f}{got[means]:>7.3f} ({got[sd + '_total']}/{got[means + '_total']})"
        print(row)
    print()

    table = stepped_runs(n, runs, 3000, past)
    steps = table[table["factor"] > 1]
    drifts = table[table["rise"] > 0]
    unchanged = table[(table["factor"] == 1) & (table["rise"] == 0)]
    print(f"stepped fleets: {runs} analyses × {n:,} statements; {len(steps):,} steps, {len(drifts):,} drifts")
    print(f"{'step':<12}{'statements':>11}{'alone':>9}{'history':>9}{'ceiling':>9}")
    for factor in STEPS:
        s = steps[steps["factor"] == factor]
        print(
            f"{'×' + format(factor, 'g'):<12}{len(s):>11}{s['detected'].mean():>9.1%}{s['history'].mean():>9.1%}"
            f"{s['ceiling'].mean():>9.1%}"
        )
    print(f"{'calls/scrape':<12}{'statements':>11}{'alone':>9}{'history':>9}{'ceiling':>9}   (all step sizes)")
    for lo, hi in zip(RATE_BINS[:-1], RATE_BINS[1:], strict=True):
        s = steps[(steps["rate"] >= lo) & (steps["rate"] < hi)]
        print(
            f"{f'{lo:g}–{hi:g}':<12}{len(s):>11}{s['detected'].mean():>9.1%}{s['history'].mean():>9.1%}"
            f"{s['ceiling'].mean():>9.1%}"
        )
    shares = {
        c: steps.loc[steps[c], "added_ms"].sum() / steps["added_ms"].sum() for c in ("detected", "history", "ceiling")
    }
    print(
        f"share of the added execution time detected: alone {shares['detected']:.1%}, history {shares['history']:.1%}, "
        f"ceiling {shares['ceiling']:.1%}"
    )
    reach = {c: steps.loc[steps[c], "added_ms"].sum() / steps["added_ms"].sum() for c in CEILINGS}
    print(
        f"the ceiling's share with the budget spread uniformly {reach['ceiling_w0']:.1%}, by execution time only "
        f"{reach['ceiling_w1']:.1%}; with no family control (α = 0.05 per statement) {reach['ceiling_alpha']:.1%}"
    )
    for column, name in (("detected", "alone"), ("history", "history")):
        print(
            f"{name}: drifts detected {drifts[column].mean():.1%} ({int(drifts[column].sum())} of {len(drifts)}); "
            f"false detections among unchanged statements {unchanged[column].sum() / runs:.3f} per analysis "
            f"({int(unchanged[column].sum())} in {runs})"
        )
    print(f"drift reasons, history: {drifts['reason_h'].value_counts().to_dict()}")
    print()
    bound = f"{EngineSettings().clear_level:.0%} upper bound is within 1 + θ = {1 + EngineSettings().threshold:g}"
    print(f"clearing (engine {ENGINE_VERSION}): no_regression only when the {bound}")
    print(f"{'truly regressed (step > θ) called no_regression':<52}{'alone':>9}{'history':>9}   (target ≤ 5%)")
    for factor in STEPS:
        s = steps[steps["factor"] == factor]
        print(f"{'  ×' + format(factor, 'g'):<52}{s['cleared'].mean():>9.2%}{s['cleared_h'].mean():>9.2%}")
    print(
        f"{'  all steps':<52}{steps['cleared'].mean():>9.2%}{steps['cleared_h'].mean():>9.2%}"
        f"   ({int(steps['cleared'].sum())} / {int(steps['cleared_h'].sum())} of {len(steps):,})"
    )
    print(f"unchanged fleets ({null} deploy analyses): share of the execution time after the deploy cleared at the")
    print(f"first verdict (mean), and deploys that pass (≥ {PASS_SHARE:.0%} cleared, nothing detected)")
    print(f"  {'':<30}{'alone: stddev':>14}{'means':>8}{'history: stddev':>17}{'means':>8}")
    for title, key in (("time cleared", "_cleared"), ("deploys that pass", "_pass")):
        figures = "".join(
            f"{deploy[arm + key]:>{width}.1%}"
            for arm, width in zip(("sd", "means", "sd_h", "means_h"), (14, 8, 17, 8), strict=True)
        )
        print(f"  {title:<30}{figures}")
    print()
    print("clear cases (1,000 statements each, 100–1,500 calls a minute unless said, no serial correlation): detected")
    print(f"  {'':<48}{'alone':>8}{'history':>9}")
    for name, (alone, known) in clear_cases(1000, 4000, past).items():
        print(f"  {name:<48}{alone:>8.1%}{known:>9.1%}")


if __name__ == "__main__":
    main()
