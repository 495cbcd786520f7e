"""What the watched server's statements are waiting on, one sample per scrape (issue 39, "waits named").

pg_stat_activity says, for every active session, the statement it runs (`query_id`, PostgreSQL 14 and later with
`compute_query_id`) and what it waits on (`wait_event_type`, `wait_event`; none while it runs on a CPU), and
`pg_blocking_pids` which sessions hold the lock a session waits for, whose `query_id` is the statement they run or,
idle in a transaction, the last they ran (the `SELECT … FOR UPDATE` of a migration holding rows). One statement in
the scrape's read-only session reads them, grouped by statement and wait: cheap (a row per active session, the
blockers looked up only for sessions waiting on a heavyweight lock), bounded by the session's timeouts, and never of
the collector's own sessions. A server without `query_id` (before 14, or `compute_query_id = off`) gives none.

A scrape takes SAMPLES of them, SPACING seconds apart: one instant a scrape would see a wait only when it holds most
of the time (an application's updates waiting ×170 behind a migration's row locks are waiting 2% of the time), and
the causes estimate each statement's wait per call from the mean number of its sessions waiting (Little's law), which
needs many instants.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime

import psycopg

from radar_pipeline.collector.pgss import COLLECTOR_MARK
from radar_pipeline.collector.session import TargetUnavailable, describe
from radar_pipeline.config import Target
from radar_pipeline.config.queries import sql_string

SAMPLES = 10  # instants sampled a scrape
SPACING = 0.02  # seconds between them: the scrape's session is held a fifth of a second longer, its CPU a few ms
# collector/queries/wait_sample.sql names it too
LOCK = "Lock"  # wait_event_type of a heavyweight lock (a row, a transaction id, a relation): pg_blocking_pids knows
IO = "IO"

_HAS_QUERY_ID = (
    f"SELECT {COLLECTOR_MARK} statement_timestamp(), current_setting('server_version_num')::int >= 140000 "
    "AND current_setting('compute_query_id', true) IS DISTINCT FROM 'off'"
)


@dataclass(frozen=True)
class WaitSample:
    """The active sessions of one statement (`dbid`, `userid`, `queryid`) waiting on one thing at the sample's time:
    `wait_event_type`/`wait_event` None while running; for a heavyweight lock, the statement the first session
    blocking them runs or last ran (`blocker_queryid`, `blocker_userid`; None when it runs none, or is gone)."""

    dbid: int
    userid: int
    queryid: int
    wait_event_type: str | None
    wait_event: str | None
    blocker_queryid: int | None
    blocker_userid: int | None
    sessions: int


@dataclass(frozen=True)
class WaitSamples:
    """One reading: when (the server's clock), and whether the server can say which statement a session runs
    (`sampled`: False where it has no query_id, so no sample means nothing)."""

    captured_at: datetime
    sampled: bool
    samples: list[WaitSample]


def read_waits(
    conn: psycopg.Connection, target: Target, samples: int = SAMPLES, spacing: float = SPACING
) -> list[WaitSamples]:
    """`samples` readings of the active sessions' statements and waits, `spacing` seconds apart, each grouped (module
    docstring); one unsampled reading where the server cannot say which statement a session runs."""
    try:
        head = conn.execute(_HAS_QUERY_ID).fetchone()
        assert head is not None
        if not head[1]:
            return [WaitSamples(head[0], False, [])]
        readings = []
        for i in range(samples):
            if i:
                time.sleep(spacing)
            # one row at least (its time, NULLs) when no session is active: every reading is a capture
            readings.append(_reading(conn.execute(sql_string("collector.wait_sample")).fetchall()))
    except psycopg.Error as exc:
        raise TargetUnavailable(
            f"target {target.name!r}: reading pg_stat_activity failed: {describe(exc, target)}"
        ) from None
    return readings


def _reading(rows: list) -> WaitSamples:
    samples = [
        WaitSample(
            dbid=int(r[1]),
            userid=int(r[2]),
            queryid=int(r[3]),
            wait_event_type=r[4],
            wait_event=r[5],
            blocker_queryid=None if r[6] in (None, 0) else int(r[6]),
            blocker_userid=None if r[7] is None else int(r[7]),
            sessions=int(r[8]),
        )
        for r in rows
        if r[1] is not None and r[2] is not None
    ]
    return WaitSamples(rows[0][0], True, samples)
