"""Plan capture for a target: plans of its busiest statements, of those first seen since the last capture and, in turn,
of the rest of its active statements, read from the watched server and stored in the warehouse when their shape
changed; each run's outcome is kept (radar.plan_capture_run), so an analysis can say why a statement has no plan."""

from __future__ import annotations

import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

import psycopg
import sqlalchemy as sa

from radar_pipeline import plan_shape
from radar_pipeline.collector import auto_explain, plans, session
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
    held_back: int = 0  # statements not tried to leave pg_stat_statements room (not remembered as skipped)
    held_back_reason: str | None = None
    captured_at: datetime | None = None  # the watched server's clock at the run's start, once reached
    server_version: int | None = None
    auto_explain: int = 0  # statements whose plan came from auto_explain's log (collector/auto_explain.py)
    auto_explain_error: str | None = None  # why the target's auto_explain log could not be read


def capture_one(conn: psycopg.Connection, source: plans.PlanSource, key: Key, text: str | None) -> Captured:
    """Plan one statement; PlanUnavailable (with the reason) when it cannot be had."""
    if not text:
        raise plans.PlanUnavailable("its text is not in radar.query")
    if len(text) >= stored_plans.MAX_TEXT:
        raise plans.PlanUnavailable("its text is too long to be stored whole, so it cannot be planned")
    origin, plan = plans.capture(conn, source, key, text)
    return _captured(origin, plan)


def _captured(origin: str, plan: dict) -> Captured:
    """A plan as the warehouse stores it: its source, shape hash, root node, total cost and tree."""
    return (
        origin,
        plan_shape.plan_hash(plan),
        plan_shape.describe(plan_shape.root(plan)),
        plan_shape.total_cost(plan),
        plan,
    )


def _logged(result: PlanCapture, path: Path, dbname: str) -> dict[int, auto_explain.LoggedPlan]:
    """The plans auto_explain logged for the database, by queryid; none (and why, in the result) when the log cannot
    be read."""
    try:
        return auto_explain.logged_plans(path, dbname)
    except OSError as exc:
        result.auto_explain_error = f"auto_explain's log {path} cannot be read: {exc.strerror or exc}"
        return {}


def capture_target(
    target: Target,
    warehouse: sa.Engine,
    top_n: int = DEFAULT_TOP_N,
    deadline: float | None = None,
    rotation_n: int = DEFAULT_ROTATION_N,
    result: PlanCapture | None = None,
    auto_explain_log: Path | None = None,
) -> PlanCapture:
    """Capture plans of the top_n statements by execution time since the last capture, then of up to rotation_n
    others (first seen since then, then the least recently planned of those active), among those of the database the
    target connects to, until time.monotonic() reaches `deadline` (by default CAPTURE_DEADLINE_S from now): the
    statements left then are counted in `out_of_time`, and those planned are stored. Where the capture may EXPLAIN,
    the statements that would take pg_stat_statements past its room (plans.entry_room) are held back, the busiest last
    (`held_back`, and why). The run's outcome is recorded, a target without a plan source's too, at the watched
    server's clock (`result`, when given, is filled in as the run goes: a failure keeps its clock). With
    `auto_explain_log` (the target's jsonlog), a statement auto_explain logged a plan for takes that plan, the one a
    real call used, instead of an EXPLAIN; a log that cannot be read is said in result.auto_explain_error, and the
    statements are planned as without it."""
    result = result or PlanCapture(target.name)
    if deadline is None:
        deadline = time.monotonic() + CAPTURE_DEADLINE_S
    with session.connect(target) as conn:
        now = conn.execute("SELECT statement_timestamp()").fetchone()[0]  # type: ignore[index]
        version = int(conn.info.server_version)
        result.captured_at, result.server_version = now, version
        source = plans.plan_source(conn)
        result.source, result.reason = source.source, source.reason
        with warehouse.connect() as wconn:
            here = wconn.execute(sa.text("SELECT now()")).scalar_one()  # beside `now`: the two clocks' difference
            if source.source is None:
                run = stored_plans.CaptureRun(now, None, source.reason, version, warehouse_at=here)
                stored_plans.record_run(wconn, target.name, run)
                wconn.commit()
                return result
            since = stored_plans.last_capture(wconn, target.name) or now - FIRST_LOOKBACK
            todo = stored_plans.candidates(wconn, target.name, source.database_oid, since, top_n, rotation_n, now)
        captured: dict[Key, Captured] = {}
        logged = _logged(result, auto_explain_log, conn.info.dbname) if auto_explain_log is not None else {}
        for candidate in [c for c in todo if c.key[0] == source.database_oid and c.key[2] in logged]:
            captured[candidate.key] = _captured(auto_explain.AUTO_EXPLAIN, logged[candidate.key[2]].plan)
            result.planned[candidate.why] = result.planned.get(candidate.why, 0) + 1
            result.tried += 1
            result.auto_explain += 1
        todo = [c for c in todo if c.key not in captured]
        todo = _within_room(result, todo, plans.entry_room(conn))  # pg_store_plans falls back to EXPLAIN too
        explained = result.tried
        for candidate in todo:
            if time.monotonic() >= deadline:
                result.out_of_time = len(todo) - (result.tried - explained)
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
            held_back=result.held_back,
            held_back_reason=result.held_back_reason,
            warehouse_at=here,
        )
        stored_plans.record_run(wconn, target.name, run)
    return result


def capture_targets(
    targets: list[Target],
    warehouse: sa.Engine,
    top_n: int = DEFAULT_TOP_N,
    rotation_n: int = DEFAULT_ROTATION_N,
    auto_explain_logs: Mapping[str, Path] | None = None,
) -> list[PlanCapture]:
    """Capture plans on every target concurrently, all within CAPTURE_DEADLINE_S of the start (a target whose turn
    comes after it is failed, saying so); a target that fails gets a capture holding its password-free error, and
    never stops the others. `auto_explain_logs`: target name → its auto_explain jsonlog (capture_target)."""

    deadline = time.monotonic() + CAPTURE_DEADLINE_S

    def one(target: Target) -> PlanCapture:
        if time.monotonic() >= deadline:
            return PlanCapture(target.name, error=OUT_OF_TIME.format(CAPTURE_DEADLINE_S))
        going = PlanCapture(target.name)
        try:
            log = (auto_explain_logs or {}).get(target.name)
            return capture_target(target, warehouse, top_n, deadline, rotation_n, going, log)
        except Exception as exc:  # one failing target must never stop the others
            failed = PlanCapture(target.name, error=target_failure(exc, target))
            failed.captured_at, failed.server_version = going.captured_at, going.server_version
            _record_failure(warehouse, failed)
            return failed

    with ThreadPoolExecutor(max_workers=max(1, min(MAX_PARALLEL_TARGETS, len(targets)))) as pool:
        return list(pool.map(one, targets))


def _within_room(
    result: PlanCapture, todo: list[stored_plans.Candidate], room: plans.EntryRoom
) -> list[stored_plans.Candidate]:
    """The candidates to EXPLAIN: the busiest always (as plan capture has since it began: a server whose
    pg_stat_statements is full, as a busy one's usually is, still needs their plans), then the others (new statements,
    the rotation) up to the room pg_stat_statements has; the rest counted in result.held_back, and why in
    result.held_back_reason."""
    if room.room is None:
        return todo
    busiest = [c for c in todo if c.why == stored_plans.BUSIEST]
    others = [c for c in todo if c.why != stored_plans.BUSIEST]
    kept = busiest + others[: max(0, room.room - len(busiest))]
    result.held_back = len(todo) - len(kept)
    if result.held_back:
        left = "no room left" if room.room <= 0 else f"room for {room.room}"
        result.held_back_reason = f"{result.held_back} statements held back, {left}: {room.facts}"
    return kept


def _record_failure(warehouse: sa.Engine, capture: PlanCapture) -> None:
    """Keep a failed run's (password-free) error as its outcome, at the watched server's clock: as read when the run
    reached it, else the warehouse's moved by the two clocks' difference at the target's last run that did; a
    warehouse that cannot take it (it may be what failed) leaves it unrecorded."""
    try:
        with warehouse.begin() as wconn:
            now = capture.captured_at or stored_plans.server_clock(wconn, capture.target)
            why = f"the plan capture failed: {capture.error}"
            run = stored_plans.CaptureRun(now, None, why, capture.server_version)
            stored_plans.record_run(wconn, capture.target, run)
    except sa.exc.SQLAlchemyError:
        pass
