"""The frames that cross layers, declared: their columns, dtypes, which are required, and the words a column may hold.

The engine returns the verdict frame (`analyse`, VERDICT_FRAME), the impact frames (`impact`, IMPACT_STATEMENTS
and IMPACT_SUMMARY), the group frame (`decide_groups`, GROUP_FRAME), the fleet frame (`fleet_verdicts`, FLEET_FRAME,
from FLEET_EVIDENCE) and the canary frame (`canary_analyse`, CANARY_FRAME); steps/ extends them with columns of its
own and overwrites engine columns, each declared (`FrameSchema.extend`, written through `FrameSchema.assign`:
ANALYSED_VERDICTS in warehouse/analysis.py, GROUPS_STORED, RELEASE_STORED and CANARY_STORED here); the warehouse
writes the columns these declare and checks what it stores. A frame is
checked where it crosses a layer (`FrameSchema.check`): a missing column, a wrong dtype or a word outside the
vocabulary is a FrameError naming the frame, the column and what was expected.

Plain pandas and numpy: cheap to import, and a check costs a dtype look-up per column and one `unique` per vocabulary
column (about a millisecond for 10,000 statements).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np
import pandas as pd

from radar_pipeline.engine.vocabulary import CAUSES, IMPACT_KINDS, REASONS, TIERS, VERDICTS

FLOAT, INT, BOOL, TIME, TEXT, ANY = "float", "int", "bool", "time", "text", "any"
KINDS = (FLOAT, INT, BOOL, TIME, TEXT, ANY)


class FrameError(ValueError):
    """A frame that does not match its schema where it crosses a layer (a bug on the producing side, not bad input)."""


@dataclass(frozen=True)
class Column:
    """One column: its name; its kind (float, int, bool, time: tz-aware UTC timestamps, text: strings or missing,
    any: not checked); whether a frame must have it; for text, the words it may hold (None: any string), or else a
    regular expression each value must match, and whether it may be missing (None/NaN)."""

    name: str
    kind: str
    required: bool = True
    words: tuple[str, ...] | None = None
    nullable: bool = True
    pattern: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"column {self.name}: kind must be one of {', '.join(KINDS)}, not {self.kind!r}")

    def problem(self, values: pd.Series) -> str | None:
        """What is wrong with the column's values, or None."""
        dtype = values.dtype
        if self.kind == TIME:
            ok = isinstance(dtype, pd.DatetimeTZDtype) and str(dtype.tz) == "UTC"
        elif self.kind in (FLOAT, INT, BOOL):
            ok = isinstance(dtype, np.dtype) and dtype.kind in {FLOAT: "f", INT: "iu", BOOL: "b"}[self.kind]
        elif self.kind == TEXT:
            ok = (isinstance(dtype, np.dtype) and dtype.kind == "O") or isinstance(dtype, pd.StringDtype)
        else:
            return None
        if not ok:
            return f"dtype {dtype}, expected {self.kind}"
        if self.kind != TEXT:
            return None
        distinct = pd.unique(values.to_numpy())
        present = [v for v in distinct if v is not None and not (isinstance(v, float) and np.isnan(v))]
        if not self.nullable and len(present) < len(distinct):
            return "missing values"
        # Exactly str: a StrEnum member equals its word but must not reach a frame (a driver may store its name).
        wrong = [
            v
            for v in present
            if type(v) is not str
            or (self.words is not None and v not in self.words)
            or (self.pattern is not None and not re.fullmatch(self.pattern, v))
        ]
        if wrong:
            shown = ", ".join(repr(v) for v in wrong[:3])
            allowed = " (plain strings)"
            if self.words is not None:
                allowed = f" (allowed: {', '.join(self.words)})"
            elif self.pattern is not None:
                allowed = f" (allowed: {self.pattern})"
            return f"values {shown}{allowed}"
        return None


@dataclass(frozen=True)
class FrameSchema:
    """A frame's columns. An extension (`extend`) adds columns to a base schema and names the base columns it
    overwrites, each with the reason; `assign` is the one way to write them."""

    name: str
    columns: tuple[Column, ...]
    base: FrameSchema | None = None
    overwrites: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        names = [c.name for c in self.columns]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValueError(f"{self.name}: columns declared twice: {', '.join(repeated)}")

    @property
    def names(self) -> list[str]:
        """Every column's name, in order (the base's first)."""
        return [c.name for c in self.columns]

    def column(self, name: str) -> Column:
        """The declared column `name` (KeyError if none)."""
        for c in self.columns:
            if c.name == name:
                return c
        raise KeyError(name)

    def check(self, frame: pd.DataFrame, where: str) -> pd.DataFrame:
        """The frame itself, when it has every required column with the declared dtype and words (optional ones are
        checked where present; undeclared ones are allowed: a layer may carry more than it promises); else a
        FrameError naming `where` it crossed, the frame and every column that is missing or wrong. A frame without
        rows is only checked for its columns (its dtypes carry nothing)."""
        if not isinstance(frame, pd.DataFrame):
            raise FrameError(f"{where}: {self.name} must be a pandas DataFrame, not {type(frame).__name__}")
        problems = [f"{c.name} missing" for c in self.columns if c.required and c.name not in frame.columns]
        if len(frame):
            for c in self.columns:
                if c.name in frame.columns:
                    problem = c.problem(frame[c.name])
                    if problem:
                        problems.append(f"{c.name}: {problem}")
        if problems:
            raise FrameError(f"{where}: {self.name} frame: {'; '.join(problems)}")
        return frame

    def extend(self, name: str, added: Iterable[Column], overwrites: Mapping[str, str] | None = None) -> FrameSchema:
        """This schema with `added` columns and the columns of ours the extension overwrites (`overwrites`: column →
        why; each must be one of ours). An added column may only bear one of our names when it overwrites it: its
        declaration then replaces ours (the values the extension writes there may differ from ours)."""
        overwrites = dict(overwrites or {})
        unknown = [c for c in overwrites if c not in self.names]
        if unknown:
            raise ValueError(f"{name} overwrites columns {self.name} does not have: {', '.join(unknown)}")
        added = tuple(added)
        clash = [c.name for c in added if c.name in self.names and c.name not in overwrites]
        if clash:
            raise ValueError(f"{name} adds columns {self.name} has: {', '.join(clash)} (name them in overwrites)")
        redeclared = {c.name: c for c in added if c.name in overwrites}
        columns = (*(redeclared.get(c.name, c) for c in self.columns), *(c for c in added if c.name not in redeclared))
        return FrameSchema(name, columns, base=self, overwrites=MappingProxyType(overwrites))

    def assign(self, frame: pd.DataFrame, column: str, values: Any, rows: Any = None) -> None:
        """Write `values` into `column` of `frame` (at `rows`, a boolean mask or index labels, or the whole column), in
        place: allowed for a column this extension adds or names in `overwrites`; a FrameError for any other (a base
        column overwritten without saying so, or a column nobody declared)."""
        base = self.base.names if self.base is not None else []
        if column in base and column not in self.overwrites:
            raise FrameError(
                f"{self.name} may not overwrite {self.base.name if self.base else ''} column {column!r} "
                f"(overwritten by name: {', '.join(self.overwrites) or 'none'})"
            )
        if column not in self.names:
            raise FrameError(f"{self.name} has no column {column!r}: declare it first")
        if rows is None:
            frame[column] = values
        else:
            frame.loc[rows, column] = values


def _floats(*names: str) -> tuple[Column, ...]:
    return tuple(Column(n, FLOAT) for n in names)


# A statement's decision, first in the verdict and canary frames: its key, its verdict and the reason for it.
_DECIDED = (
    Column("query_key", ANY),
    Column("verdict", TEXT, words=tuple(v.value for v in VERDICTS), nullable=False),
    Column("reason", TEXT, words=tuple(r.value for r in REASONS), nullable=False),
)

# analyse's result: one row per statement (engine/decision.py, COLUMNS; their order is the frame's).
VERDICT_FRAME = FrameSchema(
    "verdicts",
    (
        *_DECIDED,
        Column("change_at", TIME),
        *_floats("mean_before_ms", "mean_after_ms", "change_factor", "t_stat", "dof", "p_value", "confidence"),
        *(Column(n, INT) for n in ("n_before", "n_after", "calls_before", "calls_after")),
        *_floats("segment_mean_before_ms", "segment_mean_after_ms"),
        Column("segment_n_before", INT),
        Column("segment_n_after", INT),
        *_floats("q_stat", "rows_per_call_before", "rows_per_call_after"),
        *_floats("blks_read_per_call_before", "blks_read_per_call_after"),
        # the further counters' per-call figures (engine/causes.py FIGURES), NaN where unknown
        *(
            Column(f"{figure}_per_call_{side}", FLOAT)
            for figure in ("buffers", "plan_ms", "temp_blks", "workers_to_launch", "workers_launched", "jit_ms")
            + ("wal_bytes", "wal_buffers_full")
            for side in ("before", "after")
        ),
        Column("cause", TEXT, words=tuple(c.value for c in CAUSES)),
        Column("cause_detail", TEXT),  # the cause in words, with its figures (None: nothing more to say)
        Column("merged_keys", ANY),
        *_floats("factor_low", "factor_high", "p_family", "budget_share", "serial_correlation"),
        *_floats("history_intervals", "factor_bound"),
        # the log factor at the deploy's own split, its standard error and dof: a fleet verdict's per-target evidence
        *_floats("deploy_log_factor", "deploy_log_se", "deploy_dof"),
        Column("tier", TEXT, words=tuple(t.value for t in TIERS)),  # improved / probably_slower (None: neither)
        # the rise the statement's weekly rhythm alone explains (engine/rhythm.py; NaN: decided without levels)
        Column("expected_factor", FLOAT),
    ),
)

# impact(): a row per statement (engine/impact.py, STATEMENT_COLUMNS) ...
IMPACT_STATEMENTS = FrameSchema(
    "impact statements",
    (
        Column("query_key", ANY),
        Column("dbid", INT),
        Column("kind", TEXT, words=IMPACT_KINDS),
        Column("heavy", BOOL),
        Column("calls_before", INT),
        Column("calls_after", INT),
        *_floats("calls_per_min_before", "calls_per_min_after", "exec_ms_per_min_before", "exec_ms_per_min_after"),
        *_floats("mean_before_ms", "mean_after_ms", "rows_per_call_before", "rows_per_call_after"),
        *_floats("share_ratio", "dispersion", "p_value", "p_family"),
        Column("onset_at", TIME),
        # shared blocks read per minute (NaN: counters without them); when its first row was captured
        *_floats("blks_read_per_min_before", "blks_read_per_min_after"),
        Column("first_seen_at", TIME),
        # replaced: the other half's query_key and its mean per call relative to the stopped half's (classify)
        Column("partner_key", ANY),
        Column("per_call_factor", FLOAT),
        Column("statement_class", TEXT, words=("plannable", "utility", "control")),  # None: not classified
    ),
)
# ... and a row per database plus the target's (SUMMARY_COLUMNS).
IMPACT_SUMMARY = FrameSchema(
    "impact summary",
    (
        Column("dbid", INT),
        *_floats("calls_per_min_before", "calls_per_min_after", "exec_ms_per_min_before", "exec_ms_per_min_after"),
        Column("statements_before", INT),
        Column("statements_after", INT),
    ),
)

# decide_groups: a row per group (engine/groups.py, GROUP_COLUMNS; their order is the frame's).
GROUP_FRAME = FrameSchema(
    "group verdicts",
    (
        Column("group_id", TEXT, nullable=False),
        Column("verdict", TEXT, words=tuple(v.value for v in VERDICTS), nullable=False),
        Column("members", INT),
        Column("members_above", INT),
        *_floats("factor", "factor_low", "factor_high", "factor_bound", "factor_but_one", "tau", "z_stat"),
        *_floats("p_value", "p_family", "budget_share", "design"),
        Column("tier", TEXT, words=tuple(t.value for t in TIERS)),  # improved / probably_slower (None: neither)
    ),
)
# steps/groups.py adds what the engine is not told: the group's kind, how a sentence names its statements, how many
# statements it holds, its verdict in words and the keys of its tested members (arrays), stored in radar.group_verdict.
GROUPS_STORED = GROUP_FRAME.extend(
    "groups stored",
    (
        Column("kind", TEXT, words=("shape", "role", "change"), nullable=False),
        Column("label", TEXT, nullable=False),
        Column("statements", INT),
        Column("sentence", TEXT, nullable=False),
        *(Column(f"member_{k}", ANY) for k in ("dbid", "userid", "queryid", "toplevel")),
    ),
)

# fleet_verdicts' evidence: a row per (statement key, target) (engine/releases.py, EVIDENCE_COLUMNS).
FLEET_EVIDENCE = FrameSchema(
    "fleet evidence",
    (Column("key", ANY), Column("target", TEXT), *_floats("log_factor", "se", "time_before")),
)
# fleet_verdicts' result: a row per statement key (engine/releases.py, RESULT_COLUMNS; their order is the frame's).
FLEET_FRAME = FrameSchema(
    "fleet verdicts",
    (
        Column("key", ANY),
        Column("targets", INT),
        *_floats("factor", "factor_low", "factor_high", "p_value", "p_family", "budget_share", "family_weight"),
        Column("verdict", TEXT, words=tuple(v.value for v in VERDICTS), nullable=False),
        Column("consistent", BOOL),
        *_floats("heterogeneity_p", "i_squared", "tau2"),
        Column("targets_agreeing", INT),
        Column("only_on", ANY),  # the slower targets' names, a list (empty: none named)
        Column("report", TEXT),
        Column("members", ANY),  # the targets with evidence, a list
    ),
)

# canary_analyse: a row per statement key the canary arm ran (engine/canary.py, CANARY_COLUMNS; the frame's order).
CANARY_FRAME = FrameSchema(
    "canary verdicts",
    (
        *_DECIDED,
        *_floats("change_factor", "factor_low", "factor_high", "factor_bound", "p_value", "p_family", "budget_share"),
        *_floats("mean_canary_ms", "mean_stable_ms"),
        *(Column(n, INT) for n in ("calls_canary", "calls_stable", "intervals")),
        Column("serial_correlation", FLOAT),
    ),
)
# steps/canary.py splits the shared key (dbid, queryid, toplevel) into the columns radar.canary_verdict stores.
CANARY_STORED = CANARY_FRAME.extend(
    "canary verdicts stored", (Column("dbid", INT), Column("queryid", INT), Column("toplevel", BOOL))
)
# steps/releases.py stores a fleet verdict per key in radar.release_verdict (all but the key itself): the key split,
# the verdict's status and look, the release's counts and an example member's statement; it overwrites three columns.
RELEASE_STORED = FLEET_FRAME.extend(
    "fleet verdicts stored",
    (
        Column("verdict", TEXT, words=(*(v.value for v in VERDICTS), "pending"), nullable=False),
        Column("members", INT),
        Column("fingerprint", INT),
        Column("toplevel", BOOL),
        Column("status", TEXT, nullable=False),
        Column("look", ANY),  # None: the release is not complete (a partial verdict)
        Column("look_after", ANY),  # None: the members' first looks; a timedelta after a later look
        Column("member_targets", ANY),  # the engine's members: the targets with evidence, a list
        Column("analysed", INT),
        Column("example_deploy_id", TEXT),
        Column("example_target", TEXT),
        *(Column(f"example_{k}", INT) for k in ("queryid", "dbid", "userid")),
    ),
    overwrites={
        "verdict": "pending before the release is complete; past the schedule's last look detected reads inconclusive",
        "members": "how many targets the release went to (the engine's list of them is member_targets)",
        "budget_share": "nothing spent past the schedule's last look",
    },
)
