"""SQLAlchemy Core descriptions of the warehouse tables. sql/ creates them; these mirror it for reads and writes.

A test reflects the migrated schema and compares it with these tables, so the two cannot drift apart.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql as pg

metadata = sa.MetaData(schema="radar")

_tz = sa.DateTime(timezone=True)


def _statement_key() -> list[sa.Column]:
    """A statement's identity as primary-key columns (new Column objects: a column belongs to one table)."""
    return [
        sa.Column("target", sa.Text, primary_key=True),
        sa.Column("dbid", pg.OID, primary_key=True),
        sa.Column("userid", pg.OID, primary_key=True),
        sa.Column("queryid", sa.BigInteger, primary_key=True),
        sa.Column("toplevel", sa.Boolean, primary_key=True),
    ]


pgss_snapshot = sa.Table(
    "pgss_snapshot",
    metadata,
    sa.Column("target", sa.Text, nullable=False),
    sa.Column("captured_at", _tz, nullable=False),
    sa.Column("dbid", pg.OID, nullable=False),
    sa.Column("userid", pg.OID, nullable=False),
    sa.Column("queryid", sa.BigInteger, nullable=False),
    sa.Column("toplevel", sa.Boolean, nullable=False),
    sa.Column("calls", sa.BigInteger, nullable=False),
    sa.Column("total_exec_time", sa.Double, nullable=False),
    sa.Column("rows", sa.BigInteger, nullable=False),
    sa.Column("shared_blks_hit", sa.BigInteger, nullable=False),
    sa.Column("shared_blks_read", sa.BigInteger, nullable=False),
    sa.Column("temp_blks_written", sa.BigInteger, nullable=False),
    sa.Column("shared_blk_read_time", sa.Double, nullable=False),
    sa.Column("stats_since", _tz),
    sa.Column("reset_before", sa.Boolean, nullable=False),
    sa.Column("fingerprint", sa.BigInteger, nullable=False),
    sa.PrimaryKeyConstraint("target", "dbid", "userid", "queryid", "toplevel", "captured_at"),
)

pgss_info_snapshot = sa.Table(
    "pgss_info_snapshot",
    metadata,
    sa.Column("target", sa.Text, primary_key=True),
    sa.Column("captured_at", _tz, primary_key=True),
    sa.Column("dealloc", sa.BigInteger),
    sa.Column("stats_reset", _tz),
    sa.Column("server_version_num", sa.Integer, nullable=False),
    sa.Column("pgss_version", sa.Text, nullable=False),
    sa.Column("statements", sa.Integer, nullable=False),
    sa.Column("stored_rows", sa.Integer, nullable=False),
)

query = sa.Table(
    "query",
    metadata,
    *_statement_key(),
    sa.Column("fingerprint", sa.BigInteger, nullable=False),
    sa.Column("query", sa.Text, nullable=False),
    sa.Column("first_seen", _tz, nullable=False),
    sa.Column("last_seen", _tz, nullable=False),
    sa.Column("last_calls", sa.BigInteger, nullable=False),
    sa.Column("last_total_exec_time", sa.Double, nullable=False),
    sa.Column("last_stats_since", _tz),
    sa.Column("missing_since", _tz),
)

ignored_statement = sa.Table(
    "ignored_statement",
    metadata,
    *_statement_key(),
    sa.Column("reason", sa.Text, nullable=False),
)

pgss_interval = sa.Table(
    "pgss_interval",
    metadata,
    sa.Column("target", sa.Text),
    sa.Column("dbid", pg.OID),
    sa.Column("userid", pg.OID),
    sa.Column("queryid", sa.BigInteger),
    sa.Column("toplevel", sa.Boolean),
    sa.Column("fingerprint", sa.BigInteger),
    sa.Column("interval_start", _tz),
    sa.Column("interval_end", _tz),
    sa.Column("calls", sa.BigInteger),
    sa.Column("total_exec_time", sa.Double),
    sa.Column("mean_exec_time_ms", sa.Double),
    sa.Column("rows", sa.BigInteger),
    sa.Column("shared_blks_hit", sa.BigInteger),
    sa.Column("shared_blks_read", sa.BigInteger),
    sa.Column("temp_blks_written", sa.BigInteger),
)
