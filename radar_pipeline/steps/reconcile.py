"""The reconciler's policy for a deploy with no analysis, given the runs it already had: request another run now,
wait (a run is in flight, or the backoff since the last failure has not passed), or give up after a bounded number of
runs. Dagster-free: defs/reconcile/reconciler.py reads the runs and turns the decisions into run requests."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta


@dataclass(frozen=True)
class PastRun:
    """One earlier analysis run of a deploy: whether it is still queued or running, and when it ended."""

    in_flight: bool
    ended_at: datetime | None


@dataclass(frozen=True)
class Decision:
    """What to do about one deploy: `request` a run with `run_key`, or not, and why (for the tick's log)."""

    request: bool
    run_key: str | None
    reason: str


def analysis_retry(deploy_id: str, runs: list[PastRun], now: datetime, max_runs: int, backoff: timedelta) -> Decision:
    """Whether to request another analysis of a deploy that has none. At most `max_runs` runs in all; after the n-th
    ended, the next waits backoff × 2^(n−1). The run key names the attempt (deploy id, "reconcile", the number of
    runs so far + 1), so each retry is a new run while a repeated tick never requests the same attempt twice."""
    if any(r.in_flight for r in runs):
        return Decision(False, None, f"{deploy_id}: a run is queued or in progress")
    if len(runs) >= max_runs:
        return Decision(False, None, f"{deploy_id}: gave up after {len(runs)} runs without an analysis")
    ended = [r.ended_at for r in runs if r.ended_at is not None]
    if ended:
        ready = max(ended) + backoff * 2 ** (len(runs) - 1)
        if now < ready:
            return Decision(False, None, f"{deploy_id}: next attempt after {ready.isoformat()}")
    what = f"retry {len(runs)} of a failed analysis" if runs else "never requested"
    return Decision(True, f"{deploy_id}:reconcile-{len(runs) + 1}", f"{deploy_id}: {what}")
