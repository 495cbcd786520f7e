"""Settings read from the environment, validated with messages that name the variable and never show a password."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

if TYPE_CHECKING:
    import sqlalchemy.engine

WAREHOUSE_URL_VAR = "RADAR_WAREHOUSE_URL"
TARGETS_VAR = "RADAR_TARGETS"
COLLECTOR_ROLE_VAR = "RADAR_COLLECTOR_ROLE"
RETENTION_DAYS_VAR = "RADAR_RETENTION_DAYS"
SNAPSHOT_CRON_VAR = "RADAR_SNAPSHOT_CRON"
ALERT_MAX_AGE_VAR = "RADAR_ALERT_MAX_AGE_HOURS"
DEFAULT_ALERT_MAX_AGE_HOURS = 24.0
DAGSTER_URL_VAR = "RADAR_DAGSTER_URL"  # the Dagster UI's address, for links in alerts
DAGSTER_PG_URL_VAR = "RADAR_DAGSTER_PG_URL"
# Code hosts (commit statuses, review comments): a token each, and the API the token is sent to.
CODE_HOST_TOKEN_VARS = {"github": "RADAR_GITHUB_TOKEN", "gitlab": "RADAR_GITLAB_TOKEN"}
CODE_HOST_API_VARS = {"github": "RADAR_GITHUB_API_URL", "gitlab": "RADAR_GITLAB_API_URL"}
DEFAULT_API_URLS = {"github": "https://api.github.com", "gitlab": "https://gitlab.com/api/v4"}
CHART_DIR_VAR = "RADAR_CHART_DIR"  # where chart images are kept (default: a new temporary folder per analysis)
SECONDS_VARS = (
    "RADAR_WINDOW_SECONDS",
    "RADAR_SCRAPE_INTERVAL_SECONDS",
    "RADAR_TOLERANCE_FLOOR_SECONDS",
    "RADAR_PERIOD_SECONDS",
)
WINDOW_VAR, SCRAPE_INTERVAL_VAR = SECONDS_VARS[:2]
# The analysis window each side of a deploy and the scrape interval when the variables above are unset (the Dagster
# resources' defaults; `radar deploy` and `radar gate` tell when a verdict is due from the same).
DEFAULT_WINDOW_SECONDS = 1800.0
DEFAULT_SCRAPE_INTERVAL_SECONDS = 60.0
# Whole-number settings and their defaults: read with count_setting, checked at load by validate_environment.
PLAN_TOP_N_VAR = "RADAR_PLAN_TOP_N"
REANALYSIS_DAYS_VAR = "RADAR_REANALYSIS_DAYS"
RUN_RETENTION_VAR = "RADAR_DAGSTER_RUN_RETENTION_DAYS"
SHARDS_VAR = "RADAR_SNAPSHOT_SHARDS"
PERIODIC_START_VAR = "RADAR_PERIODIC_START"  # the first hour the periodic partitions offer (backfills reach back to it)
DEFAULT_PERIODIC_START = "2026-11-01-00:00"
PERIODIC_MINUTE_VAR = "RADAR_PERIODIC_MINUTE"  # minutes past the hour when the schedule runs the hour just ended
COUNTS = {PLAN_TOP_N_VAR: 200, REANALYSIS_DAYS_VAR: 7, RUN_RETENTION_VAR: 7, SHARDS_VAR: 1}

DEFAULT_RETENTION_DAYS = 14
DEFAULT_SNAPSHOT_CRON = "* * * * *"

_TARGET_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")


class ConfigError(ValueError):
    """A setting is missing or malformed; the message names the setting and shows no secret."""


@dataclass(frozen=True)
class Target:
    """A watched PostgreSQL server: the name radar uses for it and how to connect."""

    name: str
    dsn: str

    @property
    def safe_dsn(self) -> str:
        """The connection URL with any password replaced by ***, for logs and errors."""
        return mask_password(self.dsn)

    def __repr__(self) -> str:
        return f"Target(name={self.name!r}, dsn={self.safe_dsn!r})"


# scheme://user:password@ — the password runs to the last @ of the word: SQLAlchemy and libpq accept unencoded
# / # ? in it, which is where urlsplit (and masking built on it) goes wrong. Masking too much is harmless.
_URL_PASSWORD = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*:/{1,3}[^:/@\s]*):\S*@")
_KEYWORD_PASSWORD = re.compile(r"(password\s*=\s*)('[^']*'|\S+)", re.IGNORECASE)
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def mask_password(url: str) -> str:
    """Replace every password in a text holding postgresql:// URLs (parseable or not) or password=... keywords
    with ***."""
    url = _KEYWORD_PASSWORD.sub(r"\1***", url)
    return _URL_PASSWORD.sub(r"\g<head>:***@", url)


def url_password(dsn: str) -> str | None:
    """The password a URL carries, as written (None when it has none), found the way mask_password finds it."""
    match = re.match(r"[A-Za-z][A-Za-z0-9+.-]*:/{1,3}[^:/@\s]*:(\S*)@", dsn.strip())
    if match and match.group(1):
        return match.group(1)
    keyword = _KEYWORD_PASSWORD.search(dsn)
    return keyword.group(2).strip("'") if keyword else None


def scrub_secret(text: str, dsn: str) -> str:
    """Remove a DSN's password from an error text, wherever it appears (as written and percent-decoded)."""
    password = url_password(dsn)
    if password:
        for form in sorted({password, unquote(password)}, key=len, reverse=True):
            if form:
                text = text.replace(form, "***")
    return mask_password(text)


def printable(text: str) -> str:
    """Text for a terminal or a UI cell: control characters other than newline and tab (escape sequences, C1 codes,
    bidi overrides) removed, so hostile statement text cannot retitle a terminal or move the cursor."""
    return _CONTROL.sub("", text)


def target_failure(exc: BaseException, target: Target) -> str:
    """One line saying why work on a target failed, without its password."""
    return scrub_secret(f"{type(exc).__name__}: {exc}".splitlines()[0], target.dsn)


def parse_targets(value: str | None, variable: str = TARGETS_VAR) -> list[Target]:
    """Parse whitespace-separated `name=postgresql://...` pairs into targets, refusing anything malformed."""
    if value is None or not value.strip():
        raise ConfigError(f"{variable} is not set: give whitespace-separated name=postgresql://... pairs")
    targets: list[Target] = []
    for position, item in enumerate(value.split(), start=1):
        name, sep, dsn = item.partition("=")
        if not sep or not dsn:
            # not quoted: after a space in a password, an item is the password's tail
            raise ConfigError(
                f"{variable}: item {position} is not name=postgresql://... (percent-encode white space in a password: "
                "%20)"
            )
        if not _TARGET_NAME.match(name):
            raise ConfigError(
                f"{variable}: target name {name!r} must be 1-63 letters, digits, '_', '.' or '-' "
                "and start with a letter or digit"
            )
        _check_postgres_url(dsn, f"{variable}: target {name!r}")
        if any(t.name == name for t in targets):
            raise ConfigError(f"{variable}: target name {name!r} appears twice")
        targets.append(Target(name=name, dsn=dsn))
    return targets


def warehouse_url(value: str | None, variable: str = WAREHOUSE_URL_VAR) -> str:
    """Validate the warehouse's SQLAlchemy URL and return it with the psycopg 3 driver."""
    if value is None or not value.strip():
        raise ConfigError(f"{variable} is not set: give a SQLAlchemy URL such as postgresql+psycopg://user@host/db")
    value = value.strip()
    url = _database_url(value, variable)
    if url.drivername not in ("postgresql", "postgres", "postgresql+psycopg", "postgresql+psycopg2"):
        raise ConfigError(f"{variable} must be a postgresql:// URL, not {url.drivername!r}")
    url = url.set(drivername="postgresql+psycopg")
    if not url.database:
        raise ConfigError(f"{variable} names no database (postgresql://user:password@host:5432/dbname)")
    return url.render_as_string(hide_password=False)


def _database_url(value: str, variable: str) -> sqlalchemy.engine.URL:
    """A SQLAlchemy URL from a setting, refused (the variable named, no part of it shown) when it does not parse or
    holds what would defeat mask_password: white space, or an @ besides the one ending the password (drivers take
    the part after the first @ for the host name, and print it in their errors)."""
    if any(c.isspace() for c in value):
        raise ConfigError(f"{variable} holds white space: percent-encode it in the password (a space is %20)")
    if value.partition("://")[2].count("@") > 1:
        raise ConfigError(f"{variable} holds @ more than once: percent-encode @ in the user name and password (%40)")
    import sqlalchemy.engine  # here: every command imports this module, and only some need SQLAlchemy

    try:
        return sqlalchemy.engine.make_url(value)
    except Exception:
        raise ConfigError(
            f"{variable} does not parse as a database URL (percent-encode : / @ in the password)"
        ) from None


def retention_days(value: str | None, variable: str = RETENTION_DAYS_VAR) -> int:
    """Days of snapshots to keep (default 14)."""
    return positive_int(value, variable, DEFAULT_RETENTION_DAYS)


def alert_max_age_hours(value: str | None, variable: str = ALERT_MAX_AGE_VAR) -> float:
    """Hours after a deploy's window (or a periodic check's hour) closed beyond which its alerts are recorded as
    withheld instead of sent (default 24): a backfill or a reanalysis of old deploys must not flood the channel."""
    if value is None or not value.strip():
        return DEFAULT_ALERT_MAX_AGE_HOURS
    try:
        hours = float(value)
    except ValueError:
        raise ConfigError(f"{variable} must be a number of hours, not {value!r}") from None
    if not 0 < hours <= 24 * 365:
        raise ConfigError(f"{variable} must be more than 0 and at most 8760 hours (a year), not {value!r}")
    return hours


def positive_int(value: str | None, variable: str, default: int) -> int:
    """A whole number of at least 1 from a variable's value; the default when it is unset or empty."""
    if value is None or not value.strip():
        return default
    try:
        number = int(value)
    except ValueError:
        raise ConfigError(f"{variable} must be a whole number, not {value!r}") from None
    if number < 1:
        raise ConfigError(f"{variable} must be at least 1, not {number}")
    if number > 1_000_000:
        raise ConfigError(f"{variable} must be at most 1000000, not {number}")
    return number


MAX_SECONDS = 366 * 86400.0  # a year: longer windows or periods are a typo (and inf overflows timedelta)


def positive_seconds(value: str, variable: str) -> float:
    """A positive, finite number of seconds (at most a year) from a variable's value."""
    try:
        number = float(value)
    except ValueError:
        raise ConfigError(f"{variable} must be a number of seconds, not {value!r}") from None
    if not number > 0:
        raise ConfigError(f"{variable} must be more than 0 seconds, not {value!r}")
    if not number <= MAX_SECONDS:  # also refuses inf
        raise ConfigError(f"{variable} must be at most {MAX_SECONDS:.0f} seconds (a year), not {value!r}")
    return number


def count_setting(variable: str, environ: Mapping[str, str] | None = None) -> int:
    """One of the whole-number settings (COUNTS), from the environment or its default."""
    return positive_int((os.environ if environ is None else environ).get(variable), variable, COUNTS[variable])


def periodic_start(environ: Mapping[str, str] | None = None) -> str:
    """The first hour of the periodic partitions, RADAR_PERIODIC_START (an hour, UTC, as 2026-11-01-00:00)."""
    value = (os.environ if environ is None else environ).get(PERIODIC_START_VAR) or DEFAULT_PERIODIC_START
    try:
        datetime.strptime(value, "%Y-%m-%d-%H:%M")
    except ValueError:
        raise ConfigError(
            f"{PERIODIC_START_VAR} must look like 2026-11-01-00:00 (an hour, UTC), not {value!r}"
        ) from None
    return value


def periodic_minute(environ: Mapping[str, str] | None = None) -> int:
    """Minutes past the hour when the periodic check runs, RADAR_PERIODIC_MINUTE (default 5)."""
    value = (os.environ if environ is None else environ).get(PERIODIC_MINUTE_VAR) or "5"
    if not value.isdigit() or not 0 <= int(value) <= 59:
        raise ConfigError(f"{PERIODIC_MINUTE_VAR} must be a minute of the hour, 0 to 59, not {value!r}")
    return int(value)


def env(name: str) -> str | None:
    """One environment variable, or None."""
    return os.environ.get(name)


def _check_postgres_url(dsn: str, where: str) -> None:
    password = url_password(dsn) if "://" in dsn else None
    if password and any(c in password for c in "/#?@"):
        raise ConfigError(f"{where}: percent-encode / # ? @ in the password (libpq reads them as the URL's next part)")
    if password and re.search("%(?![0-9A-Fa-f]{2})", password):
        raise ConfigError(f"{where}: a % in the password must be written %25 (libpq quotes a bad one in its error)")
    # The URL is never quoted: cut at a space in its password (RADAR_TARGETS splits there), it has no @ to mask up to.
    try:
        parts = urlsplit(dsn)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        raise ConfigError(
            f"{where}: the URL does not parse (percent-encode / # ? @ : and white space in the password)"
        ) from None
    if parts.scheme not in ("postgresql", "postgres"):
        raise ConfigError(f"{where}: the URL must start with postgresql://")
    if not parts.path.strip("/") and "dbname=" not in parts.query:
        raise ConfigError(
            f"{where}: the URL names no database (postgresql://user:password@host:5432/dbname; percent-encode white "
            "space in the password)"
        )


_ROLE = re.compile(r"[A-Za-z_][A-Za-z0-9_$]{0,62}")
_HTTP = re.compile(r"https?://[^\s\x00-\x1f\x7f]+")


def validate_environment(environ: Mapping[str, str]) -> None:
    """Check every RADAR_* setting that is set (the crons are checked where their schedules are built); raises
    ConfigError naming the first bad variable, never showing a password."""
    value = environ.get
    periodic_start(environ)
    periodic_minute(environ)
    if value(WAREHOUSE_URL_VAR):
        warehouse_url(value(WAREHOUSE_URL_VAR))
    if value(TARGETS_VAR):
        parse_targets(value(TARGETS_VAR))
    retention_days(value(RETENTION_DAYS_VAR))
    for variable in SECONDS_VARS:
        if value(variable):
            positive_seconds(value(variable) or "", variable)
    for variable in COUNTS:
        count_setting(variable, environ)
    alert_max_age_hours(value(ALERT_MAX_AGE_VAR))
    role = value(COLLECTOR_ROLE_VAR)
    if role and not _ROLE.fullmatch(role):
        raise ConfigError(f"{COLLECTOR_ROLE_VAR} must be a role name (letters, digits, _), not {role!r}")
    _slack(environ)
    _code_hosts(environ)
    dagster_ui = value(DAGSTER_URL_VAR)
    if dagster_ui and "@" in dagster_ui:
        raise ConfigError(f"{DAGSTER_URL_VAR} must not hold @ (a user name or password): alerts show it as a link")
    if dagster_ui and not _HTTP.fullmatch(dagster_ui):
        raise ConfigError(f"{DAGSTER_URL_VAR} must be an http(s) URL, not {dagster_ui!r}")
    chart_dir = value(CHART_DIR_VAR)
    if chart_dir and Path(chart_dir).exists() and not Path(chart_dir).is_dir():
        raise ConfigError(f"{CHART_DIR_VAR} {chart_dir!r} exists and is not a folder")
    dagster_url = value(DAGSTER_PG_URL_VAR)
    if dagster_url:
        url = _database_url(dagster_url.strip(), DAGSTER_PG_URL_VAR)
        if url.drivername != "postgresql+psycopg2":
            raise ConfigError(
                f"{DAGSTER_PG_URL_VAR} must spell out the psycopg2 driver (postgresql+psycopg2://...), which Dagster's "
                f"storage uses, not {url.drivername!r}"
            )


def _slack(environ: Mapping[str, str]) -> None:
    token, channel = environ.get("RADAR_SLACK_TOKEN"), environ.get("RADAR_SLACK_CHANNEL")
    webhook = environ.get("RADAR_SLACK_WEBHOOK_URL")
    if token and not channel:
        raise ConfigError("RADAR_SLACK_TOKEN is set but RADAR_SLACK_CHANNEL is not: name the channel to post in")
    if channel and not token:
        raise ConfigError("RADAR_SLACK_CHANNEL is set but RADAR_SLACK_TOKEN is not: a channel needs a bot token")
    if token and not token.startswith("xox"):
        raise ConfigError("RADAR_SLACK_TOKEN is not a Slack token (xoxb-...)")
    if webhook and not (webhook.startswith("https://") and _HTTP.fullmatch(webhook)):
        raise ConfigError("RADAR_SLACK_WEBHOOK_URL must be an https:// URL")


def _code_hosts(environ: Mapping[str, str]) -> None:
    for kind, variable in CODE_HOST_TOKEN_VARS.items():
        token = environ.get(variable)
        if token and (any(c.isspace() or not c.isprintable() for c in token)):
            raise ConfigError(f"{variable} holds white space or control characters: not a token")
        url = environ.get(CODE_HOST_API_VARS[kind])
        if url and "@" in url:
            raise ConfigError(f"{CODE_HOST_API_VARS[kind]} must not hold @ (a user name or password)")
        if url and not _HTTP.fullmatch(url):
            raise ConfigError(f"{CODE_HOST_API_VARS[kind]} must be an http(s) URL, not {url!r}")
