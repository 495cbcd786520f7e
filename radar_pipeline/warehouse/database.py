"""Connections to the warehouse."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import psycopg
import sqlalchemy as sa

from radar_pipeline.config import warehouse_url
from radar_pipeline.pgss_model import KEY, Key

if TYPE_CHECKING:  # numpy and pandas are imported where used: `radar deploy` needs neither
    import pandas as pd

# A list of statement keys as a table, bound with key_params: `FROM {KEYS} AS k(dbid, userid, queryid, toplevel)`.
KEYS = "unnest(CAST(:dbid AS oid[]), CAST(:userid AS oid[]), CAST(:queryid AS bigint[]), CAST(:toplevel AS boolean[]))"


def key_params(keys: list[Key]) -> dict[str, list[Any]]:
    """The bind parameters of KEYS for these statement keys: one list per KEY column."""
    return {name: [key[i] for key in keys] for i, name in enumerate(KEY)}


def make_engine(url: str) -> sa.Engine:
    """A SQLAlchemy engine on the warehouse through psycopg 3 (the URL is validated first)."""
    return sa.create_engine(warehouse_url(url), pool_pre_ping=True, future=True)


def driver(conn: sa.Connection) -> psycopg.Connection:
    """The psycopg connection under a SQLAlchemy one (for COPY and plain-tuple reads), in the same transaction."""
    dbapi = conn.connection.driver_connection
    assert isinstance(dbapi, psycopg.Connection), "the warehouse engine must use the psycopg driver"
    return dbapi


def copy_frame(conn: sa.Connection, table: str, columns: list[str], frame: pd.DataFrame) -> None:
    """Append the frame's `columns` to `table` with one COPY, in the caller's transaction."""
    values = [_copy_column(frame[c]) for c in columns]
    with driver(conn).cursor() as cur:
        with cur.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:
            for row in zip(*values, strict=True):
                copy.write_row(row)


def _copy_column(column: pd.Series) -> list[Any]:
    """A column's values as COPY wants them (_copy_value), converted a whole column at a time where its type allows:
    an analysis writes thousands of rows of tens of columns, and a call per value costs more than the COPY."""
    import numpy as np
    import pandas as pd

    if isinstance(column.dtype, np.dtype) and column.dtype.kind in "biu":
        return column.tolist()
    if isinstance(column.dtype, np.dtype) and column.dtype.kind == "f":
        values = column.tolist()
        missing = np.isnan(column.to_numpy())
    elif isinstance(column.dtype, pd.DatetimeTZDtype) or column.dtype.kind == "M":
        values = list(column.dt.to_pydatetime())
        missing = column.isna().to_numpy()
    else:
        values = column.tolist()
        missing = column.isna().to_numpy()  # lists and dicts are values, not missing
        values = [v if isinstance(v, str | bool | int | float) else _copy_value(v) for v in values]
    for i in np.flatnonzero(missing):
        values[i] = None
    return values


def _copy_value(value: Any) -> Any:
    """A DataFrame cell as COPY wants it: NaN and NaT as NULL, numpy scalars as Python ones, dicts as JSON."""
    import numpy as np
    import pandas as pd

    if isinstance(value, dict):
        return json.dumps(value)
    if isinstance(value, list | tuple):
        return list(value)
    if value is None or pd.isna(value):
        return None
    if isinstance(value, pd.Timestamp):
        return value.to_pydatetime()
    if isinstance(value, np.generic):
        return value.item()
    return value
