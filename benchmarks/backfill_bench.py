"""Backfill benchmark: deploy_verdicts over many deploys through Dagster, with its backfill policy.

Run with `make bench-backfill` (or `.venv/bin/python benchmarks/backfill_bench.py [--deploys N] [--queries Q]`). It
starts an embedded PostgreSQL 18 as the warehouse, fills one target's history of Q statements by COPY (as
analysis_bench does), imports N deploys --spacing minutes apart (default 2; windows of ±30 minutes: each analysis
reads Q × 60 scrapes a side, as analysis_bench's backfill; a run of deploys whose windows overlap reads their common
span once), with --compact compacts the history's ended days as the daily compaction would (a backfill over past
deploys reads compacted days), and measures, in the same run:

1. the old way, like for like: one in-process run per partition (`dg.materialize(partition_key=...)`) over the first
   --subset deploys, and the new way over the same deploys as one ranged run;
2. the new way over all N deploys in-process: runs of the backfill policy's size, one after another;
3. with --daemon (the default): a real backfill. `dagster-daemon run` on an instance of its own (Dagster's storage in
   a database of the same PostgreSQL, the QueuedRunCoordinator, pools of `run` granularity) executes a backfill of
   the --subset deploys one per run (the old way, like for like), then of all N partitions with the backfill
   policy, each submitted as the UI submits one; each run is a process of its own that loads the code location. It
   reports the time from submitting the backfill to the last run's end and to the backfill's completion (the
   backfill daemon looks every 30 s), and the peak memory of the daemon's processes, a run's among them.

Peak memory of this process (the in-process runs) is its maximum resident set size.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import sys
import tempfile
import textwrap
import time
from datetime import timedelta
from pathlib import Path

import dagster as dg
import psycopg

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from analysis_bench import START, fill  # noqa: E402
from daemon_harness import peak_memory, start_daemon, tree_cpu, wait_for_daemon  # noqa: E402

from radar_pipeline.defs.deploys.deploy_verdicts import BACKFILL_PARTITIONS_PER_RUN, deploy_verdicts  # noqa: E402
from radar_pipeline.defs.resources import AnalysisResource, TargetsResource, WarehouseResource  # noqa: E402
from radar_pipeline.demo.local_postgres import LocalPostgres  # noqa: E402
from radar_pipeline.steps.compaction import compact_history  # noqa: E402
from radar_pipeline.steps.deploy_analysis import AnalysisRun, analyse_deploy, analyse_deploys  # noqa: E402
from radar_pipeline.warehouse import deploys, migrations  # noqa: E402
from radar_pipeline.warehouse.database import make_engine  # noqa: E402

WINDOW_S = 1800.0
SPACING_MIN = 2
TARGET = "history"
NO_PLANS = f"{TARGET}=postgresql://nowhere.invalid/none"  # a configured target, so no plan is captured live
RANGE_START, RANGE_END = "dagster/asset_partition_range_start", "dagster/asset_partition_range_end"
# The code location the daemon's runs load: every definition's import (as production pays it), but only the
# deploy_verdicts asset, so no sensor or schedule of radar's starts runs of its own during the benchmark.
# BENCH_PER_RUN overrides the backfill policy's size (1: the old one run per partition).
LOCATION = """
import os

import dagster as dg
import radar_pipeline.definitions  # noqa: F401
from radar_pipeline.defs.deploys.deploy_verdicts import deploy_verdicts
from radar_pipeline.defs.resources import default_resources

per_run = int(os.environ["BENCH_PER_RUN"])
asset = deploy_verdicts.with_attributes(backfill_policy=dg.BackfillPolicy.multi_run(max_partitions_per_run=per_run))
defs = dg.Definitions(assets=[asset], resources=default_resources())
"""


def resources(url: str) -> dict:
    """The resources of the in-process runs: the warehouse, the benchmark's window, a target with no plans."""
    return {
        "warehouse": WarehouseResource(url=url),
        "analysis": AnalysisResource(window_seconds=WINDOW_S),
        "targets": TargetsResource(spec=NO_PLANS),
    }


def analysis_alone(url: str, keys: list[str]) -> tuple[float, float]:
    """Seconds for analyse_deploy over `keys` in a loop, and for analyse_deploys over them (overlapping windows read
    once), without Dagster: the floors of a run of one deploy and of a ranged run."""
    engine = make_engine(url)
    settings = AnalysisResource(window_seconds=WINDOW_S).settings()
    started = time.perf_counter()
    for key in keys:
        analyse_deploy(AnalysisRun(engine, settings), key)
    one_by_one = time.perf_counter() - started
    started = time.perf_counter()
    failed = [(key, r) for key, r in analyse_deploys(AnalysisRun(engine, settings), keys) if isinstance(r, Exception)]
    assert not failed, failed
    together = time.perf_counter() - started
    engine.dispose()
    return one_by_one, together


def one_per_run(url: str, keys: list[str]) -> float:
    """Seconds for one in-process run per partition, the way a backfill ran before its policy."""
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("deploys", keys)
        started = time.perf_counter()
        for key in keys:
            assert dg.materialize(
                [deploy_verdicts], partition_key=key, resources=resources(url), instance=instance
            ).success
        return time.perf_counter() - started


def ranged_runs(url: str, keys: list[str], per_run: int) -> tuple[float, int]:
    """Seconds for in-process runs of `per_run` partitions each over `keys`, and the partitions materialized."""
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("deploys", keys)
        started = time.perf_counter()
        for i in range(0, len(keys), per_run):
            chunk = keys[i : i + per_run]
            result = dg.materialize(
                [deploy_verdicts],
                resources=resources(url),
                instance=instance,
                tags={RANGE_START: chunk[0], RANGE_END: chunk[-1]},
            )
            assert result.success
        took = time.perf_counter() - started
        return took, len(instance.get_materialized_partitions(dg.AssetKey("deploy_verdicts")))


def daemon_backfill(
    server: LocalPostgres, url: str, keys: list[str], root: Path, runs: int, pool: int, per_run: int
) -> None:
    """A backfill of `keys`, `per_run` partitions a run, executed by a real dagster-daemon on an instance of its own;
    prints its figures."""
    from dagster._core.execution.backfill import BulkActionStatus, PartitionBackfill

    name = f"dagster_bench_{per_run}"
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    root = root / name
    home = root / "dagster_home"
    home.mkdir(parents=True)
    (home / "dagster.yaml").write_text(
        textwrap.dedent(f"""\
        storage:
          postgres:
            postgres_url: "{server.url(name, driver="postgresql+psycopg2")}"
        run_coordinator:
          module: dagster.core.run_coordinator
          class: QueuedRunCoordinator
          config:
            dequeue_interval_seconds: 1
        concurrency:
          runs:
            max_concurrent_runs: {runs}
          pools:
            granularity: run
            default_limit: {pool}
        telemetry:
          enabled: false
        """)
    )
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "PYTHONPATH": str(ROOT),
        "RADAR_WAREHOUSE_URL": url,
        "RADAR_TARGETS": NO_PLANS,
        "RADAR_WINDOW_SECONDS": str(WINDOW_S),
        "BENCH_PER_RUN": str(per_run),
    }
    os.environ["DAGSTER_HOME"] = str(home)
    instance = dg.DagsterInstance.get()
    instance.add_dynamic_partitions("deploys", keys)
    daemon = start_daemon(root, LOCATION, env)
    try:
        wait_for_daemon(instance, daemon, "BACKFILL", root)
        os.environ.update({k: env[k] for k in ("RADAR_WAREHOUSE_URL", "RADAR_TARGETS", "RADAR_WINDOW_SECONDS")})
        namespace: dict = {}
        os.environ["BENCH_PER_RUN"] = str(per_run)
        exec(compile(LOCATION, "bench_location", "exec"), namespace)  # noqa: S102
        defs = namespace["defs"]

        cpu_before = {"Dagster (daemon, runs)": tree_cpu(daemon.pid), "PostgreSQL": tree_cpu(server.pid or 0)}
        submitted = time.time()
        instance.add_backfill(
            PartitionBackfill.from_asset_partitions(
                backfill_id="bench",
                asset_graph=defs.get_repository_def().asset_graph,
                partition_names=keys,
                asset_selection=[dg.AssetKey("deploy_verdicts")],
                backfill_timestamp=submitted,
                tags={},
                dynamic_partitions_store=instance,
                all_partitions=False,
                title=None,
                description=None,
                run_config=None,
            )
        )
        peaks: dict[str, int] = {}
        status = None
        while time.time() - submitted < 3600:
            peak_memory(daemon.pid, peaks)
            status = instance.get_backfill("bench").status
            if status != BulkActionStatus.REQUESTED:
                break
            time.sleep(0.5)
        completed = time.time()
        cpu = {
            "Dagster (daemon, runs)": tree_cpu(daemon.pid) - cpu_before["Dagster (daemon, runs)"],
            "PostgreSQL": tree_cpu(server.pid or 0) - cpu_before["PostgreSQL"],
        }
        records = instance.get_run_records(dg.RunsFilter(tags={"dagster/backfill": "bench"}))
        ended = max((r.end_time or 0.0) for r in records)
        first_start = min((r.start_time or completed) for r in records)
        materialized = len(instance.get_materialized_partitions(dg.AssetKey("deploy_verdicts")))
        ok = sum(r.dagster_run.is_success for r in records)
        durations = sorted((r.end_time or 0) - (r.start_time or 0) for r in records)
        print(
            f"daemon backfill of {len(keys):,} deploys ({runs} runs at once, pool limit {pool}, {per_run} partitions a "
            f"run): {status.value if status else None}, "
            f"{len(records)} runs ({ok} succeeded), {materialized:,} partitions materialized"
        )
        print(
            f"  submitted → last run ended: {ended - submitted:.1f} s = {materialized / (ended - submitted) * 60:,.0f} "
            f"partitions per minute (first run started after {first_start - submitted:.1f} s); "
            f"→ backfill completed: {completed - submitted:.1f} s"
        )
        print(
            f"  run durations: median {durations[len(durations) // 2]:.1f} s, max {durations[-1]:.1f} s; "
            "peak memory (VmHWM): " + "; ".join(f"{kind}: {kib / 1024:.0f} MiB" for kind, kib in sorted(peaks.items()))
        )
        print(
            "  CPU-s from submission to completion: "
            + ", ".join(f"{kind} {seconds:.1f}" for kind, seconds in cpu.items())
            + f" ({sum(cpu.values()) / materialized:.3f} a deploy; warehouse and Dagster storage share the server)"
        )
    finally:
        daemon.terminate()
        daemon.wait(timeout=60)
        instance.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deploys", type=int, default=1000)
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--subset", type=int, default=20, help="deploys run the old way, one per run")
    parser.add_argument("--spacing", type=int, default=SPACING_MIN, help="minutes between deploys")
    parser.add_argument("--compact", action="store_true", help="compact the history's ended days first")
    parser.add_argument("--per-run", type=int, default=BACKFILL_PARTITIONS_PER_RUN, help="partitions a run")
    parser.add_argument("--no-daemon", action="store_true", help="skip the real daemon backfill")
    parser.add_argument("--skip-in-process", action="store_true", help="skip the in-process runs over all N deploys")
    parser.add_argument("--skip-old-way", action="store_true", help="skip the daemon backfill of one deploy a run")
    parser.add_argument("--runs", type=int, default=2, help="the daemon's max concurrent runs")
    parser.add_argument("--pool", type=int, default=2, help="the pool radar/analysis's limit for the daemon")
    args = parser.parse_args()

    root = Path(tempfile.mkdtemp(prefix="radar-backfill-bench-"))
    server = LocalPostgres(root / "warehouse", settings={"shared_buffers": "512MB", "work_mem": "64MB"}).start()
    try:
        url = server.url(driver="postgresql+psycopg")
        migrations.upgrade(url)
        engine = make_engine(url)
        scrapes = args.deploys * args.spacing + 2 * 60 + 2
        started = time.perf_counter()
        fill(engine, TARGET, args.queries, scrapes, regressed_from=None, seed=2)
        print(f"loaded {args.queries:,} statements × {scrapes:,} scrapes in {time.perf_counter() - started:.1f} s")
        if args.compact:
            started = time.perf_counter()
            days = compact_history(engine, grace=timedelta(0))
            assert days and all(d.error is None for d in days), days
            print(f"compacted {len(days)} days of history in {time.perf_counter() - started:.1f} s")
        csv = root / "deploys.csv"
        keys = [f"h-{i:04d}" for i in range(args.deploys)]
        lines = ["deploy_id,target,deployed_at"] + [
            f"{k},{TARGET},{(START + timedelta(minutes=61 + i * args.spacing)).isoformat()}" for i, k in enumerate(keys)
        ]
        csv.write_text("\n".join(lines) + "\n")
        deploys.import_csv(engine, csv)
        engine.dispose()

        subset = keys[: args.subset]
        bare, bare_together = analysis_alone(url, subset)
        old = one_per_run(url, subset)
        new, _ = ranged_runs(url, subset, args.per_run)
        print(
            f"like for like, {len(subset)} deploys × {args.queries:,} statements in-process: one run per partition "
            f"{old:.1f} s = {len(subset) / old * 60:,.0f} partitions per minute; one ranged run {new:.1f} s = "
            f"{len(subset) / new * 60:,.0f} per minute ({old / new:.1f}×); the analysis alone: analyse_deploy in a "
            f"loop {bare:.1f} s = {len(subset) / bare * 60:,.0f} per minute, analyse_deploys {bare_together:.1f} s = "
            f"{len(subset) / bare_together * 60:,.0f} per minute"
        )
        if not args.skip_in_process:
            took, done = ranged_runs(url, keys, args.per_run)
            print(
                f"in-process, runs of {args.per_run}: {done:,} of {len(keys):,} deploys × {args.queries:,} statements "
                f"in {took:.1f} s = {done / took * 60:,.0f} partitions per minute (one process, one run at a time)"
            )
        print(f"peak memory of this process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
        if not args.no_daemon:
            if not args.skip_old_way:
                daemon_backfill(server, url, subset, root, args.runs, args.pool, 1)  # like for like: the old way
            daemon_backfill(server, url, keys, root, args.runs, args.pool, args.per_run)
    finally:
        server.destroy()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
