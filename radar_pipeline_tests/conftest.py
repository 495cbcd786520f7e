"""Real PostgreSQL for the tests: the embedded PostgreSQL 18 once per session, Debian's 15 where it is installed.

Every test gets one tier, by what it uses (`make test-unit` runs the first): `unit` (no server, no subprocess run of
Dagster), `pg` (a PostgreSQL server: any fixture below that starts one), `e2e` (the product as a user starts it: `make
demo`, `radar dev`, Dagster's CLI or daemon), `calibration` (rates of the engine measured on seeded simulations of
thousands of statements).
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import psycopg
import pytest

from radar_pipeline.config import Target
from radar_pipeline.demo.local_postgres import LocalPostgres, debian_bin_dir, embedded_bin_dir
from radar_pipeline.warehouse import migrations
from radar_pipeline.warehouse.database import make_engine

from . import fake_slack

TIERS = ("unit", "pg", "e2e", "calibration")
# The fixtures that start a PostgreSQL server; a test using any of them, directly or through another fixture, is `pg`.
PG_FIXTURES = {"pg18", "pg15", "server", "dedicated"}
# Test ids (or their beginnings) by tier, where the fixtures a test uses do not tell.
BY_ID = {
    "e2e": (
        "test_demo.py::",
        "test_cli.py::",
        "test_defs.py::test_dagster_cli_validates_the_code_location",
        "test_deploy_analysis.py::test_a_backfill_over_deploys_partitions_runs_each",
    ),
    # rates (level, power, clearing) measured over thousands of simulated statements of the lab's fleet
    "calibration": (
        "engine/test_calibration.py::",
        "engine/test_noise.py::test_with_history_the_test_holds_its_level_and_uses_a_near_normal_reference",
        "engine/test_noise.py::test_history_finds_steps_the_window_alone_misses",
        "engine/test_noise.py::test_a_history_quieter_than_the_window_is_scaled_to_its_calls",
        "engine/test_clearing.py::test_few_truly_regressed_statements_are_cleared",
    ),
}


def tier_of(item: pytest.Item) -> str:
    """The tier a test belongs to: its own marker if it carries one, else by its id, else by its fixtures."""
    own = [mark.name for mark in item.iter_markers() if mark.name in TIERS]
    if own:
        return own[0]
    test_id = item.nodeid.removeprefix("radar_pipeline_tests/")
    for tier, prefixes in BY_ID.items():
        if test_id.startswith(prefixes):
            return tier
    return "pg" if PG_FIXTURES & set(getattr(item, "fixturenames", ())) else "unit"


COLLECTED = pytest.StashKey[list[pytest.Item]]()
# pytest-xdist's workers start with COLUMNS=80 and LINES=24 in their environment, which the commands the tests start
# would take for an 80-column terminal: each worker gets the session's own values (or none) instead.
TERMINAL_VARIABLES = ("COLUMNS", "LINES")


def pytest_configure_node(node) -> None:  # type: ignore[no-untyped-def]
    """pytest-xdist, in the session: hand each worker the session's terminal variables."""
    node.workerinput["terminal_variables"] = {name: os.environ.get(name) for name in TERMINAL_VARIABLES}


# Temporary files in memory where the machine has room for them: Dagster's test instances (dg.instance_for_test)
# keep their run, event and schedule storage in SQLite under a new temporary directory each, and SQLite syncs each
# commit to disk. On this project's two-core machines an instance and one run of an asset cost 3.1 s on the disk and
# 1.4 s on tmpfs (2026-12-07, load 4). Only where /dev/shm is a tmpfs with RAM_TMP_FREE free: elsewhere as before.
RAM_TMP = "/dev/shm"
RAM_TMP_FREE = 2 << 30
OWN_TMP = pytest.StashKey[str]()


def _memory_tmp(config: pytest.Config) -> None:
    """Point tempfile (and the commands the tests start, through TMPDIR) at a directory of this process's own on
    tmpfs, unless TMPDIR is set already or there is no such room."""
    import tempfile

    if os.environ.get("TMPDIR") or not os.path.isdir(RAM_TMP) or not os.access(RAM_TMP, os.W_OK):
        return
    stats = os.statvfs(RAM_TMP)
    if stats.f_bavail * stats.f_frsize < RAM_TMP_FREE:
        return
    with open("/proc/mounts") as mounts:
        if not any(line.split()[1:3] == [RAM_TMP, "tmpfs"] for line in mounts):
            return
    # pytest's own temporary folders (tmp_path: the test servers' data, their logs kept from the last runs) stay
    # where they were
    os.environ.setdefault("PYTEST_DEBUG_TEMPROOT", tempfile.gettempdir())
    own = tempfile.mkdtemp(prefix="radar-tests-", dir=RAM_TMP)
    config.stash[OWN_TMP] = own
    os.environ["TMPDIR"] = own
    tempfile.tempdir = own


def pytest_configure(config: pytest.Config) -> None:
    """In a pytest-xdist worker: the session's terminal variables, not the worker's. In every process: temporary
    files in memory where there is room (_memory_tmp)."""
    for name, value in getattr(config, "workerinput", {}).get("terminal_variables", {}).items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    _memory_tmp(config)


def pytest_unconfigure(config: pytest.Config) -> None:
    """The process's own temporary directory goes with it."""
    own = config.stash.get(OWN_TMP, None)
    if own is not None:
        shutil.rmtree(own, ignore_errors=True)


# The longest modules (make test's --durations), first: pytest-xdist hands out a module per worker in collection order,
# so the long ones start at once on both workers instead of one of them ending the run alone.
LONGEST_FIRST = (
    "test_demo.py",
    "test_cli.py",
    "test_deploy_analysis.py",
    "test_deploy_impact_pg.py",
    "test_faults.py",
    "test_periodic.py",
    "test_silent_server.py",
    "test_plans.py",
    "test_noise.py",
    "test_code_hosts.py",
    "test_outbox.py",
    "test_channels.py",
)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test with its tier, before `-m` selects among them; keep the whole collection for test_tiers; put
    the longest modules first (the order within a module is kept)."""
    for item in items:
        if not any(mark.name in TIERS for mark in item.iter_markers()):
            item.add_marker(tier_of(item))
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))
    config.stash[COLLECTED] = list(items)


@pytest.fixture(autouse=True)
def _no_stale_dagster_state_storage() -> Iterator[None]:
    """Each test starts with no Dagster instance's definitions-state storage current. An instance sets it when entered
    and a test that leaves it set behind (a closed instance) makes the next in-process load of the code location in
    that worker fail ("Attempted to resolve undefined DagsterInstance weakref"): which test runs before which differs
    with the workers' shares. Dagster has no public handle on it; this is the tests' own hygiene, not the product's
    (a Dagster process keeps its instance for its whole life)."""
    from dagster._core.storage.defs_state.base import set_defs_state_storage

    with set_defs_state_storage(None):
        yield


@dataclass
class Server:
    """A running test server and its major version."""

    pg: LocalPostgres
    major: int

    def execute(self, sql: str, database: str = "postgres", params: object = None) -> list[tuple]:
        with psycopg.connect(self.pg.dsn(database), autocommit=True) as conn:
            cur = conn.execute(sql, params)  # type: ignore[arg-type]
            return cur.fetchall() if cur.description else []

    def new_database(self, prefix: str, template: str | None = None) -> str:
        name = f"{prefix}_{uuid.uuid4().hex[:10]}"
        # FILE_COPY: a copy of the files and a checkpoint, faster than WAL_LOG's page by page for a small template
        copy = f' TEMPLATE "{template}" STRATEGY FILE_COPY' if template else ""
        self.execute(f'CREATE DATABASE "{name}"{copy}')
        return name

    def drop_database(self, name: str) -> None:
        self.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _start(tmp_path_factory: pytest.TempPathFactory, bin_dir, major: int, **settings: str) -> Iterator[Server]:
    pg = LocalPostgres(tmp_path_factory.mktemp(f"pg{major}") / "data", bin_dir=bin_dir, settings=settings)
    pg.start()
    try:
        yield Server(pg, major)
    finally:
        # the server's log outlives it, beside its data directory (pytest keeps the last runs' folders): a server
        # that died under a test says why there
        log = pg.data_dir / "server.log"
        if log.exists():
            shutil.copy(log, pg.data_dir.parent / "server.log")
        pg.destroy()


@pytest.fixture(scope="session")
def pg18(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The embedded PostgreSQL 18 with pg_stat_statements preloaded; warehouse and watched server in one."""
    yield from _start(tmp_path_factory, embedded_bin_dir(), 18)


@pytest.fixture(scope="session")
def pg15(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """Debian's PostgreSQL 15, for the paths older servers take (no stats_since, no GENERIC_PLAN)."""
    bin_dir = debian_bin_dir(15)
    if bin_dir is None:
        pytest.skip(
            "Debian's PostgreSQL 15 is not installed (/usr/lib/postgresql/15/bin): apt-get install postgresql-15"
        )
    yield from _start(tmp_path_factory, bin_dir, 15)


@pytest.fixture(params=["pg18", "pg15"])
def server(request: pytest.FixtureRequest) -> Server:
    """Each watched-server test runs on PostgreSQL 18 and, where installed, 15."""
    return request.getfixturevalue(request.param)


@pytest.fixture(scope="session")
def warehouse_template(pg18: Server) -> str:
    """A warehouse database migrated once per session, the template each test's warehouse is copied from (a copy
    costs a tenth of applying every migration again)."""
    name = pg18.new_database("warehouse_template")
    url = pg18.pg.url(name, driver="postgresql+psycopg")
    migrations.upgrade(url)
    make_engine(url).dispose()
    # A template must have no session open while it is copied: yoyo's backend may keep its connection.
    pg18.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", params=(name,))
    return name


def warehouse_copy(pg18: Server, template: str) -> Iterator[str]:
    """A warehouse database copied from `template` on the embedded server, its URL; dropped after."""
    name = pg18.new_database("warehouse", template=template)
    url = pg18.pg.url(name, driver="postgresql+psycopg")
    yield url
    make_engine(url).dispose()
    pg18.drop_database(name)


@pytest.fixture
def warehouse_url(pg18: Server, warehouse_template: str) -> Iterator[str]:
    """A fresh, migrated warehouse database on the embedded server."""
    yield from warehouse_copy(pg18, warehouse_template)


@pytest.fixture
def warehouse(warehouse_url: str):
    engine = make_engine(warehouse_url)
    yield engine
    engine.dispose()


@pytest.fixture
def known(warehouse):
    """A warehouse that knows target 'main' (it has a scrape of it): deploys to 'main' are accepted."""
    import sqlalchemy as sa

    with warehouse.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO radar.pgss_info_snapshot "
                "VALUES ('main', now() - interval '1 hour', 0, NULL, 180000, '1.12', 0, 0)"
            )
        )
    return warehouse


@pytest.fixture
def app_db(server: Server) -> Iterator[tuple[Server, Target]]:
    """An application database with pg_stat_statements on a watched server, and the target that points at it."""
    name = server.new_database("app")
    server.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements", name)
    server.execute("CREATE TABLE items (id int PRIMARY KEY, grp int, payload text)", name)
    server.execute("INSERT INTO items SELECT g, g % 10, md5(g::text) FROM generate_series(1, 2000) g", name)
    target = Target(name=f"app{server.major}", dsn=server.pg.url(name))
    yield server, target
    server.drop_database(name)


@pytest.fixture
def slack() -> Iterator[fake_slack.FakeSlack]:
    """A local stand-in for Slack's API, for the real slack-sdk client."""
    state, http = fake_slack.start()
    yield state
    http.shutdown()
