"""Calibration under the null, by a seeded simulation of the fleet lab: the per-statement test's level at a fixed
split, and the false detections of whole analyses against the family budget."""

from __future__ import annotations

import numpy as np

from radar_pipeline.engine import EngineSettings, analyse
from radar_pipeline.engine.decision import _padded
from radar_pipeline.engine.inference import split_tests
from radar_pipeline.engine.samples import window_samples

from .fleet import DEPLOY, draw


def _p_at_the_deploy(seed: int, with_stddev: bool) -> np.ndarray:
    fleet = draw(3000, seed)
    counters = fleet.counters if with_stddev else fleet.counters.drop(columns="stddev_exec_time")
    width = 1800 * 10**9
    samples = window_samples(counters, DEPLOY.value - width, DEPLOY.value + width)
    padded = _padded(samples, np.arange(samples.groups))
    inside = np.arange(padded["end"].shape[1])[None, :] < padded["n"][:, None]
    k = ((padded["end"] <= DEPLOY.value) & inside).sum(axis=1)
    ok = (k >= 3) & (padded["n"] - k >= 3)
    candidate = np.zeros((len(k), padded["end"].shape[1] + 1), dtype=bool)
    candidate[np.arange(len(k)), k] = ok
    sumsq = padded["sumsq"] if with_stddev else None
    return split_tests(padded["calls"], padded["time"], sumsq, padded["n"], candidate, 0.0).p[ok]


def test_the_test_holds_its_level_at_a_fixed_split():
    # θ = 0 puts the null on its boundary, where the level is attained. 6,000 unchanged statements per arm.
    for with_stddev in (True, False):
        p = np.concatenate([_p_at_the_deploy(seed, with_stddev) for seed in (11, 12)])
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
