"""One deploy's analysis, start to finish: read its window from the warehouse, decide, write the verdicts.

Plain Python, so the Dagster asset, the benchmarks and the tests run the same code.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import numpy as np
import pandas as pd
import sqlalchemy as sa

from radar_pipeline.config import Target
from radar_pipeline.defs.plan_capture import plan_diffs
from radar_pipeline.engine import EngineSettings, analyse
from radar_pipeline.pgss_model import KEY
from radar_pipeline.warehouse import analysis, deploys


class AnalysisRefused(RuntimeError):
    """The deploy cannot be analysed now (unknown id, or its window has not closed); nothing was written."""


@dataclass
class DeployAnalysis:
    """What an analysis found and how long each part took."""

    event: deploys.DeployEvent
    window: tuple[datetime, datetime]
    verdicts: pd.DataFrame  # the engine's columns plus KEY, fingerprint and merged_queryids
    health: dict
    texts: dict[int, str] = field(default_factory=dict)  # queryid → a short text, for the detections
    seconds: dict[str, float] = field(default_factory=dict)


def analyse_deploy(
    engine: sa.Engine,
    deploy_id: str,
    settings: EngineSettings,
    run_id: str | None = None,
    settle: timedelta = timedelta(0),
    live_targets: Mapping[str, Target] | None = None,
) -> DeployAnalysis:
    """Analyse one recorded deploy and replace its verdicts, in one transaction.

    Refused (AnalysisRefused) when the id is unknown or when the window after the deploy, plus `settle` (one scrape
    interval, so the last scrape of the window is stored), has not passed by the warehouse's clock: an early analysis
    would see half a window. Each detection gets a plan diff from the stored plans, capturing the current plan from
    the deploy's target in `live_targets` when none was stored after the change; a changed shape makes its cause
    plan_changed.
    """
    timings: dict[str, float] = {}
    started = time.perf_counter()
    with engine.begin() as conn:
        event = deploys.get(conn, deploy_id)
        if event is None or event.deployed_at is None:
            raise AnalysisRefused(f"deploy {deploy_id!r} is not recorded in radar.deploy_event")
        lo, hi = event.deployed_at - settings.window, event.deployed_at + settings.window
        now = conn.execute(sa.text("SELECT now()")).scalar_one()
        if now < hi + settle:
            raise AnalysisRefused(
                f"the window after deploy {deploy_id!r} closes at {(hi + settle).isoformat()}; it is "
                f"{now.isoformat()} now, and an analysis before then would see only part of the window"
            )
        window = analysis.read_window(conn, event.target, lo, hi)
        health = analysis.window_health(conn, event.target, lo, hi)
        timings["read"] = time.perf_counter() - started

        started = time.perf_counter()
        result = analyse(window.counters, event.deployed_at, settings)
        verdicts = _with_statement_keys(result, window)
        timings["engine"] = time.perf_counter() - started

        started = time.perf_counter()
        detected = verdicts["verdict"] == "detected"
        if detected.any():
            live = (live_targets or {}).get(event.target)
            diffs = plan_diffs(conn, event.target, verdicts[detected], live)
            verdicts.loc[detected, "plan_diff"] = pd.Series(diffs, index=verdicts.index[detected], dtype=object)
            changed = [bool(d.get("shape_changed")) for d in diffs]
            verdicts.loc[verdicts.index[detected][changed], "cause"] = "plan_changed"
        timings["plans"] = time.perf_counter() - started

        started = time.perf_counter()
        analysis.write_analysis(conn, deploy_id, event.target, settings.to_dict(), (lo, hi), verdicts, run_id)
        texts = analysis.query_texts(conn, event.target, verdicts.loc[detected, KEY])
    timings["write"] = time.perf_counter() - started
    return DeployAnalysis(event=event, window=(lo, hi), verdicts=verdicts, health=health, texts=texts, seconds=timings)


def _with_statement_keys(result: pd.DataFrame, window: analysis.WindowCounters) -> pd.DataFrame:
    """The engine's rows with the statement each query_key stands for, its fingerprint and the queryids merged in."""
    codes = result["query_key"].to_numpy(dtype=np.int64)
    keys = window.keys.iloc[codes].reset_index(drop=True)
    last_fingerprint = window.counters.groupby("query_key")["fingerprint"].last()
    out = pd.concat([result.reset_index(drop=True), keys], axis=1)
    out["fingerprint"] = last_fingerprint.loc[codes].to_numpy()
    out["merged_queryids"] = [
        [int(window.keys.iloc[int(k)]["queryid"]) for k in merged] for merged in result["merged_keys"]
    ]
    out["plan_diff"] = None
    return out[[*KEY, *[c for c in out.columns if c not in KEY]]]
