"""Settings from the environment: clear errors that name the variable and never show a password."""

from __future__ import annotations

import pytest

from radar_pipeline.config import ConfigError, mask_password, parse_targets, scrub_secret, warehouse_url
from radar_pipeline.config.settings import settings


def test_targets_parse():
    targets = parse_targets("main=postgresql://radar:pw@db1:5432/app  replica=postgresql://db2/app\n")
    assert [t.name for t in targets] == ["main", "replica"]
    assert targets[0].dsn == "postgresql://radar:pw@db1:5432/app"
    assert "pw" not in repr(targets[0]) and "***" in targets[0].safe_dsn


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, "RADAR_TARGETS is not set"),
        ("   ", "RADAR_TARGETS is not set"),
        ("postgresql://u:hunter2@db/app", "is not name=postgresql://"),
        ("main=", "is not name=postgresql://"),
        ("-bad=postgresql://db/app", "target name '-bad'"),
        ("main=mysql://u:hunter2@db/app", "must start with postgresql://"),
        ("main=postgresql://u:hunter2@db:99999/app", "does not parse"),
        ("main=postgresql://u:hunter2@db", "names no database"),
        ("a=postgresql://db/x a=postgresql://db/y", "appears twice"),
    ],
)
def test_malformed_targets_name_the_variable_and_hide_the_password(value, expected):
    with pytest.raises(ConfigError) as err:
        parse_targets(value)
    assert "RADAR_TARGETS" in str(err.value)
    assert expected in str(err.value)
    assert "hunter2" not in str(err.value)


def test_warehouse_url_takes_psycopg3_and_refuses_others():
    assert warehouse_url("postgresql://u:p@h/db").startswith("postgresql+psycopg://")
    assert warehouse_url("postgresql+psycopg2://u:p@h/db").startswith("postgresql+psycopg://")
    for bad, words in [
        (None, "is not set"),
        ("sqlite:///x.db", "must be a postgresql"),
        ("postgresql://h", "no database"),
    ]:
        with pytest.raises(ConfigError, match="RADAR_WAREHOUSE_URL") as err:
            warehouse_url(bad)
        assert words in str(err.value)
    with pytest.raises(ConfigError) as err:
        warehouse_url("postgresql://u:hunter2@h:notaport/db")
    assert "hunter2" not in str(err.value)


def test_retention_days():
    assert settings(environ={}).retention_days == 14
    assert settings(environ={"RADAR_RETENTION_DAYS": "3"}).retention_days == 3
    for bad in ("0", "-1", "two"):
        with pytest.raises(ConfigError, match="RADAR_RETENTION_DAYS"):
            settings(environ={"RADAR_RETENTION_DAYS": bad})


def test_period_and_window_seconds(monkeypatch):
    assert settings(environ={"RADAR_PERIOD_SECONDS": "3600"}).period_seconds == 3600.0
    for bad in ("0", "-5", "an hour", "nan"):
        with pytest.raises(ConfigError, match="RADAR_PERIOD_SECONDS"):
            settings(environ={"RADAR_PERIOD_SECONDS": bad})
    monkeypatch.setenv("RADAR_PERIOD_SECONDS", "1800")
    from radar_pipeline.defs.resources import default_resources

    analysis = default_resources()["analysis"]
    periodic = analysis.periodic_settings()  # type: ignore[attr-defined]
    assert periodic.window.total_seconds() == 1800 and periodic.tolerance.total_seconds() == 1800


def test_masking():
    assert mask_password("postgresql://u:secret@h/db") == "postgresql://u:***@h/db"
    assert mask_password("host=h password=secret dbname=x") == "host=h password=*** dbname=x"
    assert scrub_secret("failed for secret", "postgresql://u:secret@h/db") == "failed for ***"


@pytest.mark.parametrize(
    "dsn",
    [
        "postgresql://radar_collector:Leak/S3cretPW2@host/app",
        "postgresql://u:S3c#retPW2@host/app",
        "postgresql://u:S3c?retPW2@host:5432/app",
        "postgresql+psycopg://u:S3c/ret#PW2@host/app?sslmode=require",
        "postgresql://u:S3cretPW2@host/app",
    ],
)
def test_passwords_are_masked_whatever_they_hold(dsn):
    secret_bits = ("S3c", "retPW2", "Leak", "S3cretPW2")
    masked = mask_password(f"connecting to {dsn!r} failed: timeout")
    assert not any(bit in masked for bit in secret_bits), masked
    assert masked.startswith("connecting to 'postgresql") and "host" in masked
    with pytest.raises(ConfigError) as err:
        parse_targets(f"main={dsn.replace('S3cretPW2', 'S3c/retPW2')}")
    assert not any(bit in str(err.value) for bit in secret_bits), str(err.value)
    with pytest.raises(ConfigError) as err:
        warehouse_url(dsn.replace("://", ":/"))
    assert not any(bit in str(err.value) for bit in secret_bits), str(err.value)
    assert scrub_secret("auth failed for S3c%2FretPW2 and S3c/retPW2", "postgresql://u:S3c%2FretPW2@h/db") == (
        "auth failed for *** and ***"
    )


def test_printable_strips_control_characters():
    from radar_pipeline.config import printable

    hostile = "SELECT 1 /* \x1b]0;pwned\x07 \x1b[2J \x9b31m \u202eevil */\tx\n"
    assert printable(hostile) == "SELECT 1 /* ]0;pwned [2J 31m evil */\tx\n"


@pytest.mark.parametrize(
    ("variable", "value", "words"),
    [
        ("RADAR_WINDOW_SECONDS", "inf", "at most"),
        ("RADAR_PERIOD_SECONDS", "1e300", "at most"),
        ("RADAR_SCRAPE_INTERVAL_SECONDS", "nan", "more than 0"),
        ("RADAR_REANALYSIS_DAYS", "abc", "whole number"),
        ("RADAR_REANALYSIS_DAYS", "-1", "at least 1"),
        ("RADAR_PLAN_TOP_N", "0", "at least 1"),
        ("RADAR_RETENTION_DAYS", "2.5", "whole number"),
        ("RADAR_SLACK_TOKEN", "xoxb-1", "RADAR_SLACK_CHANNEL is not"),
        ("RADAR_SLACK_CHANNEL", "#radar", "RADAR_SLACK_TOKEN is not"),
        ("RADAR_SLACK_WEBHOOK_URL", "hooks.slack.com/x", "https://"),
        ("RADAR_DAGSTER_URL", "localhost:3000", "http(s) URL"),
        ("RADAR_COLLECTOR_ROLE", "radar; DROP", "role name"),
        ("RADAR_TARGETS", "main=postgresql://u:Sec/ret9@h/db", "percent-encode"),
        ("RADAR_WAREHOUSE_URL", "mysql://u:Secret9@h/db", "must be a postgresql"),
        ("RADAR_DAGSTER_PG_URL", "sqlite:///x", "psycopg2"),
        ("RADAR_DAGSTER_PG_URL", "postgresql://u:Secret9@h/dagster", "psycopg2"),
        ("RADAR_SLACK_WEBHOOK_URL", "http://hooks.slack.com/x", "https://"),
        ("RADAR_DAGSTER_RUN_RETENTION_DAYS", "0", "at least 1"),
        ("RADAR_SNAPSHOT_SHARDS", "two", "whole number"),
        ("RADAR_ALERT_MAX_AGE_HOURS", "inf", "at most"),
    ],
)
def test_every_variable_is_validated_when_the_definitions_load(variable, value, words):
    from radar_pipeline.config.settings import validate_environment

    with pytest.raises(ConfigError, match=variable) as err:
        validate_environment({variable: value})
    assert words in str(err.value) and "Secret9" not in str(err.value) and "ret9" not in str(err.value)


def test_the_code_location_does_not_load_with_a_bad_variable():
    import os
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-c", "from radar_pipeline.definitions import defs; defs()"],  # as Dagster loads it
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "RADAR_WINDOW_SECONDS": "inf", "DAGSTER_DISABLE_TELEMETRY": "1"},
    )
    assert proc.returncode != 0
    assert "ConfigError: RADAR_WINDOW_SECONDS must be at most" in proc.stderr
