"""A real Dagster daemon for the benchmarks: started on a code location of the benchmark's own, and its processes'
CPU and memory read from /proc (the daemon, the code server, and the run processes that server starts).

The code location is served one of two ways. `start_daemon` alone loads it as a python_module: the daemon starts a
code server of its own, and starts a new one every minute (it refreshes its workspace every 60 s), each loading the
code again. `start_code_server` serves it from a process of its own, as a deployment does (`dagster code-server
start`, the command Dagster's Helm chart runs), and `start_daemon(..., port=…)` points the daemon at it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

# The daemon's processes by a mark in their command line: each run is a process the code server spawns.
PROCESS_KINDS = [
    (b"spawn_main", "run process"),
    (b"dagster api", "code server"),
    (b"code-server start", "code server proxy"),
    (b"dagster-daemon", "daemon"),
]
LOCATION_MODULE = "bench_location"
CLOCK_TICK = os.sysconf("SC_CLK_TCK")


def start_code_server(folder: Path, location: str, env: dict[str, str], port: int) -> subprocess.Popen:
    """Write `location` (Python source defining `defs`) as the module bench_location in `folder` and serve it with
    `dagster code-server start` on 127.0.0.1:`port`, in a session of its own (output in folder/code_server.log);
    returns once the code is loaded."""
    from dagster._grpc.client import DagsterGrpcClient

    (folder / f"{LOCATION_MODULE}.py").write_text(location)
    command = [str(Path(sys.executable).parent / "dagster"), "code-server", "start", "-h", "127.0.0.1", "-p", str(port)]
    command += ["-m", LOCATION_MODULE, "-d", str(folder), "--location-name", "bench"]
    server = _start(command, folder, env, "code_server.log")
    client = DagsterGrpcClient(port=port, host="127.0.0.1")
    waited = time.time()
    while True:
        try:
            client.list_repositories()
            return server
        except Exception:  # not listening yet, or still loading the code
            assert server.poll() is None and time.time() - waited < 300, f"no code server: {folder}/code_server.log"
            time.sleep(1)


def start_daemon(folder: Path, location: str, env: dict[str, str], port: int | None = None) -> subprocess.Popen:
    """Start `dagster-daemon run` in `folder`, in a session of its own (output in folder/daemon.log), on the code
    server at 127.0.0.1:`port`, or without a port on `location` (Python source defining `defs`) written to `folder` as
    the module bench_location and loaded as a python_module. `env` must name DAGSTER_HOME."""
    if port is None:
        (folder / f"{LOCATION_MODULE}.py").write_text(location)
        source = f"python_module:\n      module_name: {LOCATION_MODULE}\n      working_directory: {folder}\n"
    else:
        source = f"grpc_server:\n      host: 127.0.0.1\n      port: {port}\n"
    (folder / "workspace.yaml").write_text(f"load_from:\n  - {source}      location_name: bench\n")
    command = [str(Path(sys.executable).parent / "dagster-daemon"), "run", "-w", str(folder / "workspace.yaml")]
    return _start(command, folder, env, "daemon.log")


def _start(command: list[str], folder: Path, env: dict[str, str], log: str) -> subprocess.Popen:
    path = os.pathsep.join(filter(None, [str(folder), env.get("PYTHONPATH")]))
    return subprocess.Popen(
        command,
        env={**env, "DAGSTER_DISABLE_TELEMETRY": "1", "PYTHONPATH": path},
        cwd=folder,
        stdout=open(folder / log, "w"),  # noqa: SIM115
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def wait_for_daemon(instance: object, daemon: subprocess.Popen, kind: str, folder: Path) -> None:
    """Wait until the daemon of `kind` (e.g. SCHEDULER, BACKFILL) beats: the workspace loaded, the daemons running."""
    waited = time.time()
    while kind not in instance.get_daemon_heartbeats():  # type: ignore[attr-defined]
        assert daemon.poll() is None and time.time() - waited < 300, f"the daemon did not start: {folder}/daemon.log"
        time.sleep(1)


def processes() -> dict[int, list[str]]:
    """Every process's /proc/<pid>/stat fields after the command name, by PID."""
    found = {}
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                found[int(proc.name)] = (proc / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
    return found


def under(root_pid: int, table: dict[int, list[str]]) -> list[int]:
    """root_pid and every process below it."""
    parents = {pid: int(fields[1]) for pid, fields in table.items()}
    mine = []
    for pid in parents:
        ancestor = pid
        while ancestor not in (root_pid, 0, 1) and ancestor in parents:
            ancestor = parents[ancestor]
        if ancestor == root_pid:
            mine.append(pid)
    return mine


def tree_cpu(root_pid: int) -> float:
    """CPU-seconds (user + system, with reaped children's) of a process and everything under it. A child's time moves
    into its parent's reaped-children fields when it ends, so the sum runs on across exits (a process orphaned to init
    before it ends would be lost; Dagster's and PostgreSQL's are not)."""
    table = processes()
    return sum(sum(int(v) for v in table[pid][11:15]) for pid in under(root_pid, table)) / CLOCK_TICK


def peak_memory(root_pid: int, peaks: dict[str, int]) -> None:
    """Record in `peaks` the peak resident set (VmHWM, KiB) of every Dagster process under root_pid, by kind."""
    for pid in under(root_pid, processes()):
        try:
            command = (Path("/proc") / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ")
            status = (Path("/proc") / str(pid) / "status").read_text()
        except OSError:
            continue
        kind = next((name for mark, name in PROCESS_KINDS if mark in command), None)
        for line in status.splitlines():
            if kind and line.startswith("VmHWM:"):
                peaks[kind] = max(peaks.get(kind, 0), int(line.split()[1]))
