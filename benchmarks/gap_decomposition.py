"""Where the engine's recall goes against the ceiling: the stepped fleets of detection_quality.py, step by step.

Run with `make bench-gap` (or `.venv/bin/python benchmarks/gap_decomposition.py [--statements N] [--runs R]`).

Each row adds one thing the engine does that the ceiling (a z-test at the true split with the true variance, the same
budget share) does not, with the engine's own budget shares throughout:

1. the variance estimated from the window (the engine's call-level test) at the true split, normal reference;
2. the same with the t reference (Welch–Satterthwaite degrees of freedom);
3. the best of the engine's candidate splits, the choice not paid for (not a valid test: what selection would give);
4. the choice paid for by Bonferroni (K · p, engine ≤ 2.1);
5. the choice paid for as the engine does (the chain bound, engine 2.2);
6. the whole engine (adds the pre-filter, E-divisive's location and tolerance, the drift check).

Rows 1 to 6 are printed twice: on the window alone (engine 2.2.0's test) and with each statement's noise estimated
from a day of its own history (engine 2.3; fleet.history_estimates, as detection_quality.py draws it).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from detection_quality import STEPS, ceiling  # noqa: E402

from radar_pipeline.engine import EngineSettings, Verdict, analyse  # noqa: E402
from radar_pipeline.engine.decision import _candidate_splits, _padded, _prior_rows  # noqa: E402
from radar_pipeline.engine.inference import split_tests  # noqa: E402
from radar_pipeline.engine.samples import window_samples  # noqa: E402
from radar_pipeline.engine.settings import ENGINE_VERSION  # noqa: E402
from radar_pipeline.lab.fleet import DEPLOY, draw, history_estimates  # noqa: E402

ROWS = (
    "ceiling",
    "1 variance estimated, true split, normal",
    "2 + t reference",
    "3 best of K splits, choice not paid",
    "4 choice paid by Bonferroni (K · p)",
    "5 choice paid as the engine does",
    "6 engine (+ pre-filter, location, drift)",
)


def one_fleet(statements: int, seed: int, history: int) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """The step factor of every statement, and per row of ROWS whether it was detected (rows 1–6 also with
    `history` intervals of history, under the row's name + " h")."""
    from scipy import stats

    settings = EngineSettings()
    fleet = draw(statements, seed, stepped=0.05, drifting=0.05, steps=STEPS)
    out = analyse(fleet.counters, DEPLOY, settings)
    share = out["budget_share"].to_numpy()
    alpha = np.where(np.isnan(share), -1.0, share)
    width = int(settings.window.total_seconds() * 1e9)
    samples = window_samples(fleet.counters, DEPLOY.value - width, DEPLOY.value + width)
    padded = _padded(samples, np.arange(samples.groups))
    ends, n = padded.end, padded.n
    inside = np.arange(ends.shape[1])[None, :] < n[:, None]
    step_starts = DEPLOY.value + (fleet.step_at - fleet.intervals_before) * 60 * 10**9
    k_true = ((ends <= step_starts) & inside).sum(axis=1)
    told = np.zeros((len(n), ends.shape[1] + 1), dtype=bool)
    ok = (k_true >= settings.min_samples) & (n - k_true >= settings.min_samples)
    told[np.flatnonzero(ok), k_true[ok]] = True
    tolerance = int(settings.tolerance.total_seconds() * 1e9)
    candidates = _candidate_splits(ends, n, DEPLOY.value, tolerance, settings)
    args = (padded.calls, padded.time, padded.sumsq, n)
    estimates = history_estimates(fleet, history, 77_000 + seed, DEPLOY - settings.window)
    detected = {ROWS[0]: ceiling(fleet, share, settings.threshold)}
    for suffix, known in (("", None), (" h", _prior_rows(samples, estimates, settings))):
        at_true = split_tests(*args, told, settings.threshold, known)
        best = split_tests(*args, candidates, settings.threshold, known)

        def t_p(res) -> np.ndarray:  # noqa: ANN001
            return stats.t.sf(np.nan_to_num(res.t, nan=-np.inf), np.nan_to_num(res.dof, nan=1.0))

        p = {
            ROWS[1]: stats.norm.sf(np.nan_to_num(at_true.t, nan=-np.inf)),
            ROWS[2]: t_p(at_true),
            ROWS[3]: t_p(best),
            ROWS[4]: np.minimum(1.0, best.splits * t_p(best)),
            ROWS[5]: best.p,
        }
        detected.update({name + suffix: np.nan_to_num(values, nan=1.0) <= alpha for name, values in p.items()})
        engine = out if known is None else analyse(fleet.counters, DEPLOY, settings, prior=estimates)
        detected[ROWS[6] + suffix] = (engine["verdict"] == Verdict.DETECTED).to_numpy()
    return fleet.factor, detected


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--statements", type=int, default=5000)
    parser.add_argument("--runs", type=int, default=6)
    parser.add_argument("--seed", type=int, default=3000)
    parser.add_argument("--history-intervals", type=int, default=1440)
    args = parser.parse_args()
    names = [ROWS[0], *ROWS[1:], *(name + " h" for name in ROWS[1:])]
    factors: list[np.ndarray] = []
    rows: dict[str, list[np.ndarray]] = {name: [] for name in names}
    for r in range(args.runs):
        factor, detected = one_fleet(args.statements, args.seed + r, args.history_intervals)
        factors.append(factor)
        for name in names:
            rows[name].append(detected[name])
    factor = np.concatenate(factors)
    steps = factor > 1
    print(
        f"engine {ENGINE_VERSION}: {args.runs} stepped fleets × {args.statements:,} statements, {steps.sum():,} steps"
    )
    print(f"{'recall':<42}" + "".join(f"{'×' + format(f, 'g'):>8}" for f in STEPS) + f"{'all':>8}")
    for name in names:
        if name == ROWS[1]:
            print("on the window alone (engine 2.2.0's test)")
        if name == ROWS[1] + " h":
            print(f"with {args.history_intervals} intervals of each statement's history")
        hit = np.concatenate(rows[name])
        cells = "".join(f"{hit[factor == f].mean():>8.1%}" for f in STEPS)
        print(f"{name.removesuffix(' h'):<42}{cells}{hit[steps].mean():>8.1%}")


if __name__ == "__main__":
    main()
