"""What a statement's text tells the impact (engine/impact.py `classify`): what kind of statement it is, and which
stopped and started statements may be one statement rewritten. The texts are parsed here, so the engine stays pure.

The shape of a text is the multiset of its parse tree's leaves, each with the path of node names above it (constants
and parameters one placeholder, positions left out, as the statement key does in collector/fingerprint.py); two
texts' similarity is the size of their shapes' intersection over their union (weighted Jaccard, 0 to 1). An ORM that
adds a column to a SELECT list adds a few leaves to a tree of dozens: the rewrite keeps most of it.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from typing import Any

import pandas as pd
from pglast import parser

from radar_pipeline.collector.fingerprint import PLANNABLE, relations
from radar_pipeline.engine.impact import CONTROL, UTILITY
from radar_pipeline.engine.impact import PLANNABLE as PLANNABLE_CLASS

# Transaction and session control: BEGIN, COMMIT, ROLLBACK, SAVEPOINT, RELEASE, PREPARE TRANSACTION (TransactionStmt),
# SET and RESET (VariableSetStmt), SHOW, DISCARD, DEALLOCATE, SET CONSTRAINTS. Their time is that of the work around
# them (a COMMIT waits for its WAL flush), never load of their own.
CONTROL_STATEMENTS = {
    "TransactionStmt",
    "VariableSetStmt",
    "VariableShowStmt",
    "DiscardStmt",
    "DeallocateStmt",
    "ConstraintsSetStmt",
}
# The first keyword of a text the parser rejects (PostgreSQL 17 and later store `SAVEPOINT $1`, `RELEASE $1`), for
# its class: control, plannable, else utility.
CONTROL_WORDS = {"BEGIN", "START", "COMMIT", "END", "ROLLBACK", "ABORT", "SAVEPOINT", "RELEASE", "SET", "RESET", "SHOW"}
CONTROL_WORDS |= {"DISCARD", "DEALLOCATE"}
PLANNABLE_WORDS = {"SELECT", "INSERT", "UPDATE", "DELETE", "MERGE", "WITH", "VALUES", "TABLE"}
_IGNORED = {"location", "stmt_location", "stmt_len", "rexpr_list_start", "rexpr_list_end", "version"}
PAIRS_MAX = 10_000  # stopped × started candidates compared at most (a deploy replacing hundreds of statements)


def _tree(text: str) -> list[dict[str, Any]] | None:
    try:
        return json.loads(parser.parse_sql_json(text)).get("stmts") or []
    except (parser.ParseError, ValueError):
        return None


def statement_class(text: str) -> str | None:
    """PLANNABLE, UTILITY or CONTROL (engine/impact.py) for a statement text. A text of several statements is control
    when all are, plannable when all are, else utility. A text the parser rejects is classed by its first keyword
    (CONTROL_WORDS, PLANNABLE_WORDS, else utility); None for an empty text or one the scanner cannot read either."""
    statements = _tree(text)
    if statements is None:
        try:
            first = next(iter(parser.scan(text)), None)
        except parser.ParseError:
            return None
        if first is None:
            return None
        word = text[first.start : first.end + 1].upper()
        return CONTROL if word in CONTROL_WORDS else PLANNABLE_CLASS if word in PLANNABLE_WORDS else UTILITY
    if not statements:
        return None
    names = {next(iter(s.get("stmt") or {"": None})) for s in statements}
    if names <= CONTROL_STATEMENTS:
        return CONTROL
    if names <= PLANNABLE:
        return PLANNABLE_CLASS
    return UTILITY


def shape(text: str) -> Counter[str] | None:
    """The multiset of the text's parse-tree leaves with their paths (module doc); None when it does not parse."""
    statements = _tree(text)
    if statements is None:
        return None
    out: Counter[str] = Counter()

    def walk(node: Any, path: str) -> None:
        if isinstance(node, dict):
            if "A_Const" in node or "ParamRef" in node:
                out[f"{path}/$value"] += 1
                return
            for key, value in node.items():
                if key not in _IGNORED:
                    walk(value, f"{path}/{key}")
        elif isinstance(node, list):
            for item in node:
                walk(item, path)
        else:
            out[f"{path}={node}"] += 1

    walk(statements, "")
    return out


def similarity(a: Counter[str], b: Counter[str]) -> float:
    """|a ∩ b| / |a ∪ b| of two shapes (multisets), 0 to 1; 0 when both are empty."""
    union = sum((a | b).values())
    return sum((a & b).values()) / union if union else 0.0


def candidate_pairs(statements: pd.DataFrame, keys: pd.DataFrame, texts: Mapping[int, str]) -> pd.DataFrame:
    """The impact's stopped × new statements of the same database and user, with `same_relations` and `similarity`
    of their texts (`texts`: queryid → full text), as `classify` takes them (old_key, new_key, ...). `keys` is the
    window's KEY frame indexed by query_key. At most PAIRS_MAX pairs, the first in the frame's order."""
    columns = ["old_key", "new_key", "same_relations", "similarity"]
    old = statements.loc[statements["kind"] == "stopped", "query_key"].tolist()
    new = statements.loc[statements["kind"] == "new", "query_key"].tolist()
    rows: list[tuple[Any, Any, bool, float]] = []
    facts: dict[Any, tuple[frozenset[str], Counter[str] | None, tuple[int, int]]] = {}

    def fact(k: Any) -> tuple[frozenset[str], Counter[str] | None, tuple[int, int]]:
        if k not in facts:
            key = keys.loc[k]
            text = texts.get(int(key["queryid"]), "")
            facts[k] = (relations(text), shape(text), (int(key["dbid"]), int(key["userid"])))
        return facts[k]

    for o in old:
        for n in new:
            if len(rows) >= PAIRS_MAX:
                break
            (rel_o, shape_o, who_o), (rel_n, shape_n, who_n) = fact(o), fact(n)
            if who_o != who_n or shape_o is None or shape_n is None:
                continue
            rows.append((o, n, bool(rel_o) and rel_o == rel_n, similarity(shape_o, shape_n)))
    return pd.DataFrame(rows, columns=columns)
