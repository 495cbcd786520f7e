"""deploy_event_sensor under a burst: keyset paging over (ready_at, deploy_id) drains any number of deploys that
become ready at once, each requested exactly once, and its cursor alone carries it over a daemon restart."""

from __future__ import annotations

from collections import Counter

import dagster as dg
import sqlalchemy as sa

from radar_pipeline.defs.deploys.deploy_verdicts import SENSOR_PAGE, cursor_position, deploy_event_sensor
from radar_pipeline.defs.resources import AnalysisResource, WarehouseResource

BURST = 1000
ANALYSIS = AnalysisResource(window_seconds=60, scrape_interval_seconds=1)


def _burst(warehouse, n: int, prefix: str) -> None:
    """n deploys of a monorepo release, recorded in one transaction: all ready at the same instant."""
    with warehouse.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO radar.deploy_event (deploy_id, target, deployed_at, source) "
                "SELECT :p || lpad(g::text, 4, '0'), 'main', now() - interval '1 hour', 'cli' "
                "FROM generate_series(1, :n) g"
            ),
            {"p": prefix, "n": n},
        )


def _tick(instance: dg.DagsterInstance, warehouse_url: str, cursor: str | None) -> dg.SensorResult:
    context = dg.build_sensor_context(
        instance=instance,
        cursor=cursor,
        resources={"warehouse": WarehouseResource(url=warehouse_url), "analysis": ANALYSIS},
    )
    return deploy_event_sensor(context)


def test_a_burst_of_1000_is_requested_exactly_once_across_ticks_and_restarts(warehouse, warehouse_url):
    _burst(warehouse, BURST, "svc-")
    requested: Counter[str] = Counter()
    cursor: str | None = None
    ticks = 0
    # Every other tick runs on a new instance: a restarted daemon keeps nothing but the stored cursor.
    while True:
        with dg.instance_for_test() as instance:
            result = _tick(instance, warehouse_url, cursor)
        ticks += 1
        if not result.run_requests:
            break
        assert len(result.run_requests) <= SENSOR_PAGE
        requested.update(r.run_key for r in result.run_requests)
        assert result.cursor is not None
        cursor = result.cursor
        if ticks % 2 == 0:  # a deploy arriving between ticks joins the queue after the burst, not lost behind it
            _burst(warehouse, 1, f"late{ticks}-")
    assert ticks <= -(-(BURST + ticks // 2) // SENSOR_PAGE) + 2  # full pages: no tick wasted on re-reads
    expected = {f"svc-{i:04d}" for i in range(1, BURST + 1)}
    lost = expected - set(requested)
    duplicated = {k for k, n in requested.items() if n > 1}
    assert not lost and not duplicated, f"lost {sorted(lost)[:5]}, requested twice {sorted(duplicated)[:5]}"
    late = {k for k in requested if k.startswith("late")}
    with warehouse.connect() as conn:
        stored_late = {
            r[0] for r in conn.execute(sa.text("SELECT deploy_id FROM radar.deploy_event WHERE deploy_id LIKE 'late%'"))
        }
    assert late == stored_late
    # A further tick with the final cursor finds nothing: the position stays at the last requested deploy.
    with dg.instance_for_test() as instance:
        assert not _tick(instance, warehouse_url, cursor).run_requests
    position = cursor_position(cursor)
    assert position is not None and position[1] in requested


def test_an_old_cursor_resumes_at_its_time():
    at, last = cursor_position('{"ready_through": "2026-11-29T12:00:00+00:00", "recent": ["a"]}') or (None, None)
    assert at is not None and at.isoformat() == "2026-11-29T12:00:00+00:00" and last == ""
    assert cursor_position(None) is None
