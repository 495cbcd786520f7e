"""Groups (issue 29, item 4): how often a group of statements a little slower each is found together, beside the
members' own recall, against a ceiling of the same design; and the false group detections on nulls and at H0's
boundary, within the groups' share of the budget.

Run with `make bench-power` (every part's rows) or `.venv/bin/python benchmarks/power_groups.py [--quick]`.

The statements are the lab's (radar_pipeline/lab/fleet.py): per-call CV log-uniform in 0.5–3 (or 0.5–1 where said),
overdispersion 2–20% with AR(1) φ in 0–0.8, stddev_exec_time present. Each analysis holds one group of 15
statements of one shape (calls per scrape as said) and 85 other statements of the lab's whole range of rates, all
of one role: two groups are formed (the shape's 15 and the role's 100), each with half the groups' budget. The
budget is the first look's (engine.budget.look_budget(B, 0), B = 0.1), split by split_group_budget: GROUP_SHARE
(a fifth) to the groups, the rest to the statements, as decide_window splits it.

- power: the 15 each ×1.4 one minute after the deploy, 30 to 60 calls a side (1–2 calls per one-minute scrape,
  W = 30 min); the group detected, the members' own recall (with the statements' reduced budget, and with the whole
  look's budget as without groups), and the ceiling: the same joint hypothesis (the group's common factor ≤ 1 + θ)
  tested by a z-test told the truth — each member's realised log factor at the true split with its true variance
  (benchmarks/detection_quality.py's oracle variance), combined by inverse-variance weights, at the group's budget
  share. The members' own ceiling is detection_quality.ceiling at their budget shares.
- the issue's lab case: 15 statements of one shape ×1.3 to ×2.5 (drawn from 1.3, 1.5, 1.8, 2.0, 2.5), 3-minute
  windows scraped every 10 s, 13 to 147 calls a side (0.7 to 8 calls per scrape).
- nulls: nothing changed; and H0's boundary: all 100 statements exactly ×(1 + θ) from the deploy's own interval,
  where the guarantee is hardest to keep. False group detections per analysis (target: ≤ the groups' budget, 0.01
  here), and the joint p's level at α = 0.05 for the shape group (far more resolution than the rare detections).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from detection_quality import ceiling  # noqa: E402

from radar_pipeline.engine import EngineSettings, Verdict, analyse  # noqa: E402
from radar_pipeline.engine.budget import look_budget, split_group_budget  # noqa: E402
from radar_pipeline.engine.groups import decide_groups, group_weights  # noqa: E402
from radar_pipeline.lab.fleet import DEPLOY, Fleet, draw, oracle_evidence  # noqa: E402

B = 0.1
GROUP = 15
OTHERS = 85
LAB_STEPS = (1.3, 1.5, 1.8, 2.0, 2.5)
# A row of the power table: its name, the step (or steps drawn from), calls per scrape, per-call CV, minutes each
# side, seconds between scrapes.
Design = tuple[str, float | tuple[float, ...], tuple[float, float], tuple[float, float], int, int]


def _fleet(
    seed: int,
    step: float | tuple[float, ...],
    rate: tuple[float, float],
    cv: tuple[float, float],
    minutes: int,
    scrape_s: int,
    boundary: bool = False,
) -> tuple[Fleet, Fleet]:
    """The group's 15 statements (stepped by `step`, or from it) and the 85 others (unchanged, or at the boundary)."""
    steps = step if isinstance(step, tuple) else (step,)
    stepped = 0.0 if steps == (1.0,) else 1.0
    lag = 0 if boundary else 1  # on the boundary from the deploy's own interval: not diluted inside H0
    group = draw(
        GROUP,
        seed,
        stepped=stepped,
        steps=steps,
        rate=rate,
        cv=cv,
        minutes=minutes,
        scrape_s=scrape_s,
        lag_intervals=lag,
    )
    others = draw(
        OTHERS,
        seed + 500_000,
        stepped=1.0 if boundary else 0.0,
        steps=(1.2,),
        minutes=minutes,
        scrape_s=scrape_s,
        lag_intervals=lag,
    )
    return group, others


def _together(group: Fleet, others: Fleet) -> pd.DataFrame:
    shifted = others.counters.assign(query_key=others.counters["query_key"] + GROUP)
    return pd.concat([group.counters, shifted], ignore_index=True)


def _oracle_group(fleet: Fleet, threshold: float, share: float) -> bool:
    """The group's ceiling: each member's realised log factor at the true split, its true variance (the oracle's of
    detection_quality), inverse-variance weights, a one-sided z-test of the common factor ≤ 1 + θ at `share`."""
    from scipy import stats

    y, v = oracle_evidence(fleet)
    known = np.isfinite(y)
    w = 1 / v[known]
    z = (w @ (y[known] - np.log1p(threshold))) / np.sqrt(w.sum())
    return bool(stats.norm.sf(z) <= share)


def power(
    runs: int,
    step: float | tuple[float, ...],
    rate: tuple[float, float],
    cv: tuple[float, float],
    minutes: int,
    scrape_s: int,
    look: float = look_budget(B, 0),
    groups: tuple[str, ...] = ("shape", "role"),
) -> dict[str, float]:
    """The group detected, the members' own recall (reduced and whole budget), and both ceilings, over `runs`: with
    the look's budget `look`, its groups' share shared among `groups` (the shape's first)."""
    settings = EngineSettings(window=timedelta(minutes=minutes))
    statements, groups_budget = split_group_budget(look, True)
    reduced = dataclasses.replace(settings, false_alert_budget=statements)
    whole = dataclasses.replace(settings, false_alert_budget=look)
    share = groups_budget * float(group_weights(list(groups))["shape"])
    formed = {"shape": list(range(GROUP)), "role": list(range(GROUP + OTHERS))}
    found = {
        "group": 0.0,
        "members": 0.0,
        "members_whole": 0.0,
        "group_ceiling": 0.0,
        "members_ceiling": 0.0,
        "members_above": 0.0,
    }
    for r in range(runs):
        group, others = _fleet(1000 + r, step, rate, cv, minutes, scrape_s)
        counters = _together(group, others)
        out = analyse(counters, DEPLOY, reduced)
        decided = decide_groups(out, {g: formed[g] for g in groups}, groups_budget, settings)
        found["group"] += decided.loc[0, "verdict"] == Verdict.DETECTED
        found["members_above"] += decided.loc[0, "members_above"] / GROUP
        found["members"] += (out["verdict"].iloc[:GROUP] == Verdict.DETECTED).mean()
        alone = analyse(counters, DEPLOY, whole)
        found["members_whole"] += (alone["verdict"].iloc[:GROUP] == Verdict.DETECTED).mean()
        found["group_ceiling"] += _oracle_group(group, settings.threshold, share)
        found["members_ceiling"] += ceiling(group, out["budget_share"].to_numpy()[:GROUP], settings.threshold).mean()
    return {k: v / runs for k, v in found.items()}


def nulls(runs: int, boundary: bool) -> dict[str, float]:
    """False group detections per analysis (either group), and how often the shape group's joint p is ≤ 0.05."""
    settings = EngineSettings()
    statements, groups_budget = split_group_budget(look_budget(B, 0), True)
    reduced = dataclasses.replace(settings, false_alert_budget=statements)
    false, level = 0, 0
    for r in range(runs):
        group, others = _fleet(2000 + r, 1.2 if boundary else 1.0, (0.5, 1500.0), (0.5, 3.0), 30, 60, boundary)
        out = analyse(_together(group, others), DEPLOY, reduced)
        decided = decide_groups(
            out, {"shape": list(range(GROUP)), "role": list(range(GROUP + OTHERS))}, groups_budget, settings
        )
        false += int((decided["verdict"] == Verdict.DETECTED).sum())
        level += decided.loc[0, "p_value"] <= 0.05
    return {"false_per_analysis": false / runs, "level_05": level / runs, "budget": groups_budget}


def main() -> None:
    """Print the groups' rows of the lab's table (markdown)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a CI-sized run (seconds)")
    parser.add_argument("--runs", type=int, default=None, help="analyses per row (default 200; --quick 20)")
    args = parser.parse_args()
    runs = args.runs or (20 if args.quick else 200)
    started = time.perf_counter()
    print(f"\n### Groups (issue 29, item 4): {runs} analyses per row, first look's budget {look_budget(B, 0):g}\n")
    print(
        "| design | group detected | group ceiling | ratio | members alone (reduced B) | members alone (whole B) "
        "| members' ceiling | members' estimate > 1 + θ |"
    )
    print("|---|---|---|---|---|---|---|---|")
    designs: list[Design] = [
        ("15 of one shape ×1.4, 30–60 calls a side, CV 0.5–3", 1.4, (1.0, 2.0), (0.5, 3.0), 30, 60),
        ("15 of one shape ×1.4, 30–60 calls a side, CV 0.5–1", 1.4, (1.0, 2.0), (0.5, 1.0), 30, 60),
        ("15 of one shape ×1.4, 60–120 calls a side, CV 0.5–3", 1.4, (2.0, 4.0), (0.5, 3.0), 30, 60),
        ("issue's lab: 15 ×1.3–×2.5, 3-min windows, 13–147 calls a side", LAB_STEPS, (0.7, 8.0), (0.5, 3.0), 3, 10),
    ]
    # The first design again with more of the budget for its group: what the schedule, not the test, decides.
    budgets: dict[str, dict[str, Any]] = {
        "the same, the shape's group alone (0.01 to it)": {"groups": ("shape",)},
        "the same, the shape's group alone, the whole B's groups' share (0.02)": {"groups": ("shape",), "look": B},
    }
    rows: list[tuple[Design, dict[str, Any]]] = [(d, {}) for d in designs] + [
        ((n, *designs[0][1:]), kw) for n, kw in budgets.items()
    ]
    for (name, step, rate, cv, minutes, scrape_s), extra in rows:
        p = power(runs, step, rate, cv, minutes, scrape_s, **extra)
        ratio = p["group"] / p["group_ceiling"] if p["group_ceiling"] > 0 else float("nan")
        print(
            f"| {name} | {p['group']:.1%} | {p['group_ceiling']:.1%} | {ratio:.2f} | {p['members']:.1%} | "
            f"{p['members_whole']:.1%} | {p['members_ceiling']:.1%} | {p['members_above']:.1%} |"
        )
    print("\n| null | false group detections per analysis | groups' budget | shape group's joint p ≤ 0.05 |")
    print("|---|---|---|---|")
    for name, boundary in (("nothing changed", False), ("H0's boundary: all ×(1 + θ)", True)):
        n = nulls(runs * 2, boundary)
        print(
            f"| {name} ({runs * 2} analyses) | {n['false_per_analysis']:.3f} | {n['budget']:.3f} | "
            f"{n['level_05']:.1%} |"
        )
    print(f"\n({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
