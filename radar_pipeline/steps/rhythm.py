"""The weekly levels of a periodic check's statements and of history points, from the hourly sums stored each
night (engine/rhythm.py, warehouse/rhythm.py, sql/0039).

Plain Python, so the Dagster asset, the benchmarks and the tests run the same code.
"""

from __future__ import annotations

from datetime import datetime

import numpy as np
import pandas as pd
import sqlalchemy as sa

from radar_pipeline.engine.rhythm import (
    MAX_WEEKS,
    MIN_CALLS,
    SPAN_WEEKS,
    Levels,
    earlier_hours,
    usual_level,
    weekly_levels,
    window_hours,
)
from radar_pipeline.pgss_model import KEY
from radar_pipeline.warehouse import rhythm as store


def levels_for(conn: sa.Connection, target: str, keys: pd.DataFrame, lo: datetime, hi: datetime) -> Levels:
    """The usual level of each of the window's statements (`keys`: KEY columns indexed by query_key, as read_window
    gives them) in each hour of (lo, hi], from their sums in the same hours of the weeks before; statements with too
    short a history have none (engine.rhythm.weekly_levels)."""
    start, end = pd.Timestamp(lo), pd.Timestamp(hi)
    hours = store.read_hours(conn, target, earlier_hours(start, end))
    if hours.empty:
        return Levels.none()
    statements = keys[KEY].rename_axis("query_key").reset_index()
    for name in KEY:
        hours[name] = hours[name].astype(statements[name].dtype)
    joined = statements.merge(hours, on=KEY, how="inner")
    return weekly_levels(joined[["query_key", "hour", "calls", "time_ms"]], start, end)


def point_levels(conn: sa.Connection, target: str, points: pd.DataFrame, lo: datetime, hi: datetime) -> pd.Series:
    """Each point's usual level (engine.rhythm.usual_level) over the hours of the span (lo, hi] it is the mean of,
    from its statement's sums of the weeks before (`points`: KEY columns); NaN where too short a history."""
    hours = window_hours(pd.Timestamp(lo), pd.Timestamp(hi))
    if points.empty:
        return pd.Series(np.nan, index=points.index, dtype=float)
    weeks = store.span_weeks(conn, target, points, hours[0].to_pydatetime(), len(hours), MAX_WEEKS, MIN_CALLS)
    if weeks.empty:
        return pd.Series(np.nan, index=points.index, dtype=float)
    statement = [tuple(int(v) for v in row) for row in weeks[KEY].itertuples(index=False)]
    codes = {key: code for code, key in enumerate(dict.fromkeys(statement))}
    levels = usual_level(weeks.assign(query_key=[codes[k] for k in statement])[SPAN_WEEKS], len(hours))
    wanted = [codes.get(tuple(int(v) for v in row), -1) for row in points[KEY].itertuples(index=False)]
    return pd.Series(levels.reindex(wanted).to_numpy(dtype=float), index=points.index, dtype=float)
