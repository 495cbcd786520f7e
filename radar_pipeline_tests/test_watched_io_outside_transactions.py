"""Calls to a watched server (statement texts, plan capture) happen while the warehouse holds no open transaction and
no advisory lock of radar's: a slow or stuck watched server must never keep warehouse rows or locks held.

Each collector call is wrapped to look, at that moment, at the warehouse's real state in pg_stat_activity and
pg_locks from a connection of its own."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pandas as pd
import psycopg
import pytest
import sqlalchemy as sa

from radar_pipeline.collector import pgss, plans, session
from radar_pipeline.engine import EngineSettings
from radar_pipeline.steps.deploy_analysis import AnalysisRun, analyse_deploy
from radar_pipeline.steps.periodic_check import analyse_period
from radar_pipeline.warehouse import deploys
from radar_pipeline.warehouse import plans as stored_plans

from .helpers import collector_target, run, scrape, store_counters


class WarehouseWatch:
    """Records, at each wrapped call, the warehouse's sessions in a transaction and the advisory locks held."""

    def __init__(self, warehouse: sa.Engine) -> None:
        self.dsn = warehouse.url.set(drivername="postgresql").render_as_string(hide_password=False)
        self.seen: list[tuple[str, int, int]] = []

    def state(self) -> tuple[int, int]:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            row = conn.execute(
                "SELECT (SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND pid <> pg_backend_pid() AND xact_start IS NOT NULL), "
                "(SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
                "AND database = (SELECT oid FROM pg_database WHERE datname = current_database()))"
            ).fetchone()
        assert row is not None
        return int(row[0]), int(row[1])

    def wrap(self, monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> None:
        real: Callable[..., Any] = getattr(module, name)

        def observed(*args: Any, **kwargs: Any) -> Any:
            self.seen.append((name, *self.state()))
            return real(*args, **kwargs)

        monkeypatch.setattr(module, name, observed)


@pytest.mark.parametrize("server", ["pg18"], indirect=True)
def test_snapshot_reads_statement_texts_outside_the_warehouse_transaction(app_db, warehouse, monkeypatch):
    server, target = app_db
    run(target, "SELECT payload FROM items WHERE id = %s", 3, (1,))
    watch = WarehouseWatch(warehouse)
    watch.wrap(monkeypatch, pgss, "fetch_texts")
    first = scrape(target, warehouse)
    assert first.new_statements >= 1
    run(target, "SELECT grp FROM items WHERE id = %s", 2, (2,))  # a new statement: its text is read next scrape
    second = scrape(target, warehouse)
    assert second.new_statements >= 1
    assert [name for name, _, _ in watch.seen] == ["fetch_texts", "fetch_texts"]
    assert all((busy, locks) == (0, 0) for _, busy, locks in watch.seen), watch.seen
    with warehouse.connect() as conn:
        texts = [
            r[0] for r in conn.execute(sa.text("SELECT query FROM radar.query WHERE target = :t"), {"t": target.name})
        ]
    assert any(t.startswith("SELECT grp FROM items WHERE id = $1") for t in texts)


def _slowing_counters(warehouse: sa.Engine, target: str, start: Any, minutes: int, slows_at: int) -> None:
    """Query 31 slows ×3 after `slows_at` minutes; 33 stays flat (one scrape a minute)."""
    rows = []
    for queryid in (31, 33):
        calls, total = 0, 0.0
        for minute in range(minutes + 1):
            mean = 3.0 if queryid == 31 and minute > slows_at else 1.0
            calls, total = calls + 20, total + 20 * mean * (1 + 0.01 * (minute % 3))
            rows.append((queryid, start + timedelta(minutes=minute), calls, total))
    frame = pd.DataFrame(rows, columns=["queryid", "captured_at", "calls", "total_exec_time"])
    store_counters(warehouse, target, frame, {31: "SELECT payload FROM items WHERE id = $1", 33: "SELECT 2"})
    plan = {"Plan": {"Node Type": "Index Scan", "Relation Name": "items", "Index Name": "items_pkey"}}
    with warehouse.begin() as conn:  # the plan in force before the change; none is stored after it
        stored_plans.store(
            conn, target, start, {(5, 10, 31, True): ("generic_plan", "h1", "Index Scan", 8.0, plan)}, {}
        )


@pytest.mark.parametrize("server", ["pg18"], indirect=True)
def test_analyses_capture_plans_outside_the_warehouse_transaction(app_db, warehouse, monkeypatch):
    server, target = app_db
    live = collector_target(target)
    with warehouse.connect() as conn:
        now = conn.execute(sa.text("SELECT date_trunc('minute', now())")).scalar_one()
    start = now - timedelta(minutes=42)
    _slowing_counters(warehouse, target.name, start, 40, 20)
    deploys.record(warehouse, deploys.DeployEvent("d-io", target.name, start + timedelta(minutes=20, seconds=30)))

    watch = WarehouseWatch(warehouse)
    for module, name in ((session, "connect"), (plans, "plan_source"), (plans, "capture")):
        watch.wrap(monkeypatch, module, name)
    settings = EngineSettings(window=timedelta(minutes=20))
    result = analyse_deploy(AnalysisRun(warehouse, settings, live_targets={target.name: live}), "d-io")
    slowed = result.verdicts.set_index("queryid").loc[31]
    assert slowed.verdict == "detected"
    # The statement's key is synthetic (dbid 5): the capture is tried and says why it has no plan.
    assert "another database" in slowed.plan_diff["unavailable"]
    assert {name for name, _, _ in watch.seen} == {"connect", "plan_source", "capture"}
    assert all((busy, locks) == (0, 0) for _, busy, locks in watch.seen), watch.seen

    watch.seen.clear()
    period_end = start + timedelta(minutes=40)
    done, failed = analyse_period(
        AnalysisRun(warehouse, settings, live_targets={target.name: live}), "io", period_end, timedelta(minutes=2)
    )
    assert failed == {} and len(done) == 1
    assert done[0].verdicts.set_index("queryid").loc[31].verdict == "detected"
    assert {name for name, _, _ in watch.seen} == {"connect", "plan_source", "capture"}
    assert all((busy, locks) == (0, 0) for _, busy, locks in watch.seen), watch.seen
