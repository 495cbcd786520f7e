"""Passwords a URL setting cannot mask are refused at load, and no part of one reaches the `radar` command's output.

An unencoded @ in a warehouse password made the drivers take the part after it for the host name, which their errors
print; a space in a RADAR_TARGETS password cut the item there, and the errors quoted the part before it.
"""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from radar_pipeline.cli import main
from radar_pipeline.config import ConfigError
from radar_pipeline.config.settings import validate_environment
from radar_pipeline.demo.local_postgres import free_port

PIECES = ("Kq7z", "Wx4v")  # the two halves of every password below: neither may be shown


def _shown(text: str) -> list[str]:
    return [piece for piece in PIECES if piece in text]


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("RADAR_WAREHOUSE_URL", "postgresql://radar:Kq7z@Wx4v@db.example/radar"),
        ("RADAR_WAREHOUSE_URL", "postgresql+psycopg://radar:Kq7z Wx4v@db.example/radar"),
        ("RADAR_DAGSTER_PG_URL", "postgresql+psycopg2://dagster:Kq7z@Wx4v@db.example/dagster"),
        ("RADAR_DAGSTER_PG_URL", "postgresql+psycopg2://dagster:Kq7z Wx4v@db.example/dagster"),
        ("RADAR_TARGETS", "main=postgresql://collector:Kq7z@Wx4v@db.example/app"),
        ("RADAR_TARGETS", "main=postgresql://collector:Kq7z Wx4v@db.example/app"),
        ("RADAR_TARGETS", "main=postgresql://collector:Kq7z Wx4v@db.example:5432/app"),
        ("RADAR_TARGETS", "main=postgresql://db.example/app main2=postgresql://collector:Kq7z Wx4v=@db.example/app"),
        ("RADAR_TARGETS", "main=postgresql://collector:Kq7z%Wx4v@db.example/app"),
        ("RADAR_DAGSTER_URL", "https://admin:Kq7zWx4v@dagster.example"),
    ],
)
def test_url_settings_that_cannot_be_masked_are_refused_at_load(variable, value):
    with pytest.raises(ConfigError) as err:
        validate_environment({variable: value})
    message = str(err.value)
    assert variable in message and ("percent-encode" in message or "%25" in message or "@" in message), message
    assert not _shown(message), message


@pytest.mark.parametrize("variable", ["RADAR_WAREHOUSE_URL", "RADAR_DAGSTER_PG_URL"])
def test_encoded_passwords_still_load(variable):
    driver = "postgresql+psycopg2" if variable == "RADAR_DAGSTER_PG_URL" else "postgresql"
    validate_environment({variable: f"{driver}://radar:Kq7z%40Wx4v%20%2F%23%3F@db.example:5432/radar"})
    validate_environment({variable: f"{driver}://radar:Kq7z/Wx4v#?@db.example:5432/radar?sslmode=require"})


def _commands(tmp_path) -> list[list[str]]:
    csv_file = tmp_path / "deploys.csv"
    csv_file.write_text("deploy_id,target,deployed_at\nd1,main,2026-11-29T12:00:00Z\n")
    return [
        ["db", "upgrade"],
        ["deploy", "--target", "main", "--id", "d1"],
        ["deploy", "--target", "main", "--id", "d1", "--at", "2026-11-29T12:00:00Z"],
        ["deploy", "import", str(csv_file)],
        ["verdicts", "d1"],
    ]


@pytest.mark.parametrize("password", ["Kq7z@Wx4v", "Kq7z Wx4v", "Kq7z@@Wx4v"])
def test_the_cli_never_prints_a_warehouse_password_it_cannot_mask(password, tmp_path):
    """Whatever the command, a warehouse URL whose password holds an unencoded @ or a space is refused, naming the
    variable, and nothing of the password is printed (the port is closed: a connection attempt would fail too)."""
    url = f"postgresql://radar:{password}@127.0.0.1:{free_port()}/radar"
    for args in _commands(tmp_path):
        result = CliRunner().invoke(main, args, env={"RADAR_WAREHOUSE_URL": url, "RADAR_TARGETS": None})
        assert result.exit_code != 0, (args, result.output)
        assert not _shown(result.output), (args, result.output)
        assert "RADAR_WAREHOUSE_URL" in result.output and "percent-encode" in result.output, (args, result.output)


@pytest.mark.parametrize(
    "targets",
    [
        "main=postgresql://collector:Kq7z Wx4v@db.example/app",
        "main=postgresql://collector:Kq7z Wx4v@db.example:5432/app",
        "main=postgresql://collector:Kq7z@Wx4v@db.example/app",
        "main=postgresql://collector:Kq7z%Wx4v@db.example/app",
    ],
)
def test_the_cli_never_prints_a_targets_password_it_cannot_mask(targets, tmp_path):
    url = f"postgresql://radar@127.0.0.1:{free_port()}/radar"
    for args in _commands(tmp_path)[1:4]:  # the commands that read RADAR_TARGETS
        result = CliRunner().invoke(main, args, env={"RADAR_WAREHOUSE_URL": url, "RADAR_TARGETS": targets})
        assert result.exit_code != 0, (args, result.output)
        assert not _shown(result.output), (args, result.output)
        assert "RADAR_TARGETS" in result.output, (args, result.output)


def test_the_code_location_refuses_a_warehouse_password_with_an_unencoded_at():
    """Dagster never gets to connect (and store the host name in its event log): the definitions do not load."""
    import os
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-c", "from radar_pipeline.definitions import defs; defs()"],  # as Dagster loads it
        capture_output=True,
        text=True,
        timeout=300,
        env={
            **os.environ,
            "RADAR_WAREHOUSE_URL": "postgresql://radar:Kq7z@Wx4v@127.0.0.1/radar",
            "DAGSTER_DISABLE_TELEMETRY": "1",
        },
    )
    assert proc.returncode != 0
    assert "ConfigError: RADAR_WAREHOUSE_URL holds @ more than once" in proc.stderr
    assert not _shown(proc.stdout + proc.stderr)


def test_radar_dev_refuses_a_dagster_storage_password_it_cannot_mask_before_starting_dagster(tmp_path, monkeypatch):
    """Dagster's webserver and daemon read dagster.yaml's postgres_url before radar's code location loads: radar dev
    checks the environment first, as the code location would, and starts no Dagster process on a bad value."""
    from radar_pipeline.demo import dev

    def dagster_started(*args, **kwargs):
        raise AssertionError(f"radar dev started {args[0] if args else kwargs}")

    monkeypatch.setattr(dev.subprocess, "Popen", dagster_started)
    closed = f"127.0.0.1:{free_port()}"
    result = CliRunner().invoke(
        main,
        ["dev", "--port", str(free_port())],
        env={
            "RADAR_WAREHOUSE_URL": f"postgresql://radar@{closed}/radar",  # set: no embedded servers
            "RADAR_DAGSTER_PG_URL": f"postgresql+psycopg2://dagster:Kq7z@Wx4v@{closed}/dagster",
            "RADAR_TARGETS": None,
            "DAGSTER_HOME": str(tmp_path),
        },
    )
    assert result.exit_code == 1 and result.exception is not None, result.output
    assert isinstance(result.exception, SystemExit), result.exception
    assert "RADAR_DAGSTER_PG_URL" in result.output and "percent-encode" in result.output, result.output
    assert not _shown(result.output), result.output
