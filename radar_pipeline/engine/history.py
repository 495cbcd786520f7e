"""History bands: each query's post-deploy means over many deploys, judged against a segment-aware band.

A query's points (one per analysed deploy) fall into segments; a segment begins at a point where a regression was
detected. Each new point is judged against a band made from earlier points only (no future data):

- centre: the mean of the current segment's earlier points, so a step change moves the centre at once;
- spread: the pooled standard deviation of every earlier point's residual from the mean of its own segment,
  s = sqrt(SS / (n − k)) over n points in k segments, so a step neither blows the band up (the step is not a residual)
  nor leaves a new segment without a spread (the spread comes from all segments);
- half-width: a prediction interval for the next point, q · s · sqrt(1 + 1/m) with m the points behind the centre and
  q the Student-t quantile on n − k degrees of freedom whose tail equals the normal tail beyond z. With much history
  it is z · s; with little, or just after a step (m small), it is wider, and it narrows as the segment fills.

Creeping drift is the slow climb that no single deploy makes large enough to detect: over the last points of the
current segment, a Theil–Sen trend line whose rise across them is at least `drift_rise` of its starting level, with a
one-sided Kendall trend test at or below `drift_alpha`.

Everything is incremental: a point's band needs only the running state after the point before it (the segment's
count and mean, the points, the segments and the residual sum of squares), so extending a long history reads one row
per query. New points are processed position by position, vectorised across all queries.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np
import pandas as pd

# Running state after a point: the next point's band is made from these alone.
STATE = ["segment", "seg_points", "seg_mean_ms", "points", "segments", "residual_ss"]
RESULT = [
    "segment",
    "centre_ms",
    "spread_ms",
    "band_ms",
    "z_score",
    "above_band",
    "drift_rise",
    "drift_p",
    "drift",
    "seg_points",
    "seg_mean_ms",
    "points",
    "segments",
    "residual_ss",
]


START_FLOOR = 1e-9  # a drift line must start above this share of its largest point to have a relative rise
SPREAD_FLOOR = 1e-9  # a spread at or below this share of the centre is rounding noise, taken as zero


@dataclass(frozen=True)
class HistorySettings:
    """The band and drift parameters, recorded with every point.

    z: the band's tail as a normal z (5, as performance-history tools commonly use: points are means of many calls,
    but their spread across deploys has heavier tails than a normal's); a point above centre + half-width is above
    the band, the half-width widened for the uncertainty of a centre and spread made from few points.
    min_points: earlier points a query needs before it has a band.
    drift_points: how many of the current segment's latest points the drift trend is fitted to.
    drift_min_points: fewer points than this in the segment: no drift judgement.
    drift_rise: the trend's rise across those points, relative to its starting level, that counts as drift.
    drift_alpha: the one-sided Kendall trend test's p at or below which the climb is not chance.
    """

    z: float = 5.0
    min_points: int = 5
    drift_points: int = 10
    drift_min_points: int = 5
    drift_rise: float = 0.5
    drift_alpha: float = 0.05

    def __post_init__(self) -> None:
        problems = []
        if not self.z > 0:
            problems.append(f"z must be positive, not {self.z}")
        if self.min_points < 2:
            problems.append(f"min_points must be at least 2, not {self.min_points}")
        if self.drift_min_points < 3:
            problems.append(
                f"drift_min_points must be at least 3 (a trend needs three points), not {self.drift_min_points}"
            )
        if self.drift_points < self.drift_min_points:
            problems.append(
                f"drift_points ({self.drift_points}) must be at least drift_min_points ({self.drift_min_points})"
            )
        if not self.drift_rise > 0:
            problems.append(f"drift_rise must be positive, not {self.drift_rise}")
        if not 0 < self.drift_alpha < 1:
            problems.append(f"drift_alpha must lie strictly between 0 and 1, not {self.drift_alpha}")
        if problems:
            raise ValueError("invalid HistorySettings: " + "; ".join(problems))

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready record of the settings."""
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> HistorySettings:
        """Settings from `to_dict` or run config; unknown keys refused."""
        unknown = sorted(set(values) - {f.name for f in fields(cls)})
        if unknown:
            raise ValueError(f"unknown history settings: {', '.join(unknown)}")
        return cls(**values)


@dataclass
class _RunningState:
    """Each series' running state (one entry per series code): what the next point's band is made from."""

    segment: np.ndarray
    seg_n: np.ndarray
    seg_mean: np.ndarray
    n: np.ndarray
    k: np.ndarray
    ss: np.ndarray
    recent: np.ndarray  # the current segment's latest means, right-aligned, NaN-padded

    @classmethod
    def empty(cls, series: int, width: int) -> _RunningState:
        """Every series before its first point."""
        return cls(
            segment=np.full(series, -1, dtype=np.int64),
            seg_n=np.zeros(series, dtype=np.int64),
            seg_mean=np.full(series, np.nan),
            n=np.zeros(series, dtype=np.int64),
            k=np.zeros(series, dtype=np.int64),
            ss=np.zeros(series),
            recent=np.full((series, width), np.nan),
        )


def extend_history(prior: pd.DataFrame, points: pd.DataFrame, settings: HistorySettings | None = None) -> pd.DataFrame:
    """Judge new points against their queries' bands and carry the running state forward.

    prior: each query's latest earlier points, oldest first (the last `drift_points` are enough): columns series,
    mean_ms and the STATE columns. Only the last row's state is used, and the means of the rows in its segment feed
    the drift trend. A query without rows in `prior` starts afresh.
    points: the new points, oldest first within each query: columns series, mean_ms, begins_segment (a regression was
    detected at this point, or since the previous one). The first point of a query always begins segment 0.
    Returns RESULT columns on the index of `points`.
    """
    settings = settings or HistorySettings()
    codes, series = pd.factorize(pd.concat([prior["series"], points["series"]], ignore_index=True), sort=False)
    prior_codes, point_codes = codes[: len(prior)], codes[len(prior) :]
    state = _state_after(prior, prior_codes, len(series), settings.drift_points)

    x_all = points["mean_ms"].to_numpy(dtype=float)
    begins_all = points["begins_segment"].to_numpy(dtype=bool)
    position = pd.Series(point_codes).groupby(point_codes).cumcount().to_numpy()
    out = {name: np.full(len(points), np.nan) for name in RESULT}
    # Position by position (a query's 1st new point, then its 2nd, ...), each step vectorised across queries.
    for p in range(int(position.max(initial=-1)) + 1):
        r = np.flatnonzero(position == p)
        s, x = point_codes[r], x_all[r]
        for name, values in _band(state, s, x, settings).items():
            out[name][r] = values
        _add_points(state, s, x, begins_all[r] | (state.segment[s] < 0))
        out["drift_rise"][r], out["drift_p"][r] = _drift(state.recent[s], settings)
        for name, values in (
            ("segment", state.segment[s]),
            ("seg_points", state.seg_n[s]),
            ("seg_mean_ms", state.seg_mean[s]),
            ("points", state.n[s]),
            ("segments", state.k[s]),
            ("residual_ss", state.ss[s]),
        ):
            out[name][r] = values

    result = pd.DataFrame(out, index=points.index)
    result["above_band"] = points["mean_ms"].to_numpy(dtype=float) > result["centre_ms"] + result["band_ms"]
    result["drift"] = (result["drift_rise"] >= settings.drift_rise) & (result["drift_p"] <= settings.drift_alpha)
    for name in ("segment", "seg_points", "points", "segments"):
        result[name] = result[name].astype(np.int64)
    return result[RESULT]


def _state_after(prior: pd.DataFrame, prior_codes: np.ndarray, series: int, width: int) -> _RunningState:
    """The running state after each series' last prior point, and its current segment's latest means."""
    state = _RunningState.empty(series, width)
    if not len(prior):
        return state
    last = pd.DataFrame({"code": prior_codes, "row": np.arange(len(prior))}).groupby("code")["row"].last()
    at, rows = last.index.to_numpy(), last.to_numpy()
    state.segment[at] = prior["segment"].to_numpy()[rows]
    state.seg_n[at] = prior["seg_points"].to_numpy()[rows]
    state.seg_mean[at] = prior["seg_mean_ms"].to_numpy()[rows]
    state.n[at] = prior["points"].to_numpy()[rows]
    state.k[at] = prior["segments"].to_numpy()[rows]
    state.ss[at] = prior["residual_ss"].to_numpy()[rows]
    same = prior["segment"].to_numpy() == state.segment[prior_codes]
    tail = pd.DataFrame({"code": prior_codes[same], "x": prior["mean_ms"].to_numpy()[same]})
    back = tail.groupby("code").cumcount(ascending=False).to_numpy()
    keep = back < width
    state.recent[tail["code"].to_numpy()[keep], width - 1 - back[keep]] = tail["x"].to_numpy()[keep]
    return state


def _band(state: _RunningState, s: np.ndarray, x: np.ndarray, settings: HistorySettings) -> dict[str, np.ndarray]:
    """Each new point (series s, mean x) against the band made from its series' earlier points: centre, spread,
    half-width and z (NaN where the series has too few points for a band)."""
    dof = state.n[s] - state.k[s]
    banded = (state.n[s] >= settings.min_points) & (dof >= 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        spread = np.where(banded, np.sqrt(state.ss[s] / np.maximum(dof, 1)), np.nan)
        centre = np.where(banded, state.seg_mean[s], np.nan)
        # Identical earlier points leave a spread of zero, or of rounding noise: both are zero, and any
        # difference is then infinitely far (±inf; NaN when equal).
        spread = np.where(spread <= SPREAD_FLOOR * np.abs(centre), 0.0, spread)
        z = np.where(spread > 0, (x - centre) / spread, np.sign(x - centre) * np.inf)
    band = _half_width(spread, state.seg_n[s], dof, settings.z)
    return {"centre_ms": centre, "spread_ms": spread, "z_score": z, "band_ms": band}


def _add_points(state: _RunningState, s: np.ndarray, x: np.ndarray, begins: np.ndarray) -> None:
    """Carry each series' state past its new point: a new segment where `begins`, else the segment's running mean
    and the pooled residual sum of squares updated (Welford)."""
    old_mean = state.seg_mean[s]
    new_n = np.where(begins, 1, state.seg_n[s] + 1)
    new_mean = np.where(begins, x, old_mean + (x - old_mean) / new_n)
    state.ss[s] += np.where(begins, 0.0, (x - old_mean) * (x - new_mean))
    state.segment[s] += begins
    state.k[s] += begins
    state.n[s] += 1
    state.seg_n[s], state.seg_mean[s] = new_n, new_mean
    state.recent[s[begins]] = np.nan
    state.recent[s] = np.concatenate([state.recent[s, 1:], x[:, None]], axis=1)


def _half_width(spread: np.ndarray, behind_centre: np.ndarray, dof: np.ndarray, z: float) -> np.ndarray:
    """q · spread · sqrt(1 + 1/m): the prediction half-width for a new point, q the t quantile on `dof` degrees of
    freedom with the normal tail beyond z (NaN where there is no band)."""
    from scipy import stats  # imported where used: loading the code location stays cheap

    out = np.full(len(spread), np.nan)
    ok = ~np.isnan(spread)
    q = stats.t.isf(stats.norm.sf(z), dof[ok])
    out[ok] = q * spread[ok] * np.sqrt(1.0 + 1.0 / behind_centre[ok])
    return out


def theil_sen(rows: np.ndarray, origin: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The Theil–Sen line of each row (x = 0, 1, ... across the row; NaN cells are absent points, and a row needs
    two points): its slope, the median of the pairwise slopes, and its intercept at x = `origin` (per row; default
    0), the median of y − slope·(x − origin). The drift flag and its chart both draw this line."""
    width = rows.shape[1]
    i, j = np.triu_indices(width, k=1)
    slope = np.nanmedian((rows[:, j] - rows[:, i]) / (j - i), axis=1)
    xs = np.arange(width, dtype=float)[None, :] - (0.0 if origin is None else origin[:, None])
    intercept = np.nanmedian(rows - slope[:, None] * xs, axis=1)
    return slope, intercept


def _drift(recent: np.ndarray, settings: HistorySettings) -> tuple[np.ndarray, np.ndarray]:
    """(relative rise of the Theil–Sen line across the points, one-sided Kendall p) for rows of right-aligned
    segment means; NaN where a row has fewer than drift_min_points or the line starts at or below zero."""
    rows, width = recent.shape
    rise, p_value = np.full(rows, np.nan), np.full(rows, np.nan)
    m = np.sum(~np.isnan(recent), axis=1)
    enough = np.flatnonzero(m >= settings.drift_min_points)
    if not len(enough):
        return rise, p_value
    y = recent[enough]
    # The line's level at the segment's first point (computed there, not extrapolated from x = 0, so a rise right
    # at drift_rise is the same number whichever way the row is padded).
    slope, start = theil_sen(y, origin=(width - m[enough]).astype(float))
    with np.errstate(divide="ignore", invalid="ignore"):
        # A line starting at (or, by rounding, barely above) zero has no meaningful relative rise.
        floor = START_FLOOR * np.nanmax(np.abs(y), axis=1)
        relative = np.where(start > floor, slope * (m[enough] - 1) / start, np.nan)
    rise[enough] = relative
    from scipy import stats

    # The exact trend test costs a call per query, so only for the climbs large enough to matter.
    for row in np.flatnonzero(relative >= settings.drift_rise):
        values = y[row][~np.isnan(y[row])]
        p_value[enough[row]] = stats.kendalltau(np.arange(len(values)), values, alternative="greater").pvalue
    return rise, p_value
