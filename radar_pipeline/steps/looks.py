"""Later looks at a deploy (issue 29): a statement left open by the first verdict (`inconclusive` or
`insufficient_data`) is decided again as the after side grows, at engine.budget.LOOK_SPANS (2W, 4W, 8W after the
deploy), until it is decided, the target's next deploy cuts the after side, or the last look.

The budget (docs/looks.md). Look k spends B_k = engine.budget.look_budget(B, k), Σ_k B_k = B. Within a look every
statement of the look's whole family (every statement its window can decide, whether or not still open) gets its
budget share w_i (engine `family_shares`: the before side's execution time and the floors, never the after side's
latency), Σ_i w_i = 1, and only the open ones are tested, by the engine's family rule at B_k with those shares (engine
2.6: the weighted Benjamini–Hochberg step-up at α(B_k), engine/fdr.py), the family's others counting as not rejected:
a cleared or detected statement's share is not handed to the others. What a look then bounds is the family rule's
(docs/budget.md): with independent statements, E[false detections] at most about B_k (α(B_k) spends B_k when the
whole family sits on H0's boundary; fewer open statements spend less); under positive dependence (PRDS: a load shared
by every statement), P(any false detection) ≤ α(B_k) · Σ_open w_i < B_k, but not the expected count, since false
detections then come in clumps; with `family_rule` "bonferroni", each test detects with probability at most B_k · w_i
whatever the dependence. Across looks the budgets add up whatever the dependence between the looks: the expected
count over a deploy's looks is at most Σ_k B_k = B where each look's is at most B_k (linearity), and P(any false
detection over its looks) ≤ Σ_k α(B_k) < B by the union bound (alpha spending with a fixed schedule, Lan & DeMets
1983). The looks' first verdict must be engine 2.6's or later: engine 2.5 spent the whole B at look 0.

The spans. The after side of look k is min(LOOK_SPANS[k] · W, next deploy − deploy): the next deploy's change never
enters. A look whose after side cannot grow past the previous look's is not run. The before side grows with the after
side (the test's variance is about σ²(1/n_before + 1/n_after): growing the after side alone gains at most a factor of 2
in variance, both sides together a factor of LOOK_SPANS[k]), but never reaches back past the target's previous deploy,
and never shrinks below the first look's W: before_k = max(W, min(after_k, deploy − previous deploy)). With before ≥ W
and after ≤ 8W, the before side holds at least 1/9 of the intervals, so E-divisive's margin of max(3, n/10) intervals
each side always leaves the splits at the deploy admissible.

Plain Python and pandas: the Dagster asset deploy_looks, the benchmark and the tests run the same code.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

import numpy as np
import pandas as pd
import sqlalchemy as sa

from radar_pipeline.engine import EngineSettings
from radar_pipeline.engine.budget import LOOK_SPANS
from radar_pipeline.pgss_model import KEY
from radar_pipeline.steps import groups
from radar_pipeline.steps.decide import TEXT_LENGTH, AnalysisRun, decide_span

# The benchmarks and the lab take a look's parts from here, beside all_looks.
from radar_pipeline.steps.look_spans import (  # noqa: F401
    DECIDED,
    OPEN,
    LookSpan,
    decide_look,
    family_shares,
    look_evidence,
    look_span,
)
from radar_pipeline.warehouse import analysis, deploys
from radar_pipeline.warehouse import groups as group_store
from radar_pipeline.warehouse import looks as store

LAST_LOOK = len(LOOK_SPANS) - 1


class LookRefused(RuntimeError):
    """The look cannot run now (the deploy is unknown or not analysed, the look is unknown or not due); nothing was
    written."""


def all_looks(
    counters: pd.DataFrame,
    deploy_at: datetime | pd.Timestamp,
    settings: EngineSettings | None = None,
    prior: pd.DataFrame | None = None,
    looks: int = len(LOOK_SPANS),
) -> pd.DataFrame:
    """Every look of one deploy on `counters` (which must reach LOOK_SPANS[looks − 1] · W either side): the first
    verdict at look_budget(B, 0), then each later look on what is still open. One row per statement of the first
    look: query_key, the final verdict, the look that decided it (NaN while open) and the first look's verdict. For
    the lab and the tests; the warehouse's looks run through run_look."""
    settings = settings or EngineSettings()
    first_span = look_span(settings, 0, pd.Timestamp(deploy_at).to_pydatetime())
    assert first_span is not None
    first = decide_look(counters, deploy_at, settings, first_span, pd.unique(counters["query_key"]), prior)
    out = pd.DataFrame(
        {
            "query_key": first["query_key"].to_numpy(),
            "first_verdict": first["verdict"].to_numpy(copy=True),
            "verdict": first["verdict"].to_numpy(copy=True),
            "look": np.where(first["verdict"].isin(DECIDED), 0.0, np.nan),
        }
    ).set_index("query_key", drop=False)
    for look in range(1, looks):
        still = out.index[out["verdict"].isin(OPEN)]
        if not len(still):
            break
        span = look_span(settings, look, pd.Timestamp(deploy_at).to_pydatetime())
        assert span is not None
        found = decide_look(counters, deploy_at, settings, span, still, prior)
        decided = found[found["verdict"].isin(DECIDED) & found["query_key"].isin(still)]
        out.loc[decided["query_key"].to_numpy(), "verdict"] = decided["verdict"].to_numpy()
        out.loc[decided["query_key"].to_numpy(), "look"] = look
    return out.reset_index(drop=True)


@dataclass
class LookResult:
    """One look run on a deploy: what it looked at, what it decided, and what the deploy's state became."""

    deploy_id: str
    target: str
    look: int
    status: str  # done, cut (the next deploy left it nothing new), closed (nothing was open)
    span: LookSpan | None
    opened: int  # statements open before the look
    decided: pd.DataFrame  # the verdict rows this look wrote (ANALYSED_VERDICTS and look, look_end)
    state_before: str
    state: dict[str, Any]
    seconds: float
    texts: dict[int, str] = field(default_factory=dict)  # queryid → text (cut), of the rows it decided


def run_look(run: AnalysisRun, deploy_id: str, look: int, now: datetime | None = None) -> LookResult:
    """Run look `look` (1 … LAST_LOOK) of a recorded, analysed deploy, and store it in one transaction: the verdict
    rows of the open statements it decides are replaced (saying which look found them and when), never a decided one,
    and the look is recorded in radar.deploy_look (done, or cut when the next deploy left its after side no longer
    than the previous look's). Refused (LookRefused) when the deploy is
    unknown or has no first verdict, when the look is out of range, when its after side (plus run.settle) has not
    passed by the warehouse's clock and no later deploy cut it, or when a re-analysis replaced the first verdict while
    the look ran (checked under the look's lock in the write transaction: nothing is written)."""
    started = time.perf_counter()
    if not 1 <= look <= LAST_LOOK:
        raise LookRefused(f"look must lie in 1..{LAST_LOOK}, not {look}")
    with run.warehouse.connect() as conn:
        event = deploys.get(conn, deploy_id)
        if event is None or event.deployed_at is None:
            raise LookRefused(f"deploy {deploy_id!r} is not recorded in radar.deploy_event")
        first = store.first_analysis(conn, deploy_id)
        if first is None:
            raise LookRefused(f"deploy {deploy_id!r} has no first verdict yet: its looks wait for it")
        # A look continues its first verdict: with the settings that verdict used (its W, θ, B).
        basis, stored, engine = first
        if not store.spends_first_look_only(engine):
            raise LookRefused(
                f"deploy {deploy_id!r}'s first verdict is engine {engine or '?'}'s, which spent the whole budget at "
                "its first look: no later look may spend more (a re-analysis by this engine gives it looks)"
            )
        settings = EngineSettings.from_dict(stored) if stored else run.settings
        run = replace(run, settings=settings)
        previous, following = store.neighbour_deploys(conn, event.target, event.deployed_at)
        last = store.last_after(conn, deploy_id, event.target, basis)
        ran = (last - event.deployed_at) if last is not None else settings.window
        span = look_span(settings, look, event.deployed_at, previous, following, ran)
        clock = now or conn.execute(sa.text("SELECT now()")).scalar_one()
        # A look is due once its after side and one scrape interval have passed; one the next deploy leaves
        # nothing new to see, as soon as that deploy is recorded.
        due = (following or event.deployed_at) if span is None else event.deployed_at + span.after + run.settle
        if clock < due:
            raise LookRefused(
                f"look {look} of deploy {deploy_id!r} is due at {due.isoformat()}; it is {clock.isoformat()} now"
            )
        states = analysis.deploy_states(conn, [deploy_id])
        state_before = str(states.iloc[0]["state"]) if len(states) else "pending"
        still = store.open_verdicts(conn, deploy_id)
        groups_open = bool(group_store.open_groups(conn, deploy_id, event.target))
        conn.rollback()
    target = event.target
    empty = pd.DataFrame()
    if span is None or (still.empty and not groups_open):
        status = "cut" if span is None else "closed"
        with run.warehouse.begin() as conn:
            _hold_basis(conn, deploy_id, basis)
            store.record_look(conn, deploy_id, target, look, status, span, basis, len(still), empty, run.run_id)
            state = analysis.deploy_states(conn, [deploy_id]).iloc[0].to_dict()
        return LookResult(
            deploy_id, target, look, status, span, len(still), empty, state_before, state, time.perf_counter() - started
        )

    # The deploy's groups still undecided are tested again (steps/groups.later_look), taking their share of the budget.
    together = groups.later_look(run.warehouse, settings, deploy_id, target, event.deployed_at, span)
    statements = replace(span, budget=together.statement_budget)
    # the open statements decided as every decision is (steps.decide): the rows it decided
    decided = (
        decide_span(run, deploy_id, target, event.deployed_at, statements, still=still).verdicts
        if len(still)
        else empty
    )
    with run.warehouse.begin() as conn:
        _hold_basis(conn, deploy_id, basis)
        written = store.replace_open(conn, deploy_id, target, decided, look, event.deployed_at + span.after)
        together.store(conn, deploy_id, target, event.deployed_at + span.after)
        store.record_look(conn, deploy_id, target, look, "done", span, basis, len(still), written, run.run_id)
        state = analysis.deploy_states(conn, [deploy_id]).iloc[0].to_dict()
        texts = analysis.query_texts(conn, target, written[KEY], length=TEXT_LENGTH) if len(written) else {}
    return LookResult(
        deploy_id,
        target,
        look,
        "done",
        span,
        len(still),
        written,
        state_before,
        state,
        time.perf_counter() - started,
        texts,
    )


def record_failed_look(run: AnalysisRun, deploy_id: str, look: int, log: Any = None) -> None:
    """Record that look `look` of the deploy's current first verdict failed (warehouse.looks.record_failed): it is due
    no more, so it cannot hold the sensor's page until the next look or the horizon; a retry that succeeds records it
    done. When even that cannot be written (the warehouse away), `log` says so and the caller's error stands."""
    try:
        with run.warehouse.begin() as conn:
            store.lock(conn, deploy_id)
            store.record_failed(conn, deploy_id, look, run.run_id)
    except Exception as exc:  # noqa: BLE001 - the look's own error is the one to raise
        if log is not None:
            log.warning(f"look {look} of deploy {deploy_id!r} failed and could not be recorded so: {exc}")


def _hold_basis(conn: sa.Connection, deploy_id: str, basis: datetime) -> None:
    """Take the deploy's look lock in the write transaction and check, after it, that the first verdict the look
    continued is still the stored one: a re-analysis that replaced it meanwhile (its rows are not this look's to
    decide) refuses the look, and the transaction writes nothing."""
    store.lock(conn, deploy_id)
    if not store.basis_holds(conn, deploy_id, basis):
        raise LookRefused(
            f"deploy {deploy_id!r} was re-analysed while its look ran (the first verdict of {basis.isoformat()} is "
            "replaced): nothing written; its looks start again from the new verdict"
        )
