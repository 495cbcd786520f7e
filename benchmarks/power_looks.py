"""Later looks (issue 29, docs/looks.md): false detections per deploy over all its looks, and recall by the last look
against a ceiling of the same design.

Run with `make bench-power` (every power_*.py) or `.venv/bin/python benchmarks/power_looks.py [--quick]`.

The lab is radar_pipeline/lab/fleet.py's simulated statements (calls per scrape log-uniform 0.5–1,500, per-call CV
0.5–3, overdispersion 2–20% with AR(1) φ 0–0.8, one-minute scrapes, stddev_exec_time), drawn 8W = 4 h either side
of the deploy (W = 30 min), so every look (W, 2W, 4W, 8W after; the before side growing with it) sees its own spans.
Each deploy is decided as production decides it (steps/looks.all_looks): the first verdict at look_budget(B, 0),
then each later look on what is still open, at look_budget(B, k), each statement with its share of the look's whole
family.

- null: nothing changes. False detections per deploy over all its looks (mean count, and the share of deploys with
  any), at the default θ = 20% and at H0's boundary (θ = 0: every unchanged statement exactly on H0's edge), each
  statement with its noise prior from a day of its own history as production has it (fleet.history_estimates); at
  the boundary also on the window alone (which, as docs/benchmarks.md measures for the first verdict, overspends).
- stepped: 5% of statements step (+30%, +50%, ×2, ×4) a minute after the deploy. Recall by step at the first look
  and by the last look; today's first verdict (the whole budget B at W) beside them; and the ceiling of the same
  design: a call-level z-test told the truth (the true split, per-call variance, overdispersion and AR(1) factor,
  θ inside H0) run at the same looks with the same spending and the same family shares, each look testing what it
  has not yet detected. The share of the execution time the steps added over the 8W after the deploy that belongs
  to statements detected by the last look. With the statements' noise priors, as production decides.
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

from radar_pipeline.engine import EngineSettings, Verdict, analyse  # noqa: E402
from radar_pipeline.engine.budget import LOOK_SPANS  # noqa: E402
from radar_pipeline.lab.fleet import DEPLOY, Fleet, draw, history_estimates, oracle_evidence  # noqa: E402
from radar_pipeline.steps.looks import all_looks, family_shares, look_span  # noqa: E402

STEPS = (1.3, 1.5, 2.0, 4.0)
MINUTES = 30 * LOOK_SPANS[-1]  # each side: the last look's after side, and the before side grown to match it
HISTORY = 1440  # one-minute intervals of each statement's history (a day), for its noise prior as production has it
HISTORY_SEED = 77_000


def prior_of(fleet: Fleet, seed: int, history: bool) -> pd.DataFrame | None:
    """The statements' noise priors from a day before the widest look's window (fleet.history_estimates), or None
    (the window alone)."""
    if not history:
        return None
    return history_estimates(fleet, HISTORY, HISTORY_SEED + seed, DEPLOY - pd.Timedelta(minutes=MINUTES))


def null_runs(statements: int, runs: int, seed: int, threshold: float, history: bool = True) -> dict[str, float]:
    """False detections per deploy over all its looks on `runs` null fleets (with each statement's noise prior, or
    on the window alone): mean, share of deploys with any, and per look."""
    settings = dataclasses.replace(EngineSettings(), threshold=threshold)
    counts, looks = [], np.zeros(len(LOOK_SPANS))
    for r in range(runs):
        fleet = draw(statements, seed + r, minutes=MINUTES)
        out = all_looks(fleet.counters, DEPLOY, settings, prior=prior_of(fleet, seed + r, history))
        found = out[out["verdict"] == Verdict.DETECTED]
        counts.append(len(found))
        for look in found["look"].astype(int):
            looks[look] += 1
    return {"mean": float(np.mean(counts)), "any": float(np.mean(np.asarray(counts) > 0)), "runs": runs} | {
        f"look{k}": looks[k] / runs for k in range(len(LOOK_SPANS))
    }


def ceiling_at(fleet: Fleet, share: np.ndarray, threshold: float, lo: int, hi: int, rows: np.ndarray) -> np.ndarray:
    """Detected by the oracle z-test (benchmarks/detection_quality.py's ceiling) at the true split, on the intervals
    [lo, step_at) before it and [step_at, hi) after it, for the statements `rows`; False where no share."""
    from scipy import stats

    rows = np.asarray([i for i in rows if share[i] > 0], dtype=np.int64)
    y, var = oracle_evidence(fleet, rows, lo, hi)
    with np.errstate(invalid="ignore"):
        return stats.norm.sf((y - np.log1p(threshold)) / np.sqrt(var)) <= share


def stepped_runs(statements: int, runs: int, seed: int) -> pd.DataFrame:
    """Per stepped statement of `runs` fleets: its factor, the execution time its step added over the 8W after the
    deploy, and the look that detected it (NaN: none) for the engine and the ceiling; and today's first verdict."""
    settings = EngineSettings()
    frames = []
    for r in range(runs):
        fleet = draw(statements, seed + r, stepped=0.05, steps=STEPS, minutes=MINUTES)
        prior = prior_of(fleet, seed + r, True)
        out = all_looks(fleet.counters, DEPLOY, settings, prior=prior).set_index("query_key")
        today = analyse(fleet.counters, DEPLOY, settings, prior=prior).set_index("query_key")
        stepped = np.flatnonzero(fleet.factor > 1)
        per_side = fleet.intervals_before
        ceiling_look = np.full(statements, np.nan)
        for look in range(len(LOOK_SPANS)):
            span = look_span(settings, look, DEPLOY.to_pydatetime())
            assert span is not None
            shares = family_shares(fleet.counters, DEPLOY, settings, span)
            share = span.budget * shares.reindex(np.arange(statements)).fillna(0.0).to_numpy()
            lo = per_side - int(span.before.total_seconds() // 60)
            hi = per_side + int(span.after.total_seconds() // 60)
            still = stepped[np.isnan(ceiling_look[stepped])]
            found = ceiling_at(fleet, share, settings.threshold, lo, hi, still)
            ceiling_look[found & np.isnan(ceiling_look)] = look
        n = fleet.calls.shape[1]
        real = np.diff(fleet.counters["total_exec_time"].to_numpy().reshape(-1, n + 1), axis=1)
        added = (real[:, fleet.step_at :] * (1 - 1 / fleet.factor[:, None])).sum(axis=1)
        keys = pd.Index(stepped, dtype=object)
        looks = out["look"].reindex(keys).to_numpy(dtype=float)
        verdict = out["verdict"].reindex(keys).to_numpy()
        frames.append(
            pd.DataFrame(
                {
                    "factor": fleet.factor[stepped],
                    "added_ms": added[stepped],
                    "look": np.where(verdict == Verdict.DETECTED, looks, np.nan),
                    "today": (today["verdict"].reindex(keys) == Verdict.DETECTED).to_numpy(),
                    "ceiling_look": ceiling_look[stepped],
                }
            )
        )
    return pd.concat(frames, ignore_index=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a CI-sized run (seconds)")
    parser.add_argument("--statements", type=int, help="statements per deploy (default 1,000; quick 200)")
    parser.add_argument("--runs", type=int, help="stepped deploys (default 15; quick 2)")
    parser.add_argument("--null-runs", type=int, help="null deploys of each row (default 15; quick 2)")
    args = parser.parse_args()
    n = args.statements or (200 if args.quick else 1000)
    runs = args.runs or (2 if args.quick else 15)
    nulls = args.null_runs or (2 if args.quick else 15)
    started = time.perf_counter()

    last = len(LOOK_SPANS) - 1
    spans = ", ".join(f"{s}W" for s in LOOK_SPANS)
    print(f"### Later looks (looks at {spans}; W = 30 min; {n:,} statements per deploy)")
    print()
    plain = null_runs(n, nulls, 29_000, EngineSettings().threshold)
    edge = null_runs(n, nulls, 29_500, 0.0)
    alone = null_runs(n, nulls, 29_500, 0.0, history=False)
    print("| null deploys | deploys | false detections per deploy, all looks | deploys with any | by look 0/1/2/3 |")
    print("|---|---:|---:|---:|---|")
    rows = (
        ("θ = 20%, with history", plain),
        ("H0's boundary (θ = 0), with history", edge),
        ("H0's boundary, the window alone", alone),
    )
    for title, got in rows:
        by_look = " / ".join(f"{got[f'look{k}']:.2f}" for k in range(len(LOOK_SPANS)))
        print(f"| {title} | {nulls} | {got['mean']:.3f} | {got['any']:.1%} | {by_look} |")
    print()

    table = stepped_runs(n, runs, 31_000)
    print(f"| step ({runs} deploys) | statements | today (B at W) | first look | by the last look | ceiling first "
          "| ceiling last | ratio first | ratio last |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for factor in STEPS:
        s = table[table["factor"] == factor]
        first, final = (s["look"] == 0).mean(), s["look"].notna().mean()
        c_first, c_final = (s["ceiling_look"] == 0).mean(), s["ceiling_look"].notna().mean()
        print(
            f"| ×{factor:g} | {len(s)} | {s['today'].mean():.1%} | {first:.1%} | {final:.1%} | {c_first:.1%} "
            f"| {c_final:.1%} | {first / c_first if c_first else float('nan'):.2f} "
            f"| {final / c_final if c_final else float('nan'):.2f} |"
        )
    total = table["added_ms"].sum()
    share = table.loc[table["look"].notna(), "added_ms"].sum() / total
    ceiling_share = table.loc[table["ceiling_look"].notna(), "added_ms"].sum() / total
    first_share = table.loc[table["look"] == 0, "added_ms"].sum() / total
    s13 = table[table["factor"] == 1.3]
    today13, final13 = s13["today"].mean(), s13["look"].notna().mean()
    print()
    print(
        f"Added execution time detected (over the 8W after the deploy): by the last look {share:.1%} (target ≥ 97%), "
        f"at the first look {first_share:.1%}; the ceiling by the last look {ceiling_share:.1%}. "
        f"×1.3 recall by the last look {final13:.1%} = {final13 / today13 if today13 else float('inf'):.1f}× "
        f"today's first verdict ({today13:.1%}; target ≥ 3×). Looks that decided: "
        + ", ".join(f"look {k}: {int((table['look'] == k).sum())}" for k in range(last + 1))
        + f". {time.perf_counter() - started:.0f} s."
    )


if __name__ == "__main__":
    main()
