"""The plan diff of each detected regression: the plan in force before the change against the one after it.

Joins the warehouse, which keeps the captured plans, and (when no plan was stored after the change) the watched server,
where the current plan is captured on the spot.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pandas as pd
import psycopg
import sqlalchemy as sa

from radar_pipeline import plan_shape
from radar_pipeline.collector import plans, session
from radar_pipeline.config import Target, target_failure
from radar_pipeline.pgss_model import Key, statement_keys
from radar_pipeline.steps.plan_capture import capture_one
from radar_pipeline.warehouse import plans as stored_plans

PLAN_REACH = timedelta(minutes=15)  # past the window's end: more than one plan capture interval (10 min)


def plan_diffs(
    engine: sa.Engine, target_name: str, detections: pd.DataFrame, live: Target | None, window_end: datetime
) -> list[dict[str, Any]]:
    """The plan diff of each detection (rows with KEY and change_at): the plan in force before the change against the
    first captured after it within the analysed window's reach (up to PLAN_REACH past `window_end`), capturing one
    now when none was and the reach has not passed; a re-analysis later finds the same plans.

    The stored plans of all detections are read in one query, in a short transaction of its own; the watched server
    is reached only after it ended, so no warehouse transaction waits on it. A plan captured now is stored in a short
    transaction of its own."""
    keys = statement_keys(detections)
    change_ats = [t.to_pydatetime() for t in detections["change_at"]]
    until = window_end + PLAN_REACH
    with engine.connect() as conn:
        now = conn.execute(sa.text("SELECT now()")).scalar_one()
        found = stored_plans.around_each(conn, target_name, keys, change_ats, until)
    diffs: list[dict[str, Any]] = []
    connection: psycopg.Connection | None = None
    source: plans.PlanSource | None = None
    failed: str | None = None  # why the watched server cannot give plans now: it is not tried again in this call
    try:
        for key, change_at, plans_around in zip(keys, change_ats, found, strict=True):
            after, why = plans_around.after, "none was captured within the window's reach"
            if after is None and live is not None and now <= until:
                if connection is None and failed is None:
                    connection, source, failed = _open(live)
                if connection is not None and source is not None:
                    try:
                        after, why = _capture_now(engine, connection, source, target_name, key, plans_around.text)
                    except (session.TargetUnavailable, psycopg.Error) as exc:  # silent, or gone: closed, not retried
                        failed = target_failure(exc, live)
                        connection.close()
                        connection = None
                if failed is not None:
                    why = f"none could be captured now: {failed}"
            diffs.append(_diff(plans_around.before, after, change_at, why))
    finally:
        if connection is not None:
            connection.close()
    return diffs


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


def _diff(
    before: stored_plans.StoredPlan | None, after: stored_plans.StoredPlan | None, change_at: datetime, why: str
) -> dict[str, Any]:
    if before is None:
        return {"unavailable": f"no plan was captured before the change at {change_at.isoformat()}"}
    if after is None:
        return {"unavailable": f"no plan after the change: {why}"}
    out = plan_shape.diff(before.plan, after.plan, before.source, after.source)
    out["captured_before"] = before.captured_at.isoformat()
    out["captured_after"] = after.captured_at.isoformat()
    out["summary"] = plan_shape.summary(out)
    return out
