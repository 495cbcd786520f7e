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
   the other's does not set the correlation of both) is corrected for its small-sample bias, E[ρ̂] ≈ ρ − (1 + 3ρ)/n
   (Kendall 1954), raised by one standard error sqrt((1 − ρ²)/n) (Bartlett 1946) because the splits where a test errs
   are those where the residuals about two side means understate the correlation, clipped to [0, RHO_MAX], and turned
   into the AR(1) variance inflation f = (1 + ρ)/(1 − ρ) and an effective sample size n_eff = n/f (Bayley &
   Hammersley 1946; Zwiers & von Storch 1995 show the plain t-test's level failing without it). Demeaning a
   correlated side removes about f of its n degrees of freedom, not one, so V_emp uses n/(n − f) in place of
   n/(n − 1). A kernel (Newey–West 1987) estimator with the few lags a 30-point side allows cannot reach the
   inflation of ρ = 0.8 (9×); the AR(1) model can.

V = max(V_emp · inflation, V_calls): the per-call term is a floor that keeps a side with few, busy intervals from
looking more precise than its calls allow. The reference distribution is Student's t with Welch–Satterthwaite
degrees of freedom built from each side's effective size (the sandwich's n_eff − 1, or Σ (c_i − 1) where the
per-call term dominates).

Selection. The split is not fixed: it is chosen among the K candidate splits the caller allows (the decision's:
at or after the deploy, within the tolerance), where t is largest. A test at the maximising split is not a test at a
fixed one; the Bonferroni bound p = min(1, K · p_k̂) is valid whatever the selection rule and the dependence between
the K tests (and conservative, since neighbouring splits are strongly correlated). The chosen split's figures are then
recomputed in two passes, so the prefix sums of the scan cost no precision in what is reported.

Numerical care. Times are centred on each statement's overall mean before the scan's prefix sums, so Σ e_i² does not
come out of a difference of two large sums. Both sides of zero variance (a deterministic step) give t = ±∞ and p = 0
or 1, and an interval of zero width.

The interval. exp(ln μ̂_B − ln μ̂_A ± t_{ν, 0.975} · se): a 95% interval of the slowdown factor at the tested split,
per statement, not adjusted for the choice of split or for the family.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

RHO_MAX = 0.9  # inflation at most 19×: beyond it a 30-interval side holds about one independent observation
CI_LEVEL = 0.95
# Standard errors added to ρ; at 0.5, benchmarks/calibration_check.py found 3.4× the level at 10⁻³ for φ > 0.6.
RHO_MARGIN = 1.0


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
) -> SplitTest:
    """The call-level test (module docstring) of every row at every candidate split; the best one per row.

    calls, time: [rows, L] per-interval ΔC and ΔT, left-aligned (zeros past n[row]); sumsq: the intervals' per-call
    sums of squares (NaN where unknown) or None; candidate: [rows, L + 1] boolean, the splits k (A = first k
    intervals) to test. Rows with no candidate get p = 1 and NaN elsewhere.
    """
    from scipy import stats

    rows, length = calls.shape
    c = np.asarray(calls, dtype=np.float64)
    # Centre the times on each row's overall mean so the residual sums below do not cancel catastrophically.
    total_c = c.sum(axis=1)
    centre = np.where(total_c > 0, time.sum(axis=1) / np.where(total_c > 0, total_c, 1.0), 0.0)
    tc = np.asarray(time, dtype=np.float64) - centre[:, None] * c
    # Only the splits between the block's first and last candidate are evaluated: prefix sums up to k (side A) and
    # totals minus them (side B), for k in [lo, hi).
    cols = np.flatnonzero(candidate.any(axis=0))
    lo, hi = (int(cols[0]), int(cols[-1]) + 1) if len(cols) else (0, 1)
    ks = np.arange(lo, hi)

    def split_sums(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Σ over [0, k) and over [k, n) of a [rows, L] array (zeros past n), for every k in [lo, hi)."""
        prefix = _prefix(values[:, : max(hi - 1, 0)])[:, lo:hi]
        return prefix, values.sum(axis=1)[:, None] - prefix

    def lag_sums(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Σ over the neighbour pairs (i, i + 1) inside [0, k) (i ≤ k − 2) and inside [k, n) (i ≥ k)."""
        prefix = _prefix(values)  # prefix[:, j] = Σ_{i < j}
        before = prefix[:, np.maximum(ks - 1, 0)]
        return before, values.sum(axis=1)[:, None] - prefix[:, np.minimum(ks, values.shape[1])]

    # Lag-1 cross products of neighbouring intervals, for the autocovariance of the residuals.
    sums = {
        "c": split_sums(c),
        "t": split_sums(tc),
        "tt": split_sums(tc * tc),
        "tc": split_sums(tc * c),
        "cc": split_sums(c * c),
        "lag_tt": lag_sums(tc[:, :-1] * tc[:, 1:]),
        "lag_tc": lag_sums(tc[:, :-1] * c[:, 1:] + c[:, :-1] * tc[:, 1:]),
        "lag_cc": lag_sums(c[:, :-1] * c[:, 1:]),
    }
    if sumsq is not None:
        sums["unknown"] = split_sums((np.isnan(sumsq) & (c > 0)).astype(np.float64))
        sums["ss"] = split_sums(np.nan_to_num(sumsq, nan=0.0))
        sums["ss_dof"] = split_sums(np.maximum(c - 1, 0.0))

    def side(i: int) -> dict[str, np.ndarray]:
        got = {key: v[i] for key, v in sums.items()}
        with np.errstate(divide="ignore", invalid="ignore"):
            mu = got["t"] / got["c"]  # centred pooled mean (NaN for an empty side, which is never a candidate)
            ee = got["tt"] - 2 * mu * got["tc"] + mu * mu * got["cc"]
            acov = got["lag_tt"] - mu * got["lag_tc"] + mu * mu * got["lag_cc"]
        out = {"calls": got["c"], "mean": mu, "ee": np.maximum(ee, 0.0), "acov": acov}
        if sumsq is not None:
            out["ss"] = np.where(got["unknown"] > 0, np.nan, got["ss"])
            out["ss_dof"] = got["ss_dof"]
        return out

    a, b = side(0), side(1)
    total_n = n[:, None].astype(np.float64)
    n_a = np.broadcast_to(np.arange(lo, hi)[None, :], (rows, hi - lo)).astype(np.float64)
    scan = _statistics(a, b, n_a, n[:, None] - n_a, total_n, centre[:, None], threshold)
    valid = candidate[:, lo:hi] & scan["valid"]
    splits = candidate.sum(axis=1)
    # The largest t is the split tested (any rule may choose it: the Bonferroni bound below holds for all of them).
    k = lo + np.argmax(np.where(valid, np.maximum(scan["t"], -np.finfo(np.float64).max), -np.inf), axis=1)
    tested = valid.any(axis=1)
    k = np.where(tested, k, 0)

    # The prefix sums chose the split; its figures are recomputed in two passes (residuals about each side's own
    # mean), which keeps full precision when the two sides' levels lie orders of magnitude apart.
    exact = _statistics(
        *_side_sums_at(c, np.asarray(time, dtype=np.float64), sumsq, n, k), n.astype(np.float64), 0.0, threshold
    )
    valid_k = tested & exact["valid"]
    pick = lambda m: np.where(valid_k, m, np.nan)  # noqa: E731
    nu_k = pick(exact["nu"])
    p_k = stats.t.sf(np.where(valid_k, exact["t"], 0.0), np.where(valid_k, nu_k, 1.0))
    p = np.where(valid_k, np.minimum(1.0, splits * p_k), 1.0)
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
    )


def interval_from_sums(
    a: dict[str, np.ndarray], b: dict[str, np.ndarray], n_a: np.ndarray, n_b: np.ndarray, threshold: float
) -> tuple[np.ndarray, np.ndarray]:
    """The 95% interval of the slowdown factor at one fixed split per row, from each side's sums (calls, mean, Σe²
    about the side's mean, lag-1 Σe·e, and optionally Σ S, Σ (c − 1)), with the same variance as the test: for
    statements that stop before the test, so their verdict carries an interval too. NaN where it is undefined."""
    from scipy import stats

    n_a = n_a.astype(np.float64)
    n_b = n_b.astype(np.float64)
    exact = _statistics(a, b, n_a, n_b, n_a + n_b, 0.0, threshold)
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
) -> dict[str, np.ndarray]:
    """From each side's sums (calls, centred mean, Σe², lag-1 Σe·e, and optionally Σ S and Σ (c − 1)) to the test:
    ρ, t, Welch–Satterthwaite ν, the log ratio and its standard error (module docstring)."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        mean_a = a["mean"] + centre
        mean_b = b["mean"] + centre
        # The sides are pooled on the relative scale (residuals over their side's level), as the test's variance is:
        # pooled in milliseconds, a side 300× slower would set the correlation alone, for the other side too.
        scale_a = np.where(mean_a > 0, 1.0 / mean_a**2, 0.0)
        scale_b = np.where(mean_b > 0, 1.0 / mean_b**2, 0.0)
        ee = a["ee"] * scale_a + b["ee"] * scale_b
        rho_hat = np.where(ee > 0, (a["acov"] * scale_a + b["acov"] * scale_b) / ee, 0.0)
        rho_fixed = rho_hat + (1 + 3 * rho_hat) / total_n
        rho = np.clip(rho_fixed + RHO_MARGIN * np.sqrt(np.maximum(1 - rho_fixed**2, 0.0) / total_n), 0.0, RHO_MAX)
        inflation = (1 + rho) / (1 - rho)
        u, dof = [], []
        for sd, size, mean in ((a, n_a, mean_a), (b, n_b, mean_b)):
            # Demeaning a correlated series removes about `inflation` of its n degrees of freedom, not one.
            v_emp = size / np.maximum(size - inflation, 1.0) * sd["ee"] / sd["calls"] ** 2 * inflation
            dof_emp = np.maximum(size * (1 - rho) / (1 + rho) - 1, 1.0)
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
        log_ratio = np.log(mean_b) - np.log(mean_a)
        excess = log_ratio - np.log1p(threshold)
        t = excess / np.sqrt(se2)
        nu = se2**2 / (u[0] ** 2 / dof[0] + u[1] ** 2 / dof[1])
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
    }


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
