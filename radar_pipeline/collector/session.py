"""Connections to watched servers: read-only, bounded in time, and named so a DBA can see who they are."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.abc import PQGen
from psycopg.connection import _WAIT_INTERVAL

from radar_pipeline.config import Target, scrub_secret

APPLICATION_NAME = "radar_pipeline collector"
STATEMENT_TIMEOUT_MS = 10_000
LOCK_TIMEOUT_MS = 1_000
CONNECT_TIMEOUT_S = 5
# The client-side bound of one call (a query, or one step of a COPY's stream): the server's statement_timeout plus a
# margin for the network. A silent server never receives the query, so its own timeout never fires; this does.
CALL_TIMEOUT_S = STATEMENT_TIMEOUT_MS / 1000 + 5
# TCP-level limits, for what the kernel can see (a peer that stopped acknowledging, an idle connection whose peer is
# gone); a proxy or pooler that acknowledges and then stays silent is caught by CALL_TIMEOUT_S alone.
TCP_USER_TIMEOUT_MS = 30_000
KEEPALIVES_IDLE_S, KEEPALIVES_INTERVAL_S, KEEPALIVES_COUNT = 30, 10, 3


class TargetUnavailable(RuntimeError):
    """A watched server could not be reached or read; the message names the target and shows no password."""


class BoundedConnection(psycopg.Connection):
    """A psycopg connection whose every wait on the server ends after `call_timeout` seconds: the connection is then
    closed (no cancel request: it would go to the same silent server) and TargetUnavailable raised, naming the
    target. psycopg routes every network wait of a connection (queries, COPY, commits) through `wait`."""

    call_timeout: float = CALL_TIMEOUT_S
    target: Target | None = None

    def wait(self, gen: PQGen[Any], interval: float = _WAIT_INTERVAL, timeout: float | None = None) -> Any:
        """psycopg's wait, with this connection's call bound as its timeout (or the caller's, if shorter)."""
        bound = self.call_timeout if timeout is None else min(timeout, self.call_timeout)
        try:
            return super().wait(gen, interval, bound)
        except psycopg.errors._WaitTimeout:  # psycopg 3.3's (pinned) own, from the timeout wait() takes
            if timeout is not None and timeout < self.call_timeout:
                raise  # the caller's own, shorter timeout: psycopg handles it
            self.close()
            raise TargetUnavailable(
                f"{self._label()}: no answer within {self.call_timeout:g} s; connection closed"
            ) from None

    def _label(self) -> str:
        target = self.target
        return "the watched server" if target is None else f"target {target.name!r} ({target.safe_dsn})"


def connect(target: Target, call_timeout: float | None = None) -> BoundedConnection:
    """Open an autocommit, read-only session on a watched server, each call bounded (BoundedConnection; by default
    CALL_TIMEOUT_S).

    The limits travel in the startup packet rather than as SET statements, so the session adds no statements of its
    own to pg_stat_statements; autocommit keeps BEGIN and COMMIT out of it too.
    """
    options = (
        f"-c default_transaction_read_only=on -c statement_timeout={STATEMENT_TIMEOUT_MS} "
        f"-c lock_timeout={LOCK_TIMEOUT_MS}"
    )
    try:
        conn = BoundedConnection.connect(
            target.dsn,
            autocommit=True,
            application_name=APPLICATION_NAME,
            options=options,
            connect_timeout=CONNECT_TIMEOUT_S,
            tcp_user_timeout=TCP_USER_TIMEOUT_MS,
            keepalives=1,
            keepalives_idle=KEEPALIVES_IDLE_S,
            keepalives_interval=KEEPALIVES_INTERVAL_S,
            keepalives_count=KEEPALIVES_COUNT,
        )
    except psycopg.Error as exc:
        raise TargetUnavailable(
            f"target {target.name!r} ({target.safe_dsn}): cannot connect: {describe(exc, target)}"
        ) from None
    conn.target = target
    conn.call_timeout = CALL_TIMEOUT_S if call_timeout is None else call_timeout
    return conn


def describe(exc: BaseException, target: Target) -> str:
    """The first line of an error, with the target's password scrubbed out."""
    lines = str(exc).strip().splitlines()
    return scrub_secret(lines[0] if lines else type(exc).__name__, target.dsn)
