"""A change named at a deploy: an index dropped, a trigger added, a setting changed for a role, statistics reset,
renewed by an ANALYZE or gone stale.

Produced from the catalog and settings facts the collector stores around each deploy (collector/catalog.py,
warehouse/catalog.py); attached to the detections whose relations,
database or role it touches (steps/causes.py); stored with each verdict in radar.verdict.named_changes (JSON, one
object per change, `to_json`) and said in words (`sentence`) by `radar verdicts`, Slack and the UI. Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from radar_pipeline.engine.vocabulary import CAUSE_OF_CHANGE, Cause, ChangeKind

# What each kind says, with {what} the object's name and the relation it is on (when any).
_VERBS = {
    ChangeKind.INDEX_DROPPED: "index {what} dropped",
    ChangeKind.INDEX_INVALID: "index {what} left invalid",
    ChangeKind.COLUMN_TYPE_CHANGED: "column {what} changed type",
    ChangeKind.TRIGGER_ADDED: "trigger {what} added",
    ChangeKind.CONSTRAINT_ADDED: "constraint {what} added",
    ChangeKind.STATISTICS_RESET: "statistics of {what} reset (no ANALYZE since)",
    ChangeKind.SETTING_CHANGED: "{what} changed",
    ChangeKind.STATISTICS_CHANGED: "table {what}",
    ChangeKind.STATISTICS_STALE: "statistics of {what} stale (modified well past autovacuum's analyze threshold)",
    ChangeKind.INDEX_ADDED: "index {what} added",
    ChangeKind.INDEX_CHANGED: "index {what} changed",
    ChangeKind.TRIGGER_DROPPED: "trigger {what} dropped",
    ChangeKind.TRIGGER_CHANGED: "trigger {what} changed",
    ChangeKind.CONSTRAINT_DROPPED: "constraint {what} dropped",
    ChangeKind.COLUMN_ADDED: "column {what} added",
    ChangeKind.COLUMN_DROPPED: "column {what} dropped",
    ChangeKind.TABLE_REWRITTEN: "table {what} rewritten",
    ChangeKind.EXTENDED_STATISTICS_DROPPED: "extended statistics {what} dropped",
    ChangeKind.EXTENDED_STATISTICS_ADDED: "extended statistics {what} added",
}


# The kinds that can make a statement they touch slower, so give it their cause: an index it may have used gone,
# invalid or redefined; a column's type changed (a cast defeating an index, wider rows); a trigger added or changed
# (enabled, a new body) and a constraint added (work on every write); statistics lost; a plan setting changed; and
# extended statistics dropped (estimates the planner relied on); a table analysed, or its statistics gone stale, which
# slow a statement only through its plan (THROUGH_PLAN). The others (an index, column or extended statistics
# added; a trigger, constraint or column dropped; a table rewritten by VACUUM FULL or CLUSTER, smaller after) are
# listed beside the detection but never its cause: a counter cause or fleet_wide says more.
SLOWING = frozenset(
    {
        ChangeKind.INDEX_DROPPED,
        ChangeKind.INDEX_INVALID,
        ChangeKind.INDEX_CHANGED,
        ChangeKind.COLUMN_TYPE_CHANGED,
        ChangeKind.TRIGGER_ADDED,
        ChangeKind.TRIGGER_CHANGED,
        ChangeKind.CONSTRAINT_ADDED,
        ChangeKind.STATISTICS_RESET,
        ChangeKind.SETTING_CHANGED,
        ChangeKind.EXTENDED_STATISTICS_DROPPED,
        ChangeKind.STATISTICS_CHANGED,
        ChangeKind.STATISTICS_STALE,
    }
)
# Changes that slow a statement only by changing its plan: the cause when its plan changed, or when its counters say
# nothing else (no plan to compare: a statement probably slower, a server without plan capture); otherwise listed.
THROUGH_PLAN = frozenset({ChangeKind.STATISTICS_CHANGED, ChangeKind.STATISTICS_STALE})


_OF_TABLE = (ChangeKind.STATISTICS_RESET, ChangeKind.TABLE_REWRITTEN, ChangeKind.STATISTICS_STALE)  # named by table


@dataclass(frozen=True)
class NamedChange:
    """One change between two captures of a target's catalog or settings (or a utility statement the deploy ran).

    `name` is the object (index, trigger, constraint, `table.column`, setting, or the statement's text cut short);
    `relation` the schema-qualified table it belongs to (None for settings and statements of no one table); `dbid`
    the database (None: every database of the server); `role` the role a setting was set for (None: every role);
    `before`/`after` the old and new definition or value (None where there is none: an object added or dropped);
    `last_seen_before` the last capture that showed the old state (None when not known) and `first_seen_after` the
    first that showed the new one, so the change happened between them; `undo` a statement that undoes it, where one
    can be derived (the CREATE INDEX of a dropped index, the previous value of a setting); `database` the name of
    the database a setting was set for (None: not known, or every database)."""

    kind: ChangeKind
    name: str
    relation: str | None
    dbid: int | None
    role: str | None
    last_seen_before: datetime | None
    first_seen_after: datetime
    before: str | None = None
    after: str | None = None
    undo: str | None = None
    database: str | None = None

    @property
    def slows(self) -> bool:
        """Whether this change can make a statement it touches slower (SLOWING), so be its cause."""
        return self.kind in SLOWING

    @property
    def cause(self) -> Cause:
        """The cause this change gives a statement it touches."""
        return CAUSE_OF_CHANGE[self.kind]

    def sentence(self) -> str:
        """The change in words, e.g. "index public.orders_customer_idx dropped between 18:41:15 and 18:41:35";
        times in UTC, to the second. A setting says its old and new values and whose it is."""
        what = self.name
        if self.kind == ChangeKind.SETTING_CHANGED:
            scope = " ".join(
                part
                for part in (
                    f"for role {self.role}" if self.role else "",
                    f"in database {self.database or self.dbid}" if self.dbid is not None else "",
                )
                if part
            )
            what = f"{self.name}{' ' + scope if scope else ''} ({self.before or 'default'} → {self.after or 'default'})"
        elif self.kind == ChangeKind.STATISTICS_CHANGED:
            what = f"{self.name} analysed" + (f" ({self.after})" if self.after and self.after != "never" else "")
        elif self.relation and self.kind not in _OF_TABLE:
            what = f"{self.name} on {self.relation}"
        text = _VERBS[self.kind].format(what=what)
        after = self.first_seen_after.strftime("%H:%M:%S")
        if self.last_seen_before is None:
            return f"{text} by {after}"
        return f"{text} between {self.last_seen_before.strftime('%H:%M:%S')} and {after}"

    def to_json(self) -> dict[str, Any]:
        """The change as a JSON object (radar.verdict.named_changes holds a list of them)."""
        return {
            "kind": self.kind.value,
            "name": self.name,
            "relation": self.relation,
            "dbid": self.dbid,
            "role": self.role,
            "last_seen_before": self.last_seen_before.isoformat() if self.last_seen_before else None,
            "first_seen_after": self.first_seen_after.isoformat(),
            "before": self.before,
            "after": self.after,
            "undo": self.undo,
            "database": self.database,
            "sentence": self.sentence(),
        }

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> NamedChange:
        """The change `to_json` wrote (its `sentence` is recomputed, not read)."""
        before = value.get("last_seen_before")
        return cls(
            kind=ChangeKind(value["kind"]),
            name=value["name"],
            relation=value.get("relation"),
            dbid=value.get("dbid"),
            role=value.get("role"),
            last_seen_before=datetime.fromisoformat(before) if before else None,
            first_seen_after=datetime.fromisoformat(value["first_seen_after"]),
            before=value.get("before"),
            after=value.get("after"),
            undo=value.get("undo"),
            database=value.get("database"),
        )


def ranked(changes: list[NamedChange]) -> list[NamedChange]:
    """The changes, most telling first (ChangeKind's order, then the latest first): the first gives the cause."""
    order = {k: i for i, k in enumerate(ChangeKind)}
    return sorted(changes, key=lambda c: (order[c.kind], -c.first_seen_after.timestamp()))
