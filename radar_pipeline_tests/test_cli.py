"""The commands a user types: `radar db upgrade`, then Dagster's own CLI materialising pgss_snapshots."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import sqlalchemy as sa

from radar_pipeline.warehouse.database import make_engine

from .helpers import run

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def _cli(args: list[str], env: dict[str, str], cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run(
        args,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **env, "DAGSTER_DISABLE_TELEMETRY": "1"},
    )


def test_db_upgrade_then_dagster_materialize_writes_snapshot_rows(pg18, app_db, tmp_path):
    server, target = app_db
    warehouse_db = pg18.new_database("cli_warehouse")
    dagster_db = pg18.new_database("cli_dagster")
    try:
        env = {
            "RADAR_WAREHOUSE_URL": pg18.pg.url(warehouse_db),
            "RADAR_TARGETS": f"{target.name}={target.dsn}",
            "RADAR_DAGSTER_PG_URL": pg18.pg.url(dagster_db, driver="postgresql+psycopg2"),
        }
        first = _cli([str(BIN / "radar"), "db", "upgrade"], env)
        assert first.returncode == 0, first.stderr
        every = sorted(p.stem for p in (REPO / "sql").glob("*.sql"))
        assert f"applied {len(every)} migration(s): {', '.join(every)}" in first.stdout
        again = _cli([str(BIN / "radar"), "db", "upgrade"], env)
        assert again.returncode == 0 and "up to date" in again.stdout

        run(target, "SELECT count(*) FROM items WHERE grp = %s", 3, (2,))
        mat = _cli(
            [
                str(BIN / "dagster"),
                "asset",
                "materialize",
                "-m",
                "radar_pipeline.definitions",
                "--select",
                "pgss_snapshots",
            ],
            env,
        )
        assert mat.returncode == 0, mat.stderr[-3000:]
        engine = make_engine(env["RADAR_WAREHOUSE_URL"])
        with engine.connect() as conn:
            rows = conn.execute(
                sa.text("SELECT count(*) FROM radar.pgss_snapshot WHERE target = :t"), {"t": target.name}
            )
            assert rows.scalar_one() > 0
        engine.dispose()
    finally:
        pg18.drop_database(warehouse_db)
        pg18.drop_database(dagster_db)


def test_db_upgrade_errors_name_the_variable_and_hide_the_password(pg18, tmp_path):
    nowhere = {"RADAR_WAREHOUSE_URL": "", "RADAR_HOME": str(tmp_path / "no-demo-here")}  # no embedded warehouse either
    missing = _cli([str(BIN / "radar"), "db", "upgrade"], nowhere)
    assert missing.returncode != 0 and "RADAR_WAREHOUSE_URL is not set" in missing.stderr
    bad = _cli([str(BIN / "radar"), "db", "upgrade"], {"RADAR_WAREHOUSE_URL": "mysql://u:hunter2@h/db"})
    assert bad.returncode != 0 and "RADAR_WAREHOUSE_URL must be a postgresql" in bad.stderr
    down = _cli(
        [str(BIN / "radar"), "db", "upgrade"],
        {"RADAR_WAREHOUSE_URL": f"postgresql://u:hunter2@127.0.0.1:{pg18.pg.port}/no_such_db"},
    )
    assert down.returncode != 0 and "failed" in down.stderr
    assert "hunter2" not in bad.stderr + down.stderr + down.stdout


def test_db_upgrade_works_from_a_wheel_installed_outside_the_checkout(pg18, tmp_path):
    """The wheel carries sql/ (as radar_pipeline/sql), the queries/*.sql files and py.typed; installed in a virtual
    environment of its own (dependencies from the shared one), `radar db upgrade` applies every migration from
    anywhere."""
    import shutil
    import sysconfig

    source = tmp_path / "source"  # a copy: pip builds in the tree, and a build/ left there would feed later wheels
    source.mkdir()
    for name in ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "LICENSE"):
        shutil.copy(REPO / name, source / name)
    for folder in ("sql", "radar_pipeline"):
        shutil.copytree(REPO / folder, source / folder, ignore=shutil.ignore_patterns("__pycache__"))
    wheels = tmp_path / "wheels"
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), str(source)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert build.returncode == 0, build.stderr[-2000:]
    (wheel,) = wheels.glob("radar_pipeline-*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    clean = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("RADAR_")}
    install = subprocess.run(  # without PYTHONPATH: the checkout on the path would count as installed already
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "-q", str(wheel)],
        capture_output=True,
        text=True,
        timeout=300,
        env=clean,
    )
    assert install.returncode == 0, install.stderr[-2000:]
    # only now the shared dependencies (before, pip would have taken the checkout's editable install for this one)
    (Path(site) / "shared_dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    where = subprocess.run(
        [
            str(python),
            "-c",
            "import radar_pipeline, pathlib; p = pathlib.Path(radar_pipeline.__file__).parent; "
            "print(p, (p / 'py.typed').exists(), len(list((p / 'sql').glob('*.sql'))), "
            "len(list(p.rglob('queries/*.sql'))))",
        ],
        capture_output=True,
        text=True,
        cwd=outside,
        env=clean,
        check=True,
    ).stdout.split()
    shipped = sorted(p.name for p in (REPO / "sql").glob("*.sql"))
    queries = len(list((REPO / "radar_pipeline").rglob("queries/*.sql")))
    assert where[0].startswith(str(venv)) and where[1] == "True" and int(where[2]) == len(shipped)
    assert int(where[3]) == queries > 0, "the queries/*.sql files are not in the wheel"
    database = pg18.new_database("wheel")
    try:
        proc = subprocess.run(
            [str(venv / "bin" / "radar"), "db", "upgrade", "--warehouse", pg18.pg.url(database)],
            capture_output=True,
            text=True,
            cwd=outside,
            env=clean,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert f"applied {len(shipped)} migration(s)" in proc.stdout
    finally:
        pg18.drop_database(database)
