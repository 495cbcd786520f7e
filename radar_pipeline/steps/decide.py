"""Deciding a span of one target's counters, with every rule a decision follows: the one pipeline of a deploy's
first verdict (steps/deploy_analysis.py), each later look (steps/looks.py) and the periodic check
(steps/periodic_check.py).

Read the span (the statements' counters, the scrapes' health, the noise priors, the groups and their share of the
budget) → the engine's decision → the causes of what it found, from their own counters → the impact (what else the
split changed) and what the texts tell (a read's WAL is others', a statement crowded out by another's load is its
collateral) → the plan diffs and the catalog's and settings' named changes → the groups' joint verdicts. `write_window`
stores what a first verdict or a periodic check decided; a later look stores its own rows (warehouse.looks).

Plain Python, so the Dagster assets, the benchmarks and the tests run the same code.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

import numpy as np
import pandas as pd
import sqlalchemy as sa

from radar_pipeline.config import Target
from radar_pipeline.engine import VERDICT_FRAME, Cause, EngineSettings, Verdict, analyse, explain_detections
from radar_pipeline.engine.causes import explained
from radar_pipeline.engine.frames import IMPACT_STATEMENTS, IMPACT_SUMMARY
from radar_pipeline.engine.impact import Impact, classify, collateral_culprits, impact
from radar_pipeline.named_changes import THROUGH_PLAN, NamedChange, ranked
from radar_pipeline.pgss_model import KEY
from radar_pipeline.steps import groups
from radar_pipeline.steps.causes import name_changes
from radar_pipeline.steps.index_advice import advise
from radar_pipeline.steps.look_spans import DECIDED, LookSpan, decide_look
from radar_pipeline.steps.noise import prior_for
from radar_pipeline.steps.plan_diffs import plan_diffs
from radar_pipeline.steps.replacements import candidate_pairs, reads_only, statement_class
from radar_pipeline.steps.rhythm import levels_for
from radar_pipeline.steps.waits import REPLACES, wait_causes
from radar_pipeline.warehouse import analysis, deploys
from radar_pipeline.warehouse.analysis import ANALYSED_VERDICTS, WindowHealth
from radar_pipeline.warehouse.groups import write_groups
from radar_pipeline.warehouse.waits import wait_counts

TEXT_LENGTH = 120  # characters of a changed statement's text kept with the analysis's result
CAUSE_TEXT = 60  # characters of the culprit's text in a collateral detection's cause_detail


@dataclass(frozen=True)
class AnalysisRun:
    """What one run of analyses shares, whatever it analyses (one deploy, a backfill's deploys, a periodic check):
    the warehouse, the engine settings, the Dagster run that asked (None outside one), the wait after a window
    closes before its last scrape is surely stored (`settle`, one scrape interval), and the watched targets by
    name, so the current plan of a detection can be captured (`live_targets`; none: plans from the warehouse only),
    and whether a periodic check sets its statements against their weekly rhythm (`rhythms`, the lab's comparison)."""

    warehouse: sa.Engine
    settings: EngineSettings
    run_id: str | None = None
    settle: timedelta = timedelta(0)
    live_targets: Mapping[str, Target] = field(default_factory=dict)
    rhythms: bool = True  # a periodic check compares each hour with its usual level (steps/rhythm.py)

    def live(self, target: str) -> Target | None:
        """The watched target `target`, when this run may reach it."""
        return self.live_targets.get(target)


@dataclass
class Timings:
    """Seconds each part of an analysis took: reading the window, the engine (every call into engine/: the decision,
    the causes, the impact, its collateral culprits, the groups), the plans of detections, the write (with the texts
    it reads for it, and the commit)."""

    read: float = 0.0
    engine: float = 0.0
    plans: float = 0.0
    write: float = 0.0

    @property
    def total(self) -> float:
        """The whole analysis."""
        return self.read + self.engine + self.plans + self.write


@dataclass
class WindowVerdicts:
    """One span decided (decide_span): its verdicts, its scrape health, the texts of its detections and tiered
    statements, and the timings."""

    window: tuple[datetime, datetime]
    verdicts: pd.DataFrame  # ANALYSED_VERDICTS: the engine's columns plus KEY, fingerprint, merged_queryids, plan_diff
    health: WindowHealth
    texts: dict[int, str]
    seconds: Timings
    # What else the split changed (engine/impact.py): load per minute for the target (dbid -1) and per database, and
    # the statements whose load changed (KEY columns, kind, the numbers, `query` its text cut to TEXT_LENGTH).
    summary: pd.DataFrame
    changes: pd.DataFrame
    # The groups decided together (steps/groups.py: a row per group, its joint verdict and members)
    groups: pd.DataFrame = field(default_factory=pd.DataFrame, kw_only=True)


def decide_span(
    run: AnalysisRun,
    analysis_id: str,
    target: str,
    split_at: datetime,
    span: LookSpan | None = None,
    samples: analysis.StoredSamples | None = None,
    still: pd.DataFrame | None = None,
) -> WindowVerdicts:
    """Decide the statements of the target on the span [split_at − span.before, split_at + span.after] at the span's
    budget and clearing level, for the analysis `analysis_id` (a deploy's id, or a periodic check's: no deploy, so
    no change is taken for a later deploy's), with every rule of a decision (the module docstring); no transaction is
    open on return. `span` None: the settings' own (W either side, their B and β: a periodic check).

    A first verdict or a periodic check decides every statement of the span (`still` None) and forms its groups
    there (steps.groups.plan_groups: their share of the budget, then their joint verdicts, each tested member's
    verdict marked). A later look decides only the open statements `still` (KEY columns; engine decision by
    steps.look_spans.decide_look, each with its share of the look's whole family) and returns only the rows it
    decided, and no groups: the first verdict formed them and fixed their share of each look's budget, so a later
    look's groups are decided before its statements on their members' evidence (steps.groups.later_look), and
    `span.budget` is then the statements' share.

    The impact (engine/impact.py) is computed from the same counters, over the widest equal sides the span holds (W
    at a first verdict or a periodic check), and classified from the texts of the statements that may matter
    (steps/replacements.py: control statements, the deploy's own statements, rewrites). A detection the counters
    call WAL-bound whose statement only reads is left open (`_reads_do_not_write_wal`). A detection whose cause the
    counters left open and whose change coincides with another statement's rise in load (engine
    `collateral_culprits`) gets cause collateral, its cause_detail naming that statement and what rose. Each
    detection gets a plan diff from the stored plans (capturing the current plan from the target, when the run may
    reach it, when none was stored after the change); a changed shape makes its cause plan_changed, whatever else was
    found. A statement whose sessions the scrapes' samples found waiting on a lock or on I/O for half of what each
    call added gets lock_wait or io_wait (`_waited`, steps/waits.py). The catalog and settings changes of the span that
    touch a statement a cause is said for are named on its row (`_apply_named_changes`), and a detection that lost an
    index gets one, tested with hypopg where the watched database has it (steps/index_advice.py).

    The warehouse is read in short transactions that end before the watched server is reached: a slow watched server
    keeps no warehouse transaction or lock waiting. With `samples` (read for a span holding this one) the span is cut
    from them instead of read. The span's read carries what deciding needs; the counters the causes compare are read
    after, for the explained statements alone (analysis.read_cause_counters, engine `explain_detections`: the same
    causes and figures). Each statement's noise prior (its serial correlation and dispersion, estimated from the days
    before the span, steps.noise) goes to the engine with the counters, and for a periodic check (when run.rhythms)
    each statement's usual level at the span's hours of the week (steps.rhythm). The engine's frames are checked as they
    arrive (VERDICT_FRAME, IMPACT_STATEMENTS, IMPACT_SUMMARY); the columns added here, and the one engine column
    overwritten (a detection's cause), are ANALYSED_VERDICTS'.
    """
    settings = run.settings
    if span is None:
        span = LookSpan(0, settings.window, settings.window, settings.false_alert_budget, False, settings.clear_level)
    decide = replace(settings, false_alert_budget=span.budget, clear_level=span.clear_level)
    sides = replace(settings, window=min(span.before, span.after))  # the impact compares equal sides
    timings = Timings()
    lo, hi = split_at - span.before, split_at + span.after
    # a deploy's (a periodic check has none): a change first seen after a later deploy is that one's (catalog)
    deployed_at = None if analysis_id.startswith(deploys.PERIODIC_PREFIX) else split_at
    with run.warehouse.connect() as conn:
        started = time.perf_counter()
        window = samples.window(lo, hi) if samples is not None else analysis.read_window(conn, target, lo, hi)
        health = analysis.window_health(conn, target, lo, hi)
        prior = prior_for(conn, target, lo, window.keys)  # each statement's noise from the days before
        # a periodic check sets each statement against its usual level at each hour of the week
        levels = levels_for(conn, target, window.keys, lo, hi) if run.rhythms and deployed_at is None else None
        planned = None if still is not None else groups.plan_groups(conn, target, window, lo, hi, decide, deployed_at)
        timings.read = time.perf_counter() - started
        conn.rollback()  # nothing written: no transaction stays open while the engine runs

        started = time.perf_counter()
        if still is None:
            assert planned is not None
            result = analyse(window.counters, split_at, planned.statement_settings, prior=prior, levels=levels)
        else:
            keys = window.keys.reset_index().rename(columns={"index": "query_key"})
            wanted = keys.merge(still[KEY], on=KEY)["query_key"].to_numpy()
            result = decide_look(window.counters, split_at, settings, span, wanted, prior)
            result = result[result["verdict"].isin(DECIDED)].reset_index(drop=True)  # a look writes what it decides
        timings.engine = time.perf_counter() - started
        if result.empty and planned is None:  # the look decided nothing: nothing more to say
            return WindowVerdicts((lo, hi), result, health, {}, timings, pd.DataFrame(), pd.DataFrame())
        # and the statements probably slower, or open with their means beyond θ: a cause on their rows too
        detections = result[explained(result, settings.threshold)]
        if not detections.empty:  # their causes, from the counters only they need, read by their keys
            started = time.perf_counter()
            merged = [k for keys in detections["merged_keys"] for k in keys]
            causes = analysis.read_cause_counters(conn, target, lo, hi, window, [*detections["query_key"], *merged])
            conn.rollback()
            timings.read += time.perf_counter() - started
            started = time.perf_counter()
            result = explain_detections(causes, result, split_at, decide, before=span.before, after=span.after)
            timings.engine += time.perf_counter() - started

        started = time.perf_counter()
        result = VERDICT_FRAME.check(result, "analyse")
        verdicts = _with_statement_keys(result, window)
        if still is not None:
            verdicts = verdicts.merge(still[KEY], on=KEY)  # a look decides only what was open, under the same key
        found = impact(window.counters, split_at, sides, result, watched_since=health.first_scrape)
        IMPACT_STATEMENTS.check(found.statements, "impact")
        IMPACT_SUMMARY.check(found.summary, "impact")
        timings.engine += time.perf_counter() - started

        started = time.perf_counter()
        detected_keys = verdicts.loc[verdicts["verdict"] == Verdict.DETECTED, "query_key"]
        found = _classified(conn, target, found, window, sides, detected_keys)
        _reads_do_not_write_wal(conn, target, verdicts)
        judged = time.perf_counter()
        culprits = collateral_culprits(verdicts, found, sides)
        judged = time.perf_counter() - judged  # the engine's, not the write's (a loop over the detections)
        timings.engine += judged
        changes = _changes_with_keys(found.changes, window)
        _name_collateral(conn, target, verdicts, culprits, changes, window)
        _waited(conn, target, verdicts, split_at, lo, hi, settings.threshold)
        detected = verdicts["verdict"] == Verdict.DETECTED
        # the texts of the detections, and of the statements marked probably slower or improved (their table too)
        texts = analysis.query_texts(conn, target, verdicts.loc[detected | verdicts["tier"].notna(), KEY])
        timings.write = time.perf_counter() - started - judged  # the texts, read here for the write's sake

    started = time.perf_counter()
    replanned = _with_plan_diffs(run, target, verdicts, detected, hi)
    # the catalog and settings changes of the window (issue 28) that touch a detection, or a statement probably slower
    # (issue 39: said on its row too), read once for both
    told = explained(verdicts, settings.threshold)
    if told.any():
        with run.warehouse.connect() as conn:
            named = name_changes(conn, target, verdicts[told], lo, hi, settings.tolerance, deployed_at)
        _apply_named_changes(verdicts, verdicts.index[told], named, replanned[told].tolist())
    if detected.any():  # an index for what lost one, tested with hypopg where the watched database has it
        with run.warehouse.connect() as conn:
            advise(conn, target, verdicts, run.live(target))
    timings.plans = time.perf_counter() - started
    _no_nan_words(verdicts)
    started = time.perf_counter()
    decided_groups = pd.DataFrame()
    if planned is not None:
        decided_groups = groups.decide_and_mark(verdicts, planned, decide)  # the joint tests, the members marked
    timings.engine += time.perf_counter() - started
    return WindowVerdicts(
        window=(lo, hi),
        verdicts=verdicts,
        health=health,
        texts=texts,
        seconds=timings,
        summary=found.summary,
        changes=changes.drop(columns="query_key"),
        groups=decided_groups,
    )


WORDS = ("cause", "cause_detail", "undo_hint", "named_changes")


def _no_nan_words(verdicts: pd.DataFrame) -> None:
    """The word columns without pandas' NaN: a value written at some rows (frame.loc) turns the None of the others
    into NaN, which a reader takes for words ("nan") or a truthy value; None is what no words are."""
    for column in WORDS:
        if column in verdicts:
            values = verdicts[column].astype(object)
            verdicts[column] = values.where(values.notna(), None)


def _name_collateral(
    conn: sa.Connection,
    target: str,
    verdicts: pd.DataFrame,
    culprits: pd.DataFrame,
    changes: pd.DataFrame,
    window: analysis.WindowCounters,
) -> None:
    """The texts of the impact's notable statements (`changes["query"]`, cut to TEXT_LENGTH) and, for each detection
    engine `collateral_culprits` blamed, cause collateral and a cause_detail naming the culprit and what rose; in
    place, the texts read in one query."""
    blamed = culprits["culprit"].notna().to_numpy()
    culprit_keys = window.keys.loc[culprits.loc[blamed, "culprit"].tolist()]
    texts = analysis.query_texts(
        conn, target, pd.concat([changes[KEY], culprit_keys], ignore_index=True), length=TEXT_LENGTH
    )
    changes["query"] = [texts.get(int(q), "") for q in changes["queryid"]]
    if not blamed.any():
        return
    culprit_queryids = culprit_keys["queryid"].astype(int).tolist()
    cut = {q: texts.get(q, "")[:CAUSE_TEXT] for q in culprit_queryids}
    collateral = [
        f"collateral of queryid {q} ({rose} at the same change): {cut[q]}".rstrip()
        for q, rose in zip(culprit_queryids, culprits.loc[blamed, "rose"], strict=True)
    ]
    ANALYSED_VERDICTS.assign(verdicts, "cause", Cause.COLLATERAL.value, rows=blamed)
    ANALYSED_VERDICTS.assign(verdicts, "cause_detail", collateral, rows=blamed)


def _with_plan_diffs(
    run: AnalysisRun, target: str, verdicts: pd.DataFrame, detected: pd.Series, hi: datetime
) -> pd.Series:
    """Each detection's plan diff (steps.plan_diffs, in place): a changed shape makes its cause plan_changed and its
    cause_detail the plan's own words, whatever the counters or a collateral culprit said. Returns, per row, whether
    its plan changed."""
    replanned = pd.Series(False, index=verdicts.index)
    if not detected.any():
        return replanned
    found = plan_diffs(run.warehouse, target, verdicts[detected], run.live(target), hi)
    diffs = [p.diff for p in found]
    at = verdicts.index[detected]
    ANALYSED_VERDICTS.assign(verdicts, "plan_diff", pd.Series(diffs, index=at, dtype=object), rows=detected)
    shared = pd.Series([p.shared_with for p in found], index=at, dtype=object)
    ANALYSED_VERDICTS.assign(verdicts, "queryid_shared_with", shared, rows=detected)
    changed = [bool(d.get("shape_changed")) for d in diffs]
    ANALYSED_VERDICTS.assign(verdicts, "cause", Cause.PLAN_CHANGED.value, rows=at[changed])
    summaries = [d.get("summary") for d, c in zip(diffs, changed, strict=True) if c]
    ANALYSED_VERDICTS.assign(verdicts, "cause_detail", pd.Series(summaries, dtype=object).values, rows=at[changed])
    replanned[at] = changed
    return replanned


def _waited(
    conn: sa.Connection,
    target: str,
    verdicts: pd.DataFrame,
    split_at: datetime,
    lo: datetime,
    hi: datetime,
    threshold: float,
) -> None:
    """The rows a cause is said for (causes.explained at θ `threshold`) whose sessions the scrapes' samples found
    waiting on a lock or on I/O for at least half of what each call added after the split (steps/waits.py): cause
    lock_wait or io_wait, the wait and the statement holding the lock in cause_detail, where their cause is one a
    wait says more than (waits.REPLACES)."""
    causes = verdicts["cause"].map(lambda c: None if c is None or pd.isna(c) else c)
    told = explained(verdicts, threshold) & causes.isin(REPLACES).to_numpy()
    if not told.any():
        return
    rows = verdicts.loc[told, ["dbid", "userid", "queryid", "calls_before", "calls_after"]]
    rows = rows.assign(
        split=split_at,  # the window's means either side of it are the rates the waits are set against
        mean_before_ms=verdicts.loc[told, "mean_before_ms"],
        mean_after_ms=verdicts.loc[told, "mean_after_ms"],
        before_s=(split_at - lo).total_seconds(),
        after_s=(hi - split_at).total_seconds(),
    ).reset_index(drop=True)
    found = wait_causes(wait_counts(conn, target, rows, lo, hi), rows)
    if not found:
        return
    at = verdicts.index[told]
    holders = [
        {"dbid": rows.loc[i, "dbid"], "userid": w.blocker_userid, "queryid": w.blocker_queryid, "toplevel": True}
        for i, w in found.items()
        if w.blocker_queryid is not None and w.blocker_userid is not None
    ]
    texts = analysis.query_texts(conn, target, pd.DataFrame(holders, columns=KEY), length=CAUSE_TEXT)
    for i, w in found.items():
        text = texts.get(w.blocker_queryid) if w.blocker_queryid is not None else None
        ANALYSED_VERDICTS.assign(verdicts, "cause", w.cause.value, rows=[at[i]])
        ANALYSED_VERDICTS.assign(verdicts, "cause_detail", w.sentence(text), rows=[at[i]])


def _reads_do_not_write_wal(conn: sa.Connection, target: str, verdicts: pd.DataFrame) -> None:
    """A detection the counters call wal_bound whose statement only reads (steps/replacements.reads_only) is left
    open instead (unexplained, the figures kept in its cause_detail): a read's WAL is others' doing (pruning the dead
    rows of their writes), so a statement whose load rose at the same moment is named as its cause if there is one."""
    wal = verdicts["cause"] == Cause.WAL_BOUND.value
    if not wal.any():
        return
    texts = analysis.query_texts(conn, target, verdicts.loc[wal, KEY], length=analysis.WHOLE_TEXT)
    reads = wal & verdicts["queryid"].map(lambda q: reads_only(texts.get(int(q), ""))).astype(bool)
    if reads.any():
        words = [
            f"{d}, though it only reads (pruning or hint bits after others' writes)"
            for d in verdicts.loc[reads, "cause_detail"]
        ]
        ANALYSED_VERDICTS.assign(verdicts, "cause", Cause.UNEXPLAINED.value, rows=reads)
        ANALYSED_VERDICTS.assign(verdicts, "cause_detail", words, rows=reads)


def _apply_named_changes(
    verdicts: pd.DataFrame, at: pd.Index, named: list[list[NamedChange]], plan_changed: list[bool]
) -> None:
    """Each detection's (or probably slower statement's) named changes (most telling first). The first that can slow
    a statement (NamedChange.slows) gives its undo, and its cause and sentence unless the plan changed, which stays
    the cause, the change named beside it in cause_detail; changes that cannot slow one are only listed. A table
    analysed or gone stale (THROUGH_PLAN) slows a statement through its plan: when the plan changed it is the cause
    (statistics_changed, statistics_stale: the plan changed because the estimates did); without a plan diff it is
    the cause only where the counters name none."""
    for label, changes, replanned in zip(at, named, plan_changed, strict=True):
        if not changes:
            continue
        changes = ranked(changes)
        rows = [label]
        ANALYSED_VERDICTS.assign(verdicts, "named_changes", json.dumps([c.to_json() for c in changes]), rows=rows)
        first = next((c for c in changes if c.slows), None)
        if first is None:
            continue
        through_plan = first.kind in THROUGH_PLAN
        counted = verdicts.at[label, "cause"] if "cause" in verdicts else None
        if through_plan and not replanned and isinstance(counted, str) and counted != Cause.UNEXPLAINED.value:
            continue
        ANALYSED_VERDICTS.assign(verdicts, "undo_hint", first.undo, rows=rows)
        if replanned:
            if through_plan:
                ANALYSED_VERDICTS.assign(verdicts, "cause", first.cause.value, rows=rows)
            ANALYSED_VERDICTS.assign(verdicts, "cause_detail", f"plan changed; {first.sentence()}", rows=rows)
        else:
            ANALYSED_VERDICTS.assign(verdicts, "cause", first.cause.value, rows=rows)
            ANALYSED_VERDICTS.assign(verdicts, "cause_detail", first.sentence(), rows=rows)


def write_window(conn: sa.Connection, run: AnalysisRun, analysis_id: str, target: str, decided: WindowVerdicts) -> None:
    """Replace the analysis `analysis_id` on the target with the decided window (verdicts, radar.deploy_impact and
    radar.statement_change rows), in the caller's transaction; adds its time to decided.seconds.write."""
    started = time.perf_counter()
    settings = run.settings.to_dict()
    analysis.write_analysis(conn, analysis_id, target, settings, decided.window, decided.verdicts, run.run_id)
    analysis.write_impact(conn, analysis_id, target, decided.summary, decided.changes)
    write_groups(conn, analysis_id, target, decided.groups)
    decided.seconds.write += time.perf_counter() - started


def _classified(
    conn: sa.Connection,
    target: str,
    found: Impact,
    window: analysis.WindowCounters,
    settings: EngineSettings,
    detected: pd.Series,
) -> Impact:
    """The impact with what the texts tell (engine/impact.py `classify`): the class of every statement that may be a
    load change or a collateral culprit (a kind, calls only after the deploy, a detection, or its time at least
    doubled by new_statement_share of its database's time), and the stopped × new pairs that may be one statement
    rewritten (steps/replacements.py). Only those texts are read and parsed: a few per deploy, not the catalogue."""
    s = found.statements
    added = s["exec_ms_per_min_after"] - s["exec_ms_per_min_before"]
    database_time = s.groupby("dbid")["exec_ms_per_min_after"].transform("sum")
    rose = (
        (s["exec_ms_per_min_after"] >= settings.surge_ratio * s["exec_ms_per_min_before"])
        & (added >= settings.new_statement_share * database_time)
        & (added > 0)
    )
    started = (s["calls_before"] == 0) & (s["calls_after"] > 0)
    candidates = s[s["kind"].notna() | started | rose | s["query_key"].isin(detected)]
    if candidates.empty:
        return found
    keys = window.keys.loc[candidates["query_key"].tolist()]
    texts = analysis.query_texts(conn, target, keys, length=analysis.WHOLE_TEXT)
    classes = pd.Series(
        [statement_class(texts.get(int(q), "")) for q in keys["queryid"]], index=candidates["query_key"].to_numpy()
    ).dropna()
    return classify(found, classes, candidate_pairs(s, window.keys, texts), settings)


def _changes_with_keys(changes: pd.DataFrame, window: analysis.WindowCounters) -> pd.DataFrame:
    """The impact's notable statements with the KEY each query_key stands for (query_key kept, for the causes) and
    a replaced half's partner as its queryid (`partner_queryid`)."""
    codes = changes["query_key"].to_numpy(dtype=np.int64)
    keys = window.keys.iloc[codes].reset_index(drop=True)
    body = changes.drop(columns="dbid").reset_index(drop=True)
    queryids = window.keys["queryid"].tolist()
    body["partner_queryid"] = pd.Series(
        [None if pd.isna(k) else int(queryids[int(k)]) for k in body["partner_key"]], dtype=object
    )
    return pd.concat([keys, body], axis=1)


def _with_statement_keys(result: pd.DataFrame, window: analysis.WindowCounters) -> pd.DataFrame:
    """The engine's rows with the statement each query_key stands for, its fingerprint and the queryids merged in."""
    codes = result["query_key"].to_numpy(dtype=np.int64)
    keys = window.keys.iloc[codes].reset_index(drop=True)
    last_fingerprint = window.counters.groupby("query_key")["fingerprint"].last()
    out = pd.concat([result.reset_index(drop=True), keys], axis=1)
    queryids = window.keys["queryid"].tolist()
    added = {
        "fingerprint": last_fingerprint.loc[codes].to_numpy(),
        "merged_queryids": [[queryids[int(k)] for k in merged] for merged in result["merged_keys"]],
        "plan_diff": None,
        "queryid_shared_with": None,
        "named_changes": None,
        "undo_hint": None,
    }
    for name, values in added.items():
        ANALYSED_VERDICTS.assign(out, name, values)
    return out[[*KEY, *[c for c in out.columns if c not in KEY]]]
