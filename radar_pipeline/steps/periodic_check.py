"""The periodic check, start to finish: for each target, the latest period against the one before, then reporting.

Regressions with no deploy behind them (autovacuum falling behind, bloat, stale statistics) are found by running the
engine on [t − 2P, t] split at t − P, with the tolerance spanning the whole window (a change anywhere in it counts).
A detection is then
- `reported` (an episode opens, and it is alerted) when the query has no open episode and no deploy of its target
  lies within the deploy tolerance of the change;
- `already_reported` while the query's episode is open (the same change stays in the window for two periods, and a
  lasting regression stays slower);
- `left_to_deploy` when a deploy lies that near: the deploy's own analysis answers for it;
- `intended` when a label marked a change of the query that near intended (docs/labels.md): the step is the new
  baseline, not news, even after its episode was closed.
An open episode closes (`recovered`) when a later period's mean is back within θ of the level before the change, or
as intended when the query's verdict is labelled so.

Plain Python, so the Dagster asset and the tests run the same code.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

import pandas as pd
import sqlalchemy as sa

from radar_pipeline.config import mask_password, target_failure
from radar_pipeline.engine import Verdict
from radar_pipeline.engine.frames import TEXT, Column
from radar_pipeline.engine.settings import LEVEL_MIN_CALLS
from radar_pipeline.steps.decide import AnalysisRun, WindowVerdicts, decide_span, write_window
from radar_pipeline.steps.deploy_analysis import require_closed
from radar_pipeline.warehouse import deploys, episodes
from radar_pipeline.warehouse.analysis import ANALYSED_VERDICTS

REPORTED, ALREADY_REPORTED, LEFT_TO_DEPLOY, INTENDED = "reported", "already_reported", "left_to_deploy", "intended"
# A periodic check's verdicts: an analysis's, and for each detection whether it is reported (None elsewhere).
PERIODIC_VERDICTS = ANALYSED_VERDICTS.extend(
    "periodic verdicts",
    (Column("report", TEXT, required=False, words=(REPORTED, ALREADY_REPORTED, LEFT_TO_DEPLOY, INTENDED)),),
)
log = logging.getLogger(__name__)


@dataclass
class PeriodAnalysis(WindowVerdicts):
    """One target's periodic analysis: the verdicts (detections carry a `report` status) and the episodes closed."""

    target: str
    recovered: pd.DataFrame  # fingerprint, queryid, baseline_ms, recovered_ms


def analysis_id(partition_key: str) -> str:
    """The radar.analysis id of a periodic partition: 'periodic:' and the partition key."""
    return deploys.PERIODIC_PREFIX + partition_key


def period_targets(conn: sa.Connection, lo: datetime, hi: datetime) -> list[str]:
    """The targets with scrapes stored in (lo, hi]: the periodic check analyses what the warehouse holds."""
    rows = conn.execute(
        sa.text(
            "SELECT DISTINCT target FROM radar.pgss_info_snapshot WHERE captured_at > :lo AND captured_at <= :hi "
            "ORDER BY target"
        ),
        {"lo": lo, "hi": hi},
    )
    return [r[0] for r in rows]


def analyse_period(
    run: AnalysisRun, partition_key: str, period_end: datetime, deploy_tolerance: timedelta
) -> tuple[list[PeriodAnalysis], dict[str, str]]:
    """Analyse every target scraped in [period_end − 2P, period_end] (P = run.settings.window), one transaction each.

    Returns the analyses and, by target, the error of each target that failed (the others are still analysed).
    Refused (AnalysisRefused) before period_end + run.settle by the warehouse's clock.
    """
    ident = analysis_id(partition_key)
    split = period_end - run.settings.window
    with run.warehouse.connect() as conn:
        require_closed(conn, period_end + run.settle, f"the period {partition_key}")
        targets = period_targets(conn, split - run.settings.window, period_end)
    done, failed = [], {}
    for target in targets:
        try:
            decided = decide_span(run, ident, target, split)
            with run.warehouse.begin() as conn:
                done.append(_record_target(conn, run, ident, target, decided, deploy_tolerance))
        except Exception as exc:  # one target's failure must not stop the others
            live = run.live(target)
            failed[target] = target_failure(exc, live) if live else mask_password(f"{type(exc).__name__}: {exc}")
            log.error("periodic analysis of %s failed: %s", target, failed[target])
    return done, failed


def _record_target(
    conn: sa.Connection, run: AnalysisRun, ident: str, target: str, decided: WindowVerdicts, deploy_tolerance: timedelta
) -> PeriodAnalysis:
    """Write one target's decided window and its episodes (reopened, recovered, reported) in the caller's
    transaction, and say which detections are reported."""
    episodes.reopen(conn, ident, target)
    write_window(conn, run, ident, target, decided)
    end = decided.window[1]
    settings = run.settings
    recovered = episodes.recover(conn, ident, target, end, settings.threshold, max(settings.min_calls, LEVEL_MIN_CALLS))
    verdicts = decided.verdicts
    PERIODIC_VERDICTS.assign(verdicts, "report", None)
    detected = verdicts[verdicts["verdict"] == Verdict.DETECTED]
    status = pd.Series(REPORTED, index=detected.index, dtype=object)
    if not detected.empty:
        lo, hi = decided.window
        near = near_deploy(
            detected["change_at"],
            deploys.deploy_times(conn, target, lo - deploy_tolerance, hi + deploy_tolerance),
            deploy_tolerance,
        )
        status[near] = LEFT_TO_DEPLOY
        still_open = episodes.open_at(conn, target, end)
        status[[q in still_open for q in episodes.queries_of(detected)]] = ALREADY_REPORTED
        steps = episodes.intended_steps(conn, target, lo - deploy_tolerance, hi + deploy_tolerance)
        status[at_intended_step(detected, steps, deploy_tolerance)] = INTENDED
        PERIODIC_VERDICTS.assign(verdicts, "report", status, rows=detected.index)
    episodes.record_reports(conn, ident, target, end, detected[status == REPORTED])
    return PeriodAnalysis(**vars(decided), target=target, recovered=recovered)


def near_deploy(change_at: pd.Series, deploy_times: list[datetime], tolerance: timedelta) -> pd.Series:
    """Per change: does it lie within `tolerance` of one of the deploys?"""
    if not deploy_times:
        return pd.Series(False, index=change_at.index)
    times = pd.to_datetime(pd.Series(deploy_times), utc=True).to_numpy()
    gaps = abs(pd.to_datetime(change_at, utc=True).to_numpy()[:, None] - times[None, :])
    return pd.Series((gaps <= pd.Timedelta(tolerance).to_timedelta64()).any(axis=1), index=change_at.index)


def at_intended_step(detected: pd.DataFrame, steps: pd.DataFrame, tolerance: timedelta) -> pd.Series:
    """Per detection: does its change lie within `tolerance` of a change point of its query that a label marked
    intended (episodes.intended_steps)?"""
    if steps.empty or detected.empty:
        return pd.Series(False, index=detected.index)
    marked: dict[tuple[int, int, bool, int], list[pd.Timestamp]] = {}
    for query, at in zip(episodes.queries_of(steps), pd.to_datetime(steps["change_at"], utc=True), strict=True):
        marked.setdefault(query, []).append(at)
    changes = pd.to_datetime(detected["change_at"], utc=True)
    near = [
        any(abs(at - p) <= pd.Timedelta(tolerance) for p in marked.get(query, ()))
        for query, at in zip(episodes.queries_of(detected), changes, strict=True)
    ]
    return pd.Series(near, index=detected.index)
