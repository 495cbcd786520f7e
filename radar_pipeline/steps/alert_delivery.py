"""Alert delivery: one Slack message per analysis and target for the regressions not yet sent, through the outbox in
radar.outbox, with a chart per regression; and the plain-text form written to the run log when Slack is not set up."""

from __future__ import annotations

import json
import logging
import tempfile
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import sqlalchemy as sa

from radar_pipeline.alerts.channel import Delivered, Detection
from radar_pipeline.alerts.render import MAX_SHOWN, AnalysisFacts, LoadChange, Regression
from radar_pipeline.alerts.slack import SlackSender
from radar_pipeline.engine import EngineSettings
from radar_pipeline.engine.samples import interval_means
from radar_pipeline.pgss_model import KEY, Key, key_label, statement_key, statement_keys
from radar_pipeline.plan_shape import summary
from radar_pipeline.steps.delivery import Delivery, Sent, finder, sent_of
from radar_pipeline.warehouse import outbox
from radar_pipeline.warehouse.analysis import read_window
from radar_pipeline.warehouse.outbox import Row


def deliver(
    log: logging.Logger,
    engine: sa.Engine,
    sender: SlackSender,
    found: pd.DataFrame,
    facts: AnalysisFacts,
    withhold: str | None = None,
    changes: pd.DataFrame | None = None,
    slower: pd.DataFrame | None = None,
    chart_dir: Path | None = None,
) -> dict[str, Any]:
    """Send, in one message, what is due of one analysis's regressions on one target (`found`, from
    alerts.detections) and of its load changes (`changes`, from alerts.load_changes: new heavy statements and call
    surges, each an outbox row under its statement's key like a regression, so a deploy with only those is announced
    too, exactly once) and of its probably-slower statements (`slower`, from alerts.probably_slower, announced the
    same way; the message names them from `facts`), through the outbox. Returns what the run's metadata shows of it.

    Three steps, none holding a transaction while Slack is called: (1) a transaction enqueues a row per regression
    and claims the rows due (pending past their backoff, or left `sending` by a run that stopped) under a new
    delivery id, and commits; (2) rows an earlier attempt may have posted (it timed out, or stopped mid-send) are
    looked for in the channel by their delivery id (token mode) and, when found, are not sent again; the rest go out
    in one message carrying the delivery id; (3) a short transaction marks the outcome. With `withhold` (a reason),
    new rows are recorded as withheld and nothing is sent. Charts are drawn under `chart_dir` (chart_folder).
    """
    detected_keys = statement_keys(found)
    if changes is None or changes.empty:
        changes = pd.DataFrame(columns=[*KEY])
    change_keys = statement_keys(changes) if len(changes) else []
    detected = set(detected_keys)
    keys = detected_keys + [k for k in change_keys if k not in detected]  # a statement both slower and surging: once
    slower_keys = statement_keys(slower) if slower is not None and len(slower) else []
    seen = set(keys)
    keys += [k for k in slower_keys if k not in seen]
    metadata: dict[str, Any] = {
        "regressions": len(found),
        "load_changes": len(changes),
        "probably_slower": len(slower_keys),
        "to_send": 0,
        "channel": sender.name,
    }
    due = claim_due(log, engine, sender, facts.analysis_id, facts.target, keys, withhold, metadata)
    if due is None:
        return metadata
    todo, delivery = due
    todo_set = set(todo)
    todo_rows = found[[k in todo_set for k in detected_keys]]
    shown = [Detection(k, regression_of(r)) for k, r in zip(detected_keys, found.itertuples(), strict=True)
             if k in todo_set]  # fmt: skip
    shown += [Detection(k, change=change_of(r)) for k, r in zip(change_keys, changes.itertuples(), strict=True)
              if k in todo_set and k not in detected]  # fmt: skip
    todo = [k for k in keys if k in todo_set]
    text, blocks = sender.message(facts, shown)
    metadata["to_send"] = len(todo)
    metadata["message"] = {"text": text, "blocks": blocks}
    with engine.connect() as conn:
        # a chart for each regression the message shows in full (its thread would otherwise grow without bound), for
        # the UI too (a webhook cannot upload them)
        charts = _charts(conn, facts, todo_rows.head(MAX_SHOWN), chart_dir) if len(todo_rows) else []
    metadata["charts"] = [str(p) for p, _ in charts]

    if not sender.configured:
        log.info(f"Slack is not configured; the alert would read:\n{text}\n{plain_text(blocks)}")
        for path, _ in charts:
            log.info(f"chart: {path}")
        delivery.settle(delivery.claimed.of(todo), "skipped")
        return metadata
    send_message(delivery, lambda delivery_id: sender.notify(facts, shown, delivery_id, charts), todo, metadata)
    return metadata


def claim_due(
    log: logging.Logger,
    engine: sa.Engine,
    sender: SlackSender,
    analysis_id: str,
    target: str,
    keys: list[Key],
    withhold: str | None,
    metadata: dict[str, Any],
) -> tuple[list[Key], Delivery] | None:
    """Steps (1) and (2) of `deliver` for any message under (analysis_id, target): enqueue a row per key (withheld,
    with `withhold`, and then None) and claim those due, then look in the channel for the ones an earlier attempt may
    have posted (steps/delivery.py); the keys left to send and the attempt's Delivery — or None when nothing is to be
    sent now (metadata says why where there is a why)."""
    channel = sender.name
    with engine.begin() as conn:
        outbox.lock(conn, analysis_id)
        if withhold is not None:
            outbox.enqueue_detections(conn, analysis_id, target, keys, channel, status="withheld", note=withhold)
            metadata["withheld"] = withhold
            return None
        outbox.enqueue_detections(conn, analysis_id, target, keys, channel)
        claimed = outbox.claim(conn, analysis_id, [outbox.DETECTION], channel=channel, target=target)
    if not claimed.rows:
        return None
    delivery = Delivery(log, engine, "Slack", claimed, word="posted")
    todo: list[Row] | None = claimed.rows
    if sender.configured:  # an earlier attempt may have posted some: look in the channel first (token mode)
        todo = delivery.look(claimed.rows, finder(sender, None))
        for found in delivery.found.values():
            metadata["message_ts"] = found.ts or ""
    keys_left = [r.key for r in todo or [] if r.key is not None]
    return (keys_left, delivery) if keys_left else None


def send_message(
    delivery: Delivery, post: Callable[[str], Delivered], todo: list[Key], metadata: dict[str, Any]
) -> None:
    """Step (3) of `deliver`: post the message under the attempt's delivery id (`post`: SlackSender.notify, or its
    `send` of a message drawn elsewhere) and settle the rows `todo` by the outcome (steps/delivery.py); the message's
    ts in `metadata`."""

    def send(_: list[Row]) -> Sent:
        delivered = post(delivery.claimed.delivery_id)
        metadata["message_ts"] = delivered.ts or ""
        for warning in delivered.warnings:
            delivery.log.warning(f"Slack: {warning}")
        return sent_of(delivered)

    delivery.send([delivery.claimed.of(todo)], send)


def withhold_reason(found: pd.DataFrame, max_age: timedelta, now: datetime, reanalysis: bool = False) -> str | None:
    """Why an analysis's alerts (`found`, alerts.detections rows) are recorded but not sent, or None to send them:
    the nightly reanalysis never posts, and neither does an analysis whose window closed more than `max_age` ago."""
    if reanalysis:
        return "found by the nightly reanalysis, which never posts"
    closed = pd.Timestamp(found["window_end"].max()).to_pydatetime()
    if now - closed > max_age:
        return (
            f"the analysed window closed at {closed.isoformat()}, more than {max_age.total_seconds() / 3600:g} h "
            "ago: not sent"
        )
    return None


def run_url(run_id: str | None, dagster_url: str | None) -> str | None:
    """The run's page in the Dagster UI at `dagster_url` (RADAR_DAGSTER_URL, a destination resource's; unset:
    http://localhost:3000)."""
    if not run_id:
        return None
    return f"{(dagster_url or 'http://localhost:3000').rstrip('/')}/runs/{run_id}"


def deploy_facts(found: pd.DataFrame, dagster_url: str | None) -> AnalysisFacts:
    """The message header of a deploy's analysis, from its detections (alerts.detections rows); its run linked in
    the Dagster UI at `dagster_url` (run_url)."""
    first = found.iloc[0]
    return AnalysisFacts(
        analysis_id=str(first.deploy_id),
        target=str(first.target),
        split_at=pd.Timestamp(first.deployed_at).to_pydatetime(),
        service=first.service,
        version=first.version,
        url=first.url,
        run_url=run_url(first.run_id, dagster_url),
    )


def period_facts(analysis_id: str, target: str, rows: pd.DataFrame, dagster_url: str | None) -> AnalysisFacts:
    """The message header of a periodic check on one target: the analysis window is [t − 2P, t], and the latest
    period, the one alerted on, is its second half; its run linked as deploy_facts'."""
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
        run_url=run_url(first.run_id, dagster_url),
        period=(split, end.to_pydatetime()),
    )


def change_of(row: Any) -> LoadChange:
    """A load change as the messages show it, from an alerts.load_changes row."""

    def number(value: Any) -> float | None:
        return None if value is None or pd.isna(value) else float(value)

    return LoadChange(
        queryid=int(row.queryid),
        query=row.query or f"queryid {row.queryid}",
        kind=str(row.kind),
        calls_per_min_before=float(row.calls_per_min_before),
        calls_per_min_after=float(row.calls_per_min_after),
        exec_ms_per_min_before=float(row.exec_ms_per_min_before),
        exec_ms_per_min_after=float(row.exec_ms_per_min_after),
        mean_before_ms=number(row.mean_before_ms),
        mean_after_ms=number(row.mean_after_ms),
        share_of_time_after=number(row.share_of_time_after) or 0.0,
        plan_summary=row.first_plan if isinstance(row.first_plan, str) else None,
        partner_queryid=None if pd.isna(getattr(row, "partner_queryid", None)) else int(row.partner_queryid),
        per_call_factor=number(getattr(row, "per_call_factor", None)),
    )


def regression_of(row: Any) -> Regression:
    """A regression as the messages show it, from an alerts.detections row."""

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
        factor_low=None if pd.isna(row.factor_low) else float(row.factor_low),
        factor_high=None if pd.isna(row.factor_high) else float(row.factor_high),
        history_intervals=None if pd.isna(row.history_intervals) else float(row.history_intervals),
        shared_with=list(row.queryid_shared_with) if isinstance(row.queryid_shared_with, list) else None,
        cause_detail=_text_or_none(getattr(row, "cause_detail", None)),
        named_changes=_sentences(getattr(row, "named_changes", None)),
        undo_hint=_text_or_none(getattr(row, "undo_hint", None)),
        group=_text_or_none(getattr(row, "group_regressed", None)),
        key=statement_key([getattr(row, k) for k in KEY]),
        expected_factor=None if pd.isna(getattr(row, "expected_factor", None)) else float(row.expected_factor),
        **_found_by_look(row),
    )


def _found_by_look(row: Any) -> dict[str, Any]:
    """A later look's detection (sql/0028): its look and how long after the deploy that look's after side ended."""
    look = getattr(row, "look", 0)
    if look is None or pd.isna(look) or int(look) == 0:
        return {}
    end, deployed = getattr(row, "look_end", None), getattr(row, "deployed_at", None)
    after = None if end is None or deployed is None or pd.isna(end) or pd.isna(deployed) else end - deployed
    return {"look": int(look), "found_after": None if after is None else pd.Timedelta(after).to_pytimedelta()}


def _text_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _sentences(value: Any) -> list[str] | None:
    """The sentences of a verdict's named_changes (a JSON array of NamedChange.to_json objects), None without."""
    if isinstance(value, str):
        value = json.loads(value)
    if not isinstance(value, list):
        return None
    return [str(c["sentence"]) for c in value if isinstance(c, dict) and c.get("sentence")] or None


def chart_series(conn: sa.Connection, facts: AnalysisFacts, rows: pd.DataFrame) -> dict[Any, pd.Series]:
    """Each regression's interval means (by its row's index in `rows`, alerts.detections rows) over the spans its
    verdict was decided on: the analysed window (split ± W), or for a later look's detection that look's spans (its
    radar.deploy_look row; without one, as long before the deploy as its after side, which ends at look_end)."""
    settings = EngineSettings.from_dict(rows["settings"].iloc[0])
    first = (facts.split_at - settings.window, facts.split_at + settings.window)
    spans = {label: first for label in rows.index}
    later = [label for label, look in zip(rows.index, rows.get("look", pd.Series(0, index=rows.index)), strict=True)
             if look is not None and not pd.isna(look) and int(look) > 0]  # fmt: skip
    if later and not facts.period:
        from radar_pipeline.warehouse.looks import looks_of

        recorded = looks_of(conn, facts.analysis_id)
        by_look = {
            int(r.look): (r.before_start.to_pydatetime(), r.after_end.to_pydatetime())
            for r in recorded[(recorded["target"] == facts.target) & recorded["before_start"].notna()].itertuples()
        }
        for label in later:
            end = pd.Timestamp(rows.at[label, "look_end"]).to_pydatetime()
            spans[label] = by_look.get(int(rows.at[label, "look"]), (facts.split_at - (end - facts.split_at), end))
    by_span: dict[tuple[datetime, datetime], list[Any]] = {}
    for label, span in spans.items():
        by_span.setdefault(span, []).append(label)
    out: dict[Any, pd.Series] = {}
    for (lo, hi), labels in by_span.items():
        part = rows.loc[labels]
        window = read_window(conn, facts.target, lo, hi, only=part[KEY])
        bare = window.counters.drop(columns=["fingerprint", "dbid", "userid", "toplevel"])  # a series per key
        series = interval_means(bare, pd.Timestamp(lo), pd.Timestamp(hi))
        by_key = {tuple(k): i for i, k in enumerate(window.keys[KEY].itertuples(index=False))}
        for label, row in zip(part.index, part.itertuples(), strict=True):
            means = series.get(by_key.get((int(row.dbid), int(row.userid), int(row.queryid), bool(row.toplevel))))
            if means is not None:
                out[label] = means
    return out


def _charts(
    conn: sa.Connection, facts: AnalysisFacts, rows: pd.DataFrame, chart_dir: Path | None
) -> list[tuple[Path, str]]:
    """A PNG per regression from the interval means of the window its verdict was decided on (chart_series)."""
    from radar_pipeline.alerts.chart import (
        chart_title,
        render_chart,
    )  # matplotlib: only runs that draw pay for its import

    settings = EngineSettings.from_dict(rows["settings"].iloc[0])
    series = chart_series(conn, facts, rows)
    folder = chart_folder(facts.analysis_id, chart_dir)
    charts = []
    for label, row in zip(rows.index, rows.itertuples(), strict=True):
        means = series.get(label)
        if means is None:
            continue
        if facts.period:
            what = f"queryid {row.queryid} on {facts.target}: ×{row.change_factor:.2f} in {facts.analysis_id}"
        else:
            what = f"queryid {row.queryid}: ×{row.change_factor:.2f} after deploy {facts.analysis_id}"
        title = chart_title(row.query, what)
        path = render_chart(
            folder / (f"{facts.target}-{_label(row)}.png" if facts.period else f"{_label(row)}.png"),
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
        charts.append((path, what))
    return charts


def _label(row: Any) -> str:
    return key_label((row.dbid, row.userid, row.queryid, row.toplevel))


def chart_folder(partition_key: str, chart_dir: Path | None) -> Path:
    """Where a partition's chart images go: <chart_dir>/<partition> (RADAR_CHART_DIR, the analysis resource's), else
    a new temporary folder."""
    if chart_dir:
        return chart_dir / partition_key.replace(":", "_")
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
