"""Every RADAR_* variable checked when the definitions load, so a bad value stops the code location at start with a
message naming the variable, instead of failing a schedule at night or every Slack send."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

import sqlalchemy.engine

from radar_pipeline.config import (
    COLLECTOR_ROLE_VAR,
    TARGETS_VAR,
    WAREHOUSE_URL_VAR,
    ConfigError,
    mask_password,
    parse_targets,
    positive_int,
    positive_seconds,
    retention_days,
    warehouse_url,
)

SECONDS_VARS = (
    "RADAR_WINDOW_SECONDS",
    "RADAR_SCRAPE_INTERVAL_SECONDS",
    "RADAR_TOLERANCE_FLOOR_SECONDS",
    "RADAR_PERIOD_SECONDS",
)
COUNT_VARS = {"RADAR_REANALYSIS_DAYS": 7, "RADAR_PLAN_TOP_N": 200}
_ROLE = re.compile(r"[A-Za-z_][A-Za-z0-9_$]{0,62}")
_HTTP = re.compile(r"https?://[^\s\x00-\x1f\x7f]+")


def validate_environment(environ: Mapping[str, str]) -> None:
    """Check every RADAR_* setting that is set (crons, the periodic start and minute are checked where they are
    built); raises ConfigError naming the first bad variable, never showing a password."""
    value = environ.get
    if value(WAREHOUSE_URL_VAR):
        warehouse_url(value(WAREHOUSE_URL_VAR))
    if value(TARGETS_VAR):
        parse_targets(value(TARGETS_VAR))
    retention_days(value("RADAR_RETENTION_DAYS"))
    for variable in SECONDS_VARS:
        if value(variable):
            positive_seconds(value(variable) or "", variable)
    for variable, default in COUNT_VARS.items():
        positive_int(value(variable), variable, default)
    role = value(COLLECTOR_ROLE_VAR)
    if role and not _ROLE.fullmatch(role):
        raise ConfigError(f"{COLLECTOR_ROLE_VAR} must be a role name (letters, digits, _), not {role!r}")
    _slack(environ)
    for variable in ("RADAR_DAGSTER_URL",):
        if value(variable) and not _HTTP.fullmatch(value(variable) or ""):
            raise ConfigError(f"{variable} must be an http(s) URL, not {value(variable)!r}")
    chart_dir = value("RADAR_CHART_DIR")
    if chart_dir and Path(chart_dir).exists() and not Path(chart_dir).is_dir():
        raise ConfigError(f"RADAR_CHART_DIR {chart_dir!r} exists and is not a folder")
    dagster_url = value("RADAR_DAGSTER_PG_URL")
    if dagster_url:
        try:
            url = sqlalchemy.engine.make_url(dagster_url)
        except Exception:
            raise ConfigError(
                f"RADAR_DAGSTER_PG_URL does not parse as a database URL: {mask_password(dagster_url)!r}"
            ) from None
        if not url.drivername.startswith("postgres"):
            raise ConfigError(f"RADAR_DAGSTER_PG_URL must be a postgresql URL, not {url.drivername!r}")


def _slack(environ: Mapping[str, str]) -> None:
    token, channel = environ.get("RADAR_SLACK_TOKEN"), environ.get("RADAR_SLACK_CHANNEL")
    webhook = environ.get("RADAR_SLACK_WEBHOOK_URL")
    if token and not channel:
        raise ConfigError("RADAR_SLACK_TOKEN is set but RADAR_SLACK_CHANNEL is not: name the channel to post in")
    if channel and not token:
        raise ConfigError("RADAR_SLACK_CHANNEL is set but RADAR_SLACK_TOKEN is not: a channel needs a bot token")
    if token and not token.startswith("xox"):
        raise ConfigError("RADAR_SLACK_TOKEN is not a Slack token (xoxb-...)")
    if webhook and not _HTTP.fullmatch(webhook):
        raise ConfigError("RADAR_SLACK_WEBHOOK_URL must be an https:// URL")
