"""Plan capture for a target: plans of its busiest statements read from the watched server, stored in the warehouse
when their shape changed."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import timedelta

import psycopg
import sqlalchemy as sa

from radar_pipeline import plan_shape
from radar_pipeline.collector import plans, session
from radar_pipeline.config import Target, target_failure
from radar_pipeline.config.settings import COUNTS, PLAN_TOP_N_VAR
from radar_pipeline.pgss_model import Key
from radar_pipeline.warehouse import plans as stored_plans

DEFAULT_TOP_N = COUNTS[PLAN_TOP_N_VAR]
MAX_PARALLEL_TARGETS = 8
FIRST_LOOKBACK = timedelta(hours=1)  # how far back "since the last capture" reaches the first time
# The live work of one plan capture, from its start, for each target (a target waiting for a free thread has less):
# a server answering each call slowly, within the call bound, would otherwise keep a run going for hundreds of calls.
# With one call's bound and the stores after it, a run ends well within PLAN_MAX_RUNTIME_S (defs/collection/plans.py),
# itself within the 10-minute schedule.
CAPTURE_DEADLINE_S = 240.0
OUT_OF_TIME = "the time given to the watched servers ran out ({:g} s per plan capture)"

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
    out_of_time: int = 0  # statements not tried because CAPTURE_DEADLINE_S ran out (not remembered as skipped)


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


def capture_target(
    target: Target, warehouse: sa.Engine, top_n: int = DEFAULT_TOP_N, deadline: float | None = None
) -> PlanCapture:
    """Capture plans of the top_n statements by execution time since the last capture, among those of the database
    the target connects to, until time.monotonic() reaches `deadline` (by default CAPTURE_DEADLINE_S from now): the
    statements left then are counted in `out_of_time`, and those planned are stored."""
    result = PlanCapture(target.name)
    if deadline is None:
        deadline = time.monotonic() + CAPTURE_DEADLINE_S
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
            if time.monotonic() >= deadline:
                result.out_of_time = len(todo) - result.tried
                break
            result.tried += 1
            try:
                captured[key] = capture_one(conn, source, key, text)
            except plans.PlanUnavailable as exc:
                result.skipped[key] = str(exc)
    with warehouse.begin() as wconn:
        result.stored = stored_plans.store(wconn, target.name, now, captured, result.skipped)
    return result


def capture_targets(targets: list[Target], warehouse: sa.Engine, top_n: int = DEFAULT_TOP_N) -> list[PlanCapture]:
    """Capture plans on every target concurrently, all within CAPTURE_DEADLINE_S of the start (a target whose turn
    comes after it is failed, saying so); a target that fails gets a capture holding its password-free error, and
    never stops the others."""

    deadline = time.monotonic() + CAPTURE_DEADLINE_S

    def one(target: Target) -> PlanCapture:
        if time.monotonic() >= deadline:
            return PlanCapture(target.name, error=OUT_OF_TIME.format(CAPTURE_DEADLINE_S))
        try:
            return capture_target(target, warehouse, top_n, deadline)
        except Exception as exc:  # one failing target must never stop the others
            return PlanCapture(target.name, error=target_failure(exc, target))

    with ThreadPoolExecutor(max_workers=max(1, min(MAX_PARALLEL_TARGETS, len(targets)))) as pool:
        return list(pool.map(one, targets))
