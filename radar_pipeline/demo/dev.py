"""`radar dev`: the Dagster UI (webserver and daemon, through `dagster dev`) on the embedded default or on the
databases the environment configures.

With RADAR_WAREHOUSE_URL unset, it starts the embedded PostgreSQL under RADAR_HOME, as `radar demo` left it, so the
demo's runs, partitions, asset checks and metadata are there to look at. `dagster dev` runs in a process group of its
own; Ctrl-C (or SIGTERM) is passed on to the whole group, then the embedded server is stopped.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from radar_pipeline.demo import environment

WORKSPACE = Path(__file__).resolve().parents[2] / "workspace.yaml"
STOP_GRACE_S = 30


def main(host: str = "127.0.0.1", port: int = 3000) -> int:
    """Run `dagster dev` until interrupted; returns its exit status."""
    embedded = None
    env = os.environ.copy()
    if not env.get("RADAR_WAREHOUSE_URL"):
        embedded = environment.start(fresh=False)
        env.update(embedded.environment())
    env.setdefault("DAGSTER_DISABLE_TELEMETRY", "1")
    if "DAGSTER_HOME" not in env:
        raise SystemExit("DAGSTER_HOME is not set: point it at a folder with a dagster.yaml (see README)")
    target = ["-w", str(WORKSPACE)] if WORKSPACE.exists() else ["-m", "radar_pipeline.definitions"]
    command = [str(Path(sys.executable).parent / "dagster"), "dev", *target, "-h", host, "-p", str(port)]
    child = subprocess.Popen(command, env=env, start_new_session=True)

    def forward(signum: int, frame: object) -> None:
        # Only pass the signal on here: waiting inside a signal handler would deadlock with the wait below.
        try:
            os.killpg(child.pid, signal.SIGINT)
        except ProcessLookupError:
            pass

    previous = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        return child.wait()
    finally:
        _stop_group(child)
        for s, handler in previous.items():
            signal.signal(s, handler)
        if embedded is not None:
            embedded.stop()


def _stop_group(child: subprocess.Popen) -> None:
    """SIGINT to dagster dev's process group (it shuts its webserver and daemon down), SIGKILL if it lingers."""
    if child.poll() is not None:
        return
    try:
        os.killpg(child.pid, signal.SIGINT)
        child.wait(timeout=STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()
    except ProcessLookupError:
        pass
