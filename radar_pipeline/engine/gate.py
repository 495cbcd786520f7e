"""A deploy's state from its statements' verdicts: the gate's rule (docs/method.md, "The gate's rule").

`fail` when something is detected. Otherwise each statement the evidence could not clear may have added, beyond the
tolerance, at most T·(1 − (1 + θ)/u)⁺ of the execution time after the deploy, its excess: T its share of the execution
time after the deploy, u its upper bound (`factor_bound`; none: all of T). The deploy `pass`es when

- no open statement both may have added more than `max_open_excess` (1%) and may be slower than `gate_factor` (×1.4):
  a statement that could hide a material slowdown holds the deploy alone (a busy statement truly ×1.5 slower holding
  5% of the time does, unless its bound falls below its true factor: at most 1 − β of the time);
- and the other open statements did not, together, add more than `max_total_excess` (3%) beyond the tolerance:
  Σ T·(1 − (1 + θ)/f) at their deploy estimates f (each taken at least 1), plus z₀.₉₆ times the standard error of
  that sum (their estimates independent), plus the excess of those without an estimate.

`inconclusive` otherwise. A heavy statement whose bound lies between 1 + θ and `gate_factor` does not hold the deploy
alone (its row stays inconclusive); it counts in the sum at its estimate, without its noise (accepted by its bound).
radar.deploy_state (sql/) applies the same rule to the stored verdicts; this is the engine's copy for frames (the
canary's arm, the labs), held to the view by a test.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from radar_pipeline.engine.vocabulary import Tier, Verdict

MAX_OPEN_EXCESS = 0.01  # the share of the execution time after the deploy one open statement may add beyond θ
MAX_TOTAL_EXCESS = 0.03  # and every open statement that does not hold the deploy alone, together, jointly
# A statement whose bound reaches beyond this (and whose excess is over MAX_OPEN_EXCESS) holds the deploy alone; below
# ×1.5 so that a ×1.5 slowdown is held even where a wandering statement's bound covers less than its 96% (gate_sim)
GATE_FACTOR = 1.4
GATE_Z = 1.7506860712521692  # the joint sum's one-sided 96% quantile, the first look's clear level (engine.budget)
ESTIMATE_LIMIT = 50.0  # |log factor| and its error the joint sum takes; beyond (exp would overflow) the excess counts
PASS_SHARE = 0.9  # engine 2.6's rule (the cleared share a pass needed): still reported beside the new margin


@dataclass(frozen=True)
class GateState:
    """A deploy's state and its margins: `largest_excess`, the largest share of the execution time after the deploy
    one statement not cleared may have added beyond the tolerance, of those not bounded within gate_factor (a pass
    needs at most max_open_excess), and `open_excess`, the joint upper bound of what every open statement that does
    not hold the deploy alone added together beyond the tolerance (at most max_total_excess); `bounded`, the open
    statements whose excess is over max_open_excess but whose bound lies within gate_factor (they do not hold the
    deploy alone), `largest_bound` the largest of their bounds and `bounded_excess` the largest of their excesses;
    `cleared_share`, the share its cleared statements hold; `largest_open_share`, the largest share one statement left
    open holds; how many statements were detected, improved or probably slower."""

    state: str
    largest_excess: float
    open_excess: float
    cleared_share: float
    largest_open_share: float
    detected: int
    improved: int
    probably_slower: int
    bounded: int = 0
    largest_bound: float = float("nan")
    bounded_excess: float = 0.0


def tiers(verdict: np.ndarray, factor_low: np.ndarray, factor_bound: np.ndarray, threshold: float) -> np.ndarray:
    """Each verdict's tier (docs/method.md, "Tiers"), a statement's or a group's: `improved` where it is cleared with
    its upper bound below 1 / (1 + θ); `probably_slower` where it is inconclusive with its own 95% interval above
    1 + θ; None elsewhere."""
    out = np.full(len(verdict), None, dtype=object)
    with np.errstate(invalid="ignore"):
        out[(verdict == Verdict.NO_REGRESSION) & (factor_bound < 1 / (1 + threshold))] = Tier.IMPROVED.value
        out[(verdict == Verdict.INCONCLUSIVE) & (factor_low > 1 + threshold)] = Tier.PROBABLY_SLOWER.value
    return out


def open_excess(
    time: np.ndarray, verdict: np.ndarray, bound: np.ndarray, ran_before: np.ndarray, threshold: float
) -> np.ndarray:
    """Per statement, the execution time it may have added beyond the tolerance, at its upper bound: 0 when cleared
    or detected (a detection fails the deploy on its own) or new (no calls before the deploy: new load, which the
    impact reports, not a slowdown), T·(1 − (1 + θ)/u)⁺ when open, all of T without a bound."""
    with np.errstate(invalid="ignore", divide="ignore"):
        part = np.where(np.isfinite(bound) & (bound > 0), np.clip(1 - (1 + threshold) / bound, 0.0, 1.0), 1.0)
    open_ = (verdict != Verdict.NO_REGRESSION) & (verdict != Verdict.DETECTED) & ran_before
    return np.where(open_, time * part, 0.0)


def joint_excess(
    share: np.ndarray,
    excess: np.ndarray,
    members: np.ndarray,
    bounded: np.ndarray,
    log_factor: np.ndarray,
    log_se: np.ndarray,
    threshold: float,
    z: float = GATE_Z,
) -> float:
    """What the open statements `members` may have added together beyond the tolerance, as a share of the execution
    time after the deploy: Σ s·(1 − (1 + θ)/f) over those with a deploy estimate f = e^log_factor, each f taken at
    least 1 (netted: a statement within θ lends the others its tolerance, never what it got faster); plus z times the
    standard error of that sum over the members not `bounded` (Σ (s·(1 + θ)·se/f)², the statements' estimates
    independent; a statement bounded within the gate factor has had its own noise accepted, its estimate still counts);
    plus the excess of those without an estimate."""
    with np.errstate(invalid="ignore"):
        estimated = members & (np.abs(log_factor) <= ESTIMATE_LIMIT) & (log_se >= 0) & (log_se <= ESTIMATE_LIMIT)
        factor = np.maximum(np.exp(np.where(estimated, log_factor, 0.0)), 1.0)
        point = float((share * (1 - (1 + threshold) / factor))[estimated].sum())
        noise = (share * (1 + threshold) * log_se / factor)[estimated & ~bounded]
        margin = z * float(np.sqrt((noise**2).sum()))
    return max(0.0, point + margin) + float(excess[members & ~estimated].sum())


def deploy_state(
    verdicts: pd.DataFrame,
    threshold: float = 0.2,
    max_open_excess: float = MAX_OPEN_EXCESS,
    max_total_excess: float = MAX_TOTAL_EXCESS,
    gate_factor: float = GATE_FACTOR,
) -> GateState:
    """The state of a deploy from analyse()'s result (or any frame with verdict, calls_after, mean_after_ms,
    factor_bound and optionally calls_before, tier, deploy_log_factor and deploy_log_se; without the last two every
    open statement counts its excess in the sum): each statement weighs its execution time after the deploy.
    threshold: θ."""
    verdict = verdicts["verdict"].to_numpy()
    time = verdicts["calls_after"].to_numpy(np.float64) * verdicts["mean_after_ms"].to_numpy(np.float64)
    time = np.where(np.isfinite(time) & (time > 0), time, 0.0)
    whole = time.sum()
    bound = verdicts["factor_bound"].to_numpy(np.float64)
    tier = verdicts["tier"].to_numpy() if "tier" in verdicts else np.full(len(verdicts), None, dtype=object)
    detected = int((verdict == Verdict.DETECTED).sum())
    share = time / whole if whole > 0 else np.zeros_like(time)
    ran_before = verdicts["calls_before"].to_numpy(np.float64) > 0 if "calls_before" in verdicts else verdict != ""
    # (T · part) / ΣT, in the order radar.deploy_state computes it, so the two agree at the bar itself
    excess = open_excess(time, verdict, bound, ran_before, threshold) / whole if whole > 0 else np.zeros_like(time)
    over = excess > max_open_excess
    within = over & np.isfinite(bound) & (bound > 0) & (bound <= gate_factor)
    holding = over & ~within
    nan = np.full(len(verdicts), np.nan)
    log_factor = verdicts["deploy_log_factor"].to_numpy(np.float64) if "deploy_log_factor" in verdicts else nan
    log_se = verdicts["deploy_log_se"].to_numpy(np.float64) if "deploy_log_se" in verdicts else nan
    undecided = (verdict != Verdict.NO_REGRESSION) & (verdict != Verdict.DETECTED)
    joint = joint_excess(share, excess, undecided & ran_before & ~holding, within, log_factor, log_se, threshold)
    largest = float(excess[~within].max(initial=0.0))
    open_ = share[undecided]
    if detected:
        state = "fail"
    elif whole > 0 and not holding.any() and joint <= max_total_excess:
        state = "pass"
    else:
        state = "inconclusive"
    return GateState(
        state=state,
        largest_excess=largest,
        open_excess=joint,
        cleared_share=float(share[verdict == Verdict.NO_REGRESSION].sum()),
        largest_open_share=float(open_.max()) if len(open_) else 0.0,
        detected=detected,
        improved=int((tier == Tier.IMPROVED).sum()),
        probably_slower=int((tier == Tier.PROBABLY_SLOWER).sum()),
        bounded=int(within.sum()),
        largest_bound=float(bound[within].max()) if within.any() else float("nan"),
        bounded_excess=float(excess[within].max(initial=0.0)),
    )
