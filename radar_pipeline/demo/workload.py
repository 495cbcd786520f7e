"""The demo's application: a small shop schema with data, and a workload of several query shapes at steady rates."""

from __future__ import annotations

import random
import threading
import time

import psycopg

SCHEMA = [
    "CREATE EXTENSION IF NOT EXISTS pg_stat_statements",
    "CREATE TABLE IF NOT EXISTS customers (id int PRIMARY KEY, name text NOT NULL, last_seen timestamptz)",
    "CREATE TABLE IF NOT EXISTS orders (id bigserial PRIMARY KEY, customer_id int NOT NULL, total numeric(10, 2), "
    "status text NOT NULL, created_at timestamptz NOT NULL)",
    "TRUNCATE customers, orders",
    "INSERT INTO customers SELECT g, 'customer ' || g FROM generate_series(1, 20000) g",
    "INSERT INTO orders (customer_id, total, status, created_at) "
    "SELECT 1 + (g::bigint * 7919) % 20000, (g % 500) / 3.0, (ARRAY['new', 'paid', 'shipped'])[1 + g % 3], "
    "now() - (g % 1000) * interval '1 hour' "
    "FROM generate_series(1, 100000) g",
    "CREATE INDEX IF NOT EXISTS orders_customer_idx ON orders (customer_id)",
    "ANALYZE",
]

# (name, statement, calls per second): the deploy drops the index the first one uses.
QUERIES = [
    ("orders of a customer", "SELECT id, total, status FROM orders WHERE customer_id = %s", 12),
    ("customer by id", "SELECT name, last_seen FROM customers WHERE id = %s", 40),
    ("touch a customer", "UPDATE customers SET last_seen = now() WHERE id = %s", 10),
    (
        "paid orders in an hour",
        "SELECT count(*), sum(total) FROM orders WHERE status = 'paid' AND created_at > "
        "now() - interval '1 hour' - %s * interval '1 second'",
        4,
    ),
]
REGRESSED = QUERIES[0][1]
DEPLOY_CHANGE = "DROP INDEX orders_customer_idx"


def create(dsn: str) -> None:
    """Create the shop's tables and data (100,000 orders)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in SCHEMA:
            conn.execute(statement)  # type: ignore[arg-type]


class Workload:
    """Runs every query shape at its rate on a thread of its own until stopped."""

    def __init__(self, dsn: str) -> None:
        self._dsn = dsn
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(sql, rate), daemon=True) for _, sql, rate in QUERIES]
        self.errors: list[str] = []

    def __enter__(self) -> Workload:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=10)

    def _run(self, sql: str, rate: float) -> None:
        rng = random.Random(sql)
        with psycopg.connect(self._dsn, autocommit=True, application_name="shop") as conn:
            next_call = time.monotonic()
            while not self._stop.is_set():
                try:
                    conn.execute(sql, (rng.randint(1, 20000),))  # type: ignore[arg-type]
                except psycopg.Error as exc:
                    self.errors.append(str(exc).splitlines()[0])
                next_call += 1.0 / rate
                self._stop.wait(max(0.0, next_call - time.monotonic()))
