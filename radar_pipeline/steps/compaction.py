"""Compaction: every ended day of raw snapshots rewritten as compact rows (warehouse.compaction, sql/0013), each day
in a transaction of its own, so a failure leaves that day raw (and readable) and the next run tries it again."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import sqlalchemy as sa

from radar_pipeline.warehouse import compaction

# A day is compacted once it ended this long ago by the warehouse's clock: a scrape whose server clock lags a little
# may still write into it until then (one written later still is merged by the next compaction).
GRACE = timedelta(hours=1)
# How long a compaction waits for the day's readers before giving up (the day stays raw until the next run).
LOCK_TIMEOUT = timedelta(minutes=5)


@dataclass(frozen=True)
class CompactedDay:
    """One day's outcome: the samples moved into compact rows, or the error that left the day raw."""

    day: str
    samples: int = 0
    error: str | None = None


def compact_history(
    engine: sa.Engine, grace: timedelta = GRACE, lock_timeout: timedelta = LOCK_TIMEOUT
) -> list[CompactedDay]:
    """Compact every raw day that ended at least `grace` ago, oldest first; returns each day's outcome (a day that
    failed is reported, and the others are still compacted)."""
    with engine.connect() as conn:
        days = compaction.compactable_days(conn, grace)
    outcomes = []
    for day in days:
        try:
            with engine.begin() as conn:
                compaction.ensure_partition(conn, day)
            with engine.begin() as conn:
                conn.execute(sa.text("SELECT set_config('lock_timeout', :t, true)"), {"t": _milliseconds(lock_timeout)})
                moved = compaction.compact_day(conn, day)
        except sa.exc.DBAPIError as exc:
            outcomes.append(CompactedDay(day.isoformat(), error=str(exc.orig).strip()))
        else:
            outcomes.append(CompactedDay(day.isoformat(), samples=moved))
    return outcomes


def _milliseconds(span: timedelta) -> str:
    return f"{int(span.total_seconds() * 1000)}ms"
