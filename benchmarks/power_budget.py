"""The budget, spent where regressions are (issue 29, part 5): engine 2.5's weighted Bonferroni against engine 2.6's
weighted Benjamini–Hochberg step-up (engine/fdr.py), side by side on the same simulated deploys.

Run with `make bench-power` (every part's script) or `.venv/bin/python benchmarks/power_budget.py [--quick]`.

Each deploy is one analysis of a fleet (radar_pipeline/lab/fleet.py) of `--statements` statements, analysed twice:
the old rule (`family_rule="bonferroni"`) and the new (the default), with the same weights (`budget_time_weight`).

- null: nothing changes (θ = 0.2 inside H0); false detections per deploy, as the mean count and the share of deploys
  with any;
- boundary: the same fleets with θ = 0, every statement on H0's boundary (the least favourable null);
- shared noise: plain and at the boundary again, every statement's interval means multiplied by one server-wide
  AR(1) factor (log-scale spread 10%, φ 0.5: load that rises and falls for every statement at once), the positive
  dependence a family of statements of one server has (interval means only: the per-call sums of squares are not
  rescaled);
- k regress together: k of the statements (5, 10, 15) step by ×1.3, ×1.5, ×2 or ×4 a minute after the deploy, drawn
  like the others (calls per scrape 0.5–1,500);
- plan flip: k cheap, sparse statements (0.15–0.6 calls a minute, so 5–18 calls a side) slow ×50 or ×100, as an
  index drop or a plan flip turns them.

Recall is over the regressed statements, with the ceiling of the same design (detection_quality.ceiling: the oracle
z-test told the true split and variance, θ inside H0, the same shares, the same rule and budget) and the ratio to it;
"false" counts the unchanged statements detected in those deploys.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from detection_quality import ceiling  # noqa: E402

from radar_pipeline.engine import ENGINE_VERSION, EngineSettings, Verdict, analyse  # noqa: E402
from radar_pipeline.lab.fleet import DEPLOY, Fleet, draw  # noqa: E402

NEW = EngineSettings()
OLD = dataclasses.replace(NEW, family_rule="bonferroni")
RULES = {"bonferroni (2.5)": OLD, "fdr (2.6)": NEW}
STEPS = (1.3, 1.5, 2.0, 4.0)
FLIPS = (50.0, 100.0)
FLIP_RATE = (0.15, 0.6)
TOGETHER = (5, 10, 15)


def combine(*fleets: Fleet) -> Fleet:
    """One fleet of the statements of several drawn with the same window (query keys renumbered in order)."""
    offset = 0
    frames = []
    for fleet in fleets:
        frame = fleet.counters.copy()
        frame["query_key"] += offset
        frames.append(frame)
        offset += len(fleet.rate)
    first = fleets[0]
    joined = {
        f.name: np.concatenate([getattr(x, f.name) for x in fleets])
        for f in dataclasses.fields(Fleet)
        if isinstance(getattr(first, f.name), np.ndarray)
    }
    return Fleet(
        counters=pd.concat(frames, ignore_index=True),
        step_at=first.step_at,
        intervals_before=first.intervals_before,
        **joined,
    )


def shared_noise(fleet: Fleet, seed: int, spread: float = 0.1, phi: float = 0.5) -> pd.DataFrame:
    """The fleet's counters with every interval's execution time multiplied by one server-wide AR(1) log-normal
    factor (the same for every statement), without stddev_exec_time."""
    rng = np.random.default_rng(seed)
    n = fleet.calls.shape[1]
    z = rng.standard_normal(n)
    ar = np.empty(n)
    ar[0] = z[0]
    for i in range(1, n):
        ar[i] = phi * ar[i - 1] + np.sqrt(1 - phi**2) * z[i]
    factor = np.exp(spread * ar - spread**2 / 2)
    counters = fleet.counters.drop(columns="stddev_exec_time")
    total = counters["total_exec_time"].to_numpy().reshape(-1, n + 1)
    steps = np.diff(total, axis=1) * factor[None, :]
    total = np.concatenate([total[:, :1], total[:, :1] + np.cumsum(steps, axis=1)], axis=1)
    return counters.assign(total_exec_time=total.ravel())


def null_deploys(statements: int, runs: int, seed: int) -> pd.DataFrame:
    """False detections per deploy on null fleets, per rule: plain and at the boundary, each also with shared
    noise."""
    rows = []
    for r in range(runs):
        fleet = draw(statements, seed + r)
        noisy = shared_noise(fleet, seed + r)
        for name, settings in RULES.items():
            at_zero = dataclasses.replace(settings, threshold=0.0)
            for case, counters, used in (
                ("null", fleet.counters, settings),
                ("null, shared noise", noisy, settings),
                ("boundary (θ = 0)", fleet.counters, at_zero),
                ("boundary, shared noise", noisy, at_zero),
            ):
                out = analyse(counters, DEPLOY, used)
                rows.append({"case": case, "rule": name, "false": int((out["verdict"] == Verdict.DETECTED).sum())})
    return pd.DataFrame(rows)


def together(statements: int, k: int, runs: int, seed: int, flip: bool) -> pd.DataFrame:
    """Per rule and deploy: the regressed statements detected, by the engine and by the ceiling, and the false."""
    rows = []
    for r in range(runs):
        base = draw(statements - k, seed + r)
        if flip:
            regressed = draw(k, seed + 50_000 + r, stepped=1.0, steps=FLIPS, rate=FLIP_RATE)
        else:
            regressed = draw(k, seed + 50_000 + r, stepped=1.0, steps=STEPS)
        fleet = combine(base, regressed)
        truth = fleet.factor > 1
        added = added_ms(fleet)
        for name, settings in RULES.items():
            out = analyse(fleet.counters, DEPLOY, settings)
            detected = (out["verdict"] == Verdict.DETECTED).to_numpy()
            oracle = ceiling(fleet, out["budget_share"].to_numpy(), settings.threshold, settings.family_rule)
            decidable = (out["verdict"] != Verdict.INSUFFICIENT_DATA).to_numpy()
            rows.append(
                {
                    "rule": name,
                    "regressed": int(truth.sum()),
                    "decidable": int((truth & decidable).sum()),
                    "found": int((detected & truth).sum()),
                    "ceiling": int((oracle & truth).sum()),
                    "false": int((detected & ~truth).sum()),
                    "added_found": float(added[detected & truth].sum()),
                    "added": float(added[truth].sum()),
                    "calls_a_side": out.loc[truth, ["calls_before", "calls_after"]].to_numpy().min(axis=1).tolist(),
                    "found_each": detected[truth].tolist(),
                }
            )
    return pd.DataFrame(rows)


def added_ms(fleet: Fleet) -> np.ndarray:
    """Per statement, the execution time its step added after the deploy (ms)."""
    n = fleet.calls.shape[1]
    real = np.diff(fleet.counters["total_exec_time"].to_numpy().reshape(-1, n + 1), axis=1)
    return (real[:, fleet.step_at :] * (1 - 1 / fleet.factor[:, None])).sum(axis=1)


def stepped_lab(statements: int, runs: int, seed: int, weights: list[float]) -> None:
    """detection_quality's stepped lab (5% of the statements stepped ×1.3–×4, 5% drifting) under the new rule with
    each budget_time_weight: the share of the added execution time detected and the steps found, engine and ceiling."""
    print(f"The weights' aim against their floor: detection_quality's stepped lab, {runs} deploys × {statements:,}")
    print()
    print("| budget_time_weight | added time found | steps found | ceiling: added time | ceiling: steps |")
    print("|---|---|---|---|---|")
    got = {w: np.zeros(5) for w in weights}
    for r in range(runs):
        fleet = draw(statements, seed + r, stepped=0.05, drifting=0.05, steps=STEPS)
        truth = fleet.factor > 1
        added = added_ms(fleet)
        for w in weights:
            settings = dataclasses.replace(NEW, budget_time_weight=w)
            out = analyse(fleet.counters, DEPLOY, settings)
            detected = (out["verdict"] == Verdict.DETECTED).to_numpy() & truth
            oracle = ceiling(fleet, out["budget_share"].to_numpy(), settings.threshold) & truth
            got[w] += [added[detected].sum(), detected.sum(), added[oracle].sum(), oracle.sum(), added[truth].sum()]
    for w, (found, steps, top, top_steps, total) in got.items():
        print(f"| {w:g} | {found / total:.1%} | {steps:.0f} | {top / total:.1%} | {top_steps:.0f} |")
    print()


def handful(statements: int, seed: int) -> None:
    """What a handful of calls can show: the p of a cheap statement slowed ×10 or ×50, by calls a side and per-call CV,
    against the level a share gives it (alone: α(B) · w, w = 1/m for a floor of the whole budget over m statements)."""
    from radar_pipeline.engine import fdr

    alpha = fdr.level(NEW.false_alert_budget)
    print(f"A handful of calls: p of a statement slowed ×F alone ({statements} such statements per cell, median and")
    print(f"share with p ≤ level), and the family size m whose even share 1/m reaches the median (α(B) = {alpha:.4f})")
    print()
    print("| slowdown | calls a side | per-call CV | median p | p ≤ 1e-4 | p ≤ 1e-3 | m for the median |")
    print("|---|---|---|---|---|---|---|")
    for factor in (10.0, 50.0):
        for calls in (5, 10, 20):
            for cv in (0.5, 1.0, 2.0):
                rate = (calls / 30, calls / 30)
                fleet = draw(statements, seed, stepped=1.0, steps=(factor,), rate=rate, cv=(cv, cv))
                out = analyse(fleet.counters, DEPLOY, NEW)
                p = out.loc[out["verdict"] != Verdict.INSUFFICIENT_DATA, "p_value"].fillna(1.0).to_numpy()
                median = float(np.median(p))
                print(
                    f"| ×{factor:g} | {calls} | {cv:g} | {median:.1e} | {(p <= 1e-4).mean():.0%} "
                    f"| {(p <= 1e-3).mean():.0%} | {alpha / median:,.0f} |"
                )
                seed += 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a CI-sized run (seconds)")
    parser.add_argument("--statements", type=int, default=None, help="statements per deploy (default 3,000)")
    parser.add_argument("--runs", type=int, default=None, help="deploys per row (default 10)")
    parser.add_argument("--null-runs", type=int, default=None, help="null deploys (default 60)")
    parser.add_argument(
        "--time-weights",
        type=float,
        nargs="*",
        default=[],
        help="also the new rule with these budget_time_weight values (the weights' floor against their aim)",
    )
    args = parser.parse_args()
    for weight in args.time_weights:
        RULES[f"fdr, time weight {weight:g}"] = dataclasses.replace(NEW, budget_time_weight=weight)
    n = args.statements or (500 if args.quick else 3000)
    runs = args.runs or (2 if args.quick else 10)
    null = args.null_runs or (4 if args.quick else 60)

    budget = NEW.false_alert_budget
    print(f"### The budget (part 5): engine {ENGINE_VERSION}, {n:,} statements a deploy, budget B = {budget}")
    print()
    print(f"False detections per deploy ({null} deploys per row; target ≤ {NEW.false_alert_budget})")
    print()
    print("| case | rule | mean count | share with any | total |")
    print("|---|---|---|---|---|")
    nulls = null_deploys(n, null, 61_000)
    for (case, rule), got in nulls.groupby(["case", "rule"], sort=False):
        count = got["false"]
        print(f"| {case} | {rule} | {count.mean():.3f} | {(count > 0).mean():.3f} | {count.sum()} |")
    print()
    print(
        f"Recall when k statements regress together ({runs} deploys per row), ratio to the ceiling of the same design"
    )
    print()
    print("| regressed together | rule | recall | ceiling | ratio | added time found | false per deploy |")
    print("|---|---|---|---|---|---|---|")
    flips = []
    for flip in (False, True):
        for k in TOGETHER:
            got = together(n, k, runs, 71_000 + 1000 * k + (500 if flip else 0), flip)
            what = f"{k} plan flips ×50–×100, 5–18 calls a side" if flip else f"{k} steps ×1.3–×4"
            for rule, rows in got.groupby("rule", sort=False):
                recall = rows["found"].sum() / rows["regressed"].sum()
                top = rows["ceiling"].sum() / rows["regressed"].sum()
                ratio = recall / top if top > 0 else float("nan")
                share = rows["added_found"].sum() / rows["added"].sum()
                print(
                    f"| {what} | {rule} | {recall:.1%} | {top:.1%} | {ratio:.2f} | {share:.1%} "
                    f"| {rows['false'].mean():.2f} |"
                )
            if flip:
                flips.append(got)
    print()
    print("Plan flips by calls a side (the fewer side's), all k together: found")
    print()
    print("| calls a side | flips | " + " | ".join(RULES) + " |")
    print("|---|---|" + "---|" * len(RULES))
    each = pd.concat(flips)
    bins = ((2, 5), (5, 10), (10, 20), (20, 1000))
    for lo, hi in bins:
        cells = []
        count = 0
        for rule in RULES:
            rows = each[each["rule"] == rule]
            calls = np.concatenate(rows["calls_a_side"].to_numpy())
            found = np.concatenate(rows["found_each"].to_numpy())
            inside = (calls >= lo) & (calls < hi)
            count = int(inside.sum())
            cells.append(f"{found[inside].mean():.1%}" if count else "–")
        print(f"| {lo}–{hi - 1} | {count} | " + " | ".join(cells) + " |")
    print()
    if args.time_weights:
        stepped_lab(1000 if args.quick else 5000, 1 if args.quick else 4, 3000, sorted({*args.time_weights, 0.5}))
    handful(100 if args.quick else 300, 81_000)


if __name__ == "__main__":
    main()
