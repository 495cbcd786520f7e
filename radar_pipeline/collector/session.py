"""Connections to watched servers: read-only, bounded in time, and named so a DBA can see who they are."""

from __future__ import annotations

import psycopg

from radar_pipeline.config import Target, scrub_secret

APPLICATION_NAME = "radar_pipeline collector"
STATEMENT_TIMEOUT_MS = 10_000
LOCK_TIMEOUT_MS = 1_000
CONNECT_TIMEOUT_S = 5


class TargetUnavailable(RuntimeError):
    """A watched server could not be reached or read; the message names the target and shows no password."""


def connect(target: Target) -> psycopg.Connection:
    """Open an autocommit, read-only session on a watched server.

    The limits travel in the startup packet rather than as SET statements, so the session adds no statements of its
    own to pg_stat_statements; autocommit keeps BEGIN and COMMIT out of it too.
    """
    options = (
        f"-c default_transaction_read_only=on -c statement_timeout={STATEMENT_TIMEOUT_MS} "
        f"-c lock_timeout={LOCK_TIMEOUT_MS}"
    )
    try:
        return psycopg.connect(
            target.dsn,
            autocommit=True,
            application_name=APPLICATION_NAME,
            options=options,
            connect_timeout=CONNECT_TIMEOUT_S,
        )
    except psycopg.Error as exc:
        raise TargetUnavailable(
            f"target {target.name!r} ({target.safe_dsn}): cannot connect: {describe(exc, target)}"
        ) from None


def describe(exc: BaseException, target: Target) -> str:
    """The first line of an error, with the target's password scrubbed out."""
    lines = str(exc).strip().splitlines()
    return scrub_secret(lines[0] if lines else type(exc).__name__, target.dsn)
