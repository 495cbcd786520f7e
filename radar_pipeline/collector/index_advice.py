"""An index for a statement that lost one, proposed from its text and tested where the watched server allows (issue
39, "a fix, tested where the server allows").

The proposal: the table its WHERE compares most columns of with a parameter or a constant (equalities, IN, then
ranges), those columns in that order (equalities first), at most MAX_COLUMNS; or, for an index dropped, its own
definition. The test, where the database has the `hypopg` extension: the statement's generic plan (EXPLAIN without
ANALYZE: nothing runs) now, and again with the index made hypothetical (`hypopg_create_index`, in this session's
memory only, reset at once): the estimated costs and whether the plan uses it. Read-only, in the collector's bounded
session; no DDL ever reaches the watched server. The generic plan is plan capture's (collector.plans.generic_plan).
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import psycopg
from pglast import parser

from radar_pipeline.collector.fingerprint import nodes
from radar_pipeline.collector.plans import PlanUnavailable, describe_error, generic_plan

MAX_COLUMNS = 3
_EQUAL = {"=", "IN"}
_RANGE = {"<", ">", "<=", ">="}
HYPOTHETICAL = "<"  # hypopg names its indexes "<oid>btree_…"


@dataclass(frozen=True)
class Tested:
    """A proposal's test: the plan's estimated cost now and with the index, whether that plan uses it, or why it was
    not tested (`untested`)."""

    cost_now: float | None = None
    cost_with: float | None = None
    uses_index: bool = False
    untested: str | None = None

    def words(self) -> str:
        """The test in words, for a cause_detail."""
        if self.untested is not None:
            return f"not tested: {self.untested}"
        use = "the plan uses it" if self.uses_index else "the plan does not use it"
        return (
            f"checked with hypopg: estimated cost {_cost(self.cost_now)} now, {_cost(self.cost_with)} with it ({use})"
        )


def _cost(value: float | None) -> str:
    return "?" if value is None else f"{value:,.1f}" if value < 1000 else f"{value:,.0f}"


def proposed_index(text: str, scanned: Collection[str] = ()) -> tuple[str, list[str]] | None:
    """The table (as the text names it) and columns an index for the statement would have (module docstring), or None
    when its WHERE compares no column of one known table with a parameter or a constant. With `scanned` (the tables
    its plan now reads with a sequential scan, by name), one of those: the columns its WHERE compares with a value,
    else those it is joined on by equality with another table's column (the index a nested loop reaches it by)."""
    try:
        tree = json.loads(parser.parse_sql_json(text))
    except parser.ParseError:
        return None
    tables: dict[str, str] = {}  # alias or name → the table as written
    for node in nodes(tree):
        if isinstance(node.get("relname"), str):
            name = f"{node['schemaname']}.{node['relname']}" if node.get("schemaname") else node["relname"]
            alias = (node.get("alias") or {}).get("aliasname")
            tables[alias or node["relname"]] = name
    found: dict[str, list[tuple[int, str]]] = {}
    for where in (n["whereClause"] for n in nodes(tree) if isinstance(n.get("whereClause"), dict)):
        for kind, ref in _compared(where):
            table = _table_of(ref, tables)
            if table is not None:
                found.setdefault(table, []).append((0 if kind in _EQUAL else 1, ref[-1]))
    if scanned:
        found = {t: c for t, c in found.items() if t.rsplit(".", 1)[-1] in scanned} or _joined_on(tree, tables, scanned)
    if not found:
        return None
    table, compared = max(found.items(), key=lambda item: (sum(k == 0 for k, _ in item[1]), len(item[1])))
    columns: list[str] = []
    for _, column in sorted(compared, key=lambda c: c[0]):
        if column not in columns:
            columns.append(column)
    return table, columns[:MAX_COLUMNS]


def _joined_on(tree: Any, tables: dict[str, str], scanned: Collection[str]) -> dict[str, list[tuple[int, str]]]:
    """Per table of `scanned`, the columns the statement equates with another table's column (in a join's ON or its
    WHERE), as proposed_index ranks them (all equalities)."""
    found: dict[str, list[tuple[int, str]]] = {}
    for node in nodes(tree):
        expr = node.get("A_Expr")
        if not isinstance(expr, dict) or expr.get("kind") != "AEXPR_OP":
            continue
        names = [n.get("String", {}).get("sval") for n in expr.get("name") or [] if isinstance(n, dict)]
        left, right = _column(expr.get("lexpr")), _column(expr.get("rexpr"))
        if names[-1:] != ["="] or left is None or right is None:
            continue
        for mine, other in ((left, right), (right, left)):
            table, beside = _table_of(mine, tables), _table_of(other, tables)
            if table is not None and beside not in (None, table) and table.rsplit(".", 1)[-1] in scanned:
                found.setdefault(table, []).append((0, mine[-1]))
    return found


def _compared(where: dict[str, Any]) -> list[tuple[str, list[str]]]:
    """The (operator, column reference) of each comparison of a column with a parameter or a constant under AND."""
    out = []
    boolean = where.get("BoolExpr")
    if isinstance(boolean, dict):
        if boolean.get("boolop") == "AND_EXPR":
            for arg in boolean.get("args") or []:
                out += _compared(arg)
        return out
    expr = where.get("A_Expr")
    if not isinstance(expr, dict):
        return out
    names = [n.get("String", {}).get("sval") for n in expr.get("name") or [] if isinstance(n, dict)]
    op = "IN" if expr.get("kind") == "AEXPR_IN" else (names[-1] if names else None)
    if op not in _EQUAL | _RANGE:
        return out
    left, right = expr.get("lexpr") or {}, expr.get("rexpr") or {}
    for column, value in ((left, right), (right, left)):
        ref = _column(column)
        if ref is not None and _is_value(value):
            out.append((op, ref))
            break
    return out


def _column(node: Any) -> list[str] | None:
    ref = node.get("ColumnRef") if isinstance(node, dict) else None
    if not isinstance(ref, dict):
        return None
    parts = [f.get("String", {}).get("sval") for f in ref.get("fields") or []]
    return parts if parts and all(isinstance(p, str) for p in parts) else None


def _is_value(node: Any) -> bool:
    if isinstance(node, list):  # IN (…)
        return bool(node) and all(_is_value(n) for n in node)
    if not isinstance(node, dict):
        return False
    if "TypeCast" in node:
        return _is_value(node["TypeCast"].get("arg"))
    if "List" in node:
        return _is_value(node["List"].get("items") or [])
    return "ParamRef" in node or "A_Const" in node


def _table_of(ref: list[str], tables: dict[str, str]) -> str | None:
    if len(ref) >= 2:
        return tables.get(ref[-2])
    distinct = set(tables.values())
    return next(iter(distinct)) if len(distinct) == 1 else None


def index_sql(table: str, columns: list[str]) -> str:
    """The CREATE INDEX CONCURRENTLY proposed (identifiers quoted where PostgreSQL needs it)."""
    quoted = ".".join(_ident(p) for p in table.split("."))
    return f"CREATE INDEX CONCURRENTLY ON {quoted} ({', '.join(_ident(c) for c in columns)});"


def _ident(name: str) -> str:
    return name if re.fullmatch(r"[a-z_][a-z0-9_$]*", name) else '"' + name.replace('"', '""') + '"'


def check_index(conn: psycopg.Connection, text: str, create_index: str) -> Tested:
    """The proposal `create_index` (a CREATE INDEX statement) tested with hypopg on the statement (module docstring);
    untested, with the reason, where the database lacks hypopg or the statement cannot be planned."""
    try:
        has = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'hypopg'").fetchone()
        if has is None:
            return Tested(untested="hypopg is not installed in this database")
        now = generic_plan(conn, text)
        conn.execute(
            "SELECT * FROM hypopg_create_index(%s)",
            (create_index.replace(" CONCURRENTLY", "", 1).rstrip(";"),),
        )
        try:
            after = generic_plan(conn, text)
        finally:
            conn.execute("SELECT hypopg_reset()")
    except PlanUnavailable as exc:
        return Tested(untested=str(exc))
    except psycopg.Error as exc:
        return Tested(untested=f"the server refused: {describe_error(exc)}")
    uses = any(str(n.get("Index Name", "")).startswith(HYPOTHETICAL) for n in nodes(after))
    return Tested(_total(now), _total(after), uses)


def _total(plan: dict[str, Any]) -> float | None:
    value = plan.get("Plan", {}).get("Total Cost")
    return float(value) if value is not None else None
