"""The call-level test's own level under the null, at a fixed split (the deploy), by fleet subgroup.

Run with `.venv/bin/python benchmarks/calibration_check.py [--fleets 5] [--history-intervals 1440]`.

Each fleet holds 4,000 unchanged statements (radar_pipeline/lab/fleet.py); the test of H0: after ≤ before
(θ = 0, the boundary where the level is attained) runs at the deploy split only, so neither the choice of split nor
the pre-filter nor the family budget helps. Printed: P(p ≤ α) / α for α = 0.1 … 10⁻⁴, with stddev_exec_time and on
interval means only (a value above 1 is a test more liberal than it says), twice: on the window alone (as engine
2.2.0) and with each statement's noise estimated from its own history (engine.noise, from `--history-intervals`
one-minute scrapes before the window, drawn with the statement's own parameters, nothing changed).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from radar_pipeline.engine.settings import ENGINE_VERSION  # noqa: E402
from radar_pipeline.lab.fleet import DEPLOY, draw, history_estimates, p_at_the_deploy  # noqa: E402

LEVELS = (0.1, 0.01, 0.001, 0.0001)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fleets", type=int, default=5)
    parser.add_argument("--history-intervals", type=int, default=1440)
    args = parser.parse_args()
    p: dict[str, list[np.ndarray]] = {arm: [] for arm in ("sd", "means", "sd_h", "means_h")}
    rate, phi, cv = [], [], []
    for seed in range(args.fleets):
        fleet = draw(4000, 100 + seed)
        history = history_estimates(fleet, args.history_intervals, 9100 + seed, DEPLOY - pd.Timedelta(minutes=30))
        for arm, with_stddev, known in (
            ("sd", True, None),
            ("means", False, None),
            ("sd_h", True, history),
            ("means_h", False, history),
        ):
            values, ok = p_at_the_deploy(fleet.counters, with_stddev, known)
            p[arm].append(values)
        rate.append(fleet.rate[ok])
        phi.append(fleet.phi[ok])
        cv.append(fleet.cv[ok])
    got = {arm: np.concatenate(values) for arm, values in p.items()}
    r, f, c = np.concatenate(rate), np.concatenate(phi), np.concatenate(cv)
    groups = {
        "all": np.ones(len(r), dtype=bool),
        "calls/scrape < 3": r < 3,
        "calls/scrape 3–50": (r >= 3) & (r < 50),
        "calls/scrape ≥ 50": r >= 50,
        "φ > 0.6": f > 0.6,
        "per-call CV > 2": c > 2,
    }
    print(
        f"engine {ENGINE_VERSION}; {len(r):,} unchanged statements at a fixed split; "
        "P(p ≤ α)/α, with stddev / means only"
    )
    for title, sd, means in (
        ("window alone (as engine 2.2.0)", got["sd"], got["means"]),
        (f"with history ({args.history_intervals} intervals before the window)", got["sd_h"], got["means_h"]),
    ):
        print(title)
        print(f"{'group':<20}{'n':>7}" + "".join(f"{f'α = {a:g}':>16}" for a in LEVELS))
        for name, m in groups.items():
            cells = "".join(f"{(sd[m] <= a).mean() / a:>9.2f} /{(means[m] <= a).mean() / a:>5.2f}" for a in LEVELS)
            print(f"{name:<20}{int(m.sum()):>7}{cells}")
        events = "".join(f"{int((sd <= a).sum()):>9} /{int((means <= a).sum()):>5}" for a in LEVELS)
        print(f"{'(events, all)':<27}{events}")


if __name__ == "__main__":
    main()
