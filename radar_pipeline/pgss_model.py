"""The shape of a pg_stat_statements scrape: produced by the collector, stored by the warehouse (neither imports
the other, so what they share lives here)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # `radar deploy` reaches KEY through the warehouse's helpers: it should not pay for pandas
    import pandas as pd

# pg_stat_statements keys a statement by these (toplevel from PostgreSQL 14); radar adds the target in front.
KEY = ["dbid", "userid", "queryid", "toplevel"]
Key = tuple[int, int, int, bool]


# A detection whose queryid PostgreSQL 18 also gives to the same statement over other tables (collector/shared_queryid):
# what it says, and why it has no plan diff.
SHARED_QUERYID = (
    "this queryid may cover statements over several tables (PostgreSQL 18 merges statements that differ only in "
    "table names behind the same alias): the same statement over {tables} gets it too, and its text is whichever "
    "came first"
)
SHARED_QUERYID_PLAN = "its queryid may cover statements over several tables, and no one table's plan stands for them"


def shared_queryid_note(tables: Sequence[str]) -> str:
    """What a verdict says when its queryid is shared with the same statement over these other tables."""
    return SHARED_QUERYID.format(tables=", ".join(tables))


def statement_key(values: Sequence[Any]) -> Key:
    """A statement's key as plain Python values, from the first four items of a row (dbid, userid, queryid,
    toplevel)."""
    return (int(values[0]), int(values[1]), int(values[2]), bool(values[3]))


def key_label(values: Sequence[Any]) -> str:
    """A statement's key as one name for files and metadata keys, e.g. 16384-10-7031-top: a queryid alone is not
    unique (it leaves out the user and the nesting level, and databases cloned from one template share it)."""
    dbid, userid, queryid, toplevel = statement_key(values)
    return f"{dbid}-{userid}-{queryid}-{'top' if toplevel else 'nested'}"


def statement_keys(frame: pd.DataFrame) -> list[Key]:
    """The key of every row of a frame with the KEY columns."""
    return [statement_key(row) for row in zip(*(frame[k] for k in KEY), strict=True)]


# The cumulative counters radar keeps (shared_blk_read_time is blk_read_time before PostgreSQL 17; stddev_exec_time is
# the population stddev of the calls' times since the entry began, which the engine turns into per-interval spreads).
COUNTERS = [
    "calls",
    "total_exec_time",
    "rows",
    "shared_blks_hit",
    "shared_blks_read",
    "temp_blks_written",
    "shared_blk_read_time",
    "stddev_exec_time",
]

# The newer counters radar keeps where the installed extension has them, with the extension version that added each
# (PostgreSQL 15 is 1.10, 17 is 1.11, 18 is 1.12); a server whose extension lacks one stores null, never 0. plans and
# total_plan_time stay 0 unless pg_stat_statements.track_planning is on; the jit_* times are the JIT's per phase.
OPTIONAL_COUNTERS = {
    "plans": (1, 8),
    "total_plan_time": (1, 8),
    "temp_blks_read": (1, 8),
    "temp_blk_read_time": (1, 10),
    "temp_blk_write_time": (1, 10),
    "wal_bytes": (1, 8),  # numeric in the view, stored as bigint
    "wal_buffers_full": (1, 12),
    "jit_functions": (1, 10),
    "jit_generation_time": (1, 10),
    "jit_inlining_time": (1, 10),
    "jit_optimization_time": (1, 10),
    "jit_emission_time": (1, 10),
    "jit_deform_time": (1, 11),
    "parallel_workers_to_launch": (1, 12),
    "parallel_workers_launched": (1, 12),
}


def counter_type(name: str) -> str:
    """The PostgreSQL type of a counter's column: float8 for times (ms), int8 for counts."""
    return "float8" if name.endswith("_time") else "int8"


# The PostgreSQL type of the key's and the counters' columns, for reading and writing them in binary (binary_copy).
KEY_TYPES = [("dbid", "oid"), ("userid", "oid"), ("queryid", "int8"), ("toplevel", "bool")]
COUNTER_TYPES = [(name, counter_type(name)) for name in COUNTERS]
OPTIONAL_TYPES = [(name, counter_type(name)) for name in OPTIONAL_COUNTERS]


@dataclass(frozen=True)
class ScrapeInfo:
    """The server-wide facts of one scrape of one target."""

    target: str
    captured_at: datetime  # the watched server's clock, read in the same statement as the counters
    server_version_num: int
    pgss_version: str
    dealloc: int | None  # pg_stat_statements_info (PostgreSQL 14+)
    stats_reset: datetime | None


@dataclass(frozen=True)
class PgssScrape:
    """One read of a target's pg_stat_statements: server facts and one row per statement (no texts)."""

    info: ScrapeInfo
    # KEY + COUNTERS + OPTIONAL_COUNTERS (float, NaN where the extension lacks one) + stats_since
    statements: pd.DataFrame
