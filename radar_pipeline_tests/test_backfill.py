"""deploy_verdicts in a backfill's run of several deploys, on real PostgreSQL with synthetic counters.

Three queries through four hourly deploys (windows of ±200 s, scrapes every 10 s): 22 gets three times slower at
deploy 2, the others stay flat. A fifth deploy, recorded a minute ago, has a window still open: its analysis is
refused, and the run must still store and report the other four.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import dagster as dg
import numpy as np
import pandas as pd
import pytest
import sqlalchemy as sa

from radar_pipeline.defs.deploys.deploy_verdicts import (
    ANALYSIS_POOL,
    BACKFILL_PARTITIONS_PER_RUN,
    COVERAGE_CHECK,
    RANGE_END,
    RANGE_START,
    RESETS_CHECK,
    deploy_verdicts,
)
from radar_pipeline.defs.resources import AnalysisResource, TargetsResource, WarehouseResource
from radar_pipeline.warehouse import deploys

from .helpers import hourly_deploy_counters, run_log_text, store_counters

DEPLOYS = 4
SLOWER_AT = 2
TEXTS = {21: "SELECT * FROM carts WHERE owner = $1", 22: "SELECT * FROM orders WHERE id = $1", 23: "SELECT 1"}


def _level(queryid: int, deploy: int) -> float:
    """The true mean (ms): the carts lookup (22) three times slower from deploy SLOWER_AT on."""
    return 3.0 if queryid == 22 and deploy >= SLOWER_AT else 1.0


@pytest.fixture
def recorded(warehouse, warehouse_url) -> list[str]:
    """Four deploys whose windows closed and, third in partition order, one whose window is still open."""
    start = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=DEPLOYS + 2)
    store_counters(
        warehouse, "main", hourly_deploy_counters(start, np.random.default_rng(5), list(TEXTS), DEPLOYS, _level), TEXTS
    )
    ids = [f"b-{d}" for d in range(DEPLOYS)]
    for d, deploy_id in enumerate(ids):
        deploys.record(warehouse, deploys.DeployEvent(deploy_id, "main", start + timedelta(hours=d)))
    deploys.record(warehouse, deploys.DeployEvent("b-open", "main", datetime.now(UTC) - timedelta(minutes=1)))
    return [*ids[:2], "b-open", *ids[2:]]


def _resources(warehouse_url: str) -> dict:
    return {
        "warehouse": WarehouseResource(url=warehouse_url),
        "analysis": AnalysisResource(window_seconds=200, scrape_interval_seconds=10, tolerance_floor_seconds=30),
        "targets": TargetsResource(spec="main=postgresql://nowhere.invalid/none"),  # plans: none to capture
    }


def _run_range(
    instance: dg.DagsterInstance, warehouse_url: str, keys: list[str], first: str, last: str
) -> dg.ExecuteInProcessResult:
    """One run of deploy_verdicts over the partitions first…last, as a backfill with its policy launches it."""
    instance.add_dynamic_partitions("deploys", keys)
    return dg.materialize(
        [deploy_verdicts],
        resources=_resources(warehouse_url),
        instance=instance,
        tags={RANGE_START: first, RANGE_END: last},
        raise_on_error=False,
    )


def _analysed(warehouse) -> pd.DataFrame:
    with warehouse.connect() as conn:
        return pd.read_sql(
            sa.text("SELECT deploy_id, queries, detected, run_id FROM radar.analysis ORDER BY deploy_id"),
            conn,
        ).set_index("deploy_id")


def test_the_asset_has_a_multi_run_backfill_policy_and_the_analysis_pool():
    policy = deploy_verdicts.backfill_policy
    assert policy is not None and policy.max_partitions_per_run == BACKFILL_PARTITIONS_PER_RUN > 1
    assert deploy_verdicts.op.pool == ANALYSIS_POOL


@pytest.mark.parametrize("batch", [2, 25], ids=["checks-in-two-batches", "checks-in-one-batch"])
def test_a_run_of_several_deploys_stores_and_reports_each(recorded, warehouse, warehouse_url, monkeypatch, batch):
    monkeypatch.setattr("radar_pipeline.defs.deploys.deploy_verdicts.CHECKS_BATCH", batch)
    closed = [k for k in recorded if k != "b-open"]
    with dg.instance_for_test() as instance:
        result = _run_range(instance, warehouse_url, closed, closed[0], closed[-1])
        assert result.success
        analysed = _analysed(warehouse)
        assert sorted(analysed.index) == sorted(closed)
        assert set(analysed["run_id"]) == {result.run_id}  # one run for all four
        assert (analysed["queries"] == len(TEXTS)).all()
        assert analysed["detected"].to_dict() == {k: int(k == f"b-{SLOWER_AT}") for k in closed}

        materializations = {m.partition: m for m in result.asset_materializations_for_node("deploy_verdicts")}
        assert sorted(materializations) == sorted(closed)
        for key, mat in materializations.items():
            assert mat.metadata["queries"].value == len(TEXTS)
            assert mat.metadata["deploy"].value["deploy_id"] == key
        assert materializations[f"b-{SLOWER_AT}"].metadata["detected"].value == 1
        assert instance.get_materialized_partitions(dg.AssetKey("deploy_verdicts")) == set(closed)

        evaluations = result.get_asset_check_evaluations()
        assert sorted(e.check_name for e in evaluations) == sorted([COVERAGE_CHECK, RESETS_CHECK] * len(closed))
        targets = {e.target_materialization_data.storage_id for e in evaluations if e.target_materialization_data}
        stored = {
            r.storage_id
            for key in closed
            for r in instance.fetch_materializations(
                dg.AssetRecordsFilter(asset_key=dg.AssetKey("deploy_verdicts"), asset_partitions=[key]), limit=1
            ).records
        }
        assert targets == stored  # each check evaluation points at its own deploy's materialization


def test_a_refused_deploy_fails_the_run_after_the_others_are_stored(recorded, warehouse, warehouse_url):
    with dg.instance_for_test() as instance:
        result = _run_range(instance, warehouse_url, recorded, recorded[0], recorded[-1])
        assert not result.success
        closed = [k for k in recorded if k != "b-open"]
        assert sorted(_analysed(warehouse).index) == sorted(closed)  # those after the refused one too
        assert instance.get_materialized_partitions(dg.AssetKey("deploy_verdicts")) == set(closed)
        text = run_log_text(instance, result.run_id)
        assert "deploy b-open (3/5) not analysed" in text
        assert "1 of 5 deploys were not analysed" in text and "b-open" in text
        assert "an analysis before then would see only part of the window" in text


def test_a_run_of_one_deploy_is_reported_as_before(recorded, warehouse, warehouse_url):
    """The sensor's run (partition tag, not a range): one MaterializeResult with its checks."""
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("deploys", recorded)
        result = dg.materialize(
            [deploy_verdicts], partition_key=f"b-{SLOWER_AT}", resources=_resources(warehouse_url), instance=instance
        )
        assert result.success
        (mat,) = result.asset_materializations_for_node("deploy_verdicts")
        assert mat.partition == f"b-{SLOWER_AT}" and mat.metadata["detected"].value == 1
        assert sorted(e.check_name for e in result.get_asset_check_evaluations()) == sorted(
            [COVERAGE_CHECK, RESETS_CHECK]
        )


def test_deploys_with_overlapping_windows_share_one_read_and_get_the_same_verdicts(
    recorded, warehouse, warehouse_url, monkeypatch
):
    """analyse_deploys reads the common span of deploys whose windows overlap once and cuts each window from it: the
    verdicts are analyse_deploy's, deploy by deploy, and no window is read on its own."""
    from radar_pipeline.steps import deploy_analysis
    from radar_pipeline.warehouse import analysis

    settings = _resources(warehouse_url)["analysis"].settings()
    with warehouse.connect() as conn:
        at = deploys.get(conn, f"b-{SLOWER_AT}").deployed_at
    close = [f"c-{k}" for k in range(4)]  # 150 s apart: their ±200 s windows overlap in a chain
    for k, deploy_id in enumerate(close):
        deploys.record(warehouse, deploys.DeployEvent(deploy_id, "main", at + timedelta(seconds=150 * (k - 1))))
    ids = [*close, "b-0", "b-open"]
    with warehouse.connect() as conn:
        events = list(deploys.get_many(conn, ids[:-1]).values())
    assert [[e.deploy_id for e in g] for g in deploy_analysis.shared_spans(events, settings.window)] == [["b-0"], close]

    def alone(*args, **kwargs):
        raise AssertionError("a window of the shared span was read on its own")

    with monkeypatch.context() as patched:
        patched.setattr(analysis, "read_window", alone)
        results = dict(deploy_analysis.analyse_deploys(deploy_analysis.AnalysisRun(warehouse, settings), close))
    assert all(not isinstance(r, Exception) for r in results.values()), results
    shared = _verdict_rows(warehouse, close)

    for deploy_id in close:
        deploy_analysis.analyse_deploy(deploy_analysis.AnalysisRun(warehouse, settings), deploy_id)
    assert _verdict_rows(warehouse, close) == shared
    assert len(shared) == len(close) * len(TEXTS)
    assert any(row["verdict"] == "detected" for row in shared)  # the slowdown at b-2 is inside these windows

    outcome = dict(deploy_analysis.analyse_deploys(deploy_analysis.AnalysisRun(warehouse, settings), ids))
    assert isinstance(outcome["b-open"], deploy_analysis.AnalysisRefused)
    assert all(not isinstance(outcome[i], Exception) for i in ids[:-1])


def _verdict_rows(warehouse, ids: list[str]) -> list[dict]:
    """Every stored column of the deploys' verdicts."""
    with warehouse.connect() as conn:
        return [
            dict(r._mapping)
            for r in conn.execute(
                sa.text(
                    "SELECT * FROM radar.verdict WHERE deploy_id = ANY(:ids) "
                    "ORDER BY deploy_id, dbid, userid, queryid, toplevel"
                ),
                {"ids": ids},
            )
        ]


def test_deploys_share_a_read_when_windows_overlap_or_lie_in_the_same_compacted_days():
    from radar_pipeline.steps.deploy_analysis import SHARED_SAMPLES, shared_spans
    from radar_pipeline.warehouse.analysis import ReadCosts

    day = datetime(2026, 11, 2, tzinfo=UTC)
    window = timedelta(minutes=30)

    def at(target: str, *hours: float) -> list[deploys.DeployEvent]:
        return [deploys.DeployEvent(f"{target}-{h}", target, day + timedelta(hours=h)) for h in hours]

    def grouped(events, costs) -> list[list[str]]:
        return [[e.deploy_id for e in g] for g in shared_spans(events, window, costs)]

    raw = {"a": ReadCosts(1_000, 1.0, frozenset())}
    # raw days: only overlapping windows share, and over two hours at most
    assert grouped(at("a", 1, 1.5, 3, 4, 4.25, 4.5, 4.75, 5, 5.25, 5.5), raw) == [
        ["a-1", "a-1.5"], ["a-3"], ["a-4", "a-4.25", "a-4.5", "a-4.75", "a-5"], ["a-5.25", "a-5.5"]
    ]  # fmt: skip
    # compacted days: a day's deploys share one read whatever their gaps, while the samples stay under the cap
    compacted = {"a": ReadCosts(1_000, 1.0, frozenset({day.date(), (day - timedelta(days=1)).date()}))}
    assert grouped(at("a", 1, 7, 13, 19), compacted) == [["a-1", "a-7", "a-13"], ["a-19"]]  # 19 h hold over a million
    assert grouped(at("a", 1, 7, 23.75), compacted) == [["a-1", "a-7"], ["a-23.75"]]  # its window ends on a raw day
    big = {"a": ReadCosts(int(SHARED_SAMPLES / 60 / 6), 1.0, compacted["a"].compacted_days)}  # 6 hours hold the cap
    assert grouped(at("a", 1, 4, 6, 8), big) == [["a-1", "a-4", "a-6"], ["a-8"]]  # 0:30 to 6:30, then 8 hours
    # targets never share; costs of another target do not apply
    assert grouped(at("a", 1) + at("b", 1.25) + at("a", 2), {"b": compacted["a"]}) == [["a-1"], ["a-2"], ["b-1.25"]]

    fast = {"a": ReadCosts(int(SHARED_SAMPLES / 60 / 24), 4.0, compacted["a"].compacted_days)}  # every 15 s: 6 hours
    assert grouped(at("a", 1, 4, 6, 8), fast) == [["a-1", "a-4", "a-6"], ["a-8"]]
    crowded = {"a": ReadCosts(int(SHARED_SAMPLES / 90), 1.0, frozenset())}  # the cap holds 90 minutes, raw days too
    assert grouped(at("a", 1, 1.25, 1.5, 1.75), crowded) == [["a-1", "a-1.25", "a-1.5"], ["a-1.75"]]


def test_a_warehouse_failure_before_the_analyses_fails_each_deploy_and_costs_are_optional(
    recorded, warehouse, warehouse_url, monkeypatch
):
    from radar_pipeline.steps import deploy_analysis
    from radar_pipeline.warehouse import analysis

    settings = _resources(warehouse_url)["analysis"].settings()

    def down(*args, **kwargs):
        raise sa.exc.OperationalError("SELECT", {}, Exception("canceling statement due to statement timeout"))

    with monkeypatch.context() as patched:
        patched.setattr(deploys, "get_many", down)
        outcome = list(deploy_analysis.analyse_deploys(deploy_analysis.AnalysisRun(warehouse, settings), recorded))
    assert [d for d, _ in outcome] == recorded and all(isinstance(r, sa.exc.OperationalError) for _, r in outcome)

    with monkeypatch.context() as patched:
        patched.setattr(analysis, "read_costs", down)  # only an optimisation: the deploys are still analysed
        outcome = dict(deploy_analysis.analyse_deploys(deploy_analysis.AnalysisRun(warehouse, settings), recorded))
    assert isinstance(outcome.pop("b-open"), deploy_analysis.AnalysisRefused)
    assert all(not isinstance(r, Exception) for r in outcome.values()), outcome
