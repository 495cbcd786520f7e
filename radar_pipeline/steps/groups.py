"""Which statements of a window are decided together (issue 29, groups), their joint verdicts, and the mark each
member's verdict carries when its group regressed (that it belongs to such a group; its own verdict stands).

A group is formed from what the window's statements are, never from their latency: statements of one shape (the
same parse tree with the relations' names and qualifiers taken out: `shape_key`), of one database role (userid:
only where the window holds several roles — a single role's group would be every statement of the target, whose
typical statement a deploy slowing a few among many never moves, and it would take the groups' share of the budget
from every analysis for that), or
touched by one change named in the window (issue 28's catalog and settings facts, matched as steps/causes.py
matches them to a detection: an index dropped on a relation they read, a table rewritten, a setting changed for their
role or database). Groups of at least engine.groups.MIN_MEMBERS statements in the window are formed; a statement may
belong to several; groups with the same statements are one (named by the change, else the shape, else the role).
Deciding them is the engine's (engine/groups.py), with the groups' share of the budget
(engine.budget.split_group_budget), equal for each group formed. A group the first verdict left undecided is decided
again at each later look of its deploy (`later_look`, from steps.looks.run_look) on its members' evidence over that
look's spans, with the groups' share of that look's budget (docs/groups.md, "At later looks").
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from functools import lru_cache
from typing import Any

import numpy as np
import pandas as pd
import sqlalchemy as sa

from radar_pipeline.collector.plan_settings import affects_plans
from radar_pipeline.engine import EngineSettings, Verdict
from radar_pipeline.engine.budget import split_group_budget
from radar_pipeline.engine.frames import GROUPS_STORED
from radar_pipeline.engine.groups import (
    MIN_MEMBERS,
    NOISE_SPANS,
    before_calls,
    before_series,
    decide_groups,
    noise_sample,
)
from radar_pipeline.engine.vocabulary import ChangeKind
from radar_pipeline.named_changes import THROUGH_PLAN, NamedChange
from radar_pipeline.pgss_model import KEY
from radar_pipeline.steps.causes import name_changes
from radar_pipeline.steps.look_spans import LookSpan, look_evidence
from radar_pipeline.warehouse import analysis, catalog
from radar_pipeline.warehouse.analysis import ANALYSED_VERDICTS
from radar_pipeline.warehouse.groups import decided_groups, first_groups, write_look_groups

SHAPE, ROLE, CHANGE = "shape", "role", "change"
# When two groups hold the same statements, the one kept: a named change says most, a role least.
PREFERENCE = (CHANGE, SHAPE, ROLE)
_PLANNABLE = {"SelectStmt", "InsertStmt", "UpdateStmt", "DeleteStmt", "MergeStmt"}


@dataclass(frozen=True)
class Group:
    """A group of the window's statements: its id (kind and key), kind, how a sentence names its statements
    ("statements of this shape"), and its members by the engine's query_key."""

    group_id: str
    kind: str
    label: str
    members: tuple[int, ...]


@lru_cache(maxsize=1 << 16)
def shape_key(text: str) -> str | None:
    """The shape of a plannable statement's text: a hash of its parse tree (pglast's JSON form) without constants,
    parameter numbers, positions, aliases, the names of the relations it reads or writes and the qualifiers of its
    columns, so the same statement over different tables shares it. None for a text the parser does not accept, of
    several statements, or that PostgreSQL does not plan (a utility statement: its shape says nothing of its work).

    The tree is edited as its JSON text, by the patterns below, rather than loaded and walked: 40 µs a statement
    instead of 400, which matters for a window of 5,000 statements of one shape (`SELECT * FROM tN WHERE id = $1`)."""
    from pglast import parser

    try:
        tree = parser.parse_sql_json(text)
    except parser.ParseError:
        return None
    kind = _FIRST_STATEMENT.match(tree)
    if kind is None or kind.group(1) not in _PLANNABLE or tree.count('{"stmt":') != 1:
        return None
    for pattern, replacement in _SHAPE_EDITS:
        tree = pattern.sub(replacement, tree)
    return hashlib.blake2b(tree.encode(), digest_size=8, person=b"radar-shape-1").hexdigest()


_JSON_TEXT = r'"(?:[^"\\]|\\.)*"'
_FIRST_STATEMENT = re.compile(r'\{"version":\d+,"stmts":\[\{"stmt":\{"(\w+)"')
# In order: positions and the parser's version out; relation, schema, catalog and alias names, a column's qualifiers
# (a name followed by another field of the same ColumnRef) and a parameter's number to one placeholder each; a
# constant (pg_stat_statements leaves few) to one placeholder.
_SHAPE_EDITS = (
    (re.compile(r'"(?:location|stmt_location|stmt_len|rexpr_list_start|rexpr_list_end|version)":-?\d+,?'), ""),
    (re.compile(rf'"(relname|schemaname|catalogname|aliasname)":{_JSON_TEXT}'), r'"\1":"$r"'),
    (re.compile(rf'\{{"String":\{{"sval":{_JSON_TEXT}\}}\}},(?=\{{"(?:String|A_Star)")'), '{"String":{"sval":"$r"}},'),
    (re.compile(r'"ParamRef":\{"number":\d+'), '"ParamRef":{"number":0'),
    (re.compile(r'"A_Const":\{[^{}]*(?:\{[^{}]*\}[^{}]*)*\}'), '"A_Const":"$v"'),
)


def form_groups(
    conn: sa.Connection,
    target: str,
    window: analysis.WindowCounters | pd.DataFrame,
    lo: datetime,
    hi: datetime,
    deployed_at: datetime | None = None,
) -> list[Group]:
    """The window's groups (see the module docstring) of at least MIN_MEMBERS statements, by shape, role and named
    change, without two of the same statements; from the statements' texts and keys (the window's, or a frame of KEY
    columns indexed by query_key) and the catalog facts of the window [lo, hi] (of the deploy at `deployed_at`: not a
    later deploy's, catalog.changes_between), never from their latency."""
    keys = window if isinstance(window, pd.DataFrame) else window.keys
    if len(keys) < MIN_MEMBERS:
        return []
    texts = analysis.query_texts(conn, target, keys, length=analysis.WHOLE_TEXT)
    found: list[Group] = []
    shapes: dict[str, list[int]] = {}
    for code, queryid in zip(keys.index, keys["queryid"], strict=True):
        shape = shape_key(texts.get(int(queryid), "")) if int(queryid) in texts else None
        if shape is not None:
            shapes.setdefault(shape, []).append(int(code))
    for shape, members in shapes.items():
        found.append(Group(f"{SHAPE}:{shape}", SHAPE, "statements of this shape", tuple(members)))
    role_names = {oid: name for name, oid in catalog.setting_roles(conn, target).items()}
    by_role = keys.groupby("userid").groups
    for userid, members in by_role.items() if len(by_role) > 1 else ():
        name = role_names.get(int(userid))
        label = f"statements of role {name}" if name else f"statements of role oid {int(userid)}"
        found.append(Group(f"{ROLE}:{int(userid)}", ROLE, label, tuple(int(m) for m in members)))
    found.extend(_change_groups(conn, target, keys, texts, lo, hi, deployed_at))
    return _distinct([g for g in found if len(g.members) >= MIN_MEMBERS])


def _change_groups(
    conn: sa.Connection,
    target: str,
    keys: pd.DataFrame,
    texts: dict[int, str],
    lo: datetime,
    hi: datetime,
    deployed_at: datetime | None,
) -> list[Group]:
    """A group per change named in the window that can slow a statement, of the statements it touches, whenever in
    the window the change was seen: a setting that affects plans, those of its role and/or database (all, when set
    server-wide); a catalog change, those matched as steps/causes.py matches a detection to it — asked only for the
    statements whose text holds the relation's (or index's) bare name, since matching parses each text."""

    # a table analysed or gone stale (THROUGH_PLAN) is routine (every autoanalyze): a cause on a row, never a group
    changes = [c for c in catalog.changes_between(conn, target, lo, hi, deployed_at) if _groups(c)]
    if not changes:
        return []
    members: dict[str, list[int]] = {}
    named: dict[str, NamedChange] = {}

    def add(change: NamedChange, codes: list[int]) -> None:
        ident = hashlib.blake2b(
            json.dumps(change.to_json(), sort_keys=True, default=str).encode(), digest_size=8
        ).hexdigest()
        members.setdefault(ident, []).extend(codes)
        named[ident] = change

    roles = catalog.setting_roles(conn, target)
    for change in changes:
        if change.kind != ChangeKind.SETTING_CHANGED or not affects_plans(change.name):
            continue
        mask = np.ones(len(keys), dtype=bool)
        if change.dbid is not None:
            mask &= keys["dbid"].to_numpy() == change.dbid
        if change.role is not None:
            mask &= keys["userid"].to_numpy() == roles.get(change.role, -1)
        add(change, [int(c) for c in keys.index[mask]])
    on_relations = [c for c in changes if c.kind != ChangeKind.SETTING_CHANGED]
    words = {w.lower() for c in on_relations for w in ((c.relation or "").replace('"', "").rpartition(".")[2], c.name)}
    words.discard("")
    lowered = {q: t.lower() for q, t in texts.items()}
    near = [any(w in lowered.get(int(q), "") for w in words) for q in keys["queryid"]]
    if on_relations and any(near):
        rows = keys[near]
        unplaced = rows.reset_index(drop=True).assign(change_at=None)
        touched = name_changes(conn, target, unplaced, lo, hi, deployed_at=deployed_at)
        for code, found in zip(rows.index, touched, strict=True):
            for change in found:
                if change.kind != ChangeKind.SETTING_CHANGED and _groups(change):
                    add(change, [int(code)])
    return [
        Group(f"{CHANGE}:{ident}", CHANGE, f"statements touched by the change ({named[ident].sentence()})", tuple(m))
        for ident, m in members.items()
    ]


def _groups(change: NamedChange) -> bool:
    """Whether the change forms a group of the statements it touches: one that can slow them, other than a table's
    statistics analysed or gone stale."""
    return change.slows and change.kind not in THROUGH_PLAN


def _distinct(groups: list[Group]) -> list[Group]:
    """The groups without repeats of the same statements (the most telling kind kept), in a fixed order."""
    kept: dict[frozenset[int], Group] = {}
    for group in sorted(groups, key=lambda g: (PREFERENCE.index(g.kind), g.group_id)):
        kept.setdefault(frozenset(group.members), group)
    return sorted(kept.values(), key=lambda g: (PREFERENCE.index(g.kind), g.group_id))


def decide(
    verdicts: pd.DataFrame,
    groups: list[Group],
    budget: float,
    settings: EngineSettings,
    before: pd.DataFrame | None = None,
) -> tuple[pd.DataFrame, list[str | None]]:
    """Decide the groups from the analysed verdicts (query_key, KEY columns and the engine's estimates at the
    deploy) with the groups' budget; returns the groups frame (engine.frames.GROUPS_STORED: the engine's GROUP_FRAME,
    then kind, label, statements, sentence and the tested members' keys as arrays) and, per verdict row, the mark of
    the detected groups it was a tested member of (None: none). The mark says the statement belongs to a group that
    regressed, not that it regressed: its own verdict stands, and the group is alerted once
    (warehouse.alerts.detections), not once per member. `before`: the members' before-side series
    (`before_noise`), from which each group's shared noise is estimated (engine.groups.shared_noise)."""
    marks: list[list[str]] = [[] for _ in range(len(verdicts))]
    if not groups:
        return _frame([]), [None] * len(verdicts)
    decided = decide_groups(verdicts, {g.group_id: g.members for g in groups}, budget, settings, before=before)
    position = pd.Index(verdicts["query_key"].to_numpy())
    estimated = np.isfinite(verdicts["deploy_log_factor"].to_numpy(dtype=float))
    rows: list[dict[str, Any]] = []
    for group, result in zip(groups, decided.to_dict("records"), strict=True):
        at = position.get_indexer(list(group.members))
        at = at[at >= 0]
        tested = at[estimated[at]]
        rows.append(_row(group, result, verdicts.iloc[tested]))
        if result["verdict"] == Verdict.DETECTED:
            for row in tested:
                marks[row].append(rows[-1]["sentence"])
    mark = [f"in a group that regressed: {'; '.join(m)}" if m else None for m in marks]
    return _frame(rows), mark


def _frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    return GROUPS_STORED.check(pd.DataFrame(rows, columns=GROUPS_STORED.names), "steps.groups.decide")


def _row(group: Group, result: dict[str, Any], tested: pd.DataFrame) -> dict[str, Any]:
    """One stored group verdict: the group's decision (`result`), its words, and the keys of its `tested` members."""
    return {
        **result,
        "kind": group.kind,
        "label": group.label,
        "statements": len(group.members),
        "sentence": _sentence(group, result),
        **{f"member_{k}": [_plain(v) for v in tested[k]] for k in KEY},
    }


def _plain(value: Any) -> Any:
    return value.item() if isinstance(value, np.generic) else value


def _sentence(group: Group, result: dict[str, Any]) -> str:
    """The group's verdict in words: "15 statements of this shape slowed as a group, typically ×1.50 (×1.31–×1.72)"
    — a claim about the group's typical statement, not that each member slowed."""
    m = int(result["members"])
    if result["verdict"] == Verdict.INSUFFICIENT_DATA:
        return f"{len(group.members)} {group.label}: too few with enough data to decide together ({m})"
    size = f"×{result['factor']:.2f} (×{result['factor_low']:.2f}–×{result['factor_high']:.2f})"
    if result["verdict"] == Verdict.DETECTED:
        return f"{m} {group.label} slowed as a group, typically {size}"
    if result["verdict"] == Verdict.NO_REGRESSION:
        return f"{m} {group.label} did not slow together: {size}"
    return f"{m} {group.label}: {size}, not decided"


@dataclass(frozen=True)
class GroupPlan:
    """A window's groups, formed before its statements are decided, and the budget split they imply: the settings
    the statements are decided with (their budget reduced by the groups' share when there are groups) and the
    groups' budget (engine.budget.split_group_budget)."""

    groups: list[Group]
    statement_settings: EngineSettings
    budget: float
    before: pd.DataFrame | None = None  # the members' before-side series (before_noise)


def plan_groups(
    conn: sa.Connection,
    target: str,
    window: analysis.WindowCounters,
    lo: datetime,
    hi: datetime,
    settings: EngineSettings,
    deployed_at: datetime | None = None,
) -> GroupPlan:
    """The window's groups (form_groups; of the deploy at `deployed_at`, None for a periodic check) and the split of
    the look's budget (settings.false_alert_budget) between the statements and the groups: GROUP_SHARE to the groups
    when there are any."""

    groups = form_groups(conn, target, window, lo, hi, deployed_at)
    statements, for_groups = split_group_budget(settings.false_alert_budget, bool(groups))
    before = None
    if groups:
        deployed_at = hi - settings.window
        calls = before_calls(window.counters, deployed_at, deployed_at - lo)  # the window's before side, already read
        before = before_noise(conn, target, window.keys, groups, deployed_at, settings, calls)
    return GroupPlan(groups, replace(settings, false_alert_budget=statements), for_groups, before)


def before_noise(
    conn: sa.Connection,
    target: str,
    keys: pd.DataFrame,
    groups: Sequence[Group],
    deployed_at: datetime,
    settings: EngineSettings,
    calls: pd.Series,
    cap: int | None = None,
) -> pd.DataFrame:
    """The groups' sampled members' log interval means over NOISE_SPANS · W before the deploy
    (engine.groups.before_series), one column per member read by its query_key in `keys` (KEY columns indexed by
    query_key; all NaN where it had no call): the before side only, from which the members' shared load noise is
    estimated (engine.groups.shared_noise). Each group's members are read up to `cap` (NOISE_SAMPLE), a larger group's
    busiest by `calls` (query_key → calls on the before side of the window already read; engine.groups.noise_sample),
    all the groups' in one read; a member without a column was not read and takes its group's read members' mean
    correlation. The same span at every look, so it never reaches past the deploy."""
    codes = sorted({int(c) for g in groups for c in noise_sample([int(c) for c in g.members], calls, cap)})
    wanted = keys.loc[codes, list(KEY)]
    if wanted.empty:
        return pd.DataFrame()
    window = analysis.read_window(conn, target, deployed_at - NOISE_SPANS * settings.window, deployed_at, wanted)
    series = before_series(window.counters, deployed_at, NOISE_SPANS * settings.window)
    if series.empty:
        return series
    read = window.keys.loc[series.columns, list(KEY)]
    code_of = {tuple(k): c for k, c in zip(wanted.itertuples(index=False), wanted.index, strict=True)}
    series.columns = [code_of.get(tuple(k), -1 - i) for i, k in enumerate(read.itertuples(index=False))]
    return series.reindex(columns=series.columns.union(pd.Index(codes)))


def decide_and_mark(verdicts: pd.DataFrame, plan: GroupPlan, settings: EngineSettings) -> pd.DataFrame:
    """Decide the planned groups from the analysed verdicts (`decide`) and mark each tested member of a detected
    group in its verdict's group_regressed (in place); returns the groups frame to store."""
    decided, marks = decide(verdicts, plan.groups, plan.budget, settings, plan.before)
    ANALYSED_VERDICTS.assign(verdicts, "group_regressed", pd.Series(marks, index=verdicts.index, dtype=object))
    return decided


@dataclass(frozen=True)
class LaterGroups:
    """A deploy's groups at later look `look`: the budget its statements are decided with (the look's, less the
    groups' share when the look's window forms groups), the groups' budget, and the groups it tested (a decided
    groups frame, engine.frames.GROUPS_STORED; empty when none was open)."""

    look: int
    statement_budget: float
    budget: float
    tested: pd.DataFrame

    def store(self, conn: sa.Connection, deploy_id: str, target: str, look_end: datetime) -> int:
        """Write the look's groups and mark the members of those it detected (warehouse.groups.write_look_groups), in
        the caller's transaction, after the look's verdict rows (a member's row a look replaced keeps its marks);
        returns how many it detected."""
        return write_look_groups(conn, deploy_id, target, self.look, look_end, self.tested)


def later_look(
    warehouse: sa.Engine, settings: EngineSettings, deploy_id: str, target: str, deployed_at: datetime, span: LookSpan
) -> LaterGroups:
    """The deploy's groups at a later look (`span`, k ≥ 1), nothing written (LaterGroups.store
    writes). The groups are the first verdict's (radar.group_verdict's look-0 rows), so the look's split is fixed as
    the first look's was, by what the statements are: where the first verdict formed groups, GROUP_SHARE of the
    look's budget goes to them (engine.budget.split_group_budget) and the rest to the statements, else all of it to
    the statements. The groups' budget is shared equally among the first verdict's groups; those still open (never
    `detected` nor `no_regression`) are tested, their members formed again from the look's window (texts, roles, the
    catalog's changes over its spans: never latency), on every member's evidence at the deploy over the look's spans
    (look_evidence: a member whose own verdict is decided counts as well). A group decided, or no longer
    formed, leaves its share unspent.

    The level: look k's groups spend at most G_k = GROUP_SHARE · look_budget(B, k) whatever was decided before, so
    the expected false group detections per deploy over all looks are at most Σ_k G_k = GROUP_SHARE · B (linearity
    over looks, Bonferroni among the groups), and with the statements' (1 − GROUP_SHARE) · B_k per look, the
    deploy's at most B."""

    with warehouse.connect() as conn:
        first = first_groups(conn, deploy_id, target)
        decided = decided_groups(conn, deploy_id, target)
        conn.rollback()
    if not first:
        return LaterGroups(span.look, span.budget, 0.0, _frame([]))
    statements, budget = split_group_budget(span.budget, True)
    if not first - decided:
        return LaterGroups(span.look, statements, budget, _frame([]))
    evidence = look_evidence(warehouse, settings, target, deployed_at, span)
    keys = evidence.set_index("query_key")[list(KEY)]
    with warehouse.connect() as conn:
        formed = {
            g.group_id: g
            for g in form_groups(conn, target, keys, deployed_at - span.before, deployed_at + span.after, deployed_at)
        }
        conn.rollback()
    still = {g for g in first - decided if g in formed}
    members = {g: formed[g].members if g in formed else () for g in sorted(first)}
    with warehouse.connect() as conn:
        calls = evidence.set_index("query_key")["calls_before"]
        before = before_noise(conn, target, keys, [formed[g] for g in still], deployed_at, settings, calls)
        conn.rollback()
    at_look = replace(settings, clear_level=span.clear_level)  # the look's share of clearing's error (engine.budget)
    tested = decide_groups(evidence, members, budget, at_look, tested=still, before=before)
    rows: list[dict[str, Any]] = []
    for result in tested.to_dict("records"):
        group = formed[result["group_id"]]
        found = evidence[evidence["query_key"].isin(list(group.members))]
        found = found[np.isfinite(found["deploy_log_factor"].to_numpy(dtype=float))]
        rows.append(_row(group, result, found))
    return LaterGroups(span.look, statements, budget, _frame(rows))
