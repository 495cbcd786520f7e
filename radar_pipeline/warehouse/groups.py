"""The groups' joint verdicts of an analysis (radar.group_verdict, issue 29): the first verdict's written with the
analysis, in the same transaction; a later look's (sql/0034: a row per group per look it was tested at) written with
that look, its members marked; read for `radar verdicts`, the alerts and the looks' due list."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import numpy as np
import pandas as pd
import sqlalchemy as sa

from radar_pipeline.config.queries import sql_text
from radar_pipeline.engine.frames import GROUPS_STORED
from radar_pipeline.engine.vocabulary import Verdict

# A group's verdicts that end its looks (engine.groups.DECIDED).
DECIDED_SQL = "('detected', 'no_regression')"
# Written too: a group's tier (sql/0036: probably_slower, improved), when the engine's groups frame has one; NULL else.
OPTIONAL = ("tier",)
# The columns of radar.group_verdict written from a decided groups frame (engine.frames.GROUPS_STORED): all but the
# design effect, which only the engine reads, and OPTIONAL.
STORED = tuple(c for c in GROUPS_STORED.names if c not in ("design", *OPTIONAL))


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
            f"INSERT INTO radar.group_verdict (deploy_id, target, {', '.join(WRITTEN)}) VALUES (:deploy_id, :target, "
            f"{', '.join(':' + c for c in WRITTEN)})"
        ),
        [{"deploy_id": analysis_id, "target": target, **_row(r)} for r in _written(groups)],
    )


def open_groups(conn: sa.Connection, deploy_id: str, target: str) -> set[str]:
    """The deploy's groups on the target still undecided: tested (at the first verdict or a later look) and never
    `detected` nor `no_regression`. A later look tests them again (steps/groups.later_look)."""
    rows = conn.execute(
        sa.text(
            "SELECT group_id FROM radar.group_verdict WHERE deploy_id = :d AND target = :t GROUP BY group_id "
            f"HAVING NOT bool_or(verdict IN {DECIDED_SQL})"
        ),
        {"d": deploy_id, "t": target},
    )
    return {str(r[0]) for r in rows}


def first_groups(conn: sa.Connection, deploy_id: str, target: str) -> set[str]:
    """The groups the deploy's first verdict formed on the target (its look-0 rows, tested or not)."""
    rows = conn.execute(
        sa.text("SELECT group_id FROM radar.group_verdict WHERE deploy_id = :d AND target = :t AND look = 0"),
        {"d": deploy_id, "t": target},
    )
    return {str(r[0]) for r in rows}


def decided_groups(conn: sa.Connection, deploy_id: str, target: str) -> set[str]:
    """The deploy's groups on the target already decided (`detected` or `no_regression`) at some look."""
    rows = conn.execute(
        sa.text(
            "SELECT DISTINCT group_id FROM radar.group_verdict WHERE deploy_id = :d AND target = :t "
            f"AND verdict IN {DECIDED_SQL}"
        ),
        {"d": deploy_id, "t": target},
    )
    return {str(r[0]) for r in rows}


def write_look_groups(
    conn: sa.Connection, deploy_id: str, target: str, look: int, look_end: datetime, groups: pd.DataFrame
) -> int:
    """Replace the groups' verdicts of later look `look` (≥ 1) of the deploy on the target with `groups` (STORED
    columns: the groups that look tested), in the caller's transaction, which holds the look's lock; mark each tested
    member of a group it detected (`mark_members`). Never touches a group already decided at an earlier look. Returns
    how many groups it detected."""
    if look < 1:
        raise ValueError(f"a later look's groups need look ≥ 1, not {look} (the first verdict's: write_groups)")
    missing = [c for c in STORED if c not in groups.columns]
    if missing and not groups.empty:
        raise ValueError(f"the groups frame lacks column(s) {', '.join(missing)}")
    conn.execute(
        sa.text("DELETE FROM radar.group_verdict WHERE deploy_id = :d AND target = :t AND look = :k"),
        {"d": deploy_id, "t": target, "k": look},
    )
    if groups.empty:
        return 0
    earlier = decided_groups(conn, deploy_id, target)
    fresh = groups[~groups["group_id"].isin(earlier)]
    if fresh.empty:
        return 0
    conn.execute(
        sa.text(
            f"INSERT INTO radar.group_verdict (deploy_id, target, look, look_end, {', '.join(WRITTEN)}) VALUES "
            f"(:deploy_id, :target, :look, :look_end, {', '.join(':' + c for c in WRITTEN)})"
        ),
        [
            {"deploy_id": deploy_id, "target": target, "look": look, "look_end": look_end, **_row(r)}
            for r in _written(fresh)
        ],
    )
    detected = fresh[fresh["verdict"] == Verdict.DETECTED]
    for record in detected.to_dict("records"):
        mark_members(conn, deploy_id, target, record, f"{record['sentence']} (later look {look})")
    return len(detected)


def mark_members(conn: sa.Connection, deploy_id: str, target: str, record: dict[str, Any], sentence: str) -> None:
    """Add "in a group that regressed: <sentence>" to the verdict rows of the group's tested members (`record`'s
    member_* arrays), beside any mark they carry ("; "), once: a look run again does not repeat it. The members' own
    verdicts are unchanged."""
    conn.execute(
        sql_text("warehouse.mark_group_members"),
        {
            "d": deploy_id,
            "t": target,
            "s": sentence,
            **{k: [_plain(v) for v in record[f"member_{k}"]] for k in ("dbid", "userid", "queryid", "toplevel")},
        },
    )


WRITTEN = (*STORED, *OPTIONAL)


def _written(groups: pd.DataFrame) -> list[dict[str, Any]]:
    """The groups' rows as written: the STORED columns, and each OPTIONAL one (None where the frame lacks it)."""
    return groups.reindex(columns=list(WRITTEN)).astype({c: object for c in OPTIONAL}).to_dict("records")


def _plain(value: Any) -> Any:
    return value.item() if isinstance(value, np.generic) else value


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
    """An analysis's group verdicts (every target's; a group tested at several looks, its latest), detections first,
    then by Z; with the look that decided each (look_end: where that look's after side ended; NULL for the first)."""
    return pd.read_sql(
        sa.text(
            f"SELECT * FROM (SELECT DISTINCT ON (target, group_id) target, {', '.join(WRITTEN)}, look, look_end "
            "FROM radar.group_verdict WHERE deploy_id = :d ORDER BY target, group_id, look DESC) g "
            "ORDER BY verdict = 'detected' DESC, z_stat DESC NULLS LAST, group_id"
        ),
        conn,
        params={"d": analysis_id},
    )
