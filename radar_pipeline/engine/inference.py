"""The call-level test of a slowdown, for many statements at once, at every candidate split near the deploy.

H0: μ_B ≤ (1 + θ) · μ_A for the pooled per-call means either side of a split, tested on the log scale with a variance
that carries per-call noise, overdispersion and serial correlation (`split_tests`), optionally combined with the
statement's noise prior from its earlier days (`Prior`) or, on its window alone, with its serial correlation shrunk
towards its peers' (`pooled_serial_correlation`, engine 2.7); the choice of split paid by the chain bound
(`selection_p`); the 95% interval of the factor (`interval_from_sums`); and the clearing rule's upper bound
(`clearing_bounds`).
The method, its references and its calibration are in docs/method.md ("The test", "Selection", "Clearing").
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

RHO_MAX = 0.9  # inflation at most 19×: beyond it a 30-interval side holds about one independent observation
INFLATION_MAX = (1 + RHO_MAX) / (1 - RHO_MAX)
CI_LEVEL = 0.95
# Standard errors added to ρ. Engine 2.1 added 1 (at 0.5 it found 3.4× the level at 10⁻³ for φ > 0.6); since 2.2 the
# uncertainty of ρ̂ is also carried by the degrees of freedom, and 0.5 with it holds the level better than 1 without
# (benchmarks/calibration_check.py, and the boundary null of benchmarks/detection_quality.py).
RHO_MARGIN = 0.5
# A side whose own variance exceeds its prior's prediction at this level keeps its own (docs/method.md, the
# noise prior): a check that errs towards the window-only test, so it may be lenient.
SIDE_ALPHA = 0.05
# Splits the clearing rule bounds at a time (rows × splits): its test's temporaries stay a few MB each.
CLEAR_CELLS = 1 << 16
# The serial correlation's pool (pooled_serial_correlation): bins of busyness, and the fewest statements in one.
POOL_BINS = 5
POOL_MIN = 30
COMPACT = 2  # the clearing rule gathers its rows' intervals first when they are fewer than 1/COMPACT of all


@dataclass(frozen=True)
class Prior:
    """Per row, a statement's noise prior, estimated from its own earlier days before the window (docs/method.md,
    the noise prior): rho, its serial correlation; dispersion, its relative dispersion per call; intervals, the
    intervals they rest on as the test counts them (already capped; 0: no prior, the row is tested on its window alone);
    calls_per_interval, how busy the prior's intervals were, which scales its prediction to a busier or quieter
    window. conflict_alpha: the level of the prior–data conflict checks."""

    rho: np.ndarray
    dispersion: np.ndarray
    intervals: np.ndarray
    conflict_alpha: float
    calls_per_interval: np.ndarray  # the prior's mean calls per interval (NaN: unknown, taken as the window's)
    # The serial correlation the analysis' other statements of like busyness show (`pooled_serial_correlation`) and
    # what it is worth in intervals: a window-only test shrinks its own ρ̂ towards it (None: no pool).
    pool_rho: np.ndarray | None = None
    pool_intervals: np.ndarray | None = None

    @property
    def has_history(self) -> bool:
        """Whether any row has a prior of its own from earlier days (else the rows carry only the pool)."""
        return bool((self.intervals > 0).any())

    def rows(self, index: np.ndarray | slice, column: bool = False) -> Prior:
        """The estimates of some rows, as a column ([rows, 1]) when they meet a scan over splits."""
        pick = (lambda v: v[index][:, None]) if column else (lambda v: v[index])  # noqa: E731
        return Prior(
            pick(self.rho),
            pick(self.dispersion),
            pick(self.intervals),
            self.conflict_alpha,
            pick(self.calls_per_interval),
            pick(self.pool_rho) if self.pool_rho is not None else None,
            pick(self.pool_intervals) if self.pool_intervals is not None else None,
        )


@dataclass(frozen=True, slots=True)
class SideSums:
    """One side of a split, per row: what the test's variance is made of (docs/method.md). calls, the side's calls;
    mean, its call-weighted mean (centred on the row's mean where the caller centred the times); ee, Σ e² of the
    residuals about that mean; acov, Σ e_i e_(i+1) over neighbouring intervals within the side; with
    stddev_exec_time, ss, the intervals' own per-call sums of squares Σ S (NaN where one is unknown) and ss_dof,
    Σ (c − 1) (both None without)."""

    calls: np.ndarray
    mean: np.ndarray
    ee: np.ndarray
    acov: np.ndarray
    ss: np.ndarray | None = None
    ss_dof: np.ndarray | None = None

    def rows(self, index: np.ndarray) -> SideSums:
        """The sums of some rows."""
        return SideSums(
            self.calls[index],
            self.mean[index],
            self.ee[index],
            self.acov[index],
            self.ss[index] if self.ss is not None else None,
            self.ss_dof[index] if self.ss_dof is not None else None,
        )


@dataclass(frozen=True, slots=True)
class Statistics:
    """The test at some splits of some rows (any shape the inputs broadcast to, [rows] or [rows, splits]): t, its
    Welch–Satterthwaite degrees of freedom nu, the serial correlation rho it used, whether it is defined (`valid`:
    both sides with time and at least two intervals), the side means and sizes, the log ratio of the means and its
    standard error, and the intervals of the noise prior combined with the window (0: the window alone)."""

    t: np.ndarray
    nu: np.ndarray
    rho: np.ndarray
    valid: np.ndarray
    mean_a: np.ndarray
    mean_b: np.ndarray
    n_a: np.ndarray
    n_b: np.ndarray
    log_ratio: np.ndarray
    se: np.ndarray
    prior_intervals: np.ndarray


@dataclass(frozen=True)
class SplitTest:
    """Per row: the chosen split k, its one-sided p (selection-adjusted), t, dof, the side means and sizes, the
    estimated serial correlation, and the confidence interval of the slowdown factor μ_B / μ_A at that split."""

    k: np.ndarray
    p: np.ndarray
    t: np.ndarray
    dof: np.ndarray
    mean_a: np.ndarray
    mean_b: np.ndarray
    n_a: np.ndarray
    n_b: np.ndarray
    rho: np.ndarray
    factor_low: np.ndarray
    factor_high: np.ndarray
    splits: np.ndarray  # K, the number of candidate splits the choice was made among
    # The prior intervals the test at the chosen split combined with the window: Prior.intervals where it used
    # them, 0 where it used the window alone (no prior, or a window that conflicts with it), NaN where not tested.
    prior_intervals: np.ndarray


def split_tests(
    calls: np.ndarray,
    time: np.ndarray,
    sumsq: np.ndarray | None,
    n: np.ndarray,
    candidate: np.ndarray,
    threshold: float,
    prior: Prior | None = None,
) -> SplitTest:
    """The call-level test (docs/method.md) of every row at every candidate split; the best one per row.

    calls, time: [rows, L] per-interval ΔC and ΔT, left-aligned (zeros past n[row]); sumsq: the intervals' per-call
    sums of squares (NaN where unknown) or None; candidate: [rows, L + 1] boolean, the splits k (A = first k
    intervals) to test; prior: each row's estimates from its earlier days (None: every row on its window alone).
    Rows with no candidate get p = 1 and NaN elsewhere.
    """
    from scipy import stats

    c = np.asarray(calls, dtype=np.float64)
    # Only the splits between the block's first and last candidate are evaluated.
    cols = np.flatnonzero(candidate.any(axis=0))
    lo, hi = (int(cols[0]), int(cols[-1]) + 1) if len(cols) else (0, 1)
    scan = _scan(c, time, sumsq, n, lo, hi, threshold, prior)
    valid = candidate[:, lo:hi] & scan.valid
    splits = candidate.sum(axis=1)
    # The largest t is the split tested (any rule may choose it: the Bonferroni bound below holds for all of them).
    k = lo + np.argmax(np.where(valid, np.maximum(scan.t, -np.finfo(np.float64).max), -np.inf), axis=1)
    tested = valid.any(axis=1)
    k = np.where(tested, k, 0)

    # The prefix sums chose the split; its figures are recomputed in two passes (residuals about each side's own
    # mean), which keeps full precision when the two sides' levels lie orders of magnitude apart.
    exact = _statistics(
        *_side_sums_at(c, np.asarray(time, dtype=np.float64), sumsq, n, k),
        n.astype(np.float64),
        0.0,
        threshold,
        prior,
    )
    valid_k = tested & exact.valid
    pick = lambda m: np.where(valid_k, m, np.nan)  # noqa: E731
    nu_k = pick(exact.nu)
    p_k = stats.t.sf(np.where(valid_k, exact.t, 0.0), np.where(valid_k, nu_k, 1.0))
    p = np.where(valid_k, selection_p(p_k, candidate, c), 1.0)
    se = pick(exact.se)
    half = stats.t.ppf(0.5 + CI_LEVEL / 2, np.where(valid_k, nu_k, 1.0)) * se
    half = np.where(se == 0, 0.0, half)
    log_ratio = pick(exact.log_ratio)
    return SplitTest(
        k=np.where(valid_k, k, 0),
        p=p,
        t=pick(exact.t),
        dof=nu_k,
        mean_a=pick(exact.mean_a),
        mean_b=pick(exact.mean_b),
        n_a=pick(k.astype(np.float64)),
        n_b=pick((n - k).astype(np.float64)),
        rho=pick(exact.rho),
        factor_low=np.exp(log_ratio - half),
        factor_high=np.exp(log_ratio + half),
        splits=splits,
        prior_intervals=pick(exact.prior_intervals),
    )


def _interval_terms(
    c: np.ndarray, tc: np.ndarray, sumsq: np.ndarray | None, out: np.ndarray | None = None
) -> Iterator[tuple[str, np.ndarray]]:
    """What each interval adds to a side's sums (its calls, centred time, and the products Σe² is made of; with
    stddev_exec_time, whether its sum of squares is unknown, that sum and its c − 1), one term at a time; with
    `out`, each is written there (valid until the next)."""

    def put(values: np.ndarray) -> np.ndarray:
        if out is None:
            return values
        out[...] = values
        return out

    yield "c", put(c)
    yield "t", put(tc)
    yield "tt", np.multiply(tc, tc, out=out)
    yield "tc", np.multiply(tc, c, out=out)
    yield "cc", np.multiply(c, c, out=out)
    if sumsq is not None:
        yield "unknown", put((np.isnan(sumsq) & (c > 0)).astype(np.float64))
        yield "ss", put(np.nan_to_num(sumsq, nan=0.0))
        yield "ss_dof", np.maximum(c - 1, 0.0, out=out)


def _pair_terms(
    c0: np.ndarray, tc0: np.ndarray, c1: np.ndarray, tc1: np.ndarray, out: np.ndarray | None = None
) -> Iterator[tuple[str, np.ndarray]]:
    """What a pair of neighbouring intervals (c0, tc0 then c1, tc1) adds to a side's lag-1 cross products, one term
    at a time (with `out`, written there)."""
    yield "lag_tt", np.multiply(tc0, tc1, out=out)
    lag_tc = np.multiply(tc0, c1, out=out)
    lag_tc += c0 * tc1
    yield "lag_tc", lag_tc
    yield "lag_cc", np.multiply(c0, c1, out=out)


def _sides(sums: dict[str, tuple[np.ndarray, np.ndarray]], stddev: bool) -> tuple[SideSums, SideSums]:
    """Both sides' test sums (as `_statistics` takes them) from their sums of interval and pair terms."""
    out = []
    for i in (0, 1):
        got = {key: v[i] for key, v in sums.items()}
        with np.errstate(divide="ignore", invalid="ignore"):
            mu = got["t"] / got["c"]  # centred pooled mean (NaN for an empty side, which is never a candidate)
            ee = got["tt"] - 2 * mu * got["tc"] + mu * mu * got["cc"]
            acov = got["lag_tt"] - mu * got["lag_tc"] + mu * mu * got["lag_cc"]
        out.append(
            SideSums(
                calls=got["c"],
                mean=mu,
                ee=np.maximum(ee, 0.0),
                acov=acov,
                ss=np.where(got["unknown"] > 0, np.nan, got["ss"]) if stddev else None,
                ss_dof=got["ss_dof"] if stddev else None,
            )
        )
    return out[0], out[1]


def _scan(
    c: np.ndarray,
    time: np.ndarray,
    sumsq: np.ndarray | None,
    n: np.ndarray,
    lo: int,
    hi: int,
    threshold: float,
    prior: Prior | None,
) -> Statistics:
    """The test's statistics (`_statistics`) of every row at the splits k = lo .. hi − 1 (A = the first k intervals;
    1 ≤ lo < hi ≤ L + 1), as [rows, hi − lo] arrays (with the sides' sizes n_a, n_b). Each side's sums are read from
    a sum over the columns beyond the splits' band and running sums across it (`_band_sums_of`), so the work past the
    band is one reduction per term, not a prefix sum over every column."""
    # Centre the times on each row's overall mean so the residual sums below do not cancel catastrophically.
    total_c = c.sum(axis=1)
    centre = np.where(total_c > 0, time.sum(axis=1) / np.where(total_c > 0, total_c, 1.0), 0.0)
    tc = np.asarray(time, dtype=np.float64) - centre[:, None] * c

    # Per-interval values summed over [0, k) and [k, n) (zeros past n), and lag-1 cross products of neighbouring
    # intervals (the pair (i, i + 1) at column i) summed over the pairs inside [0, k) (i ≤ k − 2) and inside [k, n)
    # (i ≥ k). A sum of products is taken without the products (einsum) outside the band.
    c0, c1, tc0, tc1 = c[:, :-1], c[:, 1:], tc[:, :-1], tc[:, 1:]
    sums = {
        "c": _band_sums_of(lo, hi, 0, c),
        "t": _band_sums_of(lo, hi, 0, tc),
        "tt": _band_sums_of(lo, hi, 0, tc, tc),
        "tc": _band_sums_of(lo, hi, 0, tc, c),
        "cc": _band_sums_of(lo, hi, 0, c, c),
        "lag_tt": _band_sums_of(lo, hi, 1, tc0, tc1),
        "lag_tc": _band_sums_of(lo, hi, 1, tc0, c1, c0, tc1),
        "lag_cc": _band_sums_of(lo, hi, 1, c0, c1),
    }
    n_a = np.arange(lo, hi, dtype=np.float64)[None, :]
    n_b = n[:, None] - n_a
    if sumsq is not None:
        # Within a row every interval has calls, so an unknown sum of squares (NaN) makes its side's sum NaN, as the
        # side's Σ S is then unknown; Σ (c − 1) is the side's calls less its intervals (zeros past n add nothing).
        none_unknown = np.zeros((1, 1))
        sums["unknown"] = (none_unknown, none_unknown)
        sums["ss"] = _band_sums_of(lo, hi, 0, sumsq)
        sums["ss_dof"] = (sums["c"][0] - n_a, sums["c"][1] - n_b)
    a, b = _sides(sums, sumsq is not None)
    total_n = n[:, None].astype(np.float64)
    scan_prior = prior.rows(slice(None), column=True) if prior is not None else None
    return _statistics(a, b, n_a, n_b, total_n, centre[:, None], threshold, scan_prior)


def _band_sums_of(lo: int, hi: int, lag: int, *operands: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For the splits k = lo .. hi − 1 of every row ([rows, hi − lo] each): the sum of v over the columns j < k − lag
    and over the columns j ≥ k, where v is the operand (one), or the sum of the products of the operands taken in
    pairs (two or four: x·y, or x·y + u·w). Columns past the operands' width count as none."""
    width = operands[0].shape[1]
    a0, a1 = min(max(lo - lag, 0), width), min(max(hi - 1 - lag, 0), width)  # A: columns [0, a0) then a0 .. a1 − 1
    b0, b1 = min(lo, width), min(hi - 1, width)  # B: columns b0 .. b1 − 1 then [b1, width)

    def values(cols: slice) -> np.ndarray:
        if len(operands) == 1:
            return operands[0][:, cols]
        got = operands[0][:, cols] * operands[1][:, cols]
        if len(operands) == 4:
            got += operands[2][:, cols] * operands[3][:, cols]
        return got

    def total(cols: slice) -> np.ndarray:
        if len(operands) == 1:
            return operands[0][:, cols].sum(axis=1)
        got = np.einsum("ij,ij->i", operands[0][:, cols], operands[1][:, cols])
        if len(operands) == 4:
            got += np.einsum("ij,ij->i", operands[2][:, cols], operands[3][:, cols])
        return got

    rows = operands[0].shape[0]
    before = np.empty((rows, a1 - a0 + 1))
    before[:, 0] = total(slice(0, a0))
    np.cumsum(values(slice(a0, a1)), axis=1, out=before[:, 1:])
    before[:, 1:] += before[:, :1]
    after = np.empty((rows, b1 - b0 + 1))
    after[:, -1] = total(slice(b1, width))
    np.cumsum(values(slice(b0, b1))[:, ::-1], axis=1, out=after[:, -2::-1])
    after[:, :-1] += after[:, -1:]
    k = np.arange(lo, hi)
    return before[:, np.clip(k - lag, a0, a1) - a0], after[:, np.clip(k, b0, b1) - b0]


@dataclass(frozen=True)
class Clearing:
    """Per row, the clearing rule's figures (docs/method.md, "Clearing") at its worst split, the one least certain
    to lie within the tolerance: `bound`, the upper bound there of the slowdown factor (NaN
    where some split has none: a side without time, or no split at all); `cleared`, whether every split's bound lies
    within its tolerance; `precise`, whether the bound's margin over the estimate there fits within the tolerance
    (with no change at all, this precision would clear); `conflict`, whether the statement has a prior but the test
    there used its window alone (a window unlike its prior)."""

    bound: np.ndarray
    cleared: np.ndarray
    precise: np.ndarray
    conflict: np.ndarray


def clearing_bounds(
    calls: np.ndarray,
    time: np.ndarray,
    sumsq: np.ndarray | None,
    offsets: np.ndarray,
    centre: np.ndarray,
    rows: np.ndarray,
    first: np.ndarray,
    splits: np.ndarray,
    threshold: float,
    min_rise: float,
    level: float,
    prior: Prior | None = None,
    before_deploy: bool = False,
) -> Clearing:
    """The clearing rule (docs/method.md, "Clearing") for some rows: the one-sided upper confidence bound, at
    `level`, of the slowdown factor at each of their splits, from the test's own variance (`_statistics`, prior
    included); cleared when at every split it lies within the tolerance: factor ≤ 1 + θ, or a rise of the per-call
    mean ≤ `min_rise` ms (for a statement so fast that θ of it is less), 1 + max(θ, min_rise / μ̂_A).

    calls, time, sumsq: every row's intervals, flat (row g's at offsets[g] .. offsets[g + 1] − 1, as WindowSamples
    holds them; sumsq None without stddev); centre: every row's per-call mean over them (0 without calls), on which
    its times are centred so the residual sums do not cancel (as in `_scan`); rows: the rows to bound;
    first: each one's first split (≥ 1); splits: [rows, J] boolean, whether split first + j is one of its own (A =
    the first k intervals); prior: the estimates of those rows. The sums outside a row's splits come from one pass
    over the flat arrays per term; those between them, and the test, for at most CLEAR_CELLS splits at a time.
    before_deploy (engine 2.7, a deploy's analysis, whose first split is the deploy's own): every split's after side
    B = intervals k.. is compared with the side before the deploy, not with everything before k, so the intervals
    between the deploy and k are left out. A slowdown beginning at k shows whole in B against the level before the
    deploy; and a statement the deploy made faster is no longer compared with a before side that holds its own
    faster intervals (whose spread made a ×8 improvement's bound ×1.5–×258 on a 7-interval window).
    """
    c = np.asarray(calls, dtype=np.float64)
    time = np.asarray(time, dtype=np.float64)
    count, width = len(rows), splits.shape[1]
    out = Clearing(
        bound=np.full(count, np.nan),
        cleared=np.zeros(count, dtype=bool),
        precise=np.zeros(count, dtype=bool),
        conflict=np.zeros(count, dtype=bool),
    )
    if count == 0 or width == 0:
        return out
    n = offsets[rows + 1] - offsets[rows]
    if n.sum() * COMPACT < len(c):
        # Few rows (most statements detected): their intervals alone, so the passes below cost what they hold.
        local = np.concatenate([[0], np.cumsum(n)])
        index = np.arange(local[-1]) + np.repeat(offsets[rows] - local[:-1], n)
        c, time, sumsq = c[index], time[index], sumsq[index] if sumsq is not None else None
        offsets, centre, rows = local, centre[rows], np.arange(count)
    tc = np.repeat(centre, np.diff(offsets))
    tc *= c
    np.subtract(time, tc, out=tc)
    buffer = np.empty(len(c) + 1)
    start = offsets[rows]
    head, tail = _outside_sums(c, tc, sumsq, start, n, first, width, buffer)
    per_block = max(1, CLEAR_CELLS // width)
    for lo in range(0, count, per_block):
        block = np.arange(lo, min(lo + per_block, count))
        a, b = _band_sums(c, tc, sumsq, start[block], n[block], first[block], width, head, tail, block)
        n_a = (first[block, None] + np.arange(width)[None, :]).astype(np.float64)
        total_n = n[block, None].astype(np.float64)
        n_b = total_n - n_a
        if before_deploy:

            def pinned(v: np.ndarray) -> np.ndarray:  # the deploy's split, the row's first, at every split
                return np.broadcast_to(v[:, :1], v.shape)

            a = SideSums(
                pinned(a.calls),
                pinned(a.mean),
                pinned(a.ee),
                pinned(a.acov),
                None if a.ss is None else pinned(a.ss),
                None if a.ss_dof is None else pinned(a.ss_dof),
            )
            n_a = np.broadcast_to(n_a[:, :1], n_a.shape)
            total_n = n_a + n_b
        known = prior.rows(block, column=True) if prior is not None else None
        with np.errstate(invalid="ignore", divide="ignore"):  # the slots past a row's last split are not read
            scan = _statistics(a, b, n_a, n_b, total_n, centre[rows[block], None], threshold, known)
        _bound_at_worst(scan, splits[block], min_rise, threshold, level, prior, block, out)
    return out


def _segment_sums(buffer: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """Σ buffer[bounds[r, j] : bounds[r, j + 1]] per row r and j ([rows, m − 1]; bounds non-decreasing along a row,
    at most len(buffer) − 1: the buffer ends with an extra 0)."""
    got = np.add.reduceat(buffer, bounds.ravel()).reshape(bounds.shape)[:, :-1]
    return np.where(bounds[:, 1:] > bounds[:, :-1], got, 0.0)


def _outside_sums(
    c: np.ndarray,
    tc: np.ndarray,
    sumsq: np.ndarray | None,
    start: np.ndarray,
    n: np.ndarray,
    first: np.ndarray,
    width: int,
    buffer: np.ndarray,
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Per row, each term summed over the intervals (and neighbouring pairs) before its first split's band and
    after it: the band holds intervals first .. first + J − 2 and pairs first − 1 .. first + J − 2, as far as the
    row goes. One term at a time, written in `buffer` (len(c) + 1: reduceat ends on its last, 0)."""
    size = len(c)
    band_end = np.minimum(first + width - 1, n)
    plain = np.stack([start, start + first, start + band_end, start + n], axis=1)
    pair_end = np.maximum(n - 1, 0)
    paired = np.stack(
        [start, start + np.minimum(first - 1, pair_end), start + np.minimum(band_end, pair_end), start + pair_end],
        axis=1,
    )
    head, tail = {}, {}
    buffer[size:] = 0.0
    for name, _ in _interval_terms(c, tc, sumsq, out=buffer[:size]):
        got = _segment_sums(buffer, plain)
        head[name], tail[name] = got[:, 0], got[:, 2]
    buffer[size - 1 :] = 0.0
    for name, _ in _pair_terms(c[:-1], tc[:-1], c[1:], tc[1:], out=buffer[: size - 1]):
        got = _segment_sums(buffer, paired)
        head[name], tail[name] = got[:, 0], got[:, 2]
    return head, tail


def _band_sums(
    c: np.ndarray,
    tc: np.ndarray,
    sumsq: np.ndarray | None,
    start: np.ndarray,
    n: np.ndarray,
    first: np.ndarray,
    width: int,
    head: dict[str, np.ndarray],
    tail: dict[str, np.ndarray],
    block: np.ndarray,
) -> tuple[SideSums, SideSums]:
    """Both sides' test sums at splits first .. first + J − 1 of a block of rows ([rows, J] each), from the sums
    outside the band and the band's intervals, added in order (as a prefix sum from the row's start would)."""
    col = first[:, None] - 1 + np.arange(width + 1)[None, :]  # intervals first − 1 .. first + J − 1
    inside = col < n[:, None]
    at = np.where(inside, start[:, None] + col, 0)
    cb = np.where(inside, c[at], 0.0)
    tb = np.where(inside, tc[at], 0.0)
    sb = np.where(inside, sumsq[at], 0.0) if sumsq is not None else None
    sums = {}
    for name, values in _interval_terms(cb[:, 1:-1], tb[:, 1:-1], sb[:, 1:-1] if sb is not None else None):
        prefix = np.cumsum(np.concatenate([head[name][block, None], values], axis=1), axis=1)
        sums[name] = (prefix, prefix[:, -1:] + tail[name][block, None] - prefix)
    for name, values in _pair_terms(cb[:, :-1], tb[:, :-1], cb[:, 1:], tb[:, 1:]):
        prefix = np.cumsum(np.concatenate([head[name][block, None], values], axis=1), axis=1)
        sums[name] = (prefix[:, :-1], prefix[:, -1:] + tail[name][block, None] - prefix[:, 1:])
    return _sides(sums, sumsq is not None)


def _bound_at_worst(
    scan: Statistics,
    wanted: np.ndarray,
    min_rise: float,
    threshold: float,
    level: float,
    prior: Prior | None,
    block: np.ndarray,
    out: Clearing,
) -> None:
    """The bound at each row's worst split, the least confident that the factor lies within the tolerance (in place,
    in `out`'s rows `block`). A split with no bound (a side without time) is the worst. The confidence, a Student t
    tail, is computed only where it may be the least: at the split of smallest z = room / se, and where z is small
    enough that its confidence could fall below that one's for some ν of the row's (exact: the tail is monotone in
    z, and in ν on each side of z = 0)."""
    from scipy import special

    log_ratio, se, nu = scan.log_ratio, scan.se, np.nan_to_num(scan.nu, nan=1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        limit = np.maximum(np.log1p(threshold), np.log1p(min_rise / scan.mean_a))
        room = limit - log_ratio  # how far the estimate lies within the tolerance (log scale)
        z = np.where(se > 0, room / se, np.where(room >= 0, np.inf, -np.inf))
    defined = (scan.mean_a > 0) & (scan.mean_b > 0) & ~np.isnan(room) & ~np.isnan(se)
    defined &= (scan.n_a >= 2) & (scan.n_b >= 2)
    rows = np.arange(len(wanted))
    undefined = wanted & ~defined
    least = np.argmin(np.where(wanted, z, np.inf), axis=1)
    least = np.where(wanted[rows, least], least, np.argmax(wanted, axis=1))  # where every z is +∞ (se = 0)
    least_conf = special.stdtr(nu[rows, least], z[rows, least])
    # Where z ≥ 0 the tail grows with ν, where z < 0 it shrinks: a split's confidence is at least F_ν'(z) for the
    # row's least ν' (z ≥ 0) or greatest (z < 0), so it can fall to the least split's only if z ≤ F_ν'⁻¹ of it (and
    # only a split whose z has the least one's sign can: F(0) = 0.5 for every ν).
    above = z[rows, least] >= 0
    bound_nu = np.where(above, np.where(wanted, nu, np.inf).min(axis=1), np.where(wanted, nu, -np.inf).max(axis=1))
    reach = special.stdtrit(bound_nu, least_conf)
    # Within 1e-9 of 1 the tail's inverse loses its precision (and F itself is rounded to a few steps of the float
    # below 1): every split is computed there, as where it underflows. Elsewhere it comes back within 1e-8 of z.
    extreme = ~(least_conf > 1e-300) | ~(least_conf < 1 - 1e-9) | ~np.isfinite(reach)
    reach = reach + 1e-6 * (1 + np.abs(reach))  # slack for the t functions' own rounding
    candidate = wanted & defined & (extreme[:, None] | (z <= reach[:, None]))
    candidate[rows, least] = False
    confidence = np.full(wanted.shape, np.inf)
    confidence[candidate] = special.stdtr(nu[candidate], z[candidate])
    confidence[rows, least] = np.where(wanted[rows, least] & defined[rows, least], least_conf, np.inf)
    worst = np.where(undefined.any(axis=1), np.argmax(undefined, axis=1), np.argmin(confidence, axis=1))
    at = (rows, worst)
    bounded = wanted.any(axis=1) & ~undefined.any(axis=1)
    margin = np.where(bounded & (se[at] > 0), special.stdtrit(nu[at], level) * se[at], 0.0)
    out.bound[block] = np.where(bounded, np.exp(log_ratio[at] + margin), np.nan)
    out.cleared[block] = bounded & (confidence[at] >= level)
    out.precise[block] = bounded & (margin <= limit[at])
    if prior is not None:
        out.conflict[block] = bounded & (prior.intervals[block] > 0) & (scan.prior_intervals[at] == 0)


def split_correlations(calls: np.ndarray, candidate: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The correlation, under H0, of the test's statistics at each candidate split and at the previous candidate of
    its row, and the mask of the splits that have one ([rows, L + 1] each; docs/method.md, "Selection").

    The statistic at split k is, to first order, D_k = Σ_B e / C_B − Σ_A e / C_A (the residuals e_i of the pooled
    means, C the sides' calls). For independent intervals with Var e_i = v_i and blocks P = [0, k), M = [k, k'),
    R = [k', n) between two splits k < k' (c, v summed over each block):

        Cov(D_k, D_k') = v_R / (C_B C_B') − v_M / (C_B C_A') + v_P / (C_A C_A')
        Var D_k = (v_M + v_R) / C_B² + v_P / C_A²,   Var D_k' = v_R / C_B'² + (v_P + v_M) / C_A'²

    (C_A = c_P, C_B = c_M + c_R, C_A' = c_P + c_M, C_B' = c_R). Per-call noise gives v_i ∝ c_i (then the correlation
    is the Brownian bridge's, sqrt(C_A C_B' / (C_A' C_B))), overdispersion v_i ∝ c_i²; the smaller of the two is
    returned (a mixture of the two falls below the smaller only by a second-order term, as neighbouring splits'
    variances are nearly equal). Positive serial correlation only raises it (it moves the statistic's variance to low
    frequencies, which neighbouring splits share), so this is a lower bound for the AR(1) errors the test allows.
    """
    c = np.asarray(calls, dtype=np.float64)
    rows, width = candidate.shape
    r = np.zeros((rows, width))
    paired = np.zeros((rows, width), dtype=bool)
    cols = np.flatnonzero(candidate.any(axis=0))
    if len(cols) < 2:
        return r, paired
    lo, hi = int(cols[0]), int(cols[-1]) + 1  # only the block's candidate columns: a previous candidate is ≥ lo
    col = np.broadcast_to(np.arange(lo, hi)[None, :], (rows, hi - lo))
    last = np.maximum.accumulate(np.where(candidate[:, lo:hi], col, -1), axis=1)
    previous = np.concatenate([np.full((rows, 1), -1), last[:, :-1]], axis=1)
    paired[:, lo:hi] = candidate[:, lo:hi] & (previous >= 0)
    k0 = np.maximum(previous, lo) - lo
    lowest = np.full((rows, hi - lo), np.inf)

    def firsts(values: np.ndarray) -> np.ndarray:
        """Σ over the first k intervals for k in [lo, hi), and the total in the last column."""
        out = np.empty((rows, hi - lo + 1))
        out[:, 0] = values[:, :lo].sum(axis=1)
        np.cumsum(values[:, lo : hi - 1], axis=1, out=out[:, 1 : hi - lo])
        out[:, 1 : hi - lo] += out[:, :1]
        out[:, -1] = values.sum(axis=1)
        return out

    cum_c = firsts(c)
    for cum_v in (cum_c, firsts(c * c)):
        c_p, v_p = np.take_along_axis(cum_c, k0, axis=1), np.take_along_axis(cum_v, k0, axis=1)
        c_m, v_m = cum_c[:, :-1] - c_p, cum_v[:, :-1] - v_p
        c_r, v_r = cum_c[:, -1:] - c_p - c_m, cum_v[:, -1:] - v_p - v_m
        with np.errstate(divide="ignore", invalid="ignore"):
            c_b, c_a2 = c_m + c_r, c_p + c_m
            cov = v_r / (c_b * c_r) - v_m / (c_b * c_a2) + v_p / (c_p * c_a2)
            var1 = (v_m + v_r) / c_b**2 + v_p / c_p**2
            var2 = v_r / c_r**2 + (v_p + v_m) / c_a2**2
            lowest = np.fmin(lowest, cov / np.sqrt(var1 * var2))
    r[:, lo:hi] = np.where(paired[:, lo:hi] & np.isfinite(lowest), np.clip(lowest, -1.0, 1.0), 0.0)
    return r, paired


def selection_p(p_k: np.ndarray, candidate: np.ndarray, calls: np.ndarray) -> np.ndarray:
    """The p-value of the smallest per-split p-value among a row's candidate splits, p_k being it (or larger): the
    chain bound P(∪ A_j) ≤ P(A_1) + Σ_j P(A_j+1 ∖ A_j) (Hunter 1976; Worsley 1982; the upcrossing form of
    Efron 1997), with A_j = {split j's p ≤ p_k} = {Z_j ≥ u}, u = Φ⁻¹(1 − p_k), and for two standard normal scores
    of correlation r, P(Z_j < u ≤ Z_j+1) = 2 T(u, sqrt((1 − r)/(1 + r))) (Owen's T; Owen 1956). Never more than
    Bonferroni's K · p_k, which it replaces when smaller (docs/method.md, "Selection")."""
    from scipy import special, stats

    r, paired = split_correlations(calls, candidate)
    u = stats.norm.isf(np.clip(np.nan_to_num(p_k, nan=1.0), 0.0, 1.0))
    row, col = np.nonzero(paired)
    with np.errstate(invalid="ignore", divide="ignore"):
        a = np.sqrt((1 - r[row, col]) / (1 + r[row, col]))
    entries = np.bincount(row, weights=2 * special.owens_t(u[row], a), minlength=len(p_k))
    chain = p_k + entries
    return np.minimum(1.0, np.minimum(candidate.sum(axis=1) * p_k, chain))


def interval_from_sums(
    a: SideSums,
    b: SideSums,
    n_a: np.ndarray,
    n_b: np.ndarray,
    threshold: float,
    prior: Prior | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The 95% interval of the slowdown factor at one fixed split per row, from each side's sums (calls, mean, Σe²
    about the side's mean, lag-1 Σe·e, and optionally Σ S, Σ (c − 1)), with the same variance as the test: for
    statements that stop before the test, so their verdict carries an interval too. NaN where it is undefined."""
    from scipy import stats

    n_a = n_a.astype(np.float64)
    n_b = n_b.astype(np.float64)
    exact = _statistics(a, b, n_a, n_b, n_a + n_b, 0.0, threshold, prior)
    ok = (exact.mean_a > 0) & (exact.mean_b > 0) & (n_a >= 2) & (n_b >= 2)
    nu = np.where(ok & np.isfinite(exact.nu), exact.nu, 1.0)
    half = np.where(exact.se == 0, 0.0, stats.t.ppf(0.5 + CI_LEVEL / 2, nu) * exact.se)
    low = np.where(ok, np.exp(exact.log_ratio - half), np.nan)
    high = np.where(ok, np.exp(exact.log_ratio + half), np.nan)
    return low, high


def evidence_from_sums(
    a: SideSums,
    b: SideSums,
    n_a: np.ndarray,
    n_b: np.ndarray,
    threshold: float,
    prior: Prior | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The log slowdown factor at one fixed split per row, its standard error and Welch–Satterthwaite degrees of
    freedom, with the same variance as the test and `interval_from_sums` (whose interval is exp(log ± t_ν · se)):
    the evidence a fleet verdict combines across targets (engine/releases.py). NaN where undefined."""
    n_a = n_a.astype(np.float64)
    n_b = n_b.astype(np.float64)
    exact = _statistics(a, b, n_a, n_b, n_a + n_b, 0.0, threshold, prior)
    ok = (exact.mean_a > 0) & (exact.mean_b > 0) & (n_a >= 2) & (n_b >= 2) & np.isfinite(exact.se)
    return (
        np.where(ok, exact.log_ratio, np.nan),
        np.where(ok, exact.se, np.nan),
        np.where(ok, exact.nu, np.nan),
    )


def _side_sums_at(
    c: np.ndarray, time: np.ndarray, sumsq: np.ndarray | None, n: np.ndarray, k: np.ndarray
) -> tuple[SideSums, SideSums, np.ndarray, np.ndarray]:
    """Both sides' sums at one split per row, residuals taken about each side's own mean (two passes). Each sum over
    a side is a sum of products with that side's indicator (einsum), so no masked copy is made."""
    rows, length = c.shape
    col = np.arange(length)[None, :]
    whole = bool((n == length).all())  # every row fills the matrix: nothing past n
    in_a = (col < k[:, None]).astype(np.float64)
    in_b = 1.0 - in_a if whole else ((col >= k[:, None]) & (col < n[:, None])).astype(np.float64)

    def side_sums(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return np.einsum("ij,ij->i", values, in_a), np.einsum("ij,ij->i", values, in_b)

    calls = side_sums(c)
    with np.errstate(divide="ignore", invalid="ignore"):
        means = [total / cs for total, cs in zip(side_sums(time), calls, strict=True)]
    # Each interval's residual about its own side's mean (0 past n; an empty side's mean, NaN, is never used).
    level = np.where(in_a > 0, np.nan_to_num(means[0])[:, None], np.nan_to_num(means[1])[:, None])
    e = time - level * c
    if not whole:
        e *= in_a + in_b
    ee = side_sums(e * e)
    lagged = e[:, :-1] * e[:, 1:]  # a pair inside A ends before k; inside B begins at or after k (and ends before n)
    acov = (np.einsum("ij,ij->i", lagged, in_a[:, 1:]), np.einsum("ij,ij->i", lagged, in_b[:, :-1]))
    ss: tuple[np.ndarray | None, ...] = (None, None)
    ss_dof: tuple[np.ndarray | None, ...] = (None, None)
    if sumsq is not None:
        if np.isnan(sumsq).any():
            unknown = side_sums((np.isnan(sumsq) & (c > 0)).astype(np.float64))
            known = side_sums(np.nan_to_num(sumsq, nan=0.0))
            ss = tuple(np.where(u > 0, np.nan, total) for u, total in zip(unknown, known, strict=True))
        else:
            ss = side_sums(sumsq)
        if whole and c.min() >= 1:  # Σ (c − 1) over a side whose intervals all have calls: its calls less its size
            ss_dof = (calls[0] - k, calls[1] - (n - k))
        else:
            ss_dof = side_sums(np.maximum(c - 1, 0.0))
    sides = [
        SideSums(calls=calls[i], mean=means[i], ee=ee[i], acov=acov[i], ss=ss[i], ss_dof=ss_dof[i]) for i in (0, 1)
    ]
    return sides[0], sides[1], k.astype(np.float64), (n - k).astype(np.float64)


def _statistics(
    a: SideSums,
    b: SideSums,
    n_a: np.ndarray,
    n_b: np.ndarray,
    total_n: np.ndarray,
    centre: np.ndarray | float,
    threshold: float,
    prior: Prior | None = None,
) -> Statistics:
    """From each side's sums (calls, centred mean, Σe², lag-1 Σe·e, and optionally Σ S and Σ (c − 1)) to the test:
    ρ, t, Welch–Satterthwaite ν, the log ratio and its standard error (docs/method.md); with `prior`, the
    statements that have it use the window's estimates combined with their prior's (`_with_prior`), and
    prior_intervals says how many prior intervals each test combined (0: the window alone)."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        mean_a = a.mean + centre
        mean_b = b.mean + centre
        # The sides are pooled on the relative scale (residuals over their side's level), as the test's variance is:
        # pooled in milliseconds, a side 300× slower would set the correlation alone, for the other side too.
        scale_a = np.where(mean_a > 0, 1.0 / mean_a**2, 0.0)
        scale_b = np.where(mean_b > 0, 1.0 / mean_b**2, 0.0)
        ee = a.ee * scale_a + b.ee * scale_b
        rho_hat = np.where(ee > 0, (a.acov * scale_a + b.acov * scale_b) / ee, 0.0)
        pool = None
        if prior is not None and prior.pool_rho is not None and prior.pool_intervals is not None:
            pool = (prior.pool_rho, prior.pool_intervals)
        rho, worth = _serial_correlation(rho_hat, total_n, pool)
        inflation = (1 + rho) / (1 - rho)
        # The floor of each side's sandwich (docs/method.md, "A short side"): the pooled relative dispersion per call.
        pooled = ee / (a.calls + b.calls)
        u, dof = [], []
        for sd, size, mean in ((a, n_a, mean_a), (b, n_b, mean_b)):
            # Demeaning a correlated series removes about `inflation` of its n degrees of freedom, not one.
            own = sd.ee / sd.calls**2
            floor = pooled / sd.calls * mean**2
            v_emp = size / np.maximum(size - inflation, 1.0) * np.fmax(own, floor) * inflation
            # ln V̂ carries ln f(ρ̂) as well as the sum of squares: Var ln f(ρ̂) ≈ 4 / ((1 − ρ²) n) (docs/method.md).
            dof_emp = np.maximum(size * (1 - rho) / (1 + rho) - 1, 1.0)
            dof_emp = np.maximum(2 / (2 / dof_emp + 4 / ((1 - rho**2) * worth)), 1.0)
            if sd.ss is not None and sd.ss_dof is not None:
                v_calls = sd.ss / sd.ss_dof / sd.calls
                use_calls = v_calls > v_emp  # False where v_calls is NaN (unknown or no call pairs)
                v = np.where(use_calls, v_calls, v_emp)
                d = np.where(use_calls, sd.ss_dof, dof_emp)
            else:
                v, d = v_emp, dof_emp
            u.append(v / mean**2)
            dof.append(d)
        se2 = u[0] + u[1]
        nu = se2**2 / (u[0] ** 2 / dof[0] + u[1] ** 2 / dof[1])
        combined: np.ndarray | float = 0.0  # the prior intervals the test combined with the window (0: none)
        if prior is not None and prior.has_history:
            use, h_se2, h_nu, h_rho = _with_prior(a, b, n_a, n_b, total_n, mean_a, mean_b, ee, rho_hat, prior)
            se2, nu, rho = np.where(use, h_se2, se2), np.where(use, h_nu, nu), np.where(use, h_rho, rho)
            combined = np.where(use, prior.intervals, 0.0)
        log_ratio = np.log(mean_b) - np.log(mean_a)
        excess = log_ratio - np.log1p(threshold)
        t = excess / np.sqrt(se2)
    certain = se2 == 0
    t = np.where(certain, np.where(excess > 0, np.inf, np.where(excess < 0, -np.inf, np.nan)), t)
    nu = np.where(certain | ~np.isfinite(nu), np.where(certain, np.inf, 1.0), nu)
    valid = (mean_a > 0) & (mean_b > 0) & ~np.isnan(t) & (n_a >= 2) & (n_b >= 2)
    return Statistics(
        t=t,
        nu=nu,
        rho=rho,
        valid=valid,
        mean_a=mean_a,
        mean_b=mean_b,
        n_a=n_a,
        n_b=n_b,
        log_ratio=log_ratio,
        se=np.sqrt(se2),
        prior_intervals=np.broadcast_to(combined, t.shape),
    )


def _with_prior(
    a: SideSums,
    b: SideSums,
    n_a: np.ndarray,
    n_b: np.ndarray,
    total_n: np.ndarray,
    mean_a: np.ndarray,
    mean_b: np.ndarray,
    ee: np.ndarray,
    rho_hat: np.ndarray,
    prior: Prior,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The test's variance, degrees of freedom and ρ where the statement's own prior is combined with the window
    (docs/method.md, the noise prior); and where it is used: statements with a prior whose window does not conflict with
    it. Called inside `_statistics`' error state."""
    from scipy import special

    n_h, kappa_h = prior.intervals, prior.dispersion
    rho_h = np.clip(prior.rho, 0.0, RHO_MAX)  # the prior's long-run reading, its margin already in (noise)
    f_h = (1 + rho_h) / (1 - rho_h)
    dof_h = np.maximum(n_h * (1 - rho_h) / (1 + rho_h) - 1, 0.0)
    # The window's relative per-call variance, from its intervals' own sums of squares where known (NaN otherwise):
    # the part of the prior's dispersion that does not grow with an interval's calls.
    per_call = np.nan
    if a.ss is not None and b.ss is not None and a.ss_dof is not None and b.ss_dof is not None:
        per_call = (a.ss / mean_a**2 + b.ss / mean_b**2) / (a.ss_dof + b.ss_dof)

    def predicted(calls: np.ndarray, size: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """What the prior predicts for a stretch of `size` intervals holding `calls`: its relative dispersion per
        call and its long-run variance inflation, scaled to the stretch's calls per interval (docs/method.md)."""
        ratio = calls / size / prior.calls_per_interval
        ratio = np.where(np.isfinite(ratio) & (ratio > 0), ratio, 1.0)
        # Unknown per-call variance: the worse of all-overdispersion and all-per-call for this ratio.
        white = np.where(np.isfinite(per_call), np.clip(per_call, 0.0, kappa_h), np.where(ratio >= 1, 0.0, kappa_h))
        short = white + ratio * (kappa_h - white)
        long = white + ratio * (f_h * kappa_h - white)
        return short, np.clip(long / short, 1.0, INFLATION_MAX)

    rho_w = _bias_corrected(rho_hat, total_n)  # the window's own, as the window-only test reads it
    pooled = ee / (a.calls + b.calls)
    own_terms: list[np.ndarray] = []
    own_dofs: list[np.ndarray] = []
    prior_coef: np.ndarray | float = 0.0
    calls_terms: np.ndarray | float = 0.0
    prior_dof = np.maximum(dof_h, 1.0)
    for sd, size, mean in ((a, n_a, mean_a), (b, n_b, mean_b)):
        kappa_side, inflation = predicted(sd.calls, size)
        rho = (inflation - 1) / (inflation + 1)
        # The window's own relative variance of the side's mean, as the window-only test has it (floor included).
        own = np.fmax(sd.ee / sd.calls**2, pooled / sd.calls * mean**2) / mean**2
        own = size / np.maximum(size - inflation, 1.0) * own
        dof_own = np.maximum(size * (1 - rho) / (1 + rho) - 1, 1.0)
        # A side noisier than its prior predicts for its calls (a rare huge call of a sparse, skewed statement)
        # keeps its own variance, which grows with that call, and its own degrees of freedom (self-normalisation).
        alone = _f_exceeds(own / (kappa_side / sd.calls), dof_own, prior_dof, SIDE_ALPHA)
        share = np.where(alone, 1.0, dof_own / (dof_own + dof_h))
        own_part, prior_part = inflation * share * own, inflation * (1 - share) * kappa_side / sd.calls
        if sd.ss is not None and sd.ss_dof is not None:
            v_calls = sd.ss / sd.ss_dof / sd.calls / mean**2
            use_calls = v_calls > own_part + prior_part  # False where v_calls is NaN
            own_part = np.where(use_calls, v_calls, own_part)
            own_dofs.append(np.where(use_calls, sd.ss_dof, dof_own))
            prior_part = np.where(use_calls, 0.0, prior_part)
            calls_terms = calls_terms + np.where(use_calls, v_calls, 0.0)
        else:
            own_dofs.append(dof_own)
        own_terms.append(own_part)
        prior_coef = prior_coef + prior_part
    se2 = own_terms[0] + own_terms[1] + prior_coef
    # Satterthwaite over the independent mean squares: each side's own, and the prior's (one estimate, shared by
    # both sides, so its two coefficients add before squaring); then the uncertainty of ln f for the share of se² that
    # f scales, as in the window-only test but from the prior's N intervals.
    spread = own_terms[0] ** 2 / own_dofs[0] + own_terms[1] ** 2 / own_dofs[1]
    spread = spread + np.where(dof_h > 0, prior_coef**2 / np.maximum(dof_h, 1e-300), 0.0)
    # The whole window's prediction, for its reported ρ, the uncertainty of ln f and the conflict checks.
    kappa_pred, inflation = predicted(a.calls + b.calls, total_n)
    rho = (inflation - 1) / (inflation + 1)
    scaled = (se2 - calls_terms) / se2
    nu = 1 / (spread / se2**2 + 2 * scaled**2 / ((1 - rho_h**2) * n_h))
    # Prior–data conflict (Evans & Moshonov 2006): a window noisier or more correlated than its prior allows for
    # its calls, at level `conflict_alpha`, is tested on its own, as without a prior.
    kappa_w = ee / (a.calls * np.maximum(n_a - inflation, 1.0) / n_a + b.calls * np.maximum(n_b - inflation, 1.0) / n_b)
    dof_w = np.maximum(total_n / inflation - 2, 1.0)
    noisier = _f_exceeds(kappa_w / kappa_pred, dof_w, prior_dof, prior.conflict_alpha)
    z_rho = (rho_w - rho) / np.sqrt(np.maximum(1 - rho**2, 1e-12) * (1 / total_n + 1 / np.maximum(n_h, 1.0)))
    more_correlated = z_rho > special.ndtri(1 - prior.conflict_alpha)
    use = (n_h > 0) & (kappa_h > 0) & ~noisier & ~more_correlated & np.isfinite(se2) & np.isfinite(nu)
    return use, se2, nu, rho


def _f_exceeds(ratio: np.ndarray, dfn: np.ndarray, dfd: np.ndarray, alpha: float) -> np.ndarray:
    """Where a ratio of two variance estimates lies beyond the upper `alpha` point of F(dfn, dfd). The tail is only
    computed where the ratio exceeds 1 (an upper point of F at alpha ≤ 0.5 never lies below it), which keeps the
    scan cheap."""
    from scipy import special

    ratio, dfn, dfd = np.broadcast_arrays(ratio, dfn, dfd)
    out = np.zeros(ratio.shape, dtype=bool)
    above = np.isfinite(ratio) & (ratio > 1) & np.isfinite(dfn) & np.isfinite(dfd)
    out[above] = special.fdtrc(dfn[above], dfd[above], ratio[above]) < alpha
    return out | (ratio == np.inf)


def _bias_corrected(rho_hat: np.ndarray, total_n: np.ndarray) -> np.ndarray:
    """The pooled lag-1 autocorrelation of two separately demeaned sides with Kendall's bias added back (module
    docstring, 3.)."""
    return rho_hat + 2 * (1 + 3 * rho_hat) / total_n


def _serial_correlation(
    rho_hat: np.ndarray, total_n: np.ndarray, pool: tuple[np.ndarray, np.ndarray] | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """The AR(1) coefficient the test uses from ρ̂, the pooled lag-1 autocorrelation of the residuals (module
    docstring, 3.): bias-corrected, with `pool` (ρ̄, n₀) shrunk towards the correlation the analysis' statements
    of like busyness show as a posterior mean, (n ρ̂ + n₀ ρ̄)/(n + n₀), then RHO_MARGIN standard errors high
    (of n + n₀ intervals), clipped to [0, RHO_MAX]; and the intervals n + n₀ it rests on."""
    rho_fixed = _bias_corrected(rho_hat, total_n)
    worth = total_n
    if pool is not None:
        pool_rho, pool_n = pool
        worth = total_n + pool_n
        rho_fixed = (total_n * rho_fixed + pool_n * pool_rho) / worth
    rho = np.clip(rho_fixed + RHO_MARGIN * np.sqrt(np.maximum(1 - rho_fixed**2, 0.0) / worth), 0.0, RHO_MAX)
    return rho, worth


def pooled_serial_correlation(
    a: SideSums, b: SideSums, n_a: np.ndarray, n_b: np.ndarray, bins: int = POOL_BINS
) -> tuple[np.ndarray, np.ndarray]:
    """Per row, the serial correlation its peers show and what it is worth in intervals (ρ̄, n₀): an empirical
    Bayes prior for the window-only test's ρ (docs/method.md, "Serial correlation from the other statements").
    A window of a few intervals cannot estimate a statement's ρ (at 7 a side its standard error is 0.27, and the
    test's margin and degrees of freedom then make a ×2 step's interval ×0.02–×174); the analysis' hundreds of
    statements can estimate how ρ varies among statements. Peers are the statements of like busyness (calls per
    interval, the strongest predictor of ρ: per-call noise averages out in a busy interval, leaving the slow
    wander), in up to `bins` bins of equal count (at least POOL_MIN rows each). Within a bin each ρ̂ (bias-corrected,
    of n intervals, sampling variance (1 − ρ²)/n) is a draw around ρ̄ with spread τ² (DerSimonian–Laird); n₀ =
    (1 − ρ̄²)/τ², at most the bin's own intervals. A row whose sides lack two intervals or any spread gets n₀ = 0."""
    with np.errstate(divide="ignore", invalid="ignore"):
        scale_a = np.where(a.mean > 0, 1.0 / a.mean**2, 0.0)
        scale_b = np.where(b.mean > 0, 1.0 / b.mean**2, 0.0)
        ee = a.ee * scale_a + b.ee * scale_b
        total_n = (n_a + n_b).astype(np.float64)
        rho = _bias_corrected(np.where(ee > 0, (a.acov * scale_a + b.acov * scale_b) / ee, np.nan), total_n)
        busy = np.log((a.calls + b.calls) / total_n)
    ok = np.isfinite(rho) & np.isfinite(busy) & (n_a >= 2) & (n_b >= 2)
    rho = np.clip(rho, -0.99, 0.99)
    pool_rho, pool_n = np.zeros(len(rho)), np.zeros(len(rho))
    count = int(ok.sum())
    if count < POOL_MIN:
        return pool_rho, pool_n
    members = np.flatnonzero(ok)
    # by busyness, ties by ρ̂ then n: the bins depend on the statements' values, never on their order
    ordered = members[np.lexsort((total_n[members], rho[members], busy[members]))]
    for part in np.array_split(ordered, max(1, min(bins, count // POOL_MIN))):
        w = total_n[part]
        mu = float(np.sum(w * rho[part]) / w.sum())
        v = np.maximum(1 - rho[part] ** 2, 0.01) / w  # each estimate's sampling variance
        precision = 1 / v
        centre = np.sum(precision * rho[part]) / precision.sum()
        q = np.sum(precision * (rho[part] - centre) ** 2)
        c = precision.sum() - np.sum(precision**2) / precision.sum()
        tau2 = max(0.0, (q - (len(part) - 1)) / c) if c > 0 else 0.0
        worth = w.sum() if tau2 <= 0 else min(w.sum(), (1 - mu**2) / tau2)
        pool_rho[part], pool_n[part] = mu, worth
    return pool_rho, pool_n


def level_shift_beyond_trend(
    calls: np.ndarray, means: np.ndarray, at: np.ndarray, n: np.ndarray, k: np.ndarray
) -> np.ndarray:
    """The relative level shift at split k beyond the trend the statement shows, per row, by two models; the larger
    shift is returned, so a change is left to the history bands as a drift only when neither sees a step.

    - continuous trend: (a + δ) / a with a + b·(t − t_k) + δ·[i ≥ k] fitted to the interval means by least squares
      weighted by calls (one slope through the window);
    - broken line: each side's own weighted line, the after line's level at t_k over the before line's (a step
      followed by a climb or a fall, as a slowed statement warming up or a loaded server shows, keeps its size
      here, where one shared slope would take it for a drift).

    A drift through the window gives ≈ 1 in both; a step at k gives its factor in both. A level at or below zero (a
    fast statement whose line is tilted by the straddling interval) falls back to its side's call-weighted mean.

    calls, means, at ([rows, L]): weights, interval means and interval end times (any unit), left-aligned.
    """
    rows, length = calls.shape
    col = np.arange(length)[None, :]
    inside = col < n[:, None]
    whole = bool(inside.all())  # every row fills the matrix: nothing past n to mask
    w = np.asarray(calls, dtype=np.float64) if whole else np.where(inside, calls, 0.0)
    t0 = at[np.arange(rows), np.clip(k - 1, 0, length - 1)].astype(np.float64)
    t = (at - t0[:, None]).astype(np.float64)
    if not whole:
        t = np.where(inside, t, 0.0)
    t /= np.maximum(np.abs(t).max(axis=1), 1.0)[:, None]
    x = np.asarray(means, dtype=np.float64) if whole else np.where(inside, means, 0.0)
    # With weights w, times t and the step d (0 or 1), every sum the three fits need is a sum of one of w, w·t, w·t²,
    # w·x, w·t·x over the intervals before k (d = 0) or from k on (d = 1): ten sums of products, taken without
    # forming the masked products (einsum) that a direct weighted least squares would.
    d = (col >= k[:, None]).astype(np.float64)
    wt = w * t
    terms = {"1": w, "t": wt, "tt": wt * t, "x": w * x, "tx": wt * x}
    after_of = {name: np.einsum("ij,ij->i", q, d) for name, q in terms.items()}
    np.subtract(1.0, d, out=d)
    before_of = {name: np.einsum("ij,ij->i", q, d) for name, q in terms.items()}
    fits = []
    for side in ("whole", "before", "after"):
        if side == "whole":
            sums = {name: before_of[name] + after_of[name] for name in terms}
            sums |= {"d": after_of["1"], "td": after_of["t"], "dd": after_of["1"]}
            rhs = [sums["x"], sums["tx"], after_of["x"]]
            gram = [["1", "t", "d"], ["t", "tt", "td"], ["d", "td", "dd"]]
        else:
            sums = before_of if side == "before" else after_of
            rhs = [sums["x"], sums["tx"]]
            gram = [["1", "t"], ["t", "tt"]]
        fits.append(
            (
                _solve(np.stack([np.stack([sums[e] for e in row], axis=1) for row in gram], axis=1), rhs),
                rhs[0],
                sums["1"],
            )
        )
    (coef, _, _), (before, before_wx, before_w), (after, after_wx, after_w) = fits
    before_mean, after_mean = before_wx / np.maximum(before_w, 1e-300), after_wx / np.maximum(after_w, 1e-300)
    continuous_level = np.where(coef[:, 0] > 0, coef[:, 0], before_mean)
    before_line, after_line = before[:, 0], after[:, 0]
    with np.errstate(divide="ignore", invalid="ignore"):
        continuous = (continuous_level + coef[:, 2]) / continuous_level
        broken = np.where(after_line > 0, after_line, after_mean) / np.where(before_line > 0, before_line, before_mean)
    return np.fmax(continuous, broken)


def _solve(gram: np.ndarray, rhs: list[np.ndarray]) -> np.ndarray:
    """The weighted normal equations' solution per row, from their [rows, m, m] matrix and m right-hand sides, with
    a ridge of 1e-12 of the trace."""
    ridge = 1e-12 * np.maximum(np.trace(gram, axis1=1, axis2=2), 1e-300)
    gram += np.eye(gram.shape[1])[None] * ridge[:, None, None]
    return np.linalg.solve(gram, np.stack(rhs, axis=1)[:, :, None])[:, :, 0]
