"""A real Dagster daemon for the benchmarks: started on a code location of the benchmark's own, and its processes'
CPU and memory read from /proc (the daemon, the code server it starts, and the run processes that server starts)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

# The daemon's processes by a mark in their command line: each run is a process the code server spawns.
PROCESS_KINDS = [(b"spawn_main", "run process"), (b"dagster api", "code server"), (b"dagster-daemon", "daemon")]
CLOCK_TICK = os.sysconf("SC_CLK_TCK")


def start_daemon(folder: Path, location: str, env: dict[str, str]) -> subprocess.Popen:
    """Write `location` (Python source defining `defs`) as the module bench_location in `folder` with a workspace.yaml
    that loads it, and start `dagster-daemon run` there in a session of its own (output in folder/daemon.log). `env`
    must name DAGSTER_HOME; `folder` goes first on PYTHONPATH."""
    (folder / "bench_location.py").write_text(location)
    (folder / "workspace.yaml").write_text(
        "load_from:\n  - python_module:\n      module_name: bench_location\n      location_name: bench\n"
        f"      working_directory: {folder}\n"
    )
    path = os.pathsep.join(filter(None, [str(folder), env.get("PYTHONPATH")]))
    return subprocess.Popen(
        [str(Path(sys.executable).parent / "dagster-daemon"), "run", "-w", str(folder / "workspace.yaml")],
        env={**env, "DAGSTER_DISABLE_TELEMETRY": "1", "PYTHONPATH": path},
        cwd=folder,
        stdout=open(folder / "daemon.log", "w"),  # noqa: SIM115
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
