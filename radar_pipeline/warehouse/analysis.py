"""Reads and writes of an analysis: a deploy window's counters in, the verdicts out.

The window's counters are every stored row of the target with captured_at in (lo, hi], plus each of those statements'
last row at or before lo, so that its first interval inside the window is not lost. Following the warehouse's rule for
absent rows, that interval's calls happened in the scrape interval that ends at its row, however old the earlier row.
Rows are read through radar.pgss_samples and radar.pgss_last_sample (sql/0013), so a window lying in compacted days
reads the same rows as before they were compacted. A run that analyses several deploys of a target whose windows
overlap reads their common span once (read_samples) and cuts each window from it (StoredSamples.window).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

import numpy as np
import pandas as pd
import sqlalchemy as sa
from psycopg import sql as psql

from radar_pipeline import binary_copy
from radar_pipeline.config.queries import sql_text
from radar_pipeline.engine import CAUSES, VERDICT_FRAME, Cause, Verdict
from radar_pipeline.engine import COLUMNS as ENGINE_COLUMNS
from radar_pipeline.engine.causes import JIT_TIME, LAUNCHED, PLAN_TIME, TO_LAUNCH, WAL, WAL_FULL
from radar_pipeline.engine.frames import ANY, BOOL, IMPACT_STATEMENTS, IMPACT_SUMMARY, INT, TEXT, Column, FrameSchema
from radar_pipeline.engine.impact import STATEMENT_COLUMNS, SUMMARY_COLUMNS
from radar_pipeline.engine.settings import RENAMED
from radar_pipeline.pgss_model import KEY, KEY_TYPES, statement_keys
from radar_pipeline.warehouse.database import KEYS, copy_frame, copy_out, key_params
from radar_pipeline.warehouse.labels import VERDICT_LABEL_COLUMNS, VERDICT_LABEL_JOIN

# What an analysis hands the warehouse: the engine's verdicts with the statement each query_key stands for, its
# fingerprint, the queryids merged into it and, for detections, the plan diff (steps/deploy_analysis.py adds them, and
# names the one engine column it overwrites: a detection's cause, from what only the analysis sees).
KEY_COLUMNS = (Column("dbid", INT), Column("userid", INT), Column("queryid", INT), Column("toplevel", BOOL))
ANALYSED_VERDICTS = VERDICT_FRAME.extend(
    "analysed verdicts",
    (
        *KEY_COLUMNS,
        Column("fingerprint", ANY),
        Column("merged_queryids", ANY),
        Column("plan_diff", ANY),
        Column("queryid_shared_with", ANY),
        # the changes named on the statement's relations, database or role (a JSON array of NamedChange.to_json, as
        # text; None when none was named) and the statement undoing the first, where one can be derived
        Column("named_changes", ANY),
        Column("undo_hint", TEXT),
        # a counter's cause, plan_changed, a named change's, or collateral naming the statement in cause_detail
        Column("cause", TEXT, words=tuple(c.value for c in CAUSES if c != Cause.CONTENTION)),
        Column("cause_detail", TEXT),
        # the detected groups the statement was a tested member of, in words (steps/groups.py; None: none)
        Column("group_regressed", TEXT, required=False),
    ),
    overwrites={
        "cause": "the analysis sees what the engine does not: a changed plan shape makes it plan_changed, a change "
        "named on its relations gives that change's cause, and a statement whose load rose at the same change point "
        "makes it collateral",
        "cause_detail": "the analysis says the named change, or the statement a collateral slowdown is due to",
    },
)
# The impact's columns radar.statement_change does not store: the engine's keys (the statement's KEY and its
# partner's queryid instead) and what only the analysis uses (blocks per minute, first seen, class).
UNSTORED_IMPACT = (
    "query_key",
    "dbid",
    "partner_key",
    "blks_read_per_min_before",
    "blks_read_per_min_after",
    "first_seen_at",
    "statement_class",
)
# What radar.statement_change stores of the impact: the statement's KEY instead of the engine's query_key and dbid,
# a replaced half's partner by its queryid, and optionally its text (`query`, for the run's metadata).
STATEMENT_CHANGES = FrameSchema(
    "statement changes",
    (
        *KEY_COLUMNS,
        *(c for c in IMPACT_STATEMENTS.columns if c.name not in UNSTORED_IMPACT),
        Column("partner_queryid", ANY),
        Column("query", ANY, required=False),
    ),
)
# The engine's result columns that radar.verdict stores (not the query_key, Q or the merged keys, which are stored as
# the statement's identity and merged_queryids), between the statement and what later stages add.
ENGINE_STORED = [
    c for c in ENGINE_COLUMNS if c not in ("query_key", "q_stat", "merged_keys", "segment_n_before", "segment_n_after")
]
VERDICT_COLUMNS = [
    "deploy_id",
    "target",
    *KEY,
    "fingerprint",
    *ENGINE_STORED,
    "plan_diff",
    "merged_queryids",
    "queryid_shared_with",
    "named_changes",
    "undo_hint",
    "group_regressed",
]
# A verdict (alias v) with its statement's text (alias q).
VERDICT_QUERY_JOIN = (
    "LEFT JOIN radar.query q ON q.target = v.target AND q.dbid = v.dbid AND q.userid = v.userid "
    "AND q.queryid = v.queryid AND q.toplevel = v.toplevel"
)
# A statement's last row before the window is looked for in this stretch first (partitions outside it are pruned),
# and only when it has none there, in every older partition.
RECENT = timedelta(hours=2)


@dataclass(frozen=True)
class WindowCounters:
    """The engine's input for one window, and the statement behind each query_key (its row number in `keys`)."""

    counters: pd.DataFrame  # query_key, captured_at, calls, total_exec_time, rows, shared_blks_read, stats_since, ...
    keys: pd.DataFrame  # KEY columns, indexed by query_key


# The columns read per sample to decide, in the binary COPY's order (binary_copy): nulls coalesced, so every row has
# one width.
SAMPLE_FIELDS: list[tuple[str, str]] = [
    *KEY_TYPES,
    ("fingerprint", "int8"),
    ("captured_at", "timestamptz"),
    ("calls", "int8"),
    ("total_exec_time", "float8"),
    ("rows", "int8"),
    ("shared_blks_read", "int8"),
    ("stats_since", "timestamptz"),  # null (before PostgreSQL 17) read as '-infinity'
    ("reset_before", "bool"),
    ("stddev_exec_time", "float8"),  # null (rows stored before 0007) read as NaN
]
SAMPLE_SQL = {
    "stats_since": "coalesce(stats_since, '-infinity')",
    "stddev_exec_time": "coalesce(stddev_exec_time, 'NaN')",
}
# The engine's series, taken from the samples as they are (captured_at and stats_since become timestamps).
SERIES = ["captured_at", "calls", "total_exec_time", "rows", "shared_blks_read", "stats_since", "stddev_exec_time"]
# The counters only a detection's causes compare (engine/causes.py), read for the detected statements alone after the
# decision (read_cause_counters): read for every sample, they cost the window's read a quarter more.
NEWER_CAUSE_COUNTERS = (PLAN_TIME, TO_LAUNCH, LAUNCHED, JIT_TIME, WAL, WAL_FULL)
CAUSE_FIELDS: list[tuple[str, str]] = [
    *KEY_TYPES,
    ("captured_at", "timestamptz"),
    ("shared_blks_hit", "int8"),
    ("temp_blks_written", "int8"),
    # null (the server lacks one, or rows before 0024) as NaN
    *((name, "float8") for name in NEWER_CAUSE_COUNTERS),
]
CAUSE_SQL = {
    **{name: f"coalesce(CAST({name} AS float8), 'NaN')" for name in NEWER_CAUSE_COUNTERS},
    # one time over the JIT's phases; deform is timed apart only from PostgreSQL 17
    JIT_TIME: "coalesce(jit_generation_time + jit_inlining_time + jit_optimization_time + jit_emission_time "
    "+ coalesce(jit_deform_time, 0), 'NaN')",
}


@dataclass(frozen=True)
class StoredSamples:
    """A target's stored samples over a span (lo, hi], each statement's last sample at or before lo with them,
    ordered by statement and time: what the window of any deploy inside the span needs, read once.

    `window(lo, hi)` gives exactly what `read_window(lo, hi)` would read, for any (lo, hi] inside the span: every
    sample in it, and each of those statements' last earlier sample (which lies in the span or is the span's own).
    """

    span: tuple[datetime, datetime]
    columns: dict[str, np.ndarray]  # SAMPLE_FIELDS but KEY, each contiguous, sorted by KEY then captured_at
    statement: np.ndarray  # each sample's statement: its row in `keys`
    keys: pd.DataFrame  # KEY columns, one row per statement, in the samples' order

    def window(self, lo: datetime, hi: datetime) -> WindowCounters:
        """The counters of the window (lo, hi], which must lie inside the span."""
        if lo < self.span[0] or hi > self.span[1]:
            raise ValueError(f"window ({lo}, {hi}] is not inside the samples read for ({self.span[0]}, {self.span[1]}]")
        at, statement = self.columns["captured_at"], self.statement
        start, end = np.datetime64(_naive_utc(lo), "us"), np.datetime64(_naive_utc(hi), "us")
        inside = (at > start) & (at <= end)
        # The last sample at or before lo of a statement with samples inside is the one whose successor is inside.
        before = np.zeros(len(at), dtype=bool)
        before[:-1] = ~inside[:-1] & inside[1:] & (statement[:-1] == statement[1:])
        before &= at <= start
        kept = np.flatnonzero(inside | before)
        return _as_counters({name: values[kept] for name, values in self.columns.items()}, statement[kept], self.keys)


def _naive_utc(at: datetime) -> datetime:
    return _aware(at).astimezone(UTC).replace(tzinfo=None)


def _aware(at: datetime) -> datetime:
    """`at`, refused when it has no time zone: the server would read it in its session's, numpy in none."""
    if at.tzinfo is None or at.utcoffset() is None:
        raise ValueError(f"window bound {at.isoformat()} has no time zone")
    return at


def read_window(
    conn: sa.Connection, target: str, lo: datetime, hi: datetime, only: pd.DataFrame | None = None
) -> WindowCounters:
    """The target's counters for the window (lo, hi], each statement with its last row before it; see module doc.
    `only` (KEY columns) limits the read to those statements."""
    samples = read_samples(conn, target, lo, hi, only)
    # Every sample read is the window's (those inside, and each one's statement's last before): nothing to cut, and the
    # samples are this read's own, so the counters may take their arrays as they are.
    return _as_counters(samples.columns, samples.statement, samples.keys)


def read_samples(
    conn: sa.Connection, target: str, lo: datetime, hi: datetime, only: pd.DataFrame | None = None
) -> StoredSamples:
    """The target's samples over (lo, hi] with each statement's last earlier one (StoredSamples), for one window or
    for the windows of several deploys inside the span.

    Two binary COPYs read straight into numpy (binary_copy), put in order here, which costs the server neither a sort
    nor an aggregate: the samples inside the span, then, for the statements found there (their keys sent back), each
    one's last sample at or before lo. `only` (KEY columns) limits the read to those statements: a few are read
    through their own index entries (radar.pgss_statement_samples, sql/0035), many by the span's scan kept to theirs.
    """
    lo, hi = _aware(lo), _aware(hi)
    inside = _copied(conn, _inside_query(target, lo, hi, only))
    order = np.lexsort([inside[name] for name in ("captured_at", *reversed(KEY))])
    n = len(order)
    new = np.ones(n, dtype=bool)  # the first sample of each statement, in order
    if n:
        new[1:] = np.logical_or.reduce([inside[name][order[1:]] != inside[name][order[:-1]] for name in KEY])
    starts = np.flatnonzero(new)
    keys = pd.DataFrame({name: inside[name][order[starts]] for name in KEY}).astype(
        {"dbid": "int64", "userid": "int64", "queryid": "int64", "toplevel": "bool"}
    )
    earlier = _copied(conn, _earlier_query(target, lo, keys), EARLIER_FIELDS) if len(keys) else None
    # Each statement's earlier sample goes just before its first one inside: `source` is, for each place in the
    # ordered samples, its row in the samples inside followed by the earlier ones.
    has = np.zeros(len(keys), dtype=np.int64)
    first_earlier = np.zeros(0, dtype=np.int64)
    if earlier is not None and len(earlier["statement"]):
        first_earlier = earlier["statement"] - 1  # WITH ORDINALITY counts from 1
        has[first_earlier] = 1
        if has.sum() != len(first_earlier):
            raise RuntimeError("radar.pgss_last_sample returned more than one sample of a statement")
    before = np.cumsum(has)  # earlier samples up to and including each statement's
    statement_of = np.cumsum(new) - 1  # of the ordered samples inside
    source = np.empty(n + len(first_earlier), dtype=np.int64)
    source[np.arange(n) + before[statement_of]] = order
    source[starts[first_earlier] + before[first_earlier] - 1] = n + np.arange(len(first_earlier))
    columns = {}
    for name, _ in SAMPLE_FIELDS:
        if name in KEY:
            continue
        values = inside.pop(name)
        if earlier is not None:
            values = np.concatenate([values, earlier[name]])
        columns[name] = values[source]  # each contiguous, in order
    counts = np.diff(np.append(starts, n)) + has
    statement = np.repeat(np.arange(len(keys)), counts)
    return StoredSamples(span=(lo, hi), columns=columns, statement=statement, keys=keys)


def _copied(
    conn: sa.Connection, query: psql.Composed, fields: list[tuple[str, str]] = SAMPLE_FIELDS
) -> dict[str, np.ndarray]:
    """The rows of a binary COPY of `fields`, a contiguous array each (binary_copy.parse_columns)."""
    return binary_copy.parse_columns(copy_out(conn, query), fields)


def read_cause_counters(
    conn: sa.Connection, target: str, lo: datetime, hi: datetime, window: WindowCounters, statements: Sequence[int]
) -> pd.DataFrame:
    """The counters of `window` (read for (lo, hi]) of the statements `statements` (its query_keys: the detections
    and the keys merged into them), with the counters their causes compare (CAUSE_FIELDS but KEY; NaN where a sample
    has none): read by their keys alone, the same samples as the window's (each statement's last earlier one
    included), so the decision's read of every statement carries none of them. engine `explain_detections` takes it.
    """
    lo, hi = _aware(lo), _aware(hi)
    codes = np.unique(np.asarray(statements, dtype=np.int64))
    counters = window.counters[window.counters["query_key"].isin(codes)]
    keys = window.keys.iloc[codes]
    inside = _copied(conn, _inside_query(target, lo, hi, keys, CAUSE_FIELDS, CAUSE_SQL, len(window.keys)), CAUSE_FIELDS)
    earlier = _copied(
        conn, _earlier_query(target, lo, keys, CAUSE_FIELDS, CAUSE_SQL), [("statement", "int8"), *CAUSE_FIELDS]
    )
    rows = {name: np.concatenate([inside[name], earlier[name]]) for name, _ in CAUSE_FIELDS}  # order: the merge's
    read = pd.DataFrame({name: rows[name] for name, _ in CAUSE_FIELDS}).astype(
        {"dbid": "int64", "userid": "int64", "queryid": "int64", "toplevel": "bool"}
    )
    read["captured_at"] = pd.to_datetime(read["captured_at"].to_numpy().astype("datetime64[us]"), utc=True)
    read = read.merge(keys.assign(query_key=codes), on=KEY).drop(columns=KEY)
    read = read.drop_duplicates(["query_key", "captured_at"], keep="last")
    added = counters[["query_key", "captured_at"]].merge(read, on=["query_key", "captured_at"], how="left")
    causes = [name for name, _ in CAUSE_FIELDS if name not in KEY and name != "captured_at"]
    return counters.assign(**{name: added[name].to_numpy(dtype=np.float64) for name in causes})


@dataclass(frozen=True)
class ReadCosts:
    """What a read of a target's samples costs: how many statements its catalogue holds, how many scrapes a minute it
    had over the span looked at, and which days are stored compacted (a window there opens each statement's whole
    day)."""

    statements: int
    scrapes_per_minute: float
    compacted_days: frozenset[date]

    def compacted(self, lo: datetime, hi: datetime) -> bool:
        """Whether every UTC day the span (lo, hi] touches is compacted."""
        first, last = lo.astimezone(UTC).date(), hi.astimezone(UTC).date()
        return all(first + timedelta(days=d) in self.compacted_days for d in range((last - first).days + 1))

    def samples(self, span: timedelta) -> float:
        """The samples a read of `span` may hold: every statement at every scrape."""
        return self.statements * self.scrapes_per_minute * span.total_seconds() / 60.0


def read_costs(conn: sa.Connection, spans: Mapping[str, tuple[datetime, datetime]]) -> dict[str, ReadCosts]:
    """ReadCosts of each target over its span (lo, hi]: its scrapes and compacted days there (at least one scrape a
    minute is assumed, so a target scraped less often is not sized by a gap)."""
    out = {}
    for target, (lo, hi) in sorted(spans.items()):
        statements, scrapes = conn.execute(
            sa.text(
                "SELECT (SELECT count(*) FROM radar.query WHERE target = :t), "
                "(SELECT count(*) FROM radar.pgss_info_snapshot WHERE target = :t AND captured_at > :lo "
                "AND captured_at <= :hi)"
            ),
            {"t": target, "lo": lo, "hi": hi},
        ).one()
        days = conn.execute(
            sa.text(
                "SELECT CAST(d AS date) FROM generate_series(CAST(:lo AS date), CAST(:hi AS date), interval '1 day') d "
                "WHERE EXISTS (SELECT 1 FROM radar.pgss_compact c WHERE c.target = :t AND c.day = CAST(d AS date))"
            ),
            {"t": target, "lo": lo.astimezone(UTC).date(), "hi": hi.astimezone(UTC).date()},
        ).scalars()
        rate = max(1.0, int(scrapes) / max((hi - lo).total_seconds() / 60.0, 1.0))
        out[target] = ReadCosts(int(statements), rate, frozenset(days))
    return out


def _keyed(statements: int, of: int | None) -> bool:
    """Whether `statements` of a read limited to them (of `of` in the span, when known) are read through their own
    index entries rather than by the span's scan: each costs about what a quarter of the span's samples per
    statement cost scanned (benchmarks/analysis_bench.py), and up to KEYED_FEW are cheap whatever the span holds."""
    return statements <= KEYED_FEW or (of is not None and 4 * statements <= of)


KEYED_FEW = 200


def _key_arrays(keys: pd.DataFrame) -> psql.Composable:
    """The KEY columns of `keys` as array literals, in KEY's order, for unnest."""
    return psql.SQL(", ").join(
        psql.SQL("{}::{}[]").format(psql.Literal(keys[k].tolist()), psql.SQL(t)) for k, t in KEY_TYPES
    )


def _columns(fields: list[tuple[str, str]], expressions: Mapping[str, str]) -> psql.Composable:
    return psql.SQL(", ").join(psql.SQL(expressions.get(name, name)) for name, _ in fields)


def _inside_query(
    target: str,
    lo: datetime,
    hi: datetime,
    only: pd.DataFrame | None,
    fields: list[tuple[str, str]] = SAMPLE_FIELDS,
    expressions: Mapping[str, str] = SAMPLE_SQL,
    of: int | None = None,
) -> psql.Composed:
    """The COPY of `fields` (each read as `expressions` says, else as stored) of every sample of the target in
    (lo, hi], in no order: of every statement (radar.pgss_samples), or of the statements `only` (KEY columns; `of`:
    how many statements the span holds, when known), found as `_keyed` says."""
    cols, t, lo_, hi_ = _columns(fields, expressions), psql.Literal(target), psql.Literal(lo), psql.Literal(hi)
    if only is None:
        rows = psql.SQL("SELECT {cols} FROM radar.pgss_samples({t}, {lo}, {hi})")
    elif _keyed(len(only), of):
        rows = psql.SQL(
            "SELECT {cols} FROM (SELECT s.* FROM (SELECT DISTINCT * FROM unnest({arrays})) "
            "AS k(dbid, userid, queryid, toplevel) CROSS JOIN LATERAL "
            "radar.pgss_statement_samples({t}, k.dbid, k.userid, k.queryid, k.toplevel, {lo}, {hi}) s) w"
        )
    else:
        rows = psql.SQL(
            "SELECT {cols} FROM radar.pgss_samples({t}, {lo}, {hi}) WHERE ({key}) IN (SELECT * FROM unnest({arrays}))"
        )
    arrays = _key_arrays(only) if only is not None else psql.SQL("")
    query = rows.format(cols=cols, t=t, lo=lo_, hi=hi_, key=psql.SQL(", ".join(KEY)), arrays=arrays)
    return psql.SQL("COPY ({}) TO STDOUT (FORMAT binary)").format(query)


# The earlier samples' fields: the statement's place in the keys sent (from 1), then the samples' own.
EARLIER_FIELDS: list[tuple[str, str]] = [("statement", "int8"), *SAMPLE_FIELDS]


def _earlier_query(
    target: str,
    lo: datetime,
    keys: pd.DataFrame,
    fields: list[tuple[str, str]] = SAMPLE_FIELDS,
    expressions: Mapping[str, str] = SAMPLE_SQL,
) -> psql.Composed:
    """The COPY of each statement of `keys`' last sample at or before lo (looked for in the RECENT stretch before lo
    first, so older partitions are read only when needed; none when it has none), with its row in `keys` from 1
    (`statement`, then `fields`)."""
    cols = _columns(fields, expressions)
    t, lo_, recent = (psql.Literal(v) for v in (target, lo, lo - RECENT))
    return psql.SQL("""
        COPY (
            WITH m AS MATERIALIZED (
                SELECT * FROM unnest({arrays}) WITH ORDINALITY AS k(dbid, userid, queryid, toplevel, statement)
            ), recent AS (
                SELECT m.statement, o.* FROM m
                CROSS JOIN LATERAL radar.pgss_last_sample({t}, m.dbid, m.userid, m.queryid, m.toplevel, {recent},
                                                          {lo}) o
            ), older AS (
                SELECT m.statement, o.* FROM m
                CROSS JOIN LATERAL radar.pgss_last_sample({t}, m.dbid, m.userid, m.queryid, m.toplevel, '-infinity',
                                                          {recent}) o
                WHERE NOT EXISTS (SELECT FROM recent r WHERE r.statement = m.statement)
            )
            SELECT statement, {cols} FROM recent UNION ALL SELECT statement, {cols} FROM older
        ) TO STDOUT (FORMAT binary)
    """).format(arrays=_key_arrays(keys), t=t, lo=lo_, recent=recent, cols=cols)


def _as_counters(samples: dict[str, np.ndarray], statement: np.ndarray, keys: pd.DataFrame) -> WindowCounters:
    """The engine's counters frame (a row per sample) and the statement keys, from the window's samples in order
    (`statement`: each sample's row in `keys`); query_key numbers the window's statements in that order.

    reset_before is folded into stats_since (a counter epoch the engine compares between rows), so an interval the
    collector saw cross a reset is discarded like one whose counters went down. A statement's fingerprint is that of
    its latest sample.
    """
    first = np.flatnonzero(np.diff(statement, prepend=-1))  # `statement` is in order: where each one's rows begin
    present = statement[first]
    lengths = np.diff(np.append(first, len(statement)))
    columns: dict[str, Any] = {"query_key": np.repeat(np.arange(len(present)), lengths)}
    for name in SERIES:
        values = samples[name]
        if name == "captured_at":
            values = pd.to_datetime(values.astype("datetime64[us]"), utc=True)
        elif name == "stats_since":
            micros = np.where(np.isnat(values), 0, values.astype("datetime64[us]").view(np.int64))
            values = pd.to_datetime(micros + _epochs(samples["reset_before"], lengths), unit="us", utc=True)
        columns[name] = values
    columns["fingerprint"] = np.repeat(samples["fingerprint"][np.cumsum(lengths) - 1], lengths)  # each one's last
    window_keys = keys.iloc[present].reset_index(drop=True)
    for name in ("dbid", "userid", "toplevel"):  # the engine merges fingerprints only within these
        columns[name] = np.repeat(window_keys[name].to_numpy(), lengths)
    # The arrays are the caller's to give (cut for this window, or read for it alone): taken as they are, not copied
    # into blocks of one type.
    return WindowCounters(counters=pd.DataFrame(columns, copy=False), keys=window_keys)


def _epochs(reset_before: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Per row, how many resets the collector saw in its statement's series so far (a running count per statement)."""
    running = np.cumsum(reset_before, dtype=np.int64)
    if not len(lengths):  # no statement in the window (an idle target)
        return running
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    before = np.concatenate([[0], running])[starts]  # the count just before each statement's first row
    return running - np.repeat(before, lengths)


def write_analysis(
    conn: sa.Connection,
    analysis_id: str,
    target: str,
    settings: dict[str, Any],
    window: tuple[datetime, datetime],
    verdicts: pd.DataFrame,
    run_id: str | None,
) -> None:
    """Replace the analysis's verdicts on the target (a deploy's, or a periodic check's) with these, in the caller's
    transaction; the analysis id is stored in the column deploy_id.

    `verdicts` is the engine's result joined with the statement keys (KEY columns), fingerprint, merged_queryids
    (ANALYSED_VERDICTS; a FrameError naming what is missing or wrong, before anything is written).
    """
    ANALYSED_VERDICTS.check(verdicts, "write_analysis")
    counts = verdicts["verdict"].value_counts()
    conn.execute(
        sql_text("warehouse.upsert_analysis"),
        {
            "deploy_id": analysis_id,
            "target": target,
            "settings": json.dumps(settings, sort_keys=True),
            "engine_version": settings.get("engine_version", ""),
            "lo": window[0],
            "hi": window[1],
            "queries": len(verdicts),
            "detected": int(counts.get(Verdict.DETECTED, 0)),
            "no_regression": int(counts.get(Verdict.NO_REGRESSION, 0)),
            "inconclusive": int(counts.get(Verdict.INCONCLUSIVE, 0)),
            "insufficient": int(counts.get(Verdict.INSUFFICIENT_DATA, 0)),
            "run_id": run_id,
        },
    )
    conn.execute(
        sa.text("DELETE FROM radar.verdict WHERE deploy_id = :d AND target = :t"), {"d": analysis_id, "t": target}
    )
    if not len(verdicts):
        return
    marks = {} if "group_regressed" in verdicts.columns else {"group_regressed": None}  # decided without groups
    copy_frame(conn, "radar.verdict", VERDICT_COLUMNS, verdicts.assign(deploy_id=analysis_id, target=target, **marks))


@dataclass(frozen=True)
class WindowHealth:
    """Scrape coverage and resets in a window: scrapes, the longest gap between them in seconds (window edges
    included; the first sample's interval starts at the last scrape at or before the window, so the gap before its
    first scrape is measured from there), stats resets seen (distinct stats_reset values − 1), evictions (dealloc)
    counted inside it, and the target's first scrape stored (None without any): a statement first seen then was not
    created then."""

    scrapes: int
    longest_gap_s: float
    stats_resets: int
    dealloc: int
    first_scrape: datetime | None


def window_health(conn: sa.Connection, target: str, lo: datetime, hi: datetime) -> WindowHealth:
    """The window's WindowHealth."""
    row = conn.execute(
        sql_text("warehouse.window_health"),
        {"t": target, "lo": lo, "hi": hi},
    ).one()
    return WindowHealth(
        scrapes=int(row[0]),
        longest_gap_s=row[1].total_seconds() if row[1] is not None else (hi - lo).total_seconds(),
        stats_resets=max(0, int(row[2]) - 1),
        dealloc=int(row[3] or 0),
        first_scrape=row[4],
    )


# A statement's whole stored text (radar.query keeps at most 8,192 characters), for parsing it: a text cut short may
# not parse, or parse as another statement.
WHOLE_TEXT = 100_000


def query_texts(conn: sa.Connection, target: str, keys: pd.DataFrame, length: int = 120) -> dict[int, str]:
    """queryid → the statement's text, whitespace folded and cut to `length` characters, for the given keys."""
    if keys.empty:
        return {}
    rows = conn.execute(
        sa.text(
            "SELECT q.queryid, left(regexp_replace(q.query, '\\s+', ' ', 'g'), :n) FROM radar.query q "
            f"JOIN {KEYS} AS k(dbid, userid, queryid, toplevel) USING (dbid, userid, queryid, toplevel) "
            "WHERE q.target = :t"
        ),
        {"t": target, "n": length, **key_params(statement_keys(keys))},
    )
    return {int(r[0]): r[1] for r in rows}


# Every other column of a verdict, its analysis and its deploy, for `radar verdicts --format csv|json`.
VERDICT_DETAILS = (
    "v.change_at, v.p_value, v.p_family, v.t_stat, v.dof, v.n_before, v.n_after, v.segment_mean_before_ms, "
    "v.segment_mean_after_ms, v.rows_per_call_before, v.rows_per_call_after, v.blks_read_per_call_before, "
    "v.blks_read_per_call_after, v.budget_share, v.serial_correlation, v.plan_diff, v.queryid_shared_with, "
    "v.cause_detail, v.named_changes, v.undo_hint, v.group_regressed, v.dbid, "
    "v.userid, v.toplevel, v.fingerprint, v.merged_queryids, v.trigger, v.deploy_id, d.deployed_at, d.service, "
    "d.version, d.url, "
    "d.source AS deploy_source, d.received_at AS deploy_received_at, a.analysed_at, a.engine_version, "
    "a.window_start, a.window_end, v.look, v.look_end, v.tier"
)


def verdicts_of(conn: sa.Connection, analysis_id: str) -> pd.DataFrame:
    """A deploy's (or a periodic check's) verdicts with each query's whole text on one line, detections first (for
    `radar verdicts`): the columns its table shows, then every other column of the verdict, its analysis and its
    deploy (VERDICT_DETAILS; deploy columns empty for a periodic check), and its latest label and the mute covering it
    when detected (sql/0037: label … mute_ends_at, empty for none).
    change_after_deploy is measured from the deploy, or for a periodic check from the split between its periods."""
    return pd.read_sql(
        sa.text(
            "SELECT v.target, v.verdict, v.reason, v.cause, v.mean_before_ms, v.mean_after_ms, v.change_factor, "
            "v.confidence, v.segment_mean_after_ms / nullif(v.segment_mean_before_ms, 0) AS factor_at_change, "
            "v.factor_low, v.factor_high, v.factor_bound, v.history_intervals, "
            "v.change_at - coalesce(d.deployed_at, a.window_start + (a.window_end - a.window_start) / 2) "
            "AS change_after_deploy, v.calls_before, v.calls_after, v.queryid, "
            "regexp_replace(coalesce(q.query, ''), '\\s+', ' ', 'g') AS query, "
            f"{VERDICT_DETAILS}, {VERDICT_LABEL_COLUMNS} "
            "FROM radar.verdict v JOIN radar.analysis a ON a.deploy_id = v.deploy_id AND a.target = v.target "
            "LEFT JOIN radar.deploy_event d ON d.deploy_id = v.deploy_id "
            f"{VERDICT_QUERY_JOIN} {VERDICT_LABEL_JOIN} "
            "WHERE v.deploy_id = :d "
            f"ORDER BY v.verdict = '{Verdict.DETECTED}' DESC, v.verdict = '{Verdict.INCONCLUSIVE}' DESC, "
            "v.confidence DESC NULLS LAST, "
            "v.change_factor DESC NULLS LAST"
        ),
        conn,
        params={"d": analysis_id},
    )


def deploy_states(
    conn: sa.Connection,
    deploy_ids: list[str],
    max_open_excess: float | None = None,
    max_total_excess: float | None = None,
    gate_factor: float | None = None,
) -> pd.DataFrame:
    """The rows of radar.deploy_state for these deploys (those recorded; in the order given): state (pending, fail,
    pass, inconclusive), the verdict counts, exec_ms, cleared_ms and cleared_share, the rule's margins
    (largest_excess_share against max_open_excess, open_excess_share against max_total_excess; bounded_open, the open
    statements within gate_factor, largest_bounded_factor and largest_bounded_excess_share), largest_open_share and
    the tier counts (sql/0042). With a bar given, the state is decided with it instead of the database's
    (radar.max_open_excess, radar.max_total_excess, radar.gate_factor; defaults engine.gate's MAX_OPEN_EXCESS,
    MAX_TOTAL_EXCESS and GATE_FACTOR), for the rest of the caller's transaction."""
    bars = (("max_open_excess", max_open_excess, 0, 1), ("max_total_excess", max_total_excess, 0, 1))
    for name, bar, low, high in (*bars, ("gate_factor", gate_factor, 1, 100)):
        if bar is None:
            continue
        if not low <= bar <= high:
            raise ValueError(f"{name} must lie in [{low}, {high}], not {bar}")
        conn.execute(sa.text("SELECT set_config(:name, :s, true)"), {"name": f"radar.{name}", "s": repr(float(bar))})
    found = pd.read_sql(
        sa.text("SELECT * FROM radar.deploy_state WHERE deploy_id = ANY(:ids)"), conn, params={"ids": list(deploy_ids)}
    )
    order = {deploy_id: i for i, deploy_id in enumerate(deploy_ids)}
    return found.sort_values("deploy_id", key=lambda ids: ids.map(order), ignore_index=True)


def stale_analyses(conn: sa.Connection, current: dict, engine_version: str, within: timedelta) -> list[str]:
    """Deploys within the period whose analysis used settings other than `current` or another engine version. A stored
    record's settings are compared under their current names (engine.settings.RENAMED): a rename alone makes no
    analysis stale."""
    # Old keys dropped, their values put under the new ones (a key the record lacks gives a null, stripped).
    olds = ", ".join(f"'{old}'" for old in RENAMED)  # our own identifiers, never outside text
    moved = ", ".join(f"'{new}', a.settings -> '{old}'" for old, new in RENAMED.items())
    stored = f"((a.settings - CAST(ARRAY[{olds}] AS text[])) || jsonb_strip_nulls(jsonb_build_object({moved})))"
    rows = conn.execute(
        sa.text(
            "SELECT a.deploy_id FROM radar.analysis a JOIN radar.deploy_event d USING (deploy_id) "
            "WHERE d.deployed_at > now() - :within "
            f"AND (a.engine_version <> :version OR {stored} <> CAST(:s AS jsonb)) "
            "ORDER BY d.deployed_at"
        ),
        {"within": within, "version": engine_version, "s": json.dumps(current, sort_keys=True)},
    )
    return [r[0] for r in rows]


# radar.deploy_impact: the engine's summary columns behind the analysis and the target.
IMPACT_COLUMNS = ["deploy_id", "target", *SUMMARY_COLUMNS]
# radar.statement_change: the engine's impact columns behind the analysis and the statement key.
CHANGE_COLUMNS = [
    "deploy_id",
    "target",
    *KEY,
    *(c for c in STATEMENT_COLUMNS if c not in UNSTORED_IMPACT),
    "partner_queryid",
]


def write_impact(
    conn: sa.Connection, analysis_id: str, target: str, summary: pd.DataFrame, changes: pd.DataFrame
) -> None:
    """Replace the analysis's impact summary (radar.deploy_impact) and statement changes (radar.statement_change) with
    these, in the caller's transaction (after `write_analysis`, whose row they reference). `changes` carries KEY
    (STATEMENT_CHANGES); a FrameError naming what is missing or wrong, before anything is written."""
    IMPACT_SUMMARY.check(summary, "write_impact")
    STATEMENT_CHANGES.check(changes, "write_impact")
    params = {"d": analysis_id, "t": target}
    conn.execute(sa.text("DELETE FROM radar.deploy_impact WHERE deploy_id = :d AND target = :t"), params)
    conn.execute(sa.text("DELETE FROM radar.statement_change WHERE deploy_id = :d AND target = :t"), params)
    if len(summary):
        copy_frame(conn, "radar.deploy_impact", IMPACT_COLUMNS, summary.assign(deploy_id=analysis_id, target=target))
    if len(changes):
        copy_frame(conn, "radar.statement_change", CHANGE_COLUMNS, changes.assign(deploy_id=analysis_id, target=target))


def partner_text(alias: str) -> str:
    """The select-list item reading radar.statement_change `alias`'s partner_queryid as text (`exact_partners`): a
    column of queryids with NULLs is read as floats, which lose a 64-bit queryid's last digits."""
    return f"{alias}.partner_queryid::text AS partner_queryid_text"


def exact_partners(changes: pd.DataFrame) -> pd.DataFrame:
    """`changes`, read with `partner_text`, with partner_queryid exact (Int64, NA where none)."""
    text = changes.pop("partner_queryid_text")
    changes["partner_queryid"] = pd.array([None if pd.isna(t) else int(t) for t in text], dtype="Int64")
    return changes


def impact_of(conn: sa.Connection, analysis_id: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """An analysis's impact summary (the whole target first, then per database) and its statement changes with each
    statement's text on one line (heavy first, then by execution time added)."""
    summary = pd.read_sql(
        sa.text("SELECT * FROM radar.deploy_impact WHERE deploy_id = :d ORDER BY target, dbid"),
        conn,
        params={"d": analysis_id},
    )
    changes = pd.read_sql(
        sa.text(
            f"SELECT v.*, {partner_text('v')}, regexp_replace(coalesce(q.query, ''), '\\s+', ' ', 'g') AS query "
            f"FROM radar.statement_change v {VERDICT_QUERY_JOIN} WHERE v.deploy_id = :d "
            "ORDER BY v.target, v.heavy DESC, v.exec_ms_per_min_after - v.exec_ms_per_min_before DESC"
        ),
        conn,
        params={"d": analysis_id},
    )
    return summary, exact_partners(changes)
