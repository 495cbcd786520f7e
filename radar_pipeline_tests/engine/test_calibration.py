"""Calibration under the null, by a seeded simulation of the fleet lab: the per-statement test's level at a fixed
split, and the false detections of whole analyses against the family budget."""

from __future__ import annotations

import numpy as np

from radar_pipeline.engine import EngineSettings, analyse
from radar_pipeline.lab.fleet import DEPLOY, draw, p_at_the_deploy


def test_the_test_holds_its_level_at_a_fixed_split():
    # θ = 0 puts the null on its boundary, where the level is attained. 6,000 unchanged statements per arm.
    for with_stddev in (True, False):
        p = np.concatenate([p_at_the_deploy(draw(3000, seed).counters, with_stddev)[0] for seed in (11, 12)])
        assert len(p) > 5000
        for alpha, slack in ((0.1, 1.25), (0.01, 1.6)):
            assert (p <= alpha).mean() <= slack * alpha, (with_stddev, alpha, (p <= alpha).mean())


def test_false_detections_per_analysis_stay_within_the_budget():
    settings = EngineSettings()
    false = 0
    for seed in range(6):
        out = analyse(draw(2000, 100 + seed).counters, DEPLOY, settings)
        false += int((out["verdict"] == "detected").sum())
        assert out["budget_share"].sum() <= settings.false_alert_budget * (1 + 1e-9)
    # Expected at most 0.1 per analysis, so at most 0.6 here; 2 or more has probability below 0.13 by Poisson.
    assert false <= 1
