"""Plan capture for a target: plans of its busiest statements, of those first seen since the last capture and, in turn,
of the rest of its active statements, read from the watched server and stored in the warehouse when their shape
changed; each run's outcome is kept (radar.plan_capture_run), so an analysis can say why a statement has no plan."""

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
from radar_pipeline.config.settings import COUNTS, PLAN_TOP_N_VAR, RadarSettings, variable
from radar_pipeline.pgss_model import Key
from radar_pipeline.warehouse import plans as stored_plans

DEFAULT_TOP_N = COUNTS[PLAN_TOP_N_VAR]
PLAN_ROTATION_N_VAR = variable("plan_rotation_n")
DEFAULT_ROTATION_N: int = RadarSettings.model_fields["plan_rotation_n"].default
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
    planned: dict[str, int] = field(default_factory=dict)  # statements tried, by why (busiest, new, rotation)
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
    target: Target,
    warehouse: sa.Engine,
    top_n: int = DEFAULT_TOP_N,
    deadline: float | None = None,
    rotation_n: int = DEFAULT_ROTATION_N,
) -> PlanCapture:
    """Capture plans of the top_n statements by execution time since the last capture, then of up to rotation_n
    others (first seen since then, then the least recently planned of those active), among those of the database the
    target connects to, until time.monotonic() reaches `deadline` (by default CAPTURE_DEADLINE_S from now): the
    statements left then are counted in `out_of_time`, and those planned are stored. The run's outcome is recorded,
    a target without a plan source's too."""
    result = PlanCapture(target.name)
    if deadline is None:
        deadline = time.monotonic() + CAPTURE_DEADLINE_S
    with session.connect(target) as conn:
        source = plans.plan_source(conn)
        result.source, result.reason = source.source, source.reason
        now = conn.execute("SELECT statement_timestamp()").fetchone()[0]  # type: ignore[index]
        version = int(conn.info.server_version)
        if source.source is None:
            with warehouse.begin() as wconn:
                stored_plans.record_run(wconn, target.name, stored_plans.CaptureRun(now, None, source.reason, version))
            return result
        with warehouse.connect() as wconn:
            since = stored_plans.last_capture(wconn, target.name) or now - FIRST_LOOKBACK
            todo = stored_plans.candidates(wconn, target.name, source.database_oid, since, top_n, rotation_n, now)
        captured: dict[Key, Captured] = {}
        for candidate in todo:
            if time.monotonic() >= deadline:
                result.out_of_time = len(todo) - result.tried
                break
            result.tried += 1
            result.planned[candidate.why] = result.planned.get(candidate.why, 0) + 1
            try:
                captured[candidate.key] = capture_one(conn, source, candidate.key, candidate.text)
            except plans.PlanUnavailable as exc:
                result.skipped[candidate.key] = str(exc)
    with warehouse.begin() as wconn:
        result.stored = stored_plans.store(wconn, target.name, now, captured, result.skipped)
        run = stored_plans.CaptureRun(
            now,
            source.source,
            source.reason,
            version,
            busiest=result.planned.get(stored_plans.BUSIEST, 0),
            new=result.planned.get(stored_plans.NEW, 0),
            rotation=result.planned.get(stored_plans.ROTATION, 0),
            stored=result.stored,
            skipped=len(result.skipped),
            out_of_time=result.out_of_time,
        )
        stored_plans.record_run(wconn, target.name, run)
    return result


def capture_targets(
    targets: list[Target], warehouse: sa.Engine, top_n: int = DEFAULT_TOP_N, rotation_n: int = DEFAULT_ROTATION_N
) -> list[PlanCapture]:
    """Capture plans on every target concurrently, all within CAPTURE_DEADLINE_S of the start (a target whose turn
    comes after it is failed, saying so); a target that fails gets a capture holding its password-free error, and
    never stops the others."""

    deadline = time.monotonic() + CAPTURE_DEADLINE_S

    def one(target: Target) -> PlanCapture:
        if time.monotonic() >= deadline:
            return PlanCapture(target.name, error=OUT_OF_TIME.format(CAPTURE_DEADLINE_S))
        try:
            return capture_target(target, warehouse, top_n, deadline, rotation_n)
        except Exception as exc:  # one failing target must never stop the others
            failed = PlanCapture(target.name, error=target_failure(exc, target))
            _record_failure(warehouse, failed)
            return failed

    with ThreadPoolExecutor(max_workers=max(1, min(MAX_PARALLEL_TARGETS, len(targets)))) as pool:
        return list(pool.map(one, targets))


def _record_failure(warehouse: sa.Engine, capture: PlanCapture) -> None:
    """Keep a failed run's (password-free) error as its outcome, at the warehouse's clock; a warehouse that cannot
    take it (it may be what failed) leaves it unrecorded."""
    try:
        with warehouse.begin() as wconn:
            now = wconn.execute(sa.text("SELECT now()")).scalar_one()
            why = f"the plan capture failed: {capture.error}"
            stored_plans.record_run(wconn, capture.target, stored_plans.CaptureRun(now, None, why, None))
    except sa.exc.SQLAlchemyError:
        pass
