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
    sa.Column("stddev_exec_time", sa.Double),  # 0007; null in older rows
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

deploy_event = sa.Table(
    "deploy_event",
    metadata,
    sa.Column("deploy_id", sa.Text, primary_key=True),
    sa.Column("target", sa.Text, nullable=False),
    sa.Column("deployed_at", _tz, nullable=False),
    sa.Column("service", sa.Text),
    sa.Column("version", sa.Text),
    sa.Column("source", sa.Text, nullable=False),
    sa.Column("url", sa.Text),
    sa.Column("metadata", pg.JSONB, nullable=False),
    sa.Column("received_at", _tz, nullable=False),
)

# Whether an analysis (and its verdicts) is of a deploy or periodic, derived from its id.
_TRIGGER = "CASE WHEN deploy_id LIKE 'periodic:%' THEN 'periodic' ELSE 'deploy' END"

analysis = sa.Table(
    "analysis",
    metadata,
    sa.Column("deploy_id", sa.Text, primary_key=True),
    sa.Column("target", sa.Text, primary_key=True),
    sa.Column("analysed_at", _tz, nullable=False),
    sa.Column("settings", pg.JSONB, nullable=False),
    sa.Column("engine_version", sa.Text, nullable=False),
    sa.Column("window_start", _tz, nullable=False),
    sa.Column("window_end", _tz, nullable=False),
    sa.Column("queries", sa.Integer, nullable=False),
    sa.Column("detected", sa.Integer, nullable=False),
    sa.Column("no_regression", sa.Integer, nullable=False),
    sa.Column("insufficient_data", sa.Integer, nullable=False),
    sa.Column("run_id", sa.Text),
    sa.Column("trigger", sa.Text, sa.Computed(_TRIGGER), nullable=False),
    sa.Column("deploy_ref", sa.Text, sa.Computed("CASE WHEN deploy_id LIKE 'periodic:%' THEN NULL ELSE deploy_id END")),
)

_measure = sa.Double

verdict = sa.Table(
    "verdict",
    metadata,
    sa.Column("deploy_id", sa.Text, primary_key=True),
    *_statement_key(),
    sa.Column("fingerprint", sa.BigInteger, nullable=False),
    sa.Column("verdict", sa.Text, nullable=False),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("change_at", _tz),
    *(
        sa.Column(name, _measure)
        for name in (
            "mean_before_ms",
            "mean_after_ms",
            "change_factor",
            "t_stat",
            "dof",
            "p_value",
            "confidence",
        )
    ),
    sa.Column("n_before", sa.Integer, nullable=False),
    sa.Column("n_after", sa.Integer, nullable=False),
    sa.Column("calls_before", sa.BigInteger, nullable=False),
    sa.Column("calls_after", sa.BigInteger, nullable=False),
    *(
        sa.Column(name, _measure)
        for name in (
            "segment_mean_before_ms",
            "segment_mean_after_ms",
            "rows_per_call_before",
            "rows_per_call_after",
            "blks_read_per_call_before",
            "blks_read_per_call_after",
        )
    ),
    sa.Column("cause", sa.Text),
    sa.Column("plan_diff", pg.JSONB),
    sa.Column("merged_queryids", pg.ARRAY(sa.BigInteger), nullable=False),
    sa.Column("trigger", sa.Text, sa.Computed(_TRIGGER), nullable=False),
    *(
        sa.Column(name, _measure)  # 0007 (engine 2)
        for name in ("factor_low", "factor_high", "p_family", "budget_share", "serial_correlation")
    ),
)

regression_episode = sa.Table(
    "regression_episode",
    metadata,
    sa.Column("target", sa.Text, primary_key=True),
    sa.Column("fingerprint", sa.BigInteger, primary_key=True),
    sa.Column("dbid", pg.OID, nullable=False),
    sa.Column("userid", pg.OID, nullable=False),
    sa.Column("queryid", sa.BigInteger, nullable=False),
    sa.Column("toplevel", sa.Boolean, nullable=False),
    sa.Column("opened_by", sa.Text, primary_key=True),
    sa.Column("opened_at", _tz, nullable=False),
    sa.Column("change_at", _tz, nullable=False),
    sa.Column("baseline_ms", _measure, nullable=False),
    sa.Column("level_ms", _measure, nullable=False),
    sa.Column("recovered_at", _tz),
    sa.Column("recovered_by", sa.Text),
    sa.Column("recovered_ms", _measure),
)

query_history = sa.Table(
    "query_history",
    metadata,
    sa.Column("target", sa.Text, primary_key=True),
    sa.Column("fingerprint", sa.BigInteger, primary_key=True),
    sa.Column("deploy_id", sa.Text, primary_key=True),
    sa.Column("deployed_at", _tz, nullable=False),
    sa.Column("dbid", pg.OID, nullable=False),
    sa.Column("userid", pg.OID, nullable=False),
    sa.Column("queryid", sa.BigInteger, nullable=False),
    sa.Column("toplevel", sa.Boolean, nullable=False),
    sa.Column("mean_ms", _measure, nullable=False),
    sa.Column("calls", sa.BigInteger, nullable=False),
    sa.Column("begins_segment", sa.Boolean, nullable=False),
    sa.Column("segment", sa.Integer, nullable=False),
    sa.Column("centre_ms", _measure),
    sa.Column("spread_ms", _measure),
    sa.Column("band_ms", _measure),
    sa.Column("z_score", _measure),
    sa.Column("above_band", sa.Boolean, nullable=False),
    sa.Column("drift_rise", _measure),
    sa.Column("drift_p", _measure),
    sa.Column("drift", sa.Boolean, nullable=False),
    sa.Column("seg_points", sa.Integer, nullable=False),
    sa.Column("seg_mean_ms", _measure, nullable=False),
    sa.Column("points", sa.Integer, nullable=False),
    sa.Column("segments", sa.Integer, nullable=False),
    sa.Column("residual_ss", _measure, nullable=False),
    sa.Column("settings", pg.JSONB, nullable=False),
)
