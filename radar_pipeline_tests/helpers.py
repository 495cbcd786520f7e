"""Small helpers shared by the tests: workloads on a watched database and reads of the warehouse."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import numpy as np
import pandas as pd
import psycopg
import sqlalchemy as sa

from radar_pipeline.config import Target
from radar_pipeline.steps.snapshots import snapshot_target
from radar_pipeline.warehouse.snapshots import StoreResult


def run(target: Target, sql: str, times: int = 1, params: tuple | None = None, user: str | None = None) -> None:
    """Execute one statement `times` times on the target's database, as the application would."""
    dsn = target.dsn if user is None else target.dsn.replace("postgres@", f"{user}@")
    with psycopg.connect(dsn, autocommit=True) as conn:
        for _ in range(times):
            conn.execute(sql, params)  # type: ignore[arg-type]


def scrape(target: Target, warehouse: sa.Engine, exclude_role: str | None = None) -> StoreResult:
    """One snapshot of the target, failing the test if it reports a duplicate."""
    result = snapshot_target(target, warehouse, exclude_role)
    assert not result.duplicate
    return result


def statement(target: Target, text_like: str) -> tuple[int, int]:
    """(dbid, queryid) of the statement of the target's own database whose text matches.

    pg_stat_statements is server-wide, so the tests always narrow to their database: other databases on the test
    server may hold the same statement.
    """
    with psycopg.connect(target.dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT dbid, queryid FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database "
            "WHERE datname = current_database()) AND query LIKE %s",
            (text_like,),
        ).fetchall()
    assert len(rows) == 1, f"expected one statement like {text_like!r}, found {len(rows)}"
    return int(rows[0][0]), int(rows[0][1])


def intervals(warehouse: sa.Engine, target: str, key: tuple[int, int]) -> pd.DataFrame:
    """The statement's rows of radar.pgss_interval, oldest first."""
    with warehouse.connect() as conn:
        return pd.read_sql(
            sa.text(
                "SELECT * FROM radar.pgss_interval WHERE target = :t AND dbid = :d AND queryid = :q "
                "ORDER BY interval_end"
            ),
            conn,
            params={"t": target, "d": key[0], "q": key[1]},
        )


def snapshot_rows(warehouse: sa.Engine, target: str, key: tuple[int, int] | None = None) -> pd.DataFrame:
    """Stored snapshot rows of a target (optionally of one statement), oldest first."""
    where = "target = :t" + (" AND dbid = :d AND queryid = :q" if key is not None else "")
    with warehouse.connect() as conn:
        return pd.read_sql(
            sa.text(f"SELECT * FROM radar.pgss_snapshot WHERE {where} ORDER BY captured_at"),
            conn,
            params={"t": target, "d": key and key[0], "q": key and key[1]},
        )


def scrape_times(warehouse: sa.Engine, target: str) -> list:
    """The captured_at of every stored scrape of a target, oldest first."""
    with warehouse.connect() as conn:
        return [
            r[0]
            for r in conn.execute(
                sa.text("SELECT captured_at FROM radar.pgss_info_snapshot WHERE target = :t ORDER BY captured_at"),
                {"t": target},
            )
        ]


def run_log_text(instance, run_id: str) -> str:  # type: ignore[no-untyped-def]
    """Every log line and event of a Dagster run as one text (what a user reads in the UI)."""
    return "\n".join(f"{entry.user_message} {entry.dagster_event}" for entry in instance.all_logs(run_id))


def store_counters(
    warehouse: sa.Engine,
    target: str,
    frame: pd.DataFrame,
    texts: dict[int, str],
    dbid: int = 5,
    server_version_num: int = 180000,
) -> None:
    """Write synthetic cumulative counters into the warehouse as the collector would: snapshot rows (columns queryid,
    captured_at, calls, total_exec_time; userid 10, fingerprint = queryid), a scrape row per distinct captured_at, and
    a catalogue entry per query with its text."""
    days = pd.to_datetime(frame["captured_at"]).dt.date
    rows = [
        {"t": target, "at": r.captured_at, "q": int(r.queryid), "c": int(r.calls), "x": float(r.total_exec_time)}
        for r in frame.itertuples()
    ]
    with warehouse.begin() as conn:
        conn.execute(
            sa.text("SELECT radar.ensure_pgss_snapshot_partitions(:d, :n)"),
            {"d": days.min(), "n": (days.max() - days.min()).days + 1},
        )
        conn.execute(
            sa.text(
                "INSERT INTO radar.pgss_snapshot VALUES (:t, :at, :dbid, 10, :q, true, :c, :x, :c, 0, 0, 0, 0.0, NULL, "
                "false, :q)"
            ),
            [{**row, "dbid": dbid} for row in rows],
        )
        conn.execute(
            sa.text(
                "INSERT INTO radar.pgss_info_snapshot VALUES (:t, :at, 0, NULL, :v, '1.12', 3, 3) "
                "ON CONFLICT DO NOTHING"
            ),
            [{"t": target, "at": at, "v": server_version_num} for at in sorted(set(frame["captured_at"]))],
        )
        first = frame["captured_at"].min()
        conn.execute(
            sa.text(
                "INSERT INTO radar.query VALUES (:t, :dbid, 10, :q, true, :q, :text, :at, :at, 0, 0, NULL, NULL) "
                "ON CONFLICT DO NOTHING"
            ),
            [{"t": target, "dbid": dbid, "q": q, "text": text, "at": first} for q, text in texts.items()],
        )


def hourly_deploy_counters(
    start: datetime,
    rng: np.random.Generator,
    queryids: list[int],
    deploys: int,
    level: Callable[[int, int], float],
) -> pd.DataFrame:
    """Cumulative counters (queryid, captured_at, calls, total_exec_time) around `deploys` deploys an hour apart from
    `start`: 41 scrapes 10 s apart centred on each, 20 calls an interval, each interval's mean level(queryid, the
    deploy in force: the one before until the deploy's scrape, then this one) with 5% log-normal noise."""
    rows = []
    for queryid in queryids:
        calls, total = 0, 0.0
        for d in range(deploys):
            at = start + timedelta(hours=d)
            for j in range(-20, 21):
                mean = level(queryid, d if j > 0 else d - 1) * rng.lognormal(0, 0.05)
                calls, total = calls + 20, total + 20 * mean
                rows.append((queryid, at + timedelta(seconds=10 * j), calls, total))
    return pd.DataFrame(rows, columns=["queryid", "captured_at", "calls", "total_exec_time"])


def drive(
    target: Target,
    warehouse: sa.Engine,
    work: Callable[[psycopg.Connection], None],
    every: float,
    scrapes: int,
    until: datetime | None = None,
) -> list[datetime]:
    """Run `work` on the target's database, then snapshot it: at least `scrapes` times and until the warehouse's
    clock has passed `until`. The scrapes are paced `every` seconds apart when the machine keeps up; on a loaded
    machine they come slower and the test derives its window from their recorded times (window_covering), so what
    it asserts never depends on how fast the machine was. Returns the captured_at of each scrape taken."""
    taken: list[datetime] = []
    with psycopg.connect(target.dsn, autocommit=True) as conn:
        while len(taken) < scrapes or (until is not None and _warehouse_now(warehouse) <= until):
            tick = time.monotonic()
            work(conn)
            taken.append(snapshot_target(target, warehouse).captured_at)
            time.sleep(max(0.0, every - (time.monotonic() - tick)))  # pacing only
    return taken


def window_covering(before: list[datetime], at: datetime, intervals: int, nominal: float) -> float:
    """The analysis window (seconds) each side of `at` that holds `intervals` scrape intervals of the scrapes
    `before` it: the nominal window when the scrapes came on time, longer when a loaded machine slowed them."""
    earlier = [t for t in before if t <= at]
    assert len(earlier) > intervals, f"{len(earlier)} scrapes before {at}: {intervals + 1} needed"
    return max(nominal, (at - earlier[-intervals - 1]).total_seconds() + 0.01)


def tolerance_covering(before: list[datetime], after: list[datetime], at: datetime, nominal: float) -> float:
    """The tolerance (seconds) around `at` that reaches the scrapes either side of it: the nominal one when they came
    on time, wider when a loaded machine left a long gap there (the located change can only be a scrape's time)."""
    last_before = max(t for t in before if t <= at)
    first_after = min(t for t in after if t > at)
    return max(nominal, 1.5 * max((at - last_before).total_seconds(), (first_after - at).total_seconds()))


def _warehouse_now(warehouse: sa.Engine) -> datetime:
    with warehouse.connect() as conn:
        return conn.execute(sa.text("SELECT now()")).scalar_one()


COLLECTOR = "radar_collector"


def collector_target(target: Target) -> Target:
    """The same database as `target` (a superuser's), reached as the collector's own role: pg_read_all_stats, and the
    table privileges EXPLAIN needs (SELECT; INSERT, UPDATE, DELETE for DML plans), the set-up in docs/databases.md.

    The entries of databases earlier tests dropped leave pg_stat_statements (they fill the shared test server's view,
    and plan capture leaves room in it: collector/plans.py entry_room); the statements of live databases stay."""
    with psycopg.connect(target.dsn, autocommit=True) as conn:
        conn.execute(
            "SELECT pg_stat_statements_reset(0, d.dbid, 0) FROM (SELECT DISTINCT dbid FROM pg_stat_statements "
            "WHERE dbid NOT IN (SELECT oid FROM pg_database)) d"
        )
        conn.execute(
            f"DO $$ BEGIN CREATE ROLE {COLLECTOR} LOGIN IN ROLE pg_read_all_stats; "
            "EXCEPTION WHEN duplicate_object THEN NULL; END $$"
        )
        grants = f"SELECT, INSERT, UPDATE, DELETE ON TABLES TO {COLLECTOR}"
        conn.execute(f"GRANT {grants.replace('ON TABLES', 'ON ALL TABLES IN SCHEMA public')}")
        conn.execute(f"ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT {grants}")
    return Target(target.name, target.dsn.replace("postgres@", f"{COLLECTOR}@"))


def every_attempt_fails(due: Callable[[], list], execute: Callable[[Any], Any], within: float = 90.0) -> list[str]:
    """Launch each run a looks sensor asks for (`due()`: its run requests; `execute(request)`: the run, which must
    fail, as a terminated or killed one ends) until it asks for nothing more; the run keys, in the order asked.
    A key asked for again is no new attempt (Dagster skips a run key it has seen)."""
    keys: list[str] = []
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        requests = due()
        if keys and not requests:
            return keys  # past the last attempt: asked for no more
        for request in requests:
            if request.run_key in keys:
                continue
            keys.append(request.run_key or "")
            assert not execute(request).success
        time.sleep(0.2)
    raise AssertionError(f"the look is still asked for after {keys}")
