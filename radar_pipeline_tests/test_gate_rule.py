"""The gate's rule twice, held to one answer (sql/0042, engine/gate.py): radar.deploy_state on stored verdict rows and
engine.gate.deploy_state on the same rows as a frame give the same state, margins, cleared share, largest open share,
tier counts and statements bounded within the gate factor: a clean pass, an open statement whose bound reaches far
beyond θ, many open statements whose bounds barely cross it, an open statement without a bound, a new statement, a ×1.5
slowdown holding 5% of the time, a detection, improvements only, a probably-slower statement too small to hold the
deploy, a heavy statement bounded within ×1.4 and one beyond it, many small open statements unchanged and slower
together, another θ; and after a later look decides the open statement. The canary arm (engine.canary.canary_state)
follows the same rule on its own columns."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from statistics import NormalDist

import numpy as np
import pandas as pd
import pytest
import sqlalchemy as sa

from radar_pipeline.engine.budget import look_clear_level
from radar_pipeline.engine.canary import canary_state
from radar_pipeline.engine.gate import GATE_FACTOR, GATE_Z, MAX_OPEN_EXCESS, MAX_TOTAL_EXCESS, deploy_state
from radar_pipeline.warehouse import deploys
from radar_pipeline.warehouse.analysis import deploy_states

NAN = float("nan")
# Per case, its statements: (verdict, tier, calls before, calls after, mean after ms, factor_bound[, deploy_log_factor,
# deploy_log_se]); the time after is calls × mean; each open statement that ran before the deploy may have added its
# excess T·(1 − (1 + θ)/u)⁺: a pass needs none above 1% of the time with a bound beyond ×1.4, and those within 1%
# together (Σ T·(f − 1.2) + z·se of the sum where estimated, their excess where not) at most 3%.
Row = tuple[str, str | None, int, int, float, float] | tuple[str, str | None, int, int, float, float, float, float]
CASES: dict[str, list[Row]] = {
    # 95% cleared; the open statement holds 4% with a bound of ×1.25 (adds 0.16%); 1% new (no calls before)
    "rule-pass": [
        ("no_regression", None, 900, 1000, 0.5, 1.1),
        ("no_regression", None, 400, 450, 1.0, 1.15),
        ("inconclusive", None, 40, 40, 1.0, 1.25),
        ("insufficient_data", None, 0, 10, 1.0, NAN),
    ],
    # 94% cleared, but the open statement holds 6% with a bound of ×2: it may have added 2.4%
    "rule-open-wide": [("no_regression", None, 900, 940, 1.0, 1.1), ("inconclusive", None, 60, 60, 1.0, 2.0)],
    # 70% cleared (engine 2.6 held it), three open statements of 10% each whose bounds barely cross ×1.2: 0.5% in all
    "rule-open-narrow": [
        ("no_regression", None, 700, 700, 1.0, 1.05),
        ("inconclusive", None, 100, 100, 1.0, 1.21),
        ("inconclusive", None, 100, 100, 1.0, 1.22),
        ("inconclusive", None, 100, 100, 1.0, 1.23),
    ],
    # 98.5% cleared; 1.5% left open without a bound (no calls in a span): all of it counts
    "rule-no-bound": [("no_regression", None, 985, 985, 1.0, 1.1), ("insufficient_data", None, 3, 15, 1.0, NAN)],
    # a ×1.5 slowdown holding 5% of the time, not detected: its bound ×1.55 adds 1.13%
    "rule-x1.5-at-5": [("no_regression", None, 950, 950, 1.0, 1.1), ("inconclusive", None, 50, 50, 1.0, 1.55)],
    "rule-detected": [("detected", None, 10, 10, 1.0, NAN), ("no_regression", None, 990, 990, 1.0, 1.1)],
    # only faster: every statement cleared, two of them improved
    "rule-improved": [
        ("no_regression", "improved", 500, 500, 0.2, 0.3),
        ("no_regression", "improved", 300, 300, 0.1, 0.5),
        ("no_regression", None, 700, 700, 1.0, 1.1),
    ],
    # a probably slower statement with 2% of the time (bound ×1.6: adds 0.5%): a warning, not a hold
    "rule-probably-slower": [
        ("no_regression", None, 980, 980, 1.0, 1.1),
        ("inconclusive", "probably_slower", 20, 20, 1.0, 1.6),
    ],
    # forty open statements of 2% each, none adding 1% (each bound ×1.5: 0.4%), together 16%: too much left open
    "rule-many-open": [("no_regression", None, 200, 200, 1.0, 1.1)] + [("inconclusive", None, 20, 20, 1.0, 1.5)] * 40,
    # the heaviest statement, 38% of the time, unchanged at ×1.03 but wandering: bound ×1.3 (adds 2.9%), within ×1.4
    "rule-heavy-within": [
        ("no_regression", None, 620, 620, 1.0, 1.1),
        ("inconclusive", None, 380, 380, 1.0, 1.3, np.log(1.03), 0.1),
    ],
    # the same statement with a bound of ×1.6: it could hide a ×1.5 slowdown
    "rule-heavy-beyond": [
        ("no_regression", None, 620, 620, 1.0, 1.1),
        ("inconclusive", None, 380, 380, 1.0, 1.6, np.log(1.1), 0.2),
    ],
    # 150 sparse statements of 0.4% each, unchanged (×1.0, se 0.25) with bounds of ×2: 24% by the sum of their bounds,
    # nothing jointly
    "rule-many-small-unchanged": [("no_regression", None, 400, 400, 1.0, 1.1)]
    + [("inconclusive", None, 4, 4, 1.0, 2.0, 0.0, 0.25)] * 150,
    # the same statements all ×1.5 slower: 12% beyond θ jointly
    "rule-many-small-slower": [("no_regression", None, 400, 400, 1.0, 1.1)]
    + [("inconclusive", None, 4, 4, 1.0, 2.0, np.log(1.5), 0.25)] * 150,
    # five statements of 15% each bounded within ×1.4 (×1.38), all ×1.3 slower: none holds alone, together 5.8%
    "rule-several-bounded": [("no_regression", None, 250, 250, 1.0, 1.1)]
    + [("inconclusive", None, 150, 150, 1.0, 1.38, np.log(1.3), 0.05)] * 5,
    # an excess exactly at the bar (2.5% at ×2: 1%) is within it, in both copies
    "rule-at-the-bar": [("no_regression", None, 975, 975, 1.0, 1.1), ("inconclusive", None, 25, 25, 1.0, 2.0)],
    # a bound of 0 is no bound: all of the statement's 40% counts, and it holds the deploy
    "rule-bound-zero": [("no_regression", None, 600, 600, 1.0, 1.1), ("inconclusive", None, 400, 400, 1.0, 0.0)],
    # estimated and unestimated open statements in one sum
    "rule-mixed": [
        ("no_regression", None, 900, 900, 1.0, 1.1),
        ("inconclusive", None, 50, 50, 1.0, 1.3, 0.0, 0.1),
        ("inconclusive", None, 5, 5, 1.0, 1.6),
        ("insufficient_data", None, 3, 3, 1.0, NAN),
    ],
    # estimates beyond what the joint sum takes (e^60 would overflow its squares): those statements add their excess
    "rule-extreme-estimate": [
        ("no_regression", None, 980, 980, 1.0, 1.1),
        ("inconclusive", None, 10, 10, 1.0, 1.25, 60.0, 0.1),
        ("inconclusive", None, 10, 10, 1.0, 1.25, 0.0, 1e300),
    ],
}
EXPECTED = {
    "rule-pass": "pass",
    "rule-open-wide": "inconclusive",
    "rule-open-narrow": "pass",
    "rule-no-bound": "inconclusive",
    "rule-x1.5-at-5": "inconclusive",
    "rule-detected": "fail",
    "rule-improved": "pass",
    "rule-probably-slower": "pass",
    "rule-many-open": "inconclusive",
    "rule-heavy-within": "pass",
    "rule-heavy-beyond": "inconclusive",
    "rule-many-small-unchanged": "pass",
    "rule-many-small-slower": "inconclusive",
    "rule-extreme-estimate": "pass",
    "rule-several-bounded": "inconclusive",
    "rule-at-the-bar": "pass",
    "rule-bound-zero": "inconclusive",
    "rule-mixed": "pass",
}
COLUMNS = ["verdict", "tier", "calls_before", "calls_after", "mean_after_ms", "factor_bound"]
ESTIMATES = ["deploy_log_factor", "deploy_log_se"]


def _frame(rows: list[Row]) -> pd.DataFrame:
    return pd.DataFrame([(*r, NAN, NAN) if len(r) == len(COLUMNS) else r for r in rows], columns=COLUMNS + ESTIMATES)


def _store(engine: sa.Engine, deploy_id: str, frame: pd.DataFrame, threshold: float = 0.2) -> None:
    """The deploy, its analysis (with θ among its settings) and its verdict rows, as an analysis stores them (only
    what the rule reads)."""
    at = datetime.now(UTC) - timedelta(hours=2)
    deploys.record(engine, deploys.DeployEvent(deploy_id, "rule", at), configured_targets=["rule"])
    counts = frame["verdict"].value_counts()
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO radar.analysis (deploy_id, target, settings, engine_version, window_start, window_end, "
                "queries, detected, no_regression, inconclusive, insufficient_data) VALUES (:d, 'rule', :settings, "
                "'2.7', :lo, :hi, :n, :det, :nr, :inc, :ins)"
            ),
            {
                "d": deploy_id,
                "settings": json.dumps({"threshold": threshold}),
                "lo": at - timedelta(minutes=30),
                "hi": at + timedelta(minutes=30),
                "n": len(frame),
                **{
                    k: int(counts.get(v, 0))
                    for k, v in (
                        ("det", "detected"),
                        ("nr", "no_regression"),
                        ("inc", "inconclusive"),
                        ("ins", "insufficient_data"),
                    )
                },
            },
        )
        conn.execute(
            sa.text(
                "INSERT INTO radar.verdict (deploy_id, target, dbid, userid, queryid, toplevel, fingerprint, verdict, "
                "reason, tier, n_before, n_after, calls_before, calls_after, mean_before_ms, mean_after_ms, "
                "factor_bound, deploy_log_factor, deploy_log_se) VALUES (:d, 'rule', 5, 10, :q, true, :q, :verdict, "
                ":reason, :tier, 30, 30, :before, :calls, :mean, :mean, :bound, :lf, :se)"
            ),
            [
                {
                    "d": deploy_id,
                    "q": q,
                    "verdict": r.verdict,
                    "reason": "significant" if r.verdict == "detected" else "not_significant",
                    "tier": None if pd.isna(r.tier) else r.tier,
                    "before": int(r.calls_before),
                    "calls": int(r.calls_after),
                    "mean": float(r.mean_after_ms),
                    "bound": None if pd.isna(r.factor_bound) else float(r.factor_bound),
                    "lf": None if pd.isna(r.deploy_log_factor) else float(r.deploy_log_factor),
                    "se": None if pd.isna(r.deploy_log_se) else float(r.deploy_log_se),
                }
                for q, r in enumerate(frame.itertuples(), start=1)
            ],
        )


def _compare(row: pd.Series, frame: pd.DataFrame, **bars: float) -> None:
    engine_says = deploy_state(frame, **bars)
    assert row["state"] == engine_says.state
    assert row["open_excess_share"] == pytest.approx(engine_says.open_excess, abs=1e-12)
    assert row["largest_excess_share"] == pytest.approx(engine_says.largest_excess, abs=1e-12)
    assert row["cleared_share"] == pytest.approx(engine_says.cleared_share, abs=1e-12)
    assert row["largest_open_share"] == pytest.approx(engine_says.largest_open_share, abs=1e-12)
    assert int(row["detected"]) == engine_says.detected
    assert int(row["improved"]) == engine_says.improved
    assert int(row["probably_slower"]) == engine_says.probably_slower
    assert int(row["bounded_open"]) == engine_says.bounded
    bounded = NAN if row["largest_bounded_factor"] is None else float(row["largest_bounded_factor"])
    assert bounded == pytest.approx(engine_says.largest_bound, nan_ok=True)
    assert row["largest_bounded_excess_share"] == pytest.approx(engine_says.bounded_excess, abs=1e-12)


def test_the_view_and_the_engine_give_each_deploy_the_same_answer(warehouse):
    frames = {deploy_id: _frame(rows) for deploy_id, rows in CASES.items()}
    for deploy_id, frame in frames.items():
        _store(warehouse, deploy_id, frame)
    with warehouse.connect() as conn:
        states = deploy_states(conn, list(frames)).set_index("deploy_id")
    assert states["state"].to_dict() == EXPECTED
    # one definition of the defaults: engine.gate's
    assert (states["max_open_excess"] == MAX_OPEN_EXCESS).all() and (
        states["max_total_excess"] == MAX_TOTAL_EXCESS
    ).all()
    for deploy_id, frame in frames.items():
        _compare(states.loc[deploy_id], frame)
    assert states.loc["rule-pass", "open_excess_share"] == pytest.approx(0.04 * (1 - 1.2 / 1.25))
    assert states.loc["rule-open-wide", "largest_excess_share"] == pytest.approx(0.024)
    assert states.loc["rule-open-narrow", "cleared_share"] == pytest.approx(0.7)
    assert states.loc["rule-no-bound", "largest_excess_share"] == pytest.approx(0.015)
    assert states.loc["rule-improved", "improved"] == 2 and states.loc["rule-improved", "open_excess_share"] == 0
    assert states.loc["rule-probably-slower", "probably_slower"] == 1
    assert states.loc["rule-many-open", "largest_excess_share"] == pytest.approx(0.02 * (1 - 1.2 / 1.5))
    assert states.loc["rule-many-open", "open_excess_share"] == pytest.approx(0.8 * (1 - 1.2 / 1.5))
    heavy = states.loc["rule-heavy-within"]
    assert heavy["bounded_open"] == 1 and heavy["largest_bounded_factor"] == pytest.approx(1.3)
    assert heavy["largest_excess_share"] == 0 and heavy["gate_factor"] == GATE_FACTOR
    assert heavy["largest_bounded_excess_share"] == pytest.approx(0.38 * (1 - 1.2 / 1.3))
    # it counts in the sum at its estimate, ×1.03, without its noise (its bound within ×1.4 accepted it): it lends
    # the deploy 38% · (1 − 1.2/1.03) of tolerance, so nothing is left
    assert heavy["open_excess_share"] == 0
    assert states.loc["rule-heavy-beyond", "largest_excess_share"] == pytest.approx(0.38 * (1 - 1.2 / 1.6))
    assert states.loc["rule-many-small-unchanged", "open_excess_share"] == 0
    slower = 0.6 * (1 - 1.2 / 1.5) + GATE_Z * np.sqrt(150) * 0.004 * 1.2 * 0.25 / 1.5
    assert states.loc["rule-many-small-slower", "open_excess_share"] == pytest.approx(slower)
    assert GATE_Z == pytest.approx(NormalDist().inv_cdf(look_clear_level(0.95, 0)), abs=1e-12)  # the first look's
    assert states.loc["rule-extreme-estimate", "open_excess_share"] == pytest.approx(2 * 0.01 * (1 - 1.2 / 1.25))
    several = states.loc["rule-several-bounded"]
    assert several["bounded_open"] == 5 and 0.75 * (1 - 1.2 / 1.3) > MAX_TOTAL_EXCESS  # at their estimates: 5.8%
    assert several["open_excess_share"] == pytest.approx(0.75 * (1 - 1.2 / 1.3))
    assert states.loc["rule-at-the-bar", "largest_excess_share"] == MAX_OPEN_EXCESS
    assert states.loc["rule-bound-zero", "largest_excess_share"] == pytest.approx(0.4)

    # The bars are settings: per call, session or database.
    with warehouse.connect() as conn:
        loose = deploy_states(conn, list(frames), max_open_excess=0.03, max_total_excess=0.2).set_index("deploy_id")
    assert loose.loc["rule-open-wide", "state"] == "pass" and loose.loc["rule-many-open", "state"] == "pass"
    for deploy_id, frame in frames.items():
        _compare(loose.loc[deploy_id], frame, max_open_excess=0.03, max_total_excess=0.2)
    with warehouse.connect() as conn:
        conn.execute(sa.text("SET radar.max_open_excess = '0.001'"))
        conn.execute(sa.text("SET radar.gate_factor = '1.2'"))
        strict = deploy_states(conn, list(frames)).set_index("deploy_id")
    assert strict.loc["rule-pass", "state"] == "inconclusive" and strict.loc["rule-improved", "state"] == "pass"
    assert strict.loc["rule-heavy-within", "state"] == "inconclusive"
    for deploy_id, frame in frames.items():
        _compare(strict.loc[deploy_id], frame, max_open_excess=0.001, gate_factor=1.2)
    with pytest.raises(ValueError, match="max_open_excess"), warehouse.connect() as conn:
        deploy_states(conn, ["rule-pass"], max_open_excess=2)
    with pytest.raises(ValueError, match="gate_factor"), warehouse.connect() as conn:
        deploy_states(conn, ["rule-pass"], gate_factor=0.5)


def test_the_tolerance_is_the_analysis_own(warehouse):
    # θ = 0.5: an open statement holding 10% with a bound of ×1.6 may have added 0.625% beyond it (at θ = 0.2, 2.5%)
    frame = _frame([("no_regression", None, 900, 900, 1.0, 1.1), ("inconclusive", None, 100, 100, 1.0, 1.6)])
    _store(warehouse, "rule-theta", frame, threshold=0.5)
    with warehouse.connect() as conn:
        row = deploy_states(conn, ["rule-theta"]).iloc[0]
    assert row["state"] == "pass" and row["open_excess_share"] == pytest.approx(0.1 * (1 - 1.5 / 1.6))
    _compare(row, frame, threshold=0.5)
    assert deploy_state(frame).state == "inconclusive"


def test_a_later_look_that_decides_the_open_statement_moves_the_state(warehouse):
    frame = _frame(CASES["rule-open-wide"])
    _store(warehouse, "rule-look", frame)
    with warehouse.connect() as conn:
        assert deploy_states(conn, ["rule-look"]).iloc[0]["state"] == "inconclusive"
    # A later look clears the open statement: its row is replaced, with the look's own calls after, and keeps the first
    # look's execution time (first_exec_ms), which the rule weighs.
    with warehouse.begin() as conn:
        conn.execute(
            sa.text(
                "UPDATE radar.verdict SET verdict = 'no_regression', reason = 'below_threshold', look = 1, "
                "first_exec_ms = calls_after * mean_after_ms, calls_after = calls_after * 4, tier = 'improved' "
                "WHERE deploy_id = 'rule-look' AND verdict = 'inconclusive'"
            )
        )
    looked = frame.assign(verdict="no_regression", tier=[None, "improved"])
    with warehouse.connect() as conn:
        row = deploy_states(conn, ["rule-look"]).iloc[0]
    assert row["state"] == "pass" and row["cleared_share"] == pytest.approx(1.0)
    _compare(row, looked)
    # and one that finds it slower fails the deploy, as the engine's rule does on the same rows
    with warehouse.begin() as conn:
        conn.execute(
            sa.text(
                "UPDATE radar.verdict SET verdict = 'detected', tier = NULL WHERE deploy_id = 'rule-look' AND look = 1"
            )
        )
    with warehouse.connect() as conn:
        row = deploy_states(conn, ["rule-look"]).iloc[0]
    _compare(row, frame.assign(verdict=["no_regression", "detected"]))
    assert row["state"] == "fail"


def test_a_group_marked_probably_slower_is_counted_at_its_latest_look(warehouse):
    _store(warehouse, "rule-group", _frame(CASES["rule-pass"]))
    members = "CAST('{5}' AS oid[]), CAST('{10}' AS oid[]), CAST('{1}' AS bigint[]), CAST('{true}' AS boolean[])"
    with warehouse.begin() as conn:
        for group_id, look, verdict, tier in (
            ("g-open", 0, "inconclusive", "probably_slower"),
            ("g-later", 0, "inconclusive", "probably_slower"),
            ("g-later", 1, "no_regression", None),  # decided at a later look: no longer probably slower
        ):
            conn.execute(
                sa.text(
                    "INSERT INTO radar.group_verdict (deploy_id, target, group_id, kind, label, verdict, members, "
                    "members_above, statements, member_dbid, member_userid, member_queryid, member_toplevel, look, "
                    f"tier) VALUES ('rule-group', 'rule', :g, 'shape', :g, :v, 3, 2, 3, {members}, :k, :tier)"
                ),
                {"g": group_id, "v": verdict, "k": look, "tier": tier},
            )
    with warehouse.connect() as conn:
        row = deploy_states(conn, ["rule-group"]).iloc[0]
    assert row["groups_probably_slower"] == 1 and row["groups_detected"] == 0 and row["state"] == "pass"


def test_the_canary_arm_follows_the_same_rule():
    canary = pd.DataFrame(
        {
            "verdict": ["no_regression", "inconclusive"],
            "calls_canary": [940, 60],
            "mean_canary_ms": [1.0, 1.0],
            "calls_stable": [5000, 300],
            "factor_bound": [1.1, 2.0],
        }
    )
    assert canary_state(canary) == "inconclusive"  # the open statement holds 6% and may have added 2.4%
    assert canary_state(canary, max_open_excess=0.03) == "pass"
    assert canary_state(canary, max_open_excess=0.03, max_total_excess=0.02) == "inconclusive"
    assert canary_state(canary.assign(factor_bound=[1.1, 1.25])) == "pass"  # 6% · (1 − 1.2/1.25): 0.24%
    assert canary_state(canary.assign(verdict=["no_regression", "detected"])) == "fail"
    assert canary_state(canary.assign(calls_canary=[0, 0])) == "inconclusive"  # nothing ran
    assert canary_state(canary.assign(mean_canary_ms=[np.nan, 1.0])) == "inconclusive"
