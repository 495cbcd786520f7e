"""Fixed-width binary COPY to and from numpy, through a real PostgreSQL 18."""

from __future__ import annotations

import numpy as np
import psycopg
import pytest

from radar_pipeline import binary_copy

FIELDS = [("id", "oid"), ("n", "int8"), ("x", "float8"), ("flag", "bool"), ("at", "timestamptz"), ("k", "int4")]


def _copy_out(conn: psycopg.Connection, query: str) -> bytes:
    with conn.cursor() as cur, cur.copy(f"COPY ({query}) TO STDOUT (FORMAT binary)") as copy:
        return b"".join(bytes(block) for block in copy)


def test_rows_go_in_and_come_back_unchanged(pg18):
    columns = {
        "id": np.array([0, 4_294_967_295, 16384], dtype=np.uint32),
        "n": np.array([-(2**63) + 1, 2**63 - 1, 0], dtype=np.int64),
        "x": np.array([0.5, -1e300, 3.25]),
        "flag": np.array([True, False, True]),
        "at": np.array(["2026-11-30T08:00:00.123456", "NaT", "1999-12-31T23:59:59"], dtype="datetime64[us]"),
        "k": np.array([-7, 0, 2**31 - 1], dtype=np.int32),
    }
    with psycopg.connect(pg18.pg.dsn(), autocommit=True) as conn:
        conn.execute("CREATE TEMP TABLE t (pos serial, id oid, n int8, x float8, flag bool, at timestamptz, k int4)")
        with conn.cursor() as cur, cur.copy("COPY t (id, n, x, flag, at, k) FROM STDIN (FORMAT binary)") as copy:
            copy.write(binary_copy.encode(columns, FIELDS))
        # What PostgreSQL made of the values, read as text: NaT went in as -infinity.
        as_text = conn.execute("SELECT at::text, n FROM t ORDER BY pos").fetchall()
        back = binary_copy.parse(_copy_out(conn, "SELECT id, n, x, flag, at, k FROM t ORDER BY pos"), FIELDS)
    assert as_text[1][0] == "-infinity" and as_text[0][0] == "2026-11-30 08:00:00.123456+00"
    for name, values in columns.items():
        np.testing.assert_array_equal(back[name], values)


def test_an_empty_result_is_no_rows(pg18):
    with psycopg.connect(pg18.pg.dsn(), autocommit=True) as conn:
        rows = binary_copy.parse(_copy_out(conn, "SELECT 1::oid, 1::int8 WHERE false"), FIELDS[:2])
    assert len(rows) == 0 and rows.dtype.names == ("id", "n")


def test_a_null_is_refused_with_the_column_named(pg18):
    with psycopg.connect(pg18.pg.dsn(), autocommit=True) as conn:
        data = _copy_out(conn, "SELECT 1::int8 AS n, NULL::float8 AS x UNION ALL SELECT 2, 2.0")
    with pytest.raises(ValueError, match="fixed width"):
        binary_copy.parse(data, [("n", "int8"), ("x", "float8")])
    with pytest.raises(ValueError, match="not a binary COPY stream"):
        binary_copy.parse(b"1\t2\n", [("n", "int8")])


def test_copy_out_reads_a_whole_copy_in_the_callers_transaction(warehouse):
    """warehouse.database.copy_out: every row of a COPY of many rows, byte for byte what psycopg's Copy reads, inside
    the transaction SQLAlchemy began (it sees that transaction's own temporary table and leaves it open)."""
    import sqlalchemy as sa
    from psycopg import pq
    from psycopg import sql as psql

    from radar_pipeline.warehouse.database import copy_out, driver

    rows = "SELECT g::int8, g / 2.0::float8 FROM generate_series(1, 200000) g JOIN t ON true"
    query = f"COPY ({rows}) TO STDOUT (FORMAT binary)"
    with warehouse.connect() as conn:
        conn.execute(sa.text("CREATE TEMP TABLE t ON COMMIT DROP AS SELECT 1 AS one"))
        ours = copy_out(conn, psql.SQL(query))
        with driver(conn).cursor() as cur, cur.copy(query) as copy:
            theirs = b"".join(bytes(block) for block in copy)
        assert driver(conn).pgconn.transaction_status == pq.TransactionStatus.INTRANS
        rows = binary_copy.parse(ours, [("g", "int8"), ("half", "float8")])
    assert ours == theirs and len(rows) == 200_000
    np.testing.assert_array_equal(rows["half"], np.arange(1, 200_001) * 0.5)
    with warehouse.connect() as conn:  # a transaction not yet begun: copy_out begins it
        assert len(copy_out(conn, psql.SQL("COPY (SELECT 1) TO STDOUT (FORMAT binary)"))) > 0
        assert driver(conn).pgconn.transaction_status == pq.TransactionStatus.INTRANS


def test_copy_out_raises_the_servers_error_and_leaves_the_connection_usable(warehouse):
    """A COPY that fails after it has sent rows raises the server's own error (its SQLSTATE's class), and the
    connection goes on after the rollback."""
    import psycopg
    import sqlalchemy as sa
    from psycopg import sql as psql

    from radar_pipeline.warehouse.database import copy_out

    with warehouse.connect() as conn:
        assert conn.execute(sa.text("SELECT 1")).scalar_one() == 1  # the transaction SQLAlchemy began
        with pytest.raises(psycopg.errors.DivisionByZero):
            copy_out(conn, psql.SQL("COPY (SELECT 1 / (100000 - g) FROM generate_series(1, 200000) g) TO STDOUT"))
        conn.rollback()
        assert conn.execute(sa.text("SELECT 2")).scalar_one() == 2
        with pytest.raises(psycopg.errors.UndefinedTable):
            copy_out(conn, psql.SQL("COPY (SELECT * FROM no_such_table) TO STDOUT"))
        conn.rollback()
        assert conn.execute(sa.text("SELECT 3")).scalar_one() == 3


def test_a_transaction_copy_out_begins_is_sqlalchemy_s_and_ends_with_its_rollback(warehouse):
    """copy_out as a connection's first statement begins SQLAlchemy's own transaction: the rollback before the engine
    runs ends it (no session idle in transaction holding its locks), also after a failed COPY."""
    import psycopg
    import sqlalchemy as sa
    from psycopg import sql as psql

    from radar_pipeline.warehouse.database import copy_out

    def state(pid: int) -> str:
        with warehouse.connect() as other:
            found = other.execute(sa.text("SELECT state FROM pg_stat_activity WHERE pid = :p"), {"p": pid})
            return str(found.scalar_one())

    with warehouse.connect() as conn:
        pid = conn.execute(sa.text("SELECT pg_backend_pid()")).scalar_one()
        conn.rollback()
        copy_out(conn, psql.SQL("COPY (SELECT relname FROM pg_class LIMIT 1) TO STDOUT"))
        assert conn.in_transaction()
        conn.rollback()
        assert state(pid) == "idle"
        with pytest.raises(psycopg.errors.UndefinedTable):
            copy_out(conn, psql.SQL("COPY (SELECT * FROM no_such_table) TO STDOUT"))
        conn.rollback()
        assert state(pid) == "idle"
        assert conn.execute(sa.text("SELECT 4")).scalar_one() == 4
