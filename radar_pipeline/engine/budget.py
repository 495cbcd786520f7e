"""How a deploy's false-alert budget B is spent (issue 29): across its looks, and within a look between its
statements and the joint tests of their groups.

A deploy is decided at its first look (the window W after it) and again at later looks, each deciding only what is
still open. Look k may spend LOOK_SPENDING[k] · B, the shares summing to 1: whatever the looks' dependence, the
expected false detections over all looks are at most Σ_k B · f_k = B (alpha spending with a fixed schedule, bounded
by the union over looks: Lan & DeMets 1983 for spending, with Bonferroni across looks in place of the joint law of
the looks' statistics, which E-divisive's choice of split makes intractable). Within a look, GROUP_SHARE of its
budget goes to the group tests when the analysis has groups, the rest to the statements one by one.
"""

from __future__ import annotations

from datetime import timedelta

# The after side of each look, in units of the window W: the first verdict, then 2W, 4W and 8W after the deploy.
LOOK_SPANS = (1, 2, 4, 8)
# The share of B each look may spend (Σ = 1): half for the first verdict, which the gate waits on.
LOOK_SPENDING = (0.5, 0.2, 0.15, 0.15)
# The share of 1 − β, the chance of a wrong "cleared", each look may spend (Σ = 1).
CLEAR_SPENDING = (0.8, 0.1, 0.05, 0.05)
# The share of a look's budget for its group tests, when it has any.
GROUP_SHARE = 0.2

assert len(LOOK_SPANS) == len(LOOK_SPENDING) and abs(sum(LOOK_SPENDING) - 1) < 1e-12
assert len(CLEAR_SPENDING) == len(LOOK_SPANS) and abs(sum(CLEAR_SPENDING) - 1) < 1e-12


def look_budget(budget: float, look: int) -> float:
    """The budget look `look` (0: the first verdict) of a deploy may spend."""
    if not 0 <= look < len(LOOK_SPENDING):
        raise ValueError(f"look must lie in 0..{len(LOOK_SPENDING) - 1}, not {look}")
    return budget * LOOK_SPENDING[look]


def look_clear_level(level: float, look: int) -> float:
    """The confidence at which look `look` clears, for a deploy whose looks together clear wrongly with probability at
    most 1 − `level` (module docstring)."""
    if not 0 <= look < len(CLEAR_SPENDING):
        raise ValueError(f"look must lie in 0..{len(CLEAR_SPENDING) - 1}, not {look}")
    return 1 - (1 - level) * CLEAR_SPENDING[look]


def clear_dilution(tolerance: timedelta, after: timedelta) -> float:
    """The least share of an after side of length `after` that a change beginning within `tolerance` of the deploy
    still covers (uniform calls): the evidence at the deploy's own split sees 1 + θ · this of a slowdown by 1 + θ,
    so it may clear only within that (a fleet key's evidence, engine/releases.py)."""
    if after <= timedelta(0):
        return 0.0
    return max(0.0, 1 - tolerance / after)


def look_after(window: timedelta, look: int) -> timedelta:
    """How long after the deploy look `look` ends (before the next deploy cuts it)."""
    if not 0 <= look < len(LOOK_SPANS):
        raise ValueError(f"look must lie in 0..{len(LOOK_SPANS) - 1}, not {look}")
    return window * LOOK_SPANS[look]


def split_group_budget(budget: float, has_groups: bool) -> tuple[float, float]:
    """A look's budget as (statements, groups): GROUP_SHARE to the groups when there are any."""
    if not has_groups:
        return budget, 0.0
    return budget * (1 - GROUP_SHARE), budget * GROUP_SHARE
