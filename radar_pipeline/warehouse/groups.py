"""The groups' joint verdicts of an analysis (radar.group_verdict, issue 29): written with the analysis, in the same
transaction, and read for `radar verdicts`."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import sqlalchemy as sa

# The columns of radar.group_verdict written from a decided groups frame (steps/groups.py GROUPS_FRAME).
STORED = (
    "group_id",
    "kind",
    "label",
    "verdict",
    "members",
    "members_above",
    "statements",
    "factor",
    "factor_low",
    "factor_high",
    "factor_bound",
    "factor_but_one",
    "tau",
    "z_stat",
    "p_value",
    "p_family",
    "budget_share",
    "sentence",
    "member_dbid",
    "member_userid",
    "member_queryid",
    "member_toplevel",
)


def write_groups(conn: sa.Connection, analysis_id: str, target: str, groups: pd.DataFrame) -> None:
    """Replace the analysis's group verdicts on the target with `groups` (STORED columns; none: it has no groups),
    in the caller's transaction, which also holds the analysis's radar.analysis row."""
    missing = [c for c in STORED if c not in groups.columns]
    if missing and not groups.empty:
        raise ValueError(f"the groups frame lacks column(s) {', '.join(missing)}")
    conn.execute(
        sa.text("DELETE FROM radar.group_verdict WHERE deploy_id = :d AND target = :t"),
        {"d": analysis_id, "t": target},
    )
    if groups.empty:
        return
    conn.execute(
        sa.text(
            f"INSERT INTO radar.group_verdict (deploy_id, target, {', '.join(STORED)}) VALUES (:deploy_id, :target, "
            f"{', '.join(':' + c for c in STORED)})"
        ),
        [{"deploy_id": analysis_id, "target": target, **_row(r)} for r in groups[list(STORED)].to_dict("records")],
    )


def _row(record: dict[str, Any]) -> dict[str, Any]:
    """A row's values as the driver takes them: NaN as NULL, numpy scalars as Python's, arrays as lists."""
    out: dict[str, Any] = {}
    for name, value in record.items():
        if isinstance(value, np.ndarray | list | tuple):
            out[name] = [v.item() if isinstance(v, np.generic) else v for v in value]
        elif isinstance(value, np.generic):
            out[name] = value.item()
        else:
            out[name] = value
        if isinstance(out[name], float) and np.isnan(out[name]):
            out[name] = None
    return out


def groups_of(conn: sa.Connection, analysis_id: str) -> pd.DataFrame:
    """An analysis's group verdicts (every target's), detections first, then by Z."""
    return pd.read_sql(
        sa.text(
            f"SELECT target, {', '.join(STORED)} FROM radar.group_verdict WHERE deploy_id = :d "
            "ORDER BY verdict = 'detected' DESC, z_stat DESC NULLS LAST, group_id"
        ),
        conn,
        params={"d": analysis_id},
    )
