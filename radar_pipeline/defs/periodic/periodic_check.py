"""The periodic check in Dagster: hourly partitions, periodic_verdicts, periodic_alerts, their job and schedule, built
when the location loads (the partitions' first hour and the schedule's minute are settings)."""

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import dagster as dg

from radar_pipeline.config.settings import periodic_minute, periodic_start
from radar_pipeline.defs.alerts.regression_alerts import as_metadata
from radar_pipeline.defs.deploys.deploy_verdicts import DETECTION_ROWS_SHOWN, VerdictConfig, configured_targets
from radar_pipeline.defs.metadata import CHART_IMAGES_LIMIT, ID, OWNERS, detection_cells, status_counts, table
from radar_pipeline.defs.resources import (
    AnalysisResource,
    ChannelsResource,
    SlackResource,
    TargetsResource,
    WarehouseResource,
)
from radar_pipeline.engine import Verdict

if TYPE_CHECKING:
    import pandas as pd

    from radar_pipeline.alerts.render import AnalysisFacts
    from radar_pipeline.steps.periodic_check import PeriodAnalysis

ALL_TARGETS_CHECK = "all_targets_analysed"


def periodic_verdicts(
    context: dg.AssetExecutionContext,
    config: VerdictConfig,
    warehouse: WarehouseResource,
    analysis: AnalysisResource,
    targets: TargetsResource,
) -> dg.MaterializeResult:
    """Decide, for every query of every target scraped in [t − 2P, t] (t: the end of the partition's hour), whether
    it got slower between the two periods; report each query once until it recovers."""
    from radar_pipeline.steps.deploy_analysis import AnalysisRefused, AnalysisRun
    from radar_pipeline.steps.periodic_check import analyse_period

    try:
        settings = analysis.periodic_settings(**config.model_dump())
    except ValueError as exc:
        raise dg.Failure(description=f"run config for periodic_verdicts: {exc}") from None
    try:
        run = AnalysisRun(
            warehouse.engine(), settings, context.run.run_id, analysis.settle, configured_targets(targets, context)
        )
        done, failed = analyse_period(
            run, context.partition_key, context.partition_time_window.end, analysis.settings().tolerance
        )
    except AnalysisRefused as exc:
        raise dg.Failure(description=str(exc)) from None
    for result in done:
        for line in _report_log(result):
            context.log.info(line)
    for target, error in failed.items():
        context.log.error(f"target {target!r} was not analysed: {error}")
    if failed and not done:
        raise dg.Failure(description="periodic analysis failed for every target: " + "; ".join(failed.values()))
    # The targets that were analysed keep their verdicts and alerts; the check names those that were not.
    return dg.MaterializeResult(
        metadata=_metadata(done, settings.window.total_seconds()),
        check_results=[
            dg.AssetCheckResult(
                check_name=ALL_TARGETS_CHECK,
                passed=not failed,
                severity=dg.AssetCheckSeverity.WARN,
                metadata={"failed_targets": dg.MetadataValue.json(failed)},
            )
        ],
    )


def _report_log(result: "PeriodAnalysis") -> list[str]:
    import pandas as pd

    v = result.verdicts
    lines = [
        f"{result.target}: queryid {r.queryid} {r.report}: {r.mean_before_ms:.3f} → {r.mean_after_ms:.3f} ms "
        f"(×{r.change_factor:.2f}, change at {pd.Timestamp(r.change_at).isoformat()}, cause {r.cause})"
        for r in v[v["verdict"] == Verdict.DETECTED].itertuples()
    ]
    lines += [
        f"{result.target}: queryid {r.queryid} recovered: {r.recovered_ms:.3f} ms "
        f"(before the change {r.baseline_ms:.3f})"
        for r in result.recovered.itertuples()
    ]
    return lines


def _metadata(done: "list[PeriodAnalysis]", period_s: float) -> dict[str, Any]:
    import pandas as pd

    from radar_pipeline.steps.periodic_check import ALREADY_REPORTED, INTENDED, LEFT_TO_DEPLOY, REPORTED

    frames = [r.verdicts.assign(target=r.target) for r in done]
    if not frames:
        return {
            "targets": dg.MetadataValue.json([]),
            "period_s": period_s,
            "queries": 0,
            "note": "no target was scraped in this period",
        }
    v = pd.concat(frames, ignore_index=True)
    reports = v["report"].value_counts()
    reported = v[v["report"] == REPORTED].sort_values("confidence", ascending=False)
    texts = {(r.target, q): t for r in done for q, t in r.texts.items()}
    rows = [
        {
            "target": row.target,
            **detection_cells(row, texts.get((row.target, int(row.queryid)), "")),
            "change_at": pd.Timestamp(row.change_at).isoformat(),
            "cause": row.cause,
            "cause_detail": row.cause_detail or "",
        }
        for row in reported.head(DETECTION_ROWS_SHOWN).itertuples()
    ]
    columns = [("target", "string"), ("query", "string"), ("queryid", ID)]
    columns += [("before_ms", "float"), ("after_ms", "float"), ("factor", "float")]
    columns += [("factor_low", "float"), ("factor_high", "float"), ("history_intervals", "int")]
    columns += [("change_at", "string"), ("cause", "string"), ("cause_detail", "string"), ("caution", "string")]
    return {
        "targets": dg.MetadataValue.json([r.target for r in done]),
        "period_s": period_s,
        "queries": len(v),
        "detected": int((v["verdict"] == Verdict.DETECTED).sum()),
        "reported": int(reports.get(REPORTED, 0)),
        "already_reported": int(reports.get(ALREADY_REPORTED, 0)),
        "left_to_deploy": int(reports.get(LEFT_TO_DEPLOY, 0)),
        "intended": int(reports.get(INTENDED, 0)),
        "recovered": sum(len(r.recovered) for r in done),
        "reported_regressions": table(columns, rows),
        "reported_not_shown": max(0, len(reported) - DETECTION_ROWS_SHOWN),
    }


def periodic_alerts(
    context: dg.AssetExecutionContext,
    warehouse: WarehouseResource,
    slack: SlackResource,
    channels: ChannelsResource,
    analysis: AnalysisResource,
) -> dg.MaterializeResult:
    """One message per target for the regressions this hour's check reported, like a deploy's alerts, then the same
    on each routed channel beyond Slack, and the resolves of the episodes this hour closed; none for an hour that
    ended longer ago than the alert age limit (RADAR_ALERT_MAX_AGE_HOURS, default 24: a backfill; its reports are in
    radar.regression_episode)."""
    from radar_pipeline.alerts.channels import REGRESSION, close
    from radar_pipeline.steps.alert_delivery import deliver, period_facts
    from radar_pipeline.steps.channel_delivery import NO_RESOLVES, RECOVERED, deliver_routed, update_messages
    from radar_pipeline.steps.periodic_check import analysis_id
    from radar_pipeline.warehouse import alerts, outbox

    ident = analysis_id(context.partition_key)
    ended = context.partition_time_window.end
    max_age = slack.alert_max_age
    engine = warehouse.engine()
    with engine.connect() as conn:
        found = alerts.detections(conn, ident)

    def facts_of(target: str, rows: "pd.DataFrame") -> "AnalysisFacts":
        return period_facts(ident, target, rows, slack.dagster_url or None)

    if datetime.now(UTC) - ended > max_age:
        # Closing is never noise: what a label asked of this hour's alerts (resolves, message updates) still goes.
        routed = channels.routed()
        try:
            closing = update_messages(context.log, engine, slack.sender(), ident, found, None, facts_of)
            if routed:
                none = found.iloc[0:0]
                closing.update(deliver_routed(context.log, engine, routed, ident, None, none, None, resolves=RECOVERED))
        finally:
            close(routed)
        return dg.MaterializeResult(
            metadata={
                "regressions": 0,
                "note": f"the hour ended at {ended.isoformat()}, over {max_age.total_seconds() / 3600:g} h ago: "
                "not alerted",
                **({"closing": dg.MetadataValue.json(closing)} if closing else {}),
            }
        )
    metadata: dict[str, Any] = {"regressions": 0}
    share = CHART_IMAGES_LIMIT // max(1, found["target"].nunique())  # the targets' charts share one bound
    failures: list[Exception] = []  # one target's or step's error never stops the others: raised after them all
    for target, rows in found.groupby("target", sort=True) if slack.takes(REGRESSION) else ():
        facts = period_facts(ident, str(target), rows, slack.dagster_url or None)
        try:
            alerted = rows.reset_index(drop=True)
            sent = as_metadata(
                deliver(context.log, engine, slack.sender(), alerted, facts, chart_dir=analysis.chart_root), share
            )
        except Exception as exc:  # noqa: BLE001 - raised below, after the other targets and channels
            context.log.error(f"{target}: Slack: {type(exc).__name__}")
            failures.append(exc)
            continue
        metadata["regressions"] += sent.pop("regressions")
        metadata.update({f"{target}: {k}": v for k, v in sent.items()})
    try:
        metadata.update(update_messages(context.log, engine, slack.sender(), ident, found, None, facts_of))
    except Exception as exc:  # noqa: BLE001 - raised below, after the channels
        context.log.error(f"Slack message updates: {type(exc).__name__}")
        failures.append(exc)
    routed = channels.routed()
    try:
        delivered: dict[str, Any] = {}
        for target, rows in found.groupby("target", sort=True) if routed else ():
            facts = period_facts(ident, str(target), rows, slack.dagster_url or None)
            try:  # deliver_routed logs each channel's error and raises after its channels
                shown = deliver_routed(context.log, engine, routed, ident, facts, rows, None, resolves=NO_RESOLVES)
            except Exception as exc:  # noqa: BLE001 - raised below, after the other targets and the recoveries
                failures.append(exc)
                continue
            delivered.update({f"{target}: {k}": v for k, v in shown.items()})
        if routed:
            try:
                delivered.update(
                    deliver_routed(context.log, engine, routed, ident, None, found.iloc[0:0], None, resolves=RECOVERED)
                )
            except Exception as exc:  # noqa: BLE001 - raised below
                failures.append(exc)
            metadata["channels"] = dg.MetadataValue.json(delivered)
    finally:
        close(routed)
    if failures:
        raise failures[0]
    with engine.connect() as conn:
        metadata.update(status_counts(outbox.statuses(conn, ident)))
    if found.empty:
        metadata["note"] = "nothing new to report this hour"
    return dg.MaterializeResult(metadata=metadata)


def periodic_definitions(start: str, minute: int) -> dg.Definitions:
    """periodic_verdicts and periodic_alerts over hourly partitions from `start` (an hour, UTC, as 2026-11-01-00:00),
    their job, and the schedule that runs the hour just ended `minute` minutes past the next one."""
    partitions = dg.HourlyPartitionsDefinition(start_date=start)
    verdicts = dg.asset(
        name="periodic_verdicts",
        partitions_def=partitions,
        group_name="periodic",
        deps=["pgss_snapshots", "plan_snapshots"],  # what it reads, so the UI's lineage shows the whole flow
        kinds={"python", "postgres"},
        owners=OWNERS,
        check_specs=[
            dg.AssetCheckSpec(ALL_TARGETS_CHECK, asset="periodic_verdicts", description="every scraped target analysed")
        ],
        description="Hourly: every query's latest period P against the one before, for regressions with no deploy "
        "behind them (radar.verdict with trigger 'periodic'; reporting: radar.regression_episode).",
    )(periodic_verdicts)
    alerts = dg.asset(
        name="periodic_alerts",
        partitions_def=partitions,
        deps=[verdicts],
        group_name="periodic",
        kinds={"slack"},
        owners=OWNERS,
        description="Slack alerts for the regressions the periodic check reported (radar.outbox).",
    )(periodic_alerts)
    job = dg.define_asset_job("periodic_job", selection=dg.AssetSelection.assets(verdicts, alerts))
    schedule = dg.build_schedule_from_partitioned_job(
        job,
        minute_of_hour=minute,
        name="periodic_schedule",
        default_status=dg.DefaultScheduleStatus.RUNNING,
        description="Hourly, a few minutes after the hour: the periodic check of the hour just ended.",
    )
    return dg.Definitions(assets=[verdicts, alerts], jobs=[job], schedules=[schedule])


@dg.definitions
def periodic() -> dg.Definitions:
    """The periodic check as configured: RADAR_PERIODIC_START and RADAR_PERIODIC_MINUTE."""
    return periodic_definitions(periodic_start(), periodic_minute())
