"""The causes lab (issue 28): real changes deployed on real PostgreSQL under an application's workload, run through
radar's own collection and analysis, and whether each detection's cause names the change.

Run with `make bench-causes` (or `.venv/bin/python benchmarks/causes_lab.py [--quick] [--window 120] [--scrape 5]
[--scenarios a,b] [--pg15]`): 7 to 7.5 minutes on the 2-core machine. --quick: 3 scenarios, 3 servers instead of 7
on the same timeline (at W = 90 s, two of the five index statements, ×145 each, were inconclusive in one run, so W
stays 120 s). --pg15: the whole lab again with the watched servers on Debian's PostgreSQL 15, after the 18 run.

Each scenario is a watched server of its own (an embedded PostgreSQL 18, or Debian's 15 with --pg15) holding the same
small shop (customers, orders, accounts, events, products; ANALYZEd, autovacuum off so nothing changes unless the deploy
changes it), under the same workload: 84 statement shapes called by role `app` from five threads per server, at
steady rates (about 55 calls a second per server, most of them cheap single-row statements), each thread reconnecting
every ~10 s as a pool would. The servers run side by side, so the scenarios share the machine's cores and one clock:

  0 ............ W ............ 2W ............ 3W
  scrapes every --scrape s, plan captures every --plans s, on every server
                 null deploy    change deploy
                 (each server)  (each server: its change, made as it is recorded)

- index_dropped: DROP INDEX orders_customer_idx, used by five statements (four of them cheap and rare; with 84
  statements, all within plan capture's top 200, most have a plan from before); expected cause index_dropped, or
  plan_changed with the index named beside it.
- trigger_added: an audit trigger (plpgsql, a jsonb row into audit_log) AFTER UPDATE on accounts: trigger_added.
- work_mem_lowered: ALTER ROLE app SET work_mem = '64kB' (the app's new sessions take it): a NOT IN whose hashed
  subplan no longer fits, and an aggregate that spills: setting_changed.
- statistics_reset: events replaced by a freshly loaded copy (LIKE ... INCLUDING ALL, renamed in; no ANALYZE), so a
  latest-events-of-an-account query walks the created_at index: statistics_reset.
- column_type_changed: ALTER TABLE orders ALTER COLUMN customer_id TYPE numeric (a rewrite): the join to customers
  loses its index: column_type_changed.
- lock_by_migration: a backfill migration of orders.region in batches of 9,000 orders (15%), each batch's transaction
  held open ~0.3 s after its UPDATE (the script's own work), its row locks with it, through the window after the
  deploy (it starts again from the first order at the last): the app's UPDATEs and SELECT ... FOR UPDATE of orders
  wait; expected cause lock_wait (the waits sampled at each scrape) or collateral, naming the migration's UPDATE.
  Row locks, not a table lock: a wait for a table's lock (LOCK TABLE, ALTER TABLE) comes before the executor (parse
  analysis, or a cached plan's revalidation), so
  pg_stat_statements' total_exec_time does not count it (a first version of this lab held LOCK TABLE orders IN
  EXCLUSIVE MODE half the time: the app's writes to orders showed no slowdown at all).
- statistics_changed: its server also holds tickets, analysed, then 8,000 escalated tickets loaded in bulk (the
  newest) and not analysed (autovacuum is off, as if it had not caught up); the app also reads the 20 oldest escalated
  tickets once a second (through the partial index of escalated tickets, then a sort: the planner thinks there are
  none). The deploy runs ANALYZE tickets: the planner now walks the created_at index from the oldest, past the 60,000
  older tickets: statistics_changed (the plan changed with the table's statistics).
- null_at_change: the deploy changes nothing, at the moment the other servers change (it shares the machine with them).

The real pipeline does the work: steps.snapshots.snapshot_target (the collector's scrape, as the collector's own role,
into a warehouse on another embedded PostgreSQL 18), steps.plan_capture.capture_target, and
steps.deploy_analysis.analyse_deploy (AnalysisRun, EngineSettings with window W and tolerance max(20 s, 3 scrapes)),
each deploy recorded with warehouse.deploys.record.

Printed: per deploy, its detections (queryid, ×factor, cause, cause_detail and named_changes where radar.verdict has
them, the statement's text), and for each whether it names the change (`names`: its cause is the scenario's expected
word, or plan_changed with the expected change among its named changes; a collateral or lock_wait detection names
its culprit when its cause_detail names one of the deploy's own statements or a statement the change slowed); for null
deploys the named causes and named changes (target 0). Below each change deploy's detections, the statements it did
not detect whose means rose beyond ×1.2 and whose cause names the change (issue 39: a cause on every row that has
one, below the proof too), and any other ×2 or more; an index proposal checked with hypopg (where the watched
database has it, as the lab's servers on Debian's PostgreSQL 15 with postgresql-15-hypopg do) is printed with its
hypothetical plan's cost against the plan captured before the change. Then the summary line (detections whose cause
names the change / all detections of the change deploys; named causes in null deploys), and the collection cost per
target-scrape: the scrape call's time.process_time in this process, plus the watched server's backend CPU for the
scrape's sessions (/proc/<pid>/schedstat, read just before each session closes; needs the servers on this machine),
against the load benchmark's budget of 0.1 CPU-s.
"""

from __future__ import annotations

import argparse
import itertools
import json
import multiprocessing as mp
import random
import re
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psycopg  # noqa: E402
import sqlalchemy as sa  # noqa: E402

from radar_pipeline.collector import session  # noqa: E402
from radar_pipeline.config import Target  # noqa: E402
from radar_pipeline.demo.local_postgres import LocalPostgres, debian_bin_dir, embedded_bin_dir  # noqa: E402
from radar_pipeline.engine import EngineSettings  # noqa: E402
from radar_pipeline.engine.vocabulary import CAUSE_OF_CHANGE, Cause  # noqa: E402
from radar_pipeline.steps.deploy_analysis import AnalysisRun, analyse_deploy  # noqa: E402
from radar_pipeline.steps.plan_capture import capture_target  # noqa: E402
from radar_pipeline.steps.snapshots import snapshot_target  # noqa: E402
from radar_pipeline.warehouse import deploys, migrations  # noqa: E402
from radar_pipeline.warehouse.database import make_engine  # noqa: E402

NAMED_CAUSES = frozenset(CAUSE_OF_CHANGE.values())  # the causes a named change of the catalog or settings gives

APP, COLLECTOR = "app", "radar_collector"
DATABASE = "shop"
CUSTOMERS, ORDERS, EVENTS, ACCOUNTS, PRODUCTS = 20_000, 60_000, 60_000, 20_000, 500
BUDGET_CPU_S = 0.1  # the load benchmark's budget per target-scrape
SERVER_SETTINGS = {"autovacuum": "off", "shared_buffers": "'64MB'", "max_connections": "40"}
RECONNECT_S = 10.0  # the app's pool recycles its connections (a role's new setting reaches new sessions only)

SCHEMA = [
    "CREATE EXTENSION IF NOT EXISTS pg_stat_statements",
    "CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL, email text, region int NOT NULL, "
    "segment int NOT NULL, last_seen timestamptz)",
    f"INSERT INTO customers SELECT g, 'customer ' || g, 'c' || g || '@example.com', g % 12, g % 5, now() "
    f"FROM generate_series(1, {CUSTOMERS}) g",
    "CREATE TABLE orders (id bigserial PRIMARY KEY, customer_id int NOT NULL, status text NOT NULL, "
    "total float8 NOT NULL, created_at timestamptz NOT NULL, note text, region int) WITH (fillfactor = 70)",
    "INSERT INTO orders (customer_id, status, total, created_at, note) SELECT 1 + (g * 7919) % 20000, "
    "(ARRAY['new', 'paid', 'shipped', 'returned'])[1 + g % 4], (g % 997) / 3.0, now() - (g % 5000) * interval "
    f"'1 minute', md5(g::text) || md5((g + 1)::text) FROM generate_series(1, {ORDERS}) g",
    "CREATE INDEX orders_customer_idx ON orders (customer_id)",
    "CREATE INDEX orders_created_idx ON orders (created_at)",
    "CREATE TABLE accounts (id int PRIMARY KEY, customer_id int NOT NULL, balance numeric(12, 2) NOT NULL, "
    "updated_at timestamptz)",
    f"INSERT INTO accounts SELECT g, g, 100, now() FROM generate_series(1, {ACCOUNTS}) g",
    "CREATE TABLE audit_log (id bigserial PRIMARY KEY, tab text NOT NULL, op text NOT NULL, old_row jsonb, "
    "new_row jsonb, at timestamptz NOT NULL, by_role text NOT NULL)",
    "CREATE INDEX audit_log_at_idx ON audit_log (tab, at)",
    "CREATE TABLE events (id bigserial PRIMARY KEY, account_id int NOT NULL, kind int NOT NULL, "
    "created_at timestamptz NOT NULL, payload text)",
    "INSERT INTO events (account_id, kind, created_at, payload) SELECT 1 + g % 20000, g % 7, "
    f"now() - ({EVENTS} - g) * interval '100 ms', md5(g::text) FROM generate_series(1, {EVENTS}) g",
    "CREATE INDEX events_created_idx ON events (created_at)",
    "CREATE INDEX events_account_idx ON events (account_id)",
    "CREATE TABLE products (id int PRIMARY KEY, name text NOT NULL, price numeric(10, 2) NOT NULL, stock int)",
    f"INSERT INTO products SELECT g, 'product ' || g, (g % 200) + 0.99, g % 50 FROM generate_series(1, {PRODUCTS}) g",
    "ANALYZE",
    f"CREATE ROLE {APP} LOGIN",
    f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {APP}",
    f"GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO {APP}",
    f"CREATE ROLE {COLLECTOR} LOGIN IN ROLE pg_read_all_stats",  # the set-up of docs/databases.md
    f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {COLLECTOR}",
    f"ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO {APP}, {COLLECTOR}",
    "ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT USAGE ON SEQUENCES TO app",
]

Params = Callable[[random.Random], tuple[Any, ...]]


def _id(n: int) -> Params:
    return lambda r: (r.randint(1, n),)


def columns(names: tuple[str, ...], most: int) -> list[str]:
    """Column lists of one to `most` of the names: the many shapes of an ORM's single-row reads."""
    return [", ".join(c) for r in range(1, most + 1) for c in itertools.combinations(names, r)]


def shapes() -> dict[str, list[tuple[str, Params, float]]]:
    """The app's statements per thread: (statement, its parameters, calls a second)."""
    customer_columns = columns(("name", "email", "region", "segment", "last_seen"), 3)[:20]
    order_columns = columns(("status", "total", "created_at", "customer_id", "note", "region"), 2)
    product_columns = columns(("name", "price", "stock"), 3)
    account_columns = columns(("balance", "updated_at", "customer_id"), 3)
    event_columns = columns(("kind", "created_at", "payload", "account_id"), 2)
    return {
        "customers": [
            *((f"SELECT {c} FROM customers WHERE id = %s", _id(CUSTOMERS), 0.5) for c in customer_columns),
            *((f"SELECT {c} FROM products WHERE id = %s", _id(PRODUCTS), 0.6) for c in product_columns),
            ("UPDATE customers SET last_seen = now() WHERE id = %s", _id(CUSTOMERS), 2.0),
            ("SELECT count(*) FROM customers WHERE region = %s AND segment = %s", lambda r: (r.randint(0, 11), 1), 0.3),
            (
                "SELECT id, name FROM products WHERE price < %s ORDER BY price LIMIT 10",
                lambda r: (r.randint(5, 150),),
                0.5,
            ),
        ],
        "orders": [
            *((f"SELECT {c} FROM orders WHERE id = %s", _id(ORDERS), 0.3) for c in order_columns),
            # these five use orders_customer_idx (index_dropped); the last four are cheap and rare
            ("SELECT id, total, status FROM orders WHERE customer_id = %s", _id(CUSTOMERS), 1.5),
            ("SELECT count(*) FROM orders WHERE customer_id = %s", _id(CUSTOMERS), 0.4),
            (
                "SELECT coalesce(sum(total), 0) FROM orders WHERE customer_id = %s AND status = %s",
                lambda r: (r.randint(1, CUSTOMERS), "paid"),
                0.3,
            ),
            ("SELECT max(created_at) FROM orders WHERE customer_id = %s", _id(CUSTOMERS), 0.3),
            (
                "SELECT c.name, o.id, o.total FROM customers c JOIN orders o ON o.customer_id = c.id WHERE c.id = %s",
                _id(CUSTOMERS),
                0.3,
            ),
            # the join that loses its index when orders.customer_id becomes numeric (column_type_changed)
            (
                "SELECT o.id, o.total, c.name FROM orders o JOIN customers c ON c.id = o.customer_id WHERE o.id = %s",
                _id(ORDERS),
                2.0,
            ),
            (
                "SELECT id, total FROM orders WHERE created_at > now() - %s * interval '1 second' "
                "ORDER BY created_at DESC LIMIT 20",
                lambda r: (r.randint(30, 300),),
                1.0,
            ),
            # hashed subplan and hash aggregate within the default work_mem (work_mem_lowered)
            (
                "SELECT count(*) FROM customers c WHERE c.id BETWEEN %s AND %s + 300 AND c.id NOT IN "
                "(SELECT o.customer_id FROM orders o WHERE o.created_at > now() - %s * interval '1 minute')",
                lambda r: (lambda lo: (lo, lo, 400))(r.randint(1, CUSTOMERS - 300)),
                0.7,
            ),
            (
                "SELECT customer_id, count(*), sum(total) FROM orders WHERE created_at > now() - %s * interval "
                "'1 minute' GROUP BY customer_id ORDER BY 3 DESC LIMIT 20",
                lambda r: (300,),
                0.3,
            ),
        ],
        "writers": [  # the writes to orders (lock_by_migration)
            (
                "INSERT INTO orders (customer_id, status, total, created_at, note) VALUES (%s, 'new', %s, now(), %s)",
                lambda r: (r.randint(1, CUSTOMERS), r.randint(1, 300), f"note {r.random()}"),
                2.0,
            ),
            ("UPDATE orders SET status = %s WHERE id = %s", lambda r: ("paid", r.randint(1, ORDERS)), 4.0),
            ("SELECT id, status FROM orders WHERE id = %s FOR UPDATE", _id(ORDERS), 1.5),
        ],
        "accounts": [
            # the audit trigger's statement (trigger_added)
            (
                "UPDATE accounts SET balance = balance + %s, updated_at = now() WHERE id = %s",
                lambda r: (r.randint(-5, 5), r.randint(1, ACCOUNTS)),
                5.0,
            ),
            *((f"SELECT {c} FROM accounts WHERE id = %s", _id(ACCOUNTS), 0.6) for c in account_columns),
        ],
        "events": [
            (
                "INSERT INTO events (account_id, kind, created_at, payload) VALUES (%s, %s, now(), %s)",
                lambda r: (r.randint(1, ACCOUNTS), r.randint(0, 6), "payload"),
                4.0,
            ),
            # latest events of an account: the plan that needs the statistics of events (statistics_reset)
            (
                "SELECT id, kind, created_at FROM events WHERE account_id = %s ORDER BY created_at DESC LIMIT 10",
                _id(ACCOUNTS),
                0.5,
            ),
            (
                "SELECT count(*) FROM events WHERE account_id = %s AND kind = %s",
                lambda r: (r.randint(1, ACCOUNTS), r.randint(0, 6)),
                1.0,
            ),
            *((f"SELECT {c} FROM events WHERE id = %s", _id(EVENTS), 0.3) for c in event_columns),
        ],
    }


AUDIT_TRIGGER = [
    "CREATE FUNCTION audit_row() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
    "INSERT INTO audit_log (tab, op, old_row, new_row, at, by_role) "
    "VALUES (TG_TABLE_NAME, TG_OP, to_jsonb(OLD), to_jsonb(NEW), now(), current_user); RETURN NEW; END $$",
    "CREATE TRIGGER audit_update AFTER UPDATE ON accounts FOR EACH ROW EXECUTE FUNCTION audit_row()",
]
# A table swapped for a freshly loaded copy, as a repacking or reloading migration does, without ANALYZE after it.
RELOAD_EVENTS = [
    "CREATE TABLE events_new (LIKE events INCLUDING ALL)",
    "INSERT INTO events_new SELECT * FROM events",
    "BEGIN",
    "ALTER SEQUENCE events_id_seq OWNED BY events_new.id",
    "DROP TABLE events",
    "ALTER TABLE events_new RENAME TO events",
    "ALTER INDEX events_new_pkey RENAME TO events_pkey",
    "ALTER INDEX events_new_created_at_idx RENAME TO events_created_idx",
    "ALTER INDEX events_new_account_id_idx RENAME TO events_account_idx",
    "COMMIT",
]
BACKFILL_BATCH = 9000  # orders per batch of the lock scenario's migration (15% of them)
BACKFILL_HOLD_S = 0.3  # the migration script's own work after a batch's UPDATE, before it commits (row locks held)
BACKFILL_PAUSE_S = 0.1  # between batches
# A support desk's tickets, analysed, then a bulk import of escalated tickets (the newest, 12% of the table) that
# autovacuum has not analysed: the planner still thinks none is escalated and reads the partial index of escalated
# tickets, then sorts. ANALYZE at the deploy tells it 12% are: it walks the created_at index from the oldest, expecting
# one in eight, and meets the 60,000 older tickets first (×5 on this machine, the plan flipped by the statistics).
TICKETS = [
    "CREATE TABLE tickets (id bigserial PRIMARY KEY, customer_id int NOT NULL, escalated boolean NOT NULL DEFAULT "
    "false, created_at timestamptz NOT NULL, body text)",
    "INSERT INTO tickets (customer_id, created_at, body) SELECT 1 + g % 20000, now() - (60000 - g) * interval "
    "'1 minute', md5(g::text) FROM generate_series(1, 60000) g",
    "CREATE INDEX tickets_created_idx ON tickets (created_at)",
    "CREATE INDEX tickets_escalated_idx ON tickets (id) WHERE escalated",
    "ANALYZE tickets",
    "INSERT INTO tickets (customer_id, escalated, created_at, body) SELECT 1 + g % 20000, true, now() + g * interval "
    "'1 second', md5(g::text) FROM generate_series(1, 8000) g",
]
OLDEST_ESCALATED = (
    "SELECT id, created_at FROM tickets WHERE escalated ORDER BY created_at LIMIT 20",
    lambda r: (),
    1.0,
)


@dataclass(frozen=True)
class Scenario:
    """One watched server's deploy: what it changes (statements, or the backfill), the cause words that name the
    change, and the named change expected beside plan_changed (its kind and the object's name)."""

    name: str
    change: tuple[str, ...]
    expected: tuple[str, ...] = ()
    kind: str | None = None
    subject: str | None = None
    backfill: bool = False
    prepare: tuple[str, ...] = ()  # run on its server after SCHEMA, before the app starts
    own_shapes: tuple[tuple[str, Params, float], ...] = ()  # the app's statements on its server only, a thread

    @property
    def null(self) -> bool:
        """The deploy changes nothing."""
        return not self.change and not self.backfill

    def describe(self) -> str:
        """The change in a few words."""
        if self.backfill:
            return (
                f"backfill of orders.region, {BACKFILL_BATCH:,} orders a batch, each batch's row locks held "
                f"~{BACKFILL_HOLD_S:g} s"
            )
        return "; ".join(s for s in self.change if s not in ("BEGIN", "COMMIT"))[:110] or "nothing"


SCENARIOS = [
    Scenario(
        "index_dropped", ("DROP INDEX orders_customer_idx",), ("index_dropped",), "index_dropped", "orders_customer_idx"
    ),
    Scenario("trigger_added", tuple(AUDIT_TRIGGER), ("trigger_added",), "trigger_added", "audit_update"),
    Scenario(
        "work_mem_lowered",
        (f"ALTER ROLE {APP} SET work_mem = '64kB'",),
        ("setting_changed",),
        "setting_changed",
        "work_mem",
    ),
    Scenario("statistics_reset", tuple(RELOAD_EVENTS), ("statistics_reset",), "statistics_reset", "events"),
    Scenario(
        "column_type_changed",
        ("ALTER TABLE orders ALTER COLUMN customer_id TYPE numeric",),
        ("column_type_changed",),
        "column_type_changed",
        "customer_id",
    ),
    Scenario("lock_by_migration", (), ("collateral",), backfill=True),
    Scenario(
        "statistics_changed",
        ("ANALYZE tickets",),
        ("statistics_changed",),
        "statistics_changed",
        "tickets",
        prepare=tuple(TICKETS),
        own_shapes=(OLDEST_ESCALATED,),
    ),
    Scenario("null_at_change", ()),
]
QUICK = ("index_dropped", "trigger_added", "null_at_change")


def workload(dsn: str, stop: Any, seed: int, own: tuple[tuple[str, Params, float], ...] = ()) -> None:
    """The app on one server: a thread per group of shapes() and one for the scenario's `own` shapes, until `stop`
    (a multiprocessing Event) is set."""
    groups = [*shapes().values(), *([list(own)] if own else [])]
    threads = [
        threading.Thread(target=_app_thread, args=(dsn, work, stop, seed * 100 + i), daemon=True)
        for i, work in enumerate(groups)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def _app_thread(dsn: str, work: list[tuple[str, Params, float]], stop: Any, seed: int) -> None:
    rng = random.Random(seed)
    weights = [rate for _, _, rate in work]
    spacing = 1.0 / sum(weights)
    conn: psycopg.Connection | None = None
    born = 0.0
    next_at = time.monotonic()
    while not stop.is_set():
        now = time.monotonic()
        if conn is None or now - born > RECONNECT_S * (0.8 + 0.4 * rng.random()):
            if conn is not None:
                conn.close()
            conn = psycopg.connect(dsn, autocommit=True, application_name="shop")
            born = now
        statement, params, _ = rng.choices(work, weights)[0]
        try:
            conn.execute(statement, params(rng))  # type: ignore[arg-type]
        except psycopg.Error:
            if conn.broken:
                conn = None
        next_at += rng.expovariate(1.0) * spacing
        if next_at < time.monotonic() - 1.0:  # after a wait (a lock), go on at the rate rather than catch up
            next_at = time.monotonic()
        stop.wait(max(0.0, next_at - time.monotonic()))
    if conn is not None:
        conn.close()


def make_change(dsn: str, scenario: Scenario, until: float) -> None:
    """The deploy's change, as the deploy's migration runs it (as the tables' owner)."""
    with psycopg.connect(dsn, autocommit=True, application_name="migration") as conn:
        for statement in scenario.change:
            conn.execute(statement)  # type: ignore[arg-type]
        if not scenario.backfill:
            return
        top = conn.execute("SELECT max(id) FROM orders").fetchone()[0]  # type: ignore[index]
        start = 1
        while time.monotonic() < until:
            with conn.transaction():
                conn.execute(
                    "UPDATE orders o SET region = c.region FROM customers c WHERE c.id = o.customer_id "
                    "AND o.id BETWEEN %s AND %s",
                    (start, start + BACKFILL_BATCH - 1),
                )
                time.sleep(BACKFILL_HOLD_S)  # the script's own work before it commits, the batch's rows locked
            start = start + BACKFILL_BATCH if start + BACKFILL_BATCH <= top else 1  # round again: through the window
            time.sleep(BACKFILL_PAUSE_S)


@dataclass
class Costs:
    """CPU seconds per call: this process's (time.process_time) and the watched server's backend's."""

    process: list[float] = field(default_factory=list)
    backend: list[float] = field(default_factory=list)

    def line(self, what: str) -> str:
        """Median and 95th percentile of the sum, and the parts' medians."""
        if not self.process:
            return f"{what}: none measured"
        total = sorted(p + b for p, b in zip(self.process, self.backend, strict=True))
        median = total[len(total) // 2]
        p95 = total[min(len(total) - 1, int(0.95 * len(total)))]
        parts = (
            f"process {sorted(self.process)[len(total) // 2]:.4f} + backend {sorted(self.backend)[len(total) // 2]:.4f}"
        )
        return f"{what}: median {median:.4f} CPU-s ({parts}), p95 {p95:.4f}, over {len(total)}"


_SESSIONS: list[float] = []  # backend CPU seconds of the watched-server sessions closed since the last reset
_real_connect = session.connect


def _measured_connect(target: Target, call_timeout: float | None = None) -> session.BoundedConnection:
    """session.connect, noting the backend's CPU (from /proc) just before the session closes."""
    conn = _real_connect(target, call_timeout)
    pid = conn.info.backend_pid
    close = conn.close

    def closing() -> None:
        _SESSIONS.append(_backend_cpu(pid))
        close()

    conn.close = closing  # type: ignore[method-assign]
    return conn


def _backend_cpu(pid: int) -> float:
    try:
        return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        return 0.0


@contextmanager
def measured(costs: Costs) -> Iterator[None]:
    """Add the CPU of what runs inside (this process and the watched sessions it opens) to `costs`."""
    _SESSIONS.clear()
    started = time.process_time()
    yield
    costs.process.append(time.process_time() - started)
    costs.backend.append(sum(_SESSIONS))


@dataclass
class Server:
    """One scenario's watched server, its target (as the collector's role) and its app's workload process."""

    scenario: Scenario
    pg: LocalPostgres
    target: Target
    app: Any = None


def start_server(scenario: Scenario, root: Path, bin_dir: Path) -> Server:
    """A fresh cluster with the shop, the app's and the collector's roles, and pg_stat_statements reset."""
    pg = LocalPostgres(root / scenario.name, bin_dir=bin_dir, settings=SERVER_SETTINGS).start()
    with psycopg.connect(pg.dsn(), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {DATABASE}")  # type: ignore[arg-type]
    with psycopg.connect(pg.dsn(DATABASE), autocommit=True) as conn:
        for statement in SCHEMA + list(scenario.prepare):
            conn.execute(statement)  # type: ignore[arg-type]
        if conn.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'hypopg'").fetchone():
            conn.execute("CREATE EXTENSION IF NOT EXISTS hypopg")  # index proposals checked (docs/causes.md)
        conn.execute("SELECT pg_stat_statements_reset()")
    return Server(scenario, pg, Target(scenario.name, pg.url(DATABASE, user=COLLECTOR)))


def run_lab(scenarios: list[Scenario], bin_dir: Path, window_s: float, scrape_s: float, plans_s: float) -> None:
    """Start the servers and the warehouse, run the timeline, analyse every deploy and print the table."""
    fork = mp.get_context("fork")  # before any thread of ours starts
    with tempfile.TemporaryDirectory(prefix="radar-causes-") as tmp:
        root = Path(tmp)
        warehouse_pg = LocalPostgres(root / "warehouse").start()
        servers: list[Server] = []
        stop = fork.Event()
        changes: list[Any] = []
        try:
            url = warehouse_pg.url(driver="postgresql+psycopg")
            migrations.upgrade(url)
            warehouse = make_engine(url)
            for scenario in scenarios:
                servers.append(start_server(scenario, root, bin_dir))
            for i, server in enumerate(servers):
                server.app = fork.Process(
                    target=workload, args=(server.pg.dsn(DATABASE, user=APP), stop, i + 1, server.scenario.own_shapes)
                )
                server.app.start()
            major = psycopg.connect(servers[0].pg.dsn()).info.server_version // 10000
            print(
                f"PostgreSQL {major}: {len(servers)} watched servers ({', '.join(s.scenario.name for s in servers)}), "
                f"{sum(len(w) for w in shapes().values())} statement shapes each; W = {window_s:g} s, scrapes every "
                f"{scrape_s:g} s, plans every {plans_s:g} s",
                flush=True,
            )
            time.sleep(10)  # the app's connections warm up
            scrapes, plans = Costs(), Costs()
            ids = timeline(servers, warehouse, window_s, scrape_s, plans_s, scrapes, plans, changes, fork)
            stop.set()
            for server in servers:
                server.app.join(timeout=30)
            settings = EngineSettings(
                window=timedelta(seconds=window_s), tolerance_floor=timedelta(seconds=max(20.0, 3 * scrape_s))
            )
            run = AnalysisRun(warehouse, settings, live_targets={s.target.name: s.target for s in servers})
            analysed = {}
            for deploy_id in ids:
                started = time.perf_counter()
                analyse_deploy(run, deploy_id)
                analysed[deploy_id] = time.perf_counter() - started
            own = {s.scenario.name: own_statements(s) for s in servers}
            report(servers, warehouse, ids, own, analysed)
            print(scrapes.line(f"collection cost per target-scrape (budget {BUDGET_CPU_S:g} CPU-s)"))
            print(plans.line("plan capture per target-capture"))
            warehouse.dispose()
        finally:
            stop.set()
            for process in changes + [s.app for s in servers if s.app is not None]:
                process.join(timeout=10)
                if process.is_alive():
                    process.kill()
            for server in servers:
                server.pg.stop()
            warehouse_pg.stop()


def timeline(
    servers: list[Server],
    warehouse: sa.Engine,
    window_s: float,
    scrape_s: float,
    plans_s: float,
    scrapes: Costs,
    plans: Costs,
    changes: list[Any],
    fork: Any,
) -> list[str]:
    """Scrape every server each scrape_s and capture plans each plans_s; a null deploy on each at W, the change
    deploy at 2W (plus two scrapes); go on until W after it. Returns the deploy ids recorded."""
    t0 = time.monotonic()
    null_at, change_at = t0 + window_s, t0 + 2 * window_s + 2 * scrape_s
    end_at = change_at + window_s + 2 * scrape_s
    next_scrape, next_plans = t0, t0 + scrape_s / 2
    ids: list[str] = []
    late = 0
    while (now := time.monotonic()) < end_at:
        if now >= next_scrape:
            for server in servers:
                with measured(scrapes):
                    snapshot_target(server.target, warehouse, exclude_role=COLLECTOR)
            next_scrape += scrape_s
            if time.monotonic() > next_scrape:
                late += 1
        if now >= next_plans:
            for server in servers:
                with measured(plans):
                    capture_target(server.target, warehouse)
            next_plans += plans_s
        if now >= null_at and not ids:
            for server in servers:
                ids.append(record(warehouse, server, "null"))
        if now >= change_at and len(ids) == len(servers):
            for server in servers:
                ids.append(record(warehouse, server, "change"))
                if not server.scenario.null:
                    process = fork.Process(
                        target=make_change, args=(server.pg.dsn(DATABASE), server.scenario, end_at - scrape_s)
                    )
                    process.start()
                    changes.append(process)
            print(f"deploys recorded and changes made at {datetime.now(UTC):%H:%M:%S}", flush=True)
        time.sleep(max(0.0, min(next_scrape, next_plans, end_at) - time.monotonic()))
    for process in changes:
        process.join(timeout=30)
    if late:
        print(f"({late} scrape rounds ended after the next one was due: the machine was busy)")
    return ids


def record(warehouse: sa.Engine, server: Server, kind: str) -> str:
    """Record a deploy of the server's target now, as CI would."""
    deploy_id = f"{server.scenario.name}-{kind}"
    deploys.record(warehouse, deploys.DeployEvent(deploy_id, server.target.name, datetime.now(UTC), service="shop"))
    return deploy_id


def own_statements(server: Server) -> dict[int, str]:
    """The statements the deploy's migration ran (as the tables' owner, not the app), by queryid."""
    with psycopg.connect(server.pg.dsn(DATABASE), autocommit=True) as conn:
        rows = conn.execute(
            "SELECT queryid, query FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = "
            "current_database()) AND userid = (SELECT oid FROM pg_roles WHERE rolname = current_user) "
            "AND query !~* 'pg_stat_statements'"
        ).fetchall()
    return {int(q): text for q, text in rows}


MISSED_FACTOR = 2.0  # statements slowed at least this much but not detected are listed under their deploy
BEYOND = 1.2  # 1 + θ: a statement not detected whose means rose beyond it is listed when its cause names the change
HYPOPG = re.compile(r"checked with hypopg: estimated cost ([\d,.?]+) now, ([\d,.?]+) with it \(([^)]*)\)")
DETAIL_COLUMNS = ("cause_detail", "named_changes")  # read where radar.verdict has them


def verdicts(warehouse: sa.Engine, deploy_id: str) -> list[dict[str, Any]]:
    """The deploy's stored verdicts, every column radar.verdict has, with each statement's text."""
    with warehouse.connect() as conn:
        rows = conn.execute(
            sa.text(
                "SELECT v.*, q.query AS statement FROM radar.verdict v LEFT JOIN radar.query q ON q.target = v.target "
                "AND q.dbid = v.dbid AND q.userid = v.userid AND q.queryid = v.queryid AND q.toplevel = v.toplevel "
                "WHERE v.deploy_id = :d ORDER BY v.change_factor DESC NULLS LAST"
            ),
            {"d": deploy_id},
        ).mappings()
        return [dict(r) for r in rows]


def named_changes(row: dict[str, Any]) -> list[dict[str, Any]]:
    """The verdict's named changes (radar.verdict.named_changes, JSON), empty when it has none or no such column."""
    value = row.get("named_changes")
    if isinstance(value, str):
        value = json.loads(value)
    return [c for c in value or [] if isinstance(c, dict)]


def culprit(row: dict[str, Any]) -> int | None:
    """The queryid a collateral (or lock_wait) detection's cause_detail names: its culprit (the lock's holder)."""
    found = re.search(r"queryid (-?\d+)", row.get("cause_detail") or "")
    return int(found.group(1)) if found else None


def names_change(row: dict[str, Any], scenario: Scenario, culprits: set[int]) -> bool:
    """Whether the detection's cause names the scenario's change (see the module docstring)."""
    cause = row.get("cause")
    if cause in (Cause.COLLATERAL, Cause.LOCK_WAIT):
        return culprit(row) in culprits
    if cause in scenario.expected:
        return True
    if cause == Cause.PLAN_CHANGED and scenario.kind:
        return any(
            c.get("kind") == scenario.kind and scenario.subject in f"{c.get('name')} {c.get('relation')}"
            for c in named_changes(row)
        )
    return False


def hypopg_check(row: dict[str, Any]) -> str | None:
    """The index proposal's hypopg check in the row's cause_detail against the plan captured before the change: the
    hypothetical plan's cost over that plan's (issue 39's target: within 2×), or None when it was not checked."""
    found = HYPOPG.search(row.get("cause_detail") or "")
    if not found:
        return None
    diff = row.get("plan_diff")
    before = (json.loads(diff) if isinstance(diff, str) else diff or {}).get("cost_before")
    with_it = float(found.group(2).replace(",", "")) if found.group(2) != "?" else None
    ratio = f"{with_it / before:.2f}× the plan before the change ({before:,.1f})" if with_it and before else "?"
    return f"hypopg: {found.group(1)} now, {found.group(2)} with the index, {ratio}; {found.group(3)}"


def report(
    servers: list[Server],
    warehouse: sa.Engine,
    ids: list[str],
    own: dict[str, dict[int, str]],
    seconds: dict[str, float],
) -> None:
    """Print the lab's table and its summary line."""
    by_name = {s.scenario.name: s.scenario for s in servers}
    named = detected_total = 0
    collateral = collateral_named = 0
    null_named = null_detected = null_deploys = 0
    open_rows = open_named = 0
    checks: list[str] = []
    print()
    print("scenario / deploy: detections (queryid ×factor cause [names the change?] cause_detail; named changes; text)")
    for deploy_id in ids:
        name, kind = deploy_id.rsplit("-", 1)
        scenario = by_name[name]
        rows = verdicts(warehouse, deploy_id)
        found = [r for r in rows if r["verdict"] == "detected"]
        is_null = kind == "null" or scenario.null
        changed = sum(1 for r in rows if named_changes(r))
        causes = sum(1 for r in found if r.get("cause") in NAMED_CAUSES)
        head = f"{deploy_id} ({'nothing changed' if is_null else scenario.describe()}): {len(found)} detected"
        if is_null:
            null_deploys += 1
            null_detected += len(found)
            null_named += causes + changed
            head += f", named causes {causes}, verdicts with named changes {changed}"
        print(f"{head}  [{seconds[deploy_id]:.1f} s to analyse, {len(rows)} verdicts]")
        culprits = set(own.get(name, {})) if scenario.backfill and not is_null else set()
        if not is_null:  # statements slowed by the change itself are culprits a collateral detection may name
            culprits |= {
                int(r["queryid"])
                for r in found
                if names_change(r, scenario, set()) and r.get("cause") not in (Cause.COLLATERAL, Cause.LOCK_WAIT)
            }
        for r in found:
            ok = names_change(r, scenario, culprits) if not is_null else False
            if not is_null:
                detected_total += 1
                named += ok
                if r.get("cause") in (Cause.COLLATERAL, Cause.LOCK_WAIT):
                    collateral += 1
                    collateral_named += ok
            details = [r.get(c) for c in DETAIL_COLUMNS if c in r]
            changes = "; ".join(c.get("sentence") or c.get("name", "") for c in named_changes(r))
            text = " ".join((r.get("statement") or "").split())[:70]
            mark = "" if is_null else (" [names it]" if ok else " [does not]")
            detail = f" {details[0]}" if details and details[0] else ""
            print(
                f"  {int(r['queryid']):>20} ×{r['change_factor']:<8.1f} {r.get('cause')}{mark}{detail}"
                f"{'; named: ' + changes if changes else ''}; {text}"
            )
            if (check := hypopg_check(r)) is not None:
                checks.append(f"{deploy_id} {int(r['queryid'])}: {check}")
                print(f"  {'':>20} {check}")
        # Not detected: the change's statements below the proof (their row names the change: counted), and any
        # other statement ×2 or more, listed.
        beyond = [
            r for r in rows if r["verdict"] != "detected" and (r["change_factor"] or 0) >= BEYOND and r["n_after"]
        ]
        for r in beyond if not is_null else []:
            ok = names_change(r, scenario, culprits)
            if not ok and r["change_factor"] < MISSED_FACTOR:
                continue
            open_rows += 1
            open_named += ok
            text = " ".join((r.get("statement") or "").split())[:70]
            print(
                f"  (not detected: {int(r['queryid'])} ×{r['change_factor']:.1f} {r['verdict']} {r['reason']}, "
                f"{r.get('tier') or 'no tier'}: {r.get('cause')} [{'names it' if ok else 'does not'}] "
                f"{r.get('cause_detail') or ''}; {text})"
            )
    print()
    print(
        f"summary: detections whose cause names the change {named} / {detected_total}; collateral or lock_wait naming "
        f"its culprit "
        f"{collateral_named} / {collateral}; named causes in null deploys {null_named} ({null_deploys} null deploys, "
        f"{null_detected} detections in them)"
    )
    print(
        f"not detected, their means beyond ×{BEYOND:g} (those naming the change, and any ×{MISSED_FACTOR:g} or more): "
        f"{open_rows}, whose cause names the change {open_named}"
    )
    print(f"index proposals checked with hypopg: {len(checks)}" + "".join(f"\n  {c}" for c in checks))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=f"only {', '.join(QUICK)}")
    parser.add_argument("--window", type=float, help="W, seconds each side of a deploy (default 120)")
    parser.add_argument("--scrape", type=float, default=5.0, help="seconds between scrapes")
    parser.add_argument("--plans", type=float, default=30.0, help="seconds between plan captures")
    parser.add_argument("--scenarios", help="comma-separated scenario names to run (default: all)")
    parser.add_argument("--pg15", action="store_true", help="then again with the watched servers on PostgreSQL 15")
    args = parser.parse_args()
    chosen = args.scenarios.split(",") if args.scenarios else QUICK if args.quick else [s.name for s in SCENARIOS]
    unknown = set(chosen) - {s.name for s in SCENARIOS}
    if unknown:
        parser.error(
            f"--scenarios: no scenario {', '.join(sorted(unknown))} (known: {', '.join(s.name for s in SCENARIOS)})"
        )
    scenarios = [s for s in SCENARIOS if s.name in chosen]
    window = args.window or 120.0
    runs = [embedded_bin_dir()]
    if args.pg15:
        pg15 = debian_bin_dir(15)
        if pg15 is None:
            parser.error("--pg15: Debian's PostgreSQL 15 is not installed (/usr/lib/postgresql/15/bin)")
        runs.append(pg15)
    session.connect = _measured_connect  # type: ignore[assignment]
    for bin_dir in runs:
        run_lab(scenarios, bin_dir, window, args.scrape, args.plans)


if __name__ == "__main__":
    main()
