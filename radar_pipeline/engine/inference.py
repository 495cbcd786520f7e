"""The call-level test of a slowdown, for many statements at once, at every candidate split near the deploy.

For a split of a statement's window into a segment A (before) and B (after), each side's level is the pooled
per-call mean μ̂ = Σ ΔT / Σ ΔC (a ratio estimator: every call counts once, however the calls fall into intervals).
The hypothesis carries the practical threshold θ (H0: μ_B ≤ (1 + θ) · μ_A), tested on the log scale:

    t = (ln μ̂_B − ln μ̂_A − ln(1 + θ)) / sqrt(V_A / μ̂_A² + V_B / μ̂_B²)        (delta method)

and is rejected for large t only, so improvements are never a finding. V, the variance of a side's pooled mean,
must hold three things that make latency series harder than textbook samples:

1. per-call noise. With the intervals' own sums of squares S_i (recovered from stddev_exec_time, see `variance`), the
   pooled per-call variance σ̂² = Σ S_i / Σ (c_i − 1) gives V_calls = σ̂² / C, the variance if calls were independent.
2. overdispersion: interval means wander more than their calls explain (cache state, parameter mix, neighbours).
   The ratio estimator's sandwich variance (Cochran 1977, §6.4) V_emp = n/(n − f) · Σ e_i² / C² · f, with residuals
   e_i = ΔT_i − μ̂ ΔC_i, holds per-call noise and overdispersion alike, without a model of either; it is what the
   test uses when stddev_exec_time is absent (old rows, other callers), so both paths are calibrated the same way.
3. serial correlation between neighbouring intervals. The lag-1 autocorrelation ρ̂ of the residuals (both sides
   pooled, each about its own mean and on the relative scale, e_i / μ̂, so a side whose level is hundreds of times
   the other's does not set the correlation of both) is corrected for its small-sample bias: a series of m points
   demeaned on its own has E[ρ̂] ≈ ρ − (1 + 3ρ)/m (Kendall 1954), and each side is demeaned on its own, so pooled
   over the two sides (weighted by their sizes n_A, n_B) the bias is (1 + 3ρ)(n_A/n_A + n_B/n_B)/n = 2 (1 + 3ρ)/n
   (engine 2.1 added back half of it). ρ is then raised by RHO_MARGIN standard errors sqrt((1 − ρ²)/n) (Bartlett
   1946), because the splits where a test errs are those where the residuals about two side means understate the
   correlation, clipped to [0, RHO_MAX], and turned
   into the AR(1) variance inflation f = (1 + ρ)/(1 − ρ) and an effective sample size n_eff = n/f (Bayley &
   Hammersley 1946; Zwiers & von Storch 1995 show the plain t-test's level failing without it). Demeaning a
   correlated side removes about f of its n degrees of freedom, not one, so V_emp uses n/(n − f) in place of
   n/(n − 1). A kernel (Newey–West 1987) estimator with the few lags a 30-point side allows cannot reach the
   inflation of ρ = 0.8 (9×); the AR(1) model can.

V = max(V_emp · inflation, V_calls): the per-call term is a floor that keeps a side with few, busy intervals from
looking more precise than its calls allow. The reference distribution is Student's t with Welch–Satterthwaite
degrees of freedom built from each side's: where the per-call term dominates, Σ (c_i − 1); else the sandwich's
n_eff − 1 = n/f − 1 for its sum of squares, combined with the uncertainty of the inflation itself. V̂ is a sum of
squares times f(ρ̂), so Var ln V̂ ≈ 2/(n_eff − 1) + Var ln f(ρ̂), and by the delta method with Var ρ̂ ≈ (1 − ρ²)/n,
Var ln f(ρ̂) ≈ (2/(1 − ρ²))² (1 − ρ²)/n = 4/((1 − ρ²) n); matching 2/ν (Satterthwaite 1946) gives the side's
ν = 2 / (2/(n_eff − 1) + 4/((1 − ρ²) n)). With 30 intervals a side the level in the far tail, where a family budget
spread over thousands of statements puts it (10⁻⁵ and below), depends on it: at φ ≈ 0.8, ρ̂ from 60 points is often
low by chance, and a t reference that ignores that rejects too readily. On its window alone that is not enough: with
every statement on H0's boundary the engine spends about twice its budget (README, benchmarks/detection_quality.py);
a statement's own history (below, "History") is what buys it back.

A short side. Under H0 a slowdown scales a statement's times, so the relative dispersion per call is the same on both
sides; the pooled κ̂ = (Σ_A e²/μ̂_A² + Σ_B e²/μ̂_B²)/(C_A + C_B) estimates it from every interval. A side's sandwich
is never taken below κ̂ μ̂² / C, what that dispersion gives its C calls (with equal calls per interval, exactly the
sandwich's expectation), so the test can only grow more conservative. Without it, a side of four or five sparse
intervals whose few calls happen to lie low and close together — likely when per-call times are skewed (a
log-normal with CV 2 has most of its calls below the mean) — looks precise, Welch–Satterthwaite follows the long
side's degrees of freedom, and the periodic check (whose splits reach the window's edges) reported such statements
at 4.6 times its daily budget on interval means (engine 2.1.1: 19 in 1,000 null checks, 0.46 a day).

History. Given `History` for a statement (estimated from its own earlier days by `noise`, from before the window),
the two things the window estimates worst come from more data, of which at most `history_max_intervals` intervals
count however long the history (a power prior's discount, Ibrahim & Chen 2000: other days may not be quite today):

- the inflation. A latency series' residuals are not AR(1): per-call noise is white and overdispersion persistent,
  so ρ_k = ρ_1 φ^(k−1) (AR(1) plus white noise, an ARMA(1, 1)), and the AR(1) reading (1 + ρ_1)/(1 − ρ_1) of the
  lag-1 correlation understates the long-run variance inflation f = 1 + 2 ρ_1 / (1 − φ) (φ = 0.8 with half the
  variance white gives ρ_1 = 0.4: 2.3 where f is 5). Thirty intervals a side cannot tell φ from ρ_1, a day of them
  can (φ = ρ_2 / ρ_1); the window's test uses the history's f (its AR(1)-equivalent coefficient (f − 1)/(f + 1) is
  what `serial_correlation` reports), and the window's lag-1 correlation only to check it (below). This is what made
  the window-only test liberal in the far tail for φ > 0.6, beside ρ̂'s noise.
- the dispersion. The history's relative dispersion per call κ_h predicts a side's relative variance κ_h / C. The
  side's variance is the precision-weighted mix of the window's own estimate û (the sandwich and floor above, on
  d = n/f − 1 degrees of freedom) and that prediction (d_h = N/f − 1 for N intervals of history): f · (d û +
  d_h κ_h / C) / (d + d_h), the posterior of a scaled-inverse-χ² prior, as the moderated t of Smyth (2004) has it
  with other genes where we have the statement's other days. Its degrees of freedom are Satterthwaite's over the
  independent mean squares (each side's own, and the history's, shared by both sides, so its two coefficients add
  before squaring), with the uncertainty of ln f from N intervals for the share of se² that f scales: a statement
  with a day of history is tested against a t on hundreds of degrees of freedom, near the normal reference, and
  where the per-call term dominates a side, that side is as without history.
- the window's calls. κ_h is a relative variance per call, and only per-call noise shrinks with an interval's calls: an
  interval mean of c calls has relative variance a / c + b, a the per-call part (CV²) and b the overdispersion, so κ = a
  + b c grows with the calls per interval. A deploy at the peak hour meets a history read at a day's average (c̄_h =
  `calls_per_interval`); with r = c̄_w / c̄_h (the side's calls per interval over the history's), the history predicts a
  + r (κ_h − a) for the side's relative dispersion per call, and a + r (f κ_h − a) for its long-run variance (only the
  overdispersion carries the serial correlation, so the side's inflation is the ratio of the two). a is the window's own
  per-call relative variance from its intervals' sums of squares (pooled over both sides, as H0 scales the times; about
  as many degrees of freedom as calls), clipped to [0, κ_h]; without them (interval means only), the worse of a = 0 and
  a = κ_h for the side's r. At r = 1 this is the history's prediction unchanged. Without the scaling, a history read at
  a tenth of the window's calls put the test's level at 3.3 times α at 10⁻³ (engine 2.3.0;
  `test_a_history_quieter_than_the_window_is_scaled_to_its_calls`).
- conflict. A window whose pooled dispersion exceeds what the history predicts for its calls at level `conflict_alpha`
  (F test on the degrees of freedom of both), or whose bias-corrected lag-1 correlation exceeds the history's reading by
  that normal quantile, is not the history's kind of day (a prior–data conflict, Evans & Moshonov 2006): it is tested on
  its own, exactly as without history. A calmer window is no conflict: the mix only makes it more conservative. And one
  side whose own variance exceeds the history's prediction for its calls at SIDE_ALPHA keeps its own variance and
  degrees of freedom: a sparse statement with skewed per-call times (a log-normal of CV 3) has a rare call hundreds of
  times its mean, its history's dispersion (made mostly of ordinary calls) is low beside it, and a mean of a few such
  calls is far from normal; the window's own variance grows with that call, so the window-only t stays moderate (it is
  self-normalised). Without this, the hourly check, whose splits reach a few intervals from its window's edge, reported
  such statements (benchmarks/detection_quality.py).

A statement without usable history (none stored, too few intervals, NaN) is tested exactly as by engine 2.2.0.

Selection. The split is not fixed: it is chosen among the K candidate splits the caller allows (the decision's:
at or after the deploy, within the tolerance), where t is largest. A test at the maximising split is not a test at a
fixed one. Bonferroni's p = min(1, K · p_k̂) holds whatever the dependence, but neighbouring splits share all but
one interval (their statistics correlate at about 0.97 with 30 intervals a side), so it pays for K tests where there
are far fewer. The engine uses the chain (upcrossing) bound instead (Hunter 1976; Worsley 1982): with A_j the event
that candidate j's p is at most p_k̂, i.e. that its normal score Z_j reaches u = Φ⁻¹(1 − p_k̂),

    P(∪ A_j) ≤ P(A_1) + Σ_j P(A_j+1 ∖ A_j) = p_k̂ + Σ_j 2 T(u, sqrt((1 − r_j)/(1 + r_j))),

where P(Z_j < u ≤ Z_j+1) = 2 T(u, ·) for two standard normal scores of correlation r_j (T is Owen's function, Owen
1956). The first step is an inequality for any events; the second treats neighbouring scores as bivariate normal
with the correlation the split statistics have under H0 (`split_correlations`: computed from the intervals' calls,
for independent intervals, the smaller of the per-call and the overdispersion case; positive serial correlation
only raises it, so the bound stays on the safe side), as the t reference already treats each score as normal.
Where it exceeds Bonferroni's K · p_k̂, that is used. For the deploy's seven candidate splits it pays for about 3.5
tests at 10⁻⁵ instead of 7. The chosen split's figures are then recomputed in two passes, so the prefix sums of the
scan cost no precision in what is reported.

Numerical care. Times are centred on each statement's overall mean before the scan's prefix sums, so Σ e_i² does not
come out of a difference of two large sums. Both sides of zero variance (a deterministic step) give t = ±∞ and p = 0
or 1, and an interval of zero width.

The interval. exp(ln μ̂_B − ln μ̂_A ± t_{ν, 0.975} · se): a 95% interval of the slowdown factor at the tested split,
per statement, not adjusted for the choice of split or for the family.

Clearing (engine 2.5). `no_regression` is a claim, not the absence of a finding: the statement did not slow down
beyond the tolerance. Its error is a missed regression — a statement cleared whose true factor exceeds 1 + θ — and the
rule bounds it per statement: at every split k of a set S, the one-sided upper confidence bound at level β
(`clear_level`, 0.95)

    U_k = exp(ln μ̂_B − ln μ̂_A + t_{ν, β} · se)        (se, ν: the test's own, at that split)

must lie within the tolerance 1 + θ (`clearing_bounds`): P_k = F_ν((ln(1 + θ) − ln μ̂_B + ln μ̂_A) / se) ≥ β at every k,
and the verdict's `factor_bound` is U_k at the split whose P_k is least (the least certain). The variance
is the detection's in full: the sandwich with its AR(1) inflation and margin, the short-side and per-call floors, the
degrees of freedom that carry ρ̂'s uncertainty, the statement's history where it is used and the window alone where
it conflicts with it.

What it controls: if the change begins at a split k* of S, the two sides at k* each hold one level, and U_k* is an
upper bound of the true factor there at level β (the t reference of the detection's fixed-split test, on its other
tail): P(U_k* ≤ 1 + θ) ≤ 1 − β whenever the true factor exceeds 1 + θ. Clearing needs U_k ≤ 1 + θ at every k of S, k*
among them, so P(cleared) ≤ 1 − β whichever split is the true one. This is an intersection–union test (Berger 1982;
Berger & Hsu 1996): the null "slower beyond θ from some split of S" is a union, rejected only when each of its parts
is, each at level 1 − β, and it owes nothing for the number of splits — unlike the detection, whose maximum over splits
pays for the choice. The guarantee is per truly regressed statement (not family-wise): of N statements that truly
slowed beyond θ, at most (1 − β) N are expected to be cleared. The price is power: the splits after the true change
put some changed intervals on the before side, whose variance the mixture widens, and a statement is cleared only
when every split's bound is low enough.

Which splits. S is the detection's candidates (at or after the deploy, within the tolerance, leaving max(3, n/10)
intervals each side) and, for a deploy, its own split (the interval that straddles the deploy first after it), which a
sparse statement's candidates lack when its last interval before the deploy ended more than the tolerance before it.
A change that begins at τ in [deploy, deploy + tolerance] falls in some interval (e_{j−1}, e_j]; the split j that puts
it first on the after side is the deploy's own, or one whose change time e_{j−1} lies in (deploy, τ): a candidate,
if its sides are long enough. Not covered, and said so: (1) the interval holding τ mixes both levels, and on the after
side it dilutes the factor at j by about its share of the side's calls (1/24 of the slowdown with one-minute scrapes
and a 30-minute window): a bias towards clearing of that order at the boundary; (2) a change that leaves fewer than
max(3, n/10) of the statement's intervals after it (a sparse statement whose after-side calls fall mostly within the
tolerance) is neither detected nor checked; (3) a change outside the tolerance is not blamed on the deploy, and one
large enough to lift the window's means by θ leaves the deploy's own split uncleared anyway (`outside_tolerance`
stays inconclusive: the deploy may have added a slowdown of its own that a test with the older level on its before
side cannot rule out). The periodic check's tolerance spans its window: S is every admissible split there.

The tolerance. 1 + θ, or for a statement so fast that θ of its before-mean μ̂_A is less than `min_rise_ms`, 1 +
min_rise_ms / μ̂_A: a rise the detection would not report whatever its factor (its pre-filter). The level is then
approximate, μ̂_A being an estimate; a split with no bound (a side without time) clears nothing. The bound comes from
sums of the times centred on the statement's mean (the scan's, not recomputed in two passes): each side's sums
outside the band of splits from one pass over every statement's intervals, then added up through the band in order.
The t tail P_k is computed where it can be the least only — at the split of least z_k = (ln(1 + θ) − ln μ̂_B +
ln μ̂_A) / se, and at the splits whose z_k is small enough that F_ν(z_k) could fall to that one's for some ν of the
statement's (F_ν(z) grows with z, and with ν where z > 0, shrinks with ν where z < 0): the same worst split as
computing it everywhere, at a fraction of the cost (engine 2.5.0 first computed it at every split).
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
# A side whose own variance exceeds its history's prediction at this level keeps its own (module docstring,
# "History"): a check that errs towards the window-only test, so it may be lenient.
SIDE_ALPHA = 0.05
# Splits the clearing rule bounds at a time (rows × splits): its test's temporaries stay a few MB each.
CLEAR_CELLS = 1 << 16
COMPACT = 2  # the clearing rule gathers its rows' intervals first when they are fewer than 1/COMPACT of all


@dataclass(frozen=True)
class History:
    """Per row, a statement's noise estimated from its own history before the window (module docstring,
    "History"): rho, its serial correlation; dispersion, its relative dispersion per call; intervals, the intervals
    they rest on as the test counts them (already capped; 0: no history, the row is tested on its window alone);
    calls_per_interval, how busy the history's intervals were, which scales its prediction to a busier or quieter
    window. conflict_alpha: the level of the prior–data conflict checks."""

    rho: np.ndarray
    dispersion: np.ndarray
    intervals: np.ndarray
    conflict_alpha: float
    calls_per_interval: np.ndarray  # the history's mean calls per interval (NaN: unknown, taken as the window's)

    def rows(self, index: np.ndarray | slice, column: bool = False) -> History:
        """The estimates of some rows, as a column ([rows, 1]) when they meet a scan over splits."""
        pick = (lambda v: v[index][:, None]) if column else (lambda v: v[index])  # noqa: E731
        return History(
            pick(self.rho),
            pick(self.dispersion),
            pick(self.intervals),
            self.conflict_alpha,
            pick(self.calls_per_interval),
        )


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
    # The history intervals the test at the chosen split combined with the window: History.intervals where it used
    # them, 0 where it used the window alone (no history, or a window that conflicts with it), NaN where not tested.
    history_intervals: np.ndarray


def _prefix(values: np.ndarray) -> np.ndarray:
    """Sums of the first k columns, k = 0..L ([rows, L + 1])."""
    out = np.zeros((values.shape[0], values.shape[1] + 1))
    np.cumsum(values, axis=1, out=out[:, 1:])
    return out


def split_tests(
    calls: np.ndarray,
    time: np.ndarray,
    sumsq: np.ndarray | None,
    n: np.ndarray,
    candidate: np.ndarray,
    threshold: float,
    history: History | None = None,
) -> SplitTest:
    """The call-level test (module docstring) of every row at every candidate split; the best one per row.

    calls, time: [rows, L] per-interval ΔC and ΔT, left-aligned (zeros past n[row]); sumsq: the intervals' per-call
    sums of squares (NaN where unknown) or None; candidate: [rows, L + 1] boolean, the splits k (A = first k
    intervals) to test; history: each row's estimates from its own history (None: every row on its window alone).
    Rows with no candidate get p = 1 and NaN elsewhere.
    """
    from scipy import stats

    c = np.asarray(calls, dtype=np.float64)
    # Only the splits between the block's first and last candidate are evaluated.
    cols = np.flatnonzero(candidate.any(axis=0))
    lo, hi = (int(cols[0]), int(cols[-1]) + 1) if len(cols) else (0, 1)
    scan = _scan(c, time, sumsq, n, np.broadcast_to(np.arange(lo, hi)[None, :], (len(c), hi - lo)), threshold, history)
    valid = candidate[:, lo:hi] & scan["valid"]
    splits = candidate.sum(axis=1)
    # The largest t is the split tested (any rule may choose it: the Bonferroni bound below holds for all of them).
    k = lo + np.argmax(np.where(valid, np.maximum(scan["t"], -np.finfo(np.float64).max), -np.inf), axis=1)
    tested = valid.any(axis=1)
    k = np.where(tested, k, 0)

    # The prefix sums chose the split; its figures are recomputed in two passes (residuals about each side's own
    # mean), which keeps full precision when the two sides' levels lie orders of magnitude apart.
    exact = _statistics(
        *_side_sums_at(c, np.asarray(time, dtype=np.float64), sumsq, n, k),
        n.astype(np.float64),
        0.0,
        threshold,
        history,
    )
    valid_k = tested & exact["valid"]
    pick = lambda m: np.where(valid_k, m, np.nan)  # noqa: E731
    nu_k = pick(exact["nu"])
    p_k = stats.t.sf(np.where(valid_k, exact["t"], 0.0), np.where(valid_k, nu_k, 1.0))
    p = np.where(valid_k, selection_p(p_k, candidate, c), 1.0)
    se = pick(exact["se"])
    half = stats.t.ppf(0.5 + CI_LEVEL / 2, np.where(valid_k, nu_k, 1.0)) * se
    half = np.where(se == 0, 0.0, half)
    log_ratio = pick(exact["log_ratio"])
    return SplitTest(
        k=np.where(valid_k, k, 0),
        p=p,
        t=pick(exact["t"]),
        dof=nu_k,
        mean_a=pick(exact["mean_a"]),
        mean_b=pick(exact["mean_b"]),
        n_a=pick(k.astype(np.float64)),
        n_b=pick((n - k).astype(np.float64)),
        rho=pick(exact["rho"]),
        factor_low=np.exp(log_ratio - half),
        factor_high=np.exp(log_ratio + half),
        splits=splits,
        history_intervals=pick(exact["history_intervals"]),
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


def _sides(
    sums: dict[str, tuple[np.ndarray, np.ndarray]], stddev: bool
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Both sides' test sums (as `_statistics` takes them) from their sums of interval and pair terms."""
    out = []
    for i in (0, 1):
        got = {key: v[i] for key, v in sums.items()}
        with np.errstate(divide="ignore", invalid="ignore"):
            mu = got["t"] / got["c"]  # centred pooled mean (NaN for an empty side, which is never a candidate)
            ee = got["tt"] - 2 * mu * got["tc"] + mu * mu * got["cc"]
            acov = got["lag_tt"] - mu * got["lag_tc"] + mu * mu * got["lag_cc"]
        side = {"calls": got["c"], "mean": mu, "ee": np.maximum(ee, 0.0), "acov": acov}
        if stddev:
            side["ss"] = np.where(got["unknown"] > 0, np.nan, got["ss"])
            side["ss_dof"] = got["ss_dof"]
        out.append(side)
    return out[0], out[1]


def _scan(
    c: np.ndarray,
    time: np.ndarray,
    sumsq: np.ndarray | None,
    n: np.ndarray,
    ks: np.ndarray,
    threshold: float,
    history: History | None,
) -> dict[str, np.ndarray]:
    """The test's statistics (`_statistics`) of every row at the splits ks ([rows, J]: A = the first k intervals),
    from prefix sums, as [rows, J] arrays (with the sides' sizes n_a, n_b)."""
    # Centre the times on each row's overall mean so the residual sums below do not cancel catastrophically.
    total_c = c.sum(axis=1)
    centre = np.where(total_c > 0, time.sum(axis=1) / np.where(total_c > 0, total_c, 1.0), 0.0)
    tc = np.asarray(time, dtype=np.float64) - centre[:, None] * c

    # Per-interval values summed over [0, k) and [k, n) (zeros past n), and lag-1 cross products of neighbouring
    # intervals (the pair (i, i + 1) at column i) summed over the pairs inside [0, k) (i ≤ k − 2) and inside [k, n)
    # (i ≥ k): a prefix sum of each ([rows, L + 1], Σ of the first j columns at j), read at k and k − 1, one term at
    # a time so only one is held.
    rows, length = c.shape
    prefix = np.zeros((rows, length + 1))
    flat = prefix.reshape(-1)
    start = (np.arange(rows) * (length + 1))[:, None]
    sums = {}
    for name, values in _interval_terms(c, tc, sumsq):
        np.cumsum(values, axis=1, out=prefix[:, 1:])
        at_k = np.take(flat, start + ks)
        sums[name] = (at_k, prefix[:, -1:] - at_k)
    for name, values in _pair_terms(c[:, :-1], tc[:, :-1], c[:, 1:], tc[:, 1:]):
        np.cumsum(values, axis=1, out=prefix[:, 1:length])
        prefix[:, length] = prefix[:, length - 1]
        at_k = np.take(flat, start + ks)
        sums[name] = (np.take(flat, start + np.maximum(ks - 1, 0)), prefix[:, -1:] - at_k)
    a, b = _sides(sums, sumsq is not None)
    total_n = n[:, None].astype(np.float64)
    n_a = ks.astype(np.float64)
    scan_history = history.rows(slice(None), column=True) if history is not None else None
    scan = _statistics(a, b, n_a, n[:, None] - n_a, total_n, centre[:, None], threshold, scan_history)
    scan["n_a"], scan["n_b"] = n_a, n[:, None] - n_a
    return scan


@dataclass(frozen=True)
class Clearing:
    """Per row, the clearing rule's figures (module docstring, "Clearing") at its worst split, the one least certain
    to lie within the tolerance: `bound`, the upper bound there of the slowdown factor (NaN
    where some split has none: a side without time, or no split at all); `cleared`, whether every split's bound lies
    within its tolerance; `precise`, whether the bound's margin over the estimate there fits within the tolerance
    (with no change at all, this precision would clear); `conflict`, whether the statement has history but the test
    there used its window alone (a window unlike its history)."""

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
    history: History | None = None,
) -> Clearing:
    """The clearing rule (module docstring, "Clearing") for some rows: the one-sided upper confidence bound, at
    `level`, of the slowdown factor at each of their splits, from the test's own variance (`_statistics`, history
    included); cleared when at every split it lies within the tolerance: factor ≤ 1 + θ, or a rise of the per-call
    mean ≤ `min_rise` ms (for a statement so fast that θ of it is less), 1 + max(θ, min_rise / μ̂_A).

    calls, time, sumsq: every row's intervals, flat (row g's at offsets[g] .. offsets[g + 1] − 1, as WindowSamples
    holds them; sumsq None without stddev); centre: every row's per-call mean over them (0 without calls), on which
    its times are centred so the residual sums do not cancel (as in `_scan`); rows: the rows to bound;
    first: each one's first split (≥ 1); splits: [rows, J] boolean, whether split first + j is one of its own (A =
    the first k intervals); history: the estimates of those rows. The sums outside a row's splits come from one pass
    over the flat arrays per term; those between them, and the test, for at most CLEAR_CELLS splits at a time.
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
        known = history.rows(block, column=True) if history is not None else None
        with np.errstate(invalid="ignore", divide="ignore"):  # the slots past a row's last split are not read
            scan = _statistics(a, b, n_a, total_n - n_a, total_n, centre[rows[block], None], threshold, known)
        scan["n_a"], scan["n_b"] = n_a, total_n - n_a
        _bound_at_worst(scan, splits[block], min_rise, threshold, level, history, block, out)
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
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
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
    scan: dict[str, np.ndarray],
    wanted: np.ndarray,
    min_rise: float,
    threshold: float,
    level: float,
    history: History | None,
    block: np.ndarray,
    out: Clearing,
) -> None:
    """The bound at each row's worst split, the least confident that the factor lies within the tolerance (in place,
    in `out`'s rows `block`). A split with no bound (a side without time) is the worst. The confidence, a Student t
    tail, is computed only where it may be the least: at the split of smallest z = room / se, and where z is small
    enough that its confidence could fall below that one's for some ν of the row's (exact: the tail is monotone in
    z, and in ν on each side of z = 0)."""
    from scipy import special

    log_ratio, se, nu = scan["log_ratio"], scan["se"], np.nan_to_num(scan["nu"], nan=1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        limit = np.maximum(np.log1p(threshold), np.log1p(min_rise / scan["mean_a"]))
        room = limit - log_ratio  # how far the estimate lies within the tolerance (log scale)
        z = np.where(se > 0, room / se, np.where(room >= 0, np.inf, -np.inf))
    defined = (scan["mean_a"] > 0) & (scan["mean_b"] > 0) & ~np.isnan(room) & ~np.isnan(se)
    defined &= (scan["n_a"] >= 2) & (scan["n_b"] >= 2)
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
    if history is not None:
        out.conflict[block] = bounded & (history.intervals[block] > 0) & (scan["history_intervals"][at] == 0)


def split_correlations(calls: np.ndarray, candidate: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The correlation, under H0, of the test's statistics at each candidate split and at the previous candidate of
    its row, and the mask of the splits that have one ([rows, L + 1] each; module docstring, "Selection").

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
    Bonferroni's K · p_k, which it replaces when smaller (module docstring, "Selection")."""
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
    a: dict[str, np.ndarray],
    b: dict[str, np.ndarray],
    n_a: np.ndarray,
    n_b: np.ndarray,
    threshold: float,
    history: History | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The 95% interval of the slowdown factor at one fixed split per row, from each side's sums (calls, mean, Σe²
    about the side's mean, lag-1 Σe·e, and optionally Σ S, Σ (c − 1)), with the same variance as the test: for
    statements that stop before the test, so their verdict carries an interval too. NaN where it is undefined."""
    from scipy import stats

    n_a = n_a.astype(np.float64)
    n_b = n_b.astype(np.float64)
    exact = _statistics(a, b, n_a, n_b, n_a + n_b, 0.0, threshold, history)
    ok = (exact["mean_a"] > 0) & (exact["mean_b"] > 0) & (n_a >= 2) & (n_b >= 2)
    nu = np.where(ok & np.isfinite(exact["nu"]), exact["nu"], 1.0)
    half = np.where(exact["se"] == 0, 0.0, stats.t.ppf(0.5 + CI_LEVEL / 2, nu) * exact["se"])
    low = np.where(ok, np.exp(exact["log_ratio"] - half), np.nan)
    high = np.where(ok, np.exp(exact["log_ratio"] + half), np.nan)
    return low, high


def _side_sums_at(
    c: np.ndarray, time: np.ndarray, sumsq: np.ndarray | None, n: np.ndarray, k: np.ndarray
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], np.ndarray, np.ndarray]:
    """Both sides' sums at one split per row, residuals taken about each side's own mean (two passes)."""
    col = np.arange(c.shape[1])[None, :]
    sides = []
    for mask in (col < k[:, None], (col >= k[:, None]) & (col < n[:, None])):
        cs = np.where(mask, c, 0.0).sum(axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            mu = np.where(mask, time, 0.0).sum(axis=1) / cs
        e = np.where(mask, time - mu[:, None] * c, 0.0)
        pair = mask[:, :-1] & mask[:, 1:]
        out = {
            "calls": cs,
            "mean": mu,
            "ee": (e * e).sum(axis=1),
            "acov": np.where(pair, e[:, :-1] * e[:, 1:], 0.0).sum(axis=1),
        }
        if sumsq is not None:
            unknown = (mask & np.isnan(sumsq) & (c > 0)).any(axis=1)
            out["ss"] = np.where(unknown, np.nan, np.where(mask, np.nan_to_num(sumsq, nan=0.0), 0.0).sum(axis=1))
            out["ss_dof"] = np.where(mask, np.maximum(c - 1, 0.0), 0.0).sum(axis=1)
        sides.append(out)
    return sides[0], sides[1], k.astype(np.float64), (n - k).astype(np.float64)


def _statistics(
    a: dict[str, np.ndarray],
    b: dict[str, np.ndarray],
    n_a: np.ndarray,
    n_b: np.ndarray,
    total_n: np.ndarray,
    centre: np.ndarray | float,
    threshold: float,
    history: History | None = None,
) -> dict[str, np.ndarray]:
    """From each side's sums (calls, centred mean, Σe², lag-1 Σe·e, and optionally Σ S and Σ (c − 1)) to the test:
    ρ, t, Welch–Satterthwaite ν, the log ratio and its standard error (module docstring); with `history`, the
    statements that have it use the window's estimates combined with their history's (`_with_history`), and
    history_intervals says how many history intervals each test combined (0: the window alone)."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        mean_a = a["mean"] + centre
        mean_b = b["mean"] + centre
        # The sides are pooled on the relative scale (residuals over their side's level), as the test's variance is:
        # pooled in milliseconds, a side 300× slower would set the correlation alone, for the other side too.
        scale_a = np.where(mean_a > 0, 1.0 / mean_a**2, 0.0)
        scale_b = np.where(mean_b > 0, 1.0 / mean_b**2, 0.0)
        ee = a["ee"] * scale_a + b["ee"] * scale_b
        rho_hat = np.where(ee > 0, (a["acov"] * scale_a + b["acov"] * scale_b) / ee, 0.0)
        rho = _serial_correlation(rho_hat, total_n)
        inflation = (1 + rho) / (1 - rho)
        # The floor of each side's sandwich (module docstring, "A short side"): the pooled relative dispersion per call.
        pooled = ee / (a["calls"] + b["calls"])
        u, dof = [], []
        for sd, size, mean in ((a, n_a, mean_a), (b, n_b, mean_b)):
            # Demeaning a correlated series removes about `inflation` of its n degrees of freedom, not one.
            own = sd["ee"] / sd["calls"] ** 2
            floor = pooled / sd["calls"] * mean**2
            v_emp = size / np.maximum(size - inflation, 1.0) * np.fmax(own, floor) * inflation
            # ln V̂ carries ln f(ρ̂) as well as the sum of squares: Var ln f(ρ̂) ≈ 4 / ((1 − ρ²) n) (module docstring).
            dof_emp = np.maximum(size * (1 - rho) / (1 + rho) - 1, 1.0)
            dof_emp = np.maximum(2 / (2 / dof_emp + 4 / ((1 - rho**2) * total_n)), 1.0)
            if "ss" in sd:
                v_calls = sd["ss"] / sd["ss_dof"] / sd["calls"]
                use_calls = v_calls > v_emp  # False where v_calls is NaN (unknown or no call pairs)
                v = np.where(use_calls, v_calls, v_emp)
                d = np.where(use_calls, sd["ss_dof"], dof_emp)
            else:
                v, d = v_emp, dof_emp
            u.append(v / mean**2)
            dof.append(d)
        se2 = u[0] + u[1]
        nu = se2**2 / (u[0] ** 2 / dof[0] + u[1] ** 2 / dof[1])
        combined: np.ndarray | float = 0.0  # the history intervals the test combined with the window (0: none)
        if history is not None:
            use, h_se2, h_nu, h_rho = _with_history(a, b, n_a, n_b, total_n, mean_a, mean_b, ee, rho_hat, history)
            se2, nu, rho = np.where(use, h_se2, se2), np.where(use, h_nu, nu), np.where(use, h_rho, rho)
            combined = np.where(use, history.intervals, 0.0)
        log_ratio = np.log(mean_b) - np.log(mean_a)
        excess = log_ratio - np.log1p(threshold)
        t = excess / np.sqrt(se2)
    certain = se2 == 0
    t = np.where(certain, np.where(excess > 0, np.inf, np.where(excess < 0, -np.inf, np.nan)), t)
    nu = np.where(certain | ~np.isfinite(nu), np.where(certain, np.inf, 1.0), nu)
    valid = (mean_a > 0) & (mean_b > 0) & ~np.isnan(t) & (n_a >= 2) & (n_b >= 2)
    return {
        "t": t,
        "nu": nu,
        "rho": rho,
        "valid": valid,
        "mean_a": mean_a,
        "mean_b": mean_b,
        "log_ratio": log_ratio,
        "se": np.sqrt(se2),
        "history_intervals": np.broadcast_to(combined, t.shape),
    }


def _with_history(
    a: dict[str, np.ndarray],
    b: dict[str, np.ndarray],
    n_a: np.ndarray,
    n_b: np.ndarray,
    total_n: np.ndarray,
    mean_a: np.ndarray,
    mean_b: np.ndarray,
    ee: np.ndarray,
    rho_hat: np.ndarray,
    history: History,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The test's variance, degrees of freedom and ρ where the statement's own history is combined with the window
    (module docstring, "History"); and where it is used: statements with history whose window does not conflict with
    it. Called inside `_statistics`' error state."""
    from scipy import special

    n_h, kappa_h = history.intervals, history.dispersion
    rho_h = np.clip(history.rho, 0.0, RHO_MAX)  # the history's long-run reading, its margin already in (noise)
    f_h = (1 + rho_h) / (1 - rho_h)
    dof_h = np.maximum(n_h * (1 - rho_h) / (1 + rho_h) - 1, 0.0)
    # The window's relative per-call variance, from its intervals' own sums of squares where known (NaN otherwise):
    # the part of the history's dispersion that does not grow with an interval's calls.
    per_call = np.nan
    if "ss" in a:
        per_call = (a["ss"] / mean_a**2 + b["ss"] / mean_b**2) / (a["ss_dof"] + b["ss_dof"])

    def predicted(calls: np.ndarray, size: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """What the history predicts for a stretch of `size` intervals holding `calls`: its relative dispersion per
        call and its long-run variance inflation, scaled to the stretch's calls per interval (module docstring)."""
        ratio = calls / size / history.calls_per_interval
        ratio = np.where(np.isfinite(ratio) & (ratio > 0), ratio, 1.0)
        # Unknown per-call variance: the worse of all-overdispersion and all-per-call for this ratio.
        white = np.where(np.isfinite(per_call), np.clip(per_call, 0.0, kappa_h), np.where(ratio >= 1, 0.0, kappa_h))
        short = white + ratio * (kappa_h - white)
        long = white + ratio * (f_h * kappa_h - white)
        return short, np.clip(long / short, 1.0, INFLATION_MAX)

    rho_w = _bias_corrected(rho_hat, total_n)  # the window's own, as the window-only test reads it
    pooled = ee / (a["calls"] + b["calls"])
    own_terms: list[np.ndarray] = []
    own_dofs: list[np.ndarray] = []
    prior_coef: np.ndarray | float = 0.0
    calls_terms: np.ndarray | float = 0.0
    prior_dof = np.maximum(dof_h, 1.0)
    for sd, size, mean in ((a, n_a, mean_a), (b, n_b, mean_b)):
        kappa_side, inflation = predicted(sd["calls"], size)
        rho = (inflation - 1) / (inflation + 1)
        # The window's own relative variance of the side's mean, as the window-only test has it (floor included).
        own = np.fmax(sd["ee"] / sd["calls"] ** 2, pooled / sd["calls"] * mean**2) / mean**2
        own = size / np.maximum(size - inflation, 1.0) * own
        dof_own = np.maximum(size * (1 - rho) / (1 + rho) - 1, 1.0)
        # A side noisier than its history predicts for its calls (a rare huge call of a sparse, skewed statement)
        # keeps its own variance, which grows with that call, and its own degrees of freedom (self-normalisation).
        alone = _f_exceeds(own / (kappa_side / sd["calls"]), dof_own, prior_dof, SIDE_ALPHA)
        share = np.where(alone, 1.0, dof_own / (dof_own + dof_h))
        own_part, prior_part = inflation * share * own, inflation * (1 - share) * kappa_side / sd["calls"]
        if "ss" in sd:
            v_calls = sd["ss"] / sd["ss_dof"] / sd["calls"] / mean**2
            use_calls = v_calls > own_part + prior_part  # False where v_calls is NaN
            own_part = np.where(use_calls, v_calls, own_part)
            own_dofs.append(np.where(use_calls, sd["ss_dof"], dof_own))
            prior_part = np.where(use_calls, 0.0, prior_part)
            calls_terms = calls_terms + np.where(use_calls, v_calls, 0.0)
        else:
            own_dofs.append(dof_own)
        own_terms.append(own_part)
        prior_coef = prior_coef + prior_part
    se2 = own_terms[0] + own_terms[1] + prior_coef
    # Satterthwaite over the independent mean squares: each side's own, and the history's (one estimate, shared by
    # both sides, so its two coefficients add before squaring); then the uncertainty of ln f for the share of se² that
    # f scales, as in the window-only test but from the history's N intervals.
    spread = own_terms[0] ** 2 / own_dofs[0] + own_terms[1] ** 2 / own_dofs[1]
    spread = spread + np.where(dof_h > 0, prior_coef**2 / np.maximum(dof_h, 1e-300), 0.0)
    # The whole window's prediction, for its reported ρ, the uncertainty of ln f and the conflict checks.
    kappa_pred, inflation = predicted(a["calls"] + b["calls"], total_n)
    rho = (inflation - 1) / (inflation + 1)
    scaled = (se2 - calls_terms) / se2
    nu = 1 / (spread / se2**2 + 2 * scaled**2 / ((1 - rho_h**2) * n_h))
    # Prior–data conflict (Evans & Moshonov 2006): a window noisier or more correlated than its history allows for
    # its calls, at level `conflict_alpha`, is tested on its own, as without history.
    kappa_w = ee / (
        a["calls"] * np.maximum(n_a - inflation, 1.0) / n_a + b["calls"] * np.maximum(n_b - inflation, 1.0) / n_b
    )
    dof_w = np.maximum(total_n / inflation - 2, 1.0)
    noisier = _f_exceeds(kappa_w / kappa_pred, dof_w, prior_dof, history.conflict_alpha)
    z_rho = (rho_w - rho) / np.sqrt(np.maximum(1 - rho**2, 1e-12) * (1 / total_n + 1 / np.maximum(n_h, 1.0)))
    more_correlated = z_rho > special.ndtri(1 - history.conflict_alpha)
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


def _serial_correlation(rho_hat: np.ndarray, total_n: np.ndarray) -> np.ndarray:
    """The AR(1) coefficient the test uses from ρ̂, the pooled lag-1 autocorrelation of the residuals (module
    docstring, 3.): bias-corrected, RHO_MARGIN standard errors high, clipped to [0, RHO_MAX]."""
    rho_fixed = _bias_corrected(rho_hat, total_n)
    return np.clip(rho_fixed + RHO_MARGIN * np.sqrt(np.maximum(1 - rho_fixed**2, 0.0) / total_n), 0.0, RHO_MAX)


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
    w = np.where(inside, calls, 0.0)
    t0 = at[np.arange(rows), np.clip(k - 1, 0, length - 1)].astype(np.float64)
    t = np.where(inside, (at - t0[:, None]).astype(np.float64), 0.0)
    t = t / np.maximum(np.abs(t).max(axis=1), 1.0)[:, None]
    d = (col >= k[:, None]).astype(np.float64)
    x = np.where(inside, means, 0.0)
    ones = np.ones_like(t)
    before_mean, after_mean = _weighted_mean(w * (1 - d), x), _weighted_mean(w * d, x)

    coef = _weighted_lstsq(w, [ones, t, d], x)
    continuous_level = np.where(coef[:, 0] > 0, coef[:, 0], before_mean)
    before_line = _weighted_lstsq(w * (1 - d), [ones, t], x)[:, 0]
    after_line = _weighted_lstsq(w * d, [ones, t], x)[:, 0]
    with np.errstate(divide="ignore", invalid="ignore"):
        continuous = (continuous_level + coef[:, 2]) / continuous_level
        broken = np.where(after_line > 0, after_line, after_mean) / np.where(before_line > 0, before_line, before_mean)
    return np.fmax(continuous, broken)


def _weighted_mean(w: np.ndarray, x: np.ndarray) -> np.ndarray:
    return (w * x).sum(axis=1) / np.maximum(w.sum(axis=1), 1e-300)


def _weighted_lstsq(w: np.ndarray, columns: list[np.ndarray], x: np.ndarray) -> np.ndarray:
    """Per row, the coefficients c of x ≈ Σ c_j · columns[j], least squares weighted by w (a tiny ridge keeps a side
    whose times are all one solvable)."""
    gram = np.stack([np.stack([(w * u * v).sum(axis=1) for v in columns], axis=1) for u in columns], axis=1)
    rhs = np.stack([(w * u * x).sum(axis=1) for u in columns], axis=1)
    ridge = 1e-12 * np.maximum(np.trace(gram, axis1=1, axis2=2), 1e-300)
    gram += np.eye(len(columns))[None] * ridge[:, None, None]
    return np.linalg.solve(gram, rhs[:, :, None])[:, :, 0]
