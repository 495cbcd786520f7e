"""The decision: did this deploy make each statement slower? Each step can stop a statement.

1. interval samples from the counters (`samples`): ΔC, ΔT and, with stddev_exec_time, each interval's own per-call
   sum of squares (`variance`);
2. floors on both sides of the deploy: at least `min_samples` intervals with calls (the test estimates a spread and
   a serial correlation from them) and `min_calls` calls, else `insufficient_data` (`floor_samples`, `floor_calls`);
3. the family: every statement left is one test of the analysis, and gets a share of the false-alert budget B
   (`false_alert_budget`, expected false detections per analysis with nothing changed; `family_weights`);
4. pre-filter: the call-weighted window means ΣΔT/ΣΔC either side of the deploy must have risen by at least θ —
   otherwise the window's own estimate lies inside H0 (after ≤ (1 + θ) · before), and the statement stops as
   `below_threshold` before the costly steps (a cheap gate, as in engine 1; the budget still counts it; it is cleared
   or not in step 8);
5. E-divisive means locates the strongest change in the window (`edivisive`): none with Q > 0 → `no_change_point`;
   one farther than the tolerance from the deploy → `outside_tolerance` (a shift that began well before the deploy is
   never blamed on it, however significant);
6. the call-level test of H0: after ≤ (1 + θ) · before at every candidate split — at or after the deploy and within
   the tolerance (the periodic check, whose tolerance spans the window: anywhere), leaving E-divisive's margin on
   each side — with overdispersion, serial correlation and the choice of the split accounted for (`inference`); its
   one-sided p-value is adjusted for the family by the weighted Benjamini–Hochberg step-up over the budget shares
   (`fdr`; engine 2.5's weighted Bonferroni with `family_rule` "bonferroni"): `p_family` is the smallest budget at
   which the statement would be detected, and `detected` needs p_family ≤ B (`significant`, else `not_significant`);
7. a drift is not a step: the level shift at the split beyond a continuous linear trend through the window must
   itself exceed θ (`inference.level_shift_beyond_trend`), else `drift` — creeping latency is left to the history
   bands.

Every decided statement carries the 95% confidence interval [factor_low, factor_high] of its slowdown factor, from the
same variance as the test: at the tested split (segment_mean_after_ms / segment_mean_before_ms) where a split was
tested, else at the deploy (change_factor); per statement, not adjusted for the family. confidence = 1 − p_family.
With nothing changed the step-up spends B as expected false detections for independent statements (engine/fdr.py;
docs/budget.md: what holds when they are not). Where a split was tested, history_intervals
says what its noise estimate rests on: the intervals of the statement's noise prior (its earlier days, `noise`) the
test combined with its window (docs/method.md), or 0 for the window alone (the column keeps its stored name).

8. cleared or not (engine 2.5): every decidable statement not detected is `no_regression` only when it is cleared —
   the one-sided upper bound of its slowdown factor at `clear_level` (β = 95%), from the test's own variance, lies
   within the tolerance 1 + θ at every split where the change the detection looks for could begin (its candidates and
   the deploy's own split; `inference`, "Clearing": a wrong "cleared" is a missed regression, at most 1 − β per truly
   regressed statement) — and `inconclusive` otherwise. Stopping early decides nothing: a statement the pre-filter
   stopped keeps `below_threshold` when cleared, and when not, says why: `interval_spans_threshold` (precise enough,
   but the estimate lies too close to 1 + θ), `interval_too_wide` (too few calls for its noise: even an unchanged
   estimate's bound would exceed 1 + θ) or `history_conflict` (as interval_too_wide, with a window unlike its noise
   prior, tested alone). A deploy's statement that passed the pre-filter has its estimate at the deploy's split
   beyond the tolerance, so it is not cleared: `no_change_point`, `outside_tolerance`, `not_significant` and `drift`
   end inconclusive with their reason (a periodic check has no deploy split: they may be cleared there).
   factor_bound is the bound at the split least certain to lie within the tolerance (within it for a cleared
   statement, beyond it for an inconclusive one; NaN for insufficient_data and detections).

Every step runs for all statements at once; the expensive ones (5 and 6) only for those that passed the cheap ones,
and 8 for every decidable statement not detected.
"""

from __future__ import annotations

import dataclasses
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta

import numpy as np
import pandas as pd

from radar_pipeline.engine import fdr
from radar_pipeline.engine.causes import CAUSE_COUNTERS, explain, explain_groups, explained, fleet_wide
from radar_pipeline.engine.edivisive import WORKERS, best_split, min_segment
from radar_pipeline.engine.frames import VERDICT_FRAME
from radar_pipeline.engine.gate import tiers
from radar_pipeline.engine.inference import (
    Prior,
    SideSums,
    clearing_bounds,
    evidence_from_sums,
    interval_from_sums,
    level_shift_beyond_trend,
    pooled_serial_correlation,
    split_tests,
)
from radar_pipeline.engine.rhythm import Levels, set_to_levels
from radar_pipeline.engine.samples import WindowSamples, segment_sums, window_samples
from radar_pipeline.engine.settings import EngineSettings
from radar_pipeline.engine.vocabulary import Reason, Verdict

COLUMNS = VERDICT_FRAME.names  # the result's columns, in order (engine/frames.py declares their dtypes)
# Rows of padded series per block in steps 5 and 6, so memory stays bounded whatever the number of statements.
BLOCK_CELLS = 1 << 19
PART_ROWS = 512  # the fewest statements of a block worth a thread of their own in steps 5 to 7
NAT = np.iinfo(np.int64).min
# The columns of analyse's `prior` (optionally also calls_per_interval).
PRIOR_COLUMNS = ("query_key", "serial_correlation", "dispersion", "intervals")


# A statement's evidence at the deploy's own split (analyse's columns of that name; deploy_evidence).
EVIDENCE = ("deploy_log_factor", "deploy_log_se", "deploy_dof")


@dataclass(frozen=True, slots=True)
class WindowSides:
    """Per statement, its intervals, calls, time and call-weighted means either side of the deploy (the window's
    means, before any split is located)."""

    calls: np.ndarray  # per statement and side, interleaved (before, after): 2 · statement + side
    time: np.ndarray  # as calls
    n_before: np.ndarray
    n_after: np.ndarray
    calls_before: np.ndarray  # int64
    calls_after: np.ndarray  # int64
    time_before: np.ndarray
    time_after: np.ndarray
    mean_before_ms: np.ndarray
    mean_after_ms: np.ndarray
    change_factor: np.ndarray


@dataclass(slots=True)
class Found:
    """What steps 5 to 8 found per statement, filled in place block by block (NaN, 0, False or NAT where a statement
    did not reach the step). The fields named as result columns (RESULT_FIELDS) go to the result as they are;
    change_at (ns since the epoch) becomes a timestamp; cleared, precise, conflict and shift_beyond_trend only
    decide."""

    t_stat: np.ndarray
    dof: np.ndarray
    p_value: np.ndarray
    p_family: np.ndarray
    q_stat: np.ndarray
    segment_mean_before_ms: np.ndarray
    segment_mean_after_ms: np.ndarray
    segment_n_before: np.ndarray
    segment_n_after: np.ndarray
    factor_low: np.ndarray
    factor_high: np.ndarray
    serial_correlation: np.ndarray
    history_intervals: np.ndarray  # the intervals of the noise prior the test combined (a stored column's name)
    factor_bound: np.ndarray
    change_at: np.ndarray
    shift_beyond_trend: np.ndarray
    cleared: np.ndarray
    precise: np.ndarray
    conflict: np.ndarray

    @classmethod
    def empty(cls, g: int) -> Found:
        """Nothing found yet for g statements."""

        def nan() -> np.ndarray:
            return np.full(g, np.nan)

        def no() -> np.ndarray:
            return np.zeros(g, dtype=bool)

        return cls(
            t_stat=nan(),
            dof=nan(),
            p_value=nan(),
            p_family=nan(),
            q_stat=nan(),
            segment_mean_before_ms=nan(),
            segment_mean_after_ms=nan(),
            segment_n_before=np.zeros(g, dtype=np.int64),
            segment_n_after=np.zeros(g, dtype=np.int64),
            factor_low=nan(),
            factor_high=nan(),
            serial_correlation=nan(),
            history_intervals=nan(),
            factor_bound=nan(),
            change_at=np.full(g, NAT, dtype=np.int64),
            shift_beyond_trend=nan(),
            cleared=no(),
            precise=no(),
            conflict=no(),
        )


# Found's fields that are result columns as they are.
RESULT_FIELDS = (
    "t_stat",
    "dof",
    "p_value",
    "p_family",
    "q_stat",
    "segment_mean_before_ms",
    "segment_mean_after_ms",
    "segment_n_before",
    "segment_n_after",
    "factor_low",
    "factor_high",
    "serial_correlation",
    "history_intervals",
    "factor_bound",
)


@dataclass(frozen=True, slots=True)
class Padded:
    """A block's series, left-aligned in [rows, longest] matrices (zeros past a row's length n): interval means, ΔC,
    ΔT, sums of squares (None without stddev) and end times."""

    mean: np.ndarray
    calls: np.ndarray
    time: np.ndarray
    sumsq: np.ndarray | None
    end: np.ndarray
    n: np.ndarray


def analyse(
    counters: pd.DataFrame,
    deploy_at: datetime | pd.Timestamp,
    settings: EngineSettings | None = None,
    prior: pd.DataFrame | None = None,
    *,
    before: timedelta | None = None,
    after: timedelta | None = None,
    weights: pd.Series | None = None,
    levels: Levels | None = None,
) -> pd.DataFrame:
    """Decide, for every statement in `counters`, whether the deploy at `deploy_at` made it slower.

    counters: cumulative snapshots with columns query_key, captured_at (tz-aware), calls, total_exec_time (ms) and
    optionally stats_since, fingerprint, stddev_exec_time (ms, population stddev over calls, as pg_stat_statements
    reports it), and the counters that give a detection its cause (causes.CAUSE_COUNTERS: rows, shared_blks_read,
    shared_blks_hit, total_plan_time, temp_blks_written, parallel workers, jit_time, WAL; NaN where unknown); rows
    may be unsorted, missing for some scrapes and contain resets.
    Returns one row per statement (see COLUMNS and the module docstring): mean_before_ms / mean_after_ms /
    change_factor are the call-weighted window means either side of the deploy; change_at is where the tested split
    begins (the end of the last interval before it; for `outside_tolerance`, E-divisive's split); t_stat, dof and
    p_value are the one-sided call-level test of H0: segment factor ≤ 1 + θ at that split, p_value adjusted for the
    choice of split but not for the family; p_family is adjusted for the family, the smallest budget at which the
    statement would be detected (engine/fdr.py; detected when ≤ false_alert_budget); budget_share = B · w is the
    statement's share of the budget; factor_low / factor_high the
    95% interval of the segment factor (of change_factor where no split was tested); serial_correlation the AR(1)
    coefficient the test used; history_intervals (float) how many intervals of the statement's noise prior the test
    at the tested split combined with its window (capped at settings.prior_max_intervals), 0 where that test used the
    window alone (no prior given, too few intervals, or a window that conflicts with its prior), NaN where no split
    was tested. deploy_log_factor, deploy_log_se and deploy_dof: for every decidable statement, the log factor at the
    deploy's own split (no split chosen), its standard error and degrees of freedom, from the test's variance (what a
    release's fleet verdict combines across targets, engine/releases.py).

    prior: optionally, each statement's noise prior, estimated from its own earlier days before the window (`noise`):
    columns query_key (as in counters), serial_correlation, dispersion (relative variance per call) and intervals (how
    many it rests on), and optionally calls_per_interval (the earlier days' mean calls per interval; without it, they
    are taken to be as busy as the window); NaN estimates count as none. A statement with at least
    settings.prior_min_intervals is tested with them combined with its window's (docs/method.md); without (None, or
    a statement not in it), exactly as engine 2.2.0.

    before, after: the spans analysed either side of the deploy (default settings.window each): a later look at a
    deploy (issue 29) grows them; the tolerance stays settings.tolerance, so the change is still placed where the
    first look would place it.
    weights: optionally each statement's share of the budget (a Series indexed by query_key, summing to at most 1
    over the statements of the whole family, which may be more than `counters` holds: a later look decides only the
    statements still open, with the shares the whole family gave them); it must not depend on any after side's
    latency. A decidable statement missing from it gets none (it cannot be detected). Without it, family_weights.
    levels: optionally the statements' usual levels by hour of the week (engine/rhythm.py): each sample of a statement
    that has them is set against them before anything is decided, and expected_factor says the rise they explain.
    """
    settings = settings or EngineSettings()
    deploy = _utc_ns(deploy_at)
    samples = _spans(counters, deploy, settings, before, after, extra_counters(counters))
    if samples.groups == 0:
        return _result(samples, {})
    expected = np.full(samples.groups, np.nan)
    if levels is not None:
        samples, expected = set_to_levels(samples, levels, deploy)

    sides = _window_sides(samples, deploy)
    verdict, reason = _floors(sides, settings)
    decidable = verdict != Verdict.INSUFFICIENT_DATA
    if weights is None:
        weight = family_weights(sides.time_before, decidable, settings.budget_time_weight)
    else:
        weight = _given_weights(samples, weights, decidable)

    rose = np.where(
        sides.mean_before_ms > 0,
        sides.change_factor - 1 >= settings.threshold,
        sides.mean_after_ms > sides.mean_before_ms,
    ) & (sides.mean_after_ms - sides.mean_before_ms >= settings.min_rise_ms)
    reason[decidable & ~rose] = Reason.BELOW_THRESHOLD.value
    candidates = np.flatnonzero(decidable & rose)

    g = samples.groups
    found = Found.empty(g)
    # The sums at the deploy's own split, once: the serial correlation's pool, the interval of a statement no split
    # was tested for, and the evidence.
    at_deploy = _deploy_side_sums(samples, sides, np.flatnonzero(decidable)) if decidable.any() else None
    known = _known(samples, sides, decidable, at_deploy, prior, settings)
    _decide_blocks(samples, _blocks(samples, candidates), deploy, settings, reason, found, known)
    _intervals_without_split(at_deploy, sides, decidable, settings, found, known)
    _family_decision(found, weight, settings, verdict, reason)
    _clearing(samples, np.flatnonzero(decidable & (verdict != Verdict.DETECTED)), sides, deploy, settings, found, known)
    _clear(found, verdict, reason)

    # The result's columns gathered first and framed once: a column set at a time costs pandas a copy each.
    columns: dict[str, object] = {}
    for name in ("n_before", "n_after", "calls_before", "calls_after", "mean_before_ms", "mean_after_ms"):
        columns[name] = getattr(sides, name)
    columns["change_factor"] = sides.change_factor
    columns["verdict"], columns["reason"] = verdict, reason
    columns["change_at"] = pd.to_datetime(
        np.where(found.change_at == NAT, np.datetime64("NaT"), found.change_at.view("datetime64[ns]")), utc=True
    )
    for name in RESULT_FIELDS:
        columns[name] = getattr(found, name)
    columns["budget_share"] = np.where(decidable, settings.false_alert_budget * weight, np.nan)
    columns.update(_deploy_evidence(samples, sides, decidable, settings, known, at_deploy))
    columns["confidence"] = 1.0 - found.p_family
    columns["tier"] = tiers(verdict, found.factor_low, found.factor_bound, settings.threshold)
    columns["expected_factor"] = expected
    decided = _to_explain(
        pd.DataFrame({"verdict": verdict, "tier": columns["tier"], "change_factor": sides.change_factor}),
        columns["change_at"],
        deploy,
        settings.threshold,
    )
    columns.update({name: values.to_numpy() for name, values in explain(samples, decided, settings).items()})
    return _result(samples, columns)


def _to_explain(verdicts: pd.DataFrame, change_at: object, deploy: int, threshold: float) -> pd.DataFrame:
    """What `causes.explain` reads of some verdicts: the rows to explain (causes.explained at θ `threshold`:
    detections, statements probably slower, and inconclusive ones whose means rose beyond θ) and where each one's
    segments split: its change_at, or the deploy where it has none (a statement no split was tested for)."""
    explain_rows = explained(verdicts, threshold)
    at = pd.to_datetime(pd.Series(change_at, index=verdicts.index), utc=True)
    at = at.where(~(explain_rows & at.isna()).to_numpy(), pd.Timestamp(deploy, tz="UTC"))
    return pd.DataFrame({"verdict": verdicts["verdict"].to_numpy(), "change_at": at, "explain": explain_rows})


def explain_detections(
    counters: pd.DataFrame,
    verdicts: pd.DataFrame,
    deploy_at: datetime | pd.Timestamp,
    settings: EngineSettings | None = None,
    *,
    before: timedelta | None = None,
    after: timedelta | None = None,
) -> pd.DataFrame:
    """`verdicts` (analyse's result for `deploy_at`) with the per-call figures, cause and cause_detail (causes.explain)
    of each row causes.explained names at settings.threshold (detections, statements probably slower, inconclusive ones
    whose means rose beyond θ) computed again from `counters`: the
    counters of those statements alone (every key merged into one with them), now carrying the counters the causes
    compare (causes.CAUSE_COUNTERS), which deciding did not need. The figures and causes are exactly those analyse
    gives when its counters carry them for every statement (a row's depend on its own samples alone; fleet_wide is
    judged on all of `verdicts`); the other rows are returned as they are. An explained statement missing from
    `counters` is a ValueError."""
    settings = settings or EngineSettings()
    deploy = _utc_ns(deploy_at)
    wanted = _to_explain(verdicts, verdicts["change_at"], deploy, settings.threshold)
    detected = wanted["explain"].to_numpy()
    out = verdicts.copy()
    if not detected.any():
        return out
    samples = _spans(counters, deploy, settings, before, after, extra_counters(counters))
    position = pd.Index(samples.keys).get_indexer(verdicts["query_key"].to_numpy()[detected])
    if (position < 0).any():
        missing = verdicts["query_key"].to_numpy()[detected][position < 0]
        raise ValueError(f"counters lack the explained statement(s) {', '.join(map(str, missing[:5]))}")
    # one row per group of the samples: the explained statements where they stand, nothing elsewhere
    change_at = np.full(samples.groups, NAT, dtype=np.int64)
    change_at[position] = wanted["change_at"].array.as_unit("ns").asi8[detected]
    explain_rows = np.zeros(samples.groups, dtype=bool)
    explain_rows[position] = True
    aligned = pd.DataFrame(
        {"change_at": pd.to_datetime(change_at.view("datetime64[ns]"), utc=True), "explain": explain_rows}
    )
    found = explain_groups(samples, aligned, settings, fleet_wide(verdicts, settings))
    rows = np.flatnonzero(detected)
    for name in found.columns:
        values = out[name].to_numpy(copy=True)
        values[rows] = found[name].to_numpy()[position]
        out[name] = values
    return out


def extra_counters(counters: pd.DataFrame) -> tuple[str, ...]:
    """The counters giving a detection its cause (causes.CAUSE_COUNTERS) that `counters` carries."""
    return tuple(name for name in CAUSE_COUNTERS if name in counters.columns)


def _ns(span: timedelta) -> int:
    if span <= timedelta(0):
        raise ValueError(f"a span either side of the deploy must be positive, not {span}")
    return int(span.total_seconds() * 1e9)


def _given_weights(samples: WindowSamples, weights: pd.Series, decidable: np.ndarray) -> np.ndarray:
    """The caller's budget shares, aligned with the samples' statements: NaN where not decidable, 0 where absent."""
    values = weights.to_numpy(dtype=float)
    if not (np.isfinite(values).all() and (values >= 0).all() and values.sum() <= 1 + 1e-9):
        raise ValueError("weights must be finite, non-negative and sum to at most 1")
    aligned = weights.reindex(pd.Index(samples.keys)).to_numpy(dtype=float)
    return np.where(decidable, np.nan_to_num(aligned, nan=0.0), np.nan)


def _intervals_without_split(
    at_deploy: tuple[SideSums, SideSums] | None,
    sides: WindowSides,
    decidable: np.ndarray,
    settings: EngineSettings,
    found: Found,
    known: Prior | None,
) -> None:
    """Every decided statement carries an interval: where no split was tested, that of the window factor at the
    deploy, from the same variance as the test (in place, in `found`). at_deploy: the decidable statements' sums
    either side of the deploy (`_deploy_side_sums`)."""
    untested = decidable & np.isnan(found.factor_low)
    if at_deploy is None or not untested.any():
        return
    among = np.flatnonzero(untested[decidable])
    low, high = interval_from_sums(
        at_deploy[0].rows(among),
        at_deploy[1].rows(among),
        sides.n_before[untested],
        sides.n_after[untested],
        settings.threshold,
        known.rows(untested) if known is not None else None,
    )
    found.factor_low[untested], found.factor_high[untested] = low, high


def _deploy_evidence(
    samples: WindowSamples,
    sides: WindowSides,
    decidable: np.ndarray,
    settings: EngineSettings,
    known: Prior | None,
    at_deploy: tuple[SideSums, SideSums] | None = None,
) -> dict[str, np.ndarray]:
    """Per decidable statement, the window's log factor at the deploy's own split (no split chosen, so no selection
    bias), its standard error and degrees of freedom, from the same variance as the test: the per-target evidence
    a release's fleet verdict combines (engine/releases.py); NaN elsewhere. at_deploy: the decidable statements' sums
    either side of the deploy, when the caller has them already (`_deploy_side_sums`)."""
    g = samples.groups
    out = {name: np.full(g, np.nan) for name in EVIDENCE}
    if not decidable.any():
        return out
    a, b = at_deploy if at_deploy is not None else _deploy_side_sums(samples, sides, np.flatnonzero(decidable))
    got = evidence_from_sums(
        a,
        b,
        sides.n_before[decidable],
        sides.n_after[decidable],
        settings.threshold,
        known.rows(decidable) if known is not None else None,
    )
    for name, values in zip(out, got, strict=True):
        out[name][decidable] = values
    return out


def _family_decision(
    found: Found,
    weight: np.ndarray,
    settings: EngineSettings,
    verdict: np.ndarray,
    reason: np.ndarray,
) -> None:
    """Steps 6 and 7 across the family: the weighted Benjamini–Hochberg step-up over the budget shares (engine/fdr.py;
    `family_rule` "bonferroni": engine 2.5's weighted Bonferroni), p_family the smallest budget at which the statement
    would be detected; significant when ≤ the budget; `drift` when the shift beyond the trend is under θ; else
    `detected` (in place, in `found`, `verdict` and `reason`). A statement with no share (none given, or absent from
    a later look's call) is never rejected and counts as not rejected for the others."""
    shares = np.where(np.isnan(weight), 0.0, weight)
    rule = fdr.bonferroni if settings.family_rule == "bonferroni" else fdr.step_up
    significant, found.p_family = rule(found.p_value, shares, settings.false_alert_budget)
    tested = ~np.isnan(found.p_family)
    drift = significant & ~(found.shift_beyond_trend - 1 >= settings.threshold)
    detected = significant & ~drift
    verdict[detected] = Verdict.DETECTED.value
    reason[detected] = Reason.SIGNIFICANT.value
    reason[drift] = Reason.DRIFT.value
    reason[tested & ~significant] = Reason.NOT_SIGNIFICANT.value


def family_weights(time_before: np.ndarray, decidable: np.ndarray, time_weight: float) -> np.ndarray:
    """The budget shares of the family's step-up (Σ = 1 over the decidable statements; NaN elsewhere): a uniform
    part, every decidable statement's floor, so a sparse statement keeps a budget of its own, plus `time_weight` of
    the weight by share of the execution time before the deploy, so the statements that cost most are tested hardest
    (Genovese, Roeder & Wasserman 2006). The weights use only the before side, which H0 leaves untouched, so they
    cannot favour a statement for having slowed down (docs/budget.md: why the floor is not larger)."""
    count = int(decidable.sum())
    if count == 0:
        return np.full(len(decidable), np.nan)
    time = np.where(decidable, np.maximum(time_before, 0.0), 0.0)
    total = time.sum()
    share = time / total if total > 0 else np.where(decidable, 1.0 / count, 0.0)
    weight = (1 - time_weight) / count + time_weight * share
    return np.where(decidable, weight, np.nan)


def family_shares(
    counters: pd.DataFrame,
    deploy_at: datetime | pd.Timestamp,
    settings: EngineSettings | None = None,
    *,
    before: timedelta | None = None,
    after: timedelta | None = None,
) -> pd.Series:
    """The budget shares analyse gives the family of this window (family_weights over the statements its floors let
    it decide), by query_key: Σ = 1 over them, 0 for the others; empty for an empty window. A later look's `weights`."""
    settings = settings or EngineSettings()
    deploy = _utc_ns(deploy_at)
    samples = _spans(counters, deploy, settings, before, after)
    if samples.groups == 0:
        return pd.Series(dtype=float)
    sides = _window_sides(samples, deploy)
    decidable = _floors(sides, settings)[0] != Verdict.INSUFFICIENT_DATA
    weight = family_weights(sides.time_before, decidable, settings.budget_time_weight)
    return pd.Series(np.nan_to_num(weight, nan=0.0), index=pd.Index(samples.keys))


def deploy_evidence(
    counters: pd.DataFrame,
    deploy_at: datetime | pd.Timestamp,
    settings: EngineSettings | None = None,
    prior: pd.DataFrame | None = None,
    *,
    before: timedelta | None = None,
    after: timedelta | None = None,
) -> pd.DataFrame:
    """Each statement's evidence at the deploy's own split over these spans, without deciding anything: no split
    search, no family, no budget. One row per statement (query_key, merged_keys): n_before, n_after, calls_before,
    calls_after, time_before (ms), decidable (the floors let analyse decide it) and deploy_log_factor,
    deploy_log_se, deploy_dof exactly as analyse reports them (NaN where not decidable). What a joint test (a
    release's fleet verdict, a group) combines at a later look for statements whose own verdict is already decided."""
    settings = settings or EngineSettings()
    deploy = _utc_ns(deploy_at)
    samples = _spans(counters, deploy, settings, before, after)
    names = ("n_before", "n_after", "calls_before", "calls_after", "time_before")
    if samples.groups == 0:
        return pd.DataFrame(
            {"query_key": [], "merged_keys": [], **{n: [] for n in names}, "decidable": [], **{n: [] for n in EVIDENCE}}
        )
    sides = _window_sides(samples, deploy)
    decidable = _floors(sides, settings)[0] != Verdict.INSUFFICIENT_DATA
    at_deploy = _deploy_side_sums(samples, sides, np.flatnonzero(decidable)) if decidable.any() else None
    known = _known(samples, sides, decidable, at_deploy, prior, settings)
    columns: dict[str, object] = {"query_key": samples.keys, "merged_keys": samples.merged}
    columns.update({name: getattr(sides, name) for name in names})
    columns["decidable"] = decidable
    columns.update(_deploy_evidence(samples, sides, decidable, settings, known, at_deploy))
    return pd.DataFrame(columns)


def _spans(
    counters: pd.DataFrame,
    deploy: int,
    settings: EngineSettings,
    before: timedelta | None,
    after: timedelta | None,
    extra: tuple[str, ...] = (),
) -> WindowSamples:
    """The samples of the spans either side of the deploy (settings.window each unless given)."""
    lo = deploy - _ns(settings.window if before is None else before)
    return window_samples(counters, lo, deploy + _ns(settings.window if after is None else after), extra)


def _window_sides(samples: WindowSamples, deploy: int) -> WindowSides:
    """Intervals, calls, time and call-weighted means either side of the deploy, per statement."""
    n_before = samples.count_until(deploy)
    starts, sizes = _side_segments(samples.offsets, n_before)
    calls = segment_sums(samples.calls, starts, sizes)
    time = segment_sums(samples.time, starts, sizes)
    with np.errstate(divide="ignore", invalid="ignore"):
        mean_before_ms = time[:, 0] / calls[:, 0]
        mean_after_ms = time[:, 1] / calls[:, 1]
        change_factor = mean_after_ms / mean_before_ms
    return WindowSides(
        calls=calls.ravel(),
        time=time.ravel(),
        n_before=sizes[:, 0],
        n_after=sizes[:, 1],
        calls_before=calls[:, 0].astype(np.int64),
        calls_after=calls[:, 1].astype(np.int64),
        time_before=time[:, 0],
        time_after=time[:, 1],
        mean_before_ms=mean_before_ms,
        mean_after_ms=mean_after_ms,
        change_factor=change_factor,
    )


def _side_segments(offsets: np.ndarray, n_before: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """[statements, 2] starts and sizes of each statement's samples before the deploy and after it (its samples are
    in time order: the first n_before of them end at or before it)."""
    n = np.diff(offsets)
    starts = np.stack([offsets[:-1], offsets[:-1] + n_before], axis=1)
    return starts, np.stack([n_before, n - n_before], axis=1)


def _deploy_side_sums(samples: WindowSamples, sides: WindowSides, rows: np.ndarray) -> tuple[SideSums, SideSums]:
    """The test's sums for both sides of the deploy, for the statements `rows`, straight from their samples (a sum
    over each side's run of samples): calls, call-weighted mean, Σ e² about the side's mean, Σ e_i e_(i+1) within the
    side, and with stddev_exec_time Σ S (NaN where an interval's is unknown) and Σ (c − 1). `rows` ascending; when
    they are few, only their samples are read."""
    if len(rows) == samples.groups:  # all of them (rows ascending): the samples as they are
        offsets, s_calls, s_time, sumsq = samples.offsets, samples.calls, samples.time, samples.sumsq
        calls, time, n_before = sides.calls, sides.time, sides.n_before
    elif 2 * len(rows) >= samples.groups:  # most of them: all, then those, rather than gather most samples
        a, b = _deploy_side_sums(samples, sides, np.arange(samples.groups))
        return a.rows(rows), b.rows(rows)
    else:
        n = np.diff(samples.offsets)[rows]
        offsets = np.concatenate([[0], np.cumsum(n)])
        index = np.arange(offsets[-1]) + np.repeat(samples.offsets[rows] - offsets[:-1], n)
        pick = (2 * rows[:, None] + np.arange(2)[None, :]).ravel()
        calls, time, n_before = sides.calls[pick], sides.time[pick], sides.n_before[rows]
        s_calls, s_time = samples.calls[index], samples.time[index]
        sumsq = samples.sumsq[index] if samples.sumsq is not None else None
    starts, sizes = _side_segments(offsets, n_before)
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = time / calls
    e = s_time - np.repeat(mean, sizes.ravel()) * s_calls  # residuals about each side's own mean: no cancellation
    ee = segment_sums(e * e, starts, sizes).ravel()
    # the pairs of neighbouring intervals within a side: pair i (intervals i, i + 1) for i from its first interval on
    acov = segment_sums(e[1:] * e[:-1], starts, np.maximum(sizes - 1, 0)).ravel()
    ss = ss_dof = None
    if sumsq is not None:
        unknown = segment_sums(np.isnan(sumsq), starts, sizes).ravel()
        total = segment_sums(np.nan_to_num(sumsq, nan=0.0), starts, sizes).ravel()
        ss = np.where(unknown > 0, np.nan, total)
        ss_dof = segment_sums(np.maximum(s_calls - 1, 0.0), starts, sizes).ravel()

    def one(i: int) -> SideSums:  # the before (0) or after (1) side of every statement
        return SideSums(
            calls=calls[i::2],
            mean=mean[i::2],
            ee=ee[i::2],
            acov=acov[i::2],
            ss=ss[i::2] if ss is not None else None,
            ss_dof=ss_dof[i::2] if ss_dof is not None else None,
        )

    return one(0), one(1)


def _floors(sides: WindowSides, settings: EngineSettings) -> tuple[np.ndarray, np.ndarray]:
    """Verdict and reason arrays (plain strings: the frame's values): `insufficient_data` where either side lacks the
    intervals or calls, `inconclusive` elsewhere until the statement is detected or cleared."""
    g = len(sides.n_before)
    verdict = np.full(g, Verdict.INCONCLUSIVE.value, dtype=object)
    reason = np.full(g, "", dtype=object)
    few_samples = (sides.n_before < settings.min_samples) | (sides.n_after < settings.min_samples)
    few_calls = ~few_samples & ((sides.calls_before < settings.min_calls) | (sides.calls_after < settings.min_calls))
    verdict[few_samples | few_calls] = Verdict.INSUFFICIENT_DATA.value
    reason[few_samples] = Reason.FLOOR_SAMPLES.value
    reason[few_calls] = Reason.FLOOR_CALLS.value
    return verdict, reason


def _decide_blocks(
    samples: WindowSamples,
    blocks: list[np.ndarray],
    deploy: int,
    settings: EngineSettings,
    reason: np.ndarray,
    found: Found,
    known: Prior | None,
) -> None:
    """Steps 5 to 7 for the blocks of candidate statements (locate, check the tolerance, test, fit the trend). A large
    block is cut into parts, and the parts of all blocks are decided on the machine's cores from one pool, each
    thread taking the next part when it is done with one (each part's statements are decided alone, so the result is
    the same; numpy releases the interpreter's lock inside its operations, and the parts write to different rows)."""
    parts = [part for block in blocks for part in np.array_split(block, max(1, min(WORKERS, len(block) // PART_ROWS)))]
    if len(parts) <= 1 or WORKERS <= 1:
        for part in parts:
            _decide_part(samples, part, deploy, settings, reason, found, known, WORKERS)
        return
    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        done = [pool.submit(_decide_part, samples, part, deploy, settings, reason, found, known, 1) for part in parts]
        for future in done:
            future.result()


def _decide_part(
    samples: WindowSamples,
    block: np.ndarray,
    deploy: int,
    settings: EngineSettings,
    reason: np.ndarray,
    found: Found,
    known: Prior | None,
    workers: int,
) -> None:
    """Steps 5 to 7 for some candidate statements, E-divisive on up to `workers` threads (`_decide_blocks`)."""
    tolerance = int(settings.tolerance.total_seconds() * 1e9)
    padded = _padded(samples, block)
    x, ends, n = padded.mean, padded.end, padded.n
    rows = np.arange(len(block))
    k, q = best_split(x, n, workers)
    located = k > 0
    found.q_stat[block[located]] = q[located]
    reason[block[~located]] = Reason.NO_CHANGE_POINT.value
    at = ends[rows, np.maximum(k - 1, 0)]
    found.change_at[block[located]] = at[located]
    near = located & (np.abs(at - deploy) <= tolerance)
    reason[block[located & ~near]] = Reason.OUTSIDE_TOLERANCE.value
    if not near.any():
        return
    keep: np.ndarray | slice = slice(None) if near.all() else np.flatnonzero(near)  # all of them: views, no copy
    tested = block[keep]
    calls, time, n_t, ends_t = padded.calls[keep], padded.time[keep], n[keep], ends[keep]
    sumsq = padded.sumsq[keep] if padded.sumsq is not None else None
    res = split_tests(
        calls,
        time,
        sumsq,
        n_t,
        _candidate_splits(ends_t, n_t, deploy, tolerance, settings),
        settings.threshold,
        known.rows(tested) if known is not None else None,
    )
    found.t_stat[tested], found.dof[tested], found.p_value[tested] = res.t, res.dof, res.p
    found.segment_mean_before_ms[tested], found.segment_mean_after_ms[tested] = res.mean_a, res.mean_b
    found.segment_n_before[tested] = np.nan_to_num(res.n_a).astype(np.int64)
    found.segment_n_after[tested] = np.nan_to_num(res.n_b).astype(np.int64)
    found.factor_low[tested], found.factor_high[tested] = res.factor_low, res.factor_high
    found.serial_correlation[tested] = res.rho
    found.history_intervals[tested] = res.prior_intervals
    ok = ~np.isnan(res.t)
    split_at = ends_t[np.arange(len(tested)), np.maximum(res.k - 1, 0)]
    found.change_at[tested[ok]] = split_at[ok]
    found.shift_beyond_trend[tested] = level_shift_beyond_trend(calls, x[keep], ends_t, n_t, res.k)


def _candidate_splits(
    ends: np.ndarray, n: np.ndarray, deploy: int, tolerance: int, settings: EngineSettings
) -> np.ndarray:
    """[rows, L + 1]: the splits k whose change time (the end of interval k − 1) lies within the tolerance of the
    deploy and that leave at least max(min_samples, ⌊n/10⌋) intervals on each side — E-divisive's admissible splits.
    A side of three intervals whose values happen to lie close together has a variance estimate far too small, and
    Welch–Satterthwaite's degrees of freedom then follow the long side: the edges are where a scan over splits
    would otherwise find its false detections (the periodic check, whose candidates span the whole window)."""
    rows, length = ends.shape
    # A row's intervals end in time order, so its splits near the deploy form a range: k − 1 from the first interval
    # ending at or after deploy − tolerance up to the last ending at or before deploy + tolerance.
    inside = None if (n == length).all() else np.arange(length)[None, :] < n[:, None]

    def count(ending: np.ndarray) -> np.ndarray:
        return (ending if inside is None else ending & inside).sum(axis=1)

    side = np.maximum(max(settings.min_samples, 2), min_segment(n))
    low = np.maximum(side, count(ends < deploy - tolerance) + 1)
    high = np.minimum(n - side, count(ends <= deploy + tolerance))
    if settings.tolerance < settings.window:
        # A deploy cannot slow a statement down before it happened: only splits at or after it (the interval that
        # straddles the deploy is on the after side) are candidates, which halves K. The periodic check, whose
        # tolerance spans its window, has no such moment: every admissible split is a candidate there.
        low = np.maximum(low, _deploy_split(ends, n, deploy))
    k = np.arange(length + 1)[None, :]
    return (k >= low[:, None]) & (k <= high[:, None])


def _deploy_split(ends: np.ndarray, n: np.ndarray, deploy: int) -> np.ndarray:
    """Per row, the split at the deploy: the number of intervals that end at or before it."""
    before = ends <= deploy
    if (n < ends.shape[1]).any():
        before &= np.arange(ends.shape[1])[None, :] < n[:, None]
    return before.sum(axis=1)


def _clearing_splits(
    samples: WindowSamples,
    rows: np.ndarray,
    n_before: np.ndarray,
    deploy: int,
    tolerance: int,
    settings: EngineSettings,
) -> tuple[np.ndarray, np.ndarray]:
    """Per row, its first split and which of the splits from it on ([rows, J] boolean) the clearing rule checks its
    bound at (engine/inference.py, "Clearing"): the detection's candidates (`_candidate_splits`: a change time — the
    end of interval k − 1 — within the tolerance of the deploy, at least max(min_samples, ⌊n/10⌋) intervals each
    side, for a deploy at or after its split), which form a range since a statement's intervals end in time order;
    and for a deploy its own split, which a sparse statement's candidates lack when its last interval before the
    deploy ended more than the tolerance before it (the floors leave min_samples each side)."""
    n = np.diff(samples.offsets)[rows]
    at = n_before[rows]  # the deploy's split: the intervals that end at or before it
    early = at - _ends_within(samples, rows, at, n, -1, deploy - tolerance)  # end < deploy − tolerance
    late = at + _ends_within(samples, rows, at, n, 1, deploy + tolerance)  # end ≤ deploy + tolerance
    side = np.maximum(max(settings.min_samples, 2), min_segment(n))
    low, high = np.maximum(early + 1, side), np.minimum(late, n - side)
    own = np.zeros(len(rows), dtype=bool)
    if settings.tolerance < settings.window:
        low = np.maximum(low, at)  # at or after the deploy (see _candidate_splits)
        own = (at >= settings.min_samples) & (n - at >= settings.min_samples)
    some = low <= high
    first = np.minimum(np.where(some, low, n), np.where(own, at, n))
    last = np.maximum(np.where(some, high, 0), np.where(own, at, 0))
    wanted = some | own
    first = np.where(wanted, first, 1)
    width = int((last - first + 1)[wanted].max()) if wanted.any() else 0
    k = first[:, None] + np.arange(width)[None, :]
    splits = (some[:, None] & (k >= low[:, None]) & (k <= high[:, None])) | (own[:, None] & (k == at[:, None]))
    return first, splits


def _ends_within(
    samples: WindowSamples, rows: np.ndarray, at: np.ndarray, n: np.ndarray, direction: int, limit: int
) -> np.ndarray:
    """Per row, how many of its intervals next to its deploy split `at` end between the deploy and `limit`: those
    after it (direction 1, ending at or before limit) or before it (−1, ending at or after limit). A statement's
    intervals end in time order, so only its intervals nearest the deploy are read, in widening windows."""
    start = samples.offsets[rows]
    width = 16
    while True:
        step = np.arange(width)[None, :]
        index = at[:, None] + step if direction > 0 else at[:, None] - 1 - step
        inside = (index >= 0) & (index < n[:, None])
        end = samples.end[np.where(inside, start[:, None] + index, 0)]
        count = (inside & ((end <= limit) if direction > 0 else (end >= limit))).sum(axis=1)
        if (count < width).all():
            return count
        width *= 2


def _clearing(
    samples: WindowSamples,
    rows: np.ndarray,
    sides: WindowSides,
    deploy: int,
    settings: EngineSettings,
    found: Found,
    known: Prior | None,
) -> None:
    """The clearing rule's bound for the decidable statements not detected (in place, in `found`)."""
    tolerance = int(settings.tolerance.total_seconds() * 1e9)
    first, splits = _clearing_splits(samples, rows, sides.n_before, deploy, tolerance, settings)
    calls, time = sides.calls.reshape(-1, 2).sum(axis=1), sides.time.reshape(-1, 2).sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        centre = np.where(calls > 0, time / calls, 0.0)
    res = clearing_bounds(
        samples.calls,
        samples.time,
        samples.sumsq,
        samples.offsets,
        centre,
        rows,
        first,
        splits,
        settings.threshold,
        settings.min_rise_ms,
        settings.clear_level,
        known.rows(rows) if known is not None else None,
        before_deploy=settings.tolerance < settings.window,  # a deploy's analysis, not a periodic check
    )
    found.factor_bound[rows] = res.bound
    found.cleared[rows], found.precise[rows], found.conflict[rows] = res.cleared, res.precise, res.conflict


def _clear(found: Found, verdict: np.ndarray, reason: np.ndarray) -> None:
    """`no_regression` for the statements cleared; the others that were neither detected nor cleared stay
    `inconclusive`, and those the pre-filter stopped say why (in place, in `verdict` and `reason`): the estimate lies
    too close to 1 + θ for its precision (interval_spans_threshold), or the precision itself falls short, in a window
    unlike its noise prior (history_conflict) or not (interval_too_wide). The steps after the pre-filter keep their
    reason."""
    open_ = verdict == Verdict.INCONCLUSIVE
    cleared = open_ & found.cleared
    verdict[cleared] = Verdict.NO_REGRESSION.value
    why = open_ & ~cleared & (reason == Reason.BELOW_THRESHOLD)
    precise, conflict = found.precise, found.conflict
    reason[why & precise] = Reason.INTERVAL_SPANS_THRESHOLD.value
    reason[why & ~precise & conflict] = Reason.PRIOR_CONFLICT.value
    reason[why & ~precise & ~conflict] = Reason.INTERVAL_TOO_WIDE.value


def _known(
    samples: WindowSamples,
    sides: WindowSides,
    decidable: np.ndarray,
    at_deploy: tuple[SideSums, SideSums] | None,
    prior: pd.DataFrame | None,
    settings: EngineSettings,
) -> Prior | None:
    """What the test knows of each statement's noise beyond its window: its own prior from earlier days
    (`_prior_rows`), and the serial correlation of the decidable statements of like busyness at the deploy's split
    (inference.pooled_serial_correlation), for every row; None when there is neither."""
    own = _prior_rows(samples, prior, settings)
    if at_deploy is None or not settings.pool_serial_correlation:
        return own
    pool_rho, pool_n = np.zeros(samples.groups), np.zeros(samples.groups)
    rows = np.flatnonzero(decidable)
    pool_rho[rows], pool_n[rows] = pooled_serial_correlation(*at_deploy, sides.n_before[rows], sides.n_after[rows])
    if not (pool_n > 0).any():
        return own
    if own is None:
        g = samples.groups
        own = Prior(np.zeros(g), np.ones(g), np.zeros(g), settings.prior_conflict_alpha, np.full(g, np.nan))
    return dataclasses.replace(own, pool_rho=pool_rho, pool_intervals=pool_n)


def _prior_rows(samples: WindowSamples, prior: pd.DataFrame | None, settings: EngineSettings) -> Prior | None:
    """Each query's noise prior (of the key it is reported under; failing that, of a key merged into it), the
    intervals capped at settings.prior_max_intervals and zeroed below prior_min_intervals; None when no query has a
    usable one, so the test runs exactly as without a prior."""
    if prior is None:
        return None
    if not isinstance(prior, pd.DataFrame):
        raise TypeError(f"prior must be a pandas DataFrame, not {type(prior).__name__}")
    missing = [c for c in PRIOR_COLUMNS if c not in prior.columns]
    if missing:
        raise ValueError(f"prior is missing column(s) {', '.join(missing)} (needs {', '.join(PRIOR_COLUMNS)})")
    if prior["query_key"].duplicated().any():
        raise ValueError("prior.query_key has duplicates: one row of estimates per statement")
    values = {}
    optional = ["calls_per_interval"] if "calls_per_interval" in prior.columns else []
    for name in [*PRIOR_COLUMNS[1:], *optional]:
        try:
            values[name] = prior[name].to_numpy(dtype=np.float64, na_value=np.nan)
        except (TypeError, ValueError):
            raise ValueError(f"prior.{name} must be numeric") from None
        if np.isinf(values[name]).any():
            raise ValueError(f"prior.{name} has infinite values")
    rho, dispersion, intervals = values["serial_correlation"], values["dispersion"], values["intervals"]
    if ((np.abs(rho) >= 1) & ~np.isnan(rho)).any():
        raise ValueError("prior.serial_correlation must lie strictly between -1 and 1")
    if ((dispersion < 0) | (intervals < 0)).any():
        raise ValueError("prior.dispersion and prior.intervals must not be negative")
    busy = values.get("calls_per_interval", np.full(len(prior), np.nan))
    if (busy < 0).any():
        raise ValueError("prior.calls_per_interval must be finite and not negative")
    index = pd.Index(prior["query_key"])
    row = index.get_indexer(samples.keys)
    for g, merged in enumerate(samples.merged):  # a rotated queryid: the prior of a key merged into it
        for key in merged:
            if row[g] >= 0:
                break
            row[g] = index.get_indexer([key])[0]
    usable = (row >= 0) & ~np.isnan(rho[row]) & ~np.isnan(dispersion[row]) & (dispersion[row] > 0)
    n = np.where(usable, intervals[row], 0.0)
    n = np.where(n >= settings.prior_min_intervals, np.minimum(n, settings.prior_max_intervals), 0.0)
    if not (n > 0).any():
        return None
    return Prior(
        rho=np.where(n > 0, rho[row], 0.0),
        dispersion=np.where(n > 0, dispersion[row], 1.0),
        intervals=n,
        conflict_alpha=settings.prior_conflict_alpha,
        calls_per_interval=np.where(n > 0, busy[row], np.nan),
    )


def _result(samples: WindowSamples, columns: dict[str, object]) -> pd.DataFrame:
    """The result frame, built at once: a row per query group, the given columns, NaN in the others."""
    n = len(samples.keys)
    given = {"query_key": samples.keys, "merged_keys": samples.merged, **columns}
    return pd.DataFrame({name: given[name] if name in given else np.full(n, np.nan) for name in COLUMNS})


def _utc_ns(value: datetime | pd.Timestamp) -> int:
    stamp = pd.Timestamp(value)
    if stamp.tzinfo is None:
        raise ValueError(f"deploy_at must be time-zone-aware, not {value!r}")
    return int(stamp.tz_convert("UTC").as_unit("ns").value)


def _blocks(samples: WindowSamples, candidates: np.ndarray) -> list[np.ndarray]:
    """Candidates sorted by series length, cut into blocks whose padded matrices hold at most BLOCK_CELLS values."""
    if not len(candidates):
        return []
    lengths = np.diff(samples.offsets)[candidates]
    order = candidates[np.argsort(lengths, kind="stable")]
    rows = max(1, BLOCK_CELLS // max(1, int(lengths.max())))
    return [order[i : i + rows] for i in range(0, len(order), rows)]


def _padded(samples: WindowSamples, block: np.ndarray) -> Padded:
    """The block's series, left-aligned in [rows, longest] matrices: interval means, ΔC, ΔT, sums of squares (None
    without stddev) and end times; and their lengths n."""
    starts = samples.offsets[block]
    n = samples.offsets[block + 1] - starts
    width = int(n.max())
    if (n == width).all() and (np.diff(starts) == width).all():
        # Series of one length, one after the other in the samples (the usual block): views, no gather.
        span = slice(int(starts[0]), int(starts[0]) + len(block) * width)

        def view(values: np.ndarray) -> np.ndarray:
            return values[span].reshape(len(block), width)

        calls, time = view(samples.calls), view(samples.time)
        with np.errstate(divide="ignore", invalid="ignore"):
            mean = time / calls
        sumsq = view(samples.sumsq) if samples.sumsq is not None else None
        return Padded(mean=mean, calls=calls, time=time, sumsq=sumsq, end=view(samples.end), n=n)
    col = np.arange(width)
    index = starts[:, None] + col[None, :]
    inside = col[None, :] < n[:, None]
    index = np.where(inside, index, 0)
    calls = np.where(inside, samples.calls[index], 0.0)
    time = np.where(inside, samples.time[index], 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = np.where(inside, time / np.where(inside, calls, 1.0), 0.0)
    sumsq = np.where(inside, samples.sumsq[index], 0.0) if samples.sumsq is not None else None
    return Padded(mean=mean, calls=calls, time=time, sumsq=sumsq, end=np.where(inside, samples.end[index], 0), n=n)
