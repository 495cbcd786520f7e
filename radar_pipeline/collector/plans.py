"""Plans from a watched server: pg_store_plans when it can be trusted, else the generic plan, never ANALYZE.

pg_store_plans records the plans that really ran, but its queryid matches pg_stat_statements' only from extension 1.6
on PostgreSQL 14+, and it is silently disabled when compute_query_id is off; each condition is checked and the reason
recorded when one fails. The generic plan plans a normalised text with its $n parameters as they are: an estimate,
not necessarily the plan a real call used. PostgreSQL 16+ gives it with EXPLAIN (FORMAT JSON, GENERIC_PLAN); before
16, the text is prepared under `plan_cache_mode = force_generic_plan` and EXPLAIN EXECUTE given NULL for each
parameter, which a generic plan does not look at: the same plan.

pg_stat_statements normalises a typed literal (`date '2024-01-01'`, `interval '1 day'`) into `date $1`, `interval $1`,
which PostgreSQL does not parse (pglast's parser, libpg_query, does, as a cast): such texts are rewritten before
EXPLAIN into `CAST($1 AS date)` (`parsable`); the stored text and its key stay as they are.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import psycopg
from pglast import parser
from psycopg import sql

from radar_pipeline.collector.fingerprint import PLANNABLE
from radar_pipeline.collector.pgss import COLLECTOR_MARK
from radar_pipeline.config.queries import sql_string

STORE_PLANS, GENERIC_PLAN = "pg_store_plans", "generic_plan"
_PREPARED = "radar_generic_plan"  # the prepared statement's name before PostgreSQL 16, deallocated at once
_PARAM = re.compile(r"\$(\d+)")
# The share of pg_stat_statements.max plan capture may fill: each EXPLAIN it runs is an entry of its own (radar never
# stores it, but it takes a slot the application's statements then lose to eviction).
ENTRY_SHARE = 0.8
# Functions whose right to run means the planner, folding a function wrongly marked IMMUTABLE, could reset statistics.
RESET_FUNCTIONS = ("pg_stat_statements_reset", "pg_stat_reset", "pg_stat_reset_shared", "pg_store_plans_reset")


@dataclass(frozen=True)
class PlanSource:
    """Where plans come from on one server (None: nowhere), and why the better source is not used."""

    source: str | None
    reason: str | None
    database_oid: int
    store_plans_schema: str | None = None


class PlanUnavailable(Exception):
    """This statement's plan cannot be had; the message is the reason remembered for it."""


def plan_source(conn: psycopg.Connection) -> PlanSource:
    """Decide the plan source for the connected server (see the module docstring); none when the role is a superuser
    or may reset statistics, since planning can run functions (one wrongly marked IMMUTABLE is evaluated by the
    planner, and a read-only transaction does not stop pg_stat_statements_reset())."""
    version, database_oid, query_id = _one(
        conn,
        f"SELECT {COLLECTOR_MARK} current_setting('server_version_num')::int, oid, current_setting('compute_query_id') "
        "FROM pg_database WHERE datname = current_database()",
    )
    refused = _refused_role(conn)
    if refused is not None:
        return PlanSource(None, refused, database_oid)
    row = conn.execute(
        f"SELECT {COLLECTOR_MARK} n.nspname, e.extversion FROM pg_extension e "
        "JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'pg_store_plans'"
    ).fetchone()
    if row is None:
        reason = "pg_store_plans is not installed"
    else:
        schema, ext_version = row
        if tuple(int(p) for p in ext_version.split(".")[:2]) < (1, 6):
            reason = f"pg_store_plans {ext_version} is older than 1.6, whose queryid is not pg_stat_statements'"
        elif version < 140000:
            reason = "pg_store_plans' queryid matches pg_stat_statements' only on PostgreSQL 14 and later"
        elif query_id == "off":
            reason = "compute_query_id is off, which silently disables pg_store_plans"
        else:
            return PlanSource(STORE_PLANS, None, database_oid, schema)
    return PlanSource(GENERIC_PLAN, reason, database_oid)


@dataclass(frozen=True)
class EntryRoom:
    """How many more statements plan capture may EXPLAIN in this session (None: no limit, its EXPLAINs add no
    entries), and why, in words."""

    room: int | None
    facts: str


def entry_room(conn: psycopg.Connection) -> EntryRoom:
    """The room pg_stat_statements has for this session's EXPLAINs: ENTRY_SHARE of pg_stat_statements.max less the
    entries it holds now (every role's, this one's own EXPLAINs among them); no limit where this session's utility
    statements are not tracked (pg_stat_statements.track_utility off, or track none). A room that cannot be read is
    0, and the words say why; a silent server raises as any call does."""
    try:
        row = _one(conn, sql_string("collector.entry_room"))
        most, utility, track, schema = row
        if utility == "off" or track == "none":
            why = f"track_utility {utility}" if utility == "off" else f"track {track}"
            return EntryRoom(None, f"pg_stat_statements does not track this role's EXPLAINs ({why})")
        if most is None or schema is None:
            return EntryRoom(0, "pg_stat_statements' size could not be read (it is not installed in this database)")
        held, own = _one(
            conn,
            sql.SQL(
                "SELECT " + COLLECTOR_MARK + " count(*), count(*) FILTER (WHERE userid = "
                "(SELECT oid FROM pg_roles WHERE rolname = current_user)) FROM {}(false)"
            ).format(sql.Identifier(schema, "pg_stat_statements")),
        )
    except psycopg.Error as exc:
        return EntryRoom(0, f"pg_stat_statements' size could not be read: {describe_error(exc)}")
    limit = int(int(most) * ENTRY_SHARE)
    facts = (
        f"pg_stat_statements holds {held} of its {int(most)} entries ({own} of them this role's, its EXPLAINs among "
        f"them); plan capture leaves {1 - ENTRY_SHARE:.0%} free, each EXPLAIN being an entry of its own"
    )
    return EntryRoom(max(0, limit - held), facts)


def capture(
    conn: psycopg.Connection, source: PlanSource, key: tuple[int, int, int, bool], text: str
) -> tuple[str, dict[str, Any]]:
    """(source, plan) for one statement; PlanUnavailable with the reason when it has none. A pg_store_plans read
    that fails, or yields no usable plan, falls back to the generic plan (its reason said with the generic plan's)."""
    missing = None
    if source.source == STORE_PLANS:
        try:
            plan = _from_store_plans(conn, source, key)
            missing = "pg_store_plans holds no plan for it yet"
        except PlanUnavailable as exc:
            plan, missing = None, str(exc)
        if plan is not None:
            return STORE_PLANS, plan
    if source.source is None:
        raise PlanUnavailable(source.reason or "no plan source")
    try:
        if key[0] != source.database_oid:
            raise PlanUnavailable("it runs in another database than the one the collector connects to")
        return GENERIC_PLAN, generic_plan(conn, text)
    except PlanUnavailable as exc:
        raise PlanUnavailable(f"{missing}; {exc}" if missing else str(exc)) from None


def generic_plan(conn: psycopg.Connection, text: str) -> dict[str, Any]:
    """The generic plan of a normalised statement text (module docstring), EXPLAIN (FORMAT JSON) without ANALYZE, in
    the session's read-only transaction; PlanUnavailable with the reason when it has none."""
    kind = statement_kind(text)
    if kind not in PLANNABLE:
        raise PlanUnavailable(f"not plannable: {kind}")
    explained = sql.SQL(parsable(text))  # type: ignore[arg-type]
    try:  # the session is read-only with a statement timeout; EXPLAIN without ANALYZE runs nothing
        if conn.info.server_version >= 160000:
            row = conn.execute(sql.SQL("EXPLAIN (FORMAT JSON, GENERIC_PLAN) ") + explained).fetchone()
        else:
            row = _prepared_generic(conn, explained, max((int(n) for n in _PARAM.findall(text)), default=0))
    except psycopg.Error as exc:
        raise PlanUnavailable(f"EXPLAIN failed: {describe_error(exc)}") from None
    return explained_plan(row)


def _prepared_generic(conn: psycopg.Connection, text: sql.SQL, params: int) -> tuple | None:
    """EXPLAIN EXECUTE of `text` prepared under force_generic_plan (before PostgreSQL 16), the session's setting and
    prepared statements left as they were."""
    mark, name = sql.SQL(COLLECTOR_MARK + " "), sql.Identifier(_PREPARED)
    conn.execute(mark + sql.SQL("SET plan_cache_mode = force_generic_plan"))
    try:
        conn.execute(mark + sql.SQL("PREPARE {} AS ").format(name) + text)
        try:
            args = sql.SQL("({})").format(sql.SQL(", ").join([sql.NULL] * params)) if params else sql.SQL("")
            return conn.execute(mark + sql.SQL("EXPLAIN (FORMAT JSON) EXECUTE {}").format(name) + args).fetchone()
        finally:
            conn.execute(mark + sql.SQL("DEALLOCATE {}").format(name))
    finally:
        conn.execute(mark + sql.SQL("RESET plan_cache_mode"))


def explained_plan(row: tuple | None) -> dict[str, Any]:
    """The plan an EXPLAIN (FORMAT JSON) returned (its one row), or PlanUnavailable."""
    if row is None:
        raise PlanUnavailable("EXPLAIN returned no plan")
    plan = json.loads(row[0]) if isinstance(row[0], str) else row[0]
    return plan[0]


# After `interval $n`, the interval qualifier that belongs to its type: `interval $1 day`, `interval $1 year to month`,
# `interval $1 second(3)`.
_INTERVAL_FIELDS = {"YEAR_P", "MONTH_P", "DAY_P", "HOUR_P", "MINUTE_P", "SECOND_P", "TO"}
_TYPMOD = ("ASCII_40", "ICONST", "ASCII_41")  # ( n )


def parsable(text: str) -> str:
    """The statement text with each typed literal pg_stat_statements normalised (`typename $n`, with any type
    modifier and interval qualifier: `numeric(10,2) $2`, `time with time zone $1`, `interval $3 day`) written as
    `CAST($n AS typename ...)`, which PostgreSQL parses; any other text as it is. The casts are found in pglast's
    parse tree (a cast whose type is written before its parameter) and cut out along the scanner's tokens."""
    try:
        tree = json.loads(parser.parse_sql_json(text))
        tokens = parser.scan(text)
    except parser.ParseError:
        return text
    data = text.encode()

    def chars(byte_offset: int) -> int:  # the parse tree counts bytes, the scanner characters
        return len(data[:byte_offset].decode(errors="ignore"))

    prefixed: list[tuple[int, int, bool]] = []  # (type start, parameter start, an interval), in characters

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            cast = node.get("TypeCast")
            if isinstance(cast, dict):
                param, type_name = cast.get("arg", {}).get("ParamRef"), cast.get("typeName") or {}
                if isinstance(param, dict) and type_name.get("location", -1) >= 0:
                    if type_name["location"] < param.get("location", -1):
                        names = [n.get("String", {}).get("sval") for n in type_name.get("names", [])]
                        prefixed.append(
                            (chars(type_name["location"]), chars(param["location"]), names[-1:] == ["interval"])
                        )
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(tree)
    if not prefixed:
        return text
    at = {t.start: i for i, t in enumerate(tokens)}
    pieces, done = [], 0
    for type_start, param_start, interval in sorted(prefixed):
        p = at.get(param_start)
        if p is None or tokens[p].name != "PARAM" or type_start < done:
            continue
        end = p  # the last token of the cast: the parameter, or the interval qualifier after it
        if interval:
            while end + 1 < len(tokens) and tokens[end + 1].name in _INTERVAL_FIELDS:
                end += 1
            if tokens[end].name == "SECOND_P" and tuple(t.name for t in tokens[end + 1 : end + 4]) == _TYPMOD:
                end += 3
        param = text[tokens[p].start : tokens[p].end + 1]
        written = text[type_start : tokens[p - 1].end + 1]
        qualifier = text[tokens[p + 1].start : tokens[end].end + 1] if end > p else ""
        pieces += [text[done:type_start], f"CAST({param} AS {' '.join(filter(None, (written, qualifier)))})"]
        done = tokens[end].end + 1
    return "".join(pieces) + text[done:]


def statement_kind(text: str) -> str:
    """The parse node of a single statement (SelectStmt, InsertStmt, ...), or why it is not one."""
    try:
        statements = parser.parse_sql(text)
    except parser.ParseError:
        return "a text the parser does not accept"
    if len(statements) != 1:
        return f"{len(statements)} statements"
    return type(statements[0].stmt).__name__


def _refused_role(conn: psycopg.Connection) -> str | None:
    """Why plan capture must not run as the connected role, or None."""
    role, superuser, resetting = _one(
        conn,
        sql_string("collector.refused_role"),
        (list(RESET_FUNCTIONS),),
    )
    if superuser:
        return (
            f"plan capture refuses to run as {role!r}, a superuser: planning may run functions wrongly marked IMMUTABLE"
            " (connect as a role of its own, see docs/databases.md)"
        )
    if resetting:
        return (
            f"plan capture refuses to run as {role!r}, which may execute {resetting}: planning may run functions "
            "wrongly marked IMMUTABLE (connect as a role of its own, see docs/databases.md)"
        )
    return None


def _one(conn: psycopg.Connection, query: str | sql.Composable, params: tuple = ()) -> tuple:
    row = conn.execute(query, params or None).fetchone()  # type: ignore[arg-type]
    assert row is not None, "a query that always returns a row returned none"
    return row


def describe_error(exc: BaseException) -> str:
    """An error's first line (no target password can be in a planner error)."""
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def _from_store_plans(conn: psycopg.Connection, source: PlanSource, key: tuple[int, int, int, bool]) -> dict | None:
    """The latest plan pg_store_plans holds for the statement, read per `pg_store_plans.plan_format`: `raw` (the
    default: short JSON, inflated by pg_store_plans_jsonplan) or `json` (the plan column is JSON already); other
    formats (text, xml, yaml) carry no shape radar can read. PlanUnavailable on any failure."""
    dbid, userid, queryid, _ = key
    schema = source.store_plans_schema or "public"
    try:
        fmt = _one(conn, f"SELECT {COLLECTOR_MARK} current_setting('pg_store_plans.plan_format', true)")[0] or "raw"
        if fmt not in ("raw", "json"):
            raise PlanUnavailable(f"pg_store_plans.plan_format is {fmt!r}: only raw and json plans can be read")
        column = sql.SQL("{}.pg_store_plans_jsonplan(plan)").format(sql.Identifier(schema))
        row = conn.execute(
            sql.SQL(
                "SELECT " + COLLECTOR_MARK + " {column} FROM {view} "
                "WHERE dbid = %s AND userid = %s AND queryid = %s ORDER BY last_call DESC LIMIT 1"
            ).format(
                column=column if fmt == "raw" else sql.SQL("plan"),
                view=sql.Identifier(schema, "pg_store_plans"),
            ),
            (dbid, userid, queryid),
        ).fetchone()
        if row is None:
            return None
        plan = json.loads(row[0]) if isinstance(row[0], str) else row[0]
        plan = plan[0] if isinstance(plan, list) else plan
    except psycopg.Error as exc:
        raise PlanUnavailable(f"reading pg_store_plans failed: {describe_error(exc)}") from None
    except (ValueError, TypeError, IndexError, KeyError) as exc:
        raise PlanUnavailable(f"pg_store_plans gave a plan radar cannot read ({type(exc).__name__})") from None
    if not isinstance(plan, dict) or "Plan" not in plan:
        raise PlanUnavailable("pg_store_plans gave a plan radar cannot read (no Plan node)")
    return plan
