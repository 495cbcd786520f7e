"""`radar demo` on a fresh RADAR_HOME: it finds the regression, leaves the controls alone, stops its server, and runs
again."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psutil

BIN = Path(sys.executable).parent


def _postgres_under(folder: Path) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["name", "cmdline"]):
        if proc.info["name"] == "postgres" and any(str(folder) in part for part in proc.info["cmdline"] or []):
            found.append(proc)
    return found


def test_radar_demo_finds_the_regression_twice_and_leaves_nothing_running(tmp_path):
    home = tmp_path / "radar-home"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RADAR_", "DAGSTER_"))}
    env["RADAR_HOME"] = str(home)
    for attempt in (1, 2):
        proc = subprocess.run(
            [str(BIN / "radar"), "demo"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
        )
        out = proc.stdout + proc.stderr
        assert proc.returncode == 0, f"run {attempt}:\n{out[-4000:]}"
        assert "SELECT id, total, status FROM orders WHERE customer_id = $1" in out
        assert "cause: plan_changed" in out
        assert "Seq Scan on orders" in out
        assert "alert: 1 skipped" in out
        charts = list((home / "charts" / "shop-v2").glob("*.png"))
        assert len(charts) == 1 and charts[0].read_bytes()[:4] == b"\x89PNG"
        assert not _postgres_under(home), f"run {attempt} left PostgreSQL running"
