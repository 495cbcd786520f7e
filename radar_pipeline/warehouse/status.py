"""What `radar gate`, `radar deploys` and `radar status` read: a deploy's times and the share of its execution time
each verdict holds, the recent deploys with their states, each target's scrapes.

A deploy's state itself is radar.deploy_state's (analysis.deploy_states); when its verdict is due follows the
sensor's rule (deploys.READY_AT with the window and one scrape interval, as deploy_event_sensor computes it).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

import sqlalchemy as sa
from sqlalchemy.pool import NullPool

from radar_pipeline.config import warehouse_url
from radar_pipeline.config.queries import sql_text
from radar_pipeline.config.settings import DEFAULT_SCRAPE_INTERVAL_SECONDS, DEFAULT_WINDOW_SECONDS
from radar_pipeline.engine.vocabulary import VERDICTS, Verdict
from radar_pipeline.warehouse.deploys import PERIODIC_PREFIX, READY_AT, recorded_timing

CONNECT_TIMEOUT_S = 5
STATEMENT_TIMEOUT_MS = 10_000
TCP_USER_TIMEOUT_MS = 15_000  # a warehouse that stopped acknowledging is given up by the kernel after this
# A verdict's (alias v) execution time after the deploy as radar.deploy_state weighs it (sql/0036): the first look's.
WEIGHED_MS = "coalesce(v.first_exec_ms, v.calls_after * v.mean_after_ms)"


class Times(Protocol):
    """The configured analysis times (RadarSettings; the analysis resource): None where unset."""

    @property
    def window_seconds(self) -> float | None: ...

    @property
    def scrape_interval_seconds(self) -> float | None: ...


def polling_engine(url: str) -> sa.Engine:
    """An engine for a command that asks the warehouse again and again (`radar gate --wait`): every connection is
    opened anew (a warehouse back from a restart is simply reached again), its connecting bounded by
    CONNECT_TIMEOUT_S, each statement by STATEMENT_TIMEOUT_MS, and a peer gone silent found by TCP."""
    return sa.create_engine(
        warehouse_url(url),
        poolclass=NullPool,
        connect_args={
            "connect_timeout": CONNECT_TIMEOUT_S,
            "options": f"-c statement_timeout={STATEMENT_TIMEOUT_MS}",
            "tcp_user_timeout": TCP_USER_TIMEOUT_MS,
            "keepalives": 1,
            "keepalives_idle": 10,
            "keepalives_interval": 5,
            "keepalives_count": 2,
        },
    )


# The target's latest scrapes its scrape interval is measured over (the median gap between them).
SCRAPES_MEASURED = 21


def analysis_times(conn: sa.Connection, target: str, configured: Times) -> tuple[timedelta, timedelta]:
    """The analysis window each side of a deploy and the wait after it before the sensor asks for its analysis, as
    the warehouse stores them: first the window and settle deploy_event_sensor records (radar.deploy_timing: what it
    waits by, for any target); where no sensor has run, the window the target's latest deploy analysis used
    (radar.analysis keeps its engine settings) and the interval its stored scrapes show (the median gap between its
    latest SCRAPES_MEASURED scrapes, radar.pgss_info_snapshot). Where the warehouse has nothing, this environment's
    RADAR_WINDOW_SECONDS and RADAR_SCRAPE_INTERVAL_SECONDS, else their defaults: a CI job that does not set them is
    not told the default 30-minute window's times for a 7-minute one."""
    recorded = recorded_timing(conn)
    if recorded is not None:
        return recorded
    stored_window, stored_scrape = conn.execute(
        sql_text("warehouse.analysis_times"),
        {"t": target, "periodic": PERIODIC_PREFIX + "%", "n": SCRAPES_MEASURED},
    ).one()
    window = float(stored_window) if stored_window else configured.window_seconds or DEFAULT_WINDOW_SECONDS
    scrape = (
        float(stored_scrape) if stored_scrape else configured.scrape_interval_seconds or DEFAULT_SCRAPE_INTERVAL_SECONDS
    )
    return timedelta(seconds=window), timedelta(seconds=scrape)


@dataclass(frozen=True)
class DeployTimes:
    """A recorded deploy's fields and times by the warehouse's clock: when its window closes, when its analysis is
    due (the sensor requests it then), and its target's last scrape (None: never scraped)."""

    deploy_id: str
    target: str
    deployed_at: datetime
    service: str | None
    version: str | None
    url: str | None
    source: str
    now: datetime
    window_closes_at: datetime
    due_at: datetime
    last_scrape: datetime | None


def deploy_times(
    conn: sa.Connection, deploy_id: str, configured: Times, target: str | None = None
) -> DeployTimes | None:
    """The deploy's DeployTimes (analysis_times give its window and interval: the target's, as stored), or None when
    it is not recorded.
    `target`, when the caller knows it, saves a query."""
    if target is None:
        target = conn.execute(
            sa.text("SELECT target FROM radar.deploy_event WHERE deploy_id = :id"), {"id": deploy_id}
        ).scalar()
        if target is None:
            return None
    window, scrape = analysis_times(conn, target, configured)
    row = conn.execute(
        sa.text(
            "SELECT deploy_id, target, deployed_at, service, version, url, source, now() AS now, "
            f"deployed_at + :window AS window_closes_at, {READY_AT} AS due_at, "
            "(SELECT max(captured_at) FROM radar.pgss_info_snapshot s WHERE s.target = e.target) AS last_scrape "
            "FROM radar.deploy_event e WHERE deploy_id = :id"
        ),
        {"id": deploy_id, "window": window, "delay": window + scrape},
    ).one_or_none()
    return DeployTimes(**row._mapping) if row is not None else None


def canary_delay(conn: sa.Connection, target: str, configured: Times) -> timedelta:
    """When a deploy's canary analysis falls due after it: the analysis window plus one scrape interval, as
    canary_sensor waits (analysis_times: the configured times, else the target's stored window)."""
    window, scrape = analysis_times(conn, target, configured)
    return window + scrape


def canary_gate(
    conn: sa.Connection,
    deploy_id: str,
    state: dict[str, Any],
    delay: timedelta,
) -> dict[str, Any] | None:
    """For a deploy that names a canary role, its canary arm as the gate reads it (docs/canary.md), and the gate's
    state set from it in `state` (radar.deploy_state's row, changed in place; the view's own state kept under
    before_after_state). None for a deploy without a canary role.

    - no canary analysis stored yet: pending (the canary verdict is due W after the deploy), while canary_sensor
      still asks for it (until warehouse.canary.HORIZON after it fell due, W plus one scrape interval: `delay`, the
      configured one, as canary_sensor's: canary_delay);
      after that the state stays radar.deploy_state's, and the error says the canary analysis never came;
    - a canary analysis stopped by an error (an unknown role, a role with no statements): the state stays
      radar.deploy_state's, and the error is returned to be shown;
    - otherwise the canary's state decides: fail when the canary arm detected a statement, else its pass or
      inconclusive; radar.deploy_state's before/after verdict is shown beside it, not combined (on a canary deploy
      the stable role still runs the old version, so what before/after finds there is the server's, not the canary's).
    """
    from radar_pipeline.warehouse import canary as stored

    role = conn.execute(
        sa.text("SELECT canary_role FROM radar.deploy_event WHERE deploy_id = :d"), {"d": deploy_id}
    ).scalar()
    if role is None:
        return None
    state["before_after_state"] = state["state"]
    found = stored.analysis_of(conn, deploy_id)
    out: dict[str, Any] = {"role": role, "state": None, "error": None, "detections": []}
    if found is None:
        if stored.given_up(conn, deploy_id, delay):
            out["error"] = (
                f"no canary analysis was stored within {stored.HORIZON.total_seconds() / 3600:g} h of it falling "
                "due (its runs failed: see canary_verdicts' runs in Dagster)"
            )
            out["state"] = "error"
            return out
        state["state"] = "pending"
        return out
    out.update(
        state=found["state"],
        error=found["error"],
        stable_role=found["stable_role"],
        stable_userid=found["stable_userid"],
        analysed_at=found["analysed_at"].isoformat(),
        counts={v.value: found[v] for v in VERDICTS},
    )
    if found["state"] == "error":
        return out
    state["state"] = found["state"]
    table = stored.verdicts_of(conn, deploy_id)
    detected = table[table["verdict"] == Verdict.DETECTED]
    out["detections"] = [
        {
            "queryid": int(r.queryid),
            "dbid": int(r.dbid),
            "toplevel": bool(r.toplevel),
            "change_factor": float(r.change_factor),
            "factor_low": float(r.factor_low),
            "factor_high": float(r.factor_high),
            "mean_canary_ms": float(r.mean_canary_ms),
            "mean_stable_ms": float(r.mean_stable_ms),
            "query": r.query,
        }
        for r in detected.itertuples()
    ]
    return out


def execution_shares(conn: sa.Connection, deploy_id: str) -> dict[str, float]:
    """Verdict → the share of the deploy's execution time after it that its statements hold, measured as
    radar.deploy_state measures it (calls after × mean after, the first look's where a later look replaced the row:
    WEIGHED_MS); empty when nothing ran after the deploy."""
    rows = conn.execute(
        sa.text(
            f"SELECT v.verdict, sum({WEIGHED_MS}) FROM radar.verdict v "
            f"WHERE v.deploy_id = :d AND {WEIGHED_MS} > 0 GROUP BY v.verdict"
        ),
        {"d": deploy_id},
    ).all()
    total = sum(float(ms or 0) for _, ms in rows)
    return {str(verdict): float(ms or 0) / total for verdict, ms in rows} if total > 0 else {}


@dataclass(frozen=True)
class Tiered:
    """A deploy's statements marked with a tier (sql/0036), each list the busiest first (at most the `limit` asked
    for), and how many of each tier there are in all."""

    improved: list[dict[str, Any]]
    probably_slower: list[dict[str, Any]]
    improved_count: int = 0
    probably_slower_count: int = 0


def tiered_statements(conn: sa.Connection, deploy_id: str, limit: int = 50) -> Tiered:
    """The deploy's statements marked improved or probably_slower (Tiered), those holding most of its execution time
    after it first. Each: target, queryid, dbid, userid, toplevel, verdict, `factor` (at the change where the verdict
    located one, else the window's) with its 95% interval (factor_low, factor_high), change_factor, the means before
    and after, cause and cause_detail (a probably slower statement's, issue 39), `share` (of the execution time after
    the deploy, as radar.deploy_state weighs it; None when nothing ran after it) and the statement's text on one line
    (raw: each place it is shown escapes it)."""
    rows = conn.execute(
        sa.text(
            "SELECT * FROM (SELECT v.tier, v.target, v.queryid, v.dbid, v.userid, v.toplevel, v.verdict, "
            "v.change_factor, v.segment_mean_after_ms / nullif(v.segment_mean_before_ms, 0) AS factor_at_change, "
            "v.factor_low, v.factor_high, v.mean_before_ms, v.mean_after_ms, v.cause, v.cause_detail, "
            f"t.ms / nullif(sum(t.ms) OVER (), 0) AS share, "
            "regexp_replace(coalesce(q.query, ''), '\\s+', ' ', 'g') AS query, "
            "row_number() OVER (PARTITION BY v.tier ORDER BY t.ms DESC, v.queryid) AS rank, "
            "count(*) OVER (PARTITION BY v.tier) AS n "
            "FROM radar.verdict v "
            f"CROSS JOIN LATERAL (SELECT CASE WHEN {WEIGHED_MS} > 0 THEN {WEIGHED_MS} ELSE 0 END AS ms) t "
            "LEFT JOIN radar.query q ON q.target = v.target AND q.dbid = v.dbid "
            "AND q.userid = v.userid AND q.queryid = v.queryid AND q.toplevel = v.toplevel "
            "WHERE v.deploy_id = :d) x WHERE tier IS NOT NULL AND rank <= :n ORDER BY tier, rank"
        ),
        {"d": deploy_id, "n": limit},
    )
    found: dict[str, list[dict[str, Any]]] = {"improved": [], "probably_slower": []}
    counts = {"improved": 0, "probably_slower": 0}
    for r in rows:
        cells = dict(r._mapping)
        tier = cells.pop("tier")
        counts[tier] = int(cells.pop("n"))
        cells.pop("rank")
        at = cells.pop("factor_at_change")
        cells["factor"] = at if at is not None else cells["change_factor"]
        for name in ("queryid", "dbid", "userid"):
            cells[name] = int(cells[name])
        found[tier].append(cells)
    return Tiered(found["improved"], found["probably_slower"], counts["improved"], counts["probably_slower"])


def recent_deploys(conn: sa.Connection, target: str | None, limit: int) -> list[dict[str, Any]]:
    """The `limit` latest deploys (of `target`, or of all), newest first, each its radar.deploy_state row and source;
    only those deploys' analyses and verdicts are read."""
    where = "WHERE target = :t" if target is not None else ""
    rows = conn.execute(
        sa.text(
            "SELECT s.*, e.source FROM radar.deploy_state s JOIN radar.deploy_event e USING (deploy_id) "
            f"WHERE s.deploy_id = ANY(ARRAY(SELECT deploy_id FROM radar.deploy_event {where} "
            "ORDER BY deployed_at DESC, deploy_id DESC LIMIT :n)) ORDER BY s.deployed_at DESC, s.deploy_id DESC"
        ),
        {"t": target, "n": limit},
    )
    return [dict(r._mapping) for r in rows]


def target_scrapes(conn: sa.Connection, within: timedelta) -> list[dict[str, Any]]:
    """Each target the warehouse has scrapes of, by name: its last scrape (captured_at, age by the warehouse's
    clock, the statements the view held then, server and extension versions), its scrapes in the last `within`,
    and the statements pg_stat_statements evicted over them (dealloc, PostgreSQL 14+: those were never seen)."""
    rows = conn.execute(
        sql_text("warehouse.target_scrapes"),
        {"within": within},
    )
    return [dict(r._mapping) for r in rows]
