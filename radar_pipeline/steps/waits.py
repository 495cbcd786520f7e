"""Waits as a cause (issue 39): a statement whose sessions were seen waiting on a heavyweight lock (or on I/O) in many
more of the scrapes' samples after its change than before is said to wait on it, and for a lock the statement
holding it is named, whatever that statement's own time (a migration sleeping in its transaction after `SELECT … FOR
UPDATE` costs nothing in pg_stat_statements while the application's updates wait ×300 behind it).

The rule, per statement and wait type, from warehouse/waits.wait_counts: seen in at least MIN_SEEN samples after the
split and in at least MIN_SHARE of them, a share at least MIN_RISE above its share before. One sample per scrape is
sparse, so only a wait that holds a good part of the span is seen; it is evidence of the wait, not of its size."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pandas as pd

from radar_pipeline.collector.waits import IO, LOCK
from radar_pipeline.engine import Cause

MIN_SEEN = 2
MIN_SHARE = 0.2
MIN_RISE = 0.15
WAIT_CAUSES = {LOCK: Cause.LOCK_WAIT, IO: Cause.IO_WAIT}  # lock first: a lock wait is the more telling
# The causes a wait replaces: the counters' and the collateral's (a wait says more of a statement that waits); a
# changed plan or a named change of the catalog or settings say more than a wait.
REPLACES = frozenset(
    {
        None,
        Cause.UNEXPLAINED.value,
        Cause.COLLATERAL.value,
        Cause.CONTENTION.value,
        Cause.MORE_BUFFERS.value,
        Cause.MORE_BLOCKS_READ.value,
        Cause.WAL_BOUND.value,
    }
)


@dataclass(frozen=True)
class WaitCause:
    """A statement's wait: its cause, the most frequent wait_event, in how many samples after and before (of how
    many), and for a lock the blocking statement's queryid and userid (None when not seen)."""

    cause: Cause
    wait_event_type: str
    wait_event: str | None
    seen_after: int
    captures_after: int
    seen_before: int
    captures_before: int
    blocker_queryid: int | None = None
    blocker_userid: int | None = None

    def sentence(self, blocker_text: str | None = None) -> str:
        """The wait in words, e.g. "waited on a lock (Lock/transactionid) in 12 of 30 samples after the change, 0
        of 30 before; held by queryid 42: SELECT … FOR UPDATE"."""
        what = "a lock" if self.cause == Cause.LOCK_WAIT else "I/O"
        event = f"{self.wait_event_type}/{self.wait_event}" if self.wait_event else self.wait_event_type
        words = (
            f"waited on {what} ({event}) in {self.seen_after} of {self.captures_after} samples after the change, "
            f"{self.seen_before} of {self.captures_before} before"
        )
        if self.blocker_queryid is not None:
            words += f"; held by queryid {self.blocker_queryid}" + (f": {blocker_text}" if blocker_text else "")
        return words


def wait_causes(counts: pd.DataFrame) -> Mapping[int, WaitCause]:
    """Per row of wait_counts' statements, the wait that explains it (the module's rule), lock before I/O."""
    found: dict[int, WaitCause] = {}
    for (row, kind), part in counts.groupby(["row", "wait_event_type"]):
        if kind not in WAIT_CAUSES:
            continue
        after = part[part["after"]]
        before = part[~part["after"]]
        if after.empty:
            continue
        a = after.iloc[0]
        seen_b = int(before["seen"].iloc[0]) if len(before) else 0
        caps_b = int(before["captures"].iloc[0]) if len(before) else 0
        share_a = int(a["seen"]) / int(a["captures"])
        share_b = seen_b / caps_b if caps_b else 0.0
        if int(a["seen"]) < MIN_SEEN or share_a < MIN_SHARE or share_a < share_b + MIN_RISE:
            continue
        cause = WAIT_CAUSES[str(kind)]
        if int(row) in found and found[int(row)].cause == Cause.LOCK_WAIT:
            continue
        blocker = a["blocker_queryid"]
        found[int(row)] = WaitCause(
            cause=cause,
            wait_event_type=str(kind),
            wait_event=a["wait_event"],
            seen_after=int(a["seen"]),
            captures_after=int(a["captures"]),
            seen_before=seen_b,
            captures_before=caps_b,
            blocker_queryid=None if pd.isna(blocker) else int(blocker),
            blocker_userid=None if pd.isna(a["blocker_userid"]) else int(a["blocker_userid"]),
        )
    return found
