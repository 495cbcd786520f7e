"""The words a verdict is written in: verdicts, the reasons behind them, and the causes of a detection.

Each is a StrEnum, so a member equals (and hashes as) its word: frames, the warehouse (whose CHECK constraints list the
same words, sql/0017) and JSON hold the plain strings, and code compares them with the members. Frames the engine
returns hold the plain strings (`.value`), never the members.
"""

from enum import StrEnum


class Verdict(StrEnum):
    """A statement's verdict. no_regression means cleared (engine 2.5): the slowdown's upper bound lies within the
    tolerance (docs/method.md, "Clearing"); inconclusive: decidable, but neither detected nor cleared."""

    DETECTED = "detected"
    NO_REGRESSION = "no_regression"
    INCONCLUSIVE = "inconclusive"
    INSUFFICIENT_DATA = "insufficient_data"


class Reason(StrEnum):
    """Why a statement got its verdict (the step of engine/decision.py that stopped or decided it)."""

    FLOOR_SAMPLES = "floor_samples"
    FLOOR_CALLS = "floor_calls"
    BELOW_THRESHOLD = "below_threshold"
    NO_CHANGE_POINT = "no_change_point"
    OUTSIDE_TOLERANCE = "outside_tolerance"
    NOT_SIGNIFICANT = "not_significant"
    SIGNIFICANT = "significant"
    DRIFT = "drift"  # engine 2: significant at the split, but no level shift beyond the trend the window already shows
    # engine 2.5, why a statement the pre-filter stopped is not cleared (inconclusive):
    INTERVAL_SPANS_THRESHOLD = "interval_spans_threshold"  # precise enough to clear, but too close to 1 + θ
    INTERVAL_TOO_WIDE = "interval_too_wide"  # too few calls for their noise: even an unchanged estimate's bound exceeds
    # as interval_too_wide, with a window unlike its noise prior (the statement's earlier days), so tested on the window
    # alone. The stored word keeps "history" (radar.verdict's CHECK constraint, sql/0017): only the member is renamed.
    PRIOR_CONFLICT = "history_conflict"


class Tier(StrEnum):
    """What a verdict says beyond its word (engine 2.7, docs/method.md "Tiers"): `improved`, a cleared statement whose
    upper bound lies below 1 / (1 + θ), clearly faster; `probably_slower`, an inconclusive statement whose own 95%
    interval lies above 1 + θ, slower on its own evidence but not proven within the family's budget. Neither changes
    the verdict; a gate passes with the one and warns of the other."""

    IMPROVED = "improved"
    PROBABLY_SLOWER = "probably_slower"


class Cause(StrEnum):
    """Why a detected statement got slower, one word per detection (the first that applies, in the order of README's
    "Reading a verdict"): its verdict's `cause_detail` says it in words, `named_changes` lists the catalog and setting
    changes found on its relations (also beside plan_changed), `undo_hint` how to undo the first where it can be told.

    plan_changed comes from the plans around the change; the named-change words from the catalog and settings facts
    collected around the deploy (a ChangeKind of the statement's relations, database or role); the counter words from
    the counters of the two segments; collateral names the statement whose load rose at the same change point.
    contention (`contention: <queryid> <text>`) is what analyses before issue 28 stored for collateral."""

    PLAN_CHANGED = "plan_changed"
    # a change named in the catalog or settings (ChangeKind, CAUSE_OF_CHANGE)
    INDEX_DROPPED = "index_dropped"
    INDEX_INVALID = "index_invalid"
    COLUMN_TYPE_CHANGED = "column_type_changed"
    TRIGGER_ADDED = "trigger_added"
    CONSTRAINT_ADDED = "constraint_added"
    STATISTICS_RESET = "statistics_reset"
    SETTING_CHANGED = "setting_changed"
    STATISTICS_CHANGED = "statistics_changed"  # the plan changed with the table's statistics (analysed in the span)
    STATISTICS_STALE = "statistics_stale"  # or with statistics autovacuum had not kept up with
    SCHEMA_CHANGED = "schema_changed"  # any other catalog change on its relations
    FLEET_WIDE = "fleet_wide"
    # from the counters of the two segments
    MORE_ROWS = "more_rows"
    PLANNING_TIME = "planning_time"
    TEMP_SPILL = "temp_spill"
    LOST_PARALLELISM = "lost_parallelism"
    JIT = "jit"
    WAL_BOUND = "wal_bound"
    MORE_BUFFERS = "more_buffers"  # shared buffers touched (hit + read) per call
    MORE_BLOCKS_READ = "more_blocks_read"
    COLLATERAL = "collateral"
    # from the wait samples (pg_stat_activity at each scrape): what its sessions waited on after the change
    LOCK_WAIT = "lock_wait"  # a heavyweight lock, with the statement holding it
    IO_WAIT = "io_wait"
    CONTENTION = "contention"
    UNEXPLAINED = "unexplained"


class ChangeKind(StrEnum):
    """What a named change did (radar_pipeline/named_changes.py), most telling first: a statement touched by several
    is given the cause (CAUSE_OF_CHANGE) of the first that can slow it (named_changes.SLOWING)."""

    INDEX_DROPPED = "index_dropped"
    INDEX_INVALID = "index_invalid"  # left invalid or not ready (a failed CREATE INDEX CONCURRENTLY)
    COLUMN_TYPE_CHANGED = "column_type_changed"
    TRIGGER_ADDED = "trigger_added"
    CONSTRAINT_ADDED = "constraint_added"
    STATISTICS_RESET = "statistics_reset"  # no statistics since a rewrite, a replacement or a reset
    SETTING_CHANGED = "setting_changed"  # pg_settings, or pg_db_role_setting for a database and/or role
    STATISTICS_CHANGED = "statistics_changed"  # analysed (ANALYZE or autoanalyze): the planner's estimates may move
    STATISTICS_STALE = "statistics_stale"  # modified well past autovacuum's analyze threshold since its last analyze
    INDEX_ADDED = "index_added"
    INDEX_CHANGED = "index_changed"
    TRIGGER_DROPPED = "trigger_dropped"
    TRIGGER_CHANGED = "trigger_changed"  # its definition, or enabled/disabled
    CONSTRAINT_DROPPED = "constraint_dropped"
    COLUMN_ADDED = "column_added"
    COLUMN_DROPPED = "column_dropped"
    TABLE_REWRITTEN = "table_rewritten"  # a new relfilenode: VACUUM FULL, CLUSTER, a rewriting ALTER TABLE
    EXTENDED_STATISTICS_DROPPED = "extended_statistics_dropped"
    EXTENDED_STATISTICS_ADDED = "extended_statistics_added"


_SAME_WORD = {k.value for k in ChangeKind} & {c.value for c in Cause}
# The cause a named change gives a statement it touches: its own word where there is one, else schema_changed.
CAUSE_OF_CHANGE = {k: Cause(k.value) if k.value in _SAME_WORD else Cause.SCHEMA_CHANGED for k in ChangeKind}


# What else a deploy changed, per statement (engine/impact.py's `kind`): replaced is either half of a statement the
# deploy rewrote (the one that stopped, the one that started); deploy_statement the deploy's own utility statement.
IMPACT_KINDS = ("new", "stopped", "surge", "n_plus_one", "rows_per_call", "replaced", "deploy_statement")

VERDICTS = tuple(Verdict)
REASONS = tuple(Reason)
CAUSES = tuple(Cause)
TIERS = tuple(Tier)
