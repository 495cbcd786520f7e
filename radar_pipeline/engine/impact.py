"""What else a deploy changed, from the same window's counters: load, not latency (pure; no I/O, no clock).

Per statement (fingerprints merged as for the verdicts): calls, execution time and rows either side of the deploy;
calls and execution time per minute of window; rows per call; whether it is new (no calls before, calls after) or
stopped (calls before, none after). Per target and per database (dbid): execution time per minute before and after.

A statement first seen inside the window (no row at or before its start, and not at the target's first scrape)
started counting from zero when pg_stat_statements created its entry, so its first row's counters are
its first interval's (the latency engine, which needs a per-call variance, leaves that interval out; the load
accounting must not, or a new statement's first minutes vanish).

**Call surges.** The test is on the statement's share of the target's calls, so a traffic rise that lifts every
statement alike is not a surge. With C_b, C_a the statement's calls before and after and R_b, R_a the rest of the
target's, the share ratio is r = (C_a / R_a) / (C_b / R_b). H0: r ≤ ρ (`surge_ratio`, a practical threshold inside
the hypothesis); one-sided, on the log scale:

    t = (log r̂ − log ρ) / se,   se² = φ · (1/C_a + 1/C_b + 1/R_a + 1/R_b)   (½ added to each count)

φ is the statement's own dispersion relative to the target's throughput: each of its intervals (after its first, so
an interval spans from the previous sample of the statement to this one and holds every call made in it) has an
exposure x_k, the target's calls in that span, and a quasi-Poisson fit with one rate per side gives the Pearson
φ = max(1, Σ (c_k − π x_k)² / (π x_k) / (m − 2)); the reference distribution is Student's t with m − 2 degrees of
freedom, which pays for estimating φ from a few intervals. Overdispersed counts (calls arrive in bursts: requests,
batches, retries) inflate φ; a Poisson test would alert on every burst.

The family: the same weighted Bonferroni as the latency verdicts (`decision.family_weights`, weights from the
execution time before the deploy) with the same budget B (`false_alert_budget`): p_family = min(1, p / w), a surge
when p_family ≤ B. The surge family is a second family of its own, spending B per analysis as the latency family does.
A surge of a statement whose latency did not change (its latency verdict is not a detection and its mean after is
under (1 + θ) × before) is the N+1 pattern: `n_plus_one`; otherwise `surge`.

New statements are *heavy* when their execution time after the deploy is at least `new_statement_share` of the
target's. Rows per call changed: both sides have calls and rows per call moved by at least `surge_ratio` either way
(and by at least one row per call).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import numpy as np
import pandas as pd

from radar_pipeline.engine.decision import family_weights
from radar_pipeline.engine.frames import IMPACT_STATEMENTS, IMPACT_SUMMARY
from radar_pipeline.engine.samples import WindowSamples, window_samples
from radar_pipeline.engine.settings import EngineSettings
from radar_pipeline.engine.vocabulary import IMPACT_KINDS, Cause, Verdict

NEW, STOPPED, SURGE, N_PLUS_ONE, ROWS_PER_CALL = IMPACT_KINDS
KINDS = IMPACT_KINDS
STATEMENT_COLUMNS = IMPACT_STATEMENTS.names
SUMMARY_COLUMNS = IMPACT_SUMMARY.names
ALL_DATABASES = -1  # the summary row of the whole target


@dataclass(frozen=True)
class Impact:
    """One analysis's load picture: `summary` a row per database plus the target (dbid = ALL_DATABASES); `statements`
    a row per statement (kind None when nothing notable changed); `changes` the notable rows, heaviest first."""

    summary: pd.DataFrame
    statements: pd.DataFrame

    @property
    def changes(self) -> pd.DataFrame:
        out = self.statements[self.statements["kind"].notna()]
        added = out["exec_ms_per_min_after"] - out["exec_ms_per_min_before"]
        return out.assign(_added=added).sort_values("_added", ascending=False).drop(columns="_added")


def impact(
    counters: pd.DataFrame,
    deploy_at: datetime | pd.Timestamp,
    settings: EngineSettings | None = None,
    verdicts: pd.DataFrame | None = None,
    watched_since: datetime | pd.Timestamp | None = None,
) -> Impact:
    """The deploy's impact summary and per-statement changes (module doc). `verdicts`, the latency engine's result on
    the same counters (its query_key, verdict and change_factor), tells an N+1 surge from a surge that also slowed.
    `watched_since`, the target's first scrape: a statement first seen at it was not created then (None: the target
    was watched before the window)."""
    settings = settings or EngineSettings()
    deploy = int(pd.Timestamp(deploy_at).tz_convert("UTC").as_unit("ns").value)
    width = int(settings.window.total_seconds() * 1e9)
    lo, hi = deploy - width, deploy + width
    minutes = settings.window.total_seconds() / 60.0
    extra = ("rows",) if "rows" in counters.columns else ()
    since = None if watched_since is None else int(pd.Timestamp(watched_since).tz_convert("UTC").as_unit("ns").value)
    samples = window_samples(_with_creation_rows(counters, lo, since), lo, hi, extra)
    g = samples.groups
    group = samples.group
    after = samples.end > deploy
    side = 2 * group + after

    def per_side(weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        both = np.bincount(side, weights=weights, minlength=2 * g).reshape(g, 2)
        return both[:, 0], both[:, 1]

    calls_b, calls_a = per_side(samples.calls)
    time_b, time_a = per_side(samples.time)
    n_b, n_a = per_side(np.ones(len(samples.end)))
    rows = samples.extra.get("rows", np.full(len(samples.end), np.nan))
    known = ~np.isnan(rows)
    rows_b, rows_a = per_side(np.where(known, rows, 0.0))
    rcalls_b, rcalls_a = per_side(np.where(known, samples.calls, 0.0))

    dbid = _dbid_of(counters, samples.keys)
    with np.errstate(divide="ignore", invalid="ignore"):
        rpc_b = np.where(rcalls_b > 0, rows_b / rcalls_b, np.nan)
        rpc_a = np.where(rcalls_a > 0, rows_a / rcalls_a, np.nan)
        mean_b = np.where(calls_b > 0, time_b / calls_b, np.nan)
        mean_a = np.where(calls_a > 0, time_a / calls_a, np.nan)

    out = pd.DataFrame(
        {
            "query_key": samples.keys,
            "dbid": dbid,
            "calls_before": calls_b.astype(np.int64),
            "calls_after": calls_a.astype(np.int64),
            "calls_per_min_before": calls_b / minutes,
            "calls_per_min_after": calls_a / minutes,
            "exec_ms_per_min_before": time_b / minutes,
            "exec_ms_per_min_after": time_a / minutes,
            "mean_before_ms": mean_b,
            "mean_after_ms": mean_a,
            "rows_per_call_before": rpc_b,
            "rows_per_call_after": rpc_a,
        }
    )
    test = _surge_test(samples.end, group, after, samples.calls, g, calls_b, calls_a, settings)
    decidable = (n_b >= settings.min_samples) & (n_a >= settings.min_samples) & (calls_b >= settings.min_calls)
    decidable &= ~np.isnan(test["p_value"])
    weight = family_weights(time_b, decidable, settings.budget_time_weight)
    p_family = np.where(decidable, np.minimum(1.0, test["p_value"] / weight), np.nan)
    surge = decidable & (p_family <= settings.false_alert_budget)
    out["share_ratio"], out["dispersion"] = test["share_ratio"], test["dispersion"]
    out["p_value"] = np.where(decidable, test["p_value"], np.nan)
    out["p_family"] = p_family

    latency_rose = _latency_rose(samples.keys, verdicts, mean_b, mean_a, settings)
    new = (calls_b == 0) & (calls_a > 0) & (_first_seen(counters, samples) > deploy)
    stopped = (calls_b > 0) & (calls_a == 0)
    total_after = time_a.sum()
    heavy = new & (time_a >= settings.new_statement_share * total_after) & (total_after > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        rpc_ratio = rpc_a / rpc_b
    rows_changed = (
        (calls_b >= settings.min_calls)
        & (calls_a >= settings.min_calls)
        & ((rpc_ratio >= settings.surge_ratio) | (rpc_ratio <= 1.0 / settings.surge_ratio))
        & (np.abs(rpc_a - rpc_b) >= 1.0)
    )
    kind = np.select(
        [new, stopped, surge & ~latency_rose, surge, rows_changed],
        [NEW, STOPPED, N_PLUS_ONE, SURGE, ROWS_PER_CALL],
        "",
    ).astype(object)
    kind[kind == ""] = None
    out["kind"] = kind
    out["heavy"] = heavy | (surge & (time_a - time_b >= settings.new_statement_share * total_after))
    first_after = _first_end(samples.end, group, after, g)
    onset = np.where(new, first_after, np.where(surge | rows_changed, deploy, np.iinfo(np.int64).min))
    out["onset_at"] = pd.to_datetime(onset.astype("datetime64[ns]"), utc=True)  # int64 min is NaT
    summary = _summary(out, minutes)
    return Impact(summary=summary, statements=out[STATEMENT_COLUMNS])


def _with_creation_rows(counters: pd.DataFrame, lo: int, watched_since: int | None) -> pd.DataFrame:
    """The counters plus, for every statement whose first row lies after the window's start and after the target's
    first scrape (`watched_since`, ns), a row of zeros just before it: its entry was created since the scrape before,
    so its first row's counters are its first interval's. A statement first seen at the target's first scrape (radar
    began watching inside the window) gets none: its counters hold everything since an unknown creation time, and
    counted as one interval they would make a surge of the server's whole history. Counters ordered by query_key (as
    the warehouse reads them) get the rows in place, so the samples' fast path holds."""
    if counters.empty:
        return counters
    t = counters["captured_at"].array.as_unit("ns").asi8
    keys = counters["query_key"]
    ordered = keys.is_monotonic_increasing
    earliest = pd.Series(t).groupby(keys.to_numpy(), sort=False).transform("min").to_numpy()
    is_first = (t == earliest) & (earliest > max(lo, watched_since if watched_since is not None else lo))
    if not is_first.any():
        return counters
    zeros = counters[is_first].copy()
    for name in ("calls", "total_exec_time", "rows", "shared_blks_read"):
        if name in zeros:
            zeros[name] = 0
    if "stddev_exec_time" in zeros:
        zeros["stddev_exec_time"] = 0.0
    zeros["captured_at"] = zeros["captured_at"] - pd.Timedelta(microseconds=1)
    out = pd.concat([counters, zeros], ignore_index=True)
    if not ordered:
        return out  # window_samples orders them
    # In place: each original row moves down by the zero rows inserted at or before it; a zero row sits just above
    # the first row it belongs to.
    shift = np.cumsum(is_first)
    position = np.concatenate([np.arange(len(t)) + shift, (np.flatnonzero(is_first) + shift[is_first] - 1)])
    order = np.empty(len(position), dtype=np.int64)
    order[position] = np.arange(len(position))
    return out.take(order).reset_index(drop=True)


def _first_seen(counters: pd.DataFrame, samples: WindowSamples) -> np.ndarray:
    """Per statement (its keys merged), when its first row was captured: an entry first seen after the deploy is new;
    one that existed before but had no calls in the window's first half is merely sparse."""
    if counters.empty:
        return np.zeros(samples.groups, dtype=np.int64)
    t = pd.Series(counters["captured_at"].array.as_unit("ns").asi8)
    first = t.groupby(counters["query_key"].to_numpy()).min()
    out = first.reindex(samples.keys).to_numpy(dtype=np.int64, copy=True)
    for g, merged in enumerate(samples.merged):
        if merged:
            out[g] = min(out[g], int(first.reindex(list(merged)).min()))
    return out


def _dbid_of(counters: pd.DataFrame, keys: np.ndarray) -> np.ndarray:
    if "dbid" not in counters.columns or not len(keys):
        return np.zeros(len(keys), dtype=np.int64)
    per_key = counters.groupby("query_key", sort=False)["dbid"].last()
    return per_key.reindex(keys).fillna(0).to_numpy(dtype=np.int64)


def _surge_test(
    end: np.ndarray,
    group: np.ndarray,
    after: np.ndarray,
    calls: np.ndarray,
    g: int,
    calls_b: np.ndarray,
    calls_a: np.ndarray,
    settings: EngineSettings,
) -> dict[str, np.ndarray]:
    """Per statement: the share ratio, its dispersion φ and the one-sided p of H0: share ratio ≤ surge_ratio."""
    total_b, total_a = calls_b.sum(), calls_a.sum()
    rest_b, rest_a = total_b - calls_b, total_a - calls_a
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = ((calls_a + 0.5) / (rest_a + 0.5)) / ((calls_b + 0.5) / (rest_b + 0.5))
    # Exposure of each sample: the target's calls with an end in (the statement's previous sample, this one]. Ends
    # are the few scrape times: the target's calls per time, cumulated over the sorted distinct times.
    codes, distinct = pd.factorize(end, sort=False)
    by_time = np.argsort(distinct)
    rank = np.empty(len(distinct), dtype=np.int64)
    rank[by_time] = np.arange(len(distinct))
    sorted_times = np.asarray(distinct)[by_time]
    cumulative = np.concatenate([[0.0], np.cumsum(np.bincount(rank[codes], weights=calls, minlength=len(distinct)))])
    upto = cumulative[rank[codes] + 1]
    follows = np.concatenate([[False], group[1:] == group[:-1]])
    start = np.concatenate([[0], end[:-1]])
    since = cumulative[np.searchsorted(sorted_times, start, side="right")]
    exposure = upto - since
    use = follows & (exposure > 0) & (after == np.concatenate([[False], after[:-1]]))  # spans within one side
    side = 2 * group + after
    c_side = np.bincount(side[use], weights=calls[use], minlength=2 * g)
    x_side = np.bincount(side[use], weights=exposure[use], minlength=2 * g)
    with np.errstate(divide="ignore", invalid="ignore"):
        rate = c_side / x_side
    expected = rate[side] * exposure
    with np.errstate(divide="ignore", invalid="ignore"):
        pearson = np.where(use & (expected > 0), (calls - expected) ** 2 / expected, 0.0)
    chi2 = np.bincount(group, weights=pearson, minlength=g)
    m = np.bincount(group[use], minlength=g)
    dof = m - 2.0
    with np.errstate(divide="ignore", invalid="ignore"):
        phi = np.where(dof >= 1, np.maximum(1.0, chi2 / dof), np.nan)
        se = np.sqrt(phi * (1 / (calls_a + 0.5) + 1 / (calls_b + 0.5) + 1 / (rest_a + 0.5) + 1 / (rest_b + 0.5)))
        t = (np.log(ratio) - np.log(settings.surge_ratio)) / se
    from scipy import stats  # imported where used: loading the code location stays cheap

    p = np.where(np.isnan(t), np.nan, stats.t.sf(t, np.maximum(dof, 1.0)))
    return {"share_ratio": ratio, "dispersion": phi, "p_value": p}


def _latency_rose(
    keys: np.ndarray,
    verdicts: pd.DataFrame | None,
    mean_b: np.ndarray,
    mean_a: np.ndarray,
    settings: EngineSettings,
) -> np.ndarray:
    """Whether each statement's latency changed: its latency verdict is a detection, or (without one) its mean after
    is at least (1 + θ) × before."""
    with np.errstate(invalid="ignore"):
        rose = mean_a >= (1.0 + settings.threshold) * mean_b
    if verdicts is None or verdicts.empty:
        return rose
    detected = verdicts.set_index("query_key")["verdict"].eq(Verdict.DETECTED)
    return detected.reindex(keys).fillna(False).to_numpy(dtype=bool)


def _first_end(end: np.ndarray, group: np.ndarray, after: np.ndarray, g: int) -> np.ndarray:
    out = np.full(g, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(out, group[after], end[after])
    return np.where(out == np.iinfo(np.int64).max, np.iinfo(np.int64).min, out)


def _summary(statements: pd.DataFrame, minutes: float) -> pd.DataFrame:
    """Per database and for the whole target (dbid = ALL_DATABASES): calls and execution time per minute either side
    and how many statements had calls."""
    frame = statements.assign(
        _b=statements["calls_before"] > 0,
        _a=statements["calls_after"] > 0,
    )
    cols = ["calls_per_min_before", "calls_per_min_after", "exec_ms_per_min_before", "exec_ms_per_min_after"]
    per_db = frame.groupby("dbid")[[*cols, "_b", "_a"]].sum().reset_index()
    whole = pd.DataFrame([{"dbid": ALL_DATABASES, **{c: float(frame[c].sum()) for c in cols}}])
    whole["_b"], whole["_a"] = int(frame["_b"].sum()), int(frame["_a"].sum())
    out = pd.concat([whole, per_db], ignore_index=True)
    out = out.rename(columns={"_b": "statements_before", "_a": "statements_after"})
    out["statements_before"] = out["statements_before"].astype(np.int64)
    out["statements_after"] = out["statements_after"].astype(np.int64)
    out["dbid"] = out["dbid"].astype(np.int64)
    return out[SUMMARY_COLUMNS]


def contention_culprits(verdicts: pd.DataFrame, found: Impact, settings: EngineSettings | None = None) -> pd.Series:
    """For each latency detection whose cause the counters left open (`unexplained`, `more_blocks_read`), the
    query_key of another statement whose surge or new heavy load began within the tolerance of the detection's change
    (the one adding most execution time); None elsewhere. Indexed like `verdicts`.

    When both frames carry `dbid`, only a statement of the same database is named: another database's new work (a
    tool's own statements, a neighbour) coinciding with the change is no evidence that it caused it."""
    settings = settings or EngineSettings()
    out = pd.Series([None] * len(verdicts), index=verdicts.index, dtype=object)
    changes = found.changes
    culprits = changes[
        (changes["kind"].isin([SURGE, N_PLUS_ONE]) | ((changes["kind"] == NEW) & changes["heavy"]))
        & changes["onset_at"].notna()
    ]
    if culprits.empty or verdicts.empty:
        return out
    open_cause = (verdicts["verdict"] == Verdict.DETECTED) & verdicts["cause"].isin(
        [Cause.UNEXPLAINED.value, Cause.MORE_BLOCKS_READ.value]
    )
    tolerance = pd.Timedelta(settings.tolerance)
    onset = culprits["onset_at"]
    for i in np.flatnonzero(open_cause.to_numpy()):
        row = verdicts.iloc[i]
        change = row["change_at"]
        if pd.isna(change):
            continue
        near = culprits[((onset - change).abs() <= tolerance) & (culprits["query_key"] != row["query_key"])]
        if "dbid" in verdicts.columns and "dbid" in near.columns:
            near = near[near["dbid"] == row["dbid"]]
        if len(near):
            out.iloc[i] = near["query_key"].iloc[0]
    return out
