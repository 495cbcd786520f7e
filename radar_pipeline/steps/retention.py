"""Retention: drop day partitions of radar.pgss_snapshot and radar.pgss_compact older than the retention, create the
next ones, and thin out the periodic checks' verdicts of that age to their detections."""

from datetime import UTC, date, datetime, time, timedelta

import sqlalchemy as sa

from radar_pipeline.engine import Verdict
from radar_pipeline.warehouse import catalog, noise, rhythm, waits
from radar_pipeline.warehouse.snapshots import ensure_partitions


def apply_retention(engine: sa.Engine, keep_days: int, today: date) -> list[str]:
    """Drop the day partitions (raw and compacted) that ended before today − keep_days, with the scrape facts, the
    verdicts of periodic checks of that age other than detections (an hourly check writes one per query: deploy
    verdicts are all kept), the hourly sums older than that and rhythm.RHYTHM_DAYS, and the catalogue entries of
    statements last seen before then (unless a verdict shows them); returns the partitions dropped."""
    cutoff = today - timedelta(days=keep_days)
    # Partitions are UTC days: compare with UTC midnight, never a date cast in the session's time zone.
    cutoff_at = datetime.combine(cutoff, time(0), tzinfo=UTC)
    with engine.begin() as conn:
        dropped = [
            r[0]
            for r in conn.execute(
                sa.text("SELECT * FROM radar.drop_pgss_snapshot_partitions_before(:c)"), {"c": cutoff}
            )
        ]
        conn.execute(
            sa.text("DELETE FROM radar.pgss_info_snapshot WHERE captured_at < :cutoff_at"), {"cutoff_at": cutoff_at}
        )
        noise.delete_before(conn, cutoff)  # the noise sums of those days (sql/0014)
        catalog.delete_before(conn, cutoff_at)  # catalog captures and superseded facts of those days (sql/0023)
        waits.delete_before(conn, cutoff_at)  # the wait samples of those days (sql/0038)
        # the hourly sums of the weekly rhythms (sql/0039), kept at least the weeks a level reads
        rhythm.delete_before(conn, min(cutoff, today - timedelta(days=rhythm.RHYTHM_DAYS)))
        conn.execute(
            sa.text(
                "DELETE FROM radar.verdict v USING radar.analysis a WHERE a.deploy_id = v.deploy_id "
                "AND a.target = v.target AND a.trigger = 'periodic' AND a.window_end < :cutoff_at "
                f"AND v.verdict <> '{Verdict.DETECTED}'"
            ),
            {"cutoff_at": cutoff_at},
        )
        # Statements not seen since the cutoff leave the catalogue, unless a verdict still shows their text.
        conn.execute(
            sa.text(
                "DELETE FROM radar.query q WHERE q.last_seen < :cutoff_at AND NOT EXISTS (SELECT 1 FROM "
                "radar.verdict v WHERE v.target = q.target AND v.dbid = q.dbid AND v.userid = q.userid "
                "AND v.queryid = q.queryid AND v.toplevel = q.toplevel)"
            ),
            {"cutoff_at": cutoff_at},
        )
        ensure_partitions(conn, today)
    return dropped
