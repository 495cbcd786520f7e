"""Plan capture for a target: plans of its busiest statements read from the watched server, stored in the warehouse
when their shape changed."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import timedelta

import psycopg
import sqlalchemy as sa

from radar_pipeline import plan_shape
from radar_pipeline.collector import plans, session
from radar_pipeline.config import COUNTS, PLAN_TOP_N_VAR, Target, target_failure
from radar_pipeline.pgss_model import Key
from radar_pipeline.warehouse import plans as stored_plans

DEFAULT_TOP_N = COUNTS[PLAN_TOP_N_VAR]
MAX_PARALLEL_TARGETS = 8
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
    error: str | None = None  # why the capture failed as a whole (password-free)


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


def capture_targets(targets: list[Target], warehouse: sa.Engine, top_n: int = DEFAULT_TOP_N) -> list[PlanCapture]:
    """Capture plans on every target concurrently; a target that fails gets a capture holding its password-free
    error, and never stops the others."""

    def one(target: Target) -> PlanCapture:
        try:
            return capture_target(target, warehouse, top_n)
        except Exception as exc:  # one failing target must never stop the others
            return PlanCapture(target.name, error=target_failure(exc, target))

    with ThreadPoolExecutor(max_workers=max(1, min(MAX_PARALLEL_TARGETS, len(targets)))) as pool:
        return list(pool.map(one, targets))
