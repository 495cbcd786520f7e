"""Statement keys: one 64-bit identity per normalised statement text, stable across queryid rotation, that keeps
every relation name.

libpg_query's own fingerprint is not used: it folds numeric suffixes of table names (`t01` … `t20`, partitions such
as `events_2026_11`) and drops an aliased table's name, so it merges statements that are different. The key here is
a hash of the parse tree with only what must not matter taken out: constants and parameters (one placeholder), the
types of casts applied directly to a parameter or a constant (psycopg's int2/int4/int8 parameters split one shape
into several queryids), and token positions. Comments and formatting are not in the tree.

Texts are redacted before anything else sees them (`redact`): PostgreSQL does not normalise utility statements, so
`CREATE ROLE app PASSWORD 'apppw'` reaches pg_stat_statements as typed. The key is that of the redacted text, so it
carries nothing of a secret either, and `radar db upgrade` recomputing keys from the stored text agrees with the
collector.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterator
from typing import Any

from pglast import parser

from radar_pipeline.collector.plan_settings import affects_plans

_WHITESPACE = re.compile(r"\s+")
_VALUE = "$value"  # a constant and a parameter are one placeholder: pg_stat_statements shows constants as $n
_POSITIONS = {"location", "stmt_location", "stmt_len", "rexpr_list_start", "rexpr_list_end", "version"}
REDACTED = "'<redacted>'"
# Statements PostgreSQL plans, whose constants pg_stat_statements already shows as $n; every other is a utility
# statement, stored as typed.
PLANNABLE = {"SelectStmt", "InsertStmt", "UpdateStmt", "DeleteStmt", "MergeStmt"}
STRING_TOKENS = {"SCONST", "USCONST", "BCONST", "XCONST"}  # '…', E'…', $$…$$, U&'…', B'…', X'…'
_NUMBERS = {"ICONST", "FCONST"}
_COMMENTS = {"SQL_COMMENT", "C_COMMENT"}
# Statements that can set a parameter: SET x = v; ALTER ROLE, DATABASE, SYSTEM, FUNCTION … SET x TO v; CREATE
# FUNCTION … SET x = v. An UPDATE's SET (a plannable statement) is not one.
_SETTING = {"SET", "ALTER", "CREATE"}
# Where a text neither the parser nor the scanner can read may start hiding a literal: it is blanked from there on.
_FIRST_QUOTE = re.compile(r"['$]")


def fingerprint(text: str) -> int:
    """The statement key of a (normalised) statement text as a signed 64-bit integer (it fits a bigint column).

    Texts that differ only in constants, parameter numbers, parameter types (casts on a parameter or a constant),
    comments or formatting share it; texts naming other relations, columns, aliases or operators do not. A text that
    does not parse (syntax the parser version does not know, or cut to the stored length) falls back to a hash of its
    whitespace-folded text.
    """
    try:
        tree = json.loads(parser.parse_sql_json(text))
    except parser.ParseError:
        folded = _WHITESPACE.sub(" ", text.strip()).lower().encode()
        return int.from_bytes(hashlib.blake2b(folded, digest_size=8).digest(), "big", signed=True)
    shape = json.dumps(_shape(tree), separators=(",", ":"), sort_keys=True).encode()
    return int.from_bytes(hashlib.blake2b(shape, digest_size=8, person=b"radar-key-2").digest(), "big", signed=True)


def _shape(node: Any) -> Any:
    """The parse tree without constants' values, parameter numbers, parameter types and positions."""
    if isinstance(node, dict):
        if "A_Const" in node or "ParamRef" in node:
            return _VALUE
        cast = node.get("TypeCast")
        if cast is not None:
            inner = _shape(cast.get("arg"))
            if inner == _VALUE:
                return inner
            return {"TypeCast": {"arg": inner, "typeName": _shape(cast.get("typeName"))}}
        return {key: _shape(value) for key, value in node.items() if key not in _POSITIONS}
    if isinstance(node, list):
        return [_shape(item) for item in node]
    return node


def redact(text: str) -> str:
    """`text` with the literals of its utility statements replaced by '<redacted>': every quoted string (passwords of
    CREATE/ALTER ROLE and USER, user mapping and server options, DO bodies, …) and every value a SET gives a
    parameter, quoted or not (`SET x = v`, `SET x TO 1, w`, `ALTER ROLE … SET x = v`, `ALTER SYSTEM SET …`). A
    plannable statement's text is returned as is. A text the parser rejects (newer syntax, a cut text) is redacted
    from the scanner's tokens, as if utility; a string the text's end cuts open is blanked to the end, and a text the
    scanner cannot read either keeps nothing from its first quote on."""
    try:
        statements = json.loads(parser.parse_sql_json(text)).get("stmts") or []
        if all(next(iter(s.get("stmt") or {"": None})) in PLANNABLE for s in statements):
            return text
    except (parser.ParseError, ValueError):
        pass  # the scanner still knows where its literals are
    try:
        tokens, stop = _scan(text)
    except (parser.ParseError, ValueError):
        quote = _FIRST_QUOTE.search(text)
        return (text[: quote.start()] if quote else "") + REDACTED
    blanked, kept = _setting_values(tokens, text)
    blanks = [(t.start, t.end + 1) for t in _literals(tokens) if not any(a <= t.start < b for a, b in kept)]
    blanks += blanked
    if stop < len(text):
        blanks.append((stop, len(text)))
    out, end = [], 0
    for start, until in sorted(blanks):  # a quoted value is both a literal and a value: one '<redacted>'
        if start >= end:
            out += [text[end:start], REDACTED]
        end = max(end, until)
    return "".join(out) + text[end:]


def _scan(text: str) -> tuple[list[parser.Token], int]:
    """The scanner's tokens of `text`, and where they stop: the text's end, or a string or dollar quote that never
    closes (a cut text; a quoted identifier or comment cut open is kept, as the parser's path keeps them)."""
    try:
        return list(parser.scan(text)), len(text)
    except parser.ParseError as error:
        stop = error.args[1]
        if stop is None:
            raise
        tokens = list(parser.scan(text[:stop]))
        if text.startswith('"', stop) or text.startswith("/*", stop):
            return tokens, len(text)
        return tokens, stop


def _literals(tokens: list[parser.Token]) -> list[parser.Token]:
    """The quoted strings among `tokens` (not the escape character UESCAPE takes)."""
    return [
        token
        for before, token in zip([None, *tokens], tokens, strict=False)
        if token.name in STRING_TOKENS and (before is None or before.name != "UESCAPE")
    ]


def _setting_values(tokens: list[parser.Token], text: str) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """The character spans of the values of every `SET name = | TO value, …` in a statement that sets a parameter:
    those to blank, and those kept — the values of the core settings that change plans (plan_settings: `work_mem =
    '64kB'` is what a reader of the deploy's statement needs, and no secret)."""
    blanked: list[tuple[int, int]] = []
    kept: list[tuple[int, int]] = []
    statement: list[parser.Token] = []
    for token in [*tokens, None]:
        if token is None or token.name == "ASCII_59":  # a ; ends a statement
            if statement and statement[0].name in _SETTING:
                for name, span in _values(statement, text):
                    (kept if affects_plans(name) else blanked).append(span)
            statement = []
        elif token.name not in _COMMENTS:
            statement.append(token)
    return blanked, kept


def _values(s: list[parser.Token], text: str) -> list[tuple[str, tuple[int, int]]]:
    """The parameter and the span of each value of each `SET [SESSION | LOCAL] name = | TO value, …` in statement
    `s`'s tokens; a value is one span with its sign, a dotted one whole; a dotted parameter (an extension's or a
    custom one) keeps its dots."""
    spans = []
    for i in (i for i, token in enumerate(s) if token.name == "SET"):
        at = i + 1
        while at < len(s) and s[at].name in ("SESSION", "LOCAL"):
            at += 1
        after = _dotted(s, at, _word)
        if after == at or after == len(s) or s[after].name not in ("ASCII_61", "TO"):  # = or TO
            continue
        name = text[s[at].start : s[after - 1].end + 1].replace('"', "").lower()
        while (start := after + 1) < len(s):
            at = start + (s[start].name in ("ASCII_43", "ASCII_45"))  # a sign, + or -
            if (after := _dotted(s, at, _value)) == at:
                break
            spans.append((name, (s[start].start, s[after - 1].end + 1)))
            if after == len(s) or s[after].name != "ASCII_44":  # a , before the next value
                break
    return spans


def _dotted(s: list[parser.Token], at: int, first: Callable[[parser.Token], bool]) -> int:
    """The index after the dotted name (a.b.c) that starts at s[at] with a token `first` accepts; `at` if none."""
    if at >= len(s) or not first(s[at]):
        return at
    at += 1
    while at + 1 < len(s) and s[at].name == "ASCII_46" and _word(s[at + 1]):
        at += 2
    return at


def _word(token: parser.Token) -> bool:
    return token.name == "IDENT" or token.kind != "NO_KEYWORD"


def _value(token: parser.Token) -> bool:
    return _word(token) or token.name in _NUMBERS or token.name in STRING_TOKENS


def relations(text: str) -> frozenset[str]:
    """The tables a statement text names (its range variables: FROM, JOIN, INSERT/UPDATE/DELETE targets, subqueries),
    as written: `schema.table` when qualified, else `table`; the names its WITH clauses define are left out. Empty
    for a text the parser does not accept."""
    try:
        tree = json.loads(parser.parse_sql_json(text))
    except parser.ParseError:
        return frozenset()
    found: set[str] = set()
    ctes: set[str] = set()
    for node in nodes(tree):
        if isinstance(node.get("relname"), str):  # a RangeVar, wrapped or (a DML target's `relation`) bare
            schema = node.get("schemaname")
            found.add(f"{schema}.{node['relname']}" if schema else node["relname"])
        cte = node.get("CommonTableExpr")
        if isinstance(cte, dict) and "ctename" in cte:
            ctes.add(cte["ctename"])
    return frozenset(found - ctes)


def nodes(tree: Any) -> Iterator[dict[str, Any]]:
    """Every object (dict) of a tree in JSON form (pglast's parse_sql_json, EXPLAIN's FORMAT JSON), depth first."""
    if isinstance(tree, dict):
        yield tree
        for value in tree.values():
            yield from nodes(value)
    elif isinstance(tree, list):
        for item in tree:
            yield from nodes(item)
