"""What else a deploy changed, from the same window's counters: load, not latency (pure; no I/O, no clock).

Per statement (fingerprints merged as for the verdicts): calls, execution time, rows and shared blocks read either
side of the deploy; calls, execution time and blocks read per minute of window; rows per call; whether it is new (no
calls before, calls after, first seen after the deploy) or stopped (calls before, and after none or only a rolling
deploy's tail: at most STOP_TAIL_SHARE of its calls before, all in the first TAIL_SPAN of the window after); when
its change began (`onset_at`: a new statement's first interval after the deploy, a stopped one's last interval with
calls at or before it, the deploy for a surge or rows per call). Per target and per database (dbid): execution time
per minute before and after.

What the texts tell (`classify`, with facts steps/ derives from the parse trees): transaction and session control
is never a load change; the deploy's own utility statements (its DROP INDEX, its migrations) are `deploy_statement`,
the change itself rather than new load; a statement that stopped and one that started on the same relations with a
similar shape are one statement rewritten (`replaced`, both halves, with the per-call factor). A detection the
counters left unexplained is collateral of the statement whose load rose at the same change (`collateral_culprits`).

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

The family: weighted Bonferroni with the latency verdicts' weights (`decision.family_weights`, from the execution
time before the deploy; the latency family itself is decided by a step-up from engine 2.6) and the same budget B
(`false_alert_budget`): p_family = min(1, p / w), a surge when p_family ≤ B. The surge family is a second family of
its own, spending B per analysis as the latency family does.
A surge of a statement whose latency did not change (its latency verdict is not a detection and its mean after is
under (1 + θ) × before) is the N+1 pattern: `n_plus_one`; otherwise `surge`.

New statements are *heavy* when their execution time after the deploy is at least `new_statement_share` of the
target's. Rows per call changed: both sides have calls and rows per call moved by at least `surge_ratio` either way
(and by at least one row per call).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
import pandas as pd

from radar_pipeline.engine.decision import family_weights
from radar_pipeline.engine.frames import IMPACT_STATEMENTS, IMPACT_SUMMARY
from radar_pipeline.engine.samples import WindowSamples, window_samples
from radar_pipeline.engine.settings import EngineSettings
from radar_pipeline.engine.vocabulary import IMPACT_KINDS, Cause, Verdict

NEW, STOPPED, SURGE, N_PLUS_ONE, ROWS_PER_CALL, REPLACED, DEPLOY_STATEMENT = IMPACT_KINDS
# What a statement is, as steps/ tells from its text (`classify`, steps/replacements.py): the application's (SELECT,
# INSERT, UPDATE, DELETE, MERGE, and the rest an application runs: CALL, COPY, EXPLAIN, VACUUM, …; load), DDL (the
# deploy's kind of statement: CREATE, ALTER, DROP, GRANT, …), or transaction and session control (BEGIN, COMMIT, SET).
PLANNABLE, UTILITY, CONTROL = "plannable", "utility", "control"
# A statement whose calls after the deploy are at most this share of its calls before, all of them in the first
# TAIL_SPAN of the window after, stopped: a rolling deploy leaves the old code serving a few requests (11 calls of
# thousands in the lab) while the new one takes over. A statement still called late in the window did not stop.
STOP_TAIL_SHARE = 0.05
TAIL_SPAN = 0.5
# Shape similarity (steps/replacements.py: the share of parse-tree features two texts have in common, the predicate
# weighing as much as the rest) from which a stopped and a started statement on the same relations, the stop and the
# start within the tolerance of each other and of the deploy, are one statement rewritten: an ORM's added column keeps
# its predicate and most of the tree (0.9); a lookup by another column shares all but its predicate (0.5).
SIMILAR_SHAPE = 0.6
# A statement called at most this many times in the window, first from the deploy on or the deploy's own DDL, may hold
# a lock (a migration's ALTER TABLE, its backfill): its time per call is weighed as a lock's (`collateral_culprits`).
# A statement of many calls holds none, however much time they add up to: a million 0.01 ms calls are no 10 s lock.
ONE_OFF_CALLS = 2
# The most calls a DDL statement makes in the window and is still the deploy's own (a migration run by each of a few
# pods at start): an application running DDL per request (CREATE TEMP TABLE, DROP TABLE IF EXISTS) is load.
DEPLOY_STATEMENT_CALLS = 10
STATEMENT_COLUMNS = IMPACT_STATEMENTS.names
SUMMARY_COLUMNS = IMPACT_SUMMARY.names
ALL_DATABASES = -1  # the summary row of the whole target


@dataclass(frozen=True)
class Impact:
    """One analysis's load picture: `summary` a row per database plus the target (dbid = ALL_DATABASES); `statements`
    a row per statement (kind None when nothing notable changed); `changes` the notable rows, heaviest first."""

    summary: pd.DataFrame
    statements: pd.DataFrame
    deployed_at: pd.Timestamp | None = None  # the split
    window_start: pd.Timestamp | None = None

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
    extra = tuple(c for c in ("rows", "shared_blks_read") if c in counters.columns)
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
    blocks = samples.extra.get("shared_blks_read", np.full(len(samples.end), np.nan))
    blocks_b, blocks_a = per_side(np.where(np.isnan(blocks), 0.0, blocks))
    blocks_known = np.bincount(group, weights=~np.isnan(blocks), minlength=g) > 0

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
            "blks_read_per_min_before": np.where(blocks_known, blocks_b / minutes, np.nan),
            "blks_read_per_min_after": np.where(blocks_known, blocks_a / minutes, np.nan),
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
    first_seen = _first_seen(counters, samples)
    new = (calls_b == 0) & (calls_a > 0) & (first_seen > deploy)
    last_call = _last_call(samples.end, group, samples.calls, g)
    tail = (calls_a <= STOP_TAIL_SHARE * calls_b) & (last_call <= deploy + TAIL_SPAN * width)
    stopped = (calls_b > 0) & ((calls_a == 0) | tail)
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
    last_before = _last_call(samples.end[~after], group[~after], samples.calls[~after], g)
    onset = np.where(new, first_after, np.where(surge | rows_changed, deploy, np.iinfo(np.int64).min))
    onset = np.where(stopped, last_before, onset)
    out["onset_at"] = pd.to_datetime(onset.astype("datetime64[ns]"), utc=True)  # int64 min is NaT
    out["first_seen_at"] = pd.to_datetime(first_seen.astype("datetime64[ns]"), utc=True)
    out["partner_key"] = pd.Series([None] * g, dtype=object)
    out["per_call_factor"] = np.nan
    out["statement_class"] = pd.Series([None] * g, dtype=object)
    summary = _summary(out, minutes)
    split = pd.Timestamp(deploy, tz="UTC")
    return Impact(summary, out[STATEMENT_COLUMNS], split, split - pd.Timedelta(settings.window))


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


def _last_call(end: np.ndarray, group: np.ndarray, calls: np.ndarray, g: int) -> np.ndarray:
    """Per statement, the end of its last sample with calls (int64 min where none)."""
    out = np.full(g, np.iinfo(np.int64).min, dtype=np.int64)
    called = calls > 0
    np.maximum.at(out, group[called], end[called])
    return out


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


def classify(
    found: Impact, classes: pd.Series, pairs: pd.DataFrame | None = None, settings: EngineSettings | None = None
) -> Impact:
    """The impact with what the statements' texts tell (steps/ reads and parses them; the engine stays pure).

    `classes`: query_key → PLANNABLE (the application's), UTILITY (DDL) or CONTROL (statements left out are taken as
    the application's). A control statement (BEGIN, COMMIT, SET, …) is never a load change: its kind is cleared. DDL
    that started in the window (no calls before it, or its entry created inside the window: a migration run just before
    the deploy was recorded), called at most DEPLOY_STATEMENT_CALLS times, is the deploy's own (`deploy_statement`,
    never heavy): the change itself, not new load; DDL called more often is the application's load.

    `pairs`: candidate rewrites, a row per (old_key, new_key) with `same_relations` (the two texts name the same
    tables), `similarity` (the share of their parse trees' features in common, 0 to 1) and optionally `heavier` (the
    new text is the old one's lookup in a heavier form: it reads the old's tables and more, comparing what the old
    compared). A statement that stopped (with its rolling-deploy tail) and one that is new, of the same database, on
    the same relations and at least SIMILAR_SHAPE alike or the new the old's heavier form, the old half's stop
    (onset_at) and the new half's start within the tolerance of each other and of the deploy, are one statement
    rewritten: both halves become `replaced`, each naming the other (`partner_key`), with per_call_factor = the new
    half's mean per call after / the old half's before. Pairs are matched one to one, most alike first. The new half
    is heavy when it adds (its time after less the old half's before) at least new_statement_share of the target's
    time after."""
    settings = settings or EngineSettings()
    out = found.statements.copy()
    keys = out["query_key"]
    statement_class = keys.map(classes).astype(object)
    out["statement_class"] = statement_class.where(statement_class.notna(), None)
    kind = out["kind"].to_numpy(dtype=object).copy()
    control = (out["statement_class"] == CONTROL).to_numpy()
    kind[control] = None
    out.loc[control, "heavy"] = False
    utility = (out["statement_class"] == UTILITY).to_numpy()
    started = (out["calls_after"] > 0) & (out["calls_before"] == 0)
    created = out["first_seen_at"] > found.window_start if found.window_start is not None else False
    few = (out["calls_before"] + out["calls_after"] <= DEPLOY_STATEMENT_CALLS).to_numpy()
    own = utility & few & (started | (created & out["kind"].notna())).to_numpy()
    kind[own] = DEPLOY_STATEMENT
    out.loc[own, "heavy"] = False
    out["kind"] = kind
    if pairs is not None and len(pairs):
        _pair(out, pairs, settings, found.deployed_at)
    return Impact(found.summary, out[STATEMENT_COLUMNS], found.deployed_at, found.window_start)


def _pair(out: pd.DataFrame, pairs: pd.DataFrame, settings: EngineSettings, deployed_at: pd.Timestamp | None) -> None:
    """Mark the replaced pairs in `out` (classify), in place."""
    at = pd.Series(np.arange(len(out)), index=out["query_key"].to_numpy())
    heavier = pairs["heavier"].astype(bool) if "heavier" in pairs else pd.Series(False, index=pairs.index)
    eligible = pairs[(pairs["same_relations"] & (pairs["similarity"] >= SIMILAR_SHAPE)) | heavier]
    eligible = eligible[eligible["old_key"].isin(at.index) & eligible["new_key"].isin(at.index)]
    total_after = float(out["exec_ms_per_min_after"].sum())
    tolerance = pd.Timedelta(settings.tolerance)
    onset = out["onset_at"]
    taken: set[Any] = set()
    for row in eligible.sort_values("similarity", ascending=False, kind="stable").itertuples():
        i, j = int(at[row.old_key]), int(at[row.new_key])
        if row.old_key in taken or row.new_key in taken or out["dbid"].iat[i] != out["dbid"].iat[j]:
            continue
        if out["kind"].iat[i] != STOPPED or out["kind"].iat[j] != NEW:
            continue
        stop, start = onset.iat[i], onset.iat[j]
        if pd.isna(stop) or pd.isna(start) or abs(start - stop) > tolerance:
            continue
        if deployed_at is not None and max(abs(stop - deployed_at), abs(start - deployed_at)) > tolerance:
            continue
        taken |= {row.old_key, row.new_key}
        before, after = out["mean_before_ms"].iat[i], out["mean_after_ms"].iat[j]
        factor = after / before if before > 0 else np.nan
        added = out["exec_ms_per_min_after"].iat[j] - out["exec_ms_per_min_before"].iat[i]
        for me, other in ((i, row.new_key), (j, row.old_key)):
            out.iat[me, out.columns.get_loc("kind")] = REPLACED
            out.iat[me, out.columns.get_loc("partner_key")] = other
            out.iat[me, out.columns.get_loc("per_call_factor")] = factor
        out.iat[i, out.columns.get_loc("heavy")] = False
        out.iat[j, out.columns.get_loc("heavy")] = bool(
            total_after > 0 and added >= settings.new_statement_share * total_after
        )


def collateral_culprits(verdicts: pd.DataFrame, found: Impact, settings: EngineSettings | None = None) -> pd.DataFrame:
    """For each latency detection whose cause the counters left open (`unexplained`, `more_blocks_read`: a statement
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
    of another: the waiters on a migration's lock are all the lock's collateral, not one another's. Of the statements
    that qualify, the one of most weight (the time it added per minute; a lock holder's, its calls' time) is named,
    the first in the impact's order on a tie.

    All detections are tested at once (a matrix of detections × the statements that could qualify for
    any, in chunks): a loop over the detections tested each against every statement, 1.4 ms a detection at 5,000
    statements. Only the rule that a statement named collateral is no culprit runs in order, over the detections
    whose best culprit was itself named collateral before them."""
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
        lock_power = calls * held_ms**2 / window_ms
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
    weight = added.where(~holder, calls * held_ms / minutes).to_numpy(dtype=float)
    # What each statement qualifies by, apart from the detection's floors: those compare below, per detection.
    by_time = evidence & ~own.to_numpy() & (added > 0).to_numpy()
    by_blocks = (~own & (block_ratio >= settings.surge_ratio) & (blocks_added > 0)).to_numpy()
    by_lock = (holder & (held_ms > 0)).to_numpy()
    eligible = s["statement_class"].ne(CONTROL).to_numpy() & onset.notna().to_numpy()
    candidates = np.flatnonzero(eligible & (by_time | by_blocks | by_lock))
    # Heaviest first, the impact's first on a tie; a weight unknown last (idxmax skips it).
    candidates = candidates[np.argsort(-weight[candidates], kind="stable")]

    order = open_cause.assign(_added=added.reindex(open_cause["query_key"]).to_numpy())
    taken = order.sort_values("_added", ascending=False, na_position="last")
    at = s.index.get_indexer(taken["query_key"])  # -1: not in the impact, no culprit
    labels = taken.index[at >= 0]
    taken, at = taken[at >= 0], at[at >= 0]
    dbid = s["dbid"].to_numpy()
    their_db = pd.Series(dbid[at])
    floor = settings.new_statement_share * db_time.reindex(their_db, fill_value=0.0).to_numpy(dtype=float)
    own_added = np.nan_to_num(taken["_added"].to_numpy(dtype=float))
    floor = np.where(floor > own_added, floor, own_added)  # max(own, share), as Python's max takes them
    their_blocks = np.nan_to_num(db_blocks.reindex(their_db, fill_value=0.0).to_numpy(dtype=float))
    blocks_floor = settings.new_statement_share * their_blocks
    slowed = np.nan_to_num(s["mean_after_ms"].to_numpy(dtype=float) - s["mean_before_ms"].to_numpy(dtype=float))[at]
    tolerance = int(pd.Timedelta(settings.tolerance).as_unit("ns").value)
    if len(at) and (pd.DatetimeIndex(taken["change_at"]).tz is None) != (pd.DatetimeIndex(s["onset_at"]).tz is None):
        raise TypeError("collateral_culprits: change_at and onset_at must both have a time zone, or neither")
    onset_ns = _ns(onset)
    change_ns = _ns(taken["change_at"])

    cand_db, cand_onset = dbid[candidates], onset_ns[candidates]
    cand_time = np.where(by_time[candidates], added.to_numpy(dtype=float)[candidates], np.nan)
    cand_blocks = np.where(by_blocks[candidates], blocks_added.to_numpy(dtype=float)[candidates], np.nan)
    cand_lock = np.where(by_lock[candidates], lock_power.to_numpy(dtype=float)[candidates], np.nan)

    def qualifying(rows: np.ndarray) -> np.ndarray:
        """Whether each candidate qualifies for each detection of `rows` (all but the victims' rule); a candidate's
        NaN above stands for a way it cannot qualify by, whatever the floor."""
        r = rows[:, None]
        near = (cand_db == dbid[at[r]]) & (np.abs(cand_onset - change_ns[r]) <= tolerance)
        near &= candidates != at[r]
        return near & ((cand_time >= floor[r]) | (cand_blocks >= blocks_floor[r]) | (cand_lock >= 0.5 * slowed[r]))

    n = len(at)
    if n == 0 or len(candidates) == 0:
        return out
    first = np.full(n, -1)  # the best qualifying statement's position in `candidates`, -1 when none
    step = max(1, _CHUNK // max(1, len(candidates)))
    for lo in range(0, n, step):
        rows = np.arange(lo, min(n, lo + step))
        ok = qualifying(rows)
        first[rows] = np.where(ok.any(axis=1), ok.argmax(axis=1), -1)

    # A statement named collateral is no culprit of the detections after it: only where the best was so named.
    victim = np.zeros(len(s), dtype=bool)
    culprit = np.full(n, -1)
    for i in range(n):
        j = first[i]
        if j >= 0 and victim[candidates[j]]:
            ok = qualifying(np.array([i]))[0] & ~victim[candidates]
            j = int(ok.argmax()) if ok.any() else -1
        if j >= 0:
            culprit[i] = candidates[j]
            victim[at[i]] = True
    named = culprit >= 0
    if np.isnan(weight[culprit[named]]).any():
        raise ValueError("collateral_culprits: a qualifying statement's database time per minute is not a number")
    keys = s.index
    roses = []
    for d, j in zip(np.flatnonzero(named), culprit[named], strict=True):
        if by_lock[j] and lock_power.iat[j] >= 0.5 * slowed[d]:
            who = "the deploy's own statement" if own.iat[j] else "a statement run once at the deploy"
            rose = f"{who}, running {held_ms.iat[j] / 1000.0:,.1f} s"
            rose += f" a call ({calls.iat[j]} calls)" if calls.iat[j] > 1 else ""
        elif by_time[j] and added.iat[j] >= floor[d]:
            rose = (
                f"its database time ×{time_ratio.iat[j]:,.1f}"
                if np.isfinite(time_ratio.iat[j])
                else f"new, {s['exec_ms_per_min_after'].iat[j]:,.0f} ms of database time per minute"
            )
        else:
            rose = (
                f"its blocks read per minute ×{block_ratio.iat[j]:,.1f}"
                if np.isfinite(block_ratio.iat[j])
                else f"new, {s['blks_read_per_min_after'].iat[j]:,.0f} blocks read per minute"
            )
        roses.append(rose)
    names = [keys[j] for j in culprit[named]]
    if not out.index.is_unique:  # a label of several rows names them all, as it always did
        for label, name, rose in zip(labels[named], names, roses, strict=True):
            out.at[label, "culprit"], out.at[label, "rose"] = name, rose
        return out
    where = out.index.get_indexer(labels[named])
    out.iloc[where, 0] = pd.Series(names, dtype=object).to_numpy()
    out.iloc[where, 1] = np.array(roses, dtype=object)
    return out


# Detections × candidate culprits tested at once in collateral_culprits: 1M cells (~30 MB of temporaries at most).
_CHUNK = 1 << 20


def _ns(times: pd.Series) -> np.ndarray:
    """Times as int64 nanoseconds since the epoch (NaT: int64 min, which no tolerance reaches)."""
    values = pd.DatetimeIndex(times)
    return values.as_unit("ns").asi8 if values.tz is None else values.tz_convert("UTC").as_unit("ns").asi8
