"""Waits as a cause (issue 39): a statement whose sessions spent, per call, at least half of the time it added waiting
on a heavyweight lock (or on I/O) is said to wait on it, and for a lock the statement holding it is named, whatever
that statement's own time (a migration sleeping in its transaction after `SELECT … FOR UPDATE` costs nothing in
pg_stat_statements while the application's updates wait ×170 behind it).

The wait per call comes from the samples (collector/waits.py, several instants a scrape) by Little's law: the mean
number of a statement's sessions found waiting at an instant is its calls per second times its mean wait per call, so
wait per call = mean sessions waiting / calls per second. Per statement and wait type, on either side of the split
(warehouse/waits.wait_counts, and the window's calls and means): the wait is its cause when it was seen in at least
MIN_SEEN samples after the split and its wait per call rose by at least EXPLAINS of what the statement's mean per
call rose. An estimate from samples: the sentence gives how many samples it rests on."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pandas as pd

from radar_pipeline.collector.waits import IO, LOCK
from radar_pipeline.engine import Cause

MIN_SEEN = 3
EXPLAINS = 0.5
WAIT_CAUSES = {LOCK: Cause.LOCK_WAIT, IO: Cause.IO_WAIT}
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
RATES = ("calls_before", "calls_after", "mean_before_ms", "mean_after_ms", "before_s", "after_s")


@dataclass(frozen=True)
class WaitCause:
    """A statement's wait: its cause and most frequent wait_event, its wait per call after and before the split and
    what its mean per call rose by (ms), the samples after it was seen in (of how many), and for a lock the blocking
    statement's queryid and userid (None when not seen)."""

    cause: Cause
    wait_event_type: str
    wait_event: str | None
    wait_after_ms: float
    wait_before_ms: float
    added_ms: float
    seen_after: int
    captures_after: int
    blocker_queryid: int | None = None
    blocker_userid: int | None = None

    def sentence(self, blocker_text: str | None = None) -> str:
        """The wait in words, e.g. "waited on a lock (Lock/transactionid) ≈ 7.9 ms a call after the change (0.0 ms
        before) of the 8.2 ms a call it added, seen in 23 of 480 samples; held by queryid 42: SELECT … FOR UPDATE"."""
        what = "a lock" if self.cause == Cause.LOCK_WAIT else "I/O"
        event = f"{self.wait_event_type}/{self.wait_event}" if self.wait_event else self.wait_event_type
        words = (
            f"waited on {what} ({event}) ≈ {_ms(self.wait_after_ms)} a call after the change "
            f"({_ms(self.wait_before_ms)} before) of the {_ms(self.added_ms)} a call it added, seen in "
            f"{self.seen_after} of {self.captures_after} samples"
        )
        if self.blocker_queryid is not None:
            words += f"; held by queryid {self.blocker_queryid}" + (f": {blocker_text}" if blocker_text else "")
        return words


def _ms(value: float) -> str:
    return f"{value:,.1f} ms" if value < 100 else f"{value:,.0f} ms"


def wait_causes(counts: pd.DataFrame, rates: pd.DataFrame) -> Mapping[int, WaitCause]:
    """Per row of wait_counts' statements, the wait that explains it (the module's rule), lock before I/O. `rates`:
    per row (its index), the window's calls and mean ms either side of the split and the sides' lengths (RATES)."""
    found: dict[int, WaitCause] = {}
    for (row, kind), part in counts.groupby(["row", "wait_event_type"]):
        if kind not in WAIT_CAUSES or int(row) not in rates.index:
            continue
        r = rates.loc[int(row)]
        added = float(r["mean_after_ms"]) - float(r["mean_before_ms"])
        after, before = part[part["after"]], part[~part["after"]]
        if after.empty or not added > 0:
            continue
        a = after.iloc[0]
        wait_after = _wait_ms(int(a["sessions"]), int(a["captures"]), float(r["calls_after"]), float(r["after_s"]))
        wait_before = 0.0
        if len(before):
            b = before.iloc[0]
            wait_before = _wait_ms(
                int(b["sessions"]), int(b["captures"]), float(r["calls_before"]), float(r["before_s"])
            )
        if int(a["seen"]) < MIN_SEEN or wait_after - wait_before < EXPLAINS * added:
            continue
        cause = WAIT_CAUSES[str(kind)]
        if int(row) in found and found[int(row)].cause == Cause.LOCK_WAIT:
            continue
        blocker, holder = a["blocker_queryid"], a["blocker_userid"]
        found[int(row)] = WaitCause(
            cause=cause,
            wait_event_type=str(kind),
            wait_event=a["wait_event"],
            wait_after_ms=wait_after,
            wait_before_ms=wait_before,
            added_ms=added,
            seen_after=int(a["seen"]),
            captures_after=int(a["captures"]),
            blocker_queryid=None if pd.isna(blocker) else int(blocker),
            blocker_userid=None if pd.isna(holder) else int(holder),
        )
    return found


def _wait_ms(sessions: int, captures: int, calls: float, seconds: float) -> float:
    """Little's law: mean sessions waiting at an instant / calls per second, in ms (inf with no calls)."""
    if captures <= 0 or seconds <= 0:
        return 0.0
    rate = calls / seconds
    return 1000.0 * (sessions / captures) / rate if rate > 0 else float("inf")
