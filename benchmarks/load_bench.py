"""Sustained-load benchmark: the minutely snapshot schedule through a real Dagster daemon, N targets × 5,000 statements.

Run with `make bench-load` (or `.venv/bin/python benchmarks/load_bench.py [--targets N[,N…]] [--minutes M]
[--servers K] [--shards S] [--daemon-code-server]`; by default 50 then 200 targets, 15 minutes each, 2 watched servers,
one shard per core). It starts:

- K embedded PostgreSQL 18 servers as the watched ones (pg_stat_statements.max = 10000), each with 5,000 statement
  shapes (snapshot_bench's 50 tables × 10 × 10), and a workload driver (a thread of this process) that makes 10% of
  each server's shapes run in every minute, a different tenth each minute, spread over the minute. The N targets are
  names over these servers, target i on server i mod K: several targets read the same server, each with a catalogue of
  its own, so each stores what moved on its server;
- the warehouse (an embedded PostgreSQL 18, migrated), and Dagster's storage in a server of its own, so the
  warehouse's CPU is its alone;
- `dagster code-server start` (as Dagster's Helm chart runs it, see deploy/) and `dagster-daemon run` on an instance
  configured as the project's dagster.yaml (storage in PostgreSQL, its pools), on a code location that imports all of
  radar_pipeline.definitions (as every production run pays it) and serves the pgss_snapshots asset with the real
  `pgss_snapshot_schedule`, every minute, in S shards (RADAR_SNAPSHOT_SHARDS): S runs a minute, each a process of its
  own started by the code server. Radar's other schedules and sensors are left out, so only the collection runs.
  With --daemon-code-server the daemon serves the code itself (a python_module workspace, as `dagster dev` does), and
  then starts a new code server every minute.

Before the daemon starts, one target per server takes its first (all-new) scrape in this process and the other targets
of that server get a copy of its catalogue, as if each had been scraped before: the benchmark measures the steady
state, not N × 5,000 first fingerprints.

For each N (a step-up when several are given, the daemon restarted with the new targets), it measures the whole minutes
from the second tick after the daemon is up (the first is a warm-up), for --minutes, then waits for those ticks' runs
to end, and prints:

- per-run duration p50/p99 (start → end, from Dagster's run storage) and tick → end (the scheduled minute to the
  run's end: what "keeps up" needs below 60 s);
- missed ticks (a minute of the window without S successful runs) and late ticks (a run that started more than
  15 s after its minute, or ended after the next minute began);
- rows and bytes written per minute in the warehouse (rows in radar.pgss_snapshot captured in the window; growth of the
  snapshot tables, radar.query and radar.pgss_info_snapshot; WAL bytes);
- CPU-seconds per minute (user + system, /proc, summed over each process tree, reaped children included) of radar's
  processes (the daemon, the code server and the run processes it starts), of the warehouse server, of
  Dagster's storage server and of the watched servers; and radar's CPU per target-scrape;
- the largest N that keeps up at one scrape a minute on this machine's cores. With two or more N it is extrapolated
  from a straight line fitted to the measured CPU per minute of everything the benchmark runs (radar, the warehouse,
  Dagster's storage, the watched servers and the workload driver) against N: the N at which it would fill every core.
  With one N it assumes that whole CPU grows in proportion to N (no fixed part), which understates the answer. Either
  way it is a bound from CPU alone: whether runs stay short enough there is what the measured steps show.

Peak memory: the largest resident set (VmHWM) seen of the daemon, the code server and a run process.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from daemon_harness import peak_memory, start_code_server, start_daemon, tree_cpu, wait_for_daemon  # noqa: E402
from snapshot_bench import COLUMNS, STATEMENTS, TABLES, statement  # noqa: E402

from radar_pipeline.config import Target  # noqa: E402
from radar_pipeline.demo.dev import stop_session  # noqa: E402
from radar_pipeline.demo.local_postgres import LocalPostgres, free_port  # noqa: E402
from radar_pipeline.steps.snapshots import snapshot_target  # noqa: E402
from radar_pipeline.warehouse import migrations  # noqa: E402
from radar_pipeline.warehouse.database import make_engine  # noqa: E402

MOVING_SHARE = 0.10
DRIVER_STEP_S = 5.0  # the workload driver runs a slice of the minute's statements this often
LATE_START_S = 15.0
SCHEDULE = "pgss_snapshot_schedule"
LOCATION = """
import dagster as dg
import radar_pipeline.definitions  # noqa: F401  (every definition's import, as each production run pays it)
from radar_pipeline.defs.resources import default_resources
from radar_pipeline.defs.collection.snapshots import pgss_snapshot_job, pgss_snapshot_schedule_for, pgss_snapshots

defs = dg.Definitions(
    assets=[pgss_snapshots],
    jobs=[pgss_snapshot_job],
    schedules=[pgss_snapshot_schedule_for()],
    resources=default_resources(),
)
"""
DAGSTER_YAML = """\
storage:
  postgres:
    postgres_url: "{url}"
telemetry:
  enabled: false
concurrency:
  pools:
    granularity: run
    default_limit: 1
"""


class WorkloadDriver(threading.Thread):
    """Makes MOVING_SHARE of each server's statement shapes run in every minute, a different share each minute."""

    def __init__(self, dsns: list[str]) -> None:
        super().__init__(daemon=True)
        self.dsns = dsns
        self.stopping = threading.Event()

    def run(self) -> None:
        per_minute = int(STATEMENTS * MOVING_SHARE)
        steps = int(60 / DRIVER_STEP_S)
        conns = [psycopg.connect(dsn, autocommit=True) for dsn in self.dsns]
        try:
            while not self.stopping.is_set():
                now = time.time()
                minute, second = divmod(now, 60)
                step = int(second // DRIVER_STEP_S)
                first = int(minute) * per_minute + step * per_minute // steps
                last = int(minute) * per_minute + (step + 1) * per_minute // steps
                for conn in conns:
                    with conn.pipeline():
                        for i in range(first, last):
                            conn.execute(statement(i % STATEMENTS), (1,))
                self.stopping.wait(DRIVER_STEP_S - (time.time() % DRIVER_STEP_S))
        finally:
            for conn in conns:
                conn.close()


@dataclass
class Step:
    """What one N measured."""

    targets: int
    shards: int
    minutes: int
    served: str  # what served the code location
    durations: list[float] = field(default_factory=list)
    tick_to_end: list[float] = field(default_factory=list)
    missed: list[str] = field(default_factory=list)
    late: list[str] = field(default_factory=list)
    failed_runs: int = 0
    tick_problems: list[str] = field(default_factory=list)  # schedule ticks that failed or were skipped
    rows: int = 0
    table_bytes: int = 0
    wal_bytes: int = 0
    cpu: dict[str, float] = field(default_factory=dict)  # CPU-seconds over the window, by process group
    peaks: dict[str, int] = field(default_factory=dict)


def percentile(values: list[float], q: float) -> float:
    """The q-quantile (nearest rank) of values."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def prepare_watched(server: LocalPostgres) -> None:
    """The statement shapes' tables on a watched server, and every shape run once, so each is in the view."""
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        conn.execute("CREATE EXTENSION pg_stat_statements")
        for t in range(TABLES):
            conn.execute(f"CREATE TABLE t{t} ({', '.join(f'c{c} int' for c in range(COLUMNS))})")
        conn.execute("SELECT pg_stat_statements_reset()")
    with psycopg.connect(server.dsn(), autocommit=True) as conn, conn.pipeline():
        for i in range(STATEMENTS):
            conn.execute(statement(i), (1,))


def seed_targets(warehouse_url: str, targets: list[Target], servers: int) -> None:
    """Give every target the state of one that was scraped: the first target of each server is scraped here (its
    statements all new), the others of that server copy its catalogue, ignored statements and last scrape."""
    engine = make_engine(warehouse_url)
    try:
        with engine.begin() as conn:
            done = {r[0] for r in conn.exec_driver_sql("SELECT DISTINCT target FROM radar.pgss_info_snapshot")}
        for server in range(servers):
            mine = [t for i, t in enumerate(targets) if i % servers == server]
            seed = mine[0]
            if seed.name not in done:
                snapshot_target(seed, engine)
            with engine.begin() as conn:
                driver = conn.connection.driver_connection
                for target in mine[1:]:
                    if target.name in done:
                        continue
                    for table, columns in (
                        ("radar.query", "dbid, userid, queryid, toplevel, fingerprint, query, first_seen, last_seen, "
                         "last_calls, last_total_exec_time, last_stats_since, missing_since"),
                        ("radar.ignored_statement", "dbid, userid, queryid, toplevel, reason"),
                        ("radar.pgss_info_snapshot", "captured_at, dealloc, stats_reset, server_version_num, "
                         "pgss_version, statements, stored_rows"),
                    ):  # fmt: skip
                        driver.execute(
                            f"INSERT INTO {table} (target, {columns}) SELECT %s, {columns} FROM {table} "
                            "WHERE target = %s",
                            (target.name, seed.name),
                        )
    finally:
        engine.dispose()


def warehouse_counters(url: str) -> tuple[int, int]:
    """Bytes of the snapshot write path's tables (with indexes) and the WAL position, now."""
    with psycopg.connect(url.replace("postgresql+psycopg", "postgresql"), autocommit=True) as conn:
        size = conn.execute(
            "SELECT coalesce(sum(pg_total_relation_size(i.inhrelid)), 0) "
            "+ pg_total_relation_size('radar.query') + pg_total_relation_size('radar.pgss_info_snapshot') "
            "FROM pg_inherits i WHERE i.inhparent = 'radar.pgss_snapshot'::regclass"
        ).fetchone()[0]
        wal = conn.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn").fetchone()[0]
    return int(size), int(wal)


def measure(
    args: argparse.Namespace,
    n: int,
    root: Path,
    watched: list[LocalPostgres],
    warehouse: LocalPostgres,
    storage: LocalPostgres,
) -> Step:
    """Run the daemon with n targets for args.minutes whole minutes and gather what it did."""
    import dagster as dg
    from dagster._core.scheduler.instigation import InstigatorType
    from dagster._core.storage.tags import SCHEDULE_NAME_TAG, SCHEDULED_EXECUTION_TIME_TAG

    shards = args.shards or os.cpu_count() or 1
    targets = [Target(f"t{i:04d}", watched[i % len(watched)].url()) for i in range(n)]
    warehouse_url = warehouse.url(driver="postgresql+psycopg")
    seed_targets(warehouse_url, targets, len(watched))

    database = f"dagster_{n}"
    with psycopg.connect(storage.dsn(), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {database}")
    home = root / database
    home.mkdir()
    (home / "dagster.yaml").write_text(DAGSTER_YAML.format(url=storage.url(database, driver="postgresql+psycopg2")))
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "PYTHONPATH": str(ROOT),
        "RADAR_WAREHOUSE_URL": warehouse_url,
        "RADAR_TARGETS": " ".join(f"{t.name}={t.dsn}" for t in targets),
        "RADAR_SNAPSHOT_SHARDS": str(shards),
    }
    os.environ.update({k: env[k] for k in ("DAGSTER_HOME", "RADAR_WAREHOUSE_URL", "RADAR_TARGETS")})
    instance = dg.DagsterInstance.get()
    radar: list[subprocess.Popen] = []  # the code server (unless the daemon starts its own), then the daemon
    if not args.daemon_code_server:
        port = free_port()
        radar.append(start_code_server(home, LOCATION, env, port))
    daemon = start_daemon(home, LOCATION, env, None if args.daemon_code_server else port)
    radar.append(daemon)
    served = "the daemon's own code server" if args.daemon_code_server else "dagster code-server start"
    step = Step(targets=n, shards=shards, minutes=args.minutes, served=served)
    try:
        wait_for_daemon(instance, daemon, "SCHEDULER", home)
        # The second whole minute after the daemon is up: the first tick scrapes what moved since the targets were
        # seeded, more than a minute of it.
        start = float((int(time.time()) // 60 + 2) * 60)
        end = start + 60 * args.minutes
        groups = {"warehouse": warehouse.pid, "dagster storage": storage.pid}
        groups.update({f"watched {i}": s.pid for i, s in enumerate(watched)})
        groups.update({f"radar {i}": p.pid for i, p in enumerate(radar)})
        time.sleep(max(0.0, start - time.time() - 0.5))
        before = {name: tree_cpu(pid) for name, pid in groups.items()}  # type: ignore[arg-type]
        driver_before = _self_cpu()
        size_before, wal_before = warehouse_counters(warehouse_url)
        began = time.strftime("%H:%M:%S", time.gmtime(start))
        print(f"  {n} targets in {shards} shards: measuring {args.minutes} min from {began} UTC", flush=True)
        while time.time() < end - 0.5:
            for process in radar:
                peak_memory(process.pid, step.peaks)
            time.sleep(min(2.0, max(0.0, end - 0.5 - time.time())))
        step.cpu = {name: tree_cpu(pid) - before[name] for name, pid in groups.items()}  # type: ignore[arg-type]
        step.cpu["workload driver"] = _self_cpu() - driver_before
        size_after, wal_after = warehouse_counters(warehouse_url)
        step.table_bytes, step.wal_bytes = size_after - size_before, wal_after - wal_before

        expected = [start + 60 * m for m in range(args.minutes)]
        deadline = time.time() + 180
        while True:  # the window's runs end (or the deadline passes)
            records = [
                r
                for r in instance.get_run_records(dg.RunsFilter(tags={SCHEDULE_NAME_TAG: SCHEDULE}))
                if start <= _scheduled(r, SCHEDULED_EXECUTION_TIME_TAG) < end
            ]
            if all(r.dagster_run.is_finished for r in records) or time.time() > deadline:
                break
            for process in radar:
                peak_memory(process.pid, step.peaks)
            time.sleep(2)
        by_minute: dict[float, list] = {}
        for r in records:
            by_minute.setdefault(_scheduled(r, SCHEDULED_EXECUTION_TIME_TAG), []).append(r)
        for minute in expected:
            label = time.strftime("%H:%M", time.gmtime(minute))
            runs = by_minute.get(minute, [])
            ok = [r for r in runs if r.dagster_run.is_success]
            step.failed_runs += len(runs) - len(ok)
            if len(ok) < shards:
                step.missed.append(f"{label} ({len(ok)} of {shards} runs succeeded)")
                continue
            for r in ok:
                step.durations.append(r.end_time - r.start_time)
                step.tick_to_end.append(r.end_time - minute)
            if any(r.start_time - minute > LATE_START_S or r.end_time - minute > 60 for r in ok):
                step.late.append(label)
        states = [
            s for s in instance.all_instigator_state(instigator_type=InstigatorType.SCHEDULE) if s.name == SCHEDULE
        ]
        if states:
            ticks = instance.get_ticks(
                states[0].instigator_origin_id, states[0].selector_id, after=start - 1, before=end
            )
            step.tick_problems = [
                f"{time.strftime('%H:%M', time.gmtime(t.timestamp))} {t.status.value}"
                for t in ticks
                if t.status.value != "SUCCESS"
            ]
        with psycopg.connect(warehouse.dsn(), autocommit=True) as conn:
            step.rows = conn.execute(
                "SELECT count(*) FROM radar.pgss_snapshot WHERE captured_at >= to_timestamp(%s) "
                "AND captured_at < to_timestamp(%s)",
                (start, end),
            ).fetchone()[0]
    finally:
        for process in reversed(radar):
            stop_session(process)
        instance.dispose()
    return step


def _self_cpu() -> float:
    """CPU-seconds of this process (the workload driver's thread is nearly all it does while measuring)."""
    usage = os.times()
    return usage.user + usage.system


def _scheduled(record: object, tag: str) -> float:
    from datetime import datetime

    value = record.dagster_run.tags.get(tag)  # type: ignore[attr-defined]
    return datetime.fromisoformat(value).timestamp() if value else 0.0


def report(step: Step, cores: int) -> float:
    """Print one step's figures; return the CPU-seconds per minute of everything it ran."""
    per_min = {name: used / step.minutes for name, used in step.cpu.items()}
    radar = sum(v for k, v in per_min.items() if k.startswith("radar"))
    watched = sum(v for k, v in per_min.items() if k.startswith("watched"))
    total = sum(per_min.values())
    runs = len(step.durations)
    print(
        f"{step.targets} targets × {STATEMENTS:,} statements, {step.shards} shards, {step.minutes} min, code served by "
        f"{step.served}:"
    )
    if runs:
        print(
            f"  runs: {runs} succeeded, {step.failed_runs} failed; "
            f"duration p50 {percentile(step.durations, 0.5):.1f} s, "
            f"p99 {percentile(step.durations, 0.99):.1f} s; tick → end p50 {percentile(step.tick_to_end, 0.5):.1f} s, "
            f"p99 {percentile(step.tick_to_end, 0.99):.1f} s"
        )
    print(
        f"  missed ticks: {len(step.missed)} {step.missed or ''}; late ticks: {len(step.late)} {step.late or ''}; "
        f"schedule ticks not successful: {step.tick_problems or 'none'}"
    )
    print(
        f"  warehouse: {step.rows / step.minutes:,.0f} rows/min, "
        f"{step.table_bytes / step.minutes / 2**20:,.1f} MiB/min of table and index growth, "
        f"{step.wal_bytes / step.minutes / 2**20:,.1f} MiB/min of WAL"
    )
    print(
        f"  CPU-s per minute: radar's processes {radar:.1f}, warehouse {per_min['warehouse']:.1f}, Dagster storage "
        f"{per_min['dagster storage']:.1f}, watched servers {watched:.1f}, this process (workload driver, "
        f"sampling) {per_min['workload driver']:.1f}; all {total:.1f} of the {cores * 60} the {cores} cores have"
    )
    print(
        f"  per target-scrape: radar's processes {radar / step.targets:.3f} CPU-s (run start-up included), warehouse "
        f"{per_min['warehouse'] / step.targets:.3f}, watched server {watched / step.targets:.3f}"
    )
    if step.peaks:
        print("  peak memory (VmHWM): " + "; ".join(f"{k}: {v / 1024:.0f} MiB" for k, v in sorted(step.peaks.items())))
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", default="50,200", help="N, or N1,N2,… for a step-up")
    parser.add_argument("--minutes", type=int, default=15, help="whole minutes measured at each N")
    parser.add_argument("--servers", type=int, default=2, help="watched servers the targets share")
    parser.add_argument("--shards", type=int, default=0, help="snapshot runs a minute (default: one per core)")
    parser.add_argument(
        "--daemon-code-server",
        action="store_true",
        help="let the daemon start the code server itself (a python_module workspace), not `dagster code-server start`",
    )
    args = parser.parse_args()
    counts = [int(n) for n in args.targets.split(",")]
    cores = os.cpu_count() or 1
    root = Path(tempfile.mkdtemp(prefix="radar-load-bench-"))
    servers: list[LocalPostgres] = []
    driver = None
    try:
        watched = [
            LocalPostgres(root / f"watched{i}", settings={"pg_stat_statements.max": "10000"}).start()
            for i in range(args.servers)
        ]
        servers += watched
        warehouse = LocalPostgres(root / "warehouse").start()
        storage = LocalPostgres(root / "dagster_storage", settings={"max_connections": "200"}).start()
        servers += [warehouse, storage]
        for server in watched:
            prepare_watched(server)
        migrations.upgrade(warehouse.url(driver="postgresql+psycopg"))
        driver = WorkloadDriver([s.dsn() for s in watched])
        driver.start()
        print(
            f"{args.servers} watched servers × {STATEMENTS:,} statements, {MOVING_SHARE:.0%} moving a minute; "
            f"{cores} cores; load average before: {os.getloadavg()[0]:.2f}",
            flush=True,
        )
        totals = []
        for n in counts:
            step = measure(args, n, root, watched, warehouse, storage)
            totals.append((n, report(step, cores), not step.missed and not step.late))
        budget = cores * 60.0
        if len(totals) >= 2:
            xs, ys = [t[0] for t in totals], [t[1] for t in totals]
            slope = statistics.linear_regression(xs, ys).slope
            intercept = statistics.linear_regression(xs, ys).intercept
            reach = (budget - intercept) / slope if slope > 0 else float("inf")
            how = f"line fitted to {len(totals)} step-up points: {intercept:.1f} + {slope:.3f} × N CPU-s a minute"
        else:
            n, total, _ = totals[0]
            reach = n * budget / total
            how = f"{total:.1f} CPU-s a minute at N = {n}, assumed proportional to N"
        kept = [n for n, _, ok in totals if ok]
        print(f"kept up (no missed or late tick) at N = {kept or 'none'}")
        print(
            f"largest N that keeps up, by CPU ({cores} cores × 60 CPU-s a minute): ≈ {reach:,.0f} (extrapolated: {how})"
        )
        print(f"load average after: {os.getloadavg()[0]:.2f}")
    finally:
        if driver is not None:
            driver.stopping.set()
            driver.join(timeout=30)
        for server in servers:
            server.destroy()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
