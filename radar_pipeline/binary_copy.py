"""Fixed-width rows in PostgreSQL's binary COPY format, read into and written from numpy without a per-row loop.

A scrape of 5,000 statements and a target's catalogue are thousands of rows of numbers; turning them into Python
tuples and then into pandas costs more CPU than reading them. When every column has a fixed width and no value is
null (queries coalesce nulls to a sentinel, e.g. '-infinity' for a timestamp), each row of `COPY … (FORMAT binary)`
has the same length, so the whole stream is one numpy structured array: a 16-bit field count, then per field a 32-bit
length and the big-endian value (PostgreSQL documents the format under COPY, "Binary Format").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

# The wire type of each PostgreSQL type radar moves this way, and the native type it is read into.
WIRE = {"oid": ">u4", "int4": ">i4", "int8": ">i8", "float8": ">f8", "bool": "?", "timestamptz": ">i8"}
NATIVE = {"oid": "u4", "int4": "i4", "int8": "i8", "float8": "f8", "bool": "?", "timestamptz": "datetime64[us]"}
SIGNATURE = b"PGCOPY\n\xff\r\n\x00"
HEADER = SIGNATURE + b"\x00\x00\x00\x00" + b"\x00\x00\x00\x00"  # no flags, no header extension
TRAILER = b"\xff\xff"
# PostgreSQL counts timestamps in microseconds from 2000-01-01 UTC; ±infinity are the extreme 64-bit values.
PG_EPOCH_US = 946_684_800_000_000
PG_MINUS_INFINITY = np.iinfo(np.int64).min
PG_INFINITY = np.iinfo(np.int64).max

Fields = Sequence[tuple[str, str]]  # (column name, PostgreSQL type) in the order of the COPY's columns


def _wire_dtype(fields: Fields) -> np.dtype:
    layout: list[tuple[str, str]] = [("_count", ">i2")]
    for name, pg_type in fields:
        layout += [(f"_len_{name}", ">i4"), (name, WIRE[pg_type])]
    return np.dtype(layout)


def parse(data: bytes | bytearray, fields: Fields) -> np.ndarray:
    """The rows of a binary COPY stream as a structured array of native types (timestamps as datetime64[us], with
    ±infinity as NaT). Raises ValueError when the stream is not rows of exactly these fields, none of them null."""
    columns = parse_columns(data, fields)
    out = np.empty(len(columns[fields[0][0]]) if fields else 0, dtype=[(n, NATIVE[t]) for n, t in fields])
    for name, _ in fields:
        out[name] = columns[name]
    return out


def parse_columns(data: bytes | bytearray, fields: Fields) -> dict[str, np.ndarray]:
    """The rows of a binary COPY stream as one contiguous array per field, of native types (as `parse`'s): what a
    reader that works column by column wants, without the structured array between (one pass over the stream per
    field, and the checks of every row's field count and lengths in one pass). Raises ValueError as `parse` does."""
    rows = _rows(data, fields)
    out: dict[str, np.ndarray] = {}
    for name, pg_type in fields:
        if pg_type == "timestamptz":
            raw = rows[name].astype(np.int64)
            infinite = (raw == PG_MINUS_INFINITY) | (raw == PG_INFINITY)
            raw += PG_EPOCH_US
            raw[infinite] = np.iinfo(np.int64).min  # NaT
            out[name] = raw.view("datetime64[us]")
        else:
            out[name] = rows[name].astype(NATIVE[pg_type])
    return out


def _rows(data: bytes | bytearray, fields: Fields) -> np.ndarray:
    """The stream's rows as a structured array of wire types over `data` (no copy), every row checked to have
    `fields` and each of them its type's width (a null's length is -1)."""
    if not data.startswith(SIGNATURE) or len(data) < len(HEADER) + len(TRAILER):
        raise ValueError("not a binary COPY stream")
    extension = int.from_bytes(data[15:19], "big")
    body = memoryview(data)[len(HEADER) + extension : len(data) - len(TRAILER)]
    if bytes(data[-2:]) != TRAILER:
        raise ValueError("binary COPY stream without its trailer")
    wire = _wire_dtype(fields)
    if len(body) % wire.itemsize:
        raise ValueError(f"binary COPY rows are not the fixed width of {[n for n, _ in fields]} (a null value?)")
    rows = np.frombuffer(body, dtype=wire)
    if not len(rows):
        return rows
    # The field count and every length, compared as they lie in each row (big-endian bytes read as native integers,
    # against the expected value's bytes read the same way): one comparison of every row.
    framing = [("_count", "u2", len(fields))] + [(f"_len_{n}", "u4", np.dtype(WIRE[t]).itemsize) for n, t in fields]
    offsets = {name: wire.fields[name][1] for name in wire.names or ()} if wire.fields else {}
    spec: Any = {
        "names": [n for n, _, _ in framing],
        "formats": [f for _, f, _ in framing],
        "offsets": [offsets[n] for n, _, _ in framing],
        "itemsize": wire.itemsize,
    }
    layout = np.dtype(spec)
    expected = np.zeros((), dtype=layout)
    for name, native, value in framing:
        expected[name] = np.array(value, dtype=">" + native).view(native)
    bad = np.frombuffer(body, dtype=layout) != expected
    if bad.any():
        first = np.frombuffer(body, dtype=wire)[int(np.argmax(bad))]
        if first["_count"] != len(fields):
            raise ValueError(f"binary COPY rows do not have the {len(fields)} fields {[n for n, _ in fields]}")
        for name, pg_type in fields:
            if first[f"_len_{name}"] != np.dtype(WIRE[pg_type]).itemsize:
                raise ValueError(f"binary COPY column {name!r} is not {pg_type} throughout (a null value?)")
    return rows


def encode(columns: Mapping[str, np.ndarray], fields: Fields) -> bytes:
    """A binary COPY stream of the given columns (NaT timestamps are sent as '-infinity', for the query that reads
    the staged rows to turn back into null)."""
    lengths = {len(columns[name]) for name, _ in fields}
    if len(lengths) > 1:
        raise ValueError(f"columns of different lengths: {sorted(lengths)}")
    count = lengths.pop() if lengths else 0
    wire = np.zeros(count, dtype=_wire_dtype(fields))
    wire["_count"] = len(fields)
    for name, pg_type in fields:
        wire[f"_len_{name}"] = np.dtype(WIRE[pg_type]).itemsize
        values = np.asarray(columns[name])
        if pg_type == "timestamptz":
            micros = values.astype("datetime64[us]").view(np.int64)
            wire[name] = np.where(np.isnat(values.astype("datetime64[us]")), PG_MINUS_INFINITY, micros - PG_EPOCH_US)
        else:
            wire[name] = values
    return HEADER + wire.tobytes() + TRAILER
