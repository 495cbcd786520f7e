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
from typing import Any

from pglast import parser

_WHITESPACE = re.compile(r"\s+")
_VALUE = "$value"  # a constant and a parameter are one placeholder: pg_stat_statements shows constants as $n
_POSITIONS = {"location", "stmt_location", "stmt_len", "rexpr_list_start", "rexpr_list_end", "version"}
REDACTED = "'<redacted>'"
# Statements PostgreSQL plans, whose constants pg_stat_statements already shows as $n; every other is a utility
# statement, stored as typed.
_PLANNABLE = {"SelectStmt", "InsertStmt", "UpdateStmt", "DeleteStmt", "MergeStmt"}
_STRING_TOKENS = {"SCONST", "USCONST", "BCONST", "XCONST"}  # '…', E'…', $$…$$, U&'…', B'…', X'…'
# For a text the parser cannot read: every quoted literal, dollar-quoted or not, up to its end or the text's end (a
# quote that does not close blanks the rest). Coarse on purpose: a quote in a comment or an identifier blanks more.
_QUOTED = re.compile(r"\$(?P<tag>[^\W\d$][^\W$]*|)\$.*?(?:\$(?P=tag)\$|\Z)|'(?:[^']|'')*(?:'|\Z)", re.DOTALL)


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
    """`text` with every string literal of its utility statements replaced by '<redacted>' (passwords of CREATE/ALTER
    ROLE and USER, user mapping and server options, DO bodies, …); a plannable statement's text is returned as is.
    A text that does not parse keeps none of its quoted literals, whatever it is."""
    try:
        statements = json.loads(parser.parse_sql_json(text)).get("stmts") or []
        if all(next(iter(s.get("stmt") or {"": None})) in _PLANNABLE for s in statements):
            return text
        tokens = parser.scan(text)
    except (parser.ParseError, ValueError):
        return _QUOTED.sub(REDACTED, text)
    out, end = [], 0
    for before, token in zip([None, *tokens], tokens, strict=False):
        if token.name in _STRING_TOKENS and (before is None or before.name != "UESCAPE"):  # UESCAPE takes one char
            out += [text[end : token.start], REDACTED]
            end = token.end + 1
    return "".join(out) + text[end:]
