"""The per-interval sum of squares recovered from cumulative (calls, total, stddev) rows equals the one computed from
the calls themselves."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from radar_pipeline.engine.samples import window_samples
from radar_pipeline.engine.variance import interval_sum_of_squares
from radar_pipeline.lab.synthetic import DEPLOY, THIRTY_MINUTES


def _welford(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Cumulative calls, total and population stddev after every call, as pg_stat_statements updates them."""
    count = np.arange(1, len(x) + 1, dtype=np.float64)
    total = np.cumsum(x)
    mean = total / count
    previous = np.concatenate([[0.0], mean[:-1]])
    m2 = np.cumsum((x - previous) * (x - mean))
    return count, total, np.sqrt(m2 / count)


@pytest.mark.parametrize("scale", [1e-3, 1.0, 1e4])
def test_recovers_each_interval_from_per_call_data(scale):
    rng = np.random.default_rng(1)
    x = scale * rng.lognormal(0.0, 1.2, 200_000)  # a long history, then intervals of very different sizes
    count, total, sd = _welford(x)
    cuts = np.array([150_000, 150_001, 150_002, 150_050, 160_000, 160_003, 199_999])
    c1, t1, s1 = count[cuts[:-1] - 1], total[cuts[:-1] - 1], sd[cuts[:-1] - 1]
    c2, t2, s2 = count[cuts[1:] - 1], total[cuts[1:] - 1], sd[cuts[1:] - 1]
    got = interval_sum_of_squares(c1, t1, s1, c2, t2, s2)
    for i, (lo, hi) in enumerate(zip(cuts[:-1], cuts[1:], strict=True)):
        calls = x[lo:hi]
        expected = ((calls - calls.mean()) ** 2).sum()
        if np.isnan(got[i]):  # rounding noise would dominate: unknown is the honest answer
            continue
        assert got[i] == pytest.approx(expected, rel=1e-6, abs=1e-9 * scale**2)
    assert got[0] == 0.0  # one call
    assert np.isfinite(got[[2, 3, 5]]).all()  # tens of calls after 150,000 are still recovered


def test_entry_that_began_in_between_and_inconsistent_rows():
    x = np.array([1.0, 3.0, 8.0])
    count, total, sd = _welford(x)
    assert interval_sum_of_squares(0, 0.0, 0.0, count[-1], total[-1], sd[-1]) == pytest.approx(((x - 4) ** 2).sum())
    # The later row's spread is smaller than the earlier one allows: not one entry (an unseen reset) → unknown.
    assert np.isnan(interval_sum_of_squares(1000, 1000.0, 5.0, 1010, 1010.0, 1.0))
    assert np.isnan(interval_sum_of_squares(10, 10.0, np.nan, 20, 20.0, 1.0))


def test_window_samples_carry_it_and_merge_keys_exactly():
    rng = np.random.default_rng(2)
    frames, per_interval = [], {}
    for key in ("a", "b"):
        x = rng.lognormal(0.0, 0.5, 3000)
        count, total, sd = _welford(x)
        ends = np.arange(0, 3001, 50)  # a scrape every 50 calls, one a minute
        rows = ends[1:] - 1
        frames.append(
            pd.DataFrame(
                {
                    "query_key": key,
                    "captured_at": DEPLOY - THIRTY_MINUTES + pd.Timedelta(minutes=1) * np.arange(len(rows)),
                    "calls": count[rows].astype(np.int64),
                    "total_exec_time": total[rows],
                    "stddev_exec_time": sd[rows],
                    "fingerprint": 1,
                }
            )
        )
        per_interval[key] = [x[lo:hi] for lo, hi in zip(ends[1:-1], ends[2:], strict=True)]
    lo, hi = DEPLOY.value - 10**13, DEPLOY.value + 10**13
    single = window_samples(frames[0].drop(columns="fingerprint"), lo, hi)
    expected = [((c - c.mean()) ** 2).sum() for c in per_interval["a"]]
    np.testing.assert_allclose(single.sumsq, expected, rtol=1e-7)
    merged = window_samples(pd.concat(frames), lo, hi)  # both keys in one group, same snapshots
    both = [np.concatenate([a, b]) for a, b in zip(per_interval["a"], per_interval["b"], strict=True)]
    np.testing.assert_allclose(merged.sumsq, [((c - c.mean()) ** 2).sum() for c in both], rtol=1e-6)
    assert window_samples(frames[0], lo, hi).sumsq is not None
    assert window_samples(frames[0].drop(columns="stddev_exec_time"), lo, hi).sumsq is None
