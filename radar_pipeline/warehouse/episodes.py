"""Reporting episodes of the periodic check (radar.regression_episode): a query is reported when it becomes slower,
and again only after it has recovered.

An episode opens with the periodic analysis that reported the query and closes with the first later analysis whose
latest period's mean is back within the threshold θ of the level before the change (baseline × (1 + θ)), or when the
query's verdict (the episode's own, or a deploy's) is labelled intended: the new level is the baseline, and no
recovery to the old one is awaited (close_intended). It is open
at time T when it opened before T and had not closed by T, so re-running or backfilling an older hour judges against
the episodes as they were then, and a re-run keeps what later hours recorded.
"""

from __future__ import annotations

from datetime import datetime

import pandas as pd
import sqlalchemy as sa

from radar_pipeline.config.queries import sql_text
from radar_pipeline.pgss_model import KEY, statement_keys

QUERY = ("dbid", "userid", "toplevel", "fingerprint")  # an episode's query within its target


def reopen(conn: sa.Connection, analysis_id: str, target: str) -> None:
    """Undo the recoveries an earlier run of this analysis recorded, so a re-run decides them afresh."""
    conn.execute(
        sa.text(
            "UPDATE radar.regression_episode SET recovered_at = NULL, recovered_by = NULL, recovered_ms = NULL "
            "WHERE recovered_by = :id AND target = :t"
        ),
        {"id": analysis_id, "t": target},
    )


def recover(
    conn: sa.Connection, analysis_id: str, target: str, period_end: datetime, threshold: float, min_calls: int
) -> pd.DataFrame:
    """Close the target's episodes open before `period_end` whose query, in this analysis, had at least `min_calls`
    calls in the latest period and a mean there at or below baseline × (1 + threshold). Returns the closed:
    fingerprint, queryid, baseline_ms, recovered_ms."""
    rows = conn.execute(
        sql_text("warehouse.recover_episodes"),
        {"end": period_end, "id": analysis_id, "t": target, "theta": threshold, "min_calls": min_calls},
    )
    return pd.DataFrame(rows.fetchall(), columns=["fingerprint", "queryid", "baseline_ms", "recovered_ms"])


def open_at(conn: sa.Connection, target: str, moment: datetime) -> set[tuple[int, int, bool, int]]:
    """The target's queries (dbid, userid, toplevel, fingerprint) with an episode open at `moment` (opened before
    it, not closed by it)."""
    rows = conn.execute(
        sa.text(
            f"SELECT DISTINCT {', '.join(QUERY)} FROM radar.regression_episode WHERE target = :t AND opened_at < :m "
            "AND (recovered_at IS NULL OR recovered_at > :m)"
        ),
        {"t": target, "m": moment},
    )
    return {(int(r[0]), int(r[1]), bool(r[2]), int(r[3])) for r in rows}


def queries_of(frame: pd.DataFrame) -> list[tuple[int, int, bool, int]]:
    """The (dbid, userid, toplevel, fingerprint) of every row."""
    return [
        (int(d), int(u), bool(t), int(f))
        for d, u, t, f in zip(frame["dbid"], frame["userid"], frame["toplevel"], frame["fingerprint"], strict=True)
    ]


def record_reports(
    conn: sa.Connection, analysis_id: str, target: str, period_end: datetime, reported: pd.DataFrame
) -> None:
    """Make the episodes this analysis opened exactly `reported` (KEY columns, fingerprint, change_at and the
    segment means): new ones open, those of an earlier run of it that it no longer reports go (but one a label
    closed as intended, which a re-run answers `intended`), and those it reports again keep what later analyses
    recorded of them."""
    kept = queries_of(reported)
    conn.execute(
        sa.text(
            "DELETE FROM radar.regression_episode WHERE opened_by = :id AND target = :t AND intended_label IS NULL "
            "AND (dbid, userid, toplevel, fingerprint) NOT IN (SELECT * FROM unnest(CAST(:d AS oid[]), "
            "CAST(:u AS oid[]), CAST(:l AS boolean[]), CAST(:f AS bigint[])))"
        ),
        {"id": analysis_id, "t": target, **{name: [k[i] for k in kept] for i, name in enumerate("dulf")}},
    )
    if reported.empty:
        return
    conn.execute(
        sql_text("warehouse.record_reports"),
        [
            {
                "t": target,
                "id": analysis_id,
                "end": period_end,
                "fingerprint": int(r.fingerprint),
                **dict(zip(KEY, key, strict=True)),
                "change_at": pd.Timestamp(r.change_at).to_pydatetime(),
                "baseline": float(r.segment_mean_before_ms),
                "level": float(r.segment_mean_after_ms),
            }
            for r, key in zip(reported.itertuples(), statement_keys(reported), strict=True)
        ],
    )


def close_intended(conn: sa.Connection, label_id: int) -> int:
    """Close, as intended by this label, the open episodes of the queries whose verdicts it stands for
    (radar.intended_verdict), from the change point it marks (an episode opened after it: from its opening): from
    then on they are not open (open_at), so a check of a later hour, run or re-run, reports a new change again; the
    labelled step itself is the periodic check's `intended`. Returns how many it closed."""
    return conn.execute(
        sql_text("warehouse.close_intended"),
        {"l": label_id},
    ).rowcount


def intended_steps(conn: sa.Connection, target: str, lo: datetime, hi: datetime) -> pd.DataFrame:
    """The change points in [lo, hi] that labels marked intended on the target's queries (radar.intended_verdict):
    QUERY columns and change_at."""
    return pd.read_sql(
        sa.text(
            f"SELECT DISTINCT {', '.join(QUERY)}, change_at FROM radar.intended_verdict "
            "WHERE target = :t AND change_at BETWEEN :lo AND :hi"
        ),
        conn,
        params={"t": target, "lo": lo, "hi": hi},
    )
