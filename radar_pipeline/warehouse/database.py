"""Connections to the warehouse."""

from __future__ import annotations

import json
import selectors
from typing import TYPE_CHECKING, Any

import psycopg
import sqlalchemy as sa
from psycopg import pq
from psycopg import sql as psql

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


def copy_out(conn: sa.Connection, query: psql.Composable) -> bytearray:
    """The whole output of `query` (a `COPY … TO STDOUT`) as one buffer, in the caller's transaction.

    psycopg's Copy hands out one message per call, each through its generator machinery, and a binary COPY sends a
    message per row: for the half-million rows of a 5,000-statement window that costs the client more than the server
    spends producing them. Here libpq's messages are taken in one loop (psycopg.pq, its wrapper of libpq), waiting on
    the socket only when none is buffered. The server's error, or an interruption (the query is cancelled first, so
    the connection is left usable), is raised as psycopg raises it."""
    raw = driver(conn)
    if raw.pgconn.transaction_status == pq.TransactionStatus.IDLE and not raw.autocommit:
        # Begun through SQLAlchemy, so its rollback (before the engine runs) ends it; begun under SQLAlchemy's feet,
        # the session would stay idle in transaction, holding its locks.
        conn.execute(sa.text("SELECT"))
    pgconn = raw.pgconn
    stream = bytearray()
    with raw.lock, selectors.DefaultSelector() as sel:
        sel.register(pgconn.socket, selectors.EVENT_READ)
        pgconn.send_query(query.as_bytes(raw))
        while pgconn.flush():  # the rest of a long query (many keys) as the socket takes it
            with selectors.DefaultSelector() as writable:
                writable.register(pgconn.socket, selectors.EVENT_WRITE)
                writable.select()
        try:
            started = _result(pgconn, sel)
            if started is None or started.status != pq.ExecStatus.COPY_OUT:
                _results(pgconn, sel)  # drained, so the connection can go on
                raise _error(raw, started, "the COPY did not start")
            get = pgconn.get_copy_data
            while True:
                size, data = get(1)
                if size > 0:
                    stream += data
                elif size == 0:  # nothing buffered: wait for the server
                    sel.select()
                    pgconn.consume_input()
                else:
                    break
        except BaseException:
            if pgconn.transaction_status == pq.TransactionStatus.ACTIVE:
                raw.cancel_safe()
                _drain(pgconn, sel)
            raise
        for result in _results(pgconn, sel):
            if result.status != pq.ExecStatus.COMMAND_OK:
                raise _error(raw, result, "the COPY failed")
    return stream


def _result(pgconn: pq.abc.PGconn, sel: selectors.BaseSelector) -> pq.abc.PGresult | None:
    """The connection's next result, waiting on the socket (never inside libpq) until it is whole."""
    pgconn.consume_input()
    while pgconn.is_busy():
        sel.select()
        pgconn.consume_input()
    return pgconn.get_result()


def _results(pgconn: pq.abc.PGconn, sel: selectors.BaseSelector) -> list[pq.abc.PGresult]:
    """The query's remaining results, up to the end of it."""
    out = []
    while (result := _result(pgconn, sel)) is not None:
        out.append(result)
    return out


def _drain(pgconn: pq.abc.PGconn, sel: selectors.BaseSelector) -> None:
    """Read a cancelled COPY to its end (the rows the server sent before it stopped), and its results."""
    try:
        while (size := pgconn.get_copy_data(1)[0]) >= 0:
            if size == 0:
                sel.select()
                pgconn.consume_input()
        _results(pgconn, sel)
    except psycopg.Error:
        pass  # the connection is broken: SQLAlchemy discards it


def _error(raw: psycopg.Connection, result: pq.abc.PGresult | None, what: str) -> psycopg.Error:
    if result is None or result.status not in (pq.ExecStatus.FATAL_ERROR, pq.ExecStatus.NONFATAL_ERROR):
        status = pq.ExecStatus(result.status).name if result is not None else "no result"
        return psycopg.ProgrammingError(f"{what}: {status}")
    return psycopg.errors.error_from_result(result, encoding=raw.info.encoding)


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
        missing = column.isna().to_numpy()  # lists and dicts are values, not missing
        if missing.all():  # a column most analyses leave empty (plan diffs, named changes, …)
            return [None] * len(column)
        plain = (str, bool, int, float)
        return [
            None if gone else v if isinstance(v, plain) else _copy_value(v)
            for v, gone in zip(column.tolist(), missing.tolist(), strict=True)
        ]
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
