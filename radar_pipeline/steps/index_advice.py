"""A fix for a detection that lost an index (issue 39): for an index dropped, its own CREATE INDEX; for a plan that
went from an index to a sequential scan with nothing named, the index the statement's WHERE would use
(collector/index_advice.py); for any other plan change with nothing named, the ANALYZE to try and the pg_hint_plan
comment that pins the plan from before (plan_shape.pin_hint). Tested with hypopg on the watched server where its
database has it, within the run's reach of the target and at most MAX_TESTED a deploy; said after the detection's
cause_detail, and given as its undo_hint where it had none. Nothing is ever created on the watched server."""

from __future__ import annotations

import time

import pandas as pd
import psycopg
import sqlalchemy as sa

from radar_pipeline.collector import session
from radar_pipeline.collector.index_advice import Tested, check_index, index_sql, proposed_index
from radar_pipeline.config import Target, target_failure
from radar_pipeline.engine import Cause, Verdict
from radar_pipeline.pgss_model import KEY
from radar_pipeline.warehouse import analysis
from radar_pipeline.warehouse.analysis import ANALYSED_VERDICTS

MAX_TESTED = 10
DEADLINE_S = 60.0  # the watched server's time for the tests of one analysis
_TO_SEQ_SCAN = " → Seq Scan on "


def proposal(cause: object, undo: object, plan_diff: object, text: str) -> str | None:
    """The index proposed for one detection (module docstring), or None."""
    if cause == Cause.INDEX_DROPPED and isinstance(undo, str) and undo.startswith("CREATE "):
        return undo
    if cause != Cause.PLAN_CHANGED or not isinstance(plan_diff, dict):
        return None
    scanned = {c.rsplit(_TO_SEQ_SCAN, 1)[1] for c in plan_diff.get("changes") or [] if _TO_SEQ_SCAN in c}
    found = proposed_index(text, scanned) if scanned else None
    return index_sql(*found) if found is not None else None


def advise(conn: sa.Connection, target: str, verdicts: pd.DataFrame, live: Target | None) -> None:
    """Each detection's proposed index, tested where it can be, after its cause_detail ("undo …" for an index dropped,
    whose undo_hint is the proposal; "fix: …" otherwise, which becomes its undo_hint where it had none)."""
    detected = verdicts["verdict"] == Verdict.DETECTED
    if not detected.any():
        return
    replanned = detected & (verdicts["cause"] == Cause.PLAN_CHANGED)
    proposed = replanned | (detected & (verdicts["cause"] == Cause.INDEX_DROPPED))  # the texts a proposal is tested on
    texts = analysis.query_texts(conn, target, verdicts.loc[proposed, KEY], length=analysis.WHOLE_TEXT)
    wanted = []
    for label, row in verdicts[detected].iterrows():
        text = texts.get(int(row["queryid"]), "")
        fix = proposal(row.get("cause"), row.get("undo_hint"), row.get("plan_diff"), text)
        if fix is not None:
            wanted.append((label, fix, text))
    _pin_unnamed(verdicts, replanned & ~verdicts.index.isin([label for label, _, _ in wanted]))
    if not wanted:
        return
    tested = _tested(wanted[:MAX_TESTED], live)
    for (label, fix, _), result in zip(wanted, tested + [None] * (len(wanted) - len(tested)), strict=True):
        said = result.words() if result is not None else f"not tested: more than {MAX_TESTED} proposals"
        detail = verdicts.at[label, "cause_detail"] if isinstance(verdicts.at[label, "cause_detail"], str) else None
        undo = verdicts.at[label, "undo_hint"]
        words = f"undo {said}" if fix == undo else f"fix: {fix} ({said})"
        ANALYSED_VERDICTS.assign(verdicts, "cause_detail", f"{detail}; {words}" if detail else words, rows=[label])
        if not isinstance(verdicts.at[label, "undo_hint"], str) or not verdicts.at[label, "undo_hint"]:
            ANALYSED_VERDICTS.assign(verdicts, "undo_hint", fix, rows=[label])


def _pin_unnamed(verdicts: pd.DataFrame, rows: pd.Series) -> None:
    """Of the `rows` (detections whose plan changed, no index proposed), those with nothing named (no catalog or
    setting change): the ANALYZE to try and pg_hint_plan's comment that pins the plan from before, after their
    cause_detail."""
    for label, row in verdicts[rows].iterrows():
        diff = row.get("plan_diff")
        if not isinstance(diff, dict) or not diff.get("pin_before") or isinstance(row.get("named_changes"), str):
            continue
        words = (
            "nothing named changed: try ANALYZE on its tables (a new sample of their statistics); to keep the plan "
            f"from before meanwhile, with pg_hint_plan: {diff['pin_before']}"
        )
        detail = row.get("cause_detail") if isinstance(row.get("cause_detail"), str) else None
        ANALYSED_VERDICTS.assign(verdicts, "cause_detail", f"{detail}; {words}" if detail else words, rows=[label])


def _tested(wanted: list[tuple[object, str, str]], live: Target | None) -> list[Tested]:
    if live is None:
        return [Tested(untested="the target is not reachable from this run")] * len(wanted)
    try:
        conn = session.connect(live)
    except (session.TargetUnavailable, psycopg.Error) as exc:
        return [Tested(untested=target_failure(exc, live))] * len(wanted)
    out: list[Tested] = []
    deadline = time.monotonic() + DEADLINE_S
    with conn:
        for _, fix, text in wanted:
            if time.monotonic() > deadline:
                out.append(Tested(untested=f"the time given to the watched server ran out ({DEADLINE_S:g} s)"))
                continue
            try:
                out.append(check_index(conn, text, fix))
            except session.TargetUnavailable as exc:
                out.append(Tested(untested=str(exc)))
                break
    return out + [Tested(untested="the watched server stopped answering")] * (len(wanted) - len(out))
