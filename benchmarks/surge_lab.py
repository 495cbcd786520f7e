"""The call-surge test's false-surge rate: simulated targets where nothing changed, per analysis.

Run with `.venv/bin/python benchmarks/surge_lab.py [--analyses 200] [--statements 2000]`.

Each analysis draws one target (radar_pipeline/lab/surges.py): calls per interval negative-binomial around
each statement's rate times a target-wide traffic level that wanders (AR(1)); no statement's share of the calls
changes. Scenarios: steady traffic, traffic doubled at the deploy, traffic halved; and the first two with the
practical threshold ρ = 1, where every statement lies on the boundary of H0 and the test's level is attained (with
the default ρ = 2 the null statements lie well inside H0, so the figure there is far below B). Printed per scenario: the
mean number of surges reported per analysis (the family budget B, false_alert_budget, bounds it) and the share of
analyses with any surge, with the number of decidable statements per analysis. Then the power: 20 statements per
analysis whose share of the calls is multiplied by 3, 5 or 20 at the deploy (with the traffic doubled), recall by how
busy the statement was before.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from radar_pipeline.engine import EngineSettings  # noqa: E402
from radar_pipeline.engine.impact import N_PLUS_ONE, SURGE, impact  # noqa: E402
from radar_pipeline.lab.surges import DEPLOY, draw  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--analyses", type=int, default=200)
    parser.add_argument("--statements", type=int, default=2000)
    args = parser.parse_args()
    settings = EngineSettings()
    print(
        f"{args.analyses} analyses × {args.statements} statements, nothing changed; B = {settings.false_alert_budget}, "
        f"surge_ratio ρ = {settings.surge_ratio}"
    )
    print(f"{'scenario':<22}{'surges/analysis':>17}{'P(any surge)':>14}{'decidable':>11}")
    boundary = replace(settings, surge_ratio=1.0)
    scenarios = (
        ("steady traffic", 1.0, settings),
        ("traffic doubled", 2.0, settings),
        ("traffic halved", 0.5, settings),
        ("steady, ρ = 1", 1.0, boundary),
        ("doubled, ρ = 1", 2.0, boundary),
    )
    for name, traffic, chosen in scenarios:
        surges, decidable = [], []
        for seed in range(args.analyses):
            found = impact(draw(args.statements, 1000 + seed, traffic=traffic), DEPLOY, chosen).statements
            surges.append(int(found["kind"].isin([SURGE, N_PLUS_ONE]).sum()))
            decidable.append(int(found["p_family"].notna().sum()))
        s = np.array(surges)
        print(f"{name:<22}{s.mean():>17.3f}{(s > 0).mean():>14.3f}{np.mean(decidable):>11.0f}")
    print()
    print("power: 20 statements per analysis surge (their share of calls × factor), traffic doubled; recall by the")
    print("surging statement's calls per minute before the deploy")
    print(f"{'factor':<10}" + "".join(f"{label:>14}" for label in ("< 10/min", "10–100/min", "≥ 100/min")))
    for factor in (3.0, 5.0, 20.0):
        found, total = np.zeros(3), np.zeros(3)
        for seed in range(max(1, args.analyses // 4)):
            chosen = {i: factor for i in range(20)}
            counters = draw(args.statements, 5000 + seed, traffic=2.0, surge=chosen)
            rows = impact(counters, DEPLOY, settings).statements.set_index("query_key").loc[list(chosen)]
            per_min = rows["calls_per_min_before"].to_numpy()
            band = np.digitize(per_min, [10, 100])
            hit = rows["kind"].isin([SURGE, N_PLUS_ONE]).to_numpy()
            found += np.bincount(band, weights=hit, minlength=3)
            total += np.bincount(band, minlength=3)
        with np.errstate(invalid="ignore"):
            recall = found / total
        print(f"{f'× {factor:g}':<10}" + "".join(f"{r:>14.1%}" for r in recall))


if __name__ == "__main__":
    main()
