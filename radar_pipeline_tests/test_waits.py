"""Waits named (issue 39): the collector samples pg_stat_activity at each scrape (what each active statement waits on,
and for a heavyweight lock the statement holding it, however idle its session), and a detection whose sessions waited
on a lock after its change is given cause lock_wait with the holder's text, whatever the holder's own time."""

from __future__ import annotations

import re
import threading
import time
from datetime import timedelta

import psycopg
import sqlalchemy as sa

from radar_pipeline.steps.deploy_analysis import AnalysisRun, analyse_deploy
from radar_pipeline.steps.snapshots import snapshot_target
from radar_pipeline.steps.waits import wait_causes
from radar_pipeline.warehouse import waits

from .test_catalog_causes import Watched, watched  # noqa: F401 (the fixture)
from .test_deploy_impact import LIST, LOOKUP, SETTINGS, store

HOLD = "SELECT id, balance FROM accounts WHERE id = %s FOR UPDATE"
WAITER = "UPDATE accounts SET balance = balance + %s WHERE id = %s"


def _statement(server, database: str, like: str) -> int:
    """The queryid pg_stat_statements gives the statement whose text starts as `like`."""
    rows = server.execute(
        "SELECT queryid FROM pg_stat_statements WHERE query LIKE %s AND dbid = "
        "(SELECT oid FROM pg_database WHERE datname = current_database())",
        database,
        (like + "%",),
    )
    assert rows, f"{like!r} not in pg_stat_statements"
    return int(rows[0][0])


def test_a_session_waiting_on_a_row_lock_is_sampled_with_the_statement_holding_it(watched: Watched, warehouse):  # noqa: F811
    """A migration's session locks a row (SELECT … FOR UPDATE) and sits idle in its transaction; the application's
    UPDATE of that row waits. The scrape's sample stores the UPDATE waiting on Lock, held by the SELECT … FOR UPDATE;
    the collector's own sessions and idle ones are not sampled."""
    dsn = watched.server.pg.dsn(watched.database)  # type: ignore[attr-defined]
    holder = psycopg.connect(dsn)
    waiter = psycopg.connect(dsn.replace("postgres@", f"{watched.app_role}@"), autocommit=True)
    done = threading.Event()
    try:
        holder.execute(HOLD, (7,))  # its transaction stays open: the row stays locked

        def update() -> None:
            try:
                waiter.execute(WAITER, (1, 7))
            finally:
                done.set()

        thread = threading.Thread(target=update, daemon=True)
        thread.start()
        deadline = time.monotonic() + 30
        while not watched.server.execute(  # type: ignore[attr-defined]
            "SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE 'UPDATE accounts%'"
        ):
            assert time.monotonic() < deadline, "the UPDATE never waited on the row lock"
            time.sleep(0.05)
        result = snapshot_target(watched.collector, warehouse, exclude_role=watched.collector_role)
        assert result.wait_error is None and result.wait_rows >= 1
    finally:
        holder.rollback()  # the lock goes: the UPDATE finishes
        assert done.wait(30)
        holder.close()
        waiter.close()
    hold_id = _statement(watched.server, watched.database, "SELECT id, balance FROM accounts")
    wait_id = _statement(watched.server, watched.database, "UPDATE accounts SET balance")
    with warehouse.connect() as conn:
        rows = conn.execute(
            sa.text(
                "SELECT queryid, wait_event_type, wait_event, blocker_queryid, sessions FROM radar.wait_sample "
                "WHERE target = :t AND dbid = :d"
            ),
            {"t": watched.target.name, "d": watched.dbid},
        ).all()
    assert (wait_id, "Lock", "transactionid", hold_id, 1) in [tuple(r) for r in rows], rows
    assert all(r[0] != hold_id for r in rows)  # idle in its transaction: not active, not sampled


def test_a_detection_whose_sessions_waited_on_a_lock_names_the_lock_and_its_holder(warehouse):
    """Synthetic counters around a deploy (an UPDATE from 2 to 40 ms a call at 2 calls a second, nothing in its
    counters to explain it; the statement holding the lock costs nothing) and wait samples, ten a scrape: after the
    deploy one of its sessions was found waiting on a lock in 8% of them (Little's law: 0.08 / 2 calls a second = 40
    ms a call), held by the lookup; before, in none. Its cause is lock_wait, the wait per call and the holder's text
    in its detail. A statement whose I/O waits were as frequent before keeps its own cause."""
    deployed_at = store(
        warehouse,
        "waits-v2",
        {
            81: {"text": LIST, "calls": (20, 20), "ms": (2.0, 40.0)},  # waits on the lock after the deploy
            82: {"text": LOOKUP, "calls": (20, 20), "ms": (1.0, 1.0)},  # holds it (its own time unchanged)
            83: {"text": "SELECT 1 FROM items WHERE id = $1", "calls": (20, 20), "ms": (1.0, 20.0)},  # waited always
        },
    )
    readings = []
    for i in range(-200, 200):  # ten samples a 10-s scrape, 200 either side of the deploy
        at = deployed_at + timedelta(seconds=i + 0.5)
        samples = []
        if i >= 0 and i % 25 < 2:
            samples.append({"dbid": 5, "userid": 10, "queryid": 81, "wait_event_type": "Lock"})
            samples[-1] |= {"wait_event": "transactionid", "blocker_queryid": 82, "blocker_userid": 10}
        if i % 10 == 0:
            samples.append({"dbid": 5, "userid": 10, "queryid": 83, "wait_event_type": "IO"})
            samples[-1] |= {"wait_event": "DataFileRead", "blocker_queryid": None, "blocker_userid": None}
        readings.append((at, [{**s, "sessions": 1} for s in samples]))
    with warehouse.begin() as conn:
        assert waits.write_waits(conn, "main", readings) == 56  # 16 lock rows, 40 I/O rows
        assert waits.write_waits(conn, "main", readings[:5]) == 0  # a reading stored once
    result = analyse_deploy(AnalysisRun(warehouse, SETTINGS), "waits-v2")
    verdicts = result.verdicts.set_index("queryid")
    assert (verdicts.loc[[81, 83], "verdict"] == "detected").all()
    assert verdicts.loc[81, "cause"] == "lock_wait", verdicts.loc[81, ["cause", "cause_detail"]]
    detail = verdicts.loc[81, "cause_detail"]
    found = re.fullmatch(
        r"waited on a lock \(Lock/transactionid\) ≈ ([\d.]+) ms a call after the change \(0\.0 ms before\) of the "
        r"([\d.]+) ms a call it added, seen in 16 of 200 samples; held by queryid 82: (.*)",
        detail,
    )
    assert found and found.group(3) == LOOKUP, detail
    assert 25 < float(found.group(1)) < 60 and 30 < float(found.group(2)) < 45, detail  # ≈ 40 and 38 ms
    assert verdicts.loc[83, "cause"] != "io_wait"  # its I/O waits were as frequent before
    with warehouse.connect() as conn:
        stored = conn.execute(
            sa.text("SELECT cause FROM radar.regression WHERE deploy_id = 'waits-v2' AND queryid = 81")
        ).scalar_one()
    assert stored == "lock_wait"


def test_the_rule_needs_the_wait_to_explain_half_of_what_each_call_added():
    import pandas as pd

    def found(seen: int, sessions_after: int, sessions_before: int, kind: str = "Lock", added: float = 38.0):
        rows = [(0, True, kind, "tuple", seen, sessions_after, 200, 9, 10)]
        rows += [(0, False, kind, "tuple", min(seen, sessions_before), sessions_before, 200, 9, 10)]
        columns = ["row", "after", "wait_event_type", "wait_event", "seen", "sessions", "captures"]
        counts = pd.DataFrame(rows, columns=[*columns, "blocker_queryid", "blocker_userid"])
        rates = pd.DataFrame(
            [{"calls_before": 400, "calls_after": 400, "mean_before_ms": 2.0, "mean_after_ms": 2.0 + added}]
        ).assign(before_s=200.0, after_s=200.0)  # 2 calls a second
        return wait_causes(counts, rates)

    lock = found(16, 16, 0)[0]  # 0.08 waiting / 2 calls a second: 40 ms a call of the 38 added
    assert lock.cause.value == "lock_wait" and round(lock.wait_after_ms) == 40 and lock.blocker_queryid == 9
    assert not found(6, 6, 0)  # 15 ms of 38: under half
    assert not found(16, 16, 12)  # 40 ms against 30 before: 10 of 38
    assert not found(2, 16, 0)  # seen in 2 samples only
    assert not found(16, 16, 0, added=-1.0)  # faster: nothing to explain
    assert found(16, 16, 0, "IO")[0].cause.value == "io_wait"
    assert not found(16, 16, 0, "LWLock")  # not a wait the rule names
