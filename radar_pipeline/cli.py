"""The `radar` command."""

from __future__ import annotations

import sys

import click

from radar_pipeline.config import WAREHOUSE_URL_VAR, ConfigError, mask_password


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """radar_pipeline: find the PostgreSQL queries a deploy made slower."""


@main.group()
def db() -> None:
    """The warehouse schema."""


@db.command("upgrade")
@click.option("--url", envvar=WAREHOUSE_URL_VAR, help=f"warehouse URL (default: ${WAREHOUSE_URL_VAR})")
def db_upgrade(url: str | None) -> None:
    """Apply the sql/ migrations not yet applied to the warehouse."""
    from radar_pipeline.warehouse import migrations

    try:
        applied = migrations.upgrade(_require(url))
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None
    except Exception as exc:  # a connection failure must not print the password
        raise click.ClickException(mask_password(f"migrating {mask_password(url or '')} failed: {exc}")) from None
    if applied:
        click.echo(f"applied {len(applied)} migration(s): {', '.join(applied)}")
    else:
        click.echo("the warehouse schema is up to date")


def _require(url: str | None) -> str:
    if not url:
        raise ConfigError(f"{WAREHOUSE_URL_VAR} is not set (or pass --url)")
    return url


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
