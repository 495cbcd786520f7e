"""A release's fleet verdict: one statement key's per-target evidence combined across the targets a release went to.

Each target's analysis gives, per statement, the log factor y_i at the deploy's own split and its standard error s_i
(decision.analyse: deploy_log_factor, deploy_log_se; the same variance as the target's own test, at no chosen split,
so without selection bias). Per statement key seen on at least MIN_TARGETS targets:

- a random-effects model y_i ~ N(μ, s_i² + τ²): τ² by Paule & Mandel (1982), the value at which the generalised Q
  statistic Σ w_i (y_i − μ̂)², w_i = 1/(s_i² + τ²), equals its expectation k − 1 (0 when Q(0) ≤ k − 1);
- μ̂ = Σ w_i y_i / Σ w_i, with the Hartung–Knapp–Sidik–Jonkman variance q / Σ w_i, q = Q(τ̂²) / (k − 1), and
  t_{k−1} quantiles (Hartung & Knapp 2001; Sidik & Jonkman 2002; IntHout, Ioannidis & Borm 2014): exact for known
  s_i when τ² = 0, and close to its level for few targets with heterogeneity, where the usual z-interval
  (DerSimonian–Laird) is far too narrow. q also rescales the s_i when they are all mis-estimated by a common factor;
- HKSJ alone is far above its level in the tails a family budget uses when the targets' standard errors differ
  widely and τ² > 0 (τ̂² then often too small, and one precise target carries the mean: measured, 7–9× its level
  at 5·10⁻⁴ with standard errors spread 25-fold; Jackson, Law, Rücker & Schwarzer 2017 note the same), so the
  mean's variance is also estimated robustly: the CR2 sandwich Σ w_i² e_i² / (1 − h_i) / (Σ w_i)² with Satterthwaite
  degrees of freedom (Bell & McCaffrey 2002; Hedges, Tipton & Johnson 2010; Tipton 2015), valid whatever the true
  variances, conservative when one target dominates. The test takes the larger p of the two, and the interval the
  wider margin: valid whenever either is;
- H0: the fleet's factor exp(μ) ≤ 1 + θ, one-sided: t = (μ̂ − ln(1 + θ)) / se, p = P(t_ν ≥ t) (the larger of the
  two); its 95% interval exp(μ̂ ± margin), the wider of t_{k−1, 0.975} · se_HKSJ and t_{ν, 0.975} · se_CR2;
- the budget: B per release (expected false fleet detections per release, over its statement keys), weighted
  Bonferroni over the release's keys with the weights of a single analysis (decision.family_weights: a uniform part
  and a part by execution time before the deploy, summed over the targets: nothing of the after side), spent across
  looks with engine.budget's schedule: look k may spend look_budget(B, k) (the first fleet verdict: k = 0). A later
  look tests only the keys still open, each at look_budget(B, k) times its share of the family fixed when the family
  was formed (`shares`): never renormalised over the open keys, so Σ over the looks and keys stays within B;
- cleared (no_regression) when the one-sided upper bound at the look's clear level (engine.budget.look_clear_level)
  lies within 1 + θ · dilution (the tolerance around the deploy, engine.budget.clear_dilution), else inconclusive;
- heterogeneity: Cochran's Q at the fixed-effect weights, its χ²_{k−1} p and I² (Higgins & Thompson 2002). With
  p ≥ HETEROGENEITY_ALPHA the targets agree: "×1.4 on 8 of 8 targets" (the targets combined, of the release's; and
  stored apart, targets_agreeing: those whose own 95% interval holds the fleet's factor). Otherwise the targets
  slower than the rest — each against the others' fixed-effect mean, at a Bonferroni level over the targets — are
  named: "only on shard-3".

A regression on one target is its own verdict's to find (unchanged); the fleet verdict says where it is.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from radar_pipeline.engine.budget import look_budget, look_clear_level
from radar_pipeline.engine.decision import family_weights
from radar_pipeline.engine.fdr import bonferroni
from radar_pipeline.engine.frames import FLEET_EVIDENCE, FLEET_FRAME
from radar_pipeline.engine.vocabulary import Verdict

MIN_TARGETS = 2  # a fleet verdict needs a statement key's evidence on at least this many targets
# ... and at least this many to be detected: with two, the between-target variance rests on one degree of freedom and
# the robust variance equals HKSJ's (both w₁w₂d²/W²); simulated at H0's boundary with unequal standard errors, the
# test ran 1.26–1.47× its level. A key on two targets (a primary and its replica) is shown, never detected.
MIN_DETECTING = 3
HETEROGENEITY_ALPHA = 0.05  # Cochran's Q below this level: the targets differ, and the slower ones are named
CI_LEVEL = 0.95
PM_ITERATIONS = 100  # bisection steps of Paule–Mandel's τ² (on a bracket that doubles until it holds the root)
# The evidence a fleet verdict takes: one row per (statement key, target).
EVIDENCE_COLUMNS = tuple(FLEET_EVIDENCE.names)  # fleet_verdicts' evidence (engine/frames.py declares their dtypes)
RESULT_COLUMNS = tuple(FLEET_FRAME.names)  # fleet_verdicts' result, in order (engine/frames.py declares their dtypes)
FLEET_VERDICTS = (Verdict.DETECTED.value, Verdict.NO_REGRESSION.value, Verdict.INCONCLUSIVE.value)


class FleetError(ValueError):
    """Evidence a fleet verdict cannot be made from (named in the message)."""


@dataclass(frozen=True)
class Combined:
    """Per key (arrays aligned with the keys): the random-effects mean of the log factor, its HKSJ standard error
    and degrees of freedom (k − 1), its robust (CR2) standard error and Satterthwaite degrees of freedom,
    Paule–Mandel's τ², Cochran's Q at the fixed-effect weights, its p and I², and the number of targets k."""

    mean: np.ndarray
    se: np.ndarray
    dof: np.ndarray
    robust_se: np.ndarray
    robust_dof: np.ndarray
    tau2: np.ndarray
    q: np.ndarray
    q_p: np.ndarray
    i2: np.ndarray
    k: np.ndarray


def combine(y: np.ndarray, s: np.ndarray) -> Combined:
    """The random-effects combination (module docstring) of [keys, targets] log factors `y` and standard errors
    `s`, NaN where a key has no evidence on a target (each key needs at least two targets with s > 0)."""
    from scipy import stats

    y = np.asarray(y, dtype=np.float64)
    s = np.asarray(s, dtype=np.float64)
    present = np.isfinite(y) & np.isfinite(s) & (s > 0)
    k = present.sum(axis=1)
    if (k < MIN_TARGETS).any():
        raise FleetError(f"every key needs evidence on at least {MIN_TARGETS} targets")
    y0 = np.where(present, y, 0.0)
    v = np.where(present, s * s, np.inf)

    def generalised_q(tau2: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        w = np.where(present, 1.0 / (v + tau2[:, None]), 0.0)
        mean = (w * y0).sum(axis=1) / w.sum(axis=1)
        return (w * (y0 - mean[:, None]) ** 2).sum(axis=1), mean, w

    target = k - 1.0
    q0, _, w0 = generalised_q(np.zeros(len(y)))
    tau2 = np.zeros(len(y))
    open_ = q0 > target
    if open_.any():
        spread = np.where(present, (y0 - np.nanmean(np.where(present, y, np.nan), axis=1)[:, None]) ** 2, 0.0)
        hi = np.maximum(spread.sum(axis=1) / np.maximum(target, 1.0), 1e-12)
        while True:  # Q(τ²) decreases in τ²: widen until Q(hi) ≤ k − 1
            above = open_ & (generalised_q(hi)[0] > target)
            if not above.any():
                break
            hi = np.where(above, hi * 2, hi)
        lo = np.zeros(len(y))
        for _ in range(PM_ITERATIONS):
            mid = (lo + hi) / 2
            big = generalised_q(mid)[0] > target
            lo, hi = np.where(big, mid, lo), np.where(big, hi, mid)
        tau2 = np.where(open_, (lo + hi) / 2, 0.0)
    q_re, mean, w = generalised_q(tau2)
    scale = q_re / target  # HKSJ's q (= 1 at Paule–Mandel's τ̂² > 0)
    se = np.sqrt(scale / w.sum(axis=1))
    robust_se, robust_dof = _robust(y0, w, mean, present)
    with np.errstate(divide="ignore", invalid="ignore"):
        i2 = np.where(q0 > target, (q0 - target) / q0, 0.0)
    return Combined(
        mean=mean,
        se=se,
        dof=target,
        robust_se=robust_se,
        robust_dof=robust_dof,
        tau2=tau2,
        q=q0,
        q_p=stats.chi2.sf(q0, target),
        i2=i2,
        k=k,
    )


def _robust(y: np.ndarray, w: np.ndarray, mean: np.ndarray, present: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The weighted mean's robust variance with the CR2 small-sample correction and its Satterthwaite degrees of
    freedom under the working model Var y_i = 1/w_i (Bell & McCaffrey 2002; Hedges, Tipton & Johnson 2010;
    Tipton 2015): V = Σ w_i² e_i² / (1 − h_i) / W², h_i = w_i / W, unbiased under the working model and valid
    whatever the true variances; ν = tr(AΣ)² / tr(AΣAΣ) for V = eᵀAe, Σ = Cov e = diag(1/w) − 11ᵀ/W."""
    total = w.sum(axis=1)
    h = w / total[:, None]
    e = np.where(present, y - mean[:, None], 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        a = np.where(present, w * w / ((1 - h) * total[:, None] ** 2), 0.0)
        inverse = np.where(present, 1.0 / np.where(present, w, 1.0), 0.0)
    variance = (a * e * e).sum(axis=1)
    # AΣ = diag(d) − u pᵀ with d = a / w, u = a / W and p the targets present: its traces in O(k), not O(k²) memory.
    d = a * inverse
    u = a / total[:, None]
    up = (u * present).sum(axis=1)
    first = d.sum(axis=1) - up
    second = (d * d).sum(axis=1) - 2 * (d * u * present).sum(axis=1) + up * up
    with np.errstate(divide="ignore", invalid="ignore"):
        dof = np.where(second > 0, first * first / second, 1.0)
    return np.sqrt(variance), np.maximum(dof, 1.0)


def fleet_verdicts(
    evidence: pd.DataFrame,
    threshold: float,
    budget: float,
    look: int = 0,
    time_weight: float = 0.5,
    clear_level: float = 0.95,
    noun: str = "targets",
    fleet_size: int | None = None,
    shares: pd.Series | None = None,
    dilution: float = 1.0,
) -> pd.DataFrame:
    """The fleet verdict of every statement key of one release that has evidence on at least MIN_TARGETS targets.

    evidence: EVIDENCE_COLUMNS, one row per (key, target): key (any hashable: the statement's identity across
    servers), target (its name), log_factor and se (the target's deploy_log_factor and deploy_log_se), time_before
    (ms of execution before the deploy, for the budget's weights). Rows without a finite log_factor or a positive se
    are left out (the target could not decide the statement). threshold: θ; budget: B per release; look: which of
    engine.budget's looks this verdict spends (look_budget(B, look)); noun: what the report calls the targets;
    fleet_size: how many targets the release went to (default: those in the evidence). A consistent key is reported
    "×1.40 on 8 of 8 targets": the targets combined, of the fleet. shares: at a later look, each open key's share of
    the release's whole family (indexed by key, fixed when the family was formed, Σ over the family = 1): the keys
    given are tested at look_budget(B, look) · share, a key without a share is left out, and nothing is renormalised
    over the keys still open (a decided key's share is not handed on); default: the family is the keys given, their
    shares decision.family_weights'. clear_level: β for the release's looks together; look k clears at
    engine.budget.look_clear_level(β, k). dilution: engine.budget.clear_dilution of the look's spans: the evidence
    is taken at the deploy's split, so a key clears only within 1 + θ · dilution (a change beginning within the
    tolerance after the deploy shows only that much of a slowdown by 1 + θ there).
    Returns one row per key: key, targets, factor, factor_low, factor_high, p_value, p_family, budget_share,
    family_weight (the key's share of the family), verdict (FLEET_VERDICTS), consistent, heterogeneity_p, i_squared,
    tau2, targets_agreeing, only_on (target names), report, and the evidence's targets in order (members).
    """
    from scipy import stats

    missing = [c for c in EVIDENCE_COLUMNS if c not in evidence.columns]
    if missing:
        raise FleetError(f"fleet evidence lacks column(s) {', '.join(missing)}")
    if not 0 < budget <= 1:
        raise FleetError(f"the fleet budget must lie in (0, 1], not {budget}")
    if evidence.duplicated(["key", "target"]).any():
        raise FleetError("fleet evidence has a key twice on one target: one row per (key, target)")
    spend = look_budget(budget, look)
    try:
        log_factor, se = (evidence[c].to_numpy(dtype=np.float64, na_value=np.nan) for c in ("log_factor", "se"))
    except (TypeError, ValueError):
        raise FleetError("fleet evidence: log_factor and se must be numeric") from None
    with np.errstate(invalid="ignore"):
        usable = evidence[np.isfinite(log_factor) & np.isfinite(se) & (se > 0)]
    if shares is not None:
        if not np.isfinite(shares.to_numpy(dtype=np.float64)).all() or (shares < 0).any() or shares.sum() > 1 + 1e-9:
            raise FleetError("fleet shares must be finite, non-negative and sum to at most 1 over the family")
        share_of = dict(zip(shares.index.tolist(), shares.to_numpy(dtype=np.float64), strict=True))
        usable = usable[[k in share_of for k in usable["key"]]]
    counts = usable.groupby("key", sort=False)["target"].count()
    keys: list[Hashable] = list(counts.index[counts >= MIN_TARGETS])
    if not keys:
        return pd.DataFrame(columns=list(RESULT_COLUMNS))
    usable = usable[usable["key"].isin(keys)]
    targets = sorted(usable["target"].unique())
    row = pd.Index(keys).get_indexer(usable["key"])
    col = pd.Index(targets).get_indexer(usable["target"])
    shape = (len(keys), len(targets))
    y, s, before = np.full(shape, np.nan), np.full(shape, np.nan), np.zeros(shape)
    y[row, col] = usable["log_factor"].to_numpy(dtype=np.float64)
    s[row, col] = usable["se"].to_numpy(dtype=np.float64)
    before[row, col] = np.nan_to_num(usable["time_before"].to_numpy(dtype=float), nan=0.0)
    got = combine(y, s)

    if shares is None:
        weight = family_weights(before.sum(axis=1), np.ones(len(keys), dtype=bool), time_weight)
    else:
        weight = np.array([share_of[k] for k in keys], dtype=np.float64)
    log_tol = np.log1p(threshold)
    # The test and the interval take the more cautious of HKSJ and the robust variance (module docstring).
    p = np.fmax(_t_sf(got.mean - log_tol, got.se, got.dof), _t_sf(got.mean - log_tol, got.robust_se, got.robust_dof))
    detected, p_family = bonferroni(p, weight, spend)
    detected &= got.k >= MIN_DETECTING

    def margin(level: float) -> np.ndarray:
        return np.fmax(stats.t.ppf(level, got.dof) * got.se, stats.t.ppf(level, got.robust_dof) * got.robust_se)

    half = margin(0.5 + CI_LEVEL / 2)
    upper = got.mean + margin(look_clear_level(clear_level, look))
    cleared = upper <= np.log1p(threshold * dilution)
    verdict = np.where(
        detected, Verdict.DETECTED.value, np.where(cleared, Verdict.NO_REGRESSION.value, Verdict.INCONCLUSIVE.value)
    )
    consistent = got.q_p >= HETEROGENEITY_ALPHA
    z = stats.norm.ppf(0.5 + CI_LEVEL / 2)
    agreeing = ((np.abs(y - got.mean[:, None]) <= z * s) & np.isfinite(y)).sum(axis=1)
    slower = _slower_targets(y, s, got.k)

    size = fleet_size if fleet_size is not None else evidence["target"].nunique()
    only_on: list[list[str]] = []
    report: list[str] = []
    for i in range(len(keys)):
        names = [targets[j] for j in np.flatnonzero(slower[i])]
        factor = float(np.exp(got.mean[i]))
        if consistent[i]:
            only_on.append([])
            report.append(f"×{factor:.2f} on {got.k[i]} of {size} {noun}")
        elif names:
            only_on.append(names)
            there = ", ".join(f"{n} ×{np.exp(y[i, targets.index(n)]):.2f}" for n in names)
            report.append(f"only on {there} (×{factor:.2f} across {got.k[i]} {noun}, I² {got.i2[i]:.0%})")
        else:
            only_on.append([])
            report.append(f"×{factor:.2f} on average, varying between {got.k[i]} {noun} (I² {got.i2[i]:.0%})")
    members = [[targets[j] for j in np.flatnonzero(np.isfinite(y[i]))] for i in range(len(keys))]
    out = pd.DataFrame(
        {
            "key": keys,
            "targets": got.k.astype(np.int64),
            "factor": np.exp(got.mean),
            "factor_low": np.exp(got.mean - half),
            "factor_high": np.exp(got.mean + half),
            "p_value": p,
            "p_family": p_family,
            "budget_share": spend * weight,
            "family_weight": weight,
            "verdict": verdict,
            "consistent": consistent,
            "heterogeneity_p": got.q_p,
            "i_squared": got.i2,
            "tau2": got.tau2,
            "targets_agreeing": agreeing.astype(np.int64),
            "only_on": only_on,
            "report": report,
            "members": members,
        }
    )
    return FLEET_FRAME.check(out, "fleet_verdicts")


def _t_sf(excess: np.ndarray, se: np.ndarray, dof: np.ndarray) -> np.ndarray:
    """P(t_dof ≥ excess / se), with se = 0 read as certainty (0 or 1 by the sign of the excess)."""
    from scipy import stats

    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(se > 0, excess / np.where(se > 0, se, 1.0), np.where(excess > 0, np.inf, -np.inf))
    return stats.t.sf(t, dof)


def _slower_targets(y: np.ndarray, s: np.ndarray, k: np.ndarray) -> np.ndarray:
    """[keys, targets]: the targets slower than the others' fixed-effect mean, one-sided, each at a Bonferroni level
    over the key's targets (HETEROGENEITY_ALPHA / k): its leave-one-out standardised residual."""
    from scipy import stats

    present = np.isfinite(y) & np.isfinite(s) & (s > 0)
    w = np.where(present, 1.0 / np.where(present, s * s, 1.0), 0.0)
    wy = np.where(present, w * np.nan_to_num(y), 0.0)
    w_rest = w.sum(axis=1)[:, None] - w
    with np.errstate(divide="ignore", invalid="ignore"):
        mean_rest = (wy.sum(axis=1)[:, None] - wy) / w_rest
        z = (y - mean_rest) / np.sqrt(s * s + 1.0 / w_rest)
    critical = stats.norm.isf(HETEROGENEITY_ALPHA / k)[:, None]
    return present & (w_rest > 0) & (z > critical)
