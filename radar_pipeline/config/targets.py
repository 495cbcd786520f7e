"""Connection URLs: the watched targets and the warehouse, checked so that what cannot be masked is refused, with
errors that name the setting and never show a password."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from radar_pipeline.config.masking import mask_password, scrub_secret, url_password

if TYPE_CHECKING:
    import sqlalchemy.engine

TARGETS_VAR = "RADAR_TARGETS"
WAREHOUSE_URL_VAR = "RADAR_WAREHOUSE_URL"
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
    url = database_url(value, variable)
    if url.drivername not in ("postgresql", "postgres", "postgresql+psycopg", "postgresql+psycopg2"):
        raise ConfigError(f"{variable} must be a postgresql:// URL, not {url.drivername!r}")
    url = url.set(drivername="postgresql+psycopg")
    if not url.database:
        raise ConfigError(f"{variable} names no database (postgresql://user:password@host:5432/dbname)")
    return url.render_as_string(hide_password=False)


def database_url(value: str, variable: str) -> sqlalchemy.engine.URL:
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
