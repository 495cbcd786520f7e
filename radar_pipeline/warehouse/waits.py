"""The watched statements' wait samples in the warehouse (sql/0038; collector/waits.py): stored per scrape, and
counted per statement either side of a split for the causes (steps/waits.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import pandas as pd
import sqlalchemy as sa

from radar_pipeline.config.queries import sql_text


def write_waits(
    conn: sa.Connection, target: str, readings: Sequence[tuple[datetime, Sequence[Mapping[str, Any]]]]
) -> int:
    """Store a scrape's readings (each its time and its rows: collector/waits.WaitSample fields), in the caller's
    transaction, in two statements whatever their number; returns the rows written. A reading already stored at its
    time writes nothing."""
    if not readings:
        return 0
    taken = {
        r[0]
        for r in conn.execute(
            sa.text(
                "INSERT INTO radar.wait_capture (target, captured_at) SELECT :t, unnest(CAST(:at AS timestamptz[])) "
                "ON CONFLICT DO NOTHING RETURNING captured_at"
            ),
            {"t": target, "at": [at for at, _ in readings]},
        )
    }
    rows = [{**s, "t": target, "at": at} for at, samples in readings if at in taken for s in samples]
    if rows:
        conn.execute(
            sa.text(
                "INSERT INTO radar.wait_sample (target, captured_at, dbid, userid, queryid, wait_event_type, "
                "wait_event, blocker_queryid, blocker_userid, sessions) VALUES (:t, :at, :dbid, :userid, :queryid, "
                ":wait_event_type, :wait_event, :blocker_queryid, :blocker_userid, :sessions)"
            ),
            rows,
        )
    return len(rows)


def wait_counts(conn: sa.Connection, target: str, statements: pd.DataFrame, lo: datetime, hi: datetime) -> pd.DataFrame:
    """For each statement (`row`: its position in `statements`, rows with dbid, userid, queryid and `split`, a time in
    (lo, hi)), per side (`after`: the sample is later than the split) and wait_event_type: the samples taken on the
    side (`captures`), those in which it had a session waiting on that type (`seen`) and its sessions waiting on it
    summed over them (`sessions`), its most frequent wait_event,
    and for a heavyweight lock the statement blocking it most often there (`blocker_queryid`, `blocker_userid`).
    Sessions running (no wait) are left out."""
    if statements.empty:
        return pd.DataFrame(
            columns=["row", "after", "wait_event_type", "wait_event", "seen", "sessions", "captures",
                     "blocker_queryid", "blocker_userid"]
        )  # fmt: skip
    keys = statements.reset_index(drop=True)
    params = {
        "t": target,
        "lo": lo,
        "hi": hi,
        "row": list(range(len(keys))),
        "dbid": [int(v) for v in keys["dbid"]],
        "userid": [int(v) for v in keys["userid"]],
        "queryid": [int(v) for v in keys["queryid"]],
        "split": [pd.Timestamp(v).to_pydatetime() for v in keys["split"]],
    }
    rows = conn.execute(
        sql_text("warehouse.wait_counts"),
        params,
    ).all()
    return pd.DataFrame(
        [tuple(r) for r in rows],
        columns=["row", "after", "wait_event_type", "wait_event", "seen", "sessions", "captures",
                 "blocker_queryid", "blocker_userid"],
    )  # fmt: skip


def delete_before(conn: sa.Connection, cutoff_at: datetime) -> None:
    """Drop the wait samples taken before `cutoff_at` (their rows go with their captures)."""
    conn.execute(sa.text("DELETE FROM radar.wait_capture WHERE captured_at < :c"), {"c": cutoff_at})
