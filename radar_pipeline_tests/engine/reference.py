"""A deliberately plain, one-query-at-a-time reading of the detection note, to check the vectorised engine against.

Nothing here is shared with radar_pipeline.engine: it recomputes every step from scratch, with explicit pair loops for
the energy statistic, explicit sums for the call-level test at each split, numpy's least squares for the trend and a
loop for the family's weighted Benjamini–Hochberg step-up. `collateral_culprits` is the engine's own earlier loop over
the detections (it takes only the impact's names of kinds and classes from the engine).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from radar_pipeline.engine import EngineSettings
from radar_pipeline.engine.impact import (
    CONTROL,
    DEPLOY_STATEMENT,
    N_PLUS_ONE,
    NEW,
    ONE_OFF_CALLS,
    REPLACED,
    SURGE,
    Impact,
)
from radar_pipeline.engine.vocabulary import Cause, Verdict


def energy_q(x: np.ndarray, k: int) -> float:
    """Q(k) by explicit pair sums."""
    a, b = x[:k], x[k:]
    na, nb = len(a), len(b)
    d_ab = sum(abs(ai - bj) for ai in a for bj in b) / (na * nb)
    d_aa = sum(abs(a[i] - a[j]) for i in range(na) for j in range(i + 1, na)) / math.comb(na, 2)
    d_bb = sum(abs(b[i] - b[j]) for i in range(nb) for j in range(i + 1, nb)) / math.comb(nb, 2)
    return na * nb / (na + nb) * (2 * d_ab - d_aa - d_bb)


def best_split(x: np.ndarray) -> tuple[int, float]:
    """(k, Q) of the first admissible argmax, or (0, -inf) when none has Q > 0."""
    n = len(x)
    m = max(3, n // 10)
    best_k, best_q = 0, -math.inf
    for k in range(m, n - m + 1):
        q = energy_q(x, k)
        if q > best_q:
            best_k, best_q = k, q
    return (best_k, best_q) if best_q > 0 else (0, -math.inf)


def samples_of(rows: pd.DataFrame, deploy: pd.Timestamp, settings: EngineSettings) -> list[tuple]:
    """One query's samples in the window, in time order: (end, calls, time, sum of squares)."""
    rows = rows.sort_values("captured_at", kind="stable").drop_duplicates("captured_at", keep="last")
    lo, hi = deploy - settings.window, deploy + settings.window
    samples = []  # (end, calls, time, sum of squares)
    prev = None
    for row in rows.itertuples():
        if prev is not None:
            dc, dt = row.calls - prev.calls, row.total_exec_time - prev.total_exec_time
            since_changed = "stats_since" in rows and not (
                (pd.isna(row.stats_since) and pd.isna(prev.stats_since)) or row.stats_since == prev.stats_since
            )
            if dc > 0 and dt >= 0 and not since_changed and lo < row.captured_at <= hi:
                ss = math.nan
                if "stddev_exec_time" in rows:  # parallel variance, backwards
                    m1 = prev.total_exec_time / prev.calls if prev.calls else 0.0
                    m = dt / dc
                    ss = (
                        row.calls * row.stddev_exec_time**2
                        - prev.calls * prev.stddev_exec_time**2
                        - prev.calls * dc / row.calls * (m1 - m) ** 2
                    )
                    ss = 0.0 if dc == 1 else max(ss, 0.0)
                samples.append((row.captured_at, dc, dt, ss))
        prev = row
    return samples


def pool(by_key: dict[Any, pd.DataFrame], deploy: pd.Timestamp, settings: EngineSettings) -> dict:
    """The serial correlation's pool (engine.inference.pooled_serial_correlation) by loops: each decidable query's
    lag-1 correlation at the deploy's split (both sides demeaned on their own, pooled on the relative scale,
    Kendall's bias added back), its intervals n and busyness ln(calls / n); queries ordered by busyness (ties by ρ̂,
    then n) cut into up to 5 bins of at least 30; per bin the n-weighted mean ρ̄ and DerSimonian–Laird's τ² about
    the precision-weighted mean; n₀ = (1 − ρ̄²)/τ², at most the bin's intervals. key → (ρ̄, n₀); a query not pooled
    is left out."""
    found = []
    for key in sorted(by_key):
        samples = samples_of(by_key[key], deploy, settings)
        before = [s for s in samples if s[0] <= deploy]
        after = [s for s in samples if s[0] > deploy]
        if min(len(before), len(after)) < settings.min_samples:
            continue
        if sum(s[1] for s in before) < settings.min_calls or sum(s[1] for s in after) < settings.min_calls:
            continue
        ee = acov = 0.0
        for side in (before, after):
            mu = sum(s[2] for s in side) / sum(s[1] for s in side)
            if mu <= 0:
                continue
            e = [s[2] - mu * s[1] for s in side]
            ee += sum(v * v for v in e) / mu**2
            acov += sum(e[j] * e[j + 1] for j in range(len(e) - 1)) / mu**2
        if ee <= 0:
            continue
        n = len(samples)
        rho = acov / ee
        rho = min(max(rho + 2 * (1 + 3 * rho) / n, -0.99), 0.99)
        found.append((math.log(sum(s[1] for s in samples) / n), key, rho, n))
    if len(found) < 30:
        return {}
    found.sort(key=lambda f: (f[0], f[2], f[3]))  # busyness, ties by ρ̂ then n
    out = {}
    for part in np.array_split(np.arange(len(found)), max(1, min(5, len(found) // 30))):
        members = [found[i] for i in part]
        total = sum(f[3] for f in members)
        mu = sum(f[3] * f[2] for f in members) / total
        precision = [f[3] / max(1 - f[2] ** 2, 0.01) for f in members]
        centre = sum(w * f[2] for w, f in zip(precision, members, strict=True)) / sum(precision)
        q = sum(w * (f[2] - centre) ** 2 for w, f in zip(precision, members, strict=True))
        c = sum(precision) - sum(w * w for w in precision) / sum(precision)
        tau2 = max(0.0, (q - (len(members) - 1)) / c) if c > 0 else 0.0
        worth = total if tau2 <= 0 else min(total, (1 - mu**2) / tau2)
        for f in members:
            out[f[1]] = (mu, worth)
    return out


def analyse_one(
    rows: pd.DataFrame, deploy: pd.Timestamp, settings: EngineSettings, pooled: tuple[float, float] | None = None
) -> dict:
    """The verdict for one query's counters (rows of one key, any order), before the family step: `p_value` is the
    selection-adjusted one-sided p of the split test; `family` turns it into the verdict. pooled: the query's (ρ̄, n₀)
    from `pool`."""
    samples = samples_of(rows, deploy, settings)
    before = [s for s in samples if s[0] <= deploy]
    after = [s for s in samples if s[0] > deploy]
    out = {
        "n_before": len(before),
        "n_after": len(after),
        "calls_before": sum(s[1] for s in before),
        "calls_after": sum(s[1] for s in after),
        "time_before": sum(s[2] for s in before),
    }
    mb = out["time_before"] / out["calls_before"] if out["calls_before"] else math.nan
    ma = sum(s[2] for s in after) / out["calls_after"] if out["calls_after"] else math.nan
    out.update(mean_before_ms=mb, mean_after_ms=ma, change_at=pd.NaT, t_stat=math.nan, dof=math.nan, p_value=math.nan)
    out["shift"] = math.nan
    if len(before) < settings.min_samples or len(after) < settings.min_samples:
        return {**out, "verdict": "insufficient_data", "reason": "floor_samples"}
    if out["calls_before"] < settings.min_calls or out["calls_after"] < settings.min_calls:
        return {**out, "verdict": "insufficient_data", "reason": "floor_calls"}
    calls = np.array([s[1] for s in samples], dtype=float)
    time = np.array([s[2] for s in samples])
    sumsq = np.array([s[3] for s in samples]) if "stddev_exec_time" in rows else None
    side = max(settings.min_samples, 2, len(samples) // 10)
    first = len(before) if settings.tolerance < settings.window else 0  # a deploy: splits at or after it only
    splits = [
        j
        for j in range(max(side, first), len(samples) - side + 1)
        if abs(samples[j - 1][0] - deploy) <= settings.tolerance
    ]
    out.update(clearing(calls, time, sumsq, splits, first, settings, pooled))
    rose = ((ma / mb - 1 >= settings.threshold) if mb > 0 else ma > mb) and ma - mb >= settings.min_rise_ms
    if not rose:
        return {**out, "verdict": "inconclusive", "reason": "below_threshold"}
    x = np.array([s[2] / s[1] for s in samples])
    k, q = best_split(x)
    if k == 0:
        return {**out, "verdict": "inconclusive", "reason": "no_change_point"}
    out["change_at"] = samples[k - 1][0]
    if abs(out["change_at"] - deploy) > settings.tolerance:
        return {**out, "verdict": "inconclusive", "reason": "outside_tolerance"}
    best = None
    for j in splits:
        res = call_level_test(calls, time, sumsq, j, settings.threshold, pooled)
        if not math.isnan(res["t"]) and (best is None or res["t"] > best[1]["t"]):
            best = (j, res)
    if best is None:
        return {**out, "p_value": 1.0, "verdict": "inconclusive", "reason": "not_significant"}
    j, res = best
    out.update(t_stat=res["t"], dof=res["dof"], p_value=chain_p(res["p"], calls, splits))
    out["change_at"] = samples[j - 1][0]
    out["shift"] = trend_shift(calls, x, [s[0] for s in samples], j)
    return {**out, "verdict": "inconclusive", "reason": "tested"}


def clearing(
    calls: np.ndarray,
    time: np.ndarray,
    sumsq: np.ndarray | None,
    splits: list[int],
    first: int,
    settings,
    pooled: tuple[float, float] | None = None,
) -> dict:
    """The clearing rule by a loop over its splits (the detection's candidates and, for a deploy, its own split
    `first` when both sides keep min_samples; for a deploy each split's after side against the intervals before the
    deploy, those between left out): at each, the tolerance max(1 + θ, 1 + min_rise / mean before) and the
    t distribution's confidence that the factor lies within it; at the least confident split, the one-sided upper
    bound at clear_level, whether every split's confidence reaches clear_level, and whether the bound's margin over
    the estimate alone fits within the tolerance."""
    n = len(calls)
    checked = set(splits)
    if settings.tolerance < settings.window and min(first, n - first) >= settings.min_samples:
        checked.add(first)
    worst = None  # (confidence, bound, precise) at the least confident split
    deploy = settings.tolerance < settings.window
    for j in sorted(checked):
        if deploy and j > first:  # engine 2.7: the after side from j on against the side before the deploy
            keep = list(range(first)) + list(range(j, n))
            res = call_level_test(
                calls[keep], time[keep], sumsq[keep] if sumsq is not None else None, first, settings.threshold, pooled
            )
        else:
            res = call_level_test(calls, time, sumsq, j, settings.threshold, pooled)
        if math.isnan(res["log_ratio"]):
            worst = (-1.0, math.nan, False)
            break
        limit = max(math.log1p(settings.threshold), math.log1p(settings.min_rise_ms / res["mean_a"]))
        room = limit - res["log_ratio"]
        if res["se"] > 0:
            confidence = stats.t.cdf(room / res["se"], res["dof"])
            margin = stats.t.ppf(settings.clear_level, res["dof"]) * res["se"]
        else:
            confidence, margin = (1.0 if room >= 0 else 0.0), 0.0
        if worst is None or confidence < worst[0]:
            worst = (confidence, math.exp(res["log_ratio"] + margin), margin <= limit)
    if worst is None or worst[0] < 0:
        return {"factor_bound": math.nan, "cleared": False, "precise": False}
    return {"factor_bound": worst[1], "cleared": worst[0] >= settings.clear_level, "precise": worst[2]}


def family(results: dict, settings: EngineSettings) -> dict:
    """The family's decision over one analysis' reference results (key → analyse_one's dict), in place: p_family
    (engine 2.6: the weighted Benjamini–Hochberg adjusted p over the budget shares, put on the budget's scale
    ã / (1 − ã)²; `family_rule` "bonferroni": min(1, p / w)), and the verdict and reason of every tested statement;
    then the clearing of every decidable statement not detected."""
    decidable = [k for k, r in results.items() if r["verdict"] != "insufficient_data"]
    total = sum(max(results[k]["time_before"], 0.0) for k in decidable)
    lam = settings.budget_time_weight
    q = {}
    for key in decidable:
        r = results[key]
        share = max(r["time_before"], 0.0) / total if total > 0 else 1 / len(decidable)
        weight = (1 - lam) / len(decidable) + lam * share
        if not math.isnan(r["p_value"]):
            q[key] = r["p_value"] / weight
    ranked = sorted(q, key=lambda k: q[k])
    for i, key in enumerate(ranked):
        if settings.family_rule == "bonferroni":
            results[key]["p_family"] = min(1.0, q[key])
        else:
            adjusted = min(1.0, min(q[other] / (j + 1) for j, other in enumerate(ranked) if j >= i))
            results[key]["p_family"] = min(1.0, adjusted / (1 - adjusted) ** 2) if adjusted < 1 else 1.0
    for key in decidable:
        r = results[key]
        r.setdefault("p_family", math.nan)
        if r["reason"] == "tested":
            if r["p_family"] <= settings.false_alert_budget:
                drift = not (r["shift"] - 1 >= settings.threshold)
                r["verdict"], r["reason"] = ("inconclusive", "drift") if drift else ("detected", "significant")
            else:
                r["reason"] = "not_significant"
        if r["verdict"] == "detected":
            r["factor_bound"] = math.nan  # a detection is not cleared: its bound is not computed
            continue
        if r["cleared"]:
            r["verdict"] = "no_regression"
        elif r["reason"] == "below_threshold":
            r["reason"] = "interval_spans_threshold" if r["precise"] else "interval_too_wide"
    return results


def trend_shift(calls: np.ndarray, means: np.ndarray, ends: list, k: int) -> float:
    """The larger of two level shifts at split k: (a + δ) / a of the call-weighted fit a + b·(t − t_k) + δ·[i ≥ k],
    and the after side's own line at t_k over the before side's; a level ≤ 0 falls back to its side's mean."""
    t0 = ends[k - 1]
    t = np.array([(e - t0).total_seconds() for e in ends])
    t = t / max(np.abs(t).max(), 1.0)
    d = (np.arange(len(means)) >= k).astype(float)

    def fit(rows: np.ndarray, *columns: np.ndarray) -> np.ndarray:
        design = np.column_stack(columns)[rows] * np.sqrt(calls[rows])[:, None]
        return np.linalg.lstsq(design, means[rows] * np.sqrt(calls[rows]), rcond=None)[0]

    everything, before, after = np.ones(len(t), dtype=bool), d == 0, d == 1
    mean_before = float(np.sum(calls[before] * means[before]) / np.sum(calls[before]))
    mean_after = float(np.sum(calls[after] * means[after]) / np.sum(calls[after]))
    coef = fit(everything, np.ones(len(t)), t, d)
    level = coef[0] if coef[0] > 0 else mean_before
    line_before = fit(before, np.ones(len(t)), t)[0]
    line_after = fit(after, np.ones(len(t)), t)[0]
    broken = (line_after if line_after > 0 else mean_after) / (line_before if line_before > 0 else mean_before)
    return max((level + coef[2]) / level, broken)


def chain_p(p: float, calls: np.ndarray, splits: list[int]) -> float:
    """The p-value of the best of `splits` whose own p is `p`: the chain bound p + Σ 2 T(u, sqrt((1 − r)/(1 + r)))
    over consecutive candidates, capped by Bonferroni's K · p (engine.inference, "Selection"). The correlation r of
    the statistics D_k = Σ_B e / C_B − Σ_A e / C_A at two splits comes from their weight vectors w (−1/C_A on A,
    1/C_B on B): r = Σ w w' v / sqrt(Σ w² v · Σ w'² v), for v = calls and v = calls², the smaller one."""
    from scipy import special

    u = stats.norm.isf(p)
    total = p
    for k0, k1 in zip(splits[:-1], splits[1:], strict=True):
        weights = []
        for k in (k0, k1):
            c_a, c_b = sum(calls[:k]), sum(calls[k:])
            weights.append([-1 / c_a if i < k else 1 / c_b for i in range(len(calls))])
        r = min(
            sum(w0 * w1 * v for w0, w1, v in zip(*weights, var, strict=True))
            / math.sqrt(sum(w * w * v for w, v in zip(weights[0], var, strict=True)))
            / math.sqrt(sum(w * w * v for w, v in zip(weights[1], var, strict=True)))
            for var in (list(calls), [c * c for c in calls])
        )
        total += 2 * special.owens_t(u, math.sqrt((1 - r) / (1 + r)))
    return min(1.0, len(splits) * p, total)


def call_level_test(
    calls: np.ndarray,
    time: np.ndarray,
    sumsq: np.ndarray | None,
    k: int,
    theta: float,
    pooled: tuple[float, float] | None = None,
) -> dict:
    """The call-level test of H0: mean(B) ≤ (1 + θ) mean(A) at split k, by explicit loops (engine.inference's
    module docstring is the specification): pooled means, sandwich variances with an AR(1) inflation, floored by the
    pooled relative dispersion, the per-call floor, Welch–Satterthwaite degrees of freedom that carry the uncertainty
    of ρ̂, one-sided p (not adjusted for the choice of split)."""
    n = len(calls)
    sides = [range(0, k), range(k, n)]
    if any(sum(time[i] for i in idx) <= 0 for idx in sides):  # a side without time: no ratio
        nan = math.nan
        return {"t": nan, "dof": nan, "p": nan, "rho": nan, "mean_a": nan, "mean_b": nan, "se": nan, "log_ratio": nan}
    means, ee, acov = [], 0.0, 0.0
    resid = []
    for idx in sides:
        c = sum(calls[i] for i in idx)
        mu = sum(time[i] for i in idx) / c
        e = [time[i] - mu * calls[i] for i in idx]
        means.append(mu)
        resid.append(e)
        ee += sum(v * v for v in e) / mu**2  # pooled on the relative scale
        acov += sum(e[j] * e[j + 1] for j in range(len(e) - 1)) / mu**2
    rho_hat = acov / ee if ee > 0 else 0.0
    fixed = rho_hat + 2 * (1 + 3 * rho_hat) / n  # each side demeaned on its own: Kendall's bias of a side
    worth = n
    if pooled is not None:  # shrunk towards the pool's ρ̄ as a posterior mean; it rests on n + n₀ intervals
        worth = n + pooled[1]
        fixed = (n * fixed + pooled[1] * pooled[0]) / worth
    rho = min(max(fixed + 0.5 * math.sqrt(max(1 - fixed**2, 0.0) / worth), 0.0), 0.9)  # half a standard error above
    inflation = (1 + rho) / (1 - rho)
    dispersion = ee / sum(calls)  # relative, per call, both sides pooled
    u, dof = [], []
    for idx, mu, e in zip(sides, means, resid, strict=True):
        size = len(idx)
        c = sum(calls[i] for i in idx)
        own = sum(v * v for v in e) / c**2
        v = size / max(size - inflation, 1.0) * max(own, dispersion * mu**2 / c) * inflation
        d = max(size * (1 - rho) / (1 + rho) - 1, 1.0)
        d = max(2 / (2 / d + 4 / ((1 - rho**2) * worth)), 1.0)
        if sumsq is not None and not any(math.isnan(sumsq[i]) for i in idx):
            pairs = sum(calls[i] - 1 for i in idx)
            if pairs > 0:
                v_calls = sum(sumsq[i] for i in idx) / pairs / c
                if v_calls > v:
                    v, d = v_calls, pairs
        u.append(v / mu**2)
        dof.append(d)
    se = math.sqrt(u[0] + u[1])
    log_ratio = math.log(means[1] / means[0])
    excess = log_ratio - math.log1p(theta)
    found = {"rho": rho, "mean_a": means[0], "mean_b": means[1], "se": se, "log_ratio": log_ratio}
    if se == 0:  # both sides constant: a certain answer
        t = math.copysign(math.inf, excess) if excess else math.nan
        return {"t": t, "dof": math.inf, "p": 0.0 if t > 0 else 1.0, **found}
    t = excess / se
    nu = (u[0] + u[1]) ** 2 / (u[0] ** 2 / dof[0] + u[1] ** 2 / dof[1])
    return {"t": t, "dof": nu, "p": stats.t.sf(t, nu), **found}


def collateral_culprits(verdicts: pd.DataFrame, found: Impact, settings: EngineSettings | None = None) -> pd.DataFrame:
    """engine.impact.collateral_culprits as it was before it was vectorised: a loop over the detections, heaviest first,
    each tested against every statement. Kept to check the vectorised one against, output for output.

    For each latency detection whose cause the counters left open (`unexplained`, `more_blocks_read`: a statement
    with a change of its own keeps that cause), the statement whose load rose at the same change point and added most
    database time: `culprit` (its query_key) and `rose` (what rose, in words: "its database time ×40"); None
    elsewhere. Indexed like `verdicts`. Only a statement of the detection's own database (its dbid in the impact),
    never the statement itself, never a control statement (BEGIN, COMMIT, SET: their time is the others' waits).

    At the same change point: the other statement's own change (its detection's change_at; a new statement's or the
    deploy's own statement's first interval; otherwise the deploy, where the load is compared) lies within the
    tolerance of the detection's change. Its load rose, in one of three ways:

    - its database time (execution time per minute): it is itself a detection, a surge, new or the new half of a
      rewrite, or its time per minute at least doubled (surge_ratio); and what it added per minute is at least both
      what the detection's slowdown added per minute and new_statement_share of its database's time after. The
      first floor makes it a plausible cause (a load smaller than the delay it would explain explains nothing; and
      of several slowed statements the heaviest is never called collateral of a lighter one), the second makes it
      matter to the database (a rise of a few milliseconds per minute starves no one).
    - its shared blocks read per minute: at least surge_ratio × before, the blocks it added at least
      new_statement_share of its database's blocks read per minute after (I/O that competes with the detection's).
    - the deploy's own DDL, or a statement first run from the deploy on (a migration's backfill), called at most
      ONE_OFF_CALLS times in the window, running (holding its lock) at the change: calls waiting on a lock held L ms
      (a call's time) during a window of W ms after the deploy can have waited at most L each, and at most L/W of the
      detection's calls fall in it, so n such calls can explain at most n · L² / W of the mean per call; that must
      reach half the detection's added mean per call. A quick DROP INDEX (milliseconds) so explains nothing, a
      migration that held an ACCESS EXCLUSIVE lock for seconds explains its waiters, and a statement of many calls
      (a CALL or COPY a million times) holds no lock, whatever its calls add up to.

    The detections are taken heaviest first (by the time they added), and a statement named collateral is no culprit
    of another: the waiters on a migration's lock are all the lock's collateral, not one another's."""
    settings = settings or EngineSettings()
    out = pd.DataFrame({"culprit": None, "rose": None}, index=verdicts.index, dtype=object)
    if verdicts.empty or found.statements.empty:
        return out
    s = found.statements.set_index("query_key")
    detected = verdicts[verdicts["verdict"] == Verdict.DETECTED]
    change_of = detected.set_index("query_key")["change_at"]
    open_cause = detected[
        detected["cause"].isin([Cause.UNEXPLAINED.value, Cause.MORE_BLOCKS_READ.value]) & detected["change_at"].notna()
    ]
    if open_cause.empty:
        return out
    added = s["exec_ms_per_min_after"] - s["exec_ms_per_min_before"]
    blocks_added = s["blks_read_per_min_after"] - s["blks_read_per_min_before"]
    db_time = s.groupby("dbid")["exec_ms_per_min_after"].sum()
    db_blocks = s.groupby("dbid")["blks_read_per_min_after"].sum()
    minutes = settings.window.total_seconds() / 60.0
    window_ms = settings.window.total_seconds() * 1000.0
    own = s["kind"] == DEPLOY_STATEMENT
    # the deploy's DDL, or a statement run once or twice from the deploy on (a migration's backfill UPDATE holds its
    # row locks as DDL does), called at most ONE_OFF_CALLS times in the window: each call held its lock that long
    calls = s["calls_before"] + s["calls_after"]
    holder = (own | (s["calls_before"] == 0)) & (calls > 0) & (calls <= ONE_OFF_CALLS)
    with np.errstate(divide="ignore", invalid="ignore"):
        held_ms = ((s["exec_ms_per_min_before"] + s["exec_ms_per_min_after"]) * minutes / calls).where(holder, 0.0)
    onset = s["onset_at"].where(s["kind"].isin([NEW, REPLACED, DEPLOY_STATEMENT]) & s["onset_at"].notna())
    onset = onset.fillna(found.deployed_at) if found.deployed_at is not None else onset
    onset = change_of.reindex(s.index).fillna(onset) if len(change_of) else onset
    with np.errstate(divide="ignore", invalid="ignore"):
        time_ratio = s["exec_ms_per_min_after"] / s["exec_ms_per_min_before"]
        block_ratio = s["blks_read_per_min_after"] / s["blks_read_per_min_before"]
    evidence = (
        s.index.isin(change_of.index)
        | s["kind"].isin([SURGE, N_PLUS_ONE, NEW]).to_numpy()
        | ((s["kind"] == REPLACED) & (s["calls_before"] == 0)).to_numpy()
        | (time_ratio >= settings.surge_ratio).to_numpy()
    )
    eligible = s["statement_class"].ne(CONTROL)
    tolerance = pd.Timedelta(settings.tolerance)
    victims: set[Any] = set()
    order = open_cause.assign(_added=added.reindex(open_cause["query_key"]).to_numpy())
    for label, row in order.sort_values("_added", ascending=False, na_position="last").iterrows():
        key = row["query_key"]
        if key not in s.index:
            continue
        dbid = s.at[key, "dbid"]
        near = eligible & (s["dbid"] == dbid) & ((onset - row["change_at"]).abs() <= tolerance)
        near &= ~s.index.isin([key, *victims])
        floor = max(float(np.nan_to_num(row["_added"])), settings.new_statement_share * float(db_time.get(dbid, 0.0)))
        by_time = near & evidence & ~own & (added >= floor) & (added > 0)
        by_blocks = (
            near
            & ~own
            & (block_ratio >= settings.surge_ratio)
            & (blocks_added >= settings.new_statement_share * float(np.nan_to_num(db_blocks.get(dbid, 0.0))))
            & (blocks_added > 0)
        )
        slowed = float(np.nan_to_num(s.at[key, "mean_after_ms"] - s.at[key, "mean_before_ms"]))
        by_lock = near & holder & (calls * held_ms**2 / window_ms >= 0.5 * slowed) & (held_ms > 0)
        weight = added.where(~holder, calls * held_ms / minutes)
        candidates = weight[by_time | by_blocks | by_lock]
        if candidates.empty:
            continue
        culprit = candidates.idxmax()
        if by_lock[culprit]:
            who = "the deploy's own statement" if own[culprit] else "a statement run once at the deploy"
            rose = f"{who}, running {held_ms[culprit] / 1000.0:,.1f} s"
            rose += f" a call ({calls[culprit]} calls)" if calls[culprit] > 1 else ""
        elif by_time[culprit]:
            rose = (
                f"its database time ×{time_ratio[culprit]:,.1f}"
                if np.isfinite(time_ratio[culprit])
                else f"new, {s.at[culprit, 'exec_ms_per_min_after']:,.0f} ms of database time per minute"
            )
        else:
            rose = (
                f"its blocks read per minute ×{block_ratio[culprit]:,.1f}"
                if np.isfinite(block_ratio[culprit])
                else f"new, {s.at[culprit, 'blks_read_per_min_after']:,.0f} blocks read per minute"
            )
        out.at[label, "culprit"] = culprit
        out.at[label, "rose"] = rose
        victims.add(key)
    return out
