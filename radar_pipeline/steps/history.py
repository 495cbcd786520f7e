"""A deploy's points added to its queries' histories, with their bands and drift flags, and charts of the flagged.

Plain Python, so the Dagster asset and the tests run the same code.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import sqlalchemy as sa

from radar_pipeline.engine.history import STATE, HistorySettings, extend_history, theil_sen
from radar_pipeline.pgss_model import key_label
from radar_pipeline.steps.rhythm import point_levels
from radar_pipeline.warehouse import analysis, deploys
from radar_pipeline.warehouse import history as store


class HistoryRefused(RuntimeError):
    """The deploy has no analysis to take points from; nothing was written."""


@dataclass
class HistoryUpdate:
    """What adding a deploy's points found: the deploy's points with their bands, and how many later points were
    recomputed (a backfill of an older deploy)."""

    deploy_id: str
    target: str
    points: pd.DataFrame  # the deploy's own points: store.COLUMNS without settings
    recomputed: int
    texts: dict[int, str] = field(default_factory=dict)  # queryid → text, for the flagged points
    seconds: float = 0.0

    @property
    def flagged(self) -> pd.DataFrame:
        """The deploy's points above their band or flagged as drifting, the largest z first."""
        chosen = self.points[self.points["above_band"] | self.points["drift"]]
        return chosen.sort_values(["drift", "z_score"], ascending=False)


def update_history(conn: sa.Connection, deploy_id: str, settings: HistorySettings, min_calls: int) -> HistoryUpdate:
    """Add (or replace) the deploy's points in radar.query_history and recompute the points after them, in the
    caller's transaction.

    A point is a query's call-weighted mean over the window after the deploy, where the analysis saw at least
    `min_calls` calls there, judged at its usual level for those hours of the week (`judged`; steps.rhythm
    point_levels: as it is while its statement's history is too short). It begins a segment when the query changed at
    the deploy (its analysis detected a regression in it, or its verdict there is labelled intended), or the periodic
    check detected a change in it since the query's previous point.
    """
    started = time.perf_counter()
    event = deploys.get(conn, deploy_id)
    if event is None or event.deployed_at is None:
        raise HistoryRefused(f"deploy {deploy_id!r} is not recorded in radar.deploy_event")
    analysed = conn.execute(
        sa.text("SELECT min(window_end) FROM radar.analysis WHERE deploy_id = :d"), {"d": deploy_id}
    ).scalar_one()
    if analysed is None:
        raise HistoryRefused(f"deploy {deploy_id!r} has not been analysed yet: materialise deploy_verdicts first")
    target, here = event.target, (event.deployed_at, deploy_id)
    # One update of a target's histories at a time: each reads the points around its deploy and rewrites those
    # after it, so two interleaved updates could each miss the other's points.
    store.lock_target(conn, target)

    new = store.deploy_points(conn, deploy_id, min_calls)
    # each point at its usual level for those hours of the week, so the bands compare like with like
    new["usual_level"] = point_levels(conn, target, new, event.deployed_at, analysed)
    queries = sorted(set(_queries_of(new)) | set(store.stored_queries(conn, deploy_id)))
    prior = store.earlier_points(conn, target, queries, here, settings.drift_points)
    later = _changed_at_deploys(conn, target, store.later_points(conn, target, queries, here))
    rows = _judged(conn, target, queries, pd.concat([new, later], ignore_index=True), prior, settings)
    store.replace_from(conn, target, queries, here, rows, settings.to_dict())

    own = rows[rows["deploy_id"] == deploy_id].reset_index(drop=True)
    flagged = own[own["above_band"] | own["drift"]]
    texts = analysis.query_texts(conn, target, flagged[["dbid", "userid", "queryid", "toplevel"]])
    return HistoryUpdate(
        deploy_id=deploy_id,
        target=target,
        points=own,
        recomputed=len(rows) - len(own),
        texts=texts,
        seconds=time.perf_counter() - started,
    )


def rejudge_from(conn: sa.Connection, deploy_id: str, target: str, queries: list[store.Query]) -> int:
    """Judge these queries' stored points again from the deploy's point on (its own included), in the caller's
    transaction, once what begins their segments there changed (steps/labelling.py: an intended label): from their
    stored means, with the settings the first of them was judged with. Returns how many points were judged again
    (none when the deploy has no point of theirs yet: update_history will see the label when it adds them)."""
    event = deploys.get(conn, deploy_id)
    if event is None or event.deployed_at is None or not queries:
        return 0
    here = (event.deployed_at, deploy_id)
    store.lock_target(conn, target)
    stored = store.later_points(conn, target, queries, here, inclusive=True)
    stored = stored[[q in set(queries) for q in _queries_of(stored)]]
    if stored.empty:
        return 0
    settings = HistorySettings.from_dict(stored["settings"].iloc[0])
    points = _changed_at_deploys(conn, target, stored.drop(columns=["settings"]))
    found = sorted(set(_queries_of(points)))
    prior = store.earlier_points(conn, target, found, here, settings.drift_points)
    rows = _judged(conn, target, found, points, prior, settings)
    store.replace_from(conn, target, found, here, rows, settings.to_dict())
    return len(rows)


def _changed_at_deploys(conn: sa.Connection, target: str, points: pd.DataFrame) -> pd.DataFrame:
    """Stored points with `detected`: whether their query changed at their deploy (store.detected_at_deploys)."""
    changed = store.detected_at_deploys(conn, target, sorted(set(points["deploy_id"])))
    return points.assign(
        detected=[(d, *q) in changed for d, q in zip(points["deploy_id"], _queries_of(points), strict=True)]
    )


def _judged(
    conn: sa.Connection,
    target: str,
    queries: list[store.Query],
    points: pd.DataFrame,
    prior: pd.DataFrame,
    settings: HistorySettings,
) -> pd.DataFrame:
    """The queries' points (POINT columns and `detected`) judged in order after their `prior` points: where each
    begins a segment, its band and drift, the running state (store.COLUMNS but settings)."""
    points = points.drop(columns=["settings"], errors="ignore").sort_values(
        [*store.QUERY, "deployed_at", "deploy_id"], kind="stable", ignore_index=True
    )
    # Joined with an empty frame (no later points) the times are objects, which merge_asof refuses.
    points["deployed_at"] = pd.to_datetime(points["deployed_at"], utc=True)
    points["begins_segment"] = points["detected"].astype(bool) | _periodic_change_since_last_point(
        conn, target, points, prior, queries
    )
    series = {q: i for i, q in enumerate(queries)}  # one series per query
    result = extend_history(
        prior.assign(series=[series[q] for q in _queries_of(prior)], mean_ms=judged(prior))[
            ["series", "mean_ms", *STATE]
        ],
        points.assign(series=[series[q] for q in _queries_of(points)], mean_ms=judged(points))[
            ["series", "mean_ms", "begins_segment"]
        ],
        settings,
    )
    rows = pd.concat([points.drop(columns=["detected"]), result], axis=1)
    rows["begins_segment"] = rows["seg_points"] == 1  # a query's first point begins its first segment too
    return rows


def judged(points: pd.DataFrame) -> pd.Series:
    """The means the bands judge: each point's mean_ms over its usual level (as it is where it has none)."""
    return points["mean_ms"] / pd.to_numeric(points["usual_level"], errors="coerce").fillna(1.0)


def _queries_of(frame: pd.DataFrame) -> list[store.Query]:
    """The (dbid, userid, toplevel, fingerprint) of every row."""
    return [
        (int(d), int(u), bool(t), int(f))
        for d, u, t, f in zip(frame["dbid"], frame["userid"], frame["toplevel"], frame["fingerprint"], strict=True)
    ]


def _periodic_change_since_last_point(
    conn: sa.Connection, target: str, points: pd.DataFrame, prior: pd.DataFrame, queries: list[store.Query]
) -> np.ndarray:
    """Per point: did the periodic check detect a change in the query after its previous point, up to this one?"""
    if points.empty:
        return np.zeros(0, dtype=bool)
    series = {q: i for i, q in enumerate(queries)}
    point_series = pd.Series([series[q] for q in _queries_of(points)], index=points.index)
    previous = pd.to_datetime(points["deployed_at"], utc=True).groupby(point_series).shift(1)
    last_prior = pd.to_datetime(prior["deployed_at"], utc=True).groupby([series[q] for q in _queries_of(prior)]).last()
    # A query with no earlier point (the deploy is older than all it has) gets NaT. Both sides are UTC datetimes and
    # the lookup is a reindex, not Series.map: pandas 3 neither writes the NaN of an empty mapping into a datetime
    # column nor maps through an empty datetime series without casting it to float.
    from_prior = pd.Series(last_prior.reindex(point_series.to_numpy()).to_numpy(), index=points.index)
    previous = previous.where(previous.notna(), from_prior)
    since = previous.min() if previous.notna().any() else points["deployed_at"].min()
    changes = store.periodic_detections(conn, target, queries, since)
    if changes.empty:
        return np.zeros(len(points), dtype=bool)
    probe = pd.DataFrame({"series": point_series, "at": points["deployed_at"], "row": points.index}).sort_values("at")
    latest = pd.merge_asof(
        probe,
        changes.assign(series=[series.get(q, -1) for q in _queries_of(changes)]).sort_values("change_at"),
        left_on="at",
        right_on="change_at",
        by="series",
        direction="backward",
    ).set_index("row")["change_at"]
    latest = latest.reindex(points.index)
    return (latest.notna() & (previous.isna() | (latest > previous))).to_numpy()


def history_charts(
    conn: sa.Connection, update: HistoryUpdate, settings: HistorySettings, folder: Path, limit: int = 10
) -> list[Path]:
    """A PNG per flagged point (at most `limit`): the query's points up to this deploy with the bands they were
    judged against."""
    from radar_pipeline.alerts.chart import chart_title, render_history_chart  # matplotlib: only when there is a chart

    paths = []
    for row in update.flagged.head(limit).itertuples():
        query = (int(row.dbid), int(row.userid), bool(row.toplevel), int(row.fingerprint))
        series = store.series_points(conn, update.target, query, (row.deployed_at, row.deploy_id))
        trend = None
        if row.drift:
            segment = series[series["segment"] == row.segment].tail(settings.drift_points)
            slope, intercept = theil_sen(judged(segment).to_numpy(dtype=float)[None, :])
            trend = (len(series) - len(segment), float(intercept[0]), float(slope[0]))
        what = "drifting" if row.drift else f"z {row.z_score:.1f}"
        if pd.to_numeric(series["usual_level"], errors="coerce").notna().any():
            what += ", means at their usual level for the hour"
        paths.append(
            render_history_chart(
                folder / f"history-{key_label((row.dbid, row.userid, row.queryid, row.toplevel))}.png",
                [pd.Timestamp(t).to_pydatetime() for t in series["deployed_at"]],
                judged(series).to_numpy(dtype=float),
                series["centre_ms"].to_numpy(dtype=float),
                series["band_ms"].to_numpy(dtype=float),
                settings.z,
                series["begins_segment"].to_numpy(dtype=bool),
                series["above_band"].to_numpy(dtype=bool),
                chart_title(
                    update.texts.get(int(row.queryid)), f"queryid {row.queryid} after deploy {update.deploy_id}: {what}"
                ),
                trend,
            )
        )
    return paths
