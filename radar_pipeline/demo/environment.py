"""The embedded default: one embedded PostgreSQL 18 as the watched database, the warehouse and Dagster's storage.

Everything lives under RADAR_HOME (default ./.radar): the server's data directory, Dagster's home (its dagster.yaml
points Dagster's storage at the embedded server), and the charts. Time is compressed through the same settings a
deployment uses (RADAR_WINDOW_SECONDS, RADAR_SCRAPE_INTERVAL_SECONDS, RADAR_TOLERANCE_FLOOR_SECONDS).
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import psycopg

from radar_pipeline.demo.local_postgres import LocalPostgres

HOME_VAR = "RADAR_HOME"
APP_DB, WAREHOUSE_DB, DAGSTER_DB = "shop", "radar", "dagster"
COLLECTOR_ROLE = "radar_collector"
TARGET = "shop"
COMPRESSED = {
    "RADAR_WINDOW_SECONDS": "30",
    "RADAR_SCRAPE_INTERVAL_SECONDS": "2",
    "RADAR_TOLERANCE_FLOOR_SECONDS": "4",
}


@dataclass
class Embedded:
    """The running embedded server and the settings that point radar at it."""

    home: Path
    server: LocalPostgres

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
            "RADAR_WAREHOUSE_URL": self.server.url(WAREHOUSE_DB, driver="postgresql+psycopg"),
            "RADAR_TARGETS": f"{TARGET}={self.server.url(APP_DB, user=COLLECTOR_ROLE)}",
            "RADAR_COLLECTOR_ROLE": COLLECTOR_ROLE,
            "RADAR_DAGSTER_PG_URL": self.server.url(DAGSTER_DB, driver="postgresql+psycopg2"),
            "RADAR_CHART_DIR": str(self.charts),
            "DAGSTER_HOME": str(self.dagster_home),
            "DAGSTER_DISABLE_TELEMETRY": "1",
            **COMPRESSED,
        }

    def stop(self) -> None:
        """Stop the embedded server (its data stays for `radar dev`)."""
        self.server.stop()


def home() -> Path:
    """RADAR_HOME, or .radar in the current folder."""
    return Path(os.environ.get(HOME_VAR) or ".radar").resolve()


def start(fresh: bool) -> Embedded:
    """Start the embedded server under RADAR_HOME (wiped first when `fresh`), with its three databases."""
    root = home()
    data = root / "postgres"
    if fresh:
        previous = LocalPostgres(data, port=_saved_port(root) or 0)
        if previous.pid is not None:
            previous.stop()
        shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True, exist_ok=True)
    port = _saved_port(root)
    server = (LocalPostgres(data, port=port) if port else LocalPostgres(data)).start()
    (root / "port.json").write_text(json.dumps({"port": server.port}))
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        existing = {r[0] for r in conn.execute("SELECT datname FROM pg_database")}
        for name in (APP_DB, WAREHOUSE_DB, DAGSTER_DB):
            if name not in existing:
                conn.execute(f'CREATE DATABASE "{name}"')
        # the collector's own role, as the README sets it up: plan capture refuses to run as a superuser
        conn.execute(
            f"DO $$ BEGIN CREATE ROLE {COLLECTOR_ROLE} LOGIN IN ROLE pg_read_all_stats; "
            "EXCEPTION WHEN duplicate_object THEN NULL; END $$"
        )
    with psycopg.connect(server.dsn(APP_DB), autocommit=True) as conn:
        conn.execute(
            "ALTER DEFAULT PRIVILEGES IN SCHEMA public "
            f"GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO {COLLECTOR_ROLE}"
        )
    embedded = Embedded(root, server)
    embedded.dagster_home.mkdir(parents=True, exist_ok=True)
    (embedded.dagster_home / "dagster.yaml").write_text(
        "storage:\n  postgres:\n    postgres_url:\n      env: RADAR_DAGSTER_PG_URL\ntelemetry:\n  enabled: false\n"
    )
    return embedded


def _saved_port(root: Path) -> int | None:
    try:
        return int(json.loads((root / "port.json").read_text())["port"])
    except (OSError, ValueError, KeyError):
        return None
