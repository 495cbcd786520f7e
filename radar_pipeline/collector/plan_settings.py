"""The settings whose change can change a statement's plan or its execution time: core PostgreSQL parameters, none
of which holds a secret (collector/catalog.py reads their changes; collector/fingerprint.py keeps their values in a
statement's text)."""

from __future__ import annotations

# Settings that change what the planner chooses or how a plan executes: the only ones read (of a role's, a database's
# or the server's), so a value that is a secret (a custom setting holding a token, primary_conninfo's password) never
# leaves the watched server, and a change of any other names no statement. Not among them: statement_timeout and
# lock_timeout (they end a statement, never slow it), track_io_timing and maintenance_work_mem (no plan uses them).
PLAN_SETTINGS = frozenset(
    {
        "work_mem",
        "hash_mem_multiplier",
        "temp_buffers",
        "random_page_cost",
        "seq_page_cost",
        "cpu_tuple_cost",
        "cpu_index_tuple_cost",
        "cpu_operator_cost",
        "parallel_setup_cost",
        "parallel_tuple_cost",
        "min_parallel_table_scan_size",
        "min_parallel_index_scan_size",
        "effective_cache_size",
        "effective_io_concurrency",
        "default_statistics_target",
        "constraint_exclusion",
        "cursor_tuple_fraction",
        "from_collapse_limit",
        "join_collapse_limit",
        "geqo",
        "geqo_threshold",
        "plan_cache_mode",
        "max_parallel_workers_per_gather",
        "max_parallel_workers",
        "parallel_leader_participation",
        "recursive_worktable_factor",
        "jit",
        "jit_above_cost",
        "jit_inline_above_cost",
        "jit_optimize_above_cost",
        "search_path",
        "synchronous_commit",
        "commit_delay",
        "default_transaction_isolation",
        "session_replication_role",
        "row_security",
        "enable_partitionwise_join",
        "enable_partitionwise_aggregate",
    }
)
PLAN_SETTING_PREFIXES = ("enable_", "jit_")


def affects_plans(setting: str) -> bool:
    """Whether a change of this setting can change a statement's plan or its execution time."""
    name = setting.lower()
    return name in PLAN_SETTINGS or name.startswith(PLAN_SETTING_PREFIXES)
