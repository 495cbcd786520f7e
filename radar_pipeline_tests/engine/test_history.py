"""History bands and creeping drift against a naive recomputation from scratch, and on series with known answers."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from scipy import stats

from radar_pipeline.engine.history import STATE, HistorySettings, extend_history

SETTINGS = HistorySettings()


def naive(values: list[float], begins: list[bool], s: HistorySettings = SETTINGS) -> pd.DataFrame:
    """Each point's band and drift recomputed from the full list of earlier points, one point at a time."""
    segment_of: list[int] = []
    rows = []
    for i, x in enumerate(values):
        seg = 0 if i == 0 else segment_of[-1] + int(begins[i])
        earlier = np.array(values[:i])
        segs = np.array(segment_of)
        centre = spread = z = band = np.nan
        k = len(set(segment_of))
        if i >= s.min_points and i - k >= 1:
            ss = sum(((earlier[segs == g] - earlier[segs == g].mean()) ** 2).sum() for g in set(segment_of))
            spread = np.sqrt(ss / (i - k))
            behind = earlier[segs == segment_of[-1]]
            centre = behind.mean()
            spread = 0.0 if spread <= 1e-9 * abs(centre) else spread
            with np.errstate(divide="ignore", invalid="ignore"):
                z = np.float64(x - centre) / spread
            # A prediction interval for one new point: t on i − k degrees of freedom, the tail of a normal z.
            band = stats.t.ppf(1 - stats.norm.sf(s.z), i - k) * spread * np.sqrt(1 + 1 / len(behind))
        segment_of.append(seg)
        in_segment = [v for v, g in zip(values[: i + 1], segment_of, strict=True) if g == seg][-s.drift_points :]
        rise = p = np.nan
        if len(in_segment) >= s.drift_min_points:
            xs = np.arange(len(in_segment))
            slope, intercept, *_ = stats.theilslopes(in_segment, xs, method="joint")
            if intercept > 1e-9 * max(np.abs(in_segment)):
                rise = slope * (len(in_segment) - 1) / intercept
            if rise >= s.drift_rise:
                p = stats.kendalltau(xs, in_segment, alternative="greater").pvalue
        rows.append(
            {
                "segment": seg,
                "centre_ms": centre,
                "spread_ms": spread,
                "band_ms": band,
                "z_score": z,
                "drift_rise": rise,
                "drift_p": p,
                "above_band": bool(x > centre + band),
            }
        )
    return pd.DataFrame(rows)


def _run(values, begins, split: int = 0, s: HistorySettings = SETTINGS) -> pd.DataFrame:
    """extend_history over the points, the first `split` of them given first and carried over as prior state."""
    frame = pd.DataFrame({"series": "q", "mean_ms": values, "begins_segment": begins})
    first = extend_history(frame.iloc[:0], frame.iloc[:split], s) if split else None
    if first is None:
        return extend_history(pd.DataFrame(columns=["series", "mean_ms", *STATE]), frame, s)
    prior = pd.concat([frame.iloc[:split][["series", "mean_ms"]], first[STATE]], axis=1)
    rest = extend_history(prior, frame.iloc[split:], s)
    return pd.concat([first, rest])


COMPARED = ["segment", "centre_ms", "spread_ms", "band_ms", "z_score", "drift_rise", "drift_p", "above_band"]


@settings(max_examples=60, deadline=None)
@example(values=[1.0, 2.0, 2.0, 2.0, 2.0, 1.0], seed=130, split_share=0.0)  # zero spread, a point below the centre
@example(values=[0.1, 2.0, 2.0, 1.1, 2.0], seed=32, split_share=0.0)  # a rise of exactly drift_rise, up to rounding
@given(
    values=st.lists(st.one_of(st.floats(0.1, 100.0), st.sampled_from([0.1, 1.0, 2.0, 5.0])), min_size=1, max_size=30),
    seed=st.integers(0, 2**16),
    split_share=st.floats(0, 1),
)
def test_matches_the_naive_recomputation_whatever_the_split(values, seed, split_share):
    rng = np.random.default_rng(seed)
    begins = list(rng.random(len(values)) < 0.15)
    split = int(split_share * len(values))
    got = _run(values, begins, split)
    want = naive(values, begins)
    pd.testing.assert_frame_equal(
        got[COMPARED].reset_index(drop=True), want[COMPARED], check_dtype=False, rtol=1e-9, atol=1e-12
    )


def test_many_series_at_once_equal_each_series_alone():
    rng = np.random.default_rng(3)
    frames = []
    for q in range(40):
        n = int(rng.integers(1, 25))
        frames.append(
            pd.DataFrame({"series": q, "mean_ms": rng.lognormal(0, 0.3, n), "begins_segment": rng.random(n) < 0.1})
        )
    together = pd.concat(frames, ignore_index=True).sample(frac=1, random_state=1)  # queries interleaved
    together = together.sort_index(kind="stable")  # each query's points stay oldest first
    result = extend_history(pd.DataFrame(columns=["series", "mean_ms", *STATE]), together)
    for q, frame in together.groupby("series"):
        want = naive(frame["mean_ms"].tolist(), frame["begins_segment"].tolist())
        got = result.loc[frame.index, COMPARED].reset_index(drop=True)
        pd.testing.assert_frame_equal(got, want[COMPARED], check_dtype=False, rtol=1e-9, atol=1e-12, obj=f"query {q}")


def _noisy(level: float, n: int, rng: np.random.Generator, cv: float = 0.03) -> list[float]:
    return list(level * rng.lognormal(0, cv, n))


def test_a_step_neither_blows_up_the_band_nor_leaves_the_new_segment_without_one():
    rng = np.random.default_rng(7)
    values = _noisy(10.0, 20, rng) + _noisy(20.0, 10, rng)
    begins = [False] * 20 + [True] + [False] * 9
    got = _run(values, begins)
    sd_before = float(np.std(values[:20], ddof=1))
    assert got["z_score"].iloc[20] > 20  # the step itself is far above the old band
    after = got.iloc[21:]
    assert (after["centre_ms"] > 18).all()  # the centre moved with the step at once
    assert (after["spread_ms"] < 2 * sd_before).all()  # the step is not counted as spread
    assert not after["above_band"].any()
    # Just after the step the centre rests on one point, so the band is wider for the spread; it narrows as the
    # segment fills (sqrt(1 + 1/m): ×1.41 at m = 1, ×1.05 at m = 9).
    widening = after["band_ms"] / after["spread_ms"]
    assert widening.iloc[0] > 1.3 * widening.iloc[-1]
    # A naive rolling band over the same points would be blown up by the step:
    assert np.std(values[10:25], ddof=1) > 5 * sd_before


def test_creeping_drift_is_flagged_and_a_flat_or_stepped_series_is_not():
    rng = np.random.default_rng(11)
    creeping = [10.0 * 1.08**i * rng.lognormal(0, 0.02) for i in range(10)]  # +8% a deploy: none detected alone
    got = _run(creeping, [False] * 10)
    assert got["drift"].iloc[-1]
    assert got["drift_rise"].iloc[-1] == pytest.approx(1.08**9 - 1, rel=0.15)
    assert got["drift_p"].iloc[-1] < 0.001
    assert not got["above_band"].any()  # each step is small against the band: the band alone misses it

    flat = _run(_noisy(10.0, 12, rng), [False] * 12)
    assert not flat["drift"].any()
    stepped = _run(_noisy(10.0, 8, rng) + _noisy(20.0, 4, rng), [False] * 8 + [True] + [False] * 3)
    assert not stepped["drift"].any()  # a detected step begins a segment: it is a regression, not a drift


def test_settings_are_validated():
    with pytest.raises(ValueError, match="drift_min_points must be at least 3"):
        HistorySettings(drift_min_points=2)
    with pytest.raises(ValueError, match="unknown history settings: zz"):
        HistorySettings.from_dict({"zz": 1})
    assert HistorySettings.from_dict(HistorySettings(z=4).to_dict()) == HistorySettings(z=4)
