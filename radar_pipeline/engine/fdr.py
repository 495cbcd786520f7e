"""The family's decision (issue 29): a weighted Benjamini–Hochberg step-up over the statements' budget shares, at the
level that spends the false-alert budget B as expected false detections when nothing changed.

Shares w_i (Σ ≤ 1 over the whole family, 0 for a statement given none) turn each p into q_i = p_i / w_i; the
step-up rejects the k* smallest q, k* the largest k with q_(k) ≤ α · k (Genovese, Roeder & Wasserman 2006; with
equal shares Benjamini & Hochberg 1995). At k = 1 that is weighted Bonferroni at α; every further rejection raises
everyone's level by α · w_i, so a deploy that slowed many statements pays for each far less than for one alone.

The level α. B (`false_alert_budget`) is the expected number of false detections per analysis with nothing
changed. The step-up controls P(any) = FDR ≤ α · Σ w_i there, but once it rejects one null it rejects others more
easily: with independent statistics all on H0's boundary the number rejected has mean α / (1 − α)² for a large family
(Finner & Roters 2002; smaller for a small one: α for one statement). So the step-up runs at α(B), the root of
α / (1 − α)² = B (0.0839 for B = 0.1), and spends E[false detections] ≈ B with P(any) ≈ 0.084 at the boundary.

A statement's adjusted p is ã_i = min over q_(j) ≥ q_i of q_(j) / j (capped at 1): it is rejected iff ã_i ≤ α.
Its p_family is the smallest budget at which it would be detected, ã / (1 − ã)² (capped at 1): detected iff
p_family ≤ B, as under Bonferroni, and p / w at k = 1 for a small p.
"""

from __future__ import annotations

import numpy as np


def level(budget: float) -> float:
    """α(B): the step-up's level whose expected false detections with every statement on H0's boundary is B
    (the root in (0, 1) of α / (1 − α)² = B)."""
    if not 0 < budget < 1:
        raise ValueError(f"a false-alert budget must lie strictly between 0 and 1, not {budget}")
    b = 2 * budget + 1
    return float((b - np.sqrt(b * b - 4 * budget * budget)) / (2 * budget))


def budget_of(adjusted: np.ndarray) -> np.ndarray:
    """The smallest budget B whose level α(B) reaches each adjusted p: ã / (1 − ã)², capped at 1 (NaN stays)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        spent = adjusted / (1 - adjusted) ** 2
    return np.where(np.isnan(adjusted), np.nan, np.where(adjusted < 1, np.minimum(spent, 1.0), 1.0))


def adjusted_p(p: np.ndarray, shares: np.ndarray) -> np.ndarray:
    """Each statement's weighted-BH adjusted p over the family (NaN where p is NaN: not tested, never rejected; a
    statement with no share, or one absent from the call, is never rejected and does not count as rejected)."""
    p = np.asarray(p, dtype=np.float64)
    shares = np.asarray(shares, dtype=np.float64)
    out = np.full(len(p), np.nan)
    tested = np.flatnonzero(~np.isnan(p))
    if not len(tested):
        return out
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(shares[tested] > 0, p[tested] / shares[tested], np.inf)
    q = np.where(np.isnan(q), np.inf, q)
    order = np.argsort(q, kind="stable")
    ranked = q[order] / np.arange(1, len(q) + 1)
    ranked = np.minimum.accumulate(ranked[::-1])[::-1]  # the step-up: the best of every rank at or above
    result = np.empty(len(q))
    result[order] = np.minimum(ranked, 1.0)
    out[tested] = result
    return out


def step_up(p: np.ndarray, shares: np.ndarray, budget: float) -> tuple[np.ndarray, np.ndarray]:
    """(rejected, p_family) of the weighted step-up spending `budget` (see the module docstring): rejected iff
    p_family ≤ budget, that is iff the adjusted p ≤ level(budget)."""
    family = budget_of(adjusted_p(p, shares))
    return ~np.isnan(family) & (family <= budget), family


def bonferroni(p: np.ndarray, shares: np.ndarray, budget: float) -> tuple[np.ndarray, np.ndarray]:
    """(rejected, p_family) of engine 2.5's weighted Bonferroni: p_family = min(1, p / w) ≤ budget."""
    with np.errstate(divide="ignore", invalid="ignore"):
        family = np.where(np.isnan(p), np.nan, np.minimum(1.0, np.asarray(p) / np.asarray(shares)))
    family = np.where(~np.isnan(p) & ~(np.asarray(shares) > 0), 1.0, family)
    return ~np.isnan(family) & (family <= budget), family
