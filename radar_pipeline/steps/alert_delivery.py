"""Alert delivery: one Slack message per analysis and target for the regressions not yet sent, through the outbox in
radar.alert, with a chart per regression; and the plain-text form written to the run log when Slack is not set up."""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path
from typing import Any

import pandas as pd
import sqlalchemy as sa

from radar_pipeline.alerts.chart import render_chart
from radar_pipeline.alerts.render import MAX_SHOWN, AnalysisFacts, Regression, render
from radar_pipeline.alerts.slack import DeliveryError, SlackSender
from radar_pipeline.engine import EngineSettings
from radar_pipeline.engine.samples import interval_means
from radar_pipeline.pgss_model import KEY, statement_keys
from radar_pipeline.plan_shape import summary
from radar_pipeline.warehouse import alerts as outbox
from radar_pipeline.warehouse.analysis import read_window

DAGSTER_URL_VAR = "RADAR_DAGSTER_URL"
CHART_DIR_VAR = "RADAR_CHART_DIR"  # where chart images are kept (default: a new temporary folder per analysis)
NO_CHANNEL = "-"


def deliver(
    log: logging.Logger, conn: sa.Connection, sender: SlackSender, found: pd.DataFrame, facts: AnalysisFacts
) -> dict[str, Any]:
    """Send, in one message, what is not yet sent of one analysis's regressions on one target (`found`, from
    outbox.detections), and record every attempt in the outbox; the caller holds the analysis's lock. Returns what
    the run's metadata shows of it."""
    channel = sender.channel or NO_CHANNEL
    keys = statement_keys(found)
    outbox.enqueue(conn, facts.analysis_id, facts.target, keys, channel)
    todo = set(outbox.pending(conn, facts.analysis_id, facts.target, channel))
    todo_rows = found[[k in todo for k in keys]]
    metadata: dict[str, Any] = {"regressions": len(found), "to_send": len(todo_rows), "channel": channel}
    if todo_rows.empty:
        return metadata
    text, blocks = render(facts, [_regression(r) for r in todo_rows.itertuples()])
    metadata["message"] = {"text": text, "blocks": blocks}
    pending_keys = [k for k in keys if k in todo]
    # a chart for each regression the message shows in full (its thread would otherwise grow without bound)
    charts = _charts(conn, facts, todo_rows.head(MAX_SHOWN)) if channel != "webhook" else []
    metadata["charts"] = [str(p) for p, _ in charts]

    def mark(status: str, **kwargs: Any) -> None:
        outbox.mark(conn, facts.analysis_id, facts.target, channel, pending_keys, status, **kwargs)

    if not sender.configured:
        log.info(f"Slack is not configured; the alert would read:\n{text}\n{plain_text(blocks)}")
        for path, _ in charts:
            log.info(f"chart: {path}")
        mark("skipped")
        return metadata
    try:
        delivered = sender.send(text, blocks, charts)
    except DeliveryError as exc:
        log.error(f"Slack: {exc}")
        mark("pending" if exc.retryable else "failed", error=str(exc))
    else:
        mark("sent", ts=delivered.ts)
        metadata["message_ts"] = delivered.ts or ""
        for error in delivered.chart_errors:
            log.warning(f"Slack: a chart was not uploaded: {error}")
    return metadata


def run_url(run_id: str | None) -> str | None:
    """The run's page in the Dagster UI (at RADAR_DAGSTER_URL, default http://localhost:3000)."""
    if not run_id:
        return None
    return f"{os.environ.get(DAGSTER_URL_VAR, 'http://localhost:3000').rstrip('/')}/runs/{run_id}"


def deploy_facts(found: pd.DataFrame) -> AnalysisFacts:
    """The message header of a deploy's analysis, from its detections (outbox.detections rows)."""
    first = found.iloc[0]
    return AnalysisFacts(
        analysis_id=str(first.deploy_id),
        target=str(first.target),
        split_at=pd.Timestamp(first.deployed_at).to_pydatetime(),
        service=first.service,
        version=first.version,
        url=first.url,
        run_url=run_url(first.run_id),
    )


def period_facts(analysis_id: str, target: str, rows: pd.DataFrame) -> AnalysisFacts:
    """The message header of a periodic check on one target: the analysis window is [t − 2P, t], and the latest
    period, the one alerted on, is its second half."""
    first = rows.iloc[0]
    start, end = pd.Timestamp(first.window_start), pd.Timestamp(first.window_end)
    split = (start + (end - start) / 2).to_pydatetime()
    return AnalysisFacts(
        analysis_id=analysis_id,
        target=target,
        split_at=split,
        service=None,
        version=None,
        url=None,
        run_url=run_url(first.run_id),
        period=(split, end.to_pydatetime()),
    )


def _regression(row: Any) -> Regression:
    plan = row.plan_diff if isinstance(row.plan_diff, dict) else None
    return Regression(
        queryid=int(row.queryid),
        query=row.query or f"queryid {row.queryid}",
        mean_before_ms=float(row.mean_before_ms),
        mean_after_ms=float(row.mean_after_ms),
        change_factor=float(row.change_factor),
        confidence=float(row.confidence),
        change_at=pd.Timestamp(row.change_at).to_pydatetime(),
        calls_before=int(row.calls_before),
        calls_after=int(row.calls_after),
        cause=str(row.cause),
        plan_summary=summary(plan) if plan else None,
    )


def _charts(conn: sa.Connection, facts: AnalysisFacts, rows: pd.DataFrame) -> list[tuple[Path, str]]:
    """A PNG per regression from the analysed window's interval means."""
    settings = EngineSettings.from_dict(rows["settings"].iloc[0])
    lo, hi = facts.split_at - settings.window, facts.split_at + settings.window
    window = read_window(conn, facts.target, lo, hi, only=rows[KEY])
    bare = window.counters.drop(columns=["fingerprint", "dbid", "userid", "toplevel"])  # a series per key, unmerged
    series = interval_means(bare, pd.Timestamp(lo), pd.Timestamp(hi))
    by_key = {tuple(k): i for i, k in enumerate(window.keys[KEY].itertuples(index=False))}
    folder = chart_folder(facts.analysis_id)
    charts = []
    for row in rows.itertuples():
        means = series.get(by_key.get((int(row.dbid), int(row.userid), int(row.queryid), bool(row.toplevel))))
        if means is None:
            continue
        if facts.period:
            title = f"queryid {row.queryid} on {facts.target}: ×{row.change_factor:.2f} in {facts.analysis_id}"
        else:
            title = f"queryid {row.queryid}: ×{row.change_factor:.2f} after deploy {facts.analysis_id}"
        path = render_chart(
            folder / (f"{facts.target}-{row.queryid}.png" if facts.period else f"{row.queryid}.png"),
            means.index.to_pydatetime(),
            means.to_numpy(),
            facts.split_at,
            pd.Timestamp(row.change_at).to_pydatetime(),
            None if facts.period else settings.tolerance,
            float(row.segment_mean_before_ms),
            float(row.segment_mean_after_ms),
            title,
            "split between the periods" if facts.period else "deploy",
        )
        charts.append((path, title))
    return charts


def chart_folder(partition_key: str) -> Path:
    """Where a partition's chart images go: RADAR_CHART_DIR/<partition> when set, else a new temporary folder."""
    chosen = os.environ.get(CHART_DIR_VAR)
    if chosen:
        return Path(chosen) / partition_key.replace(":", "_")
    return Path(tempfile.mkdtemp(prefix=f"radar-charts-{partition_key.replace(':', '_')}-"))


def plain_text(blocks: list[dict[str, Any]]) -> str:
    """The blocks' text, one line each, for the run log."""
    lines = []
    for block in blocks:
        if "text" in block:
            lines.append(block["text"]["text"])
        for field in block.get("fields", []) + block.get("elements", []):
            lines.append(field["text"])
    return "\n".join(lines)
