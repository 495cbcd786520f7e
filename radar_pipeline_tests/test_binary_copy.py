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
