"""A deploy's looks, the part every decision and joint test shares (docs/looks.md): each look's spans either side
of the deploy, its budget and the level it clears at (`look_span`), the engine's decision of the statements still
open over those spans (`decide_look`), and each statement's evidence over them (`look_evidence`), which a group's or
a fleet's joint test combines. steps/looks.py runs the looks; steps/decide.py decides a span with the rules of every
decision.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta

import numpy as np
import pandas as pd
import sqlalchemy as sa

from radar_pipeline.engine import EngineSettings, Verdict, decision
from radar_pipeline.engine.budget import look_after, look_budget, look_clear_level
from radar_pipeline.engine.decision import EVIDENCE, analyse, deploy_evidence
from radar_pipeline.pgss_model import KEY
from radar_pipeline.steps.noise import prior_for
from radar_pipeline.warehouse import analysis

OPEN = (Verdict.INCONCLUSIVE.value, Verdict.INSUFFICIENT_DATA.value)
DECIDED = (Verdict.DETECTED.value, Verdict.NO_REGRESSION.value)


@dataclass(frozen=True)
class LookSpan:
    """One look's spans either side of the deploy, its budget and the level it clears at (engine.budget); `cut` when
    the target's next deploy shortened its after side."""

    look: int
    before: timedelta
    after: timedelta
    budget: float
    cut: bool = False
    clear_level: float = 0.95


def look_span(
    settings: EngineSettings,
    look: int,
    deployed_at: datetime,
    previous_deploy: datetime | None = None,
    next_deploy: datetime | None = None,
    previous_after: timedelta | None = None,
) -> LookSpan | None:
    """Look `look`'s spans and budget (steps/looks.py's docstring), or None when the next deploy leaves its after side
    no longer than the previous look's (`previous_after`: the last look run; default the look before this one's)."""
    window = settings.window
    after = look_after(window, look)
    cut = next_deploy is not None and next_deploy - deployed_at < after
    if cut:
        assert next_deploy is not None
        after = next_deploy - deployed_at
    if look > 0 and after <= (previous_after if previous_after is not None else look_after(window, look - 1)):
        return None
    before = after if previous_deploy is None else min(after, deployed_at - previous_deploy)
    before = max(window, before)
    budget, level = look_budget(settings.false_alert_budget, look), look_clear_level(settings.clear_level, look)
    return LookSpan(look, before, after, budget, cut, level)


def family_shares(
    counters: pd.DataFrame, deploy_at: datetime | pd.Timestamp, settings: EngineSettings, span: LookSpan
) -> pd.Series:
    """Each statement's budget share over the look's whole family (by query_key, Σ = 1 over the statements the look's
    window can decide; 0 for the others): engine.decision.family_shares over the look's spans, from the before
    side's execution time, so a share never depends on any after side's latency, and it is not renormalised over the
    statements still open."""
    return decision.family_shares(counters, deploy_at, settings, before=span.before, after=span.after)


def decide_look(
    counters: pd.DataFrame,
    deploy_at: datetime | pd.Timestamp,
    settings: EngineSettings,
    span: LookSpan,
    still_open: pd.Index | np.ndarray | list,
    prior: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """Look `span.look` at the statements `still_open` (query_keys of `counters`, with the keys merged into them):
    engine `analyse` over the look's spans at the look's budget, each statement with its share of the look's whole
    family (family_shares). Returns analyse's rows for the open statements only; the caller keeps what they decide."""
    if not len(still_open):
        return pd.DataFrame(columns=["query_key", "verdict"])
    shares = family_shares(counters, deploy_at, settings, span)
    open_counters = counters[_with_merged(counters, pd.Index(still_open))]
    return analyse(
        open_counters,
        deploy_at,
        replace(settings, false_alert_budget=span.budget, clear_level=span.clear_level),
        prior=prior,
        before=span.before,
        after=span.after,
        weights=shares,
    )


def look_evidence(
    warehouse: sa.Engine,
    settings: EngineSettings,
    target: str,
    deployed_at: datetime,
    span: LookSpan,
    only: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """Each statement's evidence at the deploy's own split over the look's spans, from the warehouse's counters
    (engine deploy_evidence, with the statements' noise prior): KEY columns, fingerprint, n/calls either side,
    time_before, decidable and EVIDENCE, one row per statement, decided or not. `only` (KEY columns) limits the read
    to those statements. What a fleet's or a group's joint test combines at a later look."""
    lo, hi = deployed_at - span.before, deployed_at + span.after
    with warehouse.connect() as conn:
        window = analysis.read_window(conn, target, lo, hi, only)
        prior = prior_for(conn, target, lo, window.keys)
        conn.rollback()
    found = deploy_evidence(window.counters, deployed_at, settings, prior, before=span.before, after=span.after)
    keys = window.keys.iloc[found["query_key"].to_numpy(dtype=np.int64)].reset_index(drop=True)
    last_fingerprint = window.counters.groupby("query_key")["fingerprint"].last()
    out = pd.concat([keys, found.drop(columns=["merged_keys"]).reset_index(drop=True)], axis=1)
    out["fingerprint"] = last_fingerprint.loc[found["query_key"]].to_numpy()
    return out[[*KEY, "fingerprint", *[c for c in out.columns if c not in (*KEY, "fingerprint", *EVIDENCE)], *EVIDENCE]]


def _with_merged(counters: pd.DataFrame, still_open: pd.Index) -> np.ndarray:
    """The rows of `counters` of the open statements and of every key the engine would merge with one of them (the
    same fingerprint, database, user and nesting level: a rotated queryid), so a look sees a statement whole."""
    mine = counters["query_key"].isin(still_open).to_numpy()
    if "fingerprint" not in counters.columns:
        return mine
    group = [c for c in ("fingerprint", "dbid", "userid", "toplevel") if c in counters.columns]
    wanted = pd.MultiIndex.from_frame(counters.loc[mine, group].drop_duplicates())
    return mine | pd.MultiIndex.from_frame(counters[group]).isin(wanted)
