"""Three answers per statement and one per deploy, on real PostgreSQL with synthetic counters (engine 2.5, sql/0017):
real analyses store detected, no_regression and inconclusive verdicts, and radar.deploy_state gives each deploy
pass, fail, inconclusive or pending, with the share it passes on set per call, per session or not at all.

Each deploy has a target of its own, scraped every 10 s for 200 s each side (20 calls an interval unless said):
- st-pass: two busy statements unchanged (cleared) and a sparse, noisy one (inconclusive) holding under 1% of the time;
- st-fail: the same, with the first three times slower from the deploy on (detected);
- st-unsure: a heavy statement so noisy its bound reaches beyond the gate factor ×1.4 (inconclusive), beside a cleared
  light one;
- st-heavy: a heavy statement, unchanged, whose noise leaves its bound between 1 + θ and the gate factor (inconclusive,
  bounded within ×1.4: it passes), beside a cleared light one;
- st-pending: recorded, not analysed.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import dagster as dg
import numpy as np
import pandas as pd
import pytest
import sqlalchemy as sa

from radar_pipeline.defs.deploys.deploy_verdicts import deploy_verdicts
from radar_pipeline.defs.resources import AnalysisResource, TargetsResource, WarehouseResource
from radar_pipeline.engine import EngineSettings, Verdict
from radar_pipeline.engine.gate import MAX_OPEN_EXCESS, MAX_TOTAL_EXCESS, PASS_SHARE
from radar_pipeline.steps.deploy_analysis import AnalysisRun, analyse_deploy
from radar_pipeline.warehouse import deploys
from radar_pipeline.warehouse.analysis import deploy_states, write_analysis

from .helpers import store_counters

SETTINGS = EngineSettings(window=timedelta(seconds=200), tolerance_floor=timedelta(seconds=30))
TEXTS = {1: "SELECT * FROM orders WHERE id = $1", 2: "SELECT * FROM carts WHERE owner = $1", 3: "SELECT report()"}
# Per deploy and statement: (mean ms, ×factor from the deploy on, calls per interval, log-normal noise per interval).
PLANS = {
    "st-pass": {1: (1.0, 1.0, 20, 0.03), 2: (0.5, 1.0, 20, 0.03), 3: (0.05, 1.0, 1, 0.6)},
    "st-fail": {1: (1.0, 3.0, 20, 0.03), 2: (0.5, 1.0, 20, 0.03), 3: (0.05, 1.0, 1, 0.6)},
    "st-unsure": {1: (5.0, 1.0, 1, 1.6), 2: (0.1, 1.0, 20, 0.03)},
    "st-heavy": {1: (5.0, 1.0, 20, 0.2), 2: (0.1, 1.0, 20, 0.03)},
}


def _counters(at: datetime, plan: dict, rng: np.random.Generator) -> pd.DataFrame:
    """41 scrapes 10 s apart centred on `at`: each statement's interval means at its level (× its factor after the
    deploy), with its noise, over its calls."""
    rows = []
    for queryid, (mean, factor, calls, noise) in plan.items():
        count, total = 1000, 1000 * mean
        for j in range(-20, 21):
            level = mean * (factor if j > 0 else 1.0) * rng.lognormal(-(noise**2) / 2, noise)
            count, total = count + calls, total + calls * level
            rows.append((queryid, at + timedelta(seconds=10 * j), count, total))
    return pd.DataFrame(rows, columns=["queryid", "captured_at", "calls", "total_exec_time"])


@pytest.fixture
def recorded(warehouse) -> datetime:
    """The three analysable deploys (their windows closed an hour ago) and the pending one, with their counters."""
    at = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)
    rng = np.random.default_rng(24)
    for deploy_id, plan in PLANS.items():
        store_counters(warehouse, deploy_id, _counters(at, plan, rng), {q: TEXTS[q] for q in plan})
        deploys.record(warehouse, deploys.DeployEvent(deploy_id, deploy_id, at))
    deploys.record(warehouse, deploys.DeployEvent("st-pending", "st-pass", datetime.now(UTC) - timedelta(seconds=5)))
    return at


def _verdicts(warehouse, deploy_id: str) -> pd.Series:
    with warehouse.connect() as conn:
        return pd.read_sql(
            sa.text("SELECT queryid, verdict FROM radar.verdict WHERE deploy_id = :d"), conn, params={"d": deploy_id}
        ).set_index("queryid")["verdict"]


def _states(warehouse, max_open_excess: float | None = None, max_total_excess: float | None = None) -> dict[str, str]:
    with warehouse.connect() as conn:
        found = deploy_states(conn, ["st-pending", *PLANS], max_open_excess, max_total_excess)
    return dict(zip(found["deploy_id"], found["state"], strict=True))


def test_real_analyses_store_three_answers_and_each_deploy_gets_its_state(recorded, warehouse):
    for deploy_id in PLANS:
        analyse_deploy(AnalysisRun(warehouse, SETTINGS), deploy_id)
    fail = _verdicts(warehouse, "st-fail")
    assert fail.to_dict() == {1: Verdict.DETECTED, 2: Verdict.NO_REGRESSION, 3: Verdict.INCONCLUSIVE}
    assert _verdicts(warehouse, "st-pass").to_dict() == {
        1: Verdict.NO_REGRESSION,
        2: Verdict.NO_REGRESSION,
        3: Verdict.INCONCLUSIVE,
    }
    assert _verdicts(warehouse, "st-unsure").to_dict() == {1: Verdict.INCONCLUSIVE, 2: Verdict.NO_REGRESSION}
    with warehouse.connect() as conn:
        counts = conn.execute(
            sa.text(
                "SELECT detected, no_regression, inconclusive, insufficient_data FROM radar.analysis "
                "WHERE deploy_id = 'st-fail'"
            )
        ).one()
        stored = pd.read_sql(sa.text("SELECT * FROM radar.deploy_state ORDER BY deploy_id"), conn).set_index(
            "deploy_id"
        )
    assert tuple(counts) == (1, 1, 1, 0)

    assert _states(warehouse) == {
        "st-pending": "pending",
        "st-pass": "pass",
        "st-fail": "fail",
        "st-unsure": "inconclusive",
        "st-heavy": "pass",
    }
    # The shares behind them: the sparse statement holds under 1% of st-pass's time, the noisy one most of st-unsure's.
    assert stored.loc["st-pass", "cleared_share"] > 0.99 and 0.2 < stored.loc["st-unsure", "cleared_share"] < 0.5
    assert (stored["pass_share"] == PASS_SHARE).all() and (stored["max_open_excess"] == MAX_OPEN_EXCESS).all()
    assert (stored["max_total_excess"] == MAX_TOTAL_EXCESS).all()
    # the margin behind them: what the open statements may have added beyond θ, at their bounds
    assert stored.loc["st-pass", "largest_excess_share"] < 0.01 < stored.loc["st-unsure", "largest_excess_share"]
    # st-heavy's statement holds 98% of the time; its bound lies within ×1.4, so it holds nothing, and is counted
    heavy = stored.loc["st-heavy"]
    assert heavy["bounded_open"] == 1 and 1.2 < heavy["largest_bounded_factor"] <= heavy["gate_factor"] == 1.4
    with warehouse.connect() as conn:  # a team that wants every heavy statement within 1 + θ sets the factor there
        assert deploy_states(conn, ["st-heavy"], gate_factor=1.2).iloc[0]["state"] == "inconclusive"
    assert stored.loc["st-fail", ["detected", "no_regression", "inconclusive", "insufficient_data"]].tolist() == [
        1,
        1,
        1,
        0,
    ]
    assert pd.isna(stored.loc["st-pending", "analysed_at"]) and stored.loc["st-pending", "detected"] == 0

    # The bar is a setting: per call (what `radar gate` will pass), or per session and database. A team that accepts
    # whatever the open statements may have added passes st-unsure; none at all holds st-pass (its sparse statement).
    assert _states(warehouse, max_open_excess=1.0, max_total_excess=1.0)["st-unsure"] == "pass"
    with warehouse.connect() as conn:
        conn.execute(sa.text("SET radar.max_open_excess = '0'"))
        assert conn.execute(
            sa.text("SELECT state FROM radar.deploy_state WHERE deploy_id = 'st-pass'")
        ).scalar_one() == ("inconclusive")
    with pytest.raises(ValueError, match="max_open_excess"), warehouse.connect() as conn:
        deploy_states(conn, ["st-pass"], max_open_excess=1.5)

    # An analysis stored before the clearing rule (no inconclusive count) never passes: its no_regression meant less.
    with warehouse.begin() as conn:
        conn.execute(sa.text("UPDATE radar.analysis SET inconclusive = NULL WHERE deploy_id = 'st-pass'"))
    assert _states(warehouse)["st-pass"] == "inconclusive"


def test_the_materialization_shows_the_deploy_state_first(recorded, warehouse, warehouse_url):
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("deploys", ["st-pass"])
        result = dg.materialize(
            [deploy_verdicts],
            partition_key="st-pass",
            resources={
                "warehouse": WarehouseResource(url=warehouse_url),
                "analysis": AnalysisResource(
                    window_seconds=200, scrape_interval_seconds=10, tolerance_floor_seconds=30
                ),
                "targets": TargetsResource(spec="st-pass=postgresql://nowhere.invalid/none"),
            },
            instance=instance,
        )
    assert result.success
    metadata = result.asset_materializations_for_node("deploy_verdicts")[0].metadata
    assert list(metadata)[:3] == ["state", "cleared_share", "pass_share"]
    assert metadata["state"].value == "pass" and metadata["cleared_share"].value > 0.99
    # the rule's margin and the tiers (sql/0036): a table of the statements marked, with their tier
    assert 0 < metadata["largest_excess_share"].value < 0.01 and metadata["max_open_excess"].value == 0.01
    assert metadata["open_excess_share"].value < 0.03 and metadata["max_total_excess"].value == 0.03
    assert [c.name for c in metadata["tiers"].schema.columns][:3] == ["tier", "query", "queryid"]
    assert metadata["improved"].value + metadata["probably_slower"].value == len(metadata["tiers"].records)
    assert [metadata[v].value for v in ("detected", "no_regression", "inconclusive", "insufficient_data")] == [
        0,
        2,
        1,
        0,
    ]


def test_an_analysis_stores_each_statements_tier(warehouse):
    # The rows stored say what the analysis found, tier included (sql/0036), and the deploy's state counts the tiers.
    at = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)
    plan = {1: (1.0, 0.5, 20, 0.03), 2: (0.5, 1.0, 20, 0.03), 3: (0.05, 1.0, 1, 0.6)}
    store_counters(warehouse, "st-faster", _counters(at, plan, np.random.default_rng(7)), {q: TEXTS[q] for q in plan})
    deploys.record(warehouse, deploys.DeployEvent("st-faster", "st-faster", at))
    result = analyse_deploy(AnalysisRun(warehouse, SETTINGS), "st-faster")

    def stored() -> dict[int, str | None]:
        with warehouse.connect() as conn:
            rows = pd.read_sql(sa.text("SELECT queryid, tier FROM radar.verdict WHERE deploy_id = 'st-faster'"), conn)
        return _tiers(rows)

    assert stored() == _tiers(result.verdicts)
    # The same analysis written with tiers on its rows (whatever this engine's statistics gave them) keeps them.
    tiered = result.verdicts.copy()
    tiered["tier"] = np.array(["improved", None, "probably_slower"], dtype=object)[tiered["queryid"].to_numpy() - 1]
    with warehouse.begin() as conn:
        write_analysis(conn, "st-faster", "st-faster", SETTINGS.to_dict(), result.window, tiered, None)
    assert stored() == {1: "improved", 2: None, 3: "probably_slower"}
    with warehouse.connect() as conn:
        state = deploy_states(conn, ["st-faster"]).iloc[0]
    assert state["improved"] == 1 and state["probably_slower"] == 1


def _tiers(rows: pd.DataFrame) -> dict[int, str | None]:
    return {int(q): None if pd.isna(t) else str(t) for q, t in zip(rows["queryid"], rows["tier"], strict=True)}
