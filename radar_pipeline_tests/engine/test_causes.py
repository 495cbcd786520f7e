"""The counter causes of a detection (engine/causes.py): each from synthetic counters whose answer is known, the order
between them, a counter the server lacks, and the null case."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from radar_pipeline.engine import analyse
from radar_pipeline.lab.synthetic import DEPLOY, counters, step

# A statement whose counters did not move per call: one row, no blocks read, a few buffers hit, no planning, no temp,
# two parallel workers planned and launched, no JIT, some WAL.
FLAT = {
    "rows": 1.0,
    "shared_blks_read": 0.0,
    "shared_blks_hit": 11.0,
    "total_plan_time": 0.2,
    "temp_blks_written": 0.0,
    "parallel_workers_to_launch": 2.0,
    "parallel_workers_launched": 2.0,
    "jit_time": 0.0,
    "wal_bytes": 200.0,
    "wal_buffers_full": 0.0,
}


def levels(before: float, after: float) -> np.ndarray:
    return np.array([before] * 30 + [after] * 30)


def slowed(seed: int = 0, after: float = 3.0, **changed: tuple[float, float]) -> pd.Series:
    """The verdict of one statement slowed from 1 ms to `after` ms per call at the deploy, its counters per call FLAT
    but for `changed` (name=(before, after); NaN: the server lacks the counter)."""
    per_call = {name: levels(*changed[name]) if name in changed else value for name, value in FLAT.items()}
    out = analyse(counters("q", step(after=after, seed=seed), per_call=per_call), DEPLOY)
    assert len(out) == 1 and out.iloc[0].verdict == "detected"
    return out.iloc[0]


def test_more_buffers_from_hits_alone():
    # The issue's ×1,302: buffers hit per call 11 → 3,408 with no block read (a scan of a cached table).
    r = slowed(after=13.0, shared_blks_hit=(11.0, 3408.0))
    assert r.cause == "more_buffers"
    assert r.cause_detail == "shared buffers touched per call ×310 (11 → 3,408)"
    assert (r.buffers_per_call_before, r.buffers_per_call_after) == pytest.approx((11.0, 3408.0))
    assert r.blks_read_per_call_after == pytest.approx(0.0)


def test_more_blocks_read_when_the_buffers_touched_did_not_rise():
    # The same blocks, no longer cached: read rose, touched (hit + read) did not.
    r = slowed(shared_blks_hit=(40.0, 0.5), shared_blks_read=(0.5, 40.0))
    assert r.cause == "more_blocks_read"
    assert r.cause_detail == "shared blocks read per call ×80 (0.5 → 40)"


def test_planning_time():
    r = slowed(after=1.5, total_plan_time=(0.2, 14.0))
    assert r.cause == "planning_time"
    assert r.cause_detail == "planning time per call ×70 (0.2 → 14 ms)"
    assert (r.plan_ms_per_call_before, r.plan_ms_per_call_after) == pytest.approx((0.2, 14.0))


def test_planning_time_that_explains_a_sliver_is_not_the_cause():
    # Planning per call rose ×2.5, but by 0.3 ms of the ~2.3 ms each call gained (execution and planning).
    assert slowed(total_plan_time=(0.2, 0.5)).cause == "unexplained"


def test_temp_spill():
    r = slowed(temp_blks_written=(0.0, 1024.0))
    assert r.cause == "temp_spill"
    assert r.cause_detail == "temp blocks written per call 0 → 1,024 (spilled to disk)"


@pytest.mark.parametrize(
    ("to_launch", "launched"),
    [((2.0, 2.0), (2.0, 0.0)), ((2.0, 0.0), (2.0, 0.0)), ((2.0, 2.0), (2.0, 1.0))],
    ids=["workers_not_launched", "parallel_plan_gone", "half_launched"],
)
def test_lost_parallelism(to_launch, launched):
    r = slowed(parallel_workers_to_launch=to_launch, parallel_workers_launched=launched)
    assert r.cause == "lost_parallelism"
    assert r.cause_detail.startswith(f"parallel workers launched per call 2 → {launched[1]:.0f} (planned 2 → ")


def test_workers_planned_but_not_launched():
    # More workers planned after the change, as many launched as before: the shortfall names it.
    r = slowed(parallel_workers_to_launch=(2.0, 4.0), parallel_workers_launched=(2.0, 2.0))
    assert r.cause == "lost_parallelism"


def test_jit():
    r = slowed(jit_time=(0.0, 1.8))
    assert r.cause == "jit"
    assert r.cause_detail.startswith("JIT time per call 0 → 1.8 ms of 2")


def test_jit_that_explains_a_sliver_is_not_the_cause():
    assert slowed(jit_time=(0.0, 0.2)).cause == "unexplained"


def test_wal_bound_from_bytes_and_from_full_buffers():
    r = slowed(wal_bytes=(200.0, 20_000.0))
    assert (r.cause, r.cause_detail) == ("wal_bound", "WAL bytes per call ×100 (200 → 20,000)")
    r = slowed(wal_buffers_full=(0.0, 0.5))
    assert (r.cause, r.cause_detail) == ("wal_bound", "WAL buffers full per call 0 → 0.5")
    # A few hundred bytes more per call is not a WAL-bound statement.
    assert slowed(wal_bytes=(200.0, 600.0)).cause == "unexplained"


def test_order_between_counter_causes():
    # Everything moved: the first in the brief's order wins; with its counter flat again, the next one.
    moved = {
        "rows": (1.0, 10.0),
        "total_plan_time": (0.2, 14.0),
        "temp_blks_written": (0.0, 1024.0),
        "parallel_workers_launched": (2.0, 0.0),
        "jit_time": (0.0, 1.8),
        "wal_bytes": (200.0, 20_000.0),
        "shared_blks_hit": (11.0, 3408.0),
        "shared_blks_read": (0.0, 50.0),
    }
    order = ["more_rows", "planning_time", "temp_spill", "lost_parallelism", "jit", "wal_bound", "more_buffers"]
    for counter, cause in zip(list(moved), order, strict=False):
        assert slowed(after=1.5, **moved).cause == cause
        moved.pop(counter)
    # The blocks read rose as the hits fell (the buffers touched did not rise): more_blocks_read; then nothing.
    assert slowed(after=1.5, shared_blks_hit=(61.0, 11.0), **moved).cause == "more_blocks_read"
    assert slowed(after=1.5).cause == "unexplained"


def test_a_counter_the_server_lacks_names_nothing():
    # PostgreSQL 15 has no parallel workers nor wal_buffers_full: NaN on both sides, or on one (an extension updated
    # inside the window), never a cause.
    nan = float("nan")
    r = slowed(parallel_workers_to_launch=(nan, nan), parallel_workers_launched=(nan, nan), wal_buffers_full=(nan, nan))
    assert r.cause == "unexplained" and np.isnan(r.workers_launched_per_call_before)
    assert slowed(parallel_workers_to_launch=(nan, 2.0), parallel_workers_launched=(nan, 0.0)).cause == "unexplained"
    assert slowed(wal_buffers_full=(nan, 5.0), temp_blks_written=(nan, 100.0)).cause == "unexplained"


@pytest.mark.parametrize("seed", range(8))
def test_null_nothing_fires_when_the_counters_did_not_move(seed):
    # Every counter present, noisy per interval (as real ones are) but at one level across the change.
    rng = np.random.default_rng(seed)
    per_call = {name: value * rng.lognormal(0, 0.3, 60) for name, value in FLAT.items()}
    out = analyse(counters("q", step(after=3.0, seed=seed), per_call=per_call), DEPLOY).iloc[0]
    assert (out.verdict, out.cause, out.cause_detail) == ("detected", "unexplained", None)


def test_fleet_wide_comes_before_the_counter_causes():
    frames = [
        counters(f"q{i}", step(after=2.0, seed=i), per_call={**FLAT, "temp_blks_written": levels(0, 500)})
        for i in range(6)
    ]
    out = analyse(pd.concat(frames), DEPLOY)
    assert set(out["cause"]) == {"fleet_wide"}
    assert set(analyse(pd.concat(frames[:2]), DEPLOY)["cause"]) == {"temp_spill"}


def _population(fleet: bool) -> pd.DataFrame:
    """Statements slowed with each counter cause, or none, and unslowed ones; two keys of one fingerprint (one query),
    a reset in one series, a counter that went down alone in another, counters the server lacks (NaN) in a third."""
    nan = float("nan")
    moved: list[dict[str, tuple[float, float]]] = [
        {"shared_blks_hit": (11.0, 3408.0)},
        {"total_plan_time": (0.2, 14.0)},
        {"temp_blks_written": (0.0, 1024.0)},
        {"parallel_workers_launched": (2.0, 0.0)},
        {"jit_time": (0.0, 1.8)},
        {"wal_bytes": (200.0, 20_000.0), "parallel_workers_to_launch": (nan, nan)},
        {"rows": (1.0, 10.0)},
        {},
    ]
    frames = []
    for i, changed in enumerate(moved):
        per_call = {name: levels(*changed[name]) if name in changed else value for name, value in FLAT.items()}
        frames.append(counters(f"slowed{i}", step(after=3.0, seed=i), per_call=per_call, fingerprint=100 + i))
    # one query under two keys (a queryid rotated): both halves slowed, their samples summed
    frames.append(counters("twin", step(after=3.0, seed=20), per_call={**FLAT, "temp_blks_written": levels(0, 9)}))
    frames[-1]["fingerprint"] = 7
    frames.append(counters("twin2", step(after=3.0, seed=21), per_call={**FLAT, "temp_blks_written": levels(0, 9)}))
    frames[-1]["fingerprint"] = 7
    frames[2].loc[45:, ["calls", "total_exec_time", *FLAT]] -= frames[2].loc[44, ["calls", "total_exec_time", *FLAT]]
    frames[3].loc[50, "wal_bytes"] = 0.0  # went down alone: that interval's WAL is unknown
    for i in range(5 if fleet else 20):
        frames.append(counters(f"flat{i}", step(after=1.0, seed=40 + i), per_call=FLAT, fingerprint=200 + i))
    return pd.concat(frames, ignore_index=True)


@pytest.mark.parametrize("fleet", [False, True], ids=["counter_causes", "fleet_wide"])
def test_detections_explained_from_their_own_counters_as_from_everyones(fleet):
    # The analysis decides on the counters every statement needs, then reads the causes' counters for the detected
    # statements alone: their figures and causes are exactly those of an analysis that had them for everyone.
    from radar_pipeline.engine import explain_detections
    from radar_pipeline.engine.causes import explained as causes_explained

    everyone = _population(fleet)
    base = everyone.drop(columns=[c for c in FLAT if c not in ("rows", "shared_blks_read")])
    whole = analyse(everyone, DEPLOY)
    decided = analyse(base, DEPLOY)
    detected = decided[decided["verdict"] == "detected"]
    assert len(detected) >= 9 and (detected["merged_keys"].str.len() > 0).any()
    asked = decided[causes_explained(decided)]  # the detections, and any statement probably slower
    keys = {*asked["query_key"], *(k for merged in asked["merged_keys"] for k in merged)}
    explained = explain_detections(everyone[everyone["query_key"].isin(keys)], decided, DEPLOY)
    pd.testing.assert_frame_equal(explained, whole, check_exact=True)
    assert set(whole.loc[whole["verdict"] == "detected", "cause"]) == (
        {"fleet_wide"}
        if fleet
        else {
            "more_buffers",
            "planning_time",
            "temp_spill",
            "lost_parallelism",
            "jit",
            "wal_bound",
            "more_rows",
            "unexplained",
        }
    )
    if not fleet:  # without the causes' counters the decision alone names other causes: the read is needed
        assert not decided["cause"].equals(whole["cause"])
    with pytest.raises(ValueError, match="counters lack the explained statement"):
        explain_detections(everyone[everyone["query_key"] == "slowed1"], decided, DEPLOY)


def test_a_statement_probably_slower_carries_its_cause_too():
    """Issue 39: a statement the family's budget holds back from a detection, but slower on its own evidence (tier
    probably_slower), had no cause on its row: the spill that slowed it is said, as for a detection, and computed
    again from its own counters as for one (explain_detections)."""
    from radar_pipeline.engine import EngineSettings, explain_detections

    per_call = {**FLAT, "temp_blks_written": levels(0.0, 1024.0)}
    settings = EngineSettings(false_alert_budget=1e-100)  # nothing can be detected
    everyone = counters("q", step(after=3.0, seed=1), per_call=per_call)
    (row,) = analyse(everyone, DEPLOY, settings).itertuples()
    assert (row.verdict, row.tier) == ("inconclusive", "probably_slower"), row
    assert row.cause == "temp_spill" and row.cause_detail == "temp blocks written per call 0 → 1,024 (spilled to disk)"
    decided = analyse(everyone.drop(columns=list(FLAT)), DEPLOY, settings)
    assert decided.iloc[0]["cause"] != "temp_spill"  # deciding did not read the spill: explaining it needs the read
    again = explain_detections(everyone, decided, DEPLOY, settings)
    assert (again.iloc[0]["cause"], again.iloc[0]["cause_detail"]) == (row.cause, row.cause_detail)
