"""The canary arm's tables (sql/0030): radar.canary_analysis, one row per canary analysis (its roles, window,
state, or the error that stopped it), and radar.canary_verdict, one row per statement key it decided; the deploys
whose canary analysis is due; and the reads `radar verdicts` and `radar gate` make of them."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

import pandas as pd
import sqlalchemy as sa

VERDICT_COLUMNS = (
    "dbid", "queryid", "toplevel", "verdict", "reason", "change_factor", "factor_low", "factor_high", "factor_bound",
    "p_value", "p_family", "budget_share", "mean_canary_ms", "mean_stable_ms", "calls_canary", "calls_stable",
    "intervals", "serial_correlation",
)  # fmt: skip


def due_canaries(conn: sa.Connection, delay: timedelta, limit: int = 200) -> list[tuple[str, str]]:
    """(deploy_id, target) of the deploys that name a canary role, whose canary window plus one scrape interval
    (`delay`) has passed by the warehouse's clock, and that have no canary analysis yet: oldest first, at most
    `limit`."""
    rows = conn.execute(
        sa.text(
            "SELECT e.deploy_id, e.target FROM radar.deploy_event e WHERE e.canary_role IS NOT NULL "
            "AND greatest(e.received_at, e.deployed_at + :delay) <= now() "
            "AND NOT EXISTS (SELECT 1 FROM radar.canary_analysis c WHERE c.deploy_id = e.deploy_id) "
            "ORDER BY e.deployed_at, e.deploy_id LIMIT :n"
        ),
        {"delay": delay, "n": limit},
    )
    return [(r.deploy_id, r.target) for r in rows]


def replace(
    conn: sa.Connection,
    deploy_id: str,
    analysis: dict[str, Any],
    verdicts: pd.DataFrame | None,
) -> None:
    """Replace the deploy's canary analysis and its verdicts (in the caller's transaction). `analysis`: the
    radar.canary_analysis columns but deploy_id and analysed_at (settings a dict); `verdicts`: VERDICT_COLUMNS rows,
    or None for an analysis that stopped on an error."""
    conn.execute(sa.text("DELETE FROM radar.canary_analysis WHERE deploy_id = :d"), {"d": deploy_id})
    values = {**analysis, "deploy_id": deploy_id, "settings": json.dumps(analysis["settings"])}
    names = list(values)
    conn.execute(
        sa.text(
            f"INSERT INTO radar.canary_analysis ({', '.join(names)}) VALUES "
            f"({', '.join(f'CAST(:{n} AS jsonb)' if n == 'settings' else f':{n}' for n in names)})"
        ),
        values,
    )
    if verdicts is None or verdicts.empty:
        return
    rows = verdicts[list(VERDICT_COLUMNS)].astype(object).where(verdicts[list(VERDICT_COLUMNS)].notna(), None)
    conn.execute(
        sa.text(
            f"INSERT INTO radar.canary_verdict (deploy_id, {', '.join(VERDICT_COLUMNS)}) "
            f"VALUES (:deploy_id, {', '.join(f':{c}' for c in VERDICT_COLUMNS)})"
        ),
        [{"deploy_id": deploy_id, **_plain(r)} for r in rows.to_dict("records")],
    )


def _plain(row: dict[str, Any]) -> dict[str, Any]:
    """numpy scalars as Python values, for the driver."""
    return {k: (v.item() if hasattr(v, "item") else v) for k, v in row.items()}


def analysis_of(conn: sa.Connection, deploy_id: str) -> dict[str, Any] | None:
    """The deploy's radar.canary_analysis row, or None when it has none."""
    row = conn.execute(
        sa.text("SELECT * FROM radar.canary_analysis WHERE deploy_id = :d"), {"d": deploy_id}
    ).one_or_none()
    return dict(row._mapping) if row is not None else None


def verdicts_of(conn: sa.Connection, deploy_id: str) -> pd.DataFrame:
    """The deploy's canary verdicts, detections first then by the canary's execution time, each with its
    statement's text as the canary role ran it (`query`, empty when not stored)."""
    rows = conn.execute(
        sa.text(
            "SELECT v.*, coalesce(q.query, '') AS query FROM radar.canary_verdict v "
            "JOIN radar.canary_analysis a USING (deploy_id) "
            "LEFT JOIN radar.query q ON q.target = a.target AND q.dbid = v.dbid AND q.userid = a.canary_userid "
            "AND q.queryid = v.queryid AND q.toplevel = v.toplevel "
            "WHERE v.deploy_id = :d ORDER BY (v.verdict = 'detected') DESC, "
            "coalesce(v.calls_canary * v.mean_canary_ms, 0) DESC, v.queryid"
        ),
        {"d": deploy_id},
    )
    return pd.DataFrame([dict(r._mapping) for r in rows], columns=["deploy_id", *VERDICT_COLUMNS, "query"])


def canary_window(conn: sa.Connection, deploy_id: str, window: timedelta) -> tuple[datetime, datetime] | None:
    """The canary window (deployed_at, deployed_at + window] of a deploy, or None when it is not recorded."""
    row = conn.execute(
        sa.text("SELECT deployed_at FROM radar.deploy_event WHERE deploy_id = :d"), {"d": deploy_id}
    ).one_or_none()
    return None if row is None else (row.deployed_at, row.deployed_at + window)
