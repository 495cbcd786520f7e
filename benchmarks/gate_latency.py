"""Gate latency: from a deploy's window closing to the gate's answer, through a real Dagster daemon.

Run with `.venv/bin/python benchmarks/gate_latency.py [--deploys N] [--spacing S] [--window W]` (defaults: 10 deploys,
44 s apart, windows of 120 s). It starts the embedded default as `radar demo` does (a watched PostgreSQL 18 serving
the shop under its steady workload, radar's own server holding the warehouse and Dagster's storage), with the
project's dagster.yaml as the instance, `dagster code-server start` on radar_pipeline.definitions (every schedule and
sensor of radar, as deployed) and `dagster-daemon run`. Only the window is short (RADAR_WINDOW_SECONDS = W): the
scrapes are the real minutely pgss_snapshot_schedule, and RADAR_SCRAPE_INTERVAL_SECONDS is its default 60.

Once W of scrapes are stored, it records N deploys S seconds apart (S = 44 puts the windows' ends at ten different
seconds of the scrape minute), and for each one measures, from its window's close (deployed_at + W, the warehouse's
clock):

- requested: the run deploy_event_sensor requested for it is created (the sensor's tick);
- started: the run's process has started (the queue, the launch, the process's start-up);
- analysed: radar.analysis holds its analysis (the run's step: the code's load, the analysis);
- answer: `radar gate ID --wait 15m`, started as the deploy is recorded (the console script, with its default poll),
  has exited (seen within 0.2 s); its exit code gives the state.

It prints each deploy's breakdown, the median and the worst, and the load average before and after.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import sqlalchemy as sa

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from daemon_harness import start_code_server, start_daemon, wait_for_daemon  # noqa: E402

from radar_pipeline.demo import environment, workload  # noqa: E402
from radar_pipeline.demo.dev import stop_session  # noqa: E402
from radar_pipeline.demo.local_postgres import free_port  # noqa: E402
from radar_pipeline.warehouse import deploys, migrations  # noqa: E402
from radar_pipeline.warehouse.database import make_engine  # noqa: E402

LOCATION = "from radar_pipeline.definitions import defs  # noqa: F401\n"
POLL_S = 0.2  # how often the gates' processes are looked at
GATE_STATES = {0: "pass", 1: "fail", 3: "inconclusive", 4: "pending", 5: "error"}


@dataclass
class Deploy:
    """One deploy's moments, as seconds after its window closed."""

    deploy_id: str
    closes_at: datetime
    requested: float | None = None
    started: float | None = None
    analysed: float | None = None
    answer: float | None = None
    state: str = "pending"
    gate: subprocess.Popen | None = None


def start_gate(deploy_id: str, env: dict[str, str], folder: Path) -> subprocess.Popen:
    """`radar gate DEPLOY_ID --wait 15m` as a CI job runs it (its answer on stdout, its progress on stderr, in
    `folder`)."""
    radar = str(Path(sys.executable).parent / "radar")
    with (folder / f"gate-{deploy_id}.log").open("w") as log:
        return subprocess.Popen([radar, "gate", deploy_id, "--wait", "15m"], env=env, stdout=log, stderr=log)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deploys", type=int, default=10)
    parser.add_argument("--spacing", type=float, default=44.0, help="seconds between deploys")
    parser.add_argument("--window", type=float, default=120.0, help="RADAR_WINDOW_SECONDS")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="radar-gate-latency-"))
    os.environ[environment.HOME_VAR] = str(root / "home")
    print(f"load average before: {os.getloadavg()[0]:.2f} ({os.cpu_count()} cores)", flush=True)
    embedded = environment.start(fresh=True)
    env = {
        **os.environ,
        **embedded.environment(),
        "RADAR_WINDOW_SECONDS": str(args.window),
        "RADAR_SCRAPE_INTERVAL_SECONDS": "60",
        "RADAR_TOLERANCE_FLOOR_SECONDS": str(min(120.0, args.window)),
        "DAGSTER_GRPC_TIMEOUT_SECONDS": "180",
        "PYTHONPATH": str(ROOT),
    }
    for name in ("RADAR_SLACK_TOKEN", "RADAR_SLACK_CHANNEL", "RADAR_SLACK_WEBHOOK_URL"):
        env.pop(name, None)
    os.environ.update(env)
    home = embedded.dagster_home
    shutil.copy(ROOT / "dagster.yaml", home / "dagster.yaml")  # the project's instance: its pools, its queue
    processes = []
    try:
        migrations.upgrade(env["RADAR_WAREHOUSE_URL"])
        workload.create(embedded.server.dsn(environment.APP_DB))
        with workload.Workload(embedded.server.dsn(environment.APP_DB)):
            processes.append(start_code_server(home, LOCATION, env, port := free_port()))
            processes.append(start_daemon(home, LOCATION, env, port))
            measure(args, env, home, processes[-1])
    finally:
        for process in reversed(processes):
            stop_session(process)
        embedded.stop()
        shutil.rmtree(root, ignore_errors=True)
    print(f"load average after: {os.getloadavg()[0]:.2f}")


def measure(args: argparse.Namespace, env: dict[str, str], home: Path, daemon: object) -> None:
    """Record the deploys once a window of scrapes is stored, follow each to its answer, print the figures."""
    import dagster as dg

    instance = dg.DagsterInstance.get()
    wait_for_daemon(instance, daemon, "SENSOR", home)
    engine = make_engine(env["RADAR_WAREHOUSE_URL"])
    window = timedelta(seconds=args.window)
    first_scrape = None
    waited = time.time()
    while first_scrape is None or _now(engine) < first_scrape + window:
        with engine.connect() as conn:
            first_scrape = conn.execute(sa.text("SELECT min(captured_at) FROM radar.pgss_info_snapshot")).scalar()
        assert time.time() - waited < 600 + args.window, f"no snapshots stored: {home}/daemon.log"
        time.sleep(2)
    print(f"scrapes stored since {first_scrape:%H:%M:%S}; recording {args.deploys} deploys", flush=True)
    pending: list[Deploy] = []
    followed: list[Deploy] = []
    stamp = datetime.now(UTC).strftime("%H%M%S")
    next_at = time.time()
    try:
        while len(followed) < args.deploys or pending:
            if len(followed) < args.deploys and time.time() >= next_at:
                deploy_id = f"bench-{stamp}-{len(followed):02d}"
                recorded = deploys.record(engine, deploys.DeployEvent(deploy_id=deploy_id, target=environment.TARGET))
                assert recorded.event.deployed_at is not None
                d = Deploy(deploy_id, recorded.event.deployed_at + window, gate=start_gate(deploy_id, env, home))
                followed.append(d)
                pending.append(d)
                next_at += args.spacing
            exited = [d for d in pending if d.gate is not None and d.gate.poll() is not None]
            if exited:
                now = _now(engine)
                for d in exited:
                    code = d.gate.returncode  # type: ignore[union-attr]
                    d.state = GATE_STATES.get(code, f"exit {code}")
                    if code in (0, 1, 3):  # an answer; 4 (still pending after 15 minutes) and 5 (an error) are none
                        d.answer = (now - d.closes_at).total_seconds()
                    pending.remove(d)
            time.sleep(POLL_S)
    finally:  # a gate still waiting when this stops is stopped with it
        for d in pending:
            if d.gate is not None and d.gate.poll() is None:
                d.gate.kill()
    for d in followed:
        if d.answer is None:
            lines = (home / f"gate-{d.deploy_id}.log").read_text().splitlines()
            print(f"{d.deploy_id}: {d.state}: {lines[-1] if lines else 'the gate printed nothing'}")
    _fill_breakdown(instance, engine, followed)
    _report(followed)
    engine.dispose()
    instance.dispose()


def _now(engine: sa.Engine) -> datetime:
    with engine.connect() as conn:
        return conn.execute(sa.text("SELECT now()")).scalar_one()


def _fill_breakdown(instance: object, engine: sa.Engine, followed: list[Deploy]) -> None:
    """Each deploy's run (created, started) from Dagster's run storage and its analysis time from the warehouse."""
    import dagster as dg

    for d in followed:
        records = instance.get_run_records(  # type: ignore[attr-defined]
            dg.RunsFilter(tags={"dagster/partition": d.deploy_id, "dagster/sensor_name": "deploy_event_sensor"})
        )
        if records:
            record = min(records, key=lambda r: r.create_timestamp)
            closes = d.closes_at.timestamp()
            d.requested = record.create_timestamp.timestamp() - closes
            d.started = record.start_time - closes if record.start_time else None
        with engine.connect() as conn:
            analysed = conn.execute(
                sa.text("SELECT min(analysed_at) FROM radar.analysis WHERE deploy_id = :d"), {"d": d.deploy_id}
            ).scalar()
        d.analysed = (analysed - d.closes_at).total_seconds() if analysed else None


def _report(followed: list[Deploy]) -> None:
    def cell(value: float | None) -> str:
        return f"{value:6.1f}" if value is not None else "     -"

    print("deploy                     state          requested started analysed  answer  (s after the window closed)")
    for d in followed:
        print(
            f"{d.deploy_id:26} {d.state:14} {cell(d.requested)}  {cell(d.started)}  {cell(d.analysed)}  "
            f"{cell(d.answer)}"
        )
    answers = [d.answer for d in followed if d.answer is not None]
    if len(answers) < len(followed):
        print(f"{len(followed) - len(answers)} deploys had no answer (their gate's last line is above)")
    if not answers:
        return
    parts = {
        "close → requested": [d.requested for d in followed],
        "requested → started": [_diff(d.started, d.requested) for d in followed],
        "started → analysed": [_diff(d.analysed, d.started) for d in followed],
        "analysed → answer": [_diff(d.answer, d.analysed) for d in followed],
    }
    print(f"close → answer: median {statistics.median(answers):.1f} s, worst {max(answers):.1f} s ({len(answers)})")
    for name, values in parts.items():
        known = [v for v in values if v is not None]
        if known:
            print(f"  {name}: median {statistics.median(known):.1f} s, worst {max(known):.1f} s")


def _diff(later: float | None, earlier: float | None) -> float | None:
    return later - earlier if later is not None and earlier is not None else None


if __name__ == "__main__":
    main()
