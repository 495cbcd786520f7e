"""Plan capture for a target, and the plan diff of each detected regression.

Plain Python (the plan_snapshots asset, deploy_verdicts and the tests call it), joining the collector, which reads
plans from a watched server, and the warehouse, which keeps them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import pandas as pd
import psycopg
import sqlalchemy as sa

from radar_pipeline.collector import plan_shape, plans, session
from radar_pipeline.config import Target
from radar_pipeline.pgss_model import KEY, Key, statement_key
from radar_pipeline.warehouse import plans as stored_plans

DEFAULT_TOP_N = 200
FIRST_LOOKBACK = timedelta(hours=1)  # how far back "since the last capture" reaches the first time

Captured = tuple[str, str, str, float | None, dict]  # source, plan_hash, root_node, total_cost, plan


@dataclass
class PlanCapture:
    """One target's capture: where plans came from (or why none), and what was stored and skipped."""

    target: str
    source: str | None = None
    reason: str | None = None
    tried: int = 0
    stored: int = 0
    skipped: dict[Key, str] = field(default_factory=dict)


def capture_one(conn: psycopg.Connection, source: plans.PlanSource, key: Key, text: str | None) -> Captured:
    """Plan one statement; PlanUnavailable (with the reason) when it cannot be had."""
    if not text:
        raise plans.PlanUnavailable("its text is not in radar.query")
    if len(text) >= stored_plans.MAX_TEXT:
        raise plans.PlanUnavailable("its text is too long to be stored whole, so it cannot be planned")
    origin, plan = plans.capture(conn, source, key, text)
    return (
        origin,
        plan_shape.plan_hash(plan),
        plan_shape.describe(plan_shape.root(plan)),
        plan_shape.total_cost(plan),
        plan,
    )


def capture_target(target: Target, warehouse: sa.Engine, top_n: int = DEFAULT_TOP_N) -> PlanCapture:
    """Capture plans of the top_n statements by execution time since the last capture, among those of the database
    the target connects to."""
    result = PlanCapture(target.name)
    with session.connect(target) as conn:
        source = plans.plan_source(conn)
        result.source, result.reason = source.source, source.reason
        if source.source is None:
            return result
        now = conn.execute("SELECT statement_timestamp()").fetchone()[0]  # type: ignore[index]
        with warehouse.connect() as wconn:
            since = stored_plans.last_capture(wconn, target.name) or now - FIRST_LOOKBACK
            todo = stored_plans.candidates(wconn, target.name, source.database_oid, since, top_n)
        captured: dict[Key, Captured] = {}
        for key, text in todo:
            try:
                captured[key] = capture_one(conn, source, key, text)
            except plans.PlanUnavailable as exc:
                result.skipped[key] = str(exc)
        result.tried = len(todo)
    with warehouse.begin() as wconn:
        result.stored = stored_plans.store(wconn, target.name, now, captured, result.skipped)
    return result


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
