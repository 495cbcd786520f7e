"""The seams between the layers (issue 26): the verdict words are the warehouse's, a verdict frame that does not match
its declaration is refused before anything is written, and the noise prior's renamed settings still read the
analyses stored under their old names."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import numpy as np
import pandas as pd
import pytest
import sqlalchemy as sa

from radar_pipeline.engine import Cause, FrameError, Reason, Verdict, analyse
from radar_pipeline.engine.settings import RENAMED, EngineSettings
from radar_pipeline.warehouse import analysis, deploys
from radar_pipeline.warehouse.analysis import ANALYSED_VERDICTS

DEPLOY = datetime(2026, 11, 29, 12, tzinfo=UTC)


def _constraint_words(conn: sa.Connection, name: str) -> set[str]:
    definition = conn.execute(
        sa.text("SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conname = :n"), {"n": name}
    ).scalar_one()
    return set(re.findall(r"'([a-z_]+)'", definition))


def test_the_verdict_words_are_the_ones_the_warehouse_accepts(warehouse):
    with warehouse.connect() as conn:
        assert _constraint_words(conn, "verdict_verdict_check") == {v.value for v in Verdict}
        assert _constraint_words(conn, "verdict_reason_check") == {r.value for r in Reason}


def _analysed() -> pd.DataFrame:
    """A real analysis's verdicts with the columns an analysis adds (ANALYSED_VERDICTS), for two statements."""
    times = pd.date_range(DEPLOY - timedelta(minutes=30), periods=61, freq="1min")
    calls = np.arange(61) * 50
    rows = []
    for queryid, after in ((1, 3.0), (2, 1.0)):
        means = np.where(np.arange(61) > 30, after, 1.0) * (1 + 0.05 * np.sin(np.arange(61) * (queryid + 1)))
        rows.append(
            pd.DataFrame(
                {"query_key": queryid, "captured_at": times, "calls": calls, "total_exec_time": np.cumsum(means * 50)}
            )
        )
    out = analyse(pd.concat(rows, ignore_index=True), DEPLOY)
    out["dbid"], out["userid"], out["toplevel"] = 1, 10, True
    out["queryid"] = out["query_key"].astype("int64")
    for name, value in (
        ("fingerprint", 7),
        ("plan_diff", None),
        ("queryid_shared_with", None),
        ("named_changes", None),
        ("undo_hint", None),
    ):
        ANALYSED_VERDICTS.assign(out, name, value)
    ANALYSED_VERDICTS.assign(out, "merged_queryids", [[] for _ in range(len(out))])
    return out


def _stored(conn: sa.Connection) -> list[tuple]:
    return conn.execute(sa.text("SELECT queryid, verdict, reason FROM radar.verdict ORDER BY queryid")).all()


def test_a_verdict_frame_unlike_its_declaration_is_refused_before_anything_is_written(warehouse):
    verdicts = _analysed()
    window = (DEPLOY - timedelta(minutes=30), DEPLOY + timedelta(minutes=30))
    deploys.record(warehouse, deploys.DeployEvent("seam-1", "main", DEPLOY), configured_targets=["main"])
    with warehouse.begin() as conn:
        analysis.write_analysis(conn, "seam-1", "main", EngineSettings().to_dict(), window, verdicts, None)
    with warehouse.connect() as conn:
        before = _stored(conn)
    assert [r.verdict for r in before] == [Verdict.DETECTED, Verdict.NO_REGRESSION]

    broken = [
        (verdicts.drop(columns="queryid"), "queryid missing"),
        (verdicts.assign(reason="bad luck"), "reason: values 'bad luck'"),
        (verdicts.assign(cause="slow disk"), "cause: values 'slow disk'"),
        (verdicts.assign(verdict=[Verdict.DETECTED] * len(verdicts)), "verdict: values <Verdict.DETECTED"),
    ]
    for frame, named in broken:
        with pytest.raises(FrameError, match=re.escape(f"write_analysis: analysed verdicts frame: {named}")):
            with warehouse.begin() as conn:
                analysis.write_analysis(conn, "seam-1", "main", EngineSettings().to_dict(), window, frame, None)
        with warehouse.connect() as conn:
            assert _stored(conn) == before  # nothing stored is lost or changed

    # The analysis names a collateral slowdown's culprit in the cause_detail it overwrites (declared, with the reason).
    collateral = verdicts.assign(cause=Cause.COLLATERAL.value, cause_detail="collateral of queryid 52")
    ANALYSED_VERDICTS.check(collateral, "here")
    assert "cause" in ANALYSED_VERDICTS.overwrites
    with pytest.raises(FrameError, match="analysed verdicts may not overwrite verdicts column 'verdict'"):
        ANALYSED_VERDICTS.assign(verdicts, "verdict", Verdict.DETECTED.value)


def test_the_noise_prior_settings_read_records_stored_under_their_old_names(warehouse):
    current = EngineSettings()
    old_name = {new: old for old, new in RENAMED.items()}
    old = {old_name.get(k, k): v for k, v in current.to_dict().items()}  # a record stored before the rename
    assert {"history_min_intervals", "history_max_intervals", "history_conflict_alpha"} <= set(old)
    assert EngineSettings.from_dict(old) == current
    assert EngineSettings.from_dict({**old, "history_min_intervals": 200}).prior_min_intervals == 200
    with pytest.raises(ValueError, match="prior_min_intervals must be at least 1"):
        EngineSettings.from_dict({"history_min_intervals": 0})

    # The nightly reanalysis finds no analysis stale for the rename alone, and still finds one whose value differs.
    window = (DEPLOY - timedelta(minutes=30), DEPLOY + timedelta(minutes=30))
    recent = datetime.now(UTC) - timedelta(hours=2)
    verdicts = _analysed()
    for deploy_id, settings in (("renamed", old), ("changed", {**old, "history_min_intervals": 200})):
        deploys.record(warehouse, deploys.DeployEvent(deploy_id, "main", recent), configured_targets=["main"])
        with warehouse.begin() as conn:
            analysis.write_analysis(conn, deploy_id, "main", settings, window, verdicts, None)
    with warehouse.connect() as conn:
        stale = analysis.stale_analyses(conn, current.to_dict(), old["engine_version"], timedelta(days=1))
    assert stale == ["changed"]
