"""Which other tables share a statement's queryid: PostgreSQL 18 merges statements that differ only in the tables
behind the same alias.

From PostgreSQL 18, query jumbling hashes a table reference by its alias (the table's name when it has none), not by
the table: `SELECT x.v FROM echo x WHERE x.id = $1` and `SELECT x.v FROM delta x WHERE x.id = $1` get one queryid,
and pg_stat_statements keeps the text that came first. So do `SELECT v FROM s1.t` and `SELECT v FROM s2.t`. Columns
are hashed by their position, so the tables need only have the statement's columns at the same positions.

radar cannot split what PostgreSQL merged, and it cannot see the other statements' texts; it can ask PostgreSQL
which other tables would take this statement's queryid. For each table the text names, the tables that have the
columns the statement uses at the same positions and types (an aliased reference), or the same name in another
schema (an unaliased one), are tried: the text with that table in its place is given to EXPLAIN (VERBOSE,
GENERIC_PLAN), which plans nothing it runs and reports the Query Identifier; a table whose text gets the same
identifier as the statement's own shares its queryid. Partitions are left out (a statement reaches them through
their parent), and so are the catalogs and extensions' own tables and views.
"""

from __future__ import annotations

import json
import time

import psycopg
from pglast import ast, parse_sql, parser
from pglast.stream import RawStream
from pglast.visitors import Visitor
from psycopg import sql

from radar_pipeline.collector.plans import PLANNABLE
from radar_pipeline.config.queries import sql_string

FIRST_VERSION = 180000  # PostgreSQL 18: jumbling by the alias began there
CANDIDATES = 8  # tables tried per table reference (each costs one EXPLAIN)
SHOWN = 5  # tables sharing the queryid named at most


def shared_with(conn: psycopg.Connection, text: str, deadline: float | None = None) -> list[str] | None:
    """The tables (schema-qualified) other than the statement's own that PostgreSQL gives the statement's queryid to,
    at most SHOWN; [] when there are none (or the server is older than PostgreSQL 18, which jumbles by the table);
    None when it cannot be told (the text does not parse as one plannable statement, EXPLAIN fails on it, the
    server computes no query identifiers, or time.monotonic() reached `deadline` before every candidate was tried
    and none was found sharing it: those found by then are returned)."""
    if int(conn.info.server_version) < FIRST_VERSION:
        return []
    try:
        statements = parse_sql(text)
    except parser.ParseError:
        return None
    if len(statements) != 1 or type(statements[0].stmt).__name__ not in PLANNABLE or _past(deadline):
        return None
    own = _query_id(conn, RawStream()(statements[0]))  # printed as the others will be
    if own is None:
        return None
    found: list[str] = []
    references = _References()
    references(statements[0])
    for reference in references.tables:
        if reference.relname in references.ctes and reference.schemaname is None:
            continue  # a CTE's name, not a table
        if _past(deadline):
            return found or None
        named, original = reference.relname, reference.schemaname
        for schema, table in _candidates(conn, reference, references):
            if _past(deadline):
                return found or None
            reference.schemaname, reference.relname = schema, table
            rewritten = RawStream()(statements[0])
            reference.schemaname, reference.relname = original, named
            if _query_id(conn, rewritten) == own:
                found.append(f"{schema}.{table}")
                if len(found) == SHOWN:
                    return found
    return found


def _past(deadline: float | None) -> bool:
    return deadline is not None and time.monotonic() >= deadline


class _References(Visitor):  # type: ignore[misc]
    """The table references of a statement, the names of its CTEs and the column names it uses (* included)."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[ast.RangeVar] = []
        self.ctes: set[str] = set()
        self.columns: set[str] = set()
        self.star = False

    def visit_RangeVar(self, ancestors: object, node: ast.RangeVar) -> None:
        self.tables.append(node)

    def visit_CommonTableExpr(self, ancestors: object, node: ast.CommonTableExpr) -> None:
        if node.ctename:
            self.ctes.add(node.ctename)

    def visit_ColumnRef(self, ancestors: object, node: ast.ColumnRef) -> None:
        last = (node.fields or (None,))[-1]
        if isinstance(last, ast.A_Star):
            self.star = True
        elif isinstance(last, ast.String) and last.sval:
            self.columns.add(last.sval)

    def visit_ResTarget(self, ancestors: object, node: ast.ResTarget) -> None:
        if node.name:  # an INSERT's or UPDATE's target column
            self.columns.add(node.name)


def _candidates(conn: psycopg.Connection, reference: ast.RangeVar, references: _References) -> list[tuple[str, str]]:
    """(schema, table) of the tables that could stand in for the reference: with the columns the statement uses at
    the same positions and of the same types (every column when it uses *), named alike when it has no alias."""
    rows = conn.execute(
        sql_string("collector.stand_in_tables"),  # type: ignore[arg-type]
        {
            "schema": reference.schemaname,
            "table": reference.relname,
            "aliased": reference.alias is not None,
            "star": references.star,
            "columns": sorted(references.columns),
            "limit": CANDIDATES,
        },
    ).fetchall()
    return [(str(schema), str(table)) for schema, table in rows]


def _query_id(conn: psycopg.Connection, text: str) -> int | None:
    """The Query Identifier PostgreSQL computes for the text (EXPLAIN VERBOSE, planned generically, run never); None
    when EXPLAIN fails or reports none."""
    try:
        row = conn.execute(
            sql.SQL("EXPLAIN (VERBOSE, GENERIC_PLAN, FORMAT JSON) ") + sql.SQL(text)  # type: ignore[arg-type]
        ).fetchone()
    except psycopg.Error:
        return None
    if row is None:
        return None
    plan = json.loads(row[0]) if isinstance(row[0], str) else row[0]
    value = plan[0].get("Query Identifier") if isinstance(plan, list) and plan and isinstance(plan[0], dict) else None
    return int(value) if value is not None else None
