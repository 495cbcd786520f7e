"""The canary arm's tables (sql/0030): radar.canary_analysis, one row per canary analysis (its roles, window,
state, or the error that stopped it), and radar.canary_verdict, one row per statement key it decided; the deploys
whose canary analysis is due; and the reads `radar verdicts` and `radar gate` make of them."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pandas as pd
import sqlalchemy as sa

from radar_pipeline.config.queries import sql_text
from radar_pipeline.engine.frames import CANARY_FRAME, CANARY_STORED

# radar.canary_verdict's columns written from a canary verdicts frame (engine.frames.CANARY_STORED): the statement key
# split as stored, then the engine's columns but the shared key itself.
KEY_COLUMNS = tuple(c for c in CANARY_STORED.names if c not in CANARY_FRAME.names)
VERDICT_COLUMNS = (*KEY_COLUMNS, *(c for c in CANARY_FRAME.names if c != "query_key"))


# The sensor asks again for a canary analysis that is still missing (a run failed: the warehouse or the target away
# for a while, a refusal when the clocks differ), each attempt RETRY_BASE doubling after the last: attempt k starts
# RETRY_BASE · (2^k − 1) after the analysis fell due (0, 5, 15, 35 min, …). Canaries are news: one due more than
# HORIZON ago is asked for no more, and the gate then answers without it, saying so (warehouse.status.canary_gate).
RETRY_BASE = timedelta(minutes=5)
HORIZON = timedelta(days=1)
# The last attempt: the last k whose start lies within HORIZON (k = 8, 21¼ h after the analysis fell due).
LAST_ATTEMPT = max(k for k in range(32) if RETRY_BASE * (2**k - 1) < HORIZON)


@dataclass(frozen=True)
class DueCanary:
    """A deploy whose canary analysis is due and not stored: its target, and the attempt now under way (its number
    from when the analysis fell due, by the warehouse's clock: see RETRY_BASE)."""

    deploy_id: str
    target: str
    attempt: int


def due_canaries(conn: sa.Connection, delay: timedelta, limit: int = 200) -> list[DueCanary]:
    """The deploys that name a canary role, whose canary window plus one scrape interval (`delay`) has passed by the
    warehouse's clock, less than HORIZON ago, and that have no canary analysis: each with its attempt number (the
    RETRY_BASE schedule), the lowest attempts first (a deploy just due before any asked for again), then the oldest,
    at most `limit`."""
    rows = conn.execute(
        sql_text("warehouse.due_canaries"),
        {"delay": delay, "n": limit, "base": RETRY_BASE.total_seconds(), "last": LAST_ATTEMPT, "horizon": HORIZON},
    )
    return [DueCanary(r.deploy_id, r.target, int(r.attempt)) for r in rows]


def given_up(conn: sa.Connection, deploy_id: str, delay: timedelta) -> bool:
    """Whether the deploy's canary analysis fell due (canary window plus `delay`) more than HORIZON ago: the sensor
    asks for it no more."""
    return bool(
        conn.execute(
            sa.text(
                "SELECT greatest(received_at, deployed_at + :delay) <= now() - :horizon FROM radar.deploy_event "
                "WHERE deploy_id = :d"
            ),
            {"d": deploy_id, "delay": delay, "horizon": HORIZON},
        ).scalar()
    )


def unalerted(
    conn: sa.Connection, alert_prefix: str, max_age: timedelta, grace: timedelta, limit: int = 100
) -> list[str]:
    """The deploys whose canary analysis is stored with detections and has no outbox row (a detection under the target
    `alert_prefix` + its target): its run stopped between storing it and canary_alerts claiming the rows. Only those
    whose canary window closed within `max_age` (older ones are no longer news) and that were stored more than
    `grace` ago (the run that stored it is still on its way to claim them), the oldest first."""
    rows = conn.execute(
        sa.text(
            "SELECT c.deploy_id FROM radar.canary_analysis c "
            "WHERE c.state <> 'error' AND c.detected > 0 AND c.window_end > now() - :age "
            "AND c.analysed_at <= now() - :grace AND NOT EXISTS (SELECT 1 FROM radar.outbox a "
            "  WHERE a.kind = 'detection' AND a.analysis_id = c.deploy_id AND a.target = :prefix || c.target) "
            "ORDER BY c.analysed_at, c.deploy_id LIMIT :n"
        ),
        {"prefix": alert_prefix, "age": max_age, "grace": grace, "n": limit},
    )
    return [str(r.deploy_id) for r in rows]


def stored_roles(conn: sa.Connection, target: str) -> dict[str, int]:
    """The roles of the target the warehouse knows by name and oid: those with a stored role-level setting
    (radar.catalog_fact) and those an earlier canary analysis resolved (its canary and stable roles)."""
    from radar_pipeline.warehouse.catalog import setting_roles

    rows = conn.execute(
        sa.text(
            "SELECT canary_role, canary_userid FROM radar.canary_analysis WHERE target = :t "
            "AND canary_userid IS NOT NULL UNION SELECT stable_role, stable_userid FROM radar.canary_analysis "
            "WHERE target = :t AND stable_role IS NOT NULL AND stable_userid IS NOT NULL"
        ),
        {"t": target},
    )
    return {**{str(r[0]): int(r[1]) for r in rows}, **setting_roles(conn, target)}


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
        sql_text("warehouse.canary_verdicts"),
        {"d": deploy_id},
    )
    return pd.DataFrame([dict(r._mapping) for r in rows], columns=["deploy_id", *VERDICT_COLUMNS, "query"])
