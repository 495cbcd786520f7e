"""The canary arm (issue 29): a canary version connecting as its own database role is compared with the stable role
over the same minutes, statement key by statement key — a concurrent two-arm test (docs/canary.md).

pg_stat_statements keys its counters by user, so the same statement run by two roles is two series scraped at the
same moments. Interval by interval, the stable arm's per-call mean m_i = S_i / s_i is the reference for that interval;
the canary's calls c_i at the factor r would take r · c_i · m_i. The factor is the ratio estimator

    r̂ = A / B,   A = Σ T_i (the canary's time),   B = Σ c_i · m_i (its calls at the stable arm's interval means),

over the intervals where both arms ran. A load change on the whole server (a per-interval factor L_i on both arms)
multiplies T_i and m_i alike, so it cancels in every term: r̂ estimates canary/stable whatever the load does, and a
load step at the deploy, which before/after alone blames on the deploy, is no evidence here. A and B are each
unbiased given the calls (m_i is the mean of s_i calls), so r̂ carries only a ratio estimator's second-order bias, not
the Jensen bias of a mean of log-ratios of sparse intervals.

H0: r ≤ 1 + θ, one-sided, on the log scale. The variance is the linearisation (sandwich) of A − r·B: the residuals
z_i = T_i − r̂ · c_i · m_i, Σ z_i² with the lag-1 serial correlation of z the engine's rules give (inference's
bias-corrected ρ̂ with its margin, inflation (1 + ρ)/(1 − ρ), degrees of freedom n(1 − ρ)/(1 + ρ) − 1 and the
uncertainty of ln f), floored by the per-call variance both arms' stddev_exec_time gives (σ²_c · C + r² σ²_s · Σ c_i²
/ s_i), the larger one taken, as the engine's test takes its larger variance. Student's t on those degrees of freedom.
With the statements' noise prior from their earlier days (`prior`, as `analyse` takes it), the prior's long-run
inflation — scaled up for intervals busier than its own, and unless the window is more correlated than it allows —
replaces the window's ρ̂, and its many intervals the window's uncertainty of ln f: the residuals' per-call part is
larger than the single series' of the prior (each arm has only part of the calls), so their inflation is at most it.

The budget B of a canary analysis (settings.false_alert_budget, its own, beside the deploy's before/after budget) is
shared evenly among the decidable statement keys (weighted Bonferroni with equal weights: they use neither arm's
latency). detected: p ≤ B / m, p ≤ (1 − 95%) / 2 (its own 95% interval lies above 1 + θ: in a family of fewer than
four keys B / m alone is the looser), and the canary's mean at least settings.min_rise_ms above the stable's;
no_regression (cleared): the one-sided upper bound at settings.clear_level lies within the tolerance
1 + max(θ, min_rise / mean_stable); inconclusive otherwise; insufficient_data: fewer than settings.min_samples paired
intervals with canary calls, or fewer than settings.min_calls calls in either arm.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from radar_pipeline.engine import fdr
from radar_pipeline.engine.frames import CANARY_FRAME
from radar_pipeline.engine.gate import GATE_FACTOR, MAX_OPEN_EXCESS, MAX_TOTAL_EXCESS, deploy_state
from radar_pipeline.engine.inference import CI_LEVEL, INFLATION_MAX, RHO_MAX, _bias_corrected, _serial_correlation
from radar_pipeline.engine.samples import STDDEV, window_samples
from radar_pipeline.engine.settings import EngineSettings
from radar_pipeline.engine.vocabulary import Reason, Verdict

# The columns of canary_analyse's result, in order (engine/frames.py declares their dtypes).
CANARY_COLUMNS = tuple(CANARY_FRAME.names)


class CanaryInputError(ValueError):
    """The arms' counters cannot be analysed as given (a missing column, a window that ends before it starts)."""


def canary_analyse(
    canary: pd.DataFrame,
    stable: pd.DataFrame,
    start: pd.Timestamp,
    end: pd.Timestamp,
    settings: EngineSettings | None = None,
    prior: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """The two-arm test of every statement key the canary arm ran in (start, end] (module docstring).

    canary, stable: cumulative counters of each arm (`query_key`, the statement key shared by both arms, e.g.
    (dbid, queryid, toplevel); `captured_at` tz-aware; `calls`; `total_exec_time` ms; optional `stddev_exec_time`),
    one row per key per scrape where it changed (an absent row means no calls since the last), including each key's
    last row at or before `start` where it has one (its baseline). Scrapes of both arms are aligned on the union of
    their capture times. Returns one row per key of the canary arm, CANARY_COLUMNS.

    prior: the statements' noise prior from their earlier days, as `analyse` takes it (query_key — the shared key —,
    serial_correlation, intervals, optionally calls_per_interval); where a key has one of at least
    settings.prior_min_intervals and the window does not conflict with it, its serial correlation replaces the
    window's own (module docstring).
    """
    settings = settings or EngineSettings()
    start, end = pd.Timestamp(start), pd.Timestamp(end)
    if start.tzinfo is None or end.tzinfo is None:
        raise CanaryInputError("start and end must be tz-aware")
    if end <= start:
        raise CanaryInputError(f"the canary window ends ({end}) at or before it starts ({start})")
    for name, frame in (("canary", canary), ("stable", stable)):
        missing = [c for c in ("query_key", "captured_at", "calls", "total_exec_time") if c not in frame]
        if missing:
            raise CanaryInputError(f"{name} counters lack {', '.join(missing)}")
    keys = pd.Index(pd.unique(canary["query_key"]))
    if keys.empty:
        return pd.DataFrame({c: pd.Series(dtype=object if c in ("query_key", "verdict", "reason") else float)
                             for c in CANARY_COLUMNS})  # fmt: skip
    grid = _grid(canary, stable, start, end)
    arms = [_samples(frame, keys, grid, start, end) for frame in (canary, stable)]
    return CANARY_FRAME.check(_decide(keys, arms[0], arms[1], settings, _prior_of(keys, prior)), "canary_analyse")


def _prior_of(keys: pd.Index, prior: pd.DataFrame | None) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Per key: the prior's serial correlation, intervals and calls per interval (NaN where none)."""
    if prior is None or prior.empty:
        return None
    missing = [c for c in ("query_key", "serial_correlation", "intervals") if c not in prior]
    if missing:
        raise CanaryInputError(f"prior lacks {', '.join(missing)}")
    at = keys.get_indexer(prior["query_key"])
    found = at >= 0
    out = [np.full(len(keys), np.nan) for _ in range(3)]
    for column, values in zip(out, ("serial_correlation", "intervals", "calls_per_interval"), strict=True):
        if values in prior:
            column[at[found]] = pd.to_numeric(prior[values], errors="coerce").to_numpy(dtype=np.float64)[found]
    return out[0], out[1], out[2]


def _grid(canary: pd.DataFrame, stable: pd.DataFrame, start: pd.Timestamp, end: pd.Timestamp) -> np.ndarray:
    """The scrape moments in (start, end] of either arm, with `start` first (ns since the epoch)."""
    times = pd.to_datetime(pd.concat([canary["captured_at"], stable["captured_at"]]), utc=True)
    inside = times[(times > start) & (times <= end)]
    moments = np.unique(inside.to_numpy(dtype="datetime64[ns]").astype(np.int64))
    return np.concatenate([[start.value], moments])


def _samples(
    frame: pd.DataFrame, keys: pd.Index, grid: np.ndarray, start: pd.Timestamp, end: pd.Timestamp
) -> pd.DataFrame:
    """One arm's interval samples on the common grid (key code, end ns, calls, time, sumsq): each key's cumulative
    counters carried forward to every grid moment (an absent row means no calls), then cut into intervals as the
    engine cuts them (engine.samples: resets dropped, intervals without calls give no sample)."""
    code = keys.get_indexer(frame["query_key"])
    rows = frame.loc[code >= 0]
    if rows.empty:
        return pd.DataFrame({"code": [], "end": [], "calls": [], "time": [], "sumsq": []})
    columns = ["calls", "total_exec_time", *([STDDEV] if STDDEV in rows else [])]
    data = pd.DataFrame(
        {
            "code": code[code >= 0],
            "at": pd.to_datetime(rows["captured_at"], utc=True).to_numpy(dtype="datetime64[ns]").astype(np.int64),
            **{c: pd.to_numeric(rows[c], errors="coerce").to_numpy(dtype=np.float64) for c in columns},
        }
    )
    data = data[data["at"] <= end.value].sort_values(["at", "code"], kind="stable")
    present = np.unique(data["code"].to_numpy())
    cells = pd.DataFrame({"at": np.tile(grid, len(present)), "code": np.repeat(present, len(grid))})
    filled = pd.merge_asof(cells.sort_values("at", kind="stable"), data, on="at", by="code", direction="backward")
    filled = filled.dropna(subset=["calls", "total_exec_time"])
    counters = pd.DataFrame(
        {
            "query_key": filled["code"].to_numpy(),
            "captured_at": pd.to_datetime(filled["at"].to_numpy(), utc=True),
            "calls": filled["calls"].to_numpy(),
            "total_exec_time": filled["total_exec_time"].to_numpy(),
            **({STDDEV: filled[STDDEV].to_numpy()} if STDDEV in filled else {}),
        }
    )
    got = window_samples(counters, start.value, end.value)
    group = got.group
    return pd.DataFrame(
        {
            "code": np.asarray(got.keys, dtype=np.int64)[group] if got.groups else np.zeros(0, dtype=np.int64),
            "end": got.end,
            "calls": got.calls.astype(np.float64),
            "time": got.time.astype(np.float64),
            "sumsq": got.sumsq if got.sumsq is not None else np.full(len(got.end), np.nan),
        }
    )


def _decide(
    keys: pd.Index,
    canary: pd.DataFrame,
    stable: pd.DataFrame,
    settings: EngineSettings,
    prior: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
) -> pd.DataFrame:
    """The test of every key from both arms' samples (module docstring)."""
    from scipy import special, stats

    g = len(keys)
    pair = canary.merge(stable, on=["code", "end"], suffixes=("_c", "_s"), how="inner").sort_values(["code", "end"])
    code = pair["code"].to_numpy(dtype=np.int64)
    c, t = pair["calls_c"].to_numpy(), pair["time_c"].to_numpy()
    s, st = pair["calls_s"].to_numpy(), pair["time_s"].to_numpy()
    m = st / s  # the stable arm's mean in the canary's interval (s > 0: a sample has calls)

    def total(values: np.ndarray) -> np.ndarray:
        return np.bincount(code, weights=values, minlength=g)

    n = np.bincount(code, minlength=g).astype(np.float64)
    calls_c, calls_s = total(c), total(s)
    a, b = total(t), total(c * m)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = a / b
        z = t - r[code] * c * m
        ee = total(z * z)
        same = code[1:] == code[:-1]
        acov = np.bincount(code[1:][same], weights=(z[1:] * z[:-1])[same], minlength=g)
        rho, _ = _serial_correlation(np.where(ee > 0, acov / ee, 0.0), np.maximum(n, 1.0))
        rho = np.clip(rho, 0.0, RHO_MAX)
        inflation = (1 + rho) / (1 - rho)
        dof_emp = np.maximum(n * (1 - rho) / (1 + rho) - 1, 1.0)
        dof_emp = np.maximum(2 / (2 / dof_emp + 4 / ((1 - rho**2) * np.maximum(n, 1.0))), 1.0)
        if prior is not None:
            # The prior's long-run inflation, scaled up where the paired intervals are busier than its own (the
            # overdispersion's share grows at most in proportion): it bounds the residuals' own, whose per-call part
            # is larger (each arm has only part of the calls). Used unless the window is more correlated than it
            # allows (the engine's prior-data conflict check, Evans & Moshonov 2006).
            p_rho, p_n, p_busy = prior
            p_n = np.minimum(p_n, settings.prior_max_intervals)
            f_h = np.clip((1 + p_rho) / (1 - p_rho), 1.0, INFLATION_MAX)
            ratio = np.where(p_busy > 0, (calls_c + calls_s) / np.maximum(n, 1.0) / p_busy, np.inf)
            f_p = np.clip(1 + (f_h - 1) * np.maximum(ratio, 1.0), 1.0, INFLATION_MAX)
            rho_p = (f_p - 1) / (f_p + 1)
            rho_w = _bias_corrected(np.where(ee > 0, acov / ee, 0.0), np.maximum(n, 1.0))
            spread = np.sqrt(np.maximum(1 - rho_p**2, 1e-12) * (1 / np.maximum(n, 1.0) + 1 / np.maximum(p_n, 1.0)))
            conflict = (rho_w - rho_p) / spread > special.ndtri(1 - settings.prior_conflict_alpha)
            use = (p_n >= settings.prior_min_intervals) & np.isfinite(f_p) & ~conflict
            dof_p = np.maximum(n * (1 - rho_p) / (1 + rho_p) - 1, 1.0)
            dof_p = np.maximum(2 / (2 / dof_p + 4 / ((1 - rho_p**2) * np.maximum(p_n, 1.0))), 1.0)
            rho = np.where(use, rho_p, rho)
            inflation = np.where(use, f_p, inflation)
            dof_emp = np.where(use, dof_p, dof_emp)
        v_emp = n / np.maximum(n - inflation, 1.0) * ee * inflation
        # The per-call floor from each arm's intervals' own sums of squares (NaN where any is unknown).
        ss_c, dof_c = total(pair["sumsq_c"].to_numpy()), total(np.maximum(c - 1, 0.0))
        ss_s, dof_s = total(pair["sumsq_s"].to_numpy()), total(np.maximum(s - 1, 0.0))
        part_c = ss_c / dof_c * calls_c
        part_s = r**2 * ss_s / dof_s * total(c * c / s)
        v_calls = part_c + part_s
        dof_calls = v_calls**2 / (part_c**2 / dof_c + part_s**2 / dof_s)
        use_calls = v_calls > v_emp  # False where NaN
        v = np.where(use_calls, v_calls, v_emp)
        dof = np.where(use_calls, dof_calls, dof_emp)
        se = np.sqrt(v) / a
        log_r = np.log(r)
        excess = log_r - np.log1p(settings.threshold)
        tstat = excess / se
    testable = (n >= settings.min_samples) & (calls_c >= settings.min_calls) & (calls_s >= settings.min_calls)
    testable &= (a > 0) & (b > 0) & np.isfinite(se)
    certain = testable & (se == 0)
    dof = np.where(testable & np.isfinite(dof), dof, 1.0)
    p = np.where(testable, stats.t.sf(np.where(testable, np.nan_to_num(tstat), 0.0), dof), np.nan)
    p = np.where(certain, np.where(excess > 0, 0.0, 1.0), p)
    decidable = int(testable.sum())
    share = np.where(testable, 1.0 / max(decidable, 1), np.nan)
    significant, p_family = fdr.bonferroni(p, share, settings.false_alert_budget)
    # A rise of the mean below min_rise_ms is no finding whatever its factor (settings), as before/after has it.
    with np.errstate(invalid="ignore", divide="ignore"):
        worth = (a - b) / np.where(calls_c > 0, calls_c, 1.0) >= settings.min_rise_ms
    # In a family of fewer than B / 0.025 keys (four at B = 0.1) p ≤ B / m is looser than the 95% interval's own
    # level: a detection there could be shown with an interval reaching below 1 + θ (×0.02 at one degree of freedom,
    # seen in CI). A detection is claimed only where the interval it is shown with agrees.
    own = p <= (1 - CI_LEVEL) / 2
    detected = testable & worth & significant & own

    half = stats.t.ppf(0.5 + CI_LEVEL / 2, dof) * np.where(testable, se, np.nan)
    margin = stats.t.ppf(settings.clear_level, dof) * np.where(testable, se, np.nan)
    with np.errstate(divide="ignore", invalid="ignore"):
        mean_stable = np.where(calls_c > 0, b / calls_c, np.nan)  # the stable arm's mean at the canary's calls
        mean_canary = np.where(calls_c > 0, a / calls_c, np.nan)
        tolerance = np.log1p(np.maximum(settings.threshold, settings.min_rise_ms / mean_stable))
    bound = log_r + margin
    cleared = testable & ~detected & (bound <= tolerance)
    precise = margin <= tolerance

    verdict = np.full(g, Verdict.INSUFFICIENT_DATA.value, dtype=object)
    reason = np.where(n < settings.min_samples, Reason.FLOOR_SAMPLES.value, Reason.FLOOR_CALLS.value).astype(object)
    verdict[testable] = Verdict.INCONCLUSIVE.value
    reason[testable] = np.where(precise, Reason.INTERVAL_SPANS_THRESHOLD.value, Reason.INTERVAL_TOO_WIDE.value)[
        testable
    ]
    verdict[cleared] = Verdict.NO_REGRESSION.value
    reason[cleared] = Reason.NOT_SIGNIFICANT.value
    verdict[detected] = Verdict.DETECTED.value
    reason[detected] = Reason.SIGNIFICANT.value
    keep = lambda x: np.where(testable, x, np.nan)  # noqa: E731
    return pd.DataFrame(
        {
            "query_key": list(keys),
            "verdict": verdict,
            "reason": reason,
            "change_factor": np.where(n > 0, r, np.nan),
            "factor_low": keep(np.exp(log_r - half)),
            "factor_high": keep(np.exp(log_r + half)),
            "factor_bound": keep(np.exp(bound)),
            "p_value": p,
            "p_family": p_family,
            "budget_share": share,
            "mean_canary_ms": mean_canary,
            "mean_stable_ms": mean_stable,
            "calls_canary": calls_c.astype(np.int64),
            "calls_stable": calls_s.astype(np.int64),
            "intervals": n.astype(np.int64),
            "serial_correlation": keep(rho),
        },
        columns=list(CANARY_COLUMNS),
    )


def canary_state(
    verdicts: pd.DataFrame,
    threshold: float = 0.2,
    max_open_excess: float = MAX_OPEN_EXCESS,
    max_total_excess: float = MAX_TOTAL_EXCESS,
    gate_factor: float = GATE_FACTOR,
) -> str:
    """A canary analysis's state for the gate, by the gate's own rule (engine.gate.deploy_state, as radar.deploy_state
    words it) on the canary arm: `fail` when any statement is detected; `pass` when nothing is, no statement not
    cleared may have added more than `max_open_excess` of the canary's execution time (calls × mean) beyond θ at its
    upper bound with that bound beyond the gate factor, and the others together (their excesses summed: the arm has no
    deploy estimates) not more than `max_total_excess`; `inconclusive` otherwise (nothing ran, or too much left
    open)."""
    arm = pd.DataFrame(
        {
            "verdict": verdicts["verdict"].to_numpy(),
            "calls_after": pd.to_numeric(verdicts["calls_canary"], errors="coerce").to_numpy(np.float64),
            "mean_after_ms": pd.to_numeric(verdicts["mean_canary_ms"], errors="coerce").to_numpy(np.float64),
            "factor_bound": pd.to_numeric(verdicts["factor_bound"], errors="coerce").to_numpy(np.float64),
        }
    )
    return deploy_state(arm, threshold, max_open_excess, max_total_excess, gate_factor).state
