"""Sums over each statement's runs of samples (samples.segment_sums), as analyse takes them either side of a split."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from radar_pipeline.engine import analyse
from radar_pipeline.engine.samples import segment_sums
from radar_pipeline.lab.synthetic import DEPLOY, counters, step


def test_a_last_statement_without_samples_after_the_deploy_is_decided_with_the_others():
    # The last statement's after side is empty: its runs of samples (and of neighbouring pairs) begin at the very end
    # of the samples, where a sum over them must be 0 rather than an index past the end.
    frames = [counters(f"q{i}", step(seed=i)) for i in range(3)]
    frames.append(counters("z-stopped", step(n_after=0, seed=9)))
    out = analyse(pd.concat(frames, ignore_index=True), DEPLOY).set_index("query_key")
    assert out.loc["z-stopped", "reason"] == "floor_samples"
    assert (out.loc[["q0", "q1", "q2"], "verdict"] == "detected").all()
    assert np.isfinite(out.loc[["q0", "q1", "q2"], "deploy_log_factor"]).all()


@pytest.mark.parametrize("seed", range(5))
def test_segment_sums_match_a_loop_over_the_segments(seed):
    rng = np.random.default_rng(seed)
    values = rng.normal(size=40)
    cuts = np.sort(rng.integers(0, 41, 12))
    # and runs with nothing in them at the end of the values and past it (a last statement's empty side, its pairs)
    starts = np.concatenate([cuts[0::2], [40, 41]])
    sizes = np.concatenate([cuts[1::2] - cuts[0::2], [0, 0]])
    got = segment_sums(values, starts[:, None], sizes[:, None])[:, 0]
    want = [values[a : a + b].sum() for a, b in zip(starts, sizes, strict=True)]
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    counted = segment_sums(values > 0, starts[:, None], sizes[:, None])[:, 0]
    assert counted.dtype == np.int64
    assert counted.tolist() == [int((values[a : a + b] > 0).sum()) for a, b in zip(starts, sizes, strict=True)]
