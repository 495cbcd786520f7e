"""The engine's frames are declared (engine/frames.py): what analyse and impact return matches the declaration, and a
frame that does not is refused naming the column; the verdict words are StrEnums whose frames hold plain strings."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from radar_pipeline.engine import COLUMNS, VERDICT_FRAME, Cause, FrameError, Reason, Verdict, analyse
from radar_pipeline.engine.frames import BOOL, IMPACT_STATEMENTS, IMPACT_SUMMARY, INT, TEXT, Column, FrameSchema
from radar_pipeline.engine.impact import STATEMENT_COLUMNS, SUMMARY_COLUMNS, impact
from radar_pipeline.lab.synthetic import DEPLOY, counters, step


@pytest.fixture(scope="module")
def decided() -> tuple[pd.DataFrame, pd.DataFrame]:
    frame = pd.concat(
        [
            counters("slowed", step(before=1.0, after=3.0)),
            counters("steady", step(before=1.0, after=1.0, seed=1)),
            counters("sparse", step(n_before=2, before=1.0, after=1.0)),
        ],
        ignore_index=True,
    )
    return frame, analyse(frame, DEPLOY)


def test_what_the_engine_returns_is_what_its_frames_declare(decided):
    frame, out = decided
    # 50, the fleet evidence at the deploy (issue 29), the tier, the rise a weekly rhythm explains (issue 41)
    assert VERDICT_FRAME.names == COLUMNS and len(COLUMNS) == 55
    assert VERDICT_FRAME.check(out, "analyse") is out
    assert set(out["verdict"]) == {Verdict.DETECTED, Verdict.NO_REGRESSION, Verdict.INSUFFICIENT_DATA}
    assert all(type(v) is str for v in (*out["verdict"], *out["reason"]))  # the words, never the members
    found = impact(frame, DEPLOY, verdicts=out)
    IMPACT_STATEMENTS.check(found.statements, "impact")
    IMPACT_SUMMARY.check(found.summary, "impact")
    assert (IMPACT_STATEMENTS.names, IMPACT_SUMMARY.names) == (STATEMENT_COLUMNS, SUMMARY_COLUMNS)
    VERDICT_FRAME.check(out.iloc[:0].astype({"verdict": float}), "analyse")  # no rows: only the columns count


@pytest.mark.parametrize(
    "change, named",
    [
        (lambda v: v.drop(columns="p_family"), "p_family missing"),
        (lambda v: v.assign(n_before=v["n_before"].astype(float)), "n_before: dtype float64, expected int"),
        (lambda v: v.assign(change_at=v["change_at"].dt.tz_localize(None)), "change_at: dtype datetime64"),
        (lambda v: v.assign(verdict="regressed"), "verdict: values 'regressed' (allowed: detected"),
        (lambda v: v.assign(reason=None), "reason: missing values"),
        (lambda v: v.assign(cause="cosmic rays"), "cause: values 'cosmic rays'"),
        (lambda v: v.assign(verdict=[Verdict.DETECTED] * len(v)), "verdict: values <Verdict.DETECTED"),
    ],
)
def test_a_frame_unlike_its_declaration_is_refused_naming_the_column(decided, change, named):
    _, out = decided
    with pytest.raises(FrameError, match=r"^write_analysis: verdicts frame: .*") as raised:
        VERDICT_FRAME.check(change(out), "write_analysis")
    assert named in str(raised.value)


def test_an_extension_declares_what_it_adds_and_names_what_it_overwrites(decided):
    _, out = decided
    ours = VERDICT_FRAME.extend(
        "ours",
        (Column("report", TEXT, required=False, words=("reported",)), Column("rank", INT)),
        overwrites={"cause": "we know"},
    )
    frame = out.copy()
    ours.assign(frame, "rank", np.arange(len(frame)))
    ours.assign(frame, "cause", Cause.PLAN_CHANGED.value, rows=frame["verdict"] == Verdict.DETECTED)
    assert frame.loc[frame["verdict"] == Verdict.DETECTED, "cause"].eq(Cause.PLAN_CHANGED).all()
    ours.check(frame, "here")  # report is declared but optional; rank checked as an int
    with pytest.raises(FrameError, match="ours may not overwrite verdicts column 'verdict'"):
        ours.assign(frame, "verdict", Verdict.DETECTED.value)
    with pytest.raises(FrameError, match="ours has no column 'colour': declare it first"):
        ours.assign(frame, "colour", "blue")
    with pytest.raises(FrameError, match="rank: dtype (object|str), expected int"):
        ours.check(frame.assign(rank="first"), "here")
    with pytest.raises(ValueError, match="adds columns verdicts has: reason"):
        VERDICT_FRAME.extend("clash", (Column("reason", TEXT),))
    free = VERDICT_FRAME.extend("free", (Column("cause", TEXT),), overwrites={"cause": "any text"})
    assert free.names == VERDICT_FRAME.names and free.column("cause").words is None  # redeclared in place
    free.check(out.assign(cause="the moon"), "here")
    with pytest.raises(ValueError, match="overwrites columns verdicts does not have: colour"):
        VERDICT_FRAME.extend("unknown", (), overwrites={"colour": "?"})
    with pytest.raises(ValueError, match="kind must be one of"):
        FrameSchema("bad", (Column("x", "complex"),))
    assert ours.column("rank").kind == INT and VERDICT_FRAME.column("cause").nullable
    assert FrameSchema("flags", (Column("on", BOOL),)).check(pd.DataFrame({"on": [True]}), "x") is not None


def test_the_words_are_strenums_equal_to_their_strings():
    assert Verdict.DETECTED == "detected" and {"detected": 1}[Verdict.DETECTED] == 1
    assert json.dumps([Verdict.NO_REGRESSION, Reason.PRIOR_CONFLICT]) == '["no_regression", "history_conflict"]'
    assert f"{Cause.CONTENTION}: 42 SELECT" == "contention: 42 SELECT"
    assert pd.Series(["detected", "inconclusive"]).eq(Verdict.DETECTED).tolist() == [True, False]
