"""Waits named (issue 39): the collector samples pg_stat_activity at each scrape (what each active statement waits on,
and for a heavyweight lock the statement holding it, however idle its session), and a detection whose sessions waited
on a lock after its change is given cause lock_wait with the holder's text, whatever the holder's own time."""

from __future__ import annotations

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
    """Synthetic counters around a deploy (an UPDATE ×20, nothing in its counters to explain it; the statement holding
    the lock costs nothing) and wait samples at the scrapes: the UPDATE waited on a lock in 12 of 20 samples after the
    deploy, 1 of 20 before, held by the lookup. Its cause is lock_wait, the wait and the holder's text in its detail;
    a statement whose waits did not rise keeps its own cause."""
    deployed_at = store(
        warehouse,
        "waits-v2",
        {
            81: {"text": LIST, "calls": (20, 20), "ms": (2.0, 40.0)},  # waits on the lock after the deploy
            82: {"text": LOOKUP, "calls": (20, 20), "ms": (1.0, 1.0)},  # holds it (its own time unchanged)
            83: {"text": "SELECT 1 FROM items WHERE id = $1", "calls": (20, 20), "ms": (1.0, 20.0)},  # waited always
        },
    )
    with warehouse.begin() as conn:
        for i in range(-20, 20):
            at = deployed_at + timedelta(seconds=10 * i + 5)
            after = i >= 0
            samples = []
            if (after and i % 5 < 3) or i == -7:
                samples.append({"dbid": 5, "userid": 10, "queryid": 81, "wait_event_type": "Lock"})
                samples[-1] |= {"wait_event": "transactionid", "blocker_queryid": 82, "blocker_userid": 10}
            if i % 2 == 0:
                samples.append({"dbid": 5, "userid": 10, "queryid": 83, "wait_event_type": "IO"})
                samples[-1] |= {"wait_event": "DataFileRead", "blocker_queryid": None, "blocker_userid": None}
            waits.write_waits(conn, "main", at, [{**s, "sessions": 1} for s in samples])
    result = analyse_deploy(AnalysisRun(warehouse, SETTINGS), "waits-v2")
    verdicts = result.verdicts.set_index("queryid")
    assert (verdicts.loc[[81, 83], "verdict"] == "detected").all()
    assert verdicts.loc[81, "cause"] == "lock_wait", verdicts.loc[81, ["cause", "cause_detail"]]
    assert verdicts.loc[81, "cause_detail"] == (
        "waited on a lock (Lock/transactionid) in 12 of 20 samples after the change, 1 of 20 before; "
        f"held by queryid 82: {LOOKUP}"
    )
    assert verdicts.loc[83, "cause"] != "io_wait"  # its I/O waits were as frequent before
    with warehouse.connect() as conn:
        stored = conn.execute(
            sa.text("SELECT cause FROM radar.regression WHERE deploy_id = 'waits-v2' AND queryid = 81")
        ).scalar_one()
    assert stored == "lock_wait"


def test_the_rule_needs_a_wait_seen_often_after_and_more_than_before():
    import pandas as pd

    def counts(seen_after: int, seen_before: int, kind: str = "Lock") -> pd.DataFrame:
        rows = [(0, True, kind, "tuple", seen_after, 30, 9, 10), (0, False, kind, "tuple", seen_before, 30, 9, 10)]
        columns = ["row", "after", "wait_event_type", "wait_event", "seen", "captures", "blocker_queryid"]
        return pd.DataFrame(rows, columns=[*columns, "blocker_userid"])

    assert wait_causes(counts(9, 0))[0].cause.value == "lock_wait"
    assert not wait_causes(counts(5, 0))  # 5 of 30: under MIN_SHARE
    assert not wait_causes(counts(12, 9))  # 40% against 30%: not a rise
    assert wait_causes(counts(12, 0, "IO"))[0].cause.value == "io_wait"
    assert not wait_causes(counts(12, 0, "LWLock"))  # not a wait the rule names
