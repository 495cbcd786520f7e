"""The plan diff of each detected regression: the plan in force before the change against the one after it.

Joins the warehouse, which keeps the captured plans, and the watched server, where the current plan is captured on the
spot when none was stored after the change, and where PostgreSQL is asked whether the statement's queryid is shared
with the same statement over other tables (collector/shared_queryid): such a detection gets no plan diff, since one
table's plan would be shown as if it were the statement's.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import pandas as pd
import psycopg
import sqlalchemy as sa

from radar_pipeline import plan_shape
from radar_pipeline.collector import plans, session
from radar_pipeline.collector.shared_queryid import FIRST_VERSION, shared_with
from radar_pipeline.config import Target, target_failure
from radar_pipeline.pgss_model import SHARED_QUERYID_PLAN, Key, statement_keys
from radar_pipeline.steps.plan_capture import capture_one
from radar_pipeline.warehouse import plans as stored_plans

PLAN_REACH = timedelta(minutes=15)  # past the window's end: more than one plan capture interval (10 min)
# Detections per analysis whose queryid is looked into, the most confident first (each costs the watched server up to
# a few dozen EXPLAINs); the others are not checked (queryid_shared_with null), as when the target is not configured.
SHARED_CHECKS = 50
# The live work of one analysis on the watched server (its checks and plans captured now), checked between calls: a
# server answering each call slowly, within the call bound, would otherwise hold the radar/analysis pool for up to
# ~1,500 calls. What is left when it runs out is not asked (one call may still finish past it, within its own bound).
LIVE_DEADLINE_S = 120.0
OUT_OF_TIME = "the time given to the watched server ran out ({:g} s per analysis)"
# A detection whose queryid was not asked about, on a server that may share it (PostgreSQL 18+, or not known).
NOT_CHECKED = (
    "not checked whether PostgreSQL 18 gives this queryid to the same statement over other tables ({why}): this "
    "plan may be one table's of several"
)


@dataclass(frozen=True)
class DetectionPlan:
    """A detection's plan diff, and the other tables PostgreSQL gives its queryid to ([]: none; None: not asked, as
    when the target is not configured or cannot be reached)."""

    diff: dict[str, Any]
    shared_with: list[str] | None


def plan_diffs(
    engine: sa.Engine, target_name: str, detections: pd.DataFrame, live: Target | None, window_end: datetime
) -> list[DetectionPlan]:
    """The plan diff of each detection (rows with KEY and change_at): the plan in force before the change against the
    first captured after it within the analysed window's reach (up to PLAN_REACH past `window_end`), capturing one
    now when none was and the reach has not passed; a re-analysis later finds the same plans. With `live`, whether
    each one's queryid is shared with statements over other tables is asked there too: a shared one gets no plan
    diff (its `unavailable` says why).

    A detection whose queryid was not asked about (beyond SHARED_CHECKS, the target not configured, unreachable or
    silent, the time run out), on a server of PostgreSQL 18 or later (the version its scrapes stored) or of a version
    not known, has its plan diff carry `queryid_not_checked`, saying why, which its summary shows.

    The live work on the watched server, the checks and captures together, stops at LIVE_DEADLINE_S: what is left
    gets no plan captured now and is not checked, each saying the time ran out. The stored plans of all detections
    are read in one query, in a short transaction of its own; the watched server is reached only after it ended, so
    no warehouse transaction waits on it. A plan captured now is stored in a short transaction of its own."""
    keys = statement_keys(detections)
    change_ats = [t.to_pydatetime() for t in detections["change_at"]]
    until = window_end + PLAN_REACH
    with engine.connect() as conn:
        now = conn.execute(sa.text("SELECT now()")).scalar_one()
        found = stored_plans.around_each(conn, target_name, keys, change_ats, until)
        version = stored_plans.server_version(conn, target_name, until)
        unplanned = [n for n, around in enumerate(found) if around.before is None]
        known = stored_plans.no_plan_before(
            conn, target_name, [keys[n] for n in unplanned], [change_ats[n] for n in unplanned]
        )
        no_before = dict(zip(unplanned, known, strict=True))
    out: list[DetectionPlan] = []
    confidence = pd.to_numeric(detections["confidence"]).fillna(0.0).to_numpy()
    checked = set(confidence.argsort(kind="stable")[::-1][:SHARED_CHECKS].tolist())
    deadline = time.monotonic() + LIVE_DEADLINE_S
    connection, source, failed = _open(live) if live is not None and keys else (None, None, None)
    if version is None and connection is not None:
        version = int(connection.info.server_version)
    try:
        for number, (key, change_at, plans_around) in enumerate(zip(keys, change_ats, found, strict=True)):
            shared = None
            if connection is not None and number in checked:
                try:
                    shared = _shared(connection, key, source, plans_around.text, deadline)
                except session.TargetUnavailable as exc:  # silent: closed, not asked again in this call
                    connection, failed = None, target_failure(exc, live)  # type: ignore[arg-type]
            if shared:
                out.append(DetectionPlan({"unavailable": SHARED_QUERYID_PLAN}, shared))
                continue
            if connection is not None and time.monotonic() >= deadline:  # the check, if any, gave up on it too
                connection.close()
                connection, failed = None, OUT_OF_TIME.format(LIVE_DEADLINE_S)
            after, why = plans_around.after, "none was captured within the window's reach"
            if after is None and connection is not None and source is not None and now <= until:
                try:
                    after, why = _capture_now(engine, connection, source, target_name, key, plans_around.text)
                except (session.TargetUnavailable, psycopg.Error) as exc:  # silent, or gone: closed, not retried
                    connection.close()
                    connection, failed = None, target_failure(exc, live)  # type: ignore[arg-type]
            if after is None and failed is not None and now <= until:
                why = f"none could be captured now: {failed}"
            caution = None
            if shared is None and (version is None or version >= FIRST_VERSION):
                caution = not_checked(_unasked(number in checked, live, failed), version)
            diff = _diff(plans_around.before, after, change_at, why, caution, no_before.get(number))
            out.append(DetectionPlan(diff, shared))
    finally:
        if connection is not None:
            connection.close()
    return out


def not_checked(why: str, version: int | None) -> str:
    """The caution on the plan diff of a detection whose queryid was not checked for sharing, and why; the server's
    version (None: not known) is said when it is not known."""
    if version is None:
        why += "; this server's PostgreSQL version is not known either"
    return NOT_CHECKED.format(why=why)


def _unasked(in_checked: bool, live: Target | None, failed: str | None) -> str:
    """Why a detection's queryid was not asked about (password-free)."""
    if live is None:
        return "the target is not among the configured targets, so the watched server was not reached"
    if not in_checked:
        return f"only the {SHARED_CHECKS} most confident detections of an analysis are checked"
    if failed is not None:
        return failed
    return "the watched server could not be asked about this statement"


def _shared(
    connection: psycopg.Connection | None,
    key: Key,
    source: plans.PlanSource | None,
    text: str | None,
    deadline: float | None = None,
) -> list[str] | None:
    """The other tables the statement's queryid is given to, when this connection can ask (the statement's own
    database, its whole text, a role plans may be made as: the question is a plan)."""
    if connection is None or source is None or source.source is None or not text or len(text) >= stored_plans.MAX_TEXT:
        return None
    if key[0] != source.database_oid:
        return None
    try:
        return shared_with(connection, text, deadline)
    except psycopg.Error:  # the server went away: the others' plans are still looked for
        return None


def _open(target: Target) -> tuple[psycopg.Connection | None, plans.PlanSource | None, str | None]:
    """A session on the watched server and its plan source, or why there is none (password-free)."""
    connection = None
    try:
        connection = session.connect(target)
        return connection, plans.plan_source(connection), None
    except (session.TargetUnavailable, psycopg.Error) as exc:
        if connection is not None:
            connection.close()
        return None, None, target_failure(exc, target)


def _capture_now(
    engine: sa.Engine, live: psycopg.Connection, source: plans.PlanSource, target: str, key: Key, text: str | None
) -> tuple[stored_plans.StoredPlan | None, str]:
    """The plan captured now and stored, or None and why it could not be."""
    if source.source is None:
        return None, f"none could be captured now: {source.reason}"
    try:
        captured = capture_one(live, source, key, text)
    except plans.PlanUnavailable as exc:
        return None, f"none could be captured now: {exc}"
    now = live.execute("SELECT statement_timestamp()").fetchone()[0]  # type: ignore[index]
    # A plan really captured is kept whatever becomes of the analysis, and the analysis's own transaction takes no
    # plan rows (plan_snapshots never waits on it).
    with engine.begin() as own:
        stored_plans.store(own, target, now, {key: captured}, {})
    origin, plan_hash, root_node, cost, plan = captured
    return stored_plans.StoredPlan(now, origin, plan_hash, root_node, cost, plan), ""


def no_plan_before(change_at: datetime, known: stored_plans.NoPlanBefore | None) -> str:
    """Why a statement has no plan from before its change, in words, from what the captures recorded: the target had
    no plan source then (a role plan capture refuses; before PostgreSQL 15 was planned, its runs said so) or its
    capture failed, the statement cannot be planned (a utility statement, a text that does not plan), it first ran
    after the last capture before the change, or the rotation through the statements had not reached it."""
    at = change_at.isoformat()
    run = known.run if known is not None else None
    if known is None or run is None:
        return f"no plan was captured before the change at {at}: no plan capture is recorded on this target before it"
    if run.source is None:
        return f"no plans on this target before the change at {at}: {run.reason or 'no plan source'}"
    if known.skip_reason is not None:
        tried = known.skipped_at.isoformat() if known.skipped_at is not None else "once"
        return f"it cannot be planned: {known.skip_reason} (last tried {tried})"
    last = known.last_planning_run
    if last is not None and known.first_seen is not None and known.first_seen > last:
        return (
            f"it is new: it first ran at {known.first_seen.isoformat()}, after the last plan capture before the "
            f"change at {at} (at {last.isoformat()})"
        )
    out_of_time = " (that capture ran out of time)" if run.out_of_time else ""
    if run.held_back:  # room left in pg_stat_statements for the application's statements
        out_of_time += f" (that capture: {run.held_back_reason})"
    return (
        f"it was not planned before the change at {at}: the plan captures up to {run.captured_at.isoformat()} had "
        f"not reached it in their rotation through the statements{out_of_time}"
    )


def _diff(
    before: stored_plans.StoredPlan | None,
    after: stored_plans.StoredPlan | None,
    change_at: datetime,
    why: str,
    caution: str | None = None,
    no_before: stored_plans.NoPlanBefore | None = None,
) -> dict[str, Any]:
    if before is None:
        return {"unavailable": no_plan_before(change_at, no_before)}
    if after is None:
        return {"unavailable": f"no plan after the change: {why}"}
    out = plan_shape.diff(before.plan, after.plan, before.source, after.source)
    out["pin_before"] = plan_shape.pin_hint(before.plan)  # the plan from before, for pg_hint_plan
    out["captured_before"] = before.captured_at.isoformat()
    out["captured_after"] = after.captured_at.isoformat()
    if caution is not None:
        out["queryid_not_checked"] = caution
    out["summary"] = plan_shape.summary(out)
    return out
