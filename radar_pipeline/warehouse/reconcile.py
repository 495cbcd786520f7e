"""What waits for a later run, as the reconciler sees it: outbox rows due for another attempt, deploys whose window
closed without an analysis, and imported deploys (which need a partition, not a run)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

import sqlalchemy as sa

from radar_pipeline.warehouse.deploys import PERIODIC_PREFIX, READY_AT, DueEvent
from radar_pipeline.warehouse.outbox import BLOCKED, DEPLOY_MARK, DUE, MAX_ATTEMPTS, RESOLVE, WITHHELD_DOUBT


@dataclass(frozen=True)
class WaitingAlerts:
    """An analysis with outbox rows due for another attempt: how many, and the most attempts any of them had."""

    analysis_id: str
    rows: int
    attempts: int

    @property
    def periodic(self) -> bool:
        """Whether the analysis is a periodic check (its partition is the hour after the prefix)."""
        return self.analysis_id.startswith(PERIODIC_PREFIX)


# What waits in the outbox, as the reconciler asks: every row but the resolves that wait for their trigger to end (not
# due: they go out after it, in the trigger's run). `aged`: the row is bound by the alert age limit; a resolve is not
# (closing an incident is never noise: only MAX_ATTEMPTS bounds it).
ALERT_ROWS = f"(SELECT w.*, kind <> '{RESOLVE}' AS aged FROM radar.outbox w WHERE NOT {BLOCKED})"
# What one retry run of an analysis retries (alert_retry_job: its alerts, canary and fleet alerts, code host's
# statuses and comments; periodic_alert_retry_job): every row but the deploy marks, which deploy_marks_job sends and
# retries, with or without an analysis.
RETRIED_ROWS = f"(SELECT * FROM {ALERT_ROWS} r WHERE kind <> '{DEPLOY_MARK}')"


def waiting_alerts(conn: sa.Connection, max_age: timedelta, lease: timedelta, limit: int = 100) -> list[WaitingAlerts]:
    """Analyses with outbox rows due now (every destination's; not deploy marks): `pending` past their backoff, or
    left `sending` past `lease` by a run that stopped; only rows created within `max_age` (older ones are withheld by
    withhold_old), except resolves (never withheld; MAX_ATTEMPTS bounds them)."""
    rows = conn.execute(
        sa.text(
            f"SELECT analysis_id, count(*), max(attempts) FROM {RETRIED_ROWS} AS w "
            f"WHERE (created_at > now() - :age OR NOT aged) AND attempts < :max AND {DUE} "
            "GROUP BY analysis_id ORDER BY min(created_at) LIMIT :limit"
        ),
        {"age": max_age, "lease": lease, "max": MAX_ATTEMPTS, "limit": limit},
    )
    return [WaitingAlerts(r[0], int(r[1]), int(r[2])) for r in rows]


def withhold_old(conn: sa.Connection, max_age: timedelta) -> int:
    """Withhold outbox rows (the alerts', the channels' deploy marks and the code hosts') still `pending` that were
    created more than `max_age` ago (no longer news); returns how many. A resolve is never withheld (closing an
    incident is never noise; MAX_ATTEMPTS bounds it). A code host's row keeps its doubt (an earlier attempt may have
    posted its comment), so a later re-analysis looks for that comment before it posts one; a PagerDuty trigger keeps
    its remote id, so what it may have opened is still resolved."""
    return conn.execute(
        sa.text(
            f"UPDATE radar.outbox SET status = 'withheld', outcome_unknown = {WITHHELD_DOUBT}, "
            "last_error = coalesce(last_error || '; ', '') || 'still unsent after the alert age limit: withheld' "
            f"WHERE status = 'pending' AND created_at <= now() - :age AND kind <> '{RESOLVE}'"
        ),
        {"age": max_age},
    ).rowcount


def unanalysed_deploys(
    conn: sa.Connection, delay: timedelta, grace: timedelta, max_age: timedelta, limit: int = 100
) -> list[DueEvent]:
    """Reported (not imported) deploys that became ready between `max_age` and `grace` ago (ready as for the sensor:
    window plus `delay` closed) and have no analysis: their run failed, or was never requested. Oldest first."""
    rows = conn.execute(
        sa.text(
            f"SELECT e.deploy_id, e.target, e.deployed_at, {READY_AT} AS ready_at FROM radar.deploy_event e "
            "WHERE e.source <> 'import' AND e.deployed_at > now() - :age - :delay "
            f"AND {READY_AT} <= now() - :grace AND {READY_AT} > now() - :age "
            "AND NOT EXISTS (SELECT 1 FROM radar.analysis a WHERE a.deploy_id = e.deploy_id) "
            "ORDER BY ready_at, deploy_id LIMIT :limit"
        ),
        {"delay": delay, "grace": grace, "age": max_age, "limit": limit},
    ).fetchall()
    return [DueEvent(*r) for r in rows]


def imported_deploys(conn: sa.Connection) -> list[str]:
    """The ids of every imported (historical) deploy, oldest first."""
    return [
        r[0]
        for r in conn.execute(
            sa.text("SELECT deploy_id FROM radar.deploy_event WHERE source = 'import' ORDER BY deployed_at, deploy_id")
        )
    ]


@dataclass(frozen=True)
class Backlog:
    """What is waiting, for the reconciler's asset check."""

    alerts_due: int  # rows the reconciler will send next
    alerts_backing_off: int  # pending rows inside their backoff
    alerts_failed: int  # rows that failed for good within the age limit
    unanalysed: int  # deploys past the grace without an analysis
    oldest_waiting: datetime | None  # the creation time of the oldest row still pending or sending


def backlog(
    conn: sa.Connection,
    alert_age: timedelta,
    lease: timedelta,
    delay: timedelta,
    grace: timedelta,
    analysis_age: timedelta,
) -> Backlog:
    """Counts of what waits for a later run (see Backlog): outbox rows created within `alert_age`, deploys ready
    within `analysis_age`."""
    alerts = conn.execute(
        sa.text(
            f"SELECT count(*) FILTER (WHERE {DUE}), "
            "  count(*) FILTER (WHERE status = 'pending' AND next_attempt_at > now()), "
            "  count(*) FILTER (WHERE status = 'failed'), "
            "  min(created_at) FILTER (WHERE status IN ('pending', 'sending')) "
            f"FROM {ALERT_ROWS} AS w WHERE created_at > now() - :age OR NOT aged"
        ),
        {"age": alert_age, "lease": lease},
    ).one()
    unanalysed = len(unanalysed_deploys(conn, delay, grace, analysis_age, limit=10_000))
    return Backlog(int(alerts[0]), int(alerts[1]), int(alerts[2]), unanalysed, alerts[3])
