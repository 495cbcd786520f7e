"""Analyses that have nothing to work with: a deploy to a target that ran no statement in its window, the periodic
check of an idle target, and a deploy dated in the far past give verdicts (none) or a clear refusal, never a crash."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from radar_pipeline.engine import EngineSettings
from radar_pipeline.engine.history import HistorySettings
from radar_pipeline.steps.deploy_analysis import AnalysisRefused, AnalysisRun, analyse_deploy
from radar_pipeline.steps.history import update_history
from radar_pipeline.steps.periodic_check import analyse_period
from radar_pipeline.warehouse import deploys

SETTINGS = EngineSettings(window=timedelta(seconds=200), tolerance_floor=timedelta(seconds=10))


@pytest.fixture
def idle(warehouse):
    """Target 'idle': scraped every 10 s for the last 20 minutes, never with a statement."""
    with warehouse.begin() as conn:
        conn.execute(sa.text("SELECT radar.ensure_pgss_snapshot_partitions(CAST(now() AS date) - 1, 3)"))
        conn.execute(
            sa.text(
                "INSERT INTO radar.pgss_info_snapshot "
                "SELECT 'idle', now() - g * interval '10 seconds', 0, NULL, 180000, '1.12', 0, 0 "
                "FROM generate_series(1, 120) g"
            )
        )
    return warehouse


def test_a_deploy_to_an_idle_target_gets_no_verdicts(idle):
    at = datetime.now(UTC) - timedelta(minutes=10)
    deploys.record(idle, deploys.DeployEvent("quiet-1", "idle", at))
    result = analyse_deploy(AnalysisRun(idle, SETTINGS), "quiet-1")
    assert result.verdicts.empty
    with idle.connect() as conn:
        row = conn.execute(sa.text("SELECT queries, detected FROM radar.analysis WHERE deploy_id = 'quiet-1'")).one()
    assert tuple(row) == (0, 0)
    with idle.begin() as conn:  # and its history update adds nothing
        assert update_history(conn, "quiet-1", HistorySettings(), SETTINGS.min_calls).points.empty


def test_the_periodic_check_of_an_idle_target(idle):
    end = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=1)
    done, failed = analyse_period(
        AnalysisRun(idle, EngineSettings(window=timedelta(minutes=5))), "2026-11-30-00:00", end, timedelta(seconds=10)
    )
    assert not failed
    assert [(r.target, len(r.verdicts)) for r in done] == [("idle", 0)]


def test_a_deploy_in_the_far_past_is_refused(idle):
    with idle.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO radar.deploy_event (deploy_id, target, deployed_at, source) "
                "VALUES ('ancient', 'idle', '0001-01-01T00:01:00Z', 'import')"
            )
        )
    with pytest.raises(AnalysisRefused, match="'ancient' at 0001-01-01T00:01:00\\+00:00 is too far in the past"):
        analyse_deploy(AnalysisRun(idle, SETTINGS), "ancient")
