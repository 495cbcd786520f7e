"""The alert outbox (radar.alert): a row per regression per channel, written before anything is sent."""

from __future__ import annotations

from typing import Any

import pandas as pd
import sqlalchemy as sa

from radar_pipeline.pgss_model import KEY, Key, statement_key
from radar_pipeline.warehouse.analysis import VERDICT_QUERY_JOIN

MAX_ATTEMPTS = 5  # a retryable failure keeps an alert pending until it has been tried this many times


def detections(conn: sa.Connection, analysis_id: str) -> pd.DataFrame:
    """The analysis's detected regressions to alert, with their text, the deploy's facts (none for a periodic
    analysis) and the analysis that found them. Of a periodic analysis, only those it reported (it opened their
    episode: see warehouse.episodes)."""
    return pd.read_sql(
        sa.text(
            "SELECT v.*, q.query, d.deployed_at, d.service, d.version, d.url, a.run_id, a.settings, "
            "a.window_start, a.window_end "
            "FROM radar.verdict v LEFT JOIN radar.deploy_event d USING (deploy_id) "
            "JOIN radar.analysis a ON a.deploy_id = v.deploy_id AND a.target = v.target "
            f"{VERDICT_QUERY_JOIN} "
            "WHERE v.deploy_id = :d AND v.verdict = 'detected' AND (v.trigger = 'deploy' OR EXISTS ("
            "  SELECT 1 FROM radar.regression_episode e WHERE e.opened_by = v.deploy_id AND e.target = v.target "
            "  AND e.fingerprint = v.fingerprint)) "
            "ORDER BY v.target, v.confidence DESC, v.change_factor DESC"
        ),
        conn,
        params={"d": analysis_id},
    )


def lock(conn: sa.Connection, analysis_id: str) -> None:
    """Serialise the analysis's alerting for this transaction, so two runs never send the same alerts."""
    conn.execute(sa.text("SELECT pg_advisory_xact_lock(hashtextextended('radar.alert:' || :d, 0))"), {"d": analysis_id})


def enqueue(conn: sa.Connection, analysis_id: str, target: str, keys: list[Key], channel: str) -> None:
    """Add a pending row for each regression not yet in the outbox for this channel."""
    if not keys:
        return
    conn.execute(
        sa.text(
            "INSERT INTO radar.alert (deploy_id, target, dbid, userid, queryid, toplevel, channel) "
            "VALUES (:d, :t, :dbid, :userid, :queryid, :toplevel, :c) ON CONFLICT DO NOTHING"
        ),
        [{"d": analysis_id, "t": target, **dict(zip(KEY, k, strict=True)), "c": channel} for k in keys],
    )


def pending(conn: sa.Connection, analysis_id: str, target: str, channel: str) -> list[Key]:
    """The regressions of the analysis and target still to send on this channel."""
    rows = conn.execute(
        sa.text(
            f"SELECT {', '.join(KEY)} FROM radar.alert WHERE deploy_id = :d AND target = :t AND channel = :c "
            "AND status = 'pending'"
        ),
        {"d": analysis_id, "t": target, "c": channel},
    )
    return [statement_key(r) for r in rows]


def mark(
    conn: sa.Connection,
    analysis_id: str,
    target: str,
    channel: str,
    keys: list[Key],
    status: str,
    ts: str | None = None,
    error: str | None = None,
) -> None:
    """Record an attempt on these alerts: sent (with the message ts), skipped, or a failure (pending while
    retryable and under MAX_ATTEMPTS, else failed)."""
    params: list[dict[str, Any]] = [
        {
            "d": analysis_id,
            "t": target,
            "c": channel,
            **dict(zip(KEY, k, strict=True)),
            "status": status,
            "ts": ts,
            "error": error,
            "max": MAX_ATTEMPTS,
        }
        for k in keys
    ]
    if not params:
        return
    conn.execute(
        sa.text(
            "UPDATE radar.alert SET attempts = attempts + 1, last_error = :error, "
            "message_ts = coalesce(:ts, message_ts), "
            "sent_at = CASE WHEN :status = 'sent' THEN now() ELSE sent_at END, "
            "status = CASE WHEN :status = 'pending' AND attempts + 1 >= :max THEN 'failed' ELSE :status END "
            "WHERE deploy_id = :d AND target = :t AND channel = :c AND dbid = :dbid AND userid = :userid "
            "AND queryid = :queryid AND toplevel = :toplevel"
        ),
        params,
    )


def statuses(conn: sa.Connection, analysis_id: str) -> dict[str, int]:
    """How many of the analysis's alerts are in each status."""
    rows = conn.execute(
        sa.text("SELECT status, count(*) FROM radar.alert WHERE deploy_id = :d GROUP BY status"), {"d": analysis_id}
    )
    return {r[0]: int(r[1]) for r in rows}
