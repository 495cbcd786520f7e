"""What a statement's text tells the impact (engine/impact.py `classify`): what kind of statement it is, and which
stopped and started statements may be one statement rewritten. The texts are parsed here, so the engine stays pure.

The shape of a text is the multiset of its parse tree's leaves, each with the path of node names above it (constants
and parameters one placeholder, positions left out, as the statement key does in collector/fingerprint.py). Inside a
predicate (WHERE, a join's ON, HAVING) each comparison's leaves are keyed by the columns it compares instead of by
the path down to it, so `customer_id = $1` is one feature set whether it stands alone or beside an added
`AND deleted_at IS NULL`. Two texts' similarity is the mean of two weighted Jaccards (intersection over union, 0 to
1): the predicates' and the rest's; the predicate weighs as much as all the rest, since it says which rows a
statement is about. An ORM that adds a column to a SELECT list keeps its predicate and most of the rest (0.9); a
lookup by id and one by customer_id on the same table share all but their predicate (0.5): two statements.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator, Mapping
from typing import Any

import pandas as pd
from pglast import parser

from radar_pipeline.collector.fingerprint import nodes, relations
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
# The deploy's own statements: DDL, what changes the schema, its privileges and its settings (CREATE, ALTER, DROP of
# any object, GRANT and REVOKE, COMMENT, SECURITY LABEL, CLUSTER and REINDEX, which rebuild storage as a rewriting
# ALTER TABLE does) and DO blocks, how migrations run conditional DDL (an application rarely sends one: it takes no
# parameters). Everything else is the application's load, even when not plannable: CALL, COPY, DECLARE, FETCH,
# EXPLAIN, LOCK, TRUNCATE, REFRESH MATERIALIZED VIEW, and VACUUM and ANALYZE (a cron job's or a bulk load's
# maintenance: load whoever runs it; a deploy's statistics reset is named from the catalog instead).
DDL_PREFIXES = ("Create", "Alter", "Drop", "Define")  # CreateStmt, AlterTableStmt, DropStmt, DefineStmt, ...
DDL_STATEMENTS = {"IndexStmt", "ViewStmt", "CompositeTypeStmt", "RuleStmt", "RenameStmt", "GrantStmt", "GrantRoleStmt"}
DDL_STATEMENTS |= {"CommentStmt", "SecLabelStmt", "ClusterStmt", "ReindexStmt", "ReassignOwnedStmt", "DoStmt"}
DDL_STATEMENTS |= {"ImportForeignSchemaStmt", "ReplicaIdentityStmt"}
# The first keyword of a text the parser rejects (PostgreSQL 17 and later store `SAVEPOINT $1`, `RELEASE $1`), its
# comments skipped, for its class: control, DDL (utility), else the application's (plannable).
CONTROL_WORDS = {"BEGIN", "START", "COMMIT", "END", "ROLLBACK", "ABORT", "SAVEPOINT", "RELEASE", "SET", "RESET", "SHOW"}
CONTROL_WORDS |= {"DISCARD", "DEALLOCATE"}
DDL_WORDS = {"CREATE", "ALTER", "DROP", "GRANT", "REVOKE", "COMMENT", "SECURITY", "CLUSTER", "REINDEX", "REASSIGN"}
DDL_WORDS |= {"DO", "IMPORT"}
_COMMENTS = {"SQL_COMMENT", "C_COMMENT"}
# A predicate's parse-tree keys, and the comparisons inside one whose leaves are keyed by their columns (module doc).
_PREDICATES = {"whereClause", "quals", "havingClause"}
_COMPARISONS = {"A_Expr", "NullTest", "BooleanTest", "SubLink", "FuncCall"}
PREDICATE_MARK = "?"
_IGNORED = {"location", "stmt_location", "stmt_len", "rexpr_list_start", "rexpr_list_end", "version"}
PAIRS_MAX = 10_000  # stopped × started candidates compared at most (a deploy replacing hundreds of statements)


def _tree(text: str) -> list[dict[str, Any]] | None:
    try:
        return json.loads(parser.parse_sql_json(text)).get("stmts") or []
    except (parser.ParseError, ValueError):
        return None


def statement_class(text: str) -> str | None:
    """PLANNABLE (the application's statements: load), UTILITY (DDL: the deploy's own) or CONTROL (engine/impact.py)
    for a statement text (module constants). A text of several statements is control when all are, DDL when any is,
    else the application's. A text the parser rejects is classed by its first keyword after any comments
    (CONTROL_WORDS, DDL_WORDS, else the application's); None for an empty text or one the scanner cannot read."""
    statements = _tree(text)
    if statements is None:
        try:
            first = next((t for t in parser.scan(text) if t.name not in _COMMENTS), None)
        except parser.ParseError:
            return None
        if first is None:
            return None
        word = text[first.start : first.end + 1].upper()
        return CONTROL if word in CONTROL_WORDS else UTILITY if word in DDL_WORDS else PLANNABLE_CLASS
    if not statements:
        return None
    names = {next(iter(s.get("stmt") or {"": None})) for s in statements}
    if names <= CONTROL_STATEMENTS:
        return CONTROL
    if any(n in DDL_STATEMENTS or n.startswith(DDL_PREFIXES) for n in names):
        return UTILITY
    return PLANNABLE_CLASS


_WRITES = ("InsertStmt", "UpdateStmt", "DeleteStmt", "MergeStmt", "lockingClause", "intoClause")
# Functions a read calls that write nothing: any other (nextval, a function of the application's) may write.
READ_FUNCTIONS = frozenset(
    "count sum min max avg coalesce nullif greatest least now current_date lower upper length char_length abs round "
    "floor ceil ceiling trunc date_trunc date_part extract array_agg string_agg json_agg jsonb_agg json_build_object "
    "jsonb_build_object json_build_array jsonb_build_array to_char to_date to_timestamp substring substr trim btrim "
    "ltrim rtrim concat concat_ws replace split_part position strpos left right bool_and bool_or every row_number rank "
    "dense_rank percent_rank lag lead first_value last_value ntile unnest generate_series array_length cardinality "
    "md5 jsonb_array_length jsonb_extract_path_text json_extract_path_text to_jsonb to_json row_to_json age "
    "make_interval date_bin timezone percentile_cont percentile_disc mode stddev variance regexp_replace lpad "
    "rpad".split()
)


def reads_only(text: str) -> bool:
    """Whether a statement text only reads: one SELECT with no FOR UPDATE/SHARE, no INTO, no data-modifying WITH and
    no function that may write (READ_FUNCTIONS alone). Such a statement writes WAL only for what others left behind
    (pruning dead rows, setting hint bits): its WAL is not its own doing. False for a text the parser rejects (a text
    cut short among them)."""
    statements = _tree(text)
    if not statements or len(statements) != 1 or "SelectStmt" not in (statements[0].get("stmt") or {}):
        return False
    body = json.dumps(statements[0])
    if any(f'"{word}"' in body for word in _WRITES):
        return False
    return all(name in READ_FUNCTIONS for name in _function_names(statements[0]))


def _function_names(tree: Any) -> Iterator[str]:
    """The (unqualified, lower-case) names of the functions a parse tree calls."""
    for node in nodes(tree):
        call = node.get("FuncCall")
        if isinstance(call, dict):
            parts = [p.get("String", {}).get("sval", "") for p in call.get("funcname", []) if isinstance(p, dict)]
            yield (parts[-1] if parts else "").lower()


def shape(text: str) -> Counter[str] | None:
    """The multiset of the text's parse-tree leaves with their paths, a predicate's (module doc) marked with a
    leading PREDICATE_MARK; None when the text does not parse."""
    statements = _tree(text)
    if statements is None:
        return None
    out: Counter[str] = Counter()

    def walk(node: Any, path: str, predicate: bool) -> None:
        if isinstance(node, dict):
            if "A_Const" in node or "ParamRef" in node:
                out[f"{path}/$value"] += 1
                return
            if predicate and len(node) == 1 and next(iter(node)) in _COMPARISONS:
                path = f"{PREDICATE_MARK}[{','.join(sorted(_columns(node)))}]"
            for key, value in node.items():
                if key in _IGNORED:
                    continue
                if key in _PREDICATES and not predicate:
                    walk(value, f"{PREDICATE_MARK}{key}", True)
                else:
                    walk(value, f"{path}/{key}", predicate)
        elif isinstance(node, list):
            for item in node:
                walk(item, path, predicate)
        else:
            out[f"{path}={node}"] += 1

    walk(statements, "", False)
    return out


def _columns(node: Any) -> set[str]:
    """The column names a parse-tree node references (ColumnRef fields, dotted)."""
    if isinstance(node, list):
        return set().union(*(_columns(n) for n in node)) if node else set()
    if not isinstance(node, dict):
        return set()
    if "ColumnRef" in node:
        fields = node["ColumnRef"].get("fields") or []
        return {".".join(str(f.get("String", {}).get("sval", "*")) for f in fields)}
    return set().union(*(_columns(v) for v in node.values())) if node else set()


def _jaccard(a: Counter[str], b: Counter[str]) -> float:
    union = sum((a | b).values())
    return sum((a & b).values()) / union if union else 0.0


def similarity(a: Counter[str], b: Counter[str]) -> float:
    """How alike two shapes are, 0 to 1 (module doc): the mean of their predicates' and the rest's |a ∩ b| / |a ∪ b|;
    the rest's alone when neither has a predicate; 0 when both are empty."""

    def split(c: Counter[str]) -> tuple[Counter[str], Counter[str]]:
        where = Counter({k: v for k, v in c.items() if k.startswith(PREDICATE_MARK)})
        return where, c - where

    (where_a, rest_a), (where_b, rest_b) = split(a), split(b)
    if not where_a and not where_b:
        return _jaccard(rest_a, rest_b)
    return (_jaccard(where_a, where_b) + _jaccard(rest_a, rest_b)) / 2.0


def compared_columns(found: Counter[str]) -> frozenset[str]:
    """The predicates' comparisons of a shape, each as its columns without their table or alias (`o.id` and `id`
    are one), so the same lookup is found inside a heavier form of it."""
    out = set()
    for key in found:
        if key.startswith(f"{PREDICATE_MARK}[") and "]" in key:
            names = key[2 : key.index("]")].split(",")
            out.add(",".join(sorted({name.rsplit(".", 1)[-1] for name in names if name})))
    return frozenset(out)


def heavier_form(old: tuple[frozenset[str], Counter[str]], new: tuple[frozenset[str], Counter[str]]) -> bool:
    """Whether the new text is the old one's lookup in a heavier form (an ORM that loads a relation with it, adds a
    subquery or a join): it reads every relation the old read and more or the same, and compares every column set
    the old's predicates compare (the old has at least one). Each is (relations, shape)."""
    (old_relations, old_shape), (new_relations, new_shape) = old, new
    compared = compared_columns(old_shape)
    return (
        bool(old_relations)
        and old_relations <= new_relations
        and bool(compared)
        and (compared <= compared_columns(new_shape))
    )


def candidate_pairs(statements: pd.DataFrame, keys: pd.DataFrame, texts: Mapping[int, str]) -> pd.DataFrame:
    """The impact's stopped × new statements of the same database and user, with `same_relations`, `similarity` and
    `heavier` (heavier_form) of their texts (`texts`: queryid → full text), as `classify` takes them (old_key,
    new_key, ...). `keys` is the window's KEY frame indexed by query_key. At most PAIRS_MAX pairs, the first in the
    frame's order."""
    columns = ["old_key", "new_key", "same_relations", "similarity", "heavier"]
    old = statements.loc[statements["kind"] == "stopped", "query_key"].tolist()
    new = statements.loc[statements["kind"] == "new", "query_key"].tolist()
    rows: list[tuple[Any, Any, bool, float, bool]] = []
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
            heavier = heavier_form((rel_o, shape_o), (rel_n, shape_n))
            rows.append((o, n, bool(rel_o) and rel_o == rel_n, similarity(shape_o, shape_n), heavier))
    return pd.DataFrame(rows, columns=columns)
