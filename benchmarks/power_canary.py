"""The canary arm's lab (issue 29, docs/canary.md): false detections per canary analysis, recall per step, and the
ceiling of the same design, on two simulated arms with a shared per-interval load.

Run with `make bench-power` (every power_*.py), or `.venv/bin/python benchmarks/power_canary.py [--quick]`.

Each analysis: N statements (lab/fleet.py's: calls per scrape log-uniform 0.5–1,500, per-call CV 0.5–3, interval
means overdispersed 2–20% with AR(1) φ 0–0.8) run by both roles, the canary taking `--canary-share` of each
statement's calls from the deploy on, the stable role the rest, scraped every minute; the whole server's load wanders
(log-normal, 10%, AR(1) 0.8) and, in the load-step rows, steps ×1.5 at the deploy for both arms. The canary window is
W = 30 min after the deploy; B = 0.1 per canary analysis.

- null: the canary as fast as the stable (factor 1), load steady, and load ×1.5 from the deploy on; beside the
  latter, what before/after alone (the engine's `analyse` on the stable role's own statements, W either side) calls
  detected: the load step blamed on the deploy.
- boundary: every canary statement exactly at H0's boundary (factor 1 + θ = 1.2), with the load step.
- with the noise prior: the boundary and the steps again, each statement's noise prior estimated from 12 hours of
  one-minute scrapes of its whole traffic before the deploy (lab/canary.py's history_estimates), as production
  estimates it (steps/noise.py) and the canary analysis uses it.
- steps: 5% of the statements slowed in the canary by ×1.3 / ×1.5 / ×2 / ×4, the load step too; recall per step,
  and the ceiling's: a z-test of the same estimator told the true variance of A − r·B (both arms' per-call variance,
  overdispersion and its AR(1), given the calls), the same hypothesis (θ inside H0) and the same budget share.
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import timedelta
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from radar_pipeline.engine import EngineSettings, Verdict, analyse  # noqa: E402
from radar_pipeline.engine.canary import canary_analyse  # noqa: E402
from radar_pipeline.lab.canary import Arms, draw_arms, history_estimates  # noqa: E402
from radar_pipeline.lab.fleet import DEPLOY  # noqa: E402

STEPS = (1.3, 1.5, 2.0, 4.0)
LOAD_STEP = 1.5
STEPPED_SHARE = 0.05
HISTORY_INTERVALS = 720  # the noise prior's scrapes (12 hours of one-minute scrapes before the deploy)
HISTORY_SEED = 77_000


def canary_run(arms: Arms, settings: EngineSettings, history: int = 0, seed: int = 0):  # type: ignore[no-untyped-def]
    """The canary analysis of one pair of arms; with `history`, with the statements' noise prior from that many
    scrapes before the deploy."""
    prior = history_estimates(arms, history, HISTORY_SEED + seed) if history else None
    return canary_analyse(arms.canary, arms.stable, DEPLOY, DEPLOY + settings.window, settings, prior)


def ceiling(arms: Arms, result, settings: EngineSettings) -> np.ndarray:  # type: ignore[no-untyped-def]
    """Detected by the ceiling: the same ratio estimator r̂ (the canary analysis's change_factor) judged with the true
    variance of A − r·B given the calls (module docstring), at the same θ and budget share."""
    from scipy import stats

    share = result["budget_share"].to_numpy()
    r_hat = result["change_factor"].to_numpy()
    keys = result["query_key"].to_numpy().astype(int)
    c = arms.calls_canary[keys].astype(np.float64)
    s = arms.calls_stable[keys].astype(np.float64)
    paired = (c > 0) & (s > 0)
    c, s = np.where(paired, c, 0.0), np.where(paired, s, 0.0)
    lc, ls = arms.level_canary[keys], arms.level_stable[keys]
    spread2 = arms.spread[keys] ** 2
    phi, cv2 = arms.phi[keys], arms.cv[keys] ** 2
    r = arms.factor[keys]
    n = c.shape[1]
    lag = np.abs(np.arange(n)[:, None] - np.arange(n)[None, :])
    kernel = np.expm1(spread2[:, None, None] * phi[:, None, None] ** lag[None])
    uc, us = c * lc, c * ls  # each interval's expected canary time, and its calls at the stable arm's level
    var_a = np.einsum("ki,kij,kj->k", uc, kernel, uc) + cv2 * np.exp(spread2) * (c * lc**2).sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        per_call_s = np.where(s > 0, c * c / s, 0.0) * ls**2
    var_b = np.einsum("ki,kij,kj->k", us, kernel, us) + cv2 * np.exp(spread2) * per_call_s.sum(axis=1)
    expected = uc.sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        se = np.sqrt(var_a + r**2 * var_b) / expected
        z = (np.log(r_hat) - np.log1p(settings.threshold)) / se
    ok = ~np.isnan(share) & np.isfinite(z)
    return ok & (stats.norm.sf(np.where(ok, z, 0.0)) <= np.where(ok, share, 0.0) * settings.false_alert_budget)


def null_rows(
    statements: int, runs: int, prior_runs: int, seed: int, share: float, settings: EngineSettings
) -> list[str]:
    """False detections per canary analysis under the nulls, and before/after's under the load step."""
    rows = []
    boundary = f"H0 boundary (×{1 + settings.threshold:g}), load ×{LOAD_STEP}"
    cases = [
        ("null, load steady", 1.0, 1.0, False, 0, runs),
        (f"null, load ×{LOAD_STEP} at the deploy", 1.0, LOAD_STEP, True, 0, runs),
        (boundary, 1 + settings.threshold, LOAD_STEP, False, 0, runs),
        (boundary + ", with the noise prior", 1 + settings.threshold, LOAD_STEP, False, HISTORY_INTERVALS, prior_runs),
    ]
    for name, factor, load, before_after, history, count in cases:
        canary_fd, ba_fd, analyses_with = [], [], []
        for run in range(count):
            arms = draw_arms(statements, seed + run, factor=factor, load_step=load, canary_share=share)
            result = canary_run(arms, settings, history, seed + run)
            detected = int((result["verdict"] == Verdict.DETECTED).sum())
            canary_fd.append(detected)
            analyses_with.append(detected > 0)
            if before_after:
                verdicts = analyse(arms.stable, DEPLOY.to_pydatetime(), settings)
                ba_fd.append(int((verdicts["verdict"] == Verdict.DETECTED).sum()))
        rows.append(
            f"| canary: {name} | {count} × {statements} | {np.mean(canary_fd):.3f} | {np.mean(analyses_with):.1%} |"
        )
        if before_after:
            rows.append(
                f"| before/after alone (stable role): null, load ×{LOAD_STEP} at the deploy | {runs} × {statements} | "
                f"{np.mean(ba_fd):.1f} | {np.mean(np.asarray(ba_fd) > 0):.1%} |"
            )
    return rows


def step_rows(
    statements: int, runs: int, seed: int, share: float, settings: EngineSettings, history: int = 0
) -> list[str]:
    """Recall per step of the canary analysis (with the noise prior from `history` scrapes when given) and of its
    ceiling, with the load step."""
    found = {step: [0, 0, 0] for step in STEPS}  # statements, detected, ceiling
    false = 0
    for run in range(runs):
        rng = np.random.default_rng(seed + 10_000 + run)
        stepped = rng.random(statements) < STEPPED_SHARE
        factor = np.where(stepped, rng.choice(np.asarray(STEPS), statements), 1.0)
        arms = draw_arms(statements, seed + 20_000 + run, factor=factor, load_step=LOAD_STEP, canary_share=share)
        result = canary_run(arms, settings, history, seed + 20_000 + run)
        keys = result["query_key"].to_numpy().astype(int)
        detected = (result["verdict"] == Verdict.DETECTED).to_numpy()
        oracle = ceiling(arms, result, settings)
        f = arms.factor[keys]
        false += int((detected & (f == 1.0)).sum())
        for step in STEPS:
            at = f == step
            found[step][0] += int(at.sum())
            found[step][1] += int((detected & at).sum())
            found[step][2] += int((oracle & at).sum())
    rows = []
    prior = ", with the noise prior" if history else ""
    for step, (count, detected, oracle) in found.items():
        recall, top = detected / max(count, 1), oracle / max(count, 1)
        rows.append(
            f"| canary: step ×{step:g}, load ×{LOAD_STEP}{prior} | {count} | {recall:.1%} | {top:.1%} | "
            f"{recall / top if top > 0 else float('nan'):.2f} |"
        )
    rows.append(f"| canary: false detections among unchanged statements, per analysis{prior} | {runs} | "
                f"{false / runs:.3f} | | |")  # fmt: skip
    return rows


def main() -> None:
    """Print the canary arm's rows of the lab's table (markdown)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a CI-sized run (seconds)")
    parser.add_argument("--statements", type=int, default=None)
    parser.add_argument("--runs", type=int, default=None)
    parser.add_argument("--canary-share", type=float, default=0.2, help="the canary's share of each statement's calls")
    parser.add_argument("--seed", type=int, default=2900)
    args = parser.parse_args()
    statements = args.statements or (200 if args.quick else 1000)
    runs = args.runs or (5 if args.quick else 100)
    settings = EngineSettings(window=timedelta(minutes=30))
    started = time.perf_counter()
    print(f"### Canary arm (W = 30 min, B = {settings.false_alert_budget} per canary analysis, θ = "
          f"{settings.threshold:g}, canary share {args.canary_share:g})\n")  # fmt: skip
    print("| null | analyses × statements | false detections per analysis | analyses with any |")
    print("| --- | --- | --- | --- |")
    prior_runs = max(runs // 3, 2)  # a prior's history costs a few seconds a run to draw
    for row in null_rows(statements, runs, prior_runs, args.seed, args.canary_share, settings):
        print(row)
    print("\n| stepped (5% of statements) | statements | recall | ceiling | ratio |")
    print("| --- | --- | --- | --- | --- |")
    for row in step_rows(statements, runs, args.seed, args.canary_share, settings):
        print(row)
    for row in step_rows(statements, prior_runs, args.seed, args.canary_share, settings, HISTORY_INTERVALS):
        print(row)
    print(f"\n({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
