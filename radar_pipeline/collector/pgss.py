"""A version-aware read of pg_stat_statements and pg_stat_statements_info.

The columns follow the installed extension's version, not the server's (an extension left un-updated after a major
upgrade keeps its old columns): toplevel and pg_stat_statements_info arrive with 1.9 (PostgreSQL 14), stats_since and
the shared_blk_*_time names with 1.11 (PostgreSQL 17), and each of the newer counters (pgss_model.OPTIONAL_COUNTERS)
with the version that added it: a column the extension lacks is not read, and is NaN in the scrape. Versions before 1.9
are refused with the command that fixes it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

import numpy as np
import pandas as pd
import psycopg
from psycopg import sql

from radar_pipeline import binary_copy
from radar_pipeline.collector.fingerprint import redact
from radar_pipeline.collector.session import TargetUnavailable, describe
from radar_pipeline.config import Target
from radar_pipeline.config.queries import sql_string
from radar_pipeline.pgss_model import (
    COUNTER_TYPES,
    COUNTERS,
    KEY,
    KEY_TYPES,
    OPTIONAL_COUNTERS,
    Key,
    PgssScrape,
    ScrapeInfo,
    counter_type,
    statement_key,
)

# Every statement the collector sends carries this comment, so it can recognise its own entries in the view.
COLLECTOR_MARK = "/* radar_pipeline collector */"

MIN_EXTENSION = (1, 9)
# The scrape's columns, in the order of its COPY: the server-wide facts on every row, then one statement's counters
# (followed by the newer counters the extension has, Extension.optional_counters).
SCRAPE_FIELDS = [
    ("captured_at", "timestamptz"),
    ("dealloc", "int8"),
    ("stats_reset", "timestamptz"),
    ("listed", "bool"),
    *KEY_TYPES,
    *COUNTER_TYPES,
    ("stats_since", "timestamptz"),
]

_OWN_TABLES = re.compile(r"\b(pg_stat_statements(_info)?|pg_store_plans)\b", re.IGNORECASE)
_LEADING_COMMENTS = re.compile(r"^(\s+|--[^\n]*\n|/\*.*?\*/)*", re.DOTALL)


@dataclass(frozen=True)
class Extension:
    """Where pg_stat_statements lives on a server and which version of it is installed."""

    schema: str
    version: str
    server_version_num: int

    @property
    def version_tuple(self) -> tuple[int, ...]:
        """The extension version as numbers, for comparisons: "1.11" → (1, 11)."""
        return tuple(int(part) for part in self.version.split("."))

    @property
    def optional_counters(self) -> list[str]:
        """The newer counters this version of the extension has (pgss_model.OPTIONAL_COUNTERS)."""
        return [name for name, since in OPTIONAL_COUNTERS.items() if self.version_tuple >= since]

    @property
    def has_stats_since(self) -> bool:
        """Whether the view has stats_since and the shared_blk_*_time names (extension 1.11, PostgreSQL 17)."""
        return self.version_tuple >= (1, 11)


def read_extension(conn: psycopg.Connection, target: Target) -> Extension:
    """Find pg_stat_statements in the connected database, refusing versions too old to read and a server on which
    the collector would see nothing (see `blindness`)."""
    row = conn.execute(sql_string("collector.read_extension")).fetchone()
    if row is None:
        database = conn.info.dbname
        raise TargetUnavailable(
            f"target {target.name!r}: pg_stat_statements is not installed in database {database!r}; "
            "run CREATE EXTENSION pg_stat_statements there (it must also be in shared_preload_libraries)"
        )
    ext = Extension(schema=row[0], version=row[1], server_version_num=row[2])
    if ext.version_tuple < MIN_EXTENSION:
        raise TargetUnavailable(
            f"target {target.name!r}: pg_stat_statements {ext.version} is older than 1.9 (PostgreSQL 14); "
            "run ALTER EXTENSION pg_stat_statements UPDATE"
        )
    reasons = blindness(conn.info.dbname, *row[3:])
    if reasons:
        raise TargetUnavailable(f"target {target.name!r}: statements cannot be collected: {'; '.join(reasons)}")
    return ext


# Where a setting came from when only the collector's own role has it (ALTER ROLE ... SET): other roles' sessions,
# whose statements are collected, do not have it.
_ROLE_SOURCES = {"user", "database user"}


def blindness(
    database: str,
    role: str,
    reads_all_stats: bool,
    track: str | None,
    track_source: str | None,
    query_id: str | None,
    query_id_source: str | None,
    own_query_id: bool | None,
) -> list[str]:
    """Why a scrape would store nothing, or an empty list: the role lacks pg_read_all_stats (other roles' statements
    come without queryid, and are dropped), pg_stat_statements.track is none, or compute_query_id is off with no
    module computing query ids (this session's own statement then has none). Settings made for the collector's role
    alone are not counted; none of this depends on the server having run any statement yet."""
    reasons = []
    if not reads_all_stats:
        reasons.append(
            f"role {role!r} lacks pg_read_all_stats, so other roles' statements show as <insufficient privilege> "
            f"without a queryid; run GRANT pg_read_all_stats TO {role}"
        )
    where = {
        "database": f"for database {database!r} (ALTER DATABASE ... SET)",
        "configuration file": "in the server's configuration",
    }
    if track == "none" and track_source not in _ROLE_SOURCES:
        reasons.append(
            f"pg_stat_statements.track is none {where.get(track_source or '', f'(set by {track_source})')}, so "
            "nothing is recorded; set it to top (the default) or all"
        )
    if query_id == "off" and query_id_source not in _ROLE_SOURCES and not own_query_id:
        reasons.append(
            f"compute_query_id is off {where.get(query_id_source or '', f'(set by {query_id_source})')} and no module "
            "computes query ids, so pg_stat_statements records nothing; set it to auto (the default) or on"
        )
    return reasons


def scrape(conn: psycopg.Connection, target: Target, ext: Extension, exclude_role: str | None = None) -> PgssScrape:
    """Read every statement's counters and the server-wide facts in one statement, so they share one clock reading.

    The rows come as a binary COPY read into numpy (binary_copy), with no Python object per value. Texts are not read
    here (showtext := false keeps the scrape cheap); `fetch_texts` reads them for new statements. Statements of
    `exclude_role`, the collector's dedicated role when it has one, are left out.
    """
    fn = sql.Identifier(ext.schema, "pg_stat_statements")
    info_view = sql.Identifier(ext.schema, "pg_stat_statements_info")
    since = ext.has_stats_since
    optional = ext.optional_counters
    # Every column coalesced, so each row of the binary COPY has one width (binary_copy); `listed` is false on the one
    # row an empty view gives, which carries only the server-wide facts.
    query = sql.SQL(
        "COPY (SELECT " + COLLECTOR_MARK + " h.captured_at, coalesce(h.dealloc, -1), "
        "coalesce(h.stats_reset, '-infinity'), s.queryid IS NOT NULL, coalesce(s.dbid, 0), coalesce(s.userid, 0), "
        "coalesce(s.queryid, 0), coalesce(s.toplevel, false), coalesce(s.calls, 0), coalesce(s.total_exec_time, 0), "
        "coalesce(s.rows, 0), coalesce(s.shared_blks_hit, 0), coalesce(s.shared_blks_read, 0), "
        "coalesce(s.temp_blks_written, 0), coalesce(s.{read_time}, 0), coalesce(s.stddev_exec_time, 0), "
        "coalesce({stats_since}, '-infinity'){optional} "
        "FROM (SELECT statement_timestamp() AS captured_at, i.dealloc, i.stats_reset FROM {info} i) h "
        "LEFT JOIN LATERAL (SELECT * FROM {fn}(false) p WHERE p.queryid IS NOT NULL {role_filter}) s ON true"
        ") TO STDOUT (FORMAT binary)"
    ).format(
        read_time=sql.Identifier("shared_blk_read_time" if since else "blk_read_time"),
        stats_since=sql.SQL("s.stats_since" if since else "NULL::timestamptz"),
        optional=sql.SQL("").join(
            sql.SQL(", coalesce(s.{}, 0)::{}").format(sql.Identifier(name), sql.SQL(counter_type(name)))
            for name in optional
        ),
        info=info_view,
        fn=fn,
        role_filter=sql.SQL(
            "AND p.userid IS DISTINCT FROM (SELECT oid FROM pg_roles WHERE rolname = {role})" if exclude_role else ""
        ).format(role=sql.Literal(exclude_role)),
    )
    try:
        with conn.cursor() as cur, cur.copy(query) as copy:
            data = b"".join(bytes(block) for block in copy)
    except psycopg.Error as exc:
        raise TargetUnavailable(
            f"target {target.name!r}: reading pg_stat_statements failed: {describe(exc, target)}"
        ) from None
    rows = binary_copy.parse(data, [*SCRAPE_FIELDS, *((name, counter_type(name)) for name in optional)])
    listed = rows[rows["listed"]]
    columns = {name: listed[name] for name in KEY + COUNTERS}
    unknown = np.full(len(listed), np.nan)
    for name in OPTIONAL_COUNTERS:  # float, so that a counter the extension lacks is NaN (stored as null)
        columns[name] = listed[name].astype("float64") if name in optional else unknown
    statements = pd.DataFrame(columns).astype({"dbid": "int64", "userid": "int64"})
    statements["stats_since"] = pd.to_datetime(listed["stats_since"], utc=True)
    head = rows[0]
    info = ScrapeInfo(
        target=target.name,
        captured_at=_utc(head["captured_at"]),
        server_version_num=ext.server_version_num,
        pgss_version=ext.version,
        dealloc=None if head["dealloc"] < 0 else int(head["dealloc"]),
        stats_reset=None if np.isnat(head["stats_reset"]) else _utc(head["stats_reset"]),
    )
    return PgssScrape(info=info, statements=statements)


def _utc(value: np.datetime64) -> datetime:
    return pd.Timestamp(value).tz_localize("UTC").to_pydatetime()


def fetch_texts(conn: psycopg.Connection, target: Target, ext: Extension, queryids: list[int]) -> dict[Key, str]:
    """Read the texts of the given queryids (the view stores each text once; this reads only what we ask for),
    redacted: a utility statement's literals (a CREATE ROLE's password) never leave this function. The texts of the
    collector's own statements are not: they are never stored (by key only), and are recognised by what they read,
    which a literal may name."""
    if not queryids:
        return {}
    query = sql.SQL(
        "SELECT " + COLLECTOR_MARK + " dbid, userid, queryid, toplevel, query FROM {fn}(true) "
        "WHERE queryid = ANY(%(ids)s)"
    ).format(fn=sql.Identifier(ext.schema, "pg_stat_statements"))
    try:
        rows = conn.execute(query, {"ids": list(queryids)}).fetchall()
    except psycopg.Error as exc:
        raise TargetUnavailable(
            f"target {target.name!r}: reading statement texts failed: {describe(exc, target)}"
        ) from None
    return {statement_key(r): r[4] if own_statement_reason(r[4] or "") else redact(r[4] or "") for r in rows}


def own_statement_reason(text: str) -> str | None:
    """Why a statement is the collector's own (or another monitor's read of the same views), else None.

    These are never stored or analysed: EXPLAIN of any kind (plan capture runs it), anything carrying the collector's
    mark, and anything reading pg_stat_statements, pg_stat_statements_info or pg_store_plans.
    """
    body = _LEADING_COMMENTS.sub("", text, count=1)
    if body[:7].upper() == "EXPLAIN":
        return "explain"
    if COLLECTOR_MARK in text:
        return "collector"
    if _OWN_TABLES.search(text):
        return "reads_statistics_views"
    return None
