"""The plan diff of each detected regression: the plan in force before the change against the one after it.

Joins the warehouse, which keeps the captured plans, and (when no plan was stored after the change) the watched server,
where the current plan is captured on the spot.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pandas as pd
import psycopg
import sqlalchemy as sa

from radar_pipeline import plan_shape
from radar_pipeline.collector import plans, session
from radar_pipeline.config import Target
from radar_pipeline.pgss_model import KEY, Key, statement_key
from radar_pipeline.steps.plan_capture import capture_one
from radar_pipeline.warehouse import plans as stored_plans


def plan_diffs(
    conn: sa.Connection, target_name: str, detections: pd.DataFrame, live: Target | None
) -> list[dict[str, Any]]:
    """The plan diff of each detection (rows with KEY and change_at): the plan in force before the change against the
    newest after it, capturing one now when none was stored after the change and the target can be reached."""
    diffs: list[dict[str, Any]] = []
    connection: psycopg.Connection | None = None
    source: plans.PlanSource | None = None
    try:
        for row in detections.itertuples():
            key = statement_key([getattr(row, k) for k in KEY])
            change_at = row.change_at.to_pydatetime()
            before, after = stored_plans.around(conn, target_name, key, change_at)
            if after is None and live is not None:
                if connection is None:
                    connection, source = _open(live)
                if connection is not None and source is not None:
                    after = _capture_now(conn, connection, source, target_name, key)
            diffs.append(_diff(before, after, change_at))
    finally:
        if connection is not None:
            connection.close()
    return diffs


def _open(target: Target) -> tuple[psycopg.Connection | None, plans.PlanSource | None]:
    try:
        connection = session.connect(target)
        return connection, plans.plan_source(connection)
    except (session.TargetUnavailable, psycopg.Error):
        return None, None


def _capture_now(
    conn: sa.Connection, live: psycopg.Connection, source: plans.PlanSource, target: str, key: Key
) -> stored_plans.StoredPlan | None:
    try:
        captured = capture_one(live, source, key, stored_plans.text_of(conn, target, key))
    except plans.PlanUnavailable:
        return None
    now = live.execute("SELECT statement_timestamp()").fetchone()[0]  # type: ignore[index]
    stored_plans.store(conn, target, now, {key: captured}, {})
    origin, plan_hash, root_node, cost, plan = captured
    return stored_plans.StoredPlan(now, origin, plan_hash, root_node, cost, plan)


def _diff(
    before: stored_plans.StoredPlan | None, after: stored_plans.StoredPlan | None, change_at: datetime
) -> dict[str, Any]:
    if before is None:
        return {"unavailable": f"no plan was captured before the change at {change_at.isoformat()}"}
    if after is None:
        return {"unavailable": "no plan was captured after the change, and none could be captured now"}
    out = plan_shape.diff(before.plan, after.plan, before.source, after.source)
    out["captured_before"] = before.captured_at.isoformat()
    out["captured_after"] = after.captured_at.isoformat()
    out["summary"] = plan_shape.summary(out)
    return out
