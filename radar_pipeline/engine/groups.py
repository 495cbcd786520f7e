"""Statements decided together (issue 29, groups): a joint test of "this group slowed" for statements that share a
shape, a role or a change named at the deploy, beside their own verdicts.

Each member brings what the engine computed for it at the deploy's own split (`analyse`'s deploy_log_factor,
deploy_log_se, deploy_dof: the log factor of its window means, with the test's variance and Welch's degrees of
freedom; fixed before any split is chosen, so no selection biases it). A group of at least MIN_MEMBERS such members
is tested:

- the decision, Stouffer's combination of the members' one-sided statistics with equal weights: member i's
  t_i = (y_i − ln(1 + θ)) / s_i on ν_i degrees of freedom gives p_i, z_i = Φ⁻¹(1 − p_i), and Z = Σ z_i / √m. Under
  H0 — no member slowed beyond 1 + θ — every z_i is stochastically at most N(0, 1) whatever the members' sizes, noise
  or number of calls (each member's own test carries those), so for independent members Z is too (Stouffer et al.
  1949). The weights must not read the window's latency: weights from the members' estimated standard errors
  (Whitlock 2005's ∝ 1/SE) let the same noisy s_i that makes a member's z_i large also make its weight large, and Z
  is no longer N(0, 1) under H0 — with sparse members (4 to 8 degrees of freedom, noise spread e^±1) 1.5× the level
  at 0.05 and 2.2× at 0.005 (engine/test_groups.py). Weights from the window's calls either side of the deploy
  would not read latency either, but gained at most 2 points of detection over equal weights on the lab's designs;
  what equal weights cost against the standard errors' (whose level did not hold) is in docs/groups.md.
- shared noise: statements of one server share its load interval to interval, so the members' z_i are positively
  correlated and Σ z_i / √m overspends (×6 the level at 0.005 for fifteen members at ρ 0.3, ×15 for a hundred at
  ρ 0.1). Z is deflated by the design effect D̂ = LRV(Σ w_i) / m of the members' before-side series over
  NOISE_SPANS · W, each scaled to unit long-run variance (`before_series`, `shared_noise`: the group as one
  pseudo-statement, with an AR(1) long-run variance as the engine's), floored at 1, and referred to Student's t on
  D̂'s degrees of freedom. The before side never sees the deploy's change. A group of more than NOISE_SAMPLE members
  has it read for its busiest on the before side alone (`noise_sample`), their mean correlation carried to the
  others (`SharedNoise.of`: D̂ = 1 + c (c − 1) ρ̄ / m, the same D̂ with every member read).
- the size, a random-effects estimate of the members' typical factor (DerSimonian & Laird 1986) with the
  Hartung–Knapp–Sidik–Jonkman small-sample interval on m − 1 degrees of freedom, its variance floored at the
  fixed-effect one (the modified HKSJ of Röver, Knapp & Friede 2015): the "×1.5 (×1.3–×1.7)" of the report. The
  members' standard errors enter with their own small-sample widening (s_i · t_ν,0.975 / z_0.975).
- detected when Z's p over the group's budget share is within the groups' budget *and* the typical factor lies
  beyond 1 + θ, with and without the member most beyond it (`factor_but_one`): one member far slower cannot carry
  a group whose other members stayed put — its own verdict is where it is found. Each condition only narrows the
  rejection region, so the level stays Stouffer's. `no_regression` when
  the typical factor's one-sided upper bound at clear_level lies within 1 + θ; `inconclusive` otherwise;
  `insufficient_data` below MIN_MEMBERS usable members.

The groups' budget (engine.budget.split_group_budget: GROUP_SHARE of the look's) is shared equally among the groups
the analysis formed (`group_weights`), which depend on the statements' texts, roles and the catalog's changes, never
on the after side's latency: the expected false group detections per analysis are at most the groups' budget by
Bonferroni's inequality, whatever the groups' overlap. At a deploy's later looks the groups still undecided are tested
again on the members' evidence over each look's spans (`group_looks`; in production steps/groups.later_look) with the
groups' share of that look's budget: the expected false group detections over all looks are at most the sum of the
looks' groups' budgets, GROUP_SHARE · B, by linearity (docs/groups.md).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import TypeVar

import numpy as np
import pandas as pd

from radar_pipeline.engine.frames import GROUP_FRAME
from radar_pipeline.engine.gate import tiers
from radar_pipeline.engine.settings import EngineSettings
from radar_pipeline.engine.vocabulary import Verdict

# A group is tested from this many members with an estimate at the deploy: fewer, and its interval on m − 1 degrees
# of freedom is too wide to tell anything (t_3,0.975 = 3.2), while a pair is better read from its two verdicts.
MIN_MEMBERS = 5
K = TypeVar("K")  # a member's key (a query_key)
# The members' shared noise is estimated over this many windows W before the deploy, at every look (the last look's
# span: enough intervals for the long-run variances' degrees of freedom, and the before side never sees the change).
NOISE_SPANS = 8
# A large group's shared noise is estimated from at most this many of its members (`noise_sample`), the others taking
# their mean correlation: the read stays bounded however large the group (a shape shared by thousands of statements).
NOISE_SAMPLE = 200
# A group's verdicts that end its looks; a later look tests the others (inconclusive, insufficient_data) again.
DECIDED = (Verdict.DETECTED.value, Verdict.NO_REGRESSION.value)
# The member columns the joint test reads (analyse's result).
MEMBER_COLUMNS = ("query_key", "deploy_log_factor", "deploy_log_se", "deploy_dof")
# The group verdict frame's columns, in order (engine/frames.py declares their dtypes).
GROUP_COLUMNS = tuple(GROUP_FRAME.names)


@dataclass(frozen=True)
class Joint:
    """One group's joint test: the members it combined, how many of them lie beyond 1 + θ, the typical factor with
    its 95% interval and one-sided bound (at clear_level), the spread between members (τ, log scale), Stouffer's Z
    and its one-sided p."""

    members: int
    members_above: int
    factor: float
    factor_low: float
    factor_high: float
    factor_bound: float
    factor_but_one: float  # the typical factor without the member whose own estimate is the largest
    tau: float
    z_stat: float  # Σ z_i / √(m · design)
    p_value: float
    design: float = 1.0  # the design effect Z was deflated by (1: members taken as independent)


@dataclass(frozen=True)
class SharedNoise:
    """The members' standardised before-side series (`shared_noise`), each scaled to unit long-run variance
    (columns: the members, in the group's order; NaN where a member was read with too few intervals to tell, or not
    read at all), and which members were read (`sampled`: a bounded subsample of a large group, `noise_sample`)."""

    series: np.ndarray  # intervals × members
    sampled: np.ndarray | None = None  # bool per member: its before side was read (None: every member was)

    def of(self, used: np.ndarray) -> tuple[float, float]:
        """The design effect D = Var(Σ z_i) / m of the `used` members' statistics and the degrees of freedom of its
        estimate. Of the m members, k were read and have a unit series w_i, r were read without one (too sparse) and
        u were not read. The k series give the members' mean pairwise correlation ρ̄ = (LRV(Σ w_i) − k) / (k (k − 1));
        a member read without a series is counted as independent of the others (its 1 on the diagonal), a member not
        read as correlated ρ̄ with every other correlated one, so over the c = k + u correlated members
        D̂ = 1 + c (c − 1) ρ̄ / m — with every member read (u = 0) exactly (LRV(Σ w_i) + m − k) / m, and with every
        member correlated (r = 0) 1 + (m − 1) ρ̄. Floored at 1: shared load noise makes members' errors agree, never
        cancel; at 1 the members are taken as independent (ν = ∞). Else D̂ − 1 = a (LRV(Σ w_i) − k) with
        a = c (c − 1) / (m k (k − 1)), a fixed multiple of the sum's long-run variance, whose degrees of freedom ν_S
        (`_long_run`) carry to D̂ by Satterthwaite: ν = ν_S · (D̂ / (a LRV(Σ w_i)))² (docs/groups.md, "Shared noise")."""
        w = self.series[:, used]
        m = w.shape[1]
        read = np.ones(m, dtype=bool) if self.sampled is None else self.sampled[used]
        usable = np.isfinite(w).all(axis=0) & read
        k = int(usable.sum())
        if m == 0 or k < 2:
            return 1.0, np.inf
        total, dof = _long_run(w[:, usable].sum(axis=1))
        c = k + int((~read).sum())
        scale = c * (c - 1) / (m * k * (k - 1))
        design = 1.0 + scale * (total - k)
        if design <= 1.0 or total <= 0:
            return 1.0, np.inf
        return design, dof * (design / (scale * total)) ** 2


def noise_sample(members: Sequence[K], calls: pd.Series, cap: int | None = None) -> list[K]:
    """The members whose before side a group's shared noise is estimated from: all of them up to `cap`
    (NOISE_SAMPLE), else the `cap` busiest by `calls` (query_key → calls on the before side; a member it lacks has
    none), ties by key. Fixed by the before side's calls alone, never the after side's latency, so the estimate
    cannot see the deploy's change; the busiest have the steadiest series."""
    cap = NOISE_SAMPLE if cap is None else cap
    keys = list(dict.fromkeys(members))
    if len(keys) <= cap:
        return keys
    busy = dict(zip(keys, calls.reindex(pd.Index(keys)).fillna(0).to_numpy(dtype=np.float64), strict=True))
    return sorted(keys, key=lambda key: (-busy[key], key))[:cap]


def before_calls(counters: pd.DataFrame, deploy_at: datetime | pd.Timestamp, before: timedelta) -> pd.Series:
    """Each statement's calls over the `before` span up to the deploy (query_key → calls, as analyse reports the
    key): what `noise_sample` ranks a large group's members by."""
    from radar_pipeline.engine.samples import window_samples

    deploy = int(pd.Timestamp(deploy_at).value)
    samples = window_samples(counters, deploy - int(pd.Timedelta(before).value), deploy)
    if samples.groups == 0:
        return pd.Series(dtype=np.float64)
    total = np.bincount(samples.group, weights=samples.calls, minlength=samples.groups)
    return pd.Series(total, index=pd.Index(samples.keys), dtype=np.float64)


def _long_run(x: np.ndarray) -> tuple[float, float]:
    """The long-run variance of a centred series by its AR(1) fit — γ₀ (1 + φ) / (1 − φ), φ the lag-1
    autocorrelation corrected for its small-sample bias (Kendall 1954: + (1 + 3φ) / n) and kept within
    [0, 0.95] — and the degrees of freedom of that estimate, 2 / Var(ln LRV̂) with
    Var(ln LRV̂) ≈ 2/n + 4 (1 + φ) / (n (1 − φ)) (the delta method on γ̂₀ and φ̂)."""
    n = len(x)
    gamma0 = float(x @ x) / n
    if gamma0 <= 0 or n < 3:
        return 0.0, np.inf
    phi = float(x[1:] @ x[:-1]) / n / gamma0
    phi = min(0.95, max(0.0, phi + (1 + 3 * phi) / n))
    # the centred series' variance misses the mean's share of it, Var(x̄) ≈ LRV / n
    factor = (1 + phi) / (1 - phi)
    lrv = gamma0 * factor / max(0.5, 1 - factor / n)
    return lrv, 2.0 / (2.0 / n + 4.0 * (1 + phi) / (n * (1 - phi)))


def _long_runs(x: np.ndarray) -> np.ndarray:
    """`_long_run`'s long-run variance of each column of centred series x (intervals × series) at once; 0 where a
    column does not vary or has fewer than 3 intervals."""
    n = x.shape[0]
    gamma0 = np.einsum("ij,ij->j", x, x) / n
    if n < 3:
        return np.zeros(x.shape[1])
    with np.errstate(invalid="ignore", divide="ignore"):
        phi = np.einsum("ij,ij->j", x[1:], x[:-1]) / n / gamma0
    phi = np.clip(phi + (1 + 3 * phi) / n, 0.0, 0.95)
    factor = (1 + phi) / (1 - phi)
    lrv = gamma0 * factor / np.maximum(0.5, 1 - factor / n)
    return np.where(gamma0 > 0, lrv, 0.0)


def before_series(counters: pd.DataFrame, deploy_at: datetime | pd.Timestamp, before: timedelta) -> pd.DataFrame:
    """Each statement's log interval mean (ms per call) over the `before` span up to the deploy: one row per scrape
    (its end), one column per query_key (as analyse reports it: rotated keys merged), NaN where the statement had no
    call. Only the before side: what it tells about the statements' shared noise cannot see the deploy's change."""
    from radar_pipeline.engine.samples import window_samples

    deploy = int(pd.Timestamp(deploy_at).value)
    samples = window_samples(counters, deploy - int(pd.Timedelta(before).value), deploy)
    if samples.groups == 0 or len(samples.end) == 0:
        return pd.DataFrame()
    with np.errstate(divide="ignore", invalid="ignore"):
        value = np.where(samples.calls > 0, np.log(samples.time / samples.calls), np.nan)
    ends, row = np.unique(samples.end, return_inverse=True)
    keys, column = np.unique(samples.keys[samples.group], return_inverse=True)
    grid = np.full((len(ends), len(keys)), np.nan)
    # the first sample of a (scrape, key) wins, as the pivot's aggfunc "first" did: written last, in reverse
    grid[row[::-1], column[::-1]] = value[::-1]
    return pd.DataFrame(grid, index=pd.Index(ends, name="end"), columns=pd.Index(keys, name="key"))


def shared_noise(series: pd.DataFrame, members: Sequence[object]) -> SharedNoise | None:
    """The members' shared noise from their before-side series (`before_series`, or steps.groups.before_noise's of a
    group's `noise_sample`): each member's log means centred and scaled by its own long-run standard deviation
    (`_long_run`), the intervals it had no call at set to 0; a member with fewer than 8 such intervals, or none
    varying, is left out (NaN) and counted as independent; a member without a column in `series` was not read and
    takes the read members' mean correlation (SharedNoise.of). None without a series."""
    if series.empty:
        return None
    wanted = pd.Index(list(members))
    sampled = wanted.isin(series.columns)
    found = series.reindex(columns=wanted).to_numpy(dtype=np.float64)
    if found.shape[0] < 8:
        return None
    seen = np.isfinite(found)
    count = seen.sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(seen, found, 0.0).sum(axis=0) / count
    centred = np.where(seen, found - mean, 0.0)
    scale = _long_runs(centred)
    enough = (count >= 8) & (scale > 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.where(enough, centred / np.sqrt(np.where(enough, scale, 1.0)), np.nan)
    return SharedNoise(out, None if sampled.all() else sampled)


def group_weights(groups: Sequence[str]) -> pd.Series:
    """Each group's share of the groups' budget (Σ = 1): equal, fixed by which groups were formed."""
    if not groups:
        return pd.Series(dtype=float)
    return pd.Series(1.0 / len(groups), index=list(groups), dtype=float)


def joint_test(
    log_factor: np.ndarray,
    se: np.ndarray,
    dof: np.ndarray,
    threshold: float,
    clear_level: float = 0.95,
    shared: SharedNoise | None = None,
) -> Joint | None:
    """The joint test of the members with a finite estimate (None with fewer than MIN_MEMBERS of them): see the
    module docstring. `shared`: the members' shared noise (`shared_noise`, over the same members in the same order,
    NaN estimates included); Z is deflated by its design effect and referred to Student's t on its degrees of
    freedom. None: the members are taken as independent."""
    from scipy import stats

    y, s, nu = (np.asarray(v, dtype=np.float64) for v in (log_factor, se, dof))
    ok = np.isfinite(y) & np.isfinite(s) & (s > 0) & np.isfinite(nu) & (nu > 0)
    y, s, nu = y[ok], s[ok], nu[ok]
    m = len(y)
    if m < MIN_MEMBERS:
        return None
    limit = np.log1p(threshold)
    p_members = stats.t.sf((y - limit) / s, nu)
    z_members = stats.norm.isf(np.clip(p_members, 1e-300, 1 - 1e-16))
    # Equal weights: a weight read from s_i would depend on the same noise estimate as z_i (module docstring).
    design, design_dof = (1.0, np.inf) if shared is None else shared.of(ok)
    z = float(z_members.sum() / np.sqrt(m * design))
    # The members' standard errors widened for their own degrees of freedom, for the size only: a sparse member's
    # estimate of its noise is itself uncertain.
    wide = s * stats.t.ppf(0.975, nu) / stats.norm.ppf(0.975)
    mu, var, tau2 = _random_effects(y, wide)
    top = int(np.argmax(y))
    but_one, _, _ = _random_effects(np.delete(y, top), np.delete(wide, top))
    half = float(stats.t.ppf(0.975, m - 1)) * np.sqrt(var)
    bound = mu + float(stats.t.ppf(clear_level, m - 1)) * np.sqrt(var)
    return Joint(
        members=m,
        members_above=int((y > limit).sum()),
        factor=float(np.exp(mu)),
        factor_low=float(np.exp(mu - half)),
        factor_high=float(np.exp(mu + half)),
        factor_bound=float(np.exp(bound)),
        factor_but_one=float(np.exp(but_one)),
        tau=float(np.sqrt(tau2)),
        z_stat=z,
        p_value=float(stats.norm.sf(z) if not np.isfinite(design_dof) else stats.t.sf(z, design_dof)),
        design=design,
    )


def _random_effects(y: np.ndarray, s: np.ndarray) -> tuple[float, float, float]:
    """The random-effects mean of estimates y with standard errors s (DerSimonian–Laird τ²), the modified
    Hartung–Knapp variance of that mean (on len(y) − 1 degrees of freedom), and τ²."""
    m = len(y)
    w = 1.0 / s**2
    fixed = float((w * y).sum() / w.sum())
    q = float((w * (y - fixed) ** 2).sum())
    tau2 = max(0.0, (q - (m - 1)) / (w.sum() - (w**2).sum() / w.sum()))
    w_re = 1.0 / (s**2 + tau2)
    mu = float((w_re * y).sum() / w_re.sum())
    hk = float((w_re * (y - mu) ** 2).sum() / ((m - 1) * w_re.sum()))
    return mu, max(hk, 1.0 / float(w_re.sum())), tau2


def decide_groups(
    verdicts: pd.DataFrame,
    groups: Mapping[str, Sequence[object]],
    budget: float,
    settings: EngineSettings | None = None,
    tested: Collection[str] | None = None,
    before: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """Decide each group (group id → its members' query_keys) from `verdicts` (analyse's result, or
    engine.decision.deploy_evidence's at a later look: MEMBER_COLUMNS) with the groups' budget `budget` (expected
    false group detections per analysis or look), shared by `group_weights` over every group given. One row per
    group (GROUP_COLUMNS), in the order given: `insufficient_data` where fewer than MIN_MEMBERS members have an
    estimate at the deploy; members the verdicts lack count as without one. `tested`: only these groups are tested
    (a later look's still open ones) and have a row; the others keep their share unspent, never handed on.
    `before`: the statements' before-side series (`before_series` over the spans the evidence was taken on), from
    which each group's shared noise is estimated (`shared_noise`); None takes members as independent."""
    settings = settings or EngineSettings()
    missing = [c for c in MEMBER_COLUMNS if c not in verdicts.columns]
    if missing:
        needs = ", ".join(MEMBER_COLUMNS)
        raise ValueError(f"verdicts lack column(s) {', '.join(missing)} (a group's test needs {needs})")
    if not 0 <= budget < 1:
        raise ValueError(f"the groups' budget must lie in [0, 1), not {budget}")
    weights = group_weights(list(groups))
    by_key = verdicts.set_index("query_key")[list(MEMBER_COLUMNS[1:])]
    rows = []
    for group_id, members in groups.items():
        if tested is not None and group_id not in tested:
            continue
        found = by_key.reindex(pd.Index(list(members)))
        joint = joint_test(
            found["deploy_log_factor"].to_numpy(),
            found["deploy_log_se"].to_numpy(),
            found["deploy_dof"].to_numpy(),
            settings.threshold,
            settings.clear_level,
            None if before is None else shared_noise(before, list(members)),
        )
        share = budget * float(weights[group_id])
        if joint is None:
            usable = int(np.isfinite(found["deploy_log_factor"].to_numpy(dtype=float)).sum())
            rows.append(
                {
                    "group_id": group_id,
                    "verdict": Verdict.INSUFFICIENT_DATA.value,
                    "members": usable,
                    "budget_share": share,
                }
            )
            continue
        with np.errstate(divide="ignore"):
            p_family = min(1.0, joint.p_value / float(weights[group_id])) if weights[group_id] > 0 else 1.0
        beyond = min(joint.factor, joint.factor_but_one) > 1 + settings.threshold
        if p_family <= budget and beyond:
            verdict = Verdict.DETECTED
        elif joint.factor_bound <= 1 + settings.threshold:
            verdict = Verdict.NO_REGRESSION
        else:
            verdict = Verdict.INCONCLUSIVE
        rows.append(
            {"group_id": group_id, "verdict": verdict.value, **vars(joint), "p_family": p_family, "budget_share": share}
        )
    out = pd.DataFrame(rows, columns=list(GROUP_COLUMNS))
    for name in GROUP_COLUMNS[4:-1]:
        out[name] = out[name].astype(np.float64)
    out["tier"] = tiers(
        out["verdict"].to_numpy(), out["factor_low"].to_numpy(), out["factor_bound"].to_numpy(), settings.threshold
    )
    for name in ("members", "members_above"):
        out[name] = out[name].fillna(0).astype(np.int64)
    return GROUP_FRAME.check(out, "decide_groups")


def group_looks(
    counters: pd.DataFrame,
    deploy_at: datetime | pd.Timestamp,
    groups: Mapping[str, Sequence[object]],
    settings: EngineSettings | None = None,
    prior: pd.DataFrame | None = None,
    looks: int | None = None,
    shared: bool = True,
) -> pd.DataFrame:
    """Every look of one deploy's groups on `counters` (reaching LOOK_SPANS[looks − 1] · W either side, no
    neighbouring deploy): at look k the groups not yet decided (`detected` or `no_regression`) are tested on every
    member's evidence at the deploy over look k's spans (deploy_evidence, whether or not the member's own verdict is
    decided), with GROUP_SHARE of look k's budget shared over all the groups. One row per group: group_id,
    first_verdict, verdict (the last), look (the look that decided it; NaN while open), the decided look's
    p_family and factor, and budget_share: the group's share of the budget at the last look it was tested at (the
    deciding look, or the last look while open) — what that look spent on it. Each look's groups are deflated for
    their members' shared noise, estimated over NOISE_SPANS · W before the deploy (`shared_noise`). For the lab and
    the tests; the warehouse's looks run through steps.looks.run_look (with steps.groups.later_look). `shared`
    False takes the members as independent (the test before the deflation: for the lab's comparison only)."""
    from radar_pipeline.engine.budget import LOOK_SPANS, look_after, look_budget, look_clear_level, split_group_budget
    from radar_pipeline.engine.decision import deploy_evidence

    settings = settings or EngineSettings()
    looks = len(LOOK_SPANS) if looks is None else looks
    ids = list(groups)
    out = pd.DataFrame(
        {
            "group_id": ids,
            "first_verdict": None,
            "verdict": None,
            "look": np.nan,
            "p_family": np.nan,
            "factor": np.nan,
            "budget_share": np.nan,
        }
    ).set_index("group_id", drop=False)
    for look in range(looks):
        still = [g for g in ids if out.at[g, "verdict"] not in DECIDED]
        if not still:
            break
        after = look_after(settings.window, look)
        evidence = deploy_evidence(
            counters, deploy_at, settings, prior, before=max(after, settings.window), after=after
        )
        budget = split_group_budget(look_budget(settings.false_alert_budget, look), True)[1]
        series = None
        if shared:  # every member read: one without a call before the deploy is independent, not extrapolated
            series = before_series(counters, deploy_at, NOISE_SPANS * settings.window)
            everyone = pd.Index(list(dict.fromkeys(key for members in groups.values() for key in members)))
            series = series.reindex(columns=series.columns.union(everyone))
        at_look = replace(settings, clear_level=look_clear_level(settings.clear_level, look))
        found = decide_groups(evidence, groups, budget, at_look, tested=still, before=series).set_index("group_id")
        for g, row in found.iterrows():
            if look == 0:
                out.at[g, "first_verdict"] = row["verdict"]
            out.at[g, "verdict"] = row["verdict"]
            out.at[g, "budget_share"] = row["budget_share"]
            if row["verdict"] in DECIDED:
                out.at[g, "look"] = look
                out.at[g, "p_family"], out.at[g, "factor"] = row["p_family"], row["factor"]
    return out.reset_index(drop=True)
