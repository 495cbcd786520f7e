"""Which named changes (warehouse/catalog.py) touch which detections: a catalog change on one of the statement's
relations (named in its stored text, or in its plan diff: its nodes in words, or the plans' JSON nodes where the diff
holds them), or a setting that changes plans or execution, set
for the statement's database and/or role, or server-wide."""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

import pandas as pd
import sqlalchemy as sa

from radar_pipeline.collector.fingerprint import nodes, relations
from radar_pipeline.collector.plan_settings import affects_plans
from radar_pipeline.engine.vocabulary import ChangeKind
from radar_pipeline.named_changes import NamedChange
from radar_pipeline.pgss_model import KEY
from radar_pipeline.warehouse import analysis, catalog

_NODE_RELATION = re.compile(r" on (\S+)$")
_NODE_INDEX = re.compile(r" using (\S+) on ")


def name_changes(
    conn: sa.Connection,
    target: str,
    detections: pd.DataFrame,
    lo: datetime,
    hi: datetime,
    tolerance: timedelta = timedelta(minutes=2),
    deployed_at: datetime | None = None,
) -> list[list[NamedChange]]:
    """Per detection (a row of KEY columns, `change_at` and optionally `plan_diff`), the changes of the target named
    in [lo, hi] (their bracket overlapping it) that touch it, oldest first: a catalog change on a relation its text or
    plan diff names (a qualified name that table; an unqualified one that table in public or in a schema of a
    search_path stored for the statement's database or role; an index its plan diff names matching that index), a
    setting that affects plans set server-wide or for its database and/or role. A change whose bracket lies entirely
    after the detection's change_at + `tolerance`, or ended before change_at - `tolerance`, did not cause it; nor did
    one first seen after a later deploy than `deployed_at` (catalog.changes_between). A row with no change_at (a
    statement probably slower) is placed at `deployed_at`; with neither, every change of the span may be named."""
    if detections.empty:
        return []
    changes = catalog.changes_between(conn, target, lo, hi, deployed_at)
    if not changes:
        return [[] for _ in range(len(detections))]
    roles = catalog.setting_roles(conn, target)
    paths = catalog.search_paths(conn, target)
    tables = catalog.table_schemas(conn, target)
    texts = analysis.query_texts(conn, target, detections[KEY], length=analysis.WHOLE_TEXT)
    found = []
    for row in detections.to_dict("records"):
        named, indexes = _named_relations(texts.get(int(row["queryid"]), ""), row.get("plan_diff"))
        change_at = row.get("change_at")
        if change_at is None or pd.isna(change_at):
            change_at = deployed_at  # no change located (a statement probably slower): its evidence splits there
        at = None if change_at is None else pd.Timestamp(change_at)
        schemas = _search_schemas(paths, row, roles, tables, named)
        found.append(
            [
                c
                for c in changes
                if (at is None or c.last_seen_before is None or c.last_seen_before <= at + tolerance)
                and (at is None or c.first_seen_after >= at - tolerance)
                and _touches(c, row, named, indexes, roles, schemas)
            ]
        )
    return found


def _named_relations(text: str, plan_diff: Any) -> tuple[set[str], set[str]]:
    """The relations a statement names (its text, its plan diff's nodes) and the indexes its plan diff names."""
    named = set(relations(text)) if text else set()
    indexes: set[str] = set()
    _plan_nodes(plan_diff, named, indexes)
    if isinstance(plan_diff, dict):
        nodes: Iterable[Any] = [
            *plan_diff.get("removed", []),
            *plan_diff.get("added", []),
            plan_diff.get("root_before"),
            plan_diff.get("root_after"),
        ]
        for node in nodes:
            if isinstance(node, str):
                named.update(m.group(1) for m in [_NODE_RELATION.search(node)] if m)
                indexes.update(m.group(1) for m in [_NODE_INDEX.search(node)] if m)
    return named, indexes


def _plan_nodes(value: Any, named: set[str], indexes: set[str]) -> None:
    """The relations and indexes of the plans a diff may hold (EXPLAIN's JSON nodes), added to `named`/`indexes`."""
    for node in nodes(value):
        if isinstance(node.get("Relation Name"), str):
            schema = node.get("Schema")
            named.add(f"{schema}.{node['Relation Name']}" if isinstance(schema, str) else node["Relation Name"])
        if isinstance(node.get("Index Name"), str):
            indexes.add(node["Index Name"])


def _search_schemas(
    paths: list[tuple[int | None, str | None, str]],
    row: dict[str, Any],
    roles: dict[str, int],
    tables: dict[tuple[int | None, str], set[str]],
    named: set[str],
) -> set[str]:
    """The schemas an unqualified name of the statement may be in: public; those of each search_path stored for its
    database and/or role or server-wide ("$user" when the role's name is known); and the one schema a name it uses
    was ever seen in, in its database (a path set by the client, or the default "$user" of a role with no setting
    stored, is not known: an unambiguous name needs none)."""
    users = {name for name, oid in roles.items() if oid == int(row["userid"])}
    schemas = {"public"}
    for name in named:
        if "." not in name:
            seen = tables.get((int(row["dbid"]), name), set())
            schemas |= seen if len(seen) == 1 else set()
    for dbid, role, value in paths:
        if (dbid is None or dbid == int(row["dbid"])) and (role is None or role in users):
            for part in value.split(","):
                schema = part.strip().strip('"')
                schemas |= users if schema == "$user" else {schema}
    return schemas


def _touches(
    change: NamedChange,
    row: dict[str, Any],
    named: set[str],
    indexes: set[str],
    roles: dict[str, int],
    schemas: set[str],
) -> bool:
    if change.kind == ChangeKind.SETTING_CHANGED:
        return (
            affects_plans(change.name)
            and (change.dbid is None or change.dbid == int(row["dbid"]))
            and (change.role is None or roles.get(change.role) == int(row["userid"]))
        )
    if change.dbid is not None and change.dbid != int(row["dbid"]):
        return False
    relation = (change.relation or "").replace('"', "")
    schema, _, table = relation.rpartition(".")
    if relation in named or (table in named and schema in schemas):
        return True
    return change.kind in (ChangeKind.INDEX_DROPPED, ChangeKind.INDEX_INVALID) and change.name in indexes
