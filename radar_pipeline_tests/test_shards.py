"""Targets spread over snapshot runs: every target in exactly one shard, stable, and few moved by a change."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from radar_pipeline.config import Target
from radar_pipeline.steps.shards import shard_of, targets_of_shard

NAMES = [f"db-{i:04d}" for i in range(1000)]


def test_every_target_is_in_exactly_one_shard_and_the_shards_are_balanced():
    targets = [Target(n, f"postgresql://u@h/{n}") for n in NAMES]
    shards = [targets_of_shard(targets, s, 8) for s in range(8)]
    names = [t.name for shard in shards for t in shard]
    assert sorted(names) == sorted(NAMES)
    sizes = [len(s) for s in shards]
    assert min(sizes) > 1000 / 8 * 0.7 and max(sizes) < 1000 / 8 * 1.3, sizes
    assert targets_of_shard(targets, 0, 1) == targets  # one shard: every target


def test_the_assignment_is_stable_and_adding_a_shard_moves_only_what_it_wins():
    before = {n: shard_of(n, 8) for n in NAMES}
    assert before == {n: shard_of(n, 8) for n in NAMES}
    after = {n: shard_of(n, 9) for n in NAMES}
    moved = [n for n in NAMES if after[n] != before[n]]
    assert all(after[n] == 8 for n in moved)  # a target moves only to the new shard
    assert 0.05 < len(moved) / len(NAMES) < 0.2  # about 1/9 of them


def test_bad_shard_numbers_are_refused():
    with pytest.raises(ValueError, match="at least 1"):
        shard_of("a", 0)
    with pytest.raises(ValueError, match="shard must lie"):
        targets_of_shard([], 3, 3)


def test_a_sharded_schedule_requests_a_run_per_shard_and_each_scrapes_its_own(app_db, warehouse_url, monkeypatch):
    import dagster as dg
    import sqlalchemy as sa

    from radar_pipeline.defs.collection.snapshots import pgss_snapshot_schedule_for, pgss_snapshots
    from radar_pipeline.defs.resources import TargetsResource, WarehouseResource
    from radar_pipeline.warehouse.database import make_engine

    _, target = app_db
    names = [f"t{i}" for i in range(20)]
    first = next(n for n in names if shard_of(n, 2) == 0)
    second = next(n for n in names if shard_of(n, 2) == 1)
    spec = f"{first}={target.dsn} {second}={target.dsn}"
    monkeypatch.setenv("RADAR_SNAPSHOT_SHARDS", "2")
    schedule = pgss_snapshot_schedule_for()
    tick = datetime(2026, 11, 30, 4, 0, tzinfo=UTC)
    with dg.build_schedule_context(scheduled_execution_time=tick) as context:
        requests = list(schedule.evaluate_tick(context).run_requests or [])
    assert [r.run_config["ops"]["pgss_snapshots"]["config"] for r in requests] == [
        {"shard": 0, "shards": 2},
        {"shard": 1, "shards": 2},
    ]
    resources = {"warehouse": WarehouseResource(url=warehouse_url), "targets": TargetsResource(spec=spec)}
    result = dg.materialize([pgss_snapshots], resources=resources, run_config=requests[1].run_config)
    assert result.success
    with make_engine(warehouse_url).connect() as conn:
        scraped = conn.execute(sa.text("SELECT DISTINCT target FROM radar.pgss_info_snapshot")).scalars().all()
    assert scraped == [second]
