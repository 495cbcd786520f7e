"""Settings read from the environment, validated with messages that name the variable and never show a password."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

import sqlalchemy.engine

WAREHOUSE_URL_VAR = "RADAR_WAREHOUSE_URL"
TARGETS_VAR = "RADAR_TARGETS"
COLLECTOR_ROLE_VAR = "RADAR_COLLECTOR_ROLE"
RETENTION_DAYS_VAR = "RADAR_RETENTION_DAYS"
SNAPSHOT_CRON_VAR = "RADAR_SNAPSHOT_CRON"
ALERT_MAX_AGE_VAR = "RADAR_ALERT_MAX_AGE_HOURS"
DEFAULT_ALERT_MAX_AGE_HOURS = 24.0

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


def mask_password(url: str) -> str:
    """Replace the password of a postgresql:// URL (or a password=... keyword) with ***."""
    url = re.sub(r"(password\s*=\s*)('[^']*'|\S+)", r"\1***", url, flags=re.IGNORECASE)
    try:
        parts = urlsplit(url)
    except ValueError:
        return re.sub(r"//([^:/@]*):[^@]*@", r"//\1:***@", url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)
    userinfo = netloc[0].split(":", 1)[0] + ":***"
    return urlunsplit(parts._replace(netloc=f"{userinfo}@{netloc[1]}"))


def scrub_secret(text: str, dsn: str) -> str:
    """Remove a DSN's password from an error text, wherever it appears."""
    password = urlsplit(dsn).password if "://" in dsn else None
    if password:
        text = text.replace(password, "***")
    return mask_password(text)


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
            raise ConfigError(f"{variable}: item {position} ({mask_password(item)!r}) is not name=postgresql://...")
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
    try:
        url = sqlalchemy.engine.make_url(value)
    except Exception:
        raise ConfigError(f"{variable} does not parse as a database URL: {mask_password(value)!r}") from None
    if url.drivername not in ("postgresql", "postgres", "postgresql+psycopg", "postgresql+psycopg2"):
        raise ConfigError(f"{variable} must be a postgresql:// URL, not {url.drivername!r}")
    url = url.set(drivername="postgresql+psycopg")
    if not url.database:
        raise ConfigError(f"{variable} names no database: {mask_password(value)!r}")
    return url.render_as_string(hide_password=False)


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
    return number


def positive_seconds(value: str, variable: str) -> float:
    """A positive number of seconds from a variable's value."""
    try:
        number = float(value)
    except ValueError:
        raise ConfigError(f"{variable} must be a number of seconds, not {value!r}") from None
    if not number > 0:
        raise ConfigError(f"{variable} must be more than 0 seconds, not {value!r}")
    return number


def env(name: str) -> str | None:
    """One environment variable, or None."""
    return os.environ.get(name)


def _check_postgres_url(dsn: str, where: str) -> None:
    try:
        parts = urlsplit(dsn)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError as exc:
        raise ConfigError(f"{where}: the URL does not parse ({exc}): {mask_password(dsn)!r}") from None
    if parts.scheme not in ("postgresql", "postgres"):
        raise ConfigError(f"{where}: the URL must start with postgresql://, not {mask_password(dsn)!r}")
    if not parts.path.strip("/") and "dbname=" not in parts.query:
        raise ConfigError(f"{where}: the URL names no database: {mask_password(dsn)!r}")
