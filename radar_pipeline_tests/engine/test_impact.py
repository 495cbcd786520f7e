"""The deploy's impact summary and the call-surge test (engine/impact.py), on simulated targets."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pandas as pd
import pytest

from radar_pipeline.engine import EngineSettings
from radar_pipeline.engine import impact as impact_module
from radar_pipeline.engine.impact import (
    ALL_DATABASES,
    CONTROL,
    PLANNABLE,
    UTILITY,
    Impact,
    classify,
    collateral_culprits,
    impact,
)
from radar_pipeline.lab.surges import DEPLOY, draw
from radar_pipeline_tests.engine import reference

SETTINGS = EngineSettings()


def busy(frame: pd.DataFrame, i: int) -> pd.Series:
    return frame.set_index("query_key").loc[i]


def test_a_traffic_doubling_is_not_a_surge() -> None:
    found = impact(draw(300, 1, traffic=2.0), DEPLOY, SETTINGS)
    assert found.changes.empty
    whole = found.summary.set_index("dbid").loc[ALL_DATABASES]
    assert whole["calls_per_min_after"] / whole["calls_per_min_before"] == pytest.approx(2.0, rel=0.3)


def test_an_n_plus_one_surge_is_named_and_a_slower_surge_is_a_surge() -> None:
    counters = draw(300, 2, surge={0: 20.0}, traffic=1.5)
    rate = counters[counters["query_key"] == 0]["calls"].diff().mean()
    assert rate > 5  # the seeded statement is not a sparse one
    found = impact(counters, DEPLOY, SETTINGS)
    row = busy(found.statements, 0)
    assert row["kind"] == "n_plus_one"
    assert row["share_ratio"] > 10 and row["p_family"] <= SETTINGS.false_alert_budget
    assert list(found.changes["query_key"]) == [0]
    verdicts = pd.DataFrame({"query_key": [0], "verdict": ["detected"]})
    assert busy(impact(counters, DEPLOY, SETTINGS, verdicts).statements, 0)["kind"] == "surge"


def test_new_statements_heavy_by_share_and_sparse_ones_are_not_new() -> None:
    found = impact(draw(300, 3, new={7: 5000.0, 8: 0.5}), DEPLOY, SETTINGS)
    heavy, light = busy(found.statements, 7), busy(found.statements, 8)
    assert heavy["kind"] == "new" and heavy["heavy"]
    assert heavy["calls_before"] == 0 and heavy["calls_after"] > 100_000  # its first row's calls count
    assert heavy["onset_at"] == DEPLOY + timedelta(minutes=1)
    assert light["kind"] == "new" and not light["heavy"]
    old = found.statements[~found.statements["query_key"].isin([7, 8])]
    assert not (old["kind"] == "new").any()  # statements with few calls before were there all along


def test_watching_that_began_inside_the_window_is_no_surge() -> None:
    """The target's first scrape lies inside the window (a warehouse created just before, as in test_deploy_analysis
    under load): every statement's first row holds all its calls since an unknown creation, not one interval's. A
    statement with a long history (a migration's thousands of calls) would otherwise swell the before side's total
    and make every steady statement's share "surge"."""
    counters = draw(50, 6)
    first = counters["captured_at"].min()
    history = counters["query_key"] == 0
    counters.loc[history, "calls"] += 50_000_000  # seen at the first scrape with a long past
    counters.loc[history, "total_exec_time"] += 50_000_000.0
    settings = EngineSettings(window=DEPLOY - first + timedelta(minutes=5))  # the window starts before the first scrape
    found = impact(counters, DEPLOY, settings, watched_since=first)
    assert found.changes.empty, found.changes[["query_key", "kind", "share_ratio"]]
    assert busy(found.statements, 0)["calls_before"] < 1_000_000


def test_a_quiet_target_s_new_statements_keep_their_first_interval() -> None:
    """A target watched long before the window whose old statements were idle in it: the statements the deploy
    brought are the only rows, first seen at the first scrape after the deploy — created since the scrape before, so
    every call counts (a one-off batch run in that interval alone included)."""
    counters = draw(3, 5, new={0: 5000.0, 1: 3000.0, 2: 2000.0})
    found = impact(counters, DEPLOY, SETTINGS, watched_since=DEPLOY - timedelta(days=3))
    rows = found.statements.set_index("query_key")
    assert (rows["calls_after"] == counters.groupby("query_key")["calls"].max()).all()
    assert (rows["kind"] == "new").all()

    times = DEPLOY + pd.to_timedelta(np.arange(1, 31) * 60, unit="s")
    batch = pd.DataFrame({"query_key": 0, "captured_at": times, "calls": 100_000, "total_exec_time": 5e6})
    steady = pd.DataFrame(
        {"query_key": 1, "captured_at": times, "calls": 10 + 10 * np.arange(30), "total_exec_time": 0.0}
    )
    steady["total_exec_time"] = steady["calls"] * 1.0
    one_off = pd.concat([batch, steady], ignore_index=True).assign(rows=lambda f: f["calls"], dbid=5)
    found = impact(one_off, DEPLOY, SETTINGS, watched_since=DEPLOY - timedelta(days=3))
    assert busy(found.statements, 0)["calls_after"] == 100_000


def test_stopped_and_rows_per_call() -> None:
    counters = draw(50, 4)
    last = counters["captured_at"] > DEPLOY
    keep = ~((counters["query_key"] == 1) & last)
    counters = counters[keep].copy()
    two = counters["query_key"] == 2
    counters.loc[two, "rows"] = (
        counters.loc[two, "calls"]
        .diff()
        .fillna(0)
        .mul(  # 1 row a call before, 10 after
            np.where(counters.loc[two, "captured_at"] > DEPLOY, 10, 1)
        )
        .cumsum()
    )
    statements = impact(counters, DEPLOY, SETTINGS).statements
    assert busy(statements, 1)["kind"] == "stopped"
    row = busy(statements, 2)
    assert row["kind"] == "rows_per_call"
    assert row["rows_per_call_after"] == pytest.approx(10.0) and row["rows_per_call_before"] == pytest.approx(1.0)


def test_summary_per_database_adds_up() -> None:
    found = impact(draw(100, 5), DEPLOY, SETTINGS)
    summary = found.summary.set_index("dbid")
    assert set(summary.index) == {ALL_DATABASES, 5, 7}
    for col in ("exec_ms_per_min_before", "exec_ms_per_min_after", "calls_per_min_after"):
        assert summary.loc[[5, 7], col].sum() == pytest.approx(summary.loc[ALL_DATABASES, col])
    assert summary.loc[ALL_DATABASES, "statements_before"] == 100


def test_contention_names_the_surging_statement() -> None:
    found = impact(draw(300, 6, new={9: 5000.0}), DEPLOY, SETTINGS)
    verdicts = pd.DataFrame(
        {
            "query_key": [3, 4, 5],
            "verdict": ["detected", "detected", "no_regression"],
            "cause": ["unexplained", "more_rows", None],
            "change_at": [DEPLOY + timedelta(minutes=2), DEPLOY, pd.NaT],
        }
    )
    culprits = collateral_culprits(verdicts, found, SETTINGS)
    assert culprits["culprit"].tolist() == [9, None, None]  # more_rows is the statement's own work
    far = verdicts.assign(change_at=[DEPLOY + timedelta(minutes=20), DEPLOY, pd.NaT])
    assert collateral_culprits(far, found, SETTINGS)["culprit"].tolist() == [None, None, None]
    # With databases known, only a statement of the detection's own database is named (9 is in database 7).
    other = pd.DataFrame(
        {
            "query_key": [2, 3],
            "dbid": [5, 7],
            "verdict": ["detected", "detected"],
            "cause": ["unexplained", "unexplained"],
            "change_at": [DEPLOY + timedelta(minutes=2)] * 2,
        }
    )
    assert collateral_culprits(other, found, SETTINGS)["culprit"].tolist() == [None, 9]


def test_settings_are_validated_and_recorded() -> None:
    assert EngineSettings().to_dict()["surge_ratio"] == 2.0
    assert EngineSettings().to_dict()["new_statement_share"] == 0.05
    for bad in ({"surge_ratio": 0.5}, {"new_statement_share": 0.0}):
        with pytest.raises(ValueError):
            EngineSettings(**bad)


def test_a_rotated_queryid_is_not_new() -> None:
    counters = draw(20, 8).assign(fingerprint=lambda f: f["query_key"])
    rotated = (counters["query_key"] == 3) & (counters["captured_at"] > DEPLOY)
    counters.loc[rotated, "query_key"] = 99  # the same statement under a new queryid after the deploy
    counters.loc[rotated, "calls"] -= counters.loc[rotated, "calls"].min() - 5  # a new entry counts from zero
    statements = impact(counters, DEPLOY, SETTINGS).statements
    assert not (statements["kind"] == "new").any()
    assert len(statements) == 20


def test_row_order_does_not_matter() -> None:
    counters = draw(60, 9, new={4: 30.0}, surge={5: 10.0})
    ordered = impact(counters, DEPLOY, SETTINGS).statements
    shuffled = impact(counters.sample(frac=1.0, random_state=1), DEPLOY, SETTINGS).statements
    columns = ["kind", "calls_before", "calls_after", "exec_ms_per_min_after", "p_value"]
    pd.testing.assert_frame_equal(
        ordered.set_index("query_key").sort_index()[columns], shuffled.set_index("query_key").sort_index()[columns]
    )
    assert busy(ordered, 4)["kind"] == "new" and busy(ordered, 5)["kind"] == "n_plus_one"


def _counters(specs: dict[int, dict]) -> pd.DataFrame:
    """Cumulative counters scraped each minute for DEPLOY ± 30 minutes. Per statement: calls per minute before and
    after (`calls`), ms per call (`ms`), shared blocks read per call (`blocks`, default 0), `dbid` (default 5),
    `new` (first row after the deploy), `first` (the minute of its first row, when created in the window), `tail`
    (calls per minute after the deploy for its first `tail[1]` minutes, then none), `once` (all its calls, with
    their total ms, in the minute ending at that offset)."""
    rng = np.random.default_rng(3)
    rows = []
    for key, s in specs.items():
        calls = time = blocks = 0.0
        for i in range(-30, 31):
            at = DEPLOY + timedelta(minutes=i)
            after = i > 0
            if (s.get("new") and not after) or i < s.get("first", -30):
                continue
            if "once" in s:
                n, t = (s["once"][1], s["once"][2]) if i == s["once"][0] else (0, 0.0)
            else:
                rate = s["calls"][after]
                if "tail" in s and after:
                    rate = s["tail"][0] if i <= s["tail"][1] else 0
                n = float(rng.poisson(rate)) if i > -30 else 0.0
                t = n * s["ms"][after] * rng.lognormal(0, 0.05)
            calls, time = calls + n, time + t
            blocks += n * s.get("blocks", (0, 0))[after]
            rows.append((key, at, calls, time, calls, blocks, s.get("dbid", 5)))
    columns = ["query_key", "captured_at", "calls", "total_exec_time", "rows", "shared_blks_read", "dbid"]
    return pd.DataFrame(rows, columns=columns).assign(stats_since=pd.Timestamp("2026-11-01", tz="UTC"))


def _detected(keys: list[int], cause: str = "unexplained", at: pd.Timestamp = DEPLOY) -> pd.DataFrame:
    return pd.DataFrame({"query_key": keys, "verdict": "detected", "cause": cause, "change_at": at})


def test_collateral_names_the_detection_that_added_most_time() -> None:
    """The issue's lab: an index dropped makes one statement's sequential scans ×100 slower, and their CPU and I/O
    slow two others ×3 and ×1.5. Both are collateral of the scans; the scans themselves (the heaviest) are not
    collateral of anything, nor is a steady statement's detection when nothing rose."""
    counters = _counters(
        {
            1: {"calls": (60, 60), "ms": (1.0, 100.0)},  # the index's statement: +5,900 ms per minute
            2: {"calls": (600, 600), "ms": (1.0, 3.0)},  # +1,200 ms per minute
            3: {"calls": (300, 300), "ms": (2.0, 3.0)},  # +300 ms per minute
            4: {"calls": (100, 100), "ms": (5.0, 5.0)},
            5: {"calls": (50, 50), "ms": (1.0, 1.0), "dbid": 7},
        }
    )
    found = impact(counters, DEPLOY, SETTINGS)
    verdicts = pd.concat([_detected([1, 2, 3]), _detected([5], "more_rows")], ignore_index=True)
    named = collateral_culprits(verdicts, found, SETTINGS)
    assert named["culprit"].tolist() == [None, 1, 1, None]
    assert named.loc[1, "rose"].startswith("its database time ×")
    assert 80 < float(named.loc[1, "rose"].removeprefix("its database time ×")) < 120
    # Nothing rose: a detection beside steady statements stays unexplained (its own slowdown is no culprit).
    alone = impact(counters[~counters["query_key"].isin([1, 2])], DEPLOY, SETTINGS)
    assert collateral_culprits(_detected([3]), alone, SETTINGS)["culprit"].tolist() == [None]
    # At another change point, the scans are not the cause.
    later = _detected([2], at=DEPLOY + timedelta(minutes=20))
    assert collateral_culprits(pd.concat([_detected([1]), later]), found, SETTINGS)["culprit"].tolist() == [None, None]
    # Only over unexplained and more_blocks_read; a statement with a change of its own keeps it.
    own = collateral_culprits(_detected([2], "more_blocks_read").assign(cause=["plan_changed"]), found, SETTINGS)
    assert own["culprit"].tolist() == [None]
    assert collateral_culprits(_detected([2], "more_blocks_read"), found, SETTINGS)["culprit"].tolist() == [1]


def test_a_culprit_must_add_enough_to_matter() -> None:
    """A statement whose time per minute doubled but added less than the slowdown it would explain, or less than
    new_statement_share of the database's time, is not named."""
    counters = _counters(
        {
            1: {"calls": (10, 10), "ms": (1.0, 4.0)},  # ×4, but +30 ms per minute
            2: {"calls": (600, 600), "ms": (1.0, 1.5)},  # the detection: +300 ms per minute
            3: {"calls": (100, 100), "ms": (20.0, 20.0)},  # the database's bulk: 2,000 ms per minute
        }
    )
    found = impact(counters, DEPLOY, SETTINGS)
    assert collateral_culprits(_detected([2]), found, SETTINGS)["culprit"].tolist() == [None]


def test_collateral_of_a_statement_reading_more_blocks() -> None:
    """A statement whose shared blocks read per minute rose ×10 (its time per minute barely moved: the reads are
    cached by the OS) competes for I/O: named, with what rose. Blocks unchanged: no culprit."""
    specs = {
        1: {"calls": (100, 100), "ms": (10.0, 11.0), "blocks": (5, 50)},
        2: {"calls": (600, 600), "ms": (1.0, 1.5), "blocks": (1, 1)},
        3: {"calls": (100, 100), "ms": (2.0, 2.0), "blocks": (2, 2)},
    }
    named = collateral_culprits(_detected([2]), impact(_counters(specs), DEPLOY, SETTINGS), SETTINGS)
    assert named["culprit"].tolist() == [1]
    assert named.loc[0, "rose"].startswith("its blocks read per minute ×")
    specs[1]["blocks"] = (5, 5)
    named = collateral_culprits(_detected([2]), impact(_counters(specs), DEPLOY, SETTINGS), SETTINGS)
    assert named["culprit"].tolist() == [None]


def test_collateral_of_the_deploy_s_lock_and_not_of_a_quick_drop() -> None:
    """A migration's ALTER TABLE held its lock 20 s at the deploy: the statements waiting on it are its collateral
    (not one another's). A DROP INDEX of 3 ms explains no slowdown, and control statements are never culprits."""
    specs = {
        1: {"once": (1, 1, 20_000.0), "new": True},  # the ALTER TABLE, 20 s in the first minute after
        2: {"calls": (600, 600), "ms": (1.0, 9.0)},  # waited on it: +4,800 ms per minute
        3: {"calls": (300, 300), "ms": (1.0, 5.0)},  # +1,200 ms per minute
        4: {"calls": (1200, 1200), "ms": (0.1, 0.4)},  # COMMIT, its time ×4 (it waits for the others)
    }
    found = classify(impact(_counters(specs), DEPLOY, SETTINGS), pd.Series({1: UTILITY, 4: CONTROL}))
    assert found.statements.set_index("query_key").loc[1, "kind"] == "deploy_statement"
    named = collateral_culprits(_detected([2, 3]), found, SETTINGS)
    assert named["culprit"].tolist() == [1, 1]
    assert named.loc[0, "rose"] == "the deploy's own statement, running 20.0 s"
    # A migration's backfill UPDATE (plannable, run once) holds its row locks the same way.
    backfill = classify(impact(_counters(specs), DEPLOY, SETTINGS), pd.Series({1: PLANNABLE, 4: CONTROL}))
    named = collateral_culprits(_detected([2, 3]), backfill, SETTINGS)
    assert named["culprit"].tolist() == [1, 1]
    assert named.loc[0, "rose"] == "a statement run once at the deploy, running 20.0 s"
    specs[1] = {"once": (1, 1, 3.0), "new": True}
    quick = classify(impact(_counters(specs), DEPLOY, SETTINGS), pd.Series({1: UTILITY, 4: CONTROL}))
    assert collateral_culprits(_detected([3]), quick, SETTINGS)["culprit"].tolist() == [2]  # the waiter, not the DROP
    assert collateral_culprits(_detected([2]), quick, SETTINGS)["culprit"].tolist() == [None]


def test_replaced_statements_are_paired_with_a_rolling_tail() -> None:
    """An ORM rewrite: statement 1 stops at the deploy (11 calls of the old code's tail in the first two minutes),
    statement 2 starts, ×4 slower per call. Paired when their relations are the same and their shapes alike, or when
    the new is the old's heavier form."""
    specs = {
        1: {"calls": (100, 0), "ms": (2.0, 2.0), "tail": (5.5, 2)},
        2: {"calls": (0, 100), "ms": (0.0, 8.0), "new": True},
        3: {"calls": (100, 100), "ms": (1.0, 1.0)},
    }
    found = impact(_counters(specs), DEPLOY, SETTINGS)
    rows = found.statements.set_index("query_key")
    assert rows.loc[1, "kind"] == "stopped" and 0 < rows.loc[1, "calls_after"] <= 0.05 * rows.loc[1, "calls_before"]
    pairs = pd.DataFrame({"old_key": [1], "new_key": [2], "same_relations": [True], "similarity": [0.9]})
    paired = classify(found, pd.Series(dtype=object), pairs, SETTINGS).statements.set_index("query_key")
    assert paired.loc[[1, 2], "kind"].tolist() == ["replaced", "replaced"]
    assert paired.loc[1, "partner_key"] == 2 and paired.loc[2, "partner_key"] == 1
    assert paired.loc[2, "per_call_factor"] == pytest.approx(4.0, rel=0.1)
    assert paired.loc[2, "heavy"] and not paired.loc[1, "heavy"]
    for unlike in (pairs.assign(similarity=0.3), pairs.assign(same_relations=False)):
        kept = classify(found, pd.Series(dtype=object), unlike, SETTINGS).statements.set_index("query_key")
        assert kept.loc[[1, 2], "kind"].tolist() == ["stopped", "new"]
        # the new text the old one's lookup in a heavier form (an ORM loading a relation with it): one statement
        heavier = classify(found, pd.Series(dtype=object), unlike.assign(heavier=True), SETTINGS).statements
        assert heavier.set_index("query_key").loc[[1, 2], "kind"].tolist() == ["replaced", "replaced"]


def test_a_declining_statement_has_not_stopped() -> None:
    """Calls after the deploy above STOP_TAIL_SHARE of those before, or a few calls still late in the window: not
    stopped."""
    specs = {
        1: {"calls": (100, 10), "ms": (1.0, 1.0)},  # 10% of before
        2: {"calls": (100, 2), "ms": (1.0, 1.0)},  # 2%, but all through the window
        3: {"calls": (100, 100), "ms": (1.0, 1.0)},
    }
    rows = impact(_counters(specs), DEPLOY, SETTINGS).statements.set_index("query_key")
    assert rows.loc[1, "kind"] != "stopped" and rows.loc[2, "kind"] != "stopped"


def test_the_deploy_s_own_statements_and_control_are_not_load() -> None:
    """A DROP INDEX that starts at the deploy is the deploy's own statement (never heavy, never new load), so is a
    migration that ran in the minute before the deploy was recorded; a COMMIT whose calls surged is no load change."""
    specs = {
        1: {"once": (2, 1, 50_000.0), "new": True},  # the DROP INDEX, heavy by its time
        2: {"once": (-1, 3, 900.0), "first": -1},  # a migration's ALTER TABLE in the minute before the deploy
        3: {"calls": (10, 300), "ms": (0.1, 0.1)},  # COMMIT, ×30 calls
        4: {"calls": (100, 100), "ms": (1.0, 1.0)},
    }
    found = impact(_counters(specs), DEPLOY, SETTINGS)
    rows = found.statements.set_index("query_key")
    assert rows.loc[1, "kind"] == "new" and rows.loc[1, "heavy"] and rows.loc[3, "kind"] in ("surge", "n_plus_one")
    classes = pd.Series({1: UTILITY, 2: UTILITY, 3: CONTROL, 4: PLANNABLE})
    rows = classify(found, classes).statements.set_index("query_key")
    assert rows.loc[[1, 2], "kind"].tolist() == ["deploy_statement", "deploy_statement"]
    assert not rows.loc[1, "heavy"]
    assert pd.isna(rows.loc[3, "kind"]) and pd.isna(rows.loc[4, "kind"])
    # A statement that is not a utility one keeps its kind.
    assert classify(found, pd.Series({1: PLANNABLE})).statements.set_index("query_key").loc[1, "kind"] == "new"
    # DDL the application runs per request (CREATE TEMP TABLE at every call) is its load, not the deploy's.
    busy_ddl = impact(_counters({5: {"calls": (0, 50), "ms": (0.0, 5.0), "new": True}, 4: specs[4]}), DEPLOY, SETTINGS)
    rows = classify(busy_ddl, pd.Series({5: UTILITY, 4: PLANNABLE})).statements.set_index("query_key")
    assert rows.loc[5, "kind"] == "new"


def test_a_statement_called_many_times_holds_no_lock() -> None:
    """A CALL or COPY the application starts at the deploy, a million calls of 0.01 ms (10 s in all), is no lock
    held: its calls are many short ones, so whatever class its text gets (even the deploy's own), no statement that
    slowed beside it is named its collateral. A migration's ALTER TABLE run twice, 10 s each, still is one."""
    specs = {
        1: {"calls": (0, 33_000), "ms": (0.0, 0.01), "new": True},  # ~1M calls, ~10 s
        2: {"calls": (600, 600), "ms": (1.0, 9.0)},
        3: {"calls": (300, 300), "ms": (1.0, 5.0)},
    }
    found = impact(_counters(specs), DEPLOY, SETTINGS)
    assert 900_000 < busy(found.statements, 1)["calls_after"] < 1_100_000
    for cls in (UTILITY, PLANNABLE):
        named = collateral_culprits(_detected([2, 3]), classify(found, pd.Series({1: cls})), SETTINGS)
        assert named["culprit"].tolist() == [None, 2], cls  # the lighter waiter is the heavier one's, as ever
    specs[1] = {"once": (1, 2, 20_000.0), "new": True}
    twice = classify(impact(_counters(specs), DEPLOY, SETTINGS), pd.Series({1: UTILITY}))
    named = collateral_culprits(_detected([2, 3]), twice, SETTINGS)
    assert named["culprit"].tolist() == [1, 1]
    assert named.loc[0, "rose"] == "the deploy's own statement, running 10.0 s a call (2 calls)"


def test_a_replacement_stops_and_starts_at_the_deploy() -> None:
    """A stopped statement pairs with a new one only when the stop and the start fall within the tolerance of each
    other and of the deploy: a statement last called 20 minutes before the deploy, or one that first ran 20 minutes
    after it, is no rewrite of the other half, however alike the texts."""
    specs = {
        1: {"calls": (100, 0), "ms": (2.0, 2.0), "tail": (5.5, 2)},  # stops at the deploy
        2: {"calls": (0, 100), "ms": (0.0, 8.0), "new": True},  # starts at the deploy
        3: {"calls": (0, 100), "ms": (0.0, 8.0), "new": True, "first": 20},  # starts 20 minutes later
        4: {"once": (-20, 50, 100.0)},  # last called 20 minutes before
        5: {"calls": (100, 100), "ms": (1.0, 1.0)},
    }
    found = impact(_counters(specs), DEPLOY, SETTINGS)
    rows = found.statements.set_index("query_key")
    assert rows.loc[[1, 4], "kind"].tolist() == ["stopped", "stopped"]
    assert rows.loc[[2, 3], "kind"].tolist() == ["new", "new"]

    def paired(old: int, new: int) -> list[str]:
        pairs = pd.DataFrame({"old_key": [old], "new_key": [new], "same_relations": [True], "similarity": [0.9]})
        out = classify(found, pd.Series(dtype=object), pairs, SETTINGS).statements.set_index("query_key")
        return out.loc[[old, new], "kind"].tolist()

    assert paired(1, 2) == ["replaced", "replaced"]
    assert paired(1, 3) == ["stopped", "new"]
    assert paired(4, 2) == ["stopped", "new"]


_GRID = [DEPLOY + timedelta(minutes=m) for m in (-30, -5, -2, -1, 0, 1, 2, 3, 20)]


def _random_case(seed: int) -> tuple[pd.DataFrame, Impact]:
    """A verdict frame and an impact drawn from small sets of values, so that weights, floors and the detections'
    added times tie, with NaNs, zero and missing blocks, every kind and class, statements in one or two databases,
    detections not in the impact, duplicated verdict labels and detections that would qualify as their own culprit."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 40))
    keys = rng.permutation(1000)[:n] + 1  # not in order: the impact's order is what breaks a tie
    pick = lambda values, size=n: np.array(values, dtype=object)[rng.integers(0, len(values), size)]  # noqa: E731
    per_min = [0.0, 0.5, 10.0, 50.0, 100.0, 400.0, 1000.0, 20_000.0, np.nan]
    statements = pd.DataFrame(
        {
            "query_key": keys,
            "dbid": rng.choice([5, 7], n) if rng.random() < 0.5 else np.full(n, 5),
            "calls_before": rng.choice([0, 1, 2, 100], n).astype(np.int64),
            "calls_after": rng.choice([0, 1, 2, 100], n).astype(np.int64),
            "exec_ms_per_min_before": pick(per_min).astype(float),
            "exec_ms_per_min_after": pick(per_min + [np.inf, -np.inf] * (seed % 5 == 0)).astype(float),
            "blks_read_per_min_before": pick([0.0, 1.0, 5.0, 50.0, np.nan]).astype(float),
            "blks_read_per_min_after": pick([0.0, 1.0, 5.0, 50.0, 500.0, np.nan]).astype(float),
            "mean_before_ms": pick([0.5, 1.0, 2.0, np.nan]).astype(float),
            "mean_after_ms": pick([0.5, 1.0, 3.0, 9.0, np.nan]).astype(float),
            "kind": pick([None, "new", "stopped", "surge", "n_plus_one", "replaced", "deploy_statement"]),
            "onset_at": pd.to_datetime(pick([*_GRID, pd.NaT]).tolist(), utc=True),
            "statement_class": pick([None, PLANNABLE, UTILITY, CONTROL]),
        }
    )
    if rng.random() < 0.3:  # figures all known and distinct, as impact() gives them
        for column in ("exec_ms_per_min_before", "exec_ms_per_min_after", "blks_read_per_min_after"):
            statements[column] = rng.lognormal(4, 2, n).round(1)
    d = int(rng.integers(0, n + 3))
    verdict_keys = np.concatenate([rng.choice(keys, min(d, n), replace=False), [5000, 5001, 5002][: max(0, d - n)]])
    verdicts = pd.DataFrame(
        {
            "query_key": verdict_keys,
            "verdict": pick(["detected", "detected", "detected", "no_regression"], len(verdict_keys)),
            "cause": pick(["unexplained", "unexplained", "more_blocks_read", "more_rows", None], len(verdict_keys)),
            "change_at": pd.to_datetime(pick([*_GRID, pd.NaT], len(verdict_keys)).tolist(), utc=True),
        }
    )
    if rng.random() < 0.3:
        verdicts.index = rng.permutation(len(verdicts)) * 3 + 10
    elif rng.random() < 0.2 and len(verdicts) > 1:
        verdicts.index = np.arange(len(verdicts)) // 2  # labels shared, as pd.concat leaves them
    deployed_at = None if rng.random() < 0.2 else DEPLOY
    return verdicts, Impact(pd.DataFrame(), statements, deployed_at, DEPLOY - SETTINGS.window)


def _same_culprits(verdicts: pd.DataFrame, found: Impact, settings: EngineSettings = SETTINGS) -> pd.DataFrame | None:
    """The vectorised collateral_culprits and the loop it replaced (reference.py) give the same frame, value for
    value and type for type, or both refuse the input with the same error."""
    try:
        expected = reference.collateral_culprits(verdicts, found, settings)
    except Exception as refused:  # noqa: BLE001 - whatever the loop raised, the new code raises too
        with pytest.raises(type(refused)):
            collateral_culprits(verdicts, found, settings)
        return None
    got = collateral_culprits(verdicts, found, settings)
    pd.testing.assert_frame_equal(got, expected)
    for column in ("culprit", "rose"):
        assert [type(v) for v in got[column]] == [type(v) for v in expected[column]]
    return got


@pytest.mark.filterwarnings("ignore:invalid value encountered in reduceat:RuntimeWarning")  # inf - inf
def test_collateral_culprits_match_the_loop_they_replaced(monkeypatch: pytest.MonkeyPatch) -> None:
    """Seeded random inputs (ties, NaNs, infinities, duplicated labels, detections outside the impact, own candidates):
    the vectorised function names the same culprits, with the same words, as the loop over detections; also when the
    detections × candidates matrix is cut into chunks of a few rows."""
    named = refused = 0
    for seed in range(400):
        verdicts, found = _random_case(seed)
        got = _same_culprits(verdicts, found)
        refused += got is None
        named += 0 if got is None else int(got["culprit"].notna().sum())
    assert named > 300 and refused < 40  # the draws name culprits, and few are refused
    tight = EngineSettings(surge_ratio=1.5, new_statement_share=0.01, tolerance_floor=timedelta(0))
    monkeypatch.setattr(impact_module, "_CHUNK", 20)
    for seed in range(400, 500):
        _same_culprits(*_random_case(seed), tight)
        _same_culprits(*_random_case(seed - 400))


def test_collateral_culprits_edge_cases_match_the_loop() -> None:
    """No detection, one, none open, an empty impact, a detection that would be its own culprit (it alone rose),
    tied weights (the impact's first wins), tied detections (the order of the sort decides which is a victim)."""
    specs = {
        1: {"calls": (60, 60), "ms": (1.0, 100.0)},
        2: {"calls": (600, 600), "ms": (1.0, 3.0)},
        3: {"calls": (300, 300), "ms": (2.0, 3.0)},
        4: {"calls": (100, 100), "ms": (5.0, 5.0)},
    }
    found = impact(_counters(specs), DEPLOY, SETTINGS)
    assert _same_culprits(_detected([]), found)["culprit"].tolist() == []
    assert _same_culprits(_detected([1]), found)["culprit"].tolist() == [None]  # not its own
    assert _same_culprits(_detected([2]), found)["culprit"].tolist() == [1]
    assert _same_culprits(_detected([1, 2, 3], "more_rows"), found)["culprit"].tolist() == [None] * 3
    assert _same_culprits(_detected([2]), Impact(found.summary, found.statements.iloc[:0]))["culprit"].tolist() == [
        None
    ]
    _same_culprits(_detected([2]).assign(change_at=pd.NaT), found)
    _same_culprits(_detected([9, 2, 3]), found)  # 9 is not in the impact
    # Ties: two statements of the same weight (the first in the impact's order is named), two detections of the same
    # added time (whichever the sort takes first becomes the other's culprit, and a victim).
    rows = found.statements.copy()
    tied = pd.concat([rows, rows.iloc[[0]].assign(query_key=0)], ignore_index=True)
    for frame in (tied, tied.iloc[::-1]):
        got = _same_culprits(_detected([2, 3]), Impact(found.summary, frame, found.deployed_at, found.window_start))
        assert set(got["culprit"]) <= {0, 1}
    twins = rows.copy()
    twins.loc[twins["query_key"] == 3, twins.columns[4:10]] = twins.loc[twins["query_key"] == 2].iloc[0, 4:10].values
    for order in ([2, 3], [3, 2]):
        _same_culprits(_detected(order), Impact(found.summary, twins, found.deployed_at, found.window_start))


def test_collateral_culprits_of_a_server_wide_slowdown_match_the_loop() -> None:
    """Hundreds of detections in one deploy (every statement slowed), from impact() itself: the same culprits."""
    specs = {k: {"calls": (60 + k, 60 + k), "ms": (1.0, 1.5 + k % 7), "dbid": 5 + k % 2} for k in range(300)}
    specs[300] = {"once": (1, 1, 20_000.0), "new": True}
    found = classify(impact(_counters(specs), DEPLOY, SETTINGS), pd.Series({300: UTILITY}))
    causes = ["unexplained", "more_blocks_read", "more_rows"]
    verdicts = pd.concat(
        [_detected([k], causes[k % 3], DEPLOY + timedelta(minutes=k % 4)) for k in range(300)], ignore_index=True
    )
    got = _same_culprits(verdicts, found)
    assert got["culprit"].notna().sum() >= 50


@pytest.mark.filterwarnings("ignore::pandas.errors.Pandas4Warning")  # the loop's fillna of the mixed times
def test_collateral_culprits_refuse_a_change_without_a_time_zone() -> None:
    """A detection's change_at without a time zone beside the impact's UTC onsets: refused, naming both, as the loop
    refused it (it could not subtract them)."""
    found = impact(
        _counters({1: {"calls": (60, 60), "ms": (1.0, 100.0)}, 2: {"calls": (600, 600), "ms": (1, 3)}}), DEPLOY
    )
    naive = _detected([2]).assign(change_at=DEPLOY.tz_convert(None))
    with pytest.raises(TypeError):
        reference.collateral_culprits(naive, found, SETTINGS)
    with pytest.raises(TypeError, match="change_at and onset_at"):
        collateral_culprits(naive, found, SETTINGS)
