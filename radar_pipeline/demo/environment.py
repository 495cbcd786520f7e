"""The embedded default: two embedded PostgreSQL 18 servers, the watched one (the shop) and radar's own (the
warehouse and Dagster's storage), as a deployment would have them: radar's own statements never show among the
shop's.

Everything lives under RADAR_HOME (default ./.radar): the servers' data directories, Dagster's home (its dagster.yaml
points Dagster's storage at radar's server), and the charts. Time is compressed through the same settings a
deployment uses (RADAR_WINDOW_SECONDS, RADAR_SCRAPE_INTERVAL_SECONDS, RADAR_TOLERANCE_FLOOR_SECONDS), and the periodic
partitions start at the hour the embedded default was created.
"""

from __future__ import annotations

import atexit
import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import psycopg

from radar_pipeline.demo.local_postgres import LocalPostgres

APP_DB, WAREHOUSE_DB, DAGSTER_DB = "shop", "radar", "dagster"
COLLECTOR_ROLE = "radar_collector"
TARGET = "shop"
SERVERS = {"watched": "postgres", "radar": "postgres-radar"}  # data directories under RADAR_HOME
STATE_FILE = "servers.json"  # their ports, and when this RADAR_HOME was created
# Dagster's instance for the embedded default: storage on radar's own server, no telemetry, and the same tick retention
# as the repository's dagster.yaml (a test holds the two together).
INSTANCE_YAML = """storage:
  postgres:
    postgres_url:
      env: RADAR_DAGSTER_PG_URL
telemetry:
  enabled: false
retention:
  schedule:
    purge_after_days: 7
  sensor:
    purge_after_days:
      skipped: 1
      failure: 30
      success: 7
run_monitoring:
  enabled: true
  start_timeout_seconds: 600
  poll_interval_seconds: 60
code_servers:
  local_startup_timeout: 360
  reload_timeout: 360
"""
COMPRESSED = {
    "RADAR_WINDOW_SECONDS": "30",
    "RADAR_SCRAPE_INTERVAL_SECONDS": "2",
    "RADAR_TOLERANCE_FLOOR_SECONDS": "4",
}


@dataclass
class Embedded:
    """The running embedded servers and the settings that point radar at them."""

    home: Path
    server: LocalPostgres  # the watched server: the shop
    radar: LocalPostgres  # radar's own: the warehouse and Dagster's storage
    created: datetime  # when this RADAR_HOME was made: the periodic partitions start at its hour

    @property
    def dagster_home(self) -> Path:
        """Dagster's home for the embedded default: its dagster.yaml points storage at the embedded server."""
        return self.home / "dagster"

    @property
    def charts(self) -> Path:
        """Where regression charts are written."""
        return self.home / "charts"

    def environment(self) -> dict[str, str]:
        """The variables a deployment would set, for this embedded default."""
        return {
            "RADAR_WAREHOUSE_URL": self.radar.url(WAREHOUSE_DB, driver="postgresql+psycopg"),
            "RADAR_TARGETS": f"{TARGET}={self.server.url(APP_DB, user=COLLECTOR_ROLE)}",
            "RADAR_COLLECTOR_ROLE": COLLECTOR_ROLE,
            "RADAR_DAGSTER_PG_URL": self.radar.url(DAGSTER_DB, driver="postgresql+psycopg2"),
            "RADAR_PERIODIC_START": self.created.strftime("%Y-%m-%d-%H:00"),
            "RADAR_CHART_DIR": str(self.charts),
            "DAGSTER_HOME": str(self.dagster_home),
            "DAGSTER_DISABLE_TELEMETRY": "1",
            **COMPRESSED,
        }

    def stop(self) -> None:
        """Stop the embedded servers (their data stays for `radar dev`)."""
        self.server.stop()
        self.radar.stop()


def psql_command(embedded: Embedded) -> str:
    """How to open the embedded warehouse with psql: psql (from PATH, else the embedded PostgreSQL's own) and its
    URL. Nothing secret is in it: the embedded servers listen on loopback only, with trust authentication."""
    found = shutil.which("psql")
    return f"{'psql' if found else embedded.radar.bin_dir / 'psql'} {embedded.radar.url(WAREHOUSE_DB)}"


def home() -> Path:
    """RADAR_HOME, or .radar in the current folder."""
    from radar_pipeline.config.settings import settings

    return (settings("home").home or Path(".radar")).resolve()


def start(fresh: bool) -> Embedded:
    """Start the embedded servers under RADAR_HOME (wiped first when `fresh`), with their databases."""
    root = home()
    saved = _saved(root)
    if fresh:
        for name, folder in SERVERS.items():
            previous = LocalPostgres(root / folder, port=int(saved.get(name) or 0))
            if previous.pid is not None:
                previous.stop()
        shutil.rmtree(root, ignore_errors=True)
        saved = {}
    root.mkdir(parents=True, exist_ok=True)
    servers = {
        name: (LocalPostgres(root / folder, port=int(saved[name])) if saved.get(name) else LocalPostgres(root / folder))
        for name, folder in SERVERS.items()
    }
    created = datetime.fromisoformat(saved["created"]) if saved.get("created") else datetime.now(UTC)
    for server in servers.values():
        server.start()
    (root / STATE_FILE).write_text(
        json.dumps({**{name: server.port for name, server in servers.items()}, "created": created.isoformat()})
    )
    _create_databases(servers["watched"], [APP_DB])
    _create_collector_role(servers["watched"])
    _create_databases(servers["radar"], [WAREHOUSE_DB, DAGSTER_DB])
    embedded = Embedded(root, servers["watched"], servers["radar"], created)
    embedded.dagster_home.mkdir(parents=True, exist_ok=True)
    (embedded.dagster_home / "dagster.yaml").write_text(INSTANCE_YAML)
    return embedded


def _create_databases(server: LocalPostgres, names: list[str]) -> None:
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        existing = {r[0] for r in conn.execute("SELECT datname FROM pg_database")}
        for name in names:
            if name not in existing:
                conn.execute(f'CREATE DATABASE "{name}"')


def _create_collector_role(server: LocalPostgres) -> None:
    """The collector's own role on the watched server, as docs/databases.md sets it up (plan capture refuses to run as a
    superuser), with the shop's table privileges its plans of DML need."""
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        conn.execute(
            f"DO $$ BEGIN CREATE ROLE {COLLECTOR_ROLE} LOGIN IN ROLE pg_read_all_stats; "
            "EXCEPTION WHEN duplicate_object THEN NULL; END $$"
        )
    with psycopg.connect(server.dsn(APP_DB), autocommit=True) as conn:
        conn.execute(
            "ALTER DEFAULT PRIVILEGES IN SCHEMA public "
            f"GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO {COLLECTOR_ROLE}"
        )


def _saved(root: Path) -> dict[str, str]:
    """The ports and creation time the last start recorded (nothing when there was none)."""
    try:
        saved = json.loads((root / STATE_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): str(v) for k, v in saved.items()} if isinstance(saved, dict) else {}


def existing_warehouse(say: Callable[[str], None]) -> str | None:
    """The URL of the warehouse the embedded default keeps under RADAR_HOME, for commands run with no warehouse
    configured: None when `radar demo` has not made one there. A stopped server is started (and `say` tells so), and
    stopped again when the process exits."""
    root = home()
    saved = _saved(root)
    folder = root / SERVERS["radar"]
    if not saved.get("radar") or not (folder / "PG_VERSION").exists():
        return None
    server = LocalPostgres(folder, port=int(saved["radar"]))
    if server.pid is None:
        say(f"starting the embedded warehouse under {root} (stopped again when this command ends)")
        server.start()
        atexit.register(server.stop)
    return server.url(WAREHOUSE_DB, driver="postgresql+psycopg")
