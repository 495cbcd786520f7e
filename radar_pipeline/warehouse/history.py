"""Reads and writes of radar.query_history: a deploy's points in, each query's earlier points and state out.

A query's series is (target, dbid, userid, toplevel, fingerprint), ordered by (deployed_at, deploy_id): statements of
different databases, users or nesting levels are never one query. Bands use earlier points only, so
adding a deploy's points changes nothing before them; the points after them (a backfill of an older deploy) are
recomputed from their stored means.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import pandas as pd
import sqlalchemy as sa

from radar_pipeline.config.queries import sql_text
from radar_pipeline.engine.history import RESULT, STATE
from radar_pipeline.engine.vocabulary import Verdict
from radar_pipeline.warehouse.database import copy_frame

SERIES = ["target", "fingerprint"]
QUERY = ["dbid", "userid", "toplevel", "fingerprint"]  # a query within its target
Query = tuple[int, int, bool, int]
# The queries given as four arrays, joined on as f(dbid, userid, toplevel, fingerprint).
_QUERIES = (
    "unnest(CAST(:q_dbid AS oid[]), CAST(:q_userid AS oid[]), CAST(:q_toplevel AS boolean[]), "
    "CAST(:q_fingerprint AS bigint[])) AS f(dbid, userid, toplevel, fingerprint)"
)
_IN_QUERIES = f"(dbid, userid, toplevel, fingerprint) IN (SELECT * FROM {_QUERIES})"


def _query_params(queries: list[Query]) -> dict[str, list]:
    return {f"q_{name}": [q[i] for q in queries] for i, name in enumerate(QUERY)}


# The verdicts (alias v) of the deploys :ids whose standing label is intended (sql/0040), joined as i (i.queryid is
# NULL for the others): the query's new level begins there. The deploys' filter reaches into the view, so the labels
# are read once for the statement, not once per verdict.
_INTENDED_JOIN = (
    "LEFT JOIN (SELECT DISTINCT deploy_id, target, dbid, userid, queryid, toplevel FROM radar.intended_verdict "
    "WHERE deploy_id = ANY(CAST(:ids AS text[]))) i ON i.deploy_id = v.deploy_id AND i.target = v.target "
    "AND i.dbid = v.dbid AND i.userid = v.userid AND i.queryid = v.queryid AND i.toplevel = v.toplevel"
)
# usual_level: the point's usual level at its hours of the week (steps/rhythm.py point_levels; NaN: none): the bands
# judge mean_ms / usual_level
POINT = ["deploy_id", "deployed_at", "dbid", "userid", "queryid", "toplevel", "mean_ms", "calls", "usual_level"]
COLUMNS = [*SERIES, *POINT, "begins_segment", *RESULT, "settings"]


def lock_target(conn: sa.Connection, target: str) -> None:
    """Serialise updates of the target's histories for the rest of the caller's transaction."""
    conn.execute(
        sa.text("SELECT pg_advisory_xact_lock(hashtextextended('radar.query_history:' || :t, 0))"), {"t": target}
    )


def deploy_points(conn: sa.Connection, deploy_id: str, min_calls: int) -> pd.DataFrame:
    """The deploy's new points: each analysed query's mean over the window after the deploy, where it had at least
    `min_calls` calls there, and whether the query changed at this deploy (`detected`: a regression detected, or
    its verdict labelled intended)."""
    return pd.read_sql(
        sa.text(
            "SELECT v.target, v.fingerprint, v.deploy_id, d.deployed_at, v.dbid, v.userid, v.queryid, v.toplevel, "
            f"v.mean_after_ms AS mean_ms, v.calls_after AS calls, "
            f"v.verdict = '{Verdict.DETECTED}' OR i.queryid IS NOT NULL AS detected, "
            "CAST(NULL AS double precision) AS usual_level "
            f"FROM radar.verdict v JOIN radar.deploy_event d USING (deploy_id) {_INTENDED_JOIN} "
            "WHERE v.deploy_id = :d AND v.calls_after >= :min_calls AND v.n_after >= 1 "
            "AND v.mean_after_ms IS NOT NULL AND v.mean_after_ms = v.mean_after_ms"  # not NaN
        ),
        conn,
        params={"d": deploy_id, "ids": [deploy_id], "min_calls": min_calls},
    )


def stored_queries(conn: sa.Connection, deploy_id: str) -> list[Query]:
    """The queries that have a point at this deploy now."""
    rows = conn.execute(
        sa.text(f"SELECT {', '.join(QUERY)} FROM radar.query_history WHERE deploy_id = :d"), {"d": deploy_id}
    )
    return [(int(r[0]), int(r[1]), bool(r[2]), int(r[3])) for r in rows]


def earlier_points(
    conn: sa.Connection, target: str, queries: list[Query], before: tuple[datetime, str], per_query: int
) -> pd.DataFrame:
    """Each query's latest `per_query` points ordered before `before` (deployed_at, deploy_id), oldest first."""
    return pd.read_sql(
        sa.text(
            f"SELECT p.* FROM {_QUERIES} CROSS JOIN LATERAL ("
            "  SELECT h.target, h.dbid, h.userid, h.toplevel, h.fingerprint, h.deployed_at, h.deploy_id, h.mean_ms, "
            "  h.usual_level, "
            f"  {', '.join('h.' + c for c in STATE)} FROM radar.query_history h "
            "  WHERE h.target = :t AND h.dbid = f.dbid AND h.userid = f.userid AND h.toplevel = f.toplevel "
            "  AND h.fingerprint = f.fingerprint AND (h.deployed_at, h.deploy_id) < (:at, :d) "
            "  ORDER BY h.deployed_at DESC, h.deploy_id DESC LIMIT :k) p "
            "ORDER BY p.dbid, p.userid, p.toplevel, p.fingerprint, p.deployed_at, p.deploy_id"
        ),
        conn,
        params={**_query_params(queries), "t": target, "at": before[0], "d": before[1], "k": per_query},
    )


def later_points(
    conn: sa.Connection, target: str, queries: list[Query], after: tuple[datetime, str], inclusive: bool = False
) -> pd.DataFrame:
    """Every stored point of these queries ordered after `after` (with `inclusive`, from it on), to be recomputed
    (empty in normal operation), with the settings each was judged with."""
    return pd.read_sql(
        sa.text(
            f"SELECT {', '.join(SERIES + POINT)}, settings FROM radar.query_history "
            f"WHERE target = :t AND {_IN_QUERIES} AND (deployed_at, deploy_id) {'>=' if inclusive else '>'} (:at, :d) "
            "ORDER BY dbid, userid, toplevel, fingerprint, deployed_at, deploy_id"
        ),
        conn,
        params={**_query_params(queries), "t": target, "at": after[0], "d": after[1]},
    )


def detected_at_deploys(conn: sa.Connection, target: str, deploy_ids: list[str]) -> set[tuple]:
    """(deploy_id, dbid, userid, toplevel, fingerprint) of the queries that changed at these deploys: a regression
    detected, or a verdict labelled intended."""
    rows = conn.execute(
        sa.text(
            f"SELECT v.deploy_id, {', '.join('v.' + c for c in QUERY)} FROM radar.verdict v {_INTENDED_JOIN} "
            f"WHERE v.target = :t AND (v.verdict = '{Verdict.DETECTED}' OR i.queryid IS NOT NULL) "
            "AND v.deploy_id = ANY(CAST(:ids AS text[]))"
        ),
        {"t": target, "ids": deploy_ids},
    )
    return {(r[0], int(r[1]), int(r[2]), bool(r[3]), int(r[4])) for r in rows}


def periodic_detections(conn: sa.Connection, target: str, queries: list[Query], since: datetime) -> pd.DataFrame:
    """Changes the periodic check detected in these queries after `since`: QUERY columns, change_at."""
    return pd.read_sql(
        sa.text(
            f"SELECT {', '.join(QUERY)}, change_at FROM radar.verdict "
            f"WHERE target = :t AND verdict = '{Verdict.DETECTED}' "
            f"AND trigger = 'periodic' AND {_IN_QUERIES} AND change_at > :since "
            "ORDER BY change_at"
        ),
        conn,
        params={**_query_params(queries), "t": target, "since": since},
    )


def replace_from(
    conn: sa.Connection,
    target: str,
    queries: list[Query],
    since: tuple[datetime, str],
    rows: pd.DataFrame,
    settings: dict[str, Any],
) -> None:
    """Replace these queries' points from `since` (deployed_at, deploy_id) on, that one included, with `rows` (COLUMNS
    but settings): a deploy's points and the later ones they change (the deploy's queries are all its stored points'
    and its new ones'), or a statement's points from an intended label's deploy on."""
    conn.execute(
        sa.text(
            f"DELETE FROM radar.query_history WHERE target = :t AND {_IN_QUERIES} "
            "AND (deployed_at, deploy_id) >= (:at, :d)"
        ),
        {**_query_params(queries), "t": target, "at": since[0], "d": since[1]},
    )
    if not rows.empty:
        copy_frame(conn, "radar.query_history", COLUMNS, rows.assign(settings=json.dumps(settings, sort_keys=True)))


def series_points(
    conn: sa.Connection, target: str, query: Query, until: tuple[datetime, str], limit: int = 60
) -> pd.DataFrame:
    """A query's latest `limit` points up to and including `until` (deployed_at, deploy_id), oldest first."""
    return pd.read_sql(
        sql_text("warehouse.series_points"),
        conn,
        params={
            "t": target,
            **dict(zip(("dbid", "userid", "toplevel", "f"), query, strict=True)),
            "at": until[0],
            "d": until[1],
            "n": limit,
        },
    )
