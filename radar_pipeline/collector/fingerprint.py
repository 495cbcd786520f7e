"""Statement keys: one 64-bit identity per normalised statement text, stable across queryid rotation, that keeps
every relation name.

libpg_query's own fingerprint is not used: it folds numeric suffixes of table names (`t01` … `t20`, partitions such
as `events_2026_11`) and drops an aliased table's name, so it merges statements that are different. The key here is
a hash of the parse tree with only what must not matter taken out: constants and parameters (one placeholder), the
types of casts applied directly to a parameter or a constant (psycopg's int2/int4/int8 parameters split one shape
into several queryids), and token positions. Comments and formatting are not in the tree.
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
