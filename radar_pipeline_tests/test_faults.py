"""The warehouse stopped (`pg_ctl stop -m immediate`) in the middle of a write, on a server of its own: after the
restart nothing partial is stored, and the rerun (or the reconciler) completes; no alert is posted twice.

To stop it at a known point, a test-only trigger holds the Nth row inserted into a table until an advisory lock the
test holds is free: the writer is then inside its transaction (mid-COPY for snapshots and verdicts), and the test
stops the server while it waits there.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta

import dagster as dg
import psycopg
import pytest
import sqlalchemy as sa

from radar_pipeline.config import Target
from radar_pipeline.defs.alerts.regression_alerts import regression_alerts
from radar_pipeline.defs.resources import AnalysisResource, ChannelsResource, SlackResource, WarehouseResource
from radar_pipeline.demo.local_postgres import LocalPostgres
from radar_pipeline.engine import EngineSettings
from radar_pipeline.steps.deploy_analysis import AnalysisRun, analyse_deploy
from radar_pipeline.steps.snapshots import snapshot_target
from radar_pipeline.warehouse import migrations
from radar_pipeline.warehouse.database import make_engine

from .test_alerts import analysed  # noqa: F401 - the fixture is used by name
from .test_outbox import POST, _backoff_passes
from .test_reconciler import _defs, _execute, _resources, _tick

GATE = 4242  # the advisory lock the trigger waits on
SETTINGS = EngineSettings(window=timedelta(seconds=200), tolerance_floor=timedelta(seconds=10))


@pytest.fixture(scope="module")
def dedicated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalPostgres]:
    """A warehouse server of these tests' own, to be stopped at will."""
    # A commit must survive the server's process stopping (the embedded default turns synchronous_commit off for
    # speed, which would lose the last commits to an immediate stop: not what production runs).
    pg = LocalPostgres(tmp_path_factory.mktemp("faults") / "data", settings={"synchronous_commit": "on"})
    pg.start()
    try:
        yield pg
    finally:
        pg.destroy()


@pytest.fixture
def warehouse_url(dedicated: LocalPostgres) -> Iterator[str]:
    """A fresh, migrated warehouse database on the dedicated server (overrides conftest's for this module)."""
    dedicated.start()
    name = f"wh_{time.monotonic_ns()}"
    with psycopg.connect(dedicated.dsn(), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = dedicated.url(name, driver="postgresql+psycopg")
    migrations.upgrade(url)
    yield url


@pytest.fixture
def warehouse(warehouse_url: str) -> Iterator[sa.Engine]:
    engine = make_engine(warehouse_url)
    yield engine
    engine.dispose()


def _install_gate(engine: sa.Engine, table: str, nth: int) -> None:
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE SEQUENCE radar.fault_rows"))
        conn.execute(
            sa.text(
                "CREATE FUNCTION radar.fault_gate() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                f"IF nextval('radar.fault_rows') = {nth} THEN "
                f"PERFORM pg_advisory_lock({GATE}); PERFORM pg_advisory_unlock({GATE}); END IF; RETURN NEW; END $$"
            )
        )
        conn.execute(
            sa.text(
                f"CREATE TRIGGER fault_gate BEFORE INSERT ON {table} FOR EACH ROW EXECUTE FUNCTION radar.fault_gate()"
            )
        )


def _remove_gate(engine: sa.Engine, table: str) -> None:
    with engine.begin() as conn:
        conn.execute(sa.text(f"DROP TRIGGER fault_gate ON {table}"))
        conn.execute(sa.text("DROP FUNCTION radar.fault_gate()"))
        conn.execute(sa.text("DROP SEQUENCE radar.fault_rows"))


def _waiting_at_gate(pg: LocalPostgres, database: str) -> str | None:
    with psycopg.connect(pg.dsn(database), autocommit=True) as conn:
        row = conn.execute(
            "SELECT query FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND wait_event = 'advisory' "
            "AND datname = current_database()"
        ).fetchone()
    return row[0] if row else None


def _stop_immediately(pg: LocalPostgres) -> None:
    pg._run([str(pg.bin_dir / "pg_ctl"), "-D", str(pg.data_dir), "-m", "immediate", "-w", "stop"])


def _wait_for(condition: Callable[[], object], what: str, timeout: float = 120.0) -> object:
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)
    return value


def _crash_inside(
    pg: LocalPostgres, url: str, engine: sa.Engine, table: str, nth: int, write: Callable[[], object]
) -> str:
    """Run `write` until it waits at the gate on `table`'s nth row, stop the server immediately, restart it;
    returns the statement that was running and checks that `write` failed."""
    database = url.rsplit("/", 1)[1]
    _install_gate(engine, table, nth)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            write()
        except BaseException as exc:  # noqa: BLE001 - the crash is expected
            errors.append(exc)

    with psycopg.connect(pg.dsn(database), autocommit=True) as holder:
        holder.execute("SELECT pg_advisory_lock(%s)", (GATE,))
        worker = threading.Thread(target=run)
        worker.start()
        statement = _wait_for(
            lambda: _waiting_at_gate(pg, database) or not worker.is_alive(), f"the write to reach row {nth} of {table}"
        )
        assert worker.is_alive(), f"the write ended before reaching the gate: {errors}"
        _stop_immediately(pg)
    worker.join(120)
    assert not worker.is_alive() and errors, "the write should have failed with the warehouse stopped"
    pg.start()
    engine.dispose()
    _remove_gate(engine, table)
    return str(statement)


def _count(engine: sa.Engine, sql: str, **params: object) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.text(sql), params).scalar_one())


@pytest.fixture
def watched(pg18) -> Iterator[Target]:
    """A watched database with twenty statements that ran, on the shared test server."""
    name = pg18.new_database("faultapp")
    pg18.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements", name)
    pg18.execute("CREATE TABLE t (id int PRIMARY KEY, v text)", name)
    pg18.execute("INSERT INTO t SELECT g, md5(g::text) FROM generate_series(1, 100) g", name)
    target = Target("faultapp", pg18.pg.url(name))
    _work(target)
    yield target
    pg18.drop_database(name)


def _work(target: Target) -> None:
    with psycopg.connect(target.dsn, autocommit=True) as conn:
        for i in range(20):  # twenty statements of different shapes: twenty queryids
            conn.execute("SELECT v FROM t WHERE " + " AND ".join(["id = %s"] * (i + 1)), (i,) * (i + 1))


def _scraped(engine: sa.Engine) -> tuple[int, int, int]:
    return (
        _count(engine, "SELECT count(*) FROM radar.pgss_snapshot"),
        _count(engine, "SELECT count(*) FROM radar.pgss_info_snapshot"),
        _count(engine, "SELECT count(*) FROM radar.query"),
    )


def test_stopped_mid_snapshot_write_leaves_no_partial_scrape_and_the_rerun_completes(
    dedicated, warehouse_url, warehouse, watched
):
    snapshot_target(watched, warehouse)  # the first scrape: the baseline
    _work(watched)
    before = _scraped(warehouse)
    statement = _crash_inside(
        dedicated, warehouse_url, warehouse, "radar.pgss_snapshot", 5, lambda: snapshot_target(watched, warehouse)
    )
    assert "radar.pgss_snapshot" in statement
    assert _scraped(warehouse) == before  # lost: the scrape in flight, wholly; partial: nothing
    result = snapshot_target(watched, warehouse)  # the next scrape sees the same movement
    after = _scraped(warehouse)
    assert result.stored_rows >= 20 and after[0] == before[0] + result.stored_rows and after[1] == before[1] + 1


def test_stopped_mid_verdict_copy_leaves_no_partial_analysis_and_the_rerun_completes(
    dedicated,
    warehouse_url,
    analysed,  # noqa: F811
):
    engine = analysed
    with engine.begin() as conn:  # the fixture analysed it: start from a deploy with no analysis
        conn.execute(sa.text("DELETE FROM radar.verdict WHERE deploy_id = 'd-7'"))
        conn.execute(sa.text("DELETE FROM radar.analysis WHERE deploy_id = 'd-7'"))
    statement = _crash_inside(
        dedicated,
        warehouse_url,
        engine,
        "radar.verdict",
        2,
        lambda: analyse_deploy(AnalysisRun(engine, SETTINGS), "d-7"),
    )
    assert "COPY radar.verdict" in statement
    assert _count(engine, "SELECT count(*) FROM radar.verdict WHERE deploy_id = 'd-7'") == 0
    assert _count(engine, "SELECT count(*) FROM radar.analysis WHERE deploy_id = 'd-7'") == 0
    result = analyse_deploy(AnalysisRun(engine, SETTINGS), "d-7")
    assert _count(engine, "SELECT count(*) FROM radar.verdict WHERE deploy_id = 'd-7'") == len(result.verdicts) == 2


def test_stopped_mid_regression_alerts_posts_once_and_the_reconciler_completes(
    dedicated,
    warehouse_url,
    analysed,  # noqa: F811
    slack,
):
    """The warehouse stops while Slack holds its answer: the outbox row was committed `sending` before the post,
    the run cannot mark it sent; after the restart the reconciler's attempt finds the message and posts nothing."""
    bot = SlackResource(token="xoxb-test-token", channel="C0RADAR", base_url=slack.api_url)
    release = slack.hold_next(POST)
    outcome: list[bool] = []

    def run() -> None:
        with dg.instance_for_test() as instance:
            instance.add_dynamic_partitions("deploys", ["d-7"])
            result = dg.materialize(
                [regression_alerts],
                partition_key="d-7",
                resources={
                    "warehouse": WarehouseResource(url=warehouse_url),
                    "analysis": AnalysisResource(),
                    "slack": bot,
                    "channels": ChannelsResource(),
                },
                instance=instance,
                raise_on_error=False,
            )
            outcome.append(result.success)

    worker = threading.Thread(target=run)
    worker.start()
    _wait_for(lambda: slack.messages(), "the message to reach Slack")
    _stop_immediately(dedicated)
    release.set()
    worker.join(120)
    assert outcome == [False]  # the run failed: it could not record the outcome
    dedicated.start()
    analysed.dispose()
    with analysed.connect() as conn:
        assert conn.execute(sa.text("SELECT status FROM radar.alert")).scalar_one() == "sending"

    _backoff_passes(analysed, lease=True)
    resources = _resources(warehouse_url, bot)
    defs = _defs(resources)
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("deploys", ["d-7"])
        (request,) = _tick(instance, resources).run_requests
        assert request.job_name == "alert_retry_job"
        assert _execute(instance, defs, request).success
    assert len(slack.calls_to(POST)) == 1  # posted twice: never
    with analysed.connect() as conn:
        assert conn.execute(sa.text("SELECT status FROM radar.alert")).scalar_one() == "sent"
