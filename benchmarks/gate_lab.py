"""The gate lab (issue 38, "a gate that can say pass"): designed changes on a real PostgreSQL server under a real
workload, recorded once through radar's own collector, then every change and many null deploys put through the
current engine and the gate's rule.

Two commands:

  .venv/bin/python benchmarks/gate_lab.py --record OUT.pkl [--minutes 80] [--phase-minutes 10] [--scrape 5]
      [--busy] [--server 18|15] [--steady-phases 2] [--events drop_index,create_index,...]
  .venv/bin/python benchmarks/gate_lab.py --analyse IN.pkl [IN2.pkl ...] [--windows 180,300] [--before-commit SHA]

--record starts an embedded PostgreSQL 18 (or Debian's 15 with --server 15), pg_stat_statements preloaded, and
builds a shop in database `shop`: the 20 small tables and 4 log tables of real_null_check, plus orders (200,000 rows,
an index on customer_id), customers, and `big` (60,000 rows, 24,000 distinct values of c). Six connections run the
application (autovacuum on, as in production):
  - four of them (role app) a mix of 330-odd statement shapes with Zipf-like frequencies (a few hot, many sparse),
    throttled to --rate calls a second in all (default 340);
  - one (role app) the index lookup `SELECT count(*), sum(amount) FROM orders WHERE customer_id = $1` (~20 a second)
    and the function call `SELECT work($1)` (~5 a second; work(n) is a plpgsql loop of n · K iterations);
  - one (role reporter, work_mem 64MB by ALTER ROLE) the report `SELECT count(*), max(n) FROM (SELECT c, count(*) AS n
    FROM big GROUP BY c) s`, a hash aggregate of 24,000 groups, every --report-every seconds (default 2).
Beside it, another tenant: pgbench (TPC-B-like, scale 2) in database `tenant`, 2 clients at --pgbench-rate
transactions a second for the whole recording (falls back to a Python loop when pgbench cannot run). --busy adds two
CPU burners (`python -c 'while True: pass'`) for the whole run, so both cores are busy beside the server.

radar's collector (`collector.pgss.scrape`, as its own role with pg_read_all_stats, left out by exclude_role) scrapes
every --scrape seconds into memory, and the 1/5/15-minute load averages with it. The run is planned as phases of
--phase-minutes (P): --steady-phases of nothing, then one designed change at each later phase boundary while a whole
phase still fits after it, then steady to the end. The changes (--events, in order):
  drop_index      DROP INDEX CONCURRENTLY orders_customer_idx: the lookup becomes a sequential scan (regression)
  create_index    CREATE INDEX CONCURRENTLY it back: the rollback (improvement)
  work_mem_low    ALTER ROLE reporter SET work_mem = '64kB': the report's hash aggregate spills (regression)
  work_mem_high   back to 64MB: a setting raised (improvement)
  function_x1.5   work() replaced with K × 1.5 (regression ×1.5 of its loop), function_x2 with K × 2 (from ×1.5: ×1.33),
  function_back   K back to its first value (improvement)
The expected direction is worked out from the state each change leaves (an index dropped twice changes nothing: none).
The application restarts at each change as a deploy restarts it (every worker reconnects, so ALTER ROLE takes effect).
At the end everything started is stopped by PID (also on Ctrl-C, SIGTERM or an error) and the recording is pickled:
the counters frame as analyse() takes it (query_key, captured_at tz-aware, calls, total_exec_time, stddev_exec_time and
the scrape's other counters), the statements' keys and texts by query_key, the schedule of changes (time, name,
expected direction, target statement), the load averages, the arguments and the command line.

--analyse evaluates each recording at each window W (seconds) with the engine of this checkout (the working tree):
  - every change as a deploy at its time, W either side (skipped where that would reach past a neighbouring change by
    more than a scrape): the gate state (engine.gate.deploy_state of the first verdict), the target statement's
    verdict, reason, factor and interval, factor_bound, p_value, p_family and tier, the state after the later looks,
    and the detections among the other statements;
  - null deploys: instants every max(W/2, 60 s) inside each stretch between changes whose [t − W, t + W] (plus two
    scrapes) holds no change: the gate state, the cleared share, the false detections at the first verdict and over
    every later look that fits (steps.looks: look_span's spans with the stretch's changes as the previous and next
    deploys, decide_look at each look's budget); then the pass rate with its 95% Wilson interval and the mean false
    detections a deploy.
The first verdict is steps.looks' look 0 (decide_look: look_budget(B, 0) and its clear level, as deploy_analysis
decides a deploy's first look); an engine without steps.looks (an older commit) gets analyse() at the whole budget
and no later looks. Plain-text (markdown) tables, headed by the command lines, the server and the machine's load.
--before-commit SHA analyses the same recordings with the engine of that commit too (a git worktree in
/tmp/gate_lab_<sha>, run in a subprocess with this file and that tree first on the path, removed afterwards) and prints
both side by side.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import math
import os
import pickle
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve()
# The engine analysed: this checkout, or (GATE_LAB_ENGINE, set by --before-commit) another commit's worktree.
ENGINE_ROOT = Path(os.environ.get("GATE_LAB_ENGINE") or HERE.parents[1])
sys.path.insert(0, str(ENGINE_ROOT))

from radar_pipeline.engine import EngineSettings, analyse  # noqa: E402
from radar_pipeline.pgss_model import KEY  # noqa: E402

APP_DB, TENANT_DB = "shop", "tenant"
APP, REPORTER, COLLECTOR = "app", "reporter", "radar_gate_collector"
TABLES, ROWS = 20, 2000  # real_null_check's small tables
ORDERS, CUSTOMERS, BIG, BIG_DISTINCT = 200_000, 1_000, 60_000, 24_000
WORK_K = 1000  # work(n) loops n · K times; the function events scale K
WORK_MEM_HIGH, WORK_MEM_LOW = "64MB", "64kB"
LOOKUP = "SELECT count(*), sum(amount) FROM orders WHERE customer_id = %s"
FUNCTION = "SELECT work(%s)"
REPORT = "SELECT count(*), max(n) FROM (SELECT c, count(*) AS n FROM big GROUP BY c) s"
# How each heavy statement is found among pg_stat_statements' texts (normalised, $1 for %s).
TARGETS = {
    "lookup": "FROM orders WHERE customer_id = $1",
    "function": "SELECT work($1)",
    "report": "FROM big GROUP BY c",
}
DEFAULT_EVENTS = (
    "drop_index",
    "create_index",
    "work_mem_low",
    "work_mem_high",
    "function_x1.5",
    "function_x2",
    "function_back",
)
KNOWN_EVENTS = {
    "drop_index": "lookup",
    "create_index": "lookup",
    "work_mem_low": "report",
    "work_mem_high": "report",
    "function_x1.5": "function",
    "function_x2": "function",
    "function_back": "function",
}
PASS_SHARE = 0.9  # the fallback gate's share (engine.gate's default, and radar.deploy_state's)


# --------------------------------------------------------------------------------------------------------- recording


def shapes() -> list[tuple[str, str]]:
    """(statement, kind) for the mix's statement shapes: real_null_check's 280 over the small tables, plus point
    reads, updates, ranges and a join on the shop's tables. kind names the parameter sampler (WorkloadParams)."""
    import itertools

    out: list[tuple[str, str]] = []
    columns = ["a", "b", "c", "d", "e"]
    lists = [c for r in (1, 2, 3) for c in itertools.combinations(columns, r)][:10]
    for i in range(TABLES):
        table = f"t{i:02d}"
        out += [(f"SELECT {', '.join(cols)} FROM {table} WHERE id = %s", "id") for cols in lists]
        out.append((f"UPDATE {table} SET a = a + 1 WHERE id = %s", "id"))
        out.append((f"UPDATE {table} SET e = e + 1, d = d * 1.0001 WHERE id = %s", "id"))
        out.append((f"SELECT count(*) FROM {table} WHERE b < %s", "small"))
        out.append((f"INSERT INTO log{i % 4} (v, note) VALUES (%s, 'x')", "small"))
    shop = {
        "orders": (["amount", "note", "customer_id", "placed_at"], "order"),
        "customers": (["name", "city", "visits", "since"], "customer"),
        "big": (["b", "c"], "big"),
    }
    for table, (cols, kind) in shop.items():
        combos = [c for r in (1, 2, 3) for c in itertools.combinations(cols, r)][:10]
        out += [(f"SELECT id, {', '.join(c)} FROM {table} WHERE id = %s", kind) for c in combos]
        for width in (10, 100, 1000):
            out.append((f"SELECT count(*) FROM {table} WHERE id BETWEEN %s AND %s + {width}", kind + "2"))
    out.append(("UPDATE customers SET visits = visits + 1 WHERE id = %s", "customer"))
    out.append(("UPDATE orders SET amount = amount + 1 WHERE id = %s", "order"))
    out.append(("UPDATE big SET b = b WHERE id = %s", "big"))
    out.append(
        ("SELECT c.name, o.amount FROM orders o JOIN customers c ON c.id = o.customer_id WHERE o.id = %s", "order")
    )
    return out


SAMPLE_RANGE = {"id": ROWS, "small": 99, "order": ORDERS, "customer": CUSTOMERS, "big": BIG}


def sample_params(kind: str, rng: np.random.Generator) -> tuple[int, ...]:
    """The parameters of one call of a shape of this kind."""
    value = int(rng.integers(1, SAMPLE_RANGE[kind.rstrip("2")] + 1))
    return (value, value) if kind.endswith("2") else (value,)


def work_function(k: int) -> str:
    """work(n): a plpgsql loop of n · k additions, so its cost per call scales with k."""
    return (
        "CREATE OR REPLACE FUNCTION work(n int) RETURNS bigint LANGUAGE plpgsql AS $$ "
        f"DECLARE s bigint := 0; BEGIN FOR i IN 1 .. n * {k} LOOP s := s + i; END LOOP; RETURN s; END $$"
    )


def build_schema(pg: Any) -> None:
    """The shop, its roles (app, reporter, the collector) and pg_stat_statements; ANALYZEd, counters reset."""
    import psycopg

    with psycopg.connect(pg.dsn(), autocommit=True) as conn:
        for db in (APP_DB, TENANT_DB):
            conn.execute(f"CREATE DATABASE {db}")
        conn.execute(f"CREATE ROLE {APP} LOGIN")
        conn.execute(f"CREATE ROLE {REPORTER} LOGIN")
        conn.execute(f"ALTER ROLE {REPORTER} SET work_mem = '{WORK_MEM_HIGH}'")
        conn.execute(f"CREATE ROLE {COLLECTOR} LOGIN")
        conn.execute(f"GRANT pg_read_all_stats TO {COLLECTOR}")
    with psycopg.connect(pg.dsn(APP_DB), autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        for i in range(TABLES):
            conn.execute(f"CREATE TABLE t{i:02d} (id int PRIMARY KEY, a int, b int, c text, d float8, e int)")
            conn.execute(
                f"INSERT INTO t{i:02d} SELECT g, g % 97, g % 1000, md5(g::text), g / 7.0, 0 "
                f"FROM generate_series(1, {ROWS}) g"
            )
        for j in range(4):
            conn.execute(f"CREATE TABLE log{j} (id bigserial PRIMARY KEY, v int, note text)")
        conn.execute(
            "CREATE TABLE customers (id int PRIMARY KEY, name text, city text, visits int, since date); "
            f"INSERT INTO customers SELECT g, 'customer ' || g, 'city ' || (g % 50), 0, date '2020-01-01' + g % 1000 "
            f"FROM generate_series(1, {CUSTOMERS}) g"
        )
        conn.execute(
            "CREATE TABLE orders (id int PRIMARY KEY, customer_id int, amount numeric, note text, placed_at "
            "timestamptz); "
            f"INSERT INTO orders SELECT g, 1 + (g * 7919) % {CUSTOMERS}, g % 1000, md5(g::text), "
            f"timestamptz '2025-01-01' + g * interval '1 minute' FROM generate_series(1, {ORDERS}) g"
        )
        conn.execute("CREATE INDEX orders_customer_idx ON orders (customer_id)")
        conn.execute(
            "CREATE TABLE big (id int PRIMARY KEY, b int, c text); "
            f"INSERT INTO big SELECT g, g % 200, md5((g % {BIG_DISTINCT})::text) FROM generate_series(1, {BIG}) g"
        )
        conn.execute(work_function(WORK_K))
        conn.execute(f"GRANT SELECT, INSERT, UPDATE ON ALL TABLES IN SCHEMA public TO {APP}, {REPORTER}")
        conn.execute(f"GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO {APP}, {REPORTER}")
        conn.execute("VACUUM ANALYZE")
        conn.execute("SELECT pg_stat_statements_reset()")


@dataclass
class Shared:
    """What the main loop shares with the workload's threads: the stop flag, the application's generation (each
    change bumps it and every worker reconnects, as a deploy restarts the application) and the calls made."""

    stop: threading.Event = field(default_factory=threading.Event)
    generation: int = 0
    calls: dict[str, int] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    last_error: dict[str, str] = field(default_factory=dict)


def run_worker(name: str, dsn: str, shared: Shared, rate: float, pick: Any, seed: int) -> None:
    """One connection of the application: calls pick(rng) → (statement, params) at `rate` a second (in batches of ten
    when that is at least ten a second, else one by one; paced from its start), reconnecting whenever the generation
    changes. Errors are counted, not raised."""
    import psycopg

    rng = np.random.default_rng(seed)
    done = errors = 0
    conn = None
    generation = -1
    batch = 10 if rate >= 10 else 1
    started = time.monotonic()
    try:
        while not shared.stop.is_set():
            if conn is None or generation != shared.generation or conn.closed:
                if conn is not None:
                    conn.close()
                generation = shared.generation
                try:
                    conn = psycopg.connect(dsn, autocommit=True)
                except psycopg.Error as exc:
                    errors += 1
                    shared.last_error[name] = str(exc).splitlines()[0]
                    conn = None
                    shared.stop.wait(1.0)
                    continue
            for _ in range(batch):
                statement, params = pick(rng)
                try:
                    cursor = conn.execute(statement, params)
                    if cursor.description is not None:
                        cursor.fetchall()
                except psycopg.Error as exc:
                    errors += 1
                    shared.last_error[name] = str(exc).splitlines()[0]
                    if conn.closed or conn.broken:
                        break
                done += 1
            shared.calls[name] = done
            ahead = done / rate - (time.monotonic() - started)
            if ahead > 0:
                shared.stop.wait(ahead)
    finally:
        if conn is not None:
            conn.close()
        shared.calls[name] = done
        shared.errors[name] = errors


def mix_picker(seed: int) -> Any:
    """The mix's draw: Zipf-like weights over the shapes in one fixed order (the same hot shapes for every worker)."""
    work = shapes()
    weights = 1.0 / np.arange(1, len(work) + 1) ** 1.1
    weights /= weights.sum()
    order = np.random.default_rng(seed).permutation(len(work))
    ranked = [work[i] for i in order]

    def pick(rng: np.random.Generator) -> tuple[str, tuple[int, ...]]:
        statement, kind = ranked[int(rng.choice(len(ranked), p=weights))]
        return statement, sample_params(kind, rng)

    return pick


def heavy_picker() -> Any:
    """The lookup (80% of the calls) and the function call (20%), in one connection."""

    def pick(rng: np.random.Generator) -> tuple[str, tuple[int, ...]]:
        if rng.random() < 0.8:
            return LOOKUP, (int(rng.integers(1, CUSTOMERS + 1)),)
        return FUNCTION, (int(rng.integers(10, 31)),)

    return pick


def _die_with_parent() -> None:
    """In a child before exec: SIGTERM it when this process dies (Linux prctl PR_SET_PDEATHSIG), so no burner or
    pgbench outlives a recording killed without its cleanup."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)
    except OSError:
        pass


def start_pgbench(pg: Any, rate: float, log: Path) -> subprocess.Popen | None:
    """The other tenant: pgbench initialised at scale 2 in TENANT_DB, then 2 clients at `rate` transactions a second
    until stopped. None when pgbench is missing or fails to initialise (the caller falls back to a Python loop)."""
    binary = Path("/usr/bin/pgbench")
    if not binary.exists():
        return None
    common = ["-h", "127.0.0.1", "-p", str(pg.port), "-U", "postgres"]
    init = subprocess.run(
        [str(binary), "-i", "-q", "-s", "2", *common, TENANT_DB], capture_output=True, text=True, timeout=300
    )
    if init.returncode != 0:
        print(f"pgbench -i failed ({init.returncode}): {init.stderr.strip()[-300:]}", flush=True)
        return None
    out = log.open("w")
    proc = subprocess.Popen(
        [str(binary), "-n", "-c", "2", "-j", "2", "-R", f"{rate:g}", "-T", "86400", "-P", "60", *common, TENANT_DB],
        stdout=out,
        stderr=subprocess.STDOUT,
        preexec_fn=_die_with_parent,
    )
    time.sleep(1.0)
    if proc.poll() is not None:
        print(f"pgbench exited at once ({proc.returncode}): {log.read_text()[-300:]}", flush=True)
        return None
    return proc


def tenant_picker() -> Any:
    """The fallback tenant: heavier reads of its own table, as a Python loop."""

    def pick(rng: np.random.Generator) -> tuple[str, tuple[int, ...]]:
        start = int(rng.integers(1, 95000))
        return "SELECT count(*), avg(v) FROM tenant_t WHERE k BETWEEN %s AND %s + 5000", (start, start)

    return pick


def stop_process(proc: subprocess.Popen, name: str) -> None:
    """Stop one child we started, by its PID: SIGTERM, then SIGKILL after 10 s."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
    print(f"stopped {name} (pid {proc.pid}, exit {proc.returncode})", flush=True)


@dataclass
class Change:
    """One designed change of the schedule: when it is due (seconds after the workload started) and what it does."""

    name: str
    due: float


class Shop:
    """The state the changes move (the lookup's index, the reporter's work_mem, work()'s K), and the changes."""

    def __init__(self) -> None:
        self.index = True
        self.work_mem = WORK_MEM_HIGH
        self.k = WORK_K

    def apply(self, conn: Any, name: str) -> dict[str, Any]:
        """Make change `name` on the server (autocommit connection to APP_DB); return what it is expected to do."""
        target = KNOWN_EVENTS[name]
        if name == "drop_index":
            conn.execute("DROP INDEX CONCURRENTLY IF EXISTS orders_customer_idx")
            expect = "regression" if self.index else "none"
            detail, factor = "DROP INDEX orders_customer_idx", math.nan
            self.index = False
        elif name == "create_index":
            conn.execute("CREATE INDEX CONCURRENTLY IF NOT EXISTS orders_customer_idx ON orders (customer_id)")
            expect = "improvement" if not self.index else "none"
            detail, factor = "CREATE INDEX orders_customer_idx", math.nan
            self.index = True
        elif name.startswith("work_mem_"):
            value = WORK_MEM_LOW if name == "work_mem_low" else WORK_MEM_HIGH
            conn.execute(f"ALTER ROLE {REPORTER} SET work_mem = '{value}'")
            expect = "none" if value == self.work_mem else "regression" if value == WORK_MEM_LOW else "improvement"
            detail, factor = f"ALTER ROLE {REPORTER} SET work_mem = '{value}'", math.nan
            self.work_mem = value
        else:
            k = {"function_x1.5": WORK_K * 3 // 2, "function_x2": WORK_K * 2, "function_back": WORK_K}[name]
            conn.execute(work_function(k))
            factor = k / self.k
            expect = "none" if k == self.k else "regression" if k > self.k else "improvement"
            detail = f"work(): K {self.k} → {k} (loop ×{factor:.3g})"
            self.k = k
        return {"target": target, "expect": expect, "detail": detail, "design_factor": factor}


def plan(minutes: float, phase_minutes: float, steady_phases: int, events: list[str]) -> list[Change]:
    """The schedule: after `steady_phases` phases of nothing, one change at each phase boundary while a whole phase
    still fits after it."""
    total, phase = minutes * 60, phase_minutes * 60
    out = []
    for i, name in enumerate(events):
        due = (steady_phases + i) * phase
        if due + phase > total + 1e-9:
            break
        out.append(Change(name, due))
    return out


def counters_frame(frames: list[pd.DataFrame]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The scrapes as one counters frame for analyse() (query_key from KEY, captured_at UTC), and the keys."""
    counters = pd.concat(frames, ignore_index=True)
    counters["captured_at"] = pd.to_datetime(counters["captured_at"], utc=True)
    codes, uniques = pd.factorize(pd.MultiIndex.from_frame(counters[KEY]))
    counters["query_key"] = codes
    keys = pd.DataFrame(list(uniques), columns=KEY)
    keys.insert(0, "query_key", np.arange(len(keys)))
    return counters, keys


def record(args: argparse.Namespace) -> None:
    """--record: the whole recording (module docstring), pickled to args.record."""
    import psycopg

    from radar_pipeline.collector.pgss import read_extension, scrape
    from radar_pipeline.collector.session import connect
    from radar_pipeline.config import Target
    from radar_pipeline.demo.local_postgres import LocalPostgres, debian_bin_dir, embedded_bin_dir

    if args.server == 15:
        bin_dir = debian_bin_dir(15)
        if bin_dir is None:
            raise SystemExit("--server 15: Debian's PostgreSQL 15 is not installed (/usr/lib/postgresql/15/bin)")
    else:
        bin_dir = embedded_bin_dir()
    events = args.events.split(",") if args.events else list(DEFAULT_EVENTS)
    unknown = [e for e in events if e not in KNOWN_EVENTS]
    if unknown:
        raise SystemExit(f"--events: unknown {', '.join(unknown)} (known: {', '.join(KNOWN_EVENTS)})")
    schedule = plan(args.minutes, args.phase_minutes, args.steady_phases, events)
    left_out = events[len(schedule) :]
    total = args.minutes * 60
    print(
        f"plan: {args.minutes:g} min, phases of {args.phase_minutes:g} min, {args.steady_phases} steady, then "
        + ", ".join(f"{c.name} at {c.due / 60:g} min" for c in schedule)
        + (f"; left out for lack of time: {', '.join(left_out)}" if left_out else ""),
        flush=True,
    )

    # A SIGTERM (kill PID, nohup's end) runs the cleanup below as Ctrl-C does.
    def _terminate(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, _terminate)
    workdir = Path(tempfile.mkdtemp(prefix="gate-lab-"))
    pg = LocalPostgres(workdir / "data", bin_dir=bin_dir)
    shared = Shared()
    threads: list[threading.Thread] = []
    children: list[tuple[subprocess.Popen, str]] = []
    frames: list[pd.DataFrame] = []
    loads: list[tuple[pd.Timestamp, float, float, float]] = []
    done_events: list[dict[str, Any]] = []
    texts = pd.DataFrame()
    meta: dict[str, Any] = {"interrupted": False}
    try:
        pg.start()
        with psycopg.connect(pg.dsn()) as conn:
            meta["server_version"] = conn.execute("SHOW server_version").fetchone()[0]
        print(f"server: PostgreSQL {meta['server_version']} (pid {pg.pid}, port {pg.port}, {pg.data_dir})", flush=True)
        started = time.monotonic()
        build_schema(pg)
        print(f"schema built in {time.monotonic() - started:.0f} s", flush=True)

        tenant = start_pgbench(pg, args.pgbench_rate, workdir / "pgbench.log")
        if tenant is not None:
            children.append((tenant, "pgbench"))
            meta["tenant"] = f"pgbench -c 2 -R {args.pgbench_rate:g} (scale 2), pid {tenant.pid}"
        else:
            with psycopg.connect(pg.dsn(TENANT_DB), autocommit=True) as conn:
                conn.execute("CREATE TABLE tenant_t (k int, v float8)")
                conn.execute("INSERT INTO tenant_t SELECT g, random() FROM generate_series(1, 100000) g")
                conn.execute("CREATE INDEX ON tenant_t (k)")
                conn.execute("ANALYZE tenant_t")
            meta["tenant"] = "Python loop (pgbench unavailable)"
            threads.append(
                threading.Thread(
                    target=run_worker,
                    args=("tenant", pg.dsn(TENANT_DB), shared, 20.0, tenant_picker(), 99),
                    daemon=True,
                )
            )
        print(f"other tenant: {meta['tenant']}", flush=True)
        if args.busy:
            for i in range(2):
                burner = subprocess.Popen([sys.executable, "-c", "while True: pass"], preexec_fn=_die_with_parent)
                children.append((burner, f"burner {i + 1}"))
            print("busy: two CPU burners, pids " + ", ".join(str(p.pid) for p, n in children if "burner" in n))

        app_dsn = pg.dsn(APP_DB, user=APP)
        for i in range(4):
            threads.append(
                threading.Thread(
                    target=run_worker,
                    args=(f"mix {i + 1}", app_dsn, shared, args.rate / 4, mix_picker(0), 10 + i),
                    daemon=True,
                )
            )
        threads.append(
            threading.Thread(
                target=run_worker, args=("lookup+function", app_dsn, shared, 25.0, heavy_picker(), 20), daemon=True
            )
        )
        threads.append(
            threading.Thread(
                target=run_worker,
                args=(
                    "report",
                    pg.dsn(APP_DB, user=REPORTER),
                    shared,
                    1.0 / args.report_every,
                    lambda rng: (REPORT, None),
                    30,
                ),
                daemon=True,
            )
        )
        for thread in threads:
            thread.start()

        target = Target("gate_lab", pg.dsn(APP_DB, user=COLLECTOR))
        shop = Shop()
        pending = list(schedule)
        with connect(target) as conn, psycopg.connect(pg.dsn(APP_DB), autocommit=True) as admin:
            ext = read_extension(conn, target)
            t0 = time.monotonic()
            meta["started_at"] = pd.Timestamp.now(tz="UTC")
            next_scrape = t0
            next_note = t0 + 60
            while True:
                now = time.monotonic() - t0
                if pending and now >= pending[0].due:
                    change = pending.pop(0)
                    what = shop.apply(admin, change.name)
                    at = admin.execute("SELECT clock_timestamp()").fetchone()[0]
                    shared.generation += 1
                    done_events.append({"name": change.name, "due_s": change.due, "at": pd.Timestamp(at), **what})
                    print(
                        f"[{now / 60:6.2f} min] {change.name}: {what['detail']} (expect {what['expect']})", flush=True
                    )
                if now >= total:
                    break
                if time.monotonic() >= next_scrape:
                    got = scrape(conn, target, ext, exclude_role=COLLECTOR)
                    frames.append(got.statements.assign(captured_at=pd.Timestamp(got.info.captured_at)))
                    one, five, fifteen = os.getloadavg()
                    loads.append((pd.Timestamp.now(tz="UTC"), one, five, fifteen))
                    next_scrape += args.scrape
                if time.monotonic() >= next_note and loads:
                    calls = sum(shared.calls.values())
                    print(
                        f"[{now / 60:6.2f} min] {len(frames)} scrapes, {calls / now:.0f} application calls/s, "
                        f"load {loads[-1][1]:.2f} {loads[-1][2]:.2f} {loads[-1][3]:.2f}",
                        flush=True,
                    )
                    next_note += 60
                wake = min([next_scrape, t0 + total] + ([t0 + pending[0].due] if pending else []))
                shared.stop.wait(max(0.0, min(wake - time.monotonic(), 1.0)))
            meta["ended_at"] = pd.Timestamp.now(tz="UTC")
            rows = admin.execute(
                "SELECT s.dbid, s.userid, s.queryid, s.toplevel, s.query, d.datname, r.rolname "
                "FROM pg_stat_statements s LEFT JOIN pg_database d ON d.oid = s.dbid "
                "LEFT JOIN pg_roles r ON r.oid = s.userid"
            ).fetchall()
            texts = pd.DataFrame(rows, columns=[*KEY, "query", "datname", "rolname"])
    except KeyboardInterrupt as exc:
        meta["interrupted"] = True
        print(f"interrupted ({exc or 'Ctrl-C'}): stopping and saving what was recorded", flush=True)
    finally:
        shared.stop.set()
        for thread in threads:
            thread.join(timeout=30)
        for proc, name in children:
            stop_process(proc, name)
        if (workdir / "pgbench.log").exists():
            meta["pgbench_log"] = (workdir / "pgbench.log").read_text()[-4000:]
        pg.destroy()
        print(f"server stopped, {workdir} removed", flush=True)
        shutil.rmtree(workdir, ignore_errors=True)
    if not frames:
        raise SystemExit("nothing recorded")
    save(args, frames, loads, done_events, texts, shared, meta)


def save(
    args: argparse.Namespace,
    frames: list[pd.DataFrame],
    loads: list[tuple],
    events: list[dict[str, Any]],
    texts: pd.DataFrame,
    shared: Shared,
    meta: dict[str, Any],
) -> None:
    """Build the counters frame, find the heavy statements' keys, print their shares and the load, and pickle."""
    counters, keys = counters_frame(frames)
    if len(texts):
        keys = keys.merge(texts, on=KEY, how="left")
    else:
        keys = keys.assign(query="", datname="", rolname="")
    keys["query"] = keys["query"].fillna("")
    targets: dict[str, list[int]] = {}
    for label, needle in TARGETS.items():
        found = keys[keys["query"].str.contains(needle, regex=False) & (keys["datname"] == APP_DB)]
        targets[label] = found["query_key"].astype(int).tolist()
    for event in events:
        event["target_keys"] = targets.get(event["target"], [])
        event["statement"] = {"lookup": LOOKUP, "function": FUNCTION, "report": REPORT}[event["target"]]
    load = pd.DataFrame(loads, columns=["at", "load1", "load5", "load15"])
    seconds = (counters["captured_at"].max() - counters["captured_at"].min()).total_seconds()
    meta.update(
        calls=dict(shared.calls),
        errors=dict(shared.errors),
        last_error=dict(shared.last_error),
        targets=targets,
        seconds=seconds,
        shares=heavy_shares(counters, keys, targets, events),
    )
    recording = {
        "counters": counters,
        "keys": keys,
        "events": events,
        "load": load,
        "args": vars(args),
        "command": shlex.join([sys.executable, *sys.argv]),
        "meta": meta,
    }
    Path(args.record).parent.mkdir(parents=True, exist_ok=True)
    with open(args.record, "wb") as out:
        pickle.dump(recording, out)
    calls = sum(shared.calls.values())
    print(
        f"recorded {seconds / 60:.1f} min: {len(frames)} scrapes, {counters['query_key'].nunique()} statements, "
        f"{calls:,} application calls ({calls / max(seconds, 1):.0f}/s; per connection {shared.calls}); errors "
        f"{shared.errors} {shared.last_error or ''}"
    )
    print(
        f"load average (1 min) over the run: mean {load['load1'].mean():.2f}, min {load['load1'].min():.2f}, "
        f"max {load['load1'].max():.2f}"
    )
    print("heavy statements' share of the execution time (app database / whole server), by stretch:")
    for stretch, shares in meta["shares"].items():
        print(f"  {stretch}: " + ", ".join(f"{k} {a:.1%} / {s:.1%}" for k, (a, s) in shares.items()))
    low = [k for k, (a, _) in next(iter(meta["shares"].values()), {}).items() if a < 0.05]
    if low:
        print(f"WARNING: below 5% of the app database's execution time in the first stretch: {', '.join(low)}")
    print(f"saved {args.record}")


def heavy_shares(
    counters: pd.DataFrame, keys: pd.DataFrame, targets: dict[str, list[int]], events: list[dict[str, Any]]
) -> dict[str, dict[str, tuple[float, float]]]:
    """Each heavy statement's share of the execution time, of the app database and of the whole server, in each
    stretch between changes (from the cumulative counters' differences; resets ignored)."""
    bounds = [counters["captured_at"].min(), *[e["at"] for e in events], counters["captured_at"].max()]
    names = ["start", *[e["name"] for e in events]]
    app_keys = set(keys.loc[keys["datname"] == APP_DB, "query_key"].astype(int))
    out = {}
    for name, lo, hi in zip(names, bounds[:-1], bounds[1:], strict=True):
        part = counters[(counters["captured_at"] >= lo) & (counters["captured_at"] <= hi)]
        spent = part.groupby("query_key")["total_exec_time"].agg(lambda s: s.max() - s.min())
        whole = spent.sum()
        app = spent[spent.index.isin(app_keys)].sum()
        out[f"{name} ({(lo - bounds[0]).total_seconds() / 60:.1f}–{(hi - bounds[0]).total_seconds() / 60:.1f} min)"] = {
            label: (
                float(spent.reindex(ks).fillna(0).sum() / app) if app else math.nan,
                float(spent.reindex(ks).fillna(0).sum() / whole) if whole else math.nan,
            )
            for label, ks in targets.items()
        }
    return out


# --------------------------------------------------------------------------------------------------------- analysis


@dataclass
class FallbackState:
    """The gate's state when engine.gate is missing (an older engine): the rule as issue 38 first stated it."""

    state: str
    cleared_share: float
    largest_open_share: float


def _fallback_deploy_state(verdicts: pd.DataFrame) -> FallbackState:
    """'fail' if anything is detected; 'pass' if the cleared statements (no_regression) hold at least 90% of the
    execution time after the deploy (calls_after · mean_after_ms); 'inconclusive' otherwise."""
    time_after = verdicts["calls_after"].to_numpy(np.float64) * verdicts["mean_after_ms"].to_numpy(np.float64)
    time_after = np.where(np.isfinite(time_after) & (time_after > 0), time_after, 0.0)
    whole = time_after.sum()
    verdict = verdicts["verdict"].to_numpy()
    share = time_after / whole if whole > 0 else np.zeros_like(time_after)
    cleared = float(share[verdict == "no_regression"].sum())
    open_ = share[verdict == "inconclusive"]
    largest = float(open_.max()) if len(open_) else 0.0
    if (verdict == "detected").any():
        state = "fail"
    elif whole > 0 and cleared >= PASS_SHARE:
        state = "pass"
    else:
        state = "inconclusive"
    return FallbackState(state, cleared, largest)


try:
    from radar_pipeline.engine.gate import deploy_state

    GATE = "engine.gate.deploy_state"
except ImportError:
    deploy_state = _fallback_deploy_state  # type: ignore[assignment]
    GATE = "the lab's fallback rule (no engine.gate)"

try:
    from radar_pipeline.steps.looks import decide_look, look_span

    LOOKS = True
except ImportError:
    LOOKS = False

DECIDED = ("detected", "no_regression")
OPEN = ("inconclusive", "insufficient_data")


def engine_label() -> str:
    """The engine analysed: its version, and the commit of its tree (with `+changes` when the tree differs)."""
    try:
        from radar_pipeline.engine.settings import ENGINE_VERSION
    except ImportError:
        ENGINE_VERSION = "?"
    import radar_pipeline

    root = Path(radar_pipeline.__file__).resolve().parents[1]  # where the engine was imported from
    git = ["git", "-C", str(root)]
    head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run([*git, "status", "--porcelain", "--", "radar_pipeline"], capture_output=True, text=True)
    return f"engine {ENGINE_VERSION} at {head or '?'}{' +changes' if dirty.stdout.strip() else ''} ({root})"


def _slice(counters: pd.DataFrame, lo: pd.Timestamp, hi: pd.Timestamp, pad: pd.Timedelta) -> pd.DataFrame:
    at = counters["captured_at"]
    return counters[(at >= lo - pad) & (at <= hi + pad)]


def deploy_looks(
    counters: pd.DataFrame,
    at: pd.Timestamp,
    settings: EngineSettings,
    previous: pd.Timestamp,
    following: pd.Timestamp | None,
    data_end: pd.Timestamp,
    pad: pd.Timedelta,
) -> tuple[pd.DataFrame, pd.DataFrame, list[int], int]:
    """A deploy's first verdict and its later looks, as production runs them (steps.looks: look_span with the
    neighbouring changes as the previous and next deploys, decide_look on what is still open); a look whose after
    side reaches past the recording is not run. Returns the first verdict's frame, the frame with each statement's
    final verdict (and tier), the query_keys detected at each look, and the looks run."""
    if not LOOKS:
        first = analyse(_slice(counters, at - settings.window, at + settings.window, pad), at, settings)
        return first, first, [first.loc[first["verdict"] == "detected", "query_key"].tolist()], 1
    when = at.to_pydatetime()
    span = look_span(settings, 0, when, previous.to_pydatetime(), following.to_pydatetime() if following else None)
    part = _slice(counters, at - span.before, at + span.after, pad)
    first = decide_look(part, at, settings, span, pd.unique(part["query_key"]))
    final = first.set_index("query_key", drop=False).copy()
    found = [final.index[final["verdict"] == "detected"].tolist()]
    runs, last_after = 1, span.after
    for look in range(1, 4):
        still = final.index[final["verdict"].isin(OPEN)]
        if not len(still):
            break
        span = look_span(
            settings,
            look,
            when,
            previous.to_pydatetime(),
            following.to_pydatetime() if following else None,
            last_after,
        )
        if span is None or at + span.after > data_end:
            break
        part = _slice(counters, at - span.before, at + span.after, pad)
        got = decide_look(part, at, settings, span, still)
        got = got[got["verdict"].isin(DECIDED) & got["query_key"].isin(still)]
        keys = got["query_key"].to_numpy()
        # the look's row replaces the first verdict's, as in radar.verdict, but weighed by the first window's time
        replaced = [c for c in got.columns if c in final.columns and c not in ("calls_after", "mean_after_ms")]
        final.loc[keys, replaced] = got[replaced].to_numpy()
        found.append(got.loc[got["verdict"] == "detected", "query_key"].tolist())
        runs, last_after = runs + 1, span.after
    return first, final.reset_index(drop=True), found, runs


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The 95% Wilson score interval of a proportion k / n."""
    if n == 0:
        return math.nan, math.nan
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def _num(value: Any) -> float | None:
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def thinned(rec: dict[str, Any], every: int) -> dict[str, Any]:
    """The recording as a collector scraping `every` times less often would have stored it: every `every`-th scrape
    (cumulative counters lose nothing but the finer intervals)."""
    if every <= 1:
        return rec
    times = np.sort(rec["counters"]["captured_at"].unique())
    kept = set(times[::every])
    counters = rec["counters"][rec["counters"]["captured_at"].isin(kept)]
    args = {**rec["args"], "scrape": float(rec["args"]["scrape"]) * every}
    return {**rec, "counters": counters, "args": args}


def shared_adjusted(counters: pd.DataFrame) -> pd.DataFrame:
    """A candidate method, not the product's (issue 38: "each statement's level measured against the server's shared
    movement"): every interval's execution time divided by the server's shared movement at that scrape, and its
    per-call sum of squares by its square. The movement at a scrape is the weighted median, over the statements with
    calls in it, of the log of the interval's mean less the statement's own median log mean over the recording
    (weights √calls); a per-statement constant cancels in every ratio, so only the scrape's shared level moves."""
    c = counters.sort_values(["query_key", "captured_at"]).reset_index(drop=True)
    by = c.groupby("query_key")
    dc, dt = by["calls"].diff(), by["total_exec_time"].diff()
    n, sd = c["calls"], c["stddev_exec_time"]
    q = n * sd**2 + c["total_exec_time"] ** 2 / n.where(n > 0)  # Σ x² over the calls so far
    dq = q.groupby(c["query_key"]).diff()
    ok = (dc > 0) & (dt >= 0)
    log_mean = np.log((dt / dc).where(ok))
    r = log_mean - log_mean.groupby(c["query_key"]).transform("median")
    d = pd.DataFrame({"t": c["captured_at"], "r": r, "w": np.sqrt(dc.where(ok))}).dropna()
    d = d.sort_values(["t", "r"])
    cum = d.groupby("t")["w"].cumsum()
    half = d.groupby("t")["w"].transform("sum") / 2
    level = d[cum >= half].groupby("t")["r"].first()
    k = np.exp(c["captured_at"].map(level).fillna(0.0))
    first = by.cumcount() == 0
    kept = first | ~((dc >= 0) & (dt >= 0))  # a first row or a reset: its delta as it is
    new_dt = dt.where(kept, dt / k).where(~first, c["total_exec_time"])
    new_dq = dq.where(kept, dq / k**2).where(~first, q)
    c["total_exec_time"] = new_dt.fillna(0.0).groupby(c["query_key"]).cumsum()
    new_q = new_dq.fillna(0.0).groupby(c["query_key"]).cumsum()
    var = (new_q - c["total_exec_time"] ** 2 / n.where(n > 0)) / n.where(n > 0)
    c["stddev_exec_time"] = np.sqrt(var.clip(lower=0.0)).where(sd.notna())
    c.attrs["shared_level"] = level  # log level per scrape: what analyse_main says of it
    return c


def analyse_recording(rec: dict[str, Any], windows: list[float], null_every: float | None = None) -> dict[str, Any]:
    """Every change and every null deploy of one recording at each window (module docstring), as plain rows;
    null_every: seconds between null instants (default max(W/2, 60 s))."""
    counters = rec["counters"]
    keys = rec["keys"].set_index("query_key")
    labels = {k: label for label, ks in rec["meta"]["targets"].items() for k in ks}
    scrape = pd.Timedelta(seconds=float(rec["args"]["scrape"]))
    start, end = counters["captured_at"].min(), counters["captured_at"].max()
    events = sorted(rec["events"], key=lambda e: e["at"])
    bounds = [start, *[pd.Timestamp(e["at"]) for e in events]]
    out: dict[str, Any] = {"events": [], "nulls": [], "summary": []}

    def name_of(key: int) -> str:
        text = " ".join(str(keys.loc[key, "query"]).split()) if key in keys.index else "?"
        return labels.get(key) or f"{key}:{text[:40]}"

    def gate(frame: pd.DataFrame) -> dict[str, Any]:
        state = deploy_state(frame)
        return {
            "state": state.state,
            "cleared": _num(state.cleared_share),
            "largest_open": _num(getattr(state, "largest_open_share", None)),
            "open_excess": _num(getattr(state, "open_excess", None)),
            "largest_excess": _num(getattr(state, "largest_excess", None)),
        }

    for seconds in windows:
        window = pd.Timedelta(seconds=seconds)
        settings = EngineSettings(window=window.to_pytimedelta())
        pad = 3 * scrape
        for i, event in enumerate(events):
            at = pd.Timestamp(event["at"])
            previous = bounds[i]
            following = pd.Timestamp(events[i + 1]["at"]) if i + 1 < len(events) else None
            row: dict[str, Any] = {"W": seconds, "event": event["name"], "t_min": (at - start).total_seconds() / 60}
            row.update(expect=event["expect"], target=event["target"])
            if at - window < previous - scrape or (following or end) < at + window - scrape or at + window > end:
                out["events"].append({**row, "skipped": "window crosses a neighbour"})
                continue
            first, final, found, runs = deploy_looks(counters, at, settings, previous, following, end, pad)
            targets = set(event.get("target_keys", []))
            mine = first[first["query_key"].isin(targets)]
            best = mine.sort_values("calls_after", ascending=False).head(1)
            columns = ["verdict", "reason", "change_factor", "factor_low", "factor_high", "factor_bound", "p_value"]
            columns += ["p_family", "tier", "mean_before_ms", "mean_after_ms"]
            if len(best):
                one = best.iloc[0]
                for c in columns:
                    value = one[c] if c in best.columns else None
                    row[c] = value if isinstance(value, str) or value is None else _num(value)
                final_one = final[final["query_key"] == one["query_key"]].iloc[0]
                row["final_verdict"] = final_one["verdict"]
            others = first[(first["verdict"] == "detected") & ~first["query_key"].isin(targets)]
            later = sorted({k for ks in found[1:] for k in ks} - targets)
            row.update(gate(first))
            row["state_after_looks"] = gate(final)["state"]
            row["looks"] = runs
            row["other_detected"] = len(others)
            row["other_detected_later"] = len(later)
            row["others"] = [
                f"{name_of(int(r.query_key))} ×{r.change_factor:.2f}"
                for r in others.sort_values("change_factor", ascending=False).head(3).itertuples()
            ]
            out["events"].append(row)

        # Null deploys: every stretch between changes (and the recording's ends), instants every max(W/2, 60 s).
        step = pd.Timedelta(seconds=null_every or max(seconds / 2, 60.0))
        margin = 2 * scrape
        stretch_names = ["steady", *[f"after {e['name']}" for e in events]]
        ends = [*[pd.Timestamp(e["at"]) for e in events], None]
        nulls = []
        for name, lo, hi in zip(stretch_names, bounds, ends, strict=True):
            stop = (hi if hi is not None else end) - window - margin
            t = lo + window + margin
            while t <= stop:
                first, final, found, runs = deploy_looks(counters, t, settings, lo, hi, end, pad)
                state = gate(first)
                detected = first.loc[first["verdict"] == "detected"]
                nulls.append(
                    {
                        "W": seconds,
                        "t_min": (t - start).total_seconds() / 60,
                        "stretch": name,
                        **state,
                        "state_after_looks": gate(final)["state"],
                        "fd_first": len(found[0]),
                        "fd_all": sum(len(ks) for ks in found),
                        "looks": runs,
                        "decided": int(first["verdict"].isin(DECIDED).sum()),
                        "statements": int(len(first)),
                        "detections": [
                            f"{name_of(int(r.query_key))} ×{r.change_factor:.2f}"
                            for r in detected.sort_values("change_factor", ascending=False).head(2).itertuples()
                        ],
                    }
                )
                t += step
        out["nulls"] += nulls
        n = len(nulls)
        passed = sum(r["state"] == "pass" for r in nulls)
        low, high = wilson(passed, n)
        looked = [r for r in nulls if r["looks"] > 1]
        out["summary"].append(
            {
                "W": seconds,
                "nulls": n,
                "pass": passed,
                "inconclusive": sum(r["state"] == "inconclusive" for r in nulls),
                "fail": sum(r["state"] == "fail" for r in nulls),
                "pass_rate": passed / n if n else None,
                "pass_low": low if n else None,
                "pass_high": high if n else None,
                "pass_after_looks": sum(r["state_after_looks"] == "pass" for r in nulls),
                "fd_first": sum(r["fd_first"] for r in nulls) / n if n else None,
                "fd_all": sum(r["fd_all"] for r in nulls) / n if n else None,
                "with_later_looks": len(looked),
                "fd_all_with_looks": sum(r["fd_all"] for r in looked) / len(looked) if looked else None,
                "mean_cleared": float(np.mean([r["cleared"] or 0 for r in nulls])) if n else None,
            }
        )
    out["engine"] = engine_label()
    out["gate"] = GATE
    out["looks"] = "steps.looks (look_span, decide_look)" if LOOKS else "none (analyse at the whole budget)"
    return out


def _f(value: Any, spec: str = ".2f", none: str = "–") -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return none
    return format(value, spec)


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def recording_header(path: str, rec: dict[str, Any]) -> str:
    """The recording's command line, server, workload and the machine's load during it."""
    meta, load, args = rec["meta"], rec["load"], rec["args"]
    calls = sum(meta["calls"].values())
    lines = [
        f"recording {path}: `{rec['command']}`",
        f"server PostgreSQL {meta.get('server_version', '?')}, {meta['started_at']:%Y-%m-%d %H:%M}–"
        f"{meta['ended_at']:%H:%M} UTC ({meta['seconds'] / 60:.1f} min), scrape {args['scrape']:g} s, "
        f"busy {'yes (2 burners)' if args['busy'] else 'no'}, other tenant {meta.get('tenant', '?')}"
        + (" (INTERRUPTED)" if meta.get("interrupted") else ""),
        f"workload: {rec['counters']['query_key'].nunique()} statements, {calls / max(meta['seconds'], 1):.0f} "
        f"application calls/s; load average (1 min) mean {load['load1'].mean():.2f} "
        f"(min {load['load1'].min():.2f}, max {load['load1'].max():.2f}) on {os.cpu_count()} cores",
        "changes: "
        + ", ".join(
            f"{e['name']} at {(pd.Timestamp(e['at']) - rec['counters']['captured_at'].min()).total_seconds() / 60:.1f}"
            f" min ({e['expect']})"
            for e in rec["events"]
        ),
    ]
    first = next(iter(meta.get("shares", {}).items()), None)
    if first:
        lines.append(
            f"heavy statements' share of the app database's execution time, {first[0]}: "
            + ", ".join(f"{k} {a:.1%}" for k, (a, _) in first[1].items())
        )
    return "\n".join(lines)


def print_result(result: dict[str, Any]) -> None:
    """One engine's tables for one recording: the changes, the null deploys, the summary."""
    print(f"\n{result['engine']}; gate: {result['gate']}; looks: {result['looks']}\n")
    rows = []
    for r in result["events"]:
        if "skipped" in r:
            rows.append([f"{r['W']:g}", r["event"], f"{r['t_min']:.1f}", r["expect"], r["skipped"]] + [""] * 10)
            continue
        rows.append(
            [
                f"{r['W']:g}",
                r["event"],
                f"{r['t_min']:.1f}",
                r["expect"],
                f"{r['state']} ({_f(r['cleared'], '.0%')}, excess {_f(r.get('open_excess'), '.2%')})",
                f"{r['target']}: {r.get('verdict', '–')}",
                str(r.get("reason", "–")),
                f"×{_f(r.get('change_factor'))} [{_f(r.get('factor_low'))}, {_f(r.get('factor_high'))}]",
                _f(r.get("factor_bound")),
                f"{_f(r.get('p_value'), '.2g')} / {_f(r.get('p_family'), '.2g')}",
                str(r.get("tier") or "–"),
                f"{r.get('final_verdict', '–')}, {r['state_after_looks']} ({r['looks']} looks)",
                f"{r['other_detected']} (+{r['other_detected_later']} later)",
                "; ".join(r["others"]),
                f"{_f(r.get('mean_before_ms'), '.3g')} → {_f(r.get('mean_after_ms'), '.3g')}",
            ]
        )
    print("Designed changes (a deploy at each; first verdict, then the later looks that fit before the next change):\n")
    print(
        _table(
            [
                "W s",
                "change",
                "t min",
                "expect",
                "gate (cleared, open excess)",
                "target verdict",
                "reason",
                "factor [95%]",
                "bound",
                "p / p_family",
                "tier",
                "after looks",
                "other detections",
                "which",
                "mean ms",
            ],
            rows,
        )
    )
    print("\nNull deploys (no change within W, plus two scrapes, either side):\n")
    print(
        _table(
            [
                "W s",
                "t min",
                "stretch",
                "gate",
                "cleared",
                "open excess",
                "decided",
                "FD first",
                "FD all looks",
                "looks",
                "after looks",
                "detections",
            ],
            [
                [
                    f"{r['W']:g}",
                    f"{r['t_min']:.1f}",
                    r["stretch"],
                    r["state"],
                    _f(r["cleared"], ".1%"),
                    _f(r.get("open_excess"), ".2%"),
                    f"{r['decided']}/{r['statements']}",
                    str(r["fd_first"]),
                    str(r["fd_all"]),
                    str(r["looks"]),
                    r["state_after_looks"],
                    "; ".join(r["detections"]),
                ]
                for r in result["nulls"]
            ],
        )
    )
    print("\nNull deploys, summary:\n")
    print(_table(*summary_rows([("", result)])))


def summary_rows(results: list[tuple[str, dict[str, Any]]]) -> tuple[list[str], list[list[str]]]:
    """The null deploys' summary rows, one per engine and window."""
    header = [
        "engine",
        "W s",
        "null deploys",
        "pass",
        "pass rate [95% Wilson]",
        "inconclusive",
        "fail",
        "pass after looks",
        "mean cleared",
        "FD/deploy first",
        "FD/deploy all looks",
        "with later looks (their FD/deploy)",
    ]
    rows = []
    for label, result in results:
        for s in result["summary"]:
            rows.append(
                [
                    label or result["engine"].split(" (")[0],
                    f"{s['W']:g}",
                    str(s["nulls"]),
                    str(s["pass"]),
                    f"{_f(s['pass_rate'], '.0%')} [{_f(s['pass_low'], '.0%')}, {_f(s['pass_high'], '.0%')}]",
                    str(s["inconclusive"]),
                    str(s["fail"]),
                    str(s["pass_after_looks"]),
                    _f(s["mean_cleared"], ".1%"),
                    _f(s["fd_first"], ".3f"),
                    _f(s["fd_all"], ".3f"),
                    f"{s['with_later_looks']} ({_f(s['fd_all_with_looks'], '.3f')})",
                ]
            )
    return header, rows


def print_side_by_side(before: dict[str, Any], after: dict[str, Any], sha: str) -> None:
    """The changes and the null summary of the two engines, on one recording, next to each other."""
    print(f"\nBefore and after, same lab, same recording: before = {before['engine']}; after = {after['engine']}\n")
    rows = []
    for b, a in zip(before["events"], after["events"], strict=False):
        if "skipped" in a or "skipped" in b:
            continue
        rows.append(
            [
                f"{a['W']:g}",
                a["event"],
                a["expect"],
                f"{b['state']} → {a['state']}",
                f"{_f(b['cleared'], '.0%')} → {_f(a['cleared'], '.0%')}",
                f"{b.get('verdict', '–')} → {a.get('verdict', '–')}",
                f"{b.get('tier') or '–'} → {a.get('tier') or '–'}",
                f"×{_f(a.get('change_factor'))}",
                f"{_f(b.get('p_family'), '.2g')} → {_f(a.get('p_family'), '.2g')}",
                f"{b['state_after_looks']} → {a['state_after_looks']}",
                f"{b['other_detected']} → {a['other_detected']}",
            ]
        )
    print(
        _table(
            [
                "W s",
                "change",
                "expect",
                "gate",
                "cleared",
                "target verdict",
                "tier",
                "factor",
                "p_family",
                "after looks",
                "other detections",
            ],
            rows,
        )
    )
    print()
    print(_table(*summary_rows([(f"before ({sha[:10]})", before), ("after (this tree)", after)])))


def analyse_main(args: argparse.Namespace) -> None:
    """--analyse: the tables for each recording (and, with --before-commit, the other engine's beside them)."""
    windows = [float(w) for w in args.windows.split(",")]
    results = {}
    for path in args.analyse:
        with open(path, "rb") as f:
            rec = thinned(pickle.load(f), args.thin)
        if args.shared_movement:
            rec = {**rec, "counters": shared_adjusted(rec["counters"])}
        results[path] = analyse_recording(rec, windows, args.null_every)
        if not args.json_out:
            print(f"\n## gate lab: {path}\n")
            print(f"analysed: `{shlex.join([sys.executable, *sys.argv])}`")
            print(recording_header(path, rec))
            one, five, fifteen = os.getloadavg()
            print(f"machine load during this analysis: {one:.2f} {five:.2f} {fifteen:.2f}")
            if args.shared_movement:
                level = rec["counters"].attrs["shared_level"]
                print(
                    f"counters divided by the server's shared movement (candidate): its level per scrape varies by "
                    f"×{np.exp(level.std()):.2f} (one standard deviation), lag-1 correlation {level.autocorr(1):.2f}"
                )
            print_result(results[path])
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(results, default=str))
        return
    if args.before_commit:
        before = analyse_at_commit(
            args.before_commit, args.analyse, args.windows, args.thin, args.null_every, args.shared_movement
        )
        for path in args.analyse:
            print(f"\n## gate lab: {path}, engine of {args.before_commit} beside this tree's\n")
            print_result(before[path])
            print_side_by_side(before[path], results[path], args.before_commit)


def analyse_at_commit(
    sha: str, paths: list[str], windows: str, thin: int = 1, null_every: float | None = None, shared: bool = False
) -> dict[str, Any]:
    """The same analysis with the engine of commit `sha`: a worktree at /tmp/gate_lab_<sha>, this file run there in a
    subprocess with that tree first on the path, its rows read back; the worktree removed afterwards."""
    repo = HERE.parents[1]
    full = subprocess.run(["git", "-C", str(repo), "rev-parse", sha], capture_output=True, text=True, check=True)
    sha = full.stdout.strip()
    tree = Path(f"/tmp/gate_lab_{sha[:12]}")
    subprocess.run(["git", "-C", str(repo), "worktree", "add", "--detach", str(tree), sha], check=True)
    try:
        with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as tmp:
            out = Path(tmp.name)
        env = {**os.environ, "GATE_LAB_ENGINE": str(tree), "PYTHONPATH": str(tree)}
        cmd = [sys.executable, str(HERE), "--analyse", *paths, "--windows", windows, "--json-out", str(out)]
        cmd += [f"--thin={thin}"] + ([f"--null-every={null_every}"] if null_every else [])
        cmd += ["--shared-movement"] if shared else []
        subprocess.run(cmd, check=True, env=env)
        found = json.loads(out.read_text())
        out.unlink()
        return found
    finally:
        subprocess.run(["git", "-C", str(repo), "worktree", "remove", "--force", str(tree)], check=False)
        subprocess.run(["git", "-C", str(repo), "worktree", "prune"], check=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--record", metavar="OUT.pkl", help="record a run into this pickle")
    mode.add_argument("--analyse", metavar="IN.pkl", nargs="+", help="analyse these recordings")
    parser.add_argument("--minutes", type=float, default=80.0, help="recording length (minutes)")
    parser.add_argument("--phase-minutes", type=float, default=10.0, help="P, the time between changes (minutes)")
    parser.add_argument("--steady-phases", type=int, default=2, help="phases of nothing before the first change")
    parser.add_argument("--events", help=f"changes in order (default {','.join(DEFAULT_EVENTS)})")
    parser.add_argument("--scrape", type=float, default=5.0, help="seconds between scrapes")
    parser.add_argument("--busy", action="store_true", help="two CPU burners beside the server")
    parser.add_argument("--server", type=int, choices=(18, 15), default=18, help="PostgreSQL major")
    parser.add_argument("--rate", type=float, default=340.0, help="the mix's calls a second (four connections)")
    parser.add_argument("--report-every", type=float, default=2.0, help="seconds between report calls")
    parser.add_argument("--pgbench-rate", type=float, default=10.0, help="the other tenant's transactions a second")
    parser.add_argument("--windows", default="180,300", help="W values to analyse (seconds, comma-separated)")
    parser.add_argument("--before-commit", metavar="SHA", help="also analyse with the engine of this commit")
    parser.add_argument("--thin", type=int, default=1, help="keep every N-th scrape (a collector N times slower)")
    parser.add_argument("--null-every", type=float, help="seconds between null deploys (default max(W/2, 60))")
    parser.add_argument(
        "--shared-movement", action="store_true", help="a candidate: divide the counters by the shared movement first"
    )
    parser.add_argument("--json-out", help=argparse.SUPPRESS)  # the --before-commit subprocess's rows
    args = parser.parse_args()
    if args.record:
        record(args)
    else:
        analyse_main(args)


if __name__ == "__main__":
    main()
