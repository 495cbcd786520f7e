"""Groups (issue 29, item 4): how often a group of statements a little slower each is found together, at the first
look and by the last (the group tested again at each later look while undecided), beside the members' own recall and
a ceiling of the same design; and the false group detections per deploy on nulls and at H0's boundary, at the first
look and over all looks, within the groups' share of the budget.

Run with `make bench-power` (every part's rows) or `.venv/bin/python benchmarks/power_groups.py [--quick]` (--quick:
10 deploys per row, the six designs without the budget variants, ~30 s; the whole run ~13 min).

The statements are the lab's (radar_pipeline/lab/fleet.py): per-call CV log-uniform in 0.5–3 (or 0.5–1 where said),
overdispersion 2–20% with AR(1) φ in 0–0.8, stddev_exec_time present. Each deploy holds one group of 15 statements
of one shape (calls per scrape as said) and 85 other statements of the lab's whole range of rates, all of one role:
two groups are formed (the shape's 15 and the role's 100), each with half the groups' budget. They are drawn over
the last look's spans (8W each side), the statements running at the same rate throughout and no next deploy cutting
the looks. Look k's budget is engine.budget.look_budget(B, k), B = 0.1 (the first look's 0.05), split by
split_group_budget: GROUP_SHARE (a fifth) to the groups, the rest to the statements.

- power: the 15 each ×1.4 (×1.3 in the last design) one minute after the deploy, 30 to 60 calls a side at the first
  look (1–2 calls per one-minute scrape, W = 30 min); the group detected at the first look and by the last
  (engine.groups.group_looks: looks at W, 2W, 4W, 8W, each testing the still undecided groups on every member's
  evidence over its spans with GROUP_SHARE of its budget), the members' own recall at the first look (with the
  statements' reduced budget, and with the whole look's budget as without groups), and the ceilings: the same joint
  hypothesis (the group's common factor ≤ 1 + θ) tested by a z-test told the truth — each member's realised log
  factor at the true split with its true variance (benchmarks/detection_quality.py's oracle), combined by
  inverse-variance weights, at the group's budget share — at the first look, and at every look with that look's
  share (found if any look finds it). The members' own ceiling is detection_quality's at their budget shares.
- the first look's group with other weights that do not read the window's latency (the calls either side, and the
  members' true standard errors, which no test knows: what any weights could gain), and at other GROUP_SHAREs.
- the issue's lab case: 15 statements of one shape ×1.3 to ×2.5 (drawn from 1.3, 1.5, 1.8, 2.0, 2.5), 3-minute
  windows scraped every 10 s, 13 to 147 calls a side (0.7 to 8 calls per scrape); and the same statements all ×1.4
  (the target's step with the issue's own "few dozen calls a side").
- nulls: nothing changed; and H0's boundary: all 100 statements exactly ×(1 + θ) from the deploy's own interval,
  where the guarantee is hardest to keep; and that boundary with shared server noise (ρ 0.1, 0.3 of every
  statement's overdispersion one AR(1) load series common to all: `_shared_counters`), each also decided with the
  members taken as independent (Z not deflated: the test before the deflation). False group detections per deploy
  at the first look (target: ≤ its groups' budget, 0.01) and over all looks (≤ GROUP_SHARE · B = 0.02), and the
  first look's joint p's level at α = 0.05 and 0.005 for the shape group (far more resolution than the rare
  detections).
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

from radar_pipeline.engine import EngineSettings, Verdict, analyse  # noqa: E402
from radar_pipeline.engine.budget import GROUP_SHARE, LOOK_SPANS, look_budget, split_group_budget  # noqa: E402
from radar_pipeline.engine.groups import (  # noqa: E402
    NOISE_SPANS,
    before_series,
    decide_groups,
    group_looks,
    group_weights,
)
from radar_pipeline.lab.fleet import (  # noqa: E402
    DEPLOY,
    Fleet,
    draw,
    oracle_evidence,
    shared_noise_counters,
)

B = 0.1
GROUP = 15
OTHERS = 85
LAB_STEPS = (1.3, 1.5, 1.8, 2.0, 2.5)
# Other shares of a look's budget for its groups, measured at the first look beside GROUP_SHARE.
SHARES = (0.1, 0.3, 0.4)
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
    """The group's 15 statements (stepped by `step`, or from it) and the 85 others (unchanged, or at the boundary),
    drawn over the last look's spans: LOOK_SPANS[-1] · `minutes` each side (the first look reads the middle W)."""
    minutes = minutes * LOOK_SPANS[-1]
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


def _oracle_group(fleet: Fleet, threshold: float, share: float, span: int | None = None) -> bool:
    """The group's ceiling at one look: each member's realised log factor at the true split over the look's spans
    (`span` intervals each side of the deploy; default all), its true variance (the oracle's of detection_quality),
    inverse-variance weights, a one-sided z-test of the common factor ≤ 1 + θ at `share`."""
    from scipy import stats

    y, v = _oracle_span(fleet, span)
    known = np.isfinite(y)
    w = 1 / v[known]
    z = (w @ (y[known] - np.log1p(threshold))) / np.sqrt(w.sum())
    return bool(stats.norm.sf(z) <= share)


def _oracle_span(fleet: Fleet, span: int | None) -> tuple[np.ndarray, np.ndarray]:
    """oracle_evidence over `span` intervals each side of the deploy (all when None)."""
    if span is None:
        return oracle_evidence(fleet)
    return oracle_evidence(fleet, lo=fleet.intervals_before - span, hi=fleet.intervals_before + span)


def _members_ceiling(fleet: Fleet, budget_share: np.ndarray, settings: EngineSettings, span: int) -> float:
    """The members' own ceiling at the first look (detection_quality.ceiling over the first look's spans): the
    oracle z-test of each at the true split, decided by the engine's family rule at their budget shares."""
    from scipy import stats

    from radar_pipeline.engine import fdr

    y, v = _oracle_span(fleet, span)
    p = stats.norm.sf((y - np.log1p(settings.threshold)) / np.sqrt(v))
    shares = np.nan_to_num(budget_share, nan=0.0)
    budget = float(shares.sum())
    decide = fdr.bonferroni if settings.family_rule == "bonferroni" else fdr.step_up
    return float(decide(p, shares / budget, budget)[0].mean())


def _weighted(out: pd.DataFrame, rows: np.ndarray, weights: np.ndarray, threshold: float) -> float:
    """Stouffer's one-sided p for the members `rows` of analyse's verdicts with the given weights (fixed before the
    window's latency is read: they must not depend on it)."""
    from scipy import stats

    y, s, nu = (out[c].to_numpy(dtype=float)[rows] for c in ("deploy_log_factor", "deploy_log_se", "deploy_dof"))
    ok = np.isfinite(y) & np.isfinite(s) & (s > 0) & np.isfinite(nu)
    z = stats.norm.isf(np.clip(stats.t.sf((y[ok] - np.log1p(threshold)) / s[ok], nu[ok]), 1e-300, 1 - 1e-16))
    w = weights[ok]
    return float(stats.norm.sf((w @ z) / np.sqrt(w @ w)))


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
    """The group detected at the first look and by the last, the members' own recall at the first look (reduced and
    whole budget), both ceilings, and the first look's group with other latency-free weights and other shares, over
    `runs`: with the first look's budget `look`, its groups' share shared among `groups` (the shape's first)."""
    settings = EngineSettings(window=timedelta(minutes=minutes), false_alert_budget=look / look_budget(1.0, 0))
    statements, groups_budget = split_group_budget(look, True)
    reduced = dataclasses.replace(settings, false_alert_budget=statements)
    whole = dataclasses.replace(settings, false_alert_budget=look)
    weight = float(group_weights(list(groups))["shape"])
    share = groups_budget * weight
    formed = {"shape": list(range(GROUP)), "role": list(range(GROUP + OTHERS))}
    per_look = [int(LOOK_SPANS[k] * minutes * 60 // scrape_s) for k in range(len(LOOK_SPANS))]
    looks_shares = [split_group_budget(look_budget(settings.false_alert_budget, k), True)[1] * weight for k in range(4)]
    found: dict[str, float] = {
        "group": 0.0,
        "group_last": 0.0,
        "group_independent": 0.0,
        "group_last_independent": 0.0,
        "members": 0.0,
        "members_whole": 0.0,
        "group_ceiling": 0.0,
        "group_ceiling_last": 0.0,
        "members_ceiling": 0.0,
        "members_above": 0.0,
        **{f"group_by_{k}": 0.0 for k in range(1, len(LOOK_SPANS) - 1)},
        "calls_weights": 0.0,
        "true_weights": 0.0,
        **{f"share_{s_:g}": 0.0 for s_ in SHARES},
    }
    for r in range(runs):
        group, others = _fleet(1000 + r, step, rate, cv, minutes, scrape_s)
        counters = _together(group, others)
        out = analyse(counters, DEPLOY, reduced)
        series = before_series(counters, DEPLOY, NOISE_SPANS * settings.window)
        decided = decide_groups(out, {g: formed[g] for g in groups}, groups_budget, settings, before=series)
        first = decided.loc[0]
        as_independent = decide_groups(out, {g: formed[g] for g in groups}, groups_budget, settings).loc[0]
        found["group_independent"] += as_independent["verdict"] == Verdict.DETECTED
        found["group"] += first["verdict"] == Verdict.DETECTED
        found["members_above"] += first["members_above"] / GROUP
        found["members"] += (out["verdict"].iloc[:GROUP] == Verdict.DETECTED).mean()
        alone = analyse(counters, DEPLOY, whole)
        found["members_whole"] += (alone["verdict"].iloc[:GROUP] == Verdict.DETECTED).mean()
        found["group_ceiling"] += _oracle_group(group, settings.threshold, share, per_look[0])
        found["members_ceiling"] += _members_ceiling(
            group, out["budget_share"].to_numpy()[:GROUP], settings, per_look[0]
        )
        # By the last look: the group tested again at each look while undecided (engine.groups.group_looks); its
        # ceiling, the oracle's z-test at every look with each look's share, found if any look finds it.
        last = group_looks(counters, DEPLOY, {g: formed[g] for g in groups}, settings)
        found["group_last"] += last.loc[0, "verdict"] == Verdict.DETECTED
        last_independent = group_looks(counters, DEPLOY, {g: formed[g] for g in groups}, settings, shared=False)
        found["group_last_independent"] += last_independent.loc[0, "verdict"] == Verdict.DETECTED
        for k in range(1, len(LOOK_SPANS) - 1):  # by look k: where the next deploy cuts the later looks
            found[f"group_by_{k}"] += last.loc[0, "verdict"] == Verdict.DETECTED and last.loc[0, "look"] <= k
        found["group_ceiling_last"] += any(
            _oracle_group(group, settings.threshold, looks_shares[k], per_look[k]) for k in range(len(LOOK_SPANS))
        )
        # The first look's shape group with other weights that do not read the window's latency: the calls either
        # side (√(c_b c_a / (c_b + c_a))), and the members' true standard errors (what no test knows: the best any
        # weights can do with the members' own statistics).
        rows = np.arange(GROUP)
        beyond = min(first["factor"], first["factor_but_one"]) > 1 + settings.threshold
        cb, ca = (out[c].to_numpy(dtype=float)[rows] for c in ("calls_before", "calls_after"))
        by_calls = np.sqrt(cb * ca / np.maximum(cb + ca, 1))
        _, v = _oracle_span(group, per_look[0])
        true = 1 / np.sqrt(np.where(np.isfinite(v[rows]), v[rows], np.inf))
        found["calls_weights"] += beyond and _weighted(out, rows, by_calls, settings.threshold) <= share
        found["true_weights"] += beyond and _weighted(out, rows, true, settings.threshold) <= share
        for s_ in SHARES:  # the first look's group at another GROUP_SHARE
            found[f"share_{s_:g}"] += beyond and first["p_value"] <= look * s_ * weight
    return {k: v / runs for k, v in found.items()}


def _shared_counters(seed: int, rho: float, minutes: int = 30) -> pd.DataFrame:
    """The deploy's 100 statements (the first 15 of one shape) at H0's boundary over 8W either side, a share ρ of their
    overdispersion the server's load, common to all (lab.fleet.shared_noise_counters: a review's design)."""
    factor = 1 + EngineSettings().threshold
    return shared_noise_counters(GROUP + OTHERS, seed, rho, factor, minutes * LOOK_SPANS[-1])


def nulls(runs: int, boundary: bool, rho: float | None = None) -> dict[str, float]:
    """False group detections per deploy (either group) at the first look and over all looks, how often the
    shape group's first-look joint p is ≤ 0.05 and ≤ 0.005 (the shape group's own share at the first look), and the
    same with the members taken as independent (Z not deflated by their shared noise). `rho`: the shared server
    noise design (`_shared_counters`, at H0's boundary) instead of the lab's independent statements."""
    settings = EngineSettings()
    statements, groups_budget = split_group_budget(look_budget(B, 0), True)
    reduced = dataclasses.replace(settings, false_alert_budget=statements)
    formed = {"shape": list(range(GROUP)), "role": list(range(GROUP + OTHERS))}
    found = dict.fromkeys(("first", "all", "level_05", "level_005", "first_i", "all_i", "level_05_i", "level_005_i"), 0)
    for r in range(runs):
        if rho is None:
            group, others = _fleet(2000 + r, 1.2 if boundary else 1.0, (0.5, 1500.0), (0.5, 3.0), 30, 60, boundary)
            counters = _together(group, others)
        else:
            counters = _shared_counters(4000 + r, rho)
        out = analyse(counters, DEPLOY, reduced)
        series = before_series(counters, DEPLOY, NOISE_SPANS * settings.window)
        for tail, before in (("", series), ("_i", None)):
            decided = decide_groups(out, formed, groups_budget, settings, before=before)
            found[f"level_05{tail}"] += decided.loc[0, "p_value"] <= 0.05
            found[f"level_005{tail}"] += decided.loc[0, "p_value"] <= 0.005
            looks = group_looks(counters, DEPLOY, formed, settings, shared=before is not None)
            detected = looks["verdict"] == Verdict.DETECTED
            found[f"first{tail}"] += int((detected & (looks["look"] == 0)).sum())
            found[f"all{tail}"] += int(detected.sum())
    return {
        **{k: v / runs for k, v in found.items()},
        "budget_first": groups_budget,
        "budget_all": GROUP_SHARE * B,
    }


def main() -> None:
    """Print the groups' rows of the lab's table (markdown)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a CI-sized run (seconds)")
    parser.add_argument("--runs", type=int, default=None, help="analyses per row (default 200; --quick 10)")
    args = parser.parse_args()
    runs = args.runs or (10 if args.quick else 200)
    started = time.perf_counter()
    spans = ", ".join(f"{k}W" for k in LOOK_SPANS)
    print(
        f"\n### Groups (issue 29, item 4): {runs} deploys per row; first look's budget {look_budget(B, 0):g}, "
        f"looks at {spans}, GROUP_SHARE {GROUP_SHARE:g} of each look's\n"
    )
    by = [f"{LOOK_SPANS[k]}W" for k in range(1, len(LOOK_SPANS) - 1)]
    print(
        f"| design | group, first look | its ceiling | by {' | by '.join(by)} | by the last look | its ceiling "
        "| ratio (last) "
        "| members alone (first look, reduced B) | members alone (whole B) | members' ceiling "
        "| members' estimate > 1 + θ |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|" + "---|" * len(by))
    designs: list[Design] = [
        ("15 of one shape ×1.4, 30–60 calls a side, CV 0.5–3", 1.4, (1.0, 2.0), (0.5, 3.0), 30, 60),
        ("15 of one shape ×1.4, 30–60 calls a side, CV 0.5–1", 1.4, (1.0, 2.0), (0.5, 1.0), 30, 60),
        ("15 of one shape ×1.4, 60–120 calls a side, CV 0.5–3", 1.4, (2.0, 4.0), (0.5, 3.0), 30, 60),
        ("issue's lab: 15 ×1.3–×2.5, 3-min windows, 13–147 calls a side", LAB_STEPS, (0.7, 8.0), (0.5, 3.0), 3, 10),
        ("issue's lab statements, all ×1.4: 3-min windows, 13–147 calls a side", 1.4, (0.7, 8.0), (0.5, 3.0), 3, 10),
        ("15 of one shape ×1.3, 30–60 calls a side, CV 0.5–3", 1.3, (1.0, 2.0), (0.5, 3.0), 30, 60),
    ]
    # The first design again with more of the budget for its group: what the schedule, not the test, decides.
    budgets: dict[str, dict[str, Any]] = {
        "the same, the shape's group alone (0.01 to it)": {"groups": ("shape",)},
        "the same, the shape's group alone, the whole B's groups' share (0.02)": {"groups": ("shape",), "look": B},
    }
    rows: list[tuple[Design, dict[str, Any]]] = [(d, {}) for d in designs]
    if not args.quick:
        rows += [((n, *designs[0][1:]), kw) for n, kw in budgets.items()]
    results = []
    for (name, step, rate, cv, minutes, scrape_s), extra in rows:
        p = power(runs, step, rate, cv, minutes, scrape_s, **extra)
        results.append((name, p))
        ratio = p["group_last"] / p["group_ceiling_last"] if p["group_ceiling_last"] > 0 else float("nan")
        print(
            f"| {name} | {p['group']:.1%} | {p['group_ceiling']:.1%} | "
            + "".join(f"{p[f'group_by_{k}']:.1%} | " for k in range(1, len(LOOK_SPANS) - 1))
            + f"{p['group_last']:.1%} | "
            f"{p['group_ceiling_last']:.1%} | {ratio:.2f} | {p['members']:.1%} | {p['members_whole']:.1%} | "
            f"{p['members_ceiling']:.1%} | {p['members_above']:.1%} |"
        )
    print(
        "\nThe first look's group with other weights that do not read the window's latency, and at other shares of "
        "the look's budget (GROUP_SHARE):\n"
    )
    shares = " | ".join(f"GROUP_SHARE {s_:g}" for s_ in SHARES)
    print(f"| design | equal weights (kept) | the calls' weights | the true standard errors' | {shares} |")
    print("|---|---|---|---|" + "---|" * len(SHARES))
    for name, p in results:
        cells = " | ".join(f"{p[f'share_{s_:g}']:.1%}" for s_ in SHARES)
        print(f"| {name} | {p['group']:.1%} | {p['calls_weights']:.1%} | {p['true_weights']:.1%} | {cells} |")
    print(
        "\nWhat the deflation for shared noise costs: the group detected with its members taken as independent (the "
        "test before it), beside the kept test's:\n"
    )
    print("| design | first look (kept) | as independent | by the last look (kept) | as independent |")
    print("|---|---|---|---|---|")
    for name, p in results:
        print(
            f"| {name} | {p['group']:.1%} | {p['group_independent']:.1%} | {p['group_last']:.1%} | "
            f"{p['group_last_independent']:.1%} |"
        )
    print(
        "\n| null | false group detections per deploy, first look | its budget | over all looks | the groups' "
        "budget | shape group's first-look joint p ≤ 0.05 | ≤ 0.005 | as independent: first look | over all looks "
        "| p ≤ 0.05 | p ≤ 0.005 |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    nulls_rows: list[tuple[str, bool, float | None]] = [
        ("nothing changed", False, None),
        ("H0's boundary: all ×(1 + θ)", True, None),
        ("H0's boundary, shared server noise ρ = 0.1", True, 0.1),
        ("H0's boundary, shared server noise ρ = 0.3", True, 0.3),
    ]
    for name, boundary, rho in nulls_rows:
        n = nulls(runs * 2, boundary, rho)
        print(
            f"| {name} ({runs * 2} deploys) | {n['first']:.3f} | {n['budget_first']:.3f} | {n['all']:.3f} | "
            f"{n['budget_all']:.3f} | {n['level_05']:.1%} | {n['level_005']:.2%} | {n['first_i']:.3f} | "
            f"{n['all_i']:.3f} | {n['level_05_i']:.1%} | {n['level_005_i']:.2%} |"
        )
    print(f"\n({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
