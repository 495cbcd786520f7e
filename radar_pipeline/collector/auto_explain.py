"""The plans that really ran, from auto_explain's entries in a PostgreSQL jsonlog (issue 39, "real plans").

With `auto_explain` loaded (`shared_preload_libraries`, or `session_preload_libraries`), `auto_explain.log_format =
json` and `log_destination = jsonlog` (PostgreSQL 15+), each logged statement is one JSON line whose `message` is
"duration: … ms  plan:" followed by the plan as EXPLAIN (FORMAT JSON) gives it, and whose `query_id` is
pg_stat_statements' queryid (with `compute_query_id` on, as pg_stat_statements sets it). Unlike EXPLAIN
(GENERIC_PLAN), such a plan was made for real parameter values: the one a real call used.

radar reads the file where the server writes it (a path given per target: RADAR_AUTO_EXPLAIN_LOGS), never through
the server. Only the last TAIL_BYTES of the newest file are read each time, so a busy log costs a bounded read; a
line cut by the read's start, or one that is not an auto_explain entry, is skipped; an entry whose plan does not
parse is skipped too. Reads are of the local filesystem, with no server to wait on.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

AUTO_EXPLAIN = "auto_explain"  # the plans' source, as radar.plan_snapshot stores it
TAIL_BYTES = 8 << 20  # the most of a log read at a time
PLAN_MARK = "plan:"
# A plan that ran shows the call's values in its conditions ("(email = 'ana@example.com'::text)"): every quoted
# string and number in the plan's text fields is redacted before it leaves this module, but in these, which name
# things and hold no value.
NAMES = {"Node Type", "Relation Name", "Schema", "Alias", "Index Name", "Join Type", "Strategy", "Parent Relationship"}
NAMES |= {"Scan Direction", "Sort Method", "Partial Mode", "Operation", "CTE Name", "Function Name", "Subplan Name"}
_QUOTED = re.compile(r"'(?:[^']|'')*'")
_NUMBER = re.compile(r"(?<![\w$.])-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?(?![\w.])")


@dataclass(frozen=True)
class LoggedPlan:
    """One auto_explain entry: when it was logged (as the log says it), the statement's queryid, its database and
    user, and the plan with its values redacted (redact_plan)."""

    logged_at: str
    queryid: int
    dbname: str | None
    user: str | None
    plan: dict[str, Any]


def log_file(path: Path) -> Path | None:
    """The jsonlog to read: `path` itself, or the newest *.json file in it when it is a directory (None when it holds
    none)."""
    if not path.is_dir():
        return path
    logs = [p for p in path.glob("*.json") if p.is_file()]
    return max(logs, key=lambda p: (p.stat().st_mtime, p.name)) if logs else None


def logged_plans(path: Path, dbname: str, tail_bytes: int = TAIL_BYTES) -> dict[int, LoggedPlan]:
    """queryid → the latest plan auto_explain logged for it in database `dbname` (the last in the file: a log is
    written in time order), from the last `tail_bytes` of the jsonlog at `path` (a file, or the directory of them).
    OSError when the file cannot be read."""
    found = log_file(path)
    if found is None:
        return {}
    with open(found, "rb") as log:
        size = os.fstat(log.fileno()).st_size
        log.seek(max(0, size - tail_bytes))
        lines = log.read().split(b"\n")
    if size > tail_bytes:
        lines = lines[1:]  # the first line may be cut by where the read began
    plans: dict[int, LoggedPlan] = {}
    for line in lines:
        entry = parse_entry(line)
        if entry is not None and entry.dbname == dbname:
            plans[entry.queryid] = entry
    return plans


def parse_entry(line: bytes) -> LoggedPlan | None:
    """The auto_explain plan one jsonlog line holds, or None when it holds none (another message, no query_id, a cut
    or malformed line, a plan in another format)."""
    try:
        record = json.loads(line)
    except ValueError:
        return None
    if not isinstance(record, dict):
        return None
    message, queryid, stamp = record.get("message"), record.get("query_id"), record.get("timestamp")
    if not isinstance(message, str) or not isinstance(queryid, int) or queryid == 0 or not isinstance(stamp, str):
        return None
    head, mark, body = message.partition(PLAN_MARK)
    if not mark or not head.startswith("duration:"):
        return None
    try:
        plan = json.loads(body)
    except ValueError:
        return None
    if not isinstance(plan, dict) or not isinstance(plan.get("Plan"), dict):
        return None
    plan = {k: v for k, v in plan.items() if k != "Query Text"}  # the call's text, with its values
    dbname, user = record.get("dbname"), record.get("user")
    return LoggedPlan(
        stamp,
        queryid,
        dbname if isinstance(dbname, str) else None,
        user if isinstance(user, str) else None,
        redact_plan(plan),
    )


def redact_plan(node: Any, key: str | None = None) -> Any:
    """The plan with every quoted string and number in its text fields (conditions, outputs, keys) replaced by
    '<redacted>' and <n>, but in the fields that only name things (NAMES); numbers that are numbers (costs, rows)
    are kept."""
    if isinstance(node, dict):
        return {k: redact_plan(v, k) for k, v in node.items()}
    if isinstance(node, list):
        return [redact_plan(v, key) for v in node]
    if isinstance(node, str) and key not in NAMES:
        return _NUMBER.sub("<n>", _QUOTED.sub("'<redacted>'", node))
    return node
