"""`radar dev`: the Dagster UI (webserver and daemon, through `dagster dev`) on the embedded default or on the
databases the environment configures.

With RADAR_WAREHOUSE_URL unset, it starts the embedded servers under RADAR_HOME, as `radar demo` left them, so the
demo's runs, partitions, asset checks and metadata are there to look at.

Stopping: Ctrl-C or SIGTERM. `dagster dev` runs in a session of its own with SIGINT and SIGTERM at their defaults
(a process started with SIGINT ignored, as `nohup … &` and some supervisors do, passes that on to its children, and
`dagster dev` would then never stop). On either signal `dagster dev` alone gets SIGINT, and shuts its webserver and
daemon down over their shutdown pipes (the daemon stops launching runs first; a run being launched is not interrupted
half-way, as SIGINT to the whole group would); SIGTERM and SIGKILL to its process group follow if it lingers; then
whatever is left of its session (the code server, a run) is ended, and only then are the embedded servers stopped, so
nothing is left running and nothing complains about a database that went away.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from radar_pipeline.config import ConfigError
from radar_pipeline.config.settings import settings, validate_environment
from radar_pipeline.demo import environment

WORKSPACE = Path(__file__).resolve().parents[2] / "workspace.yaml"
STOP_GRACE_S = 20.0  # how long dagster dev gets to shut its webserver, daemon and code server down
TERM_GRACE_S = 5.0
SUPERSEDED_WARNING = "ignore:Function `dev_command` is superseded"
# Requests to the code server (launching a run, evaluating a schedule) may take this long before they fail, not
# Dagster's 60 s, which a busy machine exceeded (dagster.yaml says more).
GRPC_TIMEOUT_S = "180"


def main(host: str = "127.0.0.1", port: int = 3000) -> int:
    """Run `dagster dev` until it stops or radar dev is told to stop; returns its exit status. Raises ConfigError
    before Dagster starts (the embedded servers stopped again) on a RADAR_* setting the code location would refuse:
    Dagster's webserver and daemon read dagster.yaml's postgres_url (RADAR_DAGSTER_PG_URL) before it loads, and would
    print the part of a password they cut at an unencoded @."""
    embedded = None
    env = os.environ.copy()
    if settings("warehouse_url", environ=env).warehouse_url is None:
        embedded = environment.start(fresh=False)
        env.update(embedded.environment())
        print(f"radar dev: the warehouse, while this runs: {environment.psql_command(embedded)}", file=sys.stderr)
    try:
        validate_environment(env)
    except ConfigError:
        if embedded is not None:
            embedded.stop()
        raise
    env.setdefault("DAGSTER_DISABLE_TELEMETRY", "1")
    env.setdefault("DAGSTER_GRPC_TIMEOUT_SECONDS", GRPC_TIMEOUT_S)
    # `dagster dev` warns that it is superseded by `dg dev`, of a package radar does not use: nothing to act on.
    env["PYTHONWARNINGS"] = ",".join(filter(None, [env.get("PYTHONWARNINGS"), SUPERSEDED_WARNING]))
    if "DAGSTER_HOME" not in env:
        raise SystemExit("DAGSTER_HOME is not set: point it at a folder with a dagster.yaml (see docs/databases.md)")
    target = ["-w", str(WORKSPACE)] if WORKSPACE.exists() else ["-m", "radar_pipeline.definitions"]
    command = [str(Path(sys.executable).parent / "dagster"), "dev", *target, "-h", host, "-p", str(port)]
    stopping: list[int] = []
    started: list[subprocess.Popen] = []

    def stop_asked(signum: int, frame: object) -> None:
        # Only pass the signal on here: waiting inside a signal handler would deadlock with the wait below.
        stopping.append(signum)
        for process in started:
            _signal(process.pid, signal.SIGINT)

    previous = {s: signal.signal(s, stop_asked) for s in (signal.SIGINT, signal.SIGTERM)}
    child = subprocess.Popen(
        command,
        env=env,
        # Dagster's home as the working folder: a dagster.yaml in the folder radar dev was started from would
        # otherwise be reported as ignored.
        cwd=env["DAGSTER_HOME"],
        start_new_session=True,
        preexec_fn=_default_signals,
    )
    started.append(child)
    try:
        status = child.wait()
        return 0 if stopping else status
    finally:
        stop_session(child)
        for s, handler in previous.items():
            signal.signal(s, handler)
        if embedded is not None:
            embedded.stop()
            print("radar dev stopped; the embedded servers are stopped too.", file=sys.stderr)


def _default_signals() -> None:
    """In the child, before exec: SIGINT and SIGTERM at their defaults, whatever radar dev inherited."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def stop_session(child: subprocess.Popen) -> None:
    """Stop dagster dev (SIGINT to it, then SIGTERM and SIGKILL to its process group), then end every process still
    in its session: the children it started and did not stop."""
    for signum, grace in ((signal.SIGINT, STOP_GRACE_S), (signal.SIGTERM, TERM_GRACE_S), (signal.SIGKILL, 5.0)):
        if child.poll() is not None:
            break
        (_signal if signum == signal.SIGINT else _signal_group)(child.pid, signum)
        try:
            child.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            continue
    left = _session_members(child.pid)
    for pid in left:
        _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + TERM_GRACE_S
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = [pid for pid in left if _alive(pid)]
    for pid in left:
        _signal(pid, signal.SIGKILL)


def _session_members(session: int) -> list[int]:
    """The processes (other than zombies) whose session is `session`."""
    members = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.getsid(int(entry.name)) == session and _alive(int(entry.name)):
                    members.append(int(entry.name))
            except (ProcessLookupError, PermissionError):
                continue
    return members


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _signal_group(pgid: int, signum: int) -> None:
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except (ProcessLookupError, PermissionError):
        pass
