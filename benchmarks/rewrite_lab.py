"""An ORM rewrite on real PostgreSQL 18 through radar's own collector (issue 39, target "the ORM rewrite is
`replaced`"): at a deploy, the application's primary-key lookup of an order is replaced by a heavier form of it that
loads the customer too (a join, aliases), and a lookup by customer is replaced by the same join looking up by
customer.

Run with `.venv/bin/python benchmarks/rewrite_lab.py [--window 60] [--scrape 2]`. The server and the collector are
named_span_lab's (one embedded PostgreSQL 18, the watched database and the warehouse; `snapshot_target` every
--scrape s). Two application threads call, before the deploy, `SELECT id, total FROM orders WHERE id = $1` and
`SELECT id, total FROM orders WHERE customer_id = $1` beside a steady `SELECT name FROM customers WHERE id = $1`; as
the deploy is recorded they switch to `SELECT o.id, o.total, c.name FROM orders o JOIN customers c ON c.id =
o.customer_id WHERE o.id = $1` and its `WHERE o.customer_id = $1` twin. The deploy is analysed with W each side
(analyse_deploy): the four lookups' verdicts, then its statement changes (radar.statement_change): each old lookup
should be `replaced` naming its own heavier form, never the other's. W is 60 s: the scrape interval the deploy falls
in counts as after it, and at 2-s scrapes with W = 30 s its calls (one interval in 15) were more than the 5% tail
a stopped statement may have (STOP_TAIL_SHARE), so the old lookups were not even `stopped`.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from named_span_lab import collecting, shut, watched_server  # noqa: E402

from radar_pipeline.engine import EngineSettings  # noqa: E402
from radar_pipeline.steps.deploy_analysis import AnalysisRun, analyse_deploy  # noqa: E402
from radar_pipeline.warehouse import deploys  # noqa: E402

EAGER = "SELECT o.id, o.total, c.name FROM orders o JOIN customers c ON c.id = o.customer_id"
BEFORE = ("SELECT id, total FROM orders WHERE id = %s", "SELECT id, total FROM orders WHERE customer_id = %s")
AFTER = (f"{EAGER} WHERE o.id = %s", f"{EAGER} WHERE o.customer_id = %s")
STEADY = "SELECT name FROM customers WHERE id = %s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--window", type=float, default=60.0, help="W, seconds each side of the deploy")
    parser.add_argument("--scrape", type=float, default=2.0, help="seconds between scrapes")
    args = parser.parse_args()
    server, warehouse, target = watched_server(Path(tempfile.mkdtemp(prefix="radar-rewrite-")))
    stop, deployed = threading.Event(), threading.Event()
    threads: list[threading.Thread] = []
    try:
        with psycopg.connect(server.dsn("shop"), autocommit=True) as conn:
            conn.execute("CREATE TABLE customers (id int PRIMARY KEY, name text)")
            conn.execute("CREATE TABLE orders (id int PRIMARY KEY, customer_id int, total numeric)")
            conn.execute("INSERT INTO customers SELECT g, 'c' || g FROM generate_series(1, 5000) g")
            conn.execute("INSERT INTO orders SELECT g, 1 + g % 5000, g FROM generate_series(1, 50000) g")
            conn.execute("CREATE INDEX orders_customer_idx ON orders (customer_id)")
            conn.execute("ANALYZE customers, orders")

        def app(seed: int) -> None:
            rng = random.Random(seed)
            with psycopg.connect(server.dsn("shop"), autocommit=True) as conn:
                while not stop.is_set():
                    by_id, by_customer = AFTER if deployed.is_set() else BEFORE
                    conn.execute(by_id, (rng.randint(1, 50000),))
                    conn.execute(by_customer, (rng.randint(1, 5000),))
                    conn.execute(STEADY, (rng.randint(1, 5000),))
                    time.sleep(0.005)

        threads = [threading.Thread(target=app, args=(s,), daemon=True) for s in range(2)]
        for thread in threads:
            thread.start()
        threads.append(collecting(target, warehouse, stop, args.scrape))
        time.sleep(args.window + 2 * args.scrape)
        at = datetime.now(UTC)
        deploys.record(warehouse, deploys.DeployEvent("rewrite", "shop", at))
        deployed.set()
        time.sleep(args.window + 2 * args.scrape)
        stop.set()
        for thread in threads:
            thread.join(timeout=30)

        window = timedelta(seconds=args.window)
        settings = EngineSettings(window=window, tolerance_floor=timedelta(seconds=2 * args.scrape))
        result = analyse_deploy(AnalysisRun(warehouse, settings), "rewrite")
        with warehouse.connect() as conn:
            texts = {int(r[0]): r[1] for r in conn.execute(sa.text("SELECT queryid, query FROM radar.query"))}
        for row in result.verdicts.itertuples():
            if "orders" in texts.get(int(row.queryid), ""):
                print(
                    f"{row.verdict:14} calls {row.calls_before} → {row.calls_after}: {texts[int(row.queryid)][:90]!r}"
                )
        with warehouse.connect() as conn:
            changes = conn.execute(
                sa.text(
                    "SELECT c.kind, c.queryid, c.partner_queryid, c.per_call_factor, left(q.query, 110) "
                    "FROM radar.statement_change c LEFT JOIN radar.query q USING (target, dbid, userid, queryid, "
                    "toplevel) WHERE c.deploy_id = 'rewrite' ORDER BY c.kind, c.queryid"
                )
            ).all()
        for kind, _, partner, factor, text in changes:
            pairing = f" ↔ {str(texts.get(int(partner), partner))[:70]!r} ×{factor:.2f} per call" if partner else ""
            print(f"{kind:16} {text!r}{pairing}")

        def replaced_by(before: str, after: str) -> bool:
            old = before.split("%s")[0]
            new = after.split("%s")[0]
            return any(
                kind == "replaced" and (text or "").startswith(old) and texts.get(int(partner or 0), "").startswith(new)
                for kind, _, partner, _, text in changes
            )

        paired = [replaced_by(b, a) for b, a in zip(BEFORE, AFTER, strict=True)]
        crossed = [replaced_by(b, a) for b, a in zip(BEFORE, reversed(AFTER), strict=True)]
        print(
            f"W = {args.window:g} s, scrapes every {args.scrape:g} s: the lookup by id replaced by its heavier form: "
            f"{paired[0]}; by customer: {paired[1]}; paired with the other's rewrite: {any(crossed)}"
        )
    finally:
        shut(server, stop, threads)


if __name__ == "__main__":
    main()
