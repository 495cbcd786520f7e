"""Deploys in Dagster: the `deploys` partitions, the deploy_verdicts asset, its sensor and the nightly reanalysis."""

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import dagster as dg

from radar_pipeline import plan_shape
from radar_pipeline.alerts.render import NO_DATA_BEFORE
from radar_pipeline.config import ConfigError, Target, mask_password, printable
from radar_pipeline.config.settings import REANALYSIS_DAYS_VAR, count_setting
from radar_pipeline.defs.metadata import ID, OWNERS, detection_cells, rounded, table
from radar_pipeline.defs.resources import (
    AnalysisResource,
    TargetsResource,
    WarehouseResource,
    engine_overrides_config,
)
from radar_pipeline.engine import Tier, Verdict
from radar_pipeline.pgss_model import key_label

if TYPE_CHECKING:  # the engine, steps/ and warehouse/ (pandas, SQLAlchemy) load when a run or a tick needs them
    from radar_pipeline.engine import EngineSettings
    from radar_pipeline.steps.deploy_analysis import DeployAnalysis

deploys_partitions = dg.DynamicPartitionsDefinition(name="deploys")

COVERAGE_CHECK = "scrape_coverage"
RESETS_CHECK = "no_resets_in_window"
DETECTION_ROWS_SHOWN = 25
SENSOR_PAGE = 200  # deploys requested per sensor evaluation at most; a larger burst continues on the next ticks
DETECTION_COLUMNS = [
    ("query", "string"),
    ("queryid", ID),
    ("before_ms", "float"),
    ("after_ms", "float"),
    ("factor", "float"),
    ("factor_low", "float"),
    ("factor_high", "float"),
    ("history_intervals", "int"),
    ("confidence", "float"),
    ("change_vs_deploy_s", "int"),
    ("cause", "string"),
    ("cause_detail", "string"),
    ("undo", "string"),
    ("plan", "string"),
    ("caution", "string"),
]
# The statements marked beyond their verdicts (sql/0036): probably slower (open, slower on their own evidence) and
# improved (cleared, clearly faster), the busiest first.
TIER_COLUMNS = [
    ("tier", "string"),
    ("query", "string"),
    ("queryid", ID),
    ("verdict", "string"),
    ("factor", "float"),
    ("factor_low", "float"),
    ("factor_high", "float"),
    ("share_of_time_after", "float"),
]
PLAN_DIFF_COLUMNS = [
    ("query", "string"),
    ("statement", "string"),
    ("summary", "string"),
    ("unavailable", "string"),
    ("root_before", "string"),
    ("root_after", "string"),
    ("changes", "string"),
    ("removed", "string"),
    ("added", "string"),
    ("cost_before", "float"),
    ("cost_after", "float"),
    ("cost_factor", "float"),
    ("source_before", "string"),
    ("source_after", "string"),
    ("cautions", "string"),
    ("queryid_not_checked", "string"),
]
SUMMARY_COLUMNS = [
    ("database", "string"),
    ("exec_ms_per_min_before", "float"),
    ("exec_ms_per_min_after", "float"),
    ("calls_per_min_before", "float"),
    ("calls_per_min_after", "float"),
    ("statements_before", "int"),
    ("statements_after", "int"),
    ("note", "string"),
]
CHANGE_COLUMNS = [
    ("kind", "string"),
    ("heavy", "bool"),
    ("query", "string"),
    ("queryid", ID),
    ("calls_per_min_before", "float"),
    ("calls_per_min_after", "float"),
    ("exec_ms_per_min_before", "float"),
    ("exec_ms_per_min_after", "float"),
    ("mean_after_ms", "float"),
    ("rows_per_call_before", "float"),
    ("rows_per_call_after", "float"),
    ("share_ratio", "float"),
    ("p_family", "float"),
    ("partner_queryid", ID),  # replaced: the other half
    ("per_call_factor", "float"),
]
REANALYSIS_TAG = "radar/reanalysis"  # on the nightly reanalysis's runs: their alerts are recorded, never sent
# A backfill's run analyses this many deploys one after another. Measured (benchmarks/backfill_bench.py, 1,000
# statements): a deploy takes about 0.5 s in a run, a run about 6 s to start, so a run of 100 (about a minute) spends
# a tenth of its time starting; 1,000 deploys make 10 runs, enough to keep every run slot busy to the end, and a
# failed run is at most a minute's work to retry.
BACKFILL_PARTITIONS_PER_RUN = 100
# The concurrency pool of the analyses: its limit (dagster.yaml, the Helm values) caps the analyses running at once
# across all runs, so a backfill leaves the CPU and the warehouse to the minutely snapshots.
ANALYSIS_POOL = "radar/analysis"
FAILED_SHOWN = 20  # failed deploys named in a backfill run's failure; the run log has each one's reason
CHECKS_BATCH = 25  # a backfill run's deploys whose checks are evaluated together (their materializations read at once)
# The tags a run over several partitions carries instead of `dagster/partition`: the range's first and last keys.
RANGE_START, RANGE_END = "dagster/asset_partition_range_start", "dagster/asset_partition_range_end"


if TYPE_CHECKING:
    VerdictConfig = dg.Config
else:
    VerdictConfig = engine_overrides_config(
        "VerdictConfig",
        "Per-run overrides of the engine settings (durations in seconds); unset fields keep the defaults.",
        __name__,
    )


@dg.asset(
    partitions_def=deploys_partitions,
    group_name="analysis",
    deps=["pgss_snapshots", "plan_snapshots"],  # what it reads, so the UI's lineage shows the whole flow
    kinds={"python", "postgres"},
    owners=OWNERS,
    check_specs=[
        dg.AssetCheckSpec(COVERAGE_CHECK, asset="deploy_verdicts", description="no scrape gap over 3 intervals"),
        dg.AssetCheckSpec(RESETS_CHECK, asset="deploy_verdicts", description="no stats reset or eviction"),
    ],
    backfill_policy=dg.BackfillPolicy.multi_run(max_partitions_per_run=BACKFILL_PARTITIONS_PER_RUN),
    pool=ANALYSIS_POOL,
    output_required=False,  # a backfill's run reports each deploy by its own materialization instead
    description="One verdict per query for each deploy, and the deploy's state (radar.analysis, radar.verdict, "
    "radar.deploy_state; detections: radar.regression).",
)
def deploy_verdicts(
    context: dg.AssetExecutionContext,
    config: VerdictConfig,
    warehouse: WarehouseResource,
    analysis: AnalysisResource,
    targets: TargetsResource,
) -> Iterator[dg.MaterializeResult | dg.AssetMaterialization | dg.AssetCheckEvaluation | dg.Output]:
    """Decide, for every query of the deploy's target, whether this deploy made it slower.

    A run of one deploy (the sensor's, the reconciler's, the nightly reanalysis's) reports it as a MaterializeResult
    with its checks. A backfill's run of several deploys analyses them in turn and reports each one as it is stored:
    its own materialization, with the same metadata, and its checks; a deploy that cannot be analysed is logged and
    the rest go on, and the run fails at the end naming those deploys.
    """
    try:
        settings = analysis.settings(**config.model_dump())
    except ValueError as exc:
        raise dg.Failure(description=f"run config for deploy_verdicts: {exc}", allow_retries=False) from None
    if context.has_partition_key:
        yield _single_deploy(context, warehouse, analysis, targets, settings)
        return
    yield from _several_deploys(context, warehouse, analysis, targets, settings)


def _single_deploy(
    context: dg.AssetExecutionContext,
    warehouse: WarehouseResource,
    analysis: AnalysisResource,
    targets: TargetsResource,
    settings: "EngineSettings",
) -> dg.MaterializeResult:
    from radar_pipeline.steps.deploy_analysis import AnalysisRefused, AnalysisRun, analyse_deploy
    from radar_pipeline.warehouse.deploys import analysing

    try:
        run = AnalysisRun(
            warehouse.engine(), settings, context.run.run_id, analysis.settle, configured_targets(targets, context)
        )
        with analysing(run.warehouse, context.partition_key):  # what `radar gate --wait` says while it runs
            result = analyse_deploy(run, context.partition_key)
    except AnalysisRefused as exc:
        raise dg.Failure(description=str(exc), allow_retries=False) from None
    for line in _detections_log(result):
        context.log.info(line)
    return dg.MaterializeResult(
        metadata=_metadata(result),
        check_results=_checks(result, analysis.scrape_interval_seconds),
    )


def _several_deploys(
    context: dg.AssetExecutionContext,
    warehouse: WarehouseResource,
    analysis: AnalysisResource,
    targets: TargetsResource,
    settings: "EngineSettings",
) -> Iterator[dg.AssetMaterialization | dg.AssetCheckEvaluation | dg.Output]:
    """The deploys of the run's partition range (analyse_deploys: overlapping windows read once), through one
    warehouse engine; a materialization for each one stored, its checks CHECKS_BATCH deploys at a time, and a Failure
    at the end naming those that were not."""
    from radar_pipeline.steps.deploy_analysis import AnalysisRefused, AnalysisRun, analyse_deploys

    live = configured_targets(targets, context)
    keys = context.partition_keys
    failed: list[str] = []
    analysed = analyse_deploys(
        AnalysisRun(warehouse.engine(), settings, context.run.run_id, analysis.settle, live), keys
    )
    place = {deploy_id: number for number, deploy_id in enumerate(keys, 1)}
    checks: dict[str, list[dg.AssetCheckResult]] = {}  # the stored deploys' checks, evaluated CHECKS_BATCH at a time
    for deploy_id, result in analysed:
        if isinstance(result, Exception):  # the others' analyses still run and are reported
            failed.append(deploy_id)
            reason = str(result) if isinstance(result, AnalysisRefused) else f"{type(result).__name__}: {result}"
            reason = mask_password(reason)
            context.log.error(f"deploy {deploy_id} ({place[deploy_id]}/{len(keys)}) not analysed: {reason}")
            continue
        for line in _detections_log(result):
            context.log.info(f"{deploy_id}: {line}")
        yield dg.AssetMaterialization(asset_key=context.asset_key, partition=deploy_id, metadata=_metadata(result))
        checks[deploy_id] = _checks(result, analysis.scrape_interval_seconds)
        if len(checks) == CHECKS_BATCH:
            yield from _check_evaluations(context, checks)
            checks = {}
    yield from _check_evaluations(context, checks)
    context.log.info(f"analysed {len(keys) - len(failed)} of {len(keys)} deploys")
    if not failed:
        # The checks' outputs, once for the run (each deploy's evaluations are above), as a MaterializeResult's
        # check results would yield them: Dagster requires them of a successful step.
        for key in sorted(context.selected_asset_check_keys, key=lambda k: k.name):
            yield dg.Output(None, output_name=context.assets_def.get_output_name_for_asset_check_key(key))
        return
    shown = ", ".join(failed[:FAILED_SHOWN]) + (
        f" and {len(failed) - FAILED_SHOWN} more" if len(failed) > FAILED_SHOWN else ""
    )
    raise dg.Failure(
        allow_retries=False,  # the others are stored: a retry would analyse them all again
        description=f"{len(failed)} of {len(keys)} deploys were not analysed (the run log says why): {shown}; "
        "the others are stored and materialized",
        metadata={"failed": dg.MetadataValue.json(failed)},
    )


def _check_evaluations(
    context: dg.AssetExecutionContext, checks: dict[str, list[dg.AssetCheckResult]]
) -> Iterator[dg.AssetCheckEvaluation]:
    """The checks of deploys whose materializations this run just stored, each evaluation pointing at its deploy's
    materialization (as a one-deploy run's do); the materializations are looked up in one query for them all."""
    # No public name in Dagster 1.13 for the pointer AssetCheckEvaluation takes (its own AssetCheckResult builds it
    # from a one-partition step, which a backfill's run is not): loaded only by the backfill runs that need it.
    from dagster._core.definitions.asset_checks.asset_check_evaluation import (
        AssetCheckEvaluationTargetMaterializationData,
    )

    if not checks:
        return
    records = context.instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=context.asset_key, asset_partitions=list(checks)), limit=2 * len(checks)
    ).records
    stored: dict[str, AssetCheckEvaluationTargetMaterializationData] = {}
    for record in records:  # newest first: the first of this run for each deploy
        partition = record.partition_key
        if record.run_id == context.run.run_id and partition is not None and partition not in stored:
            stored[partition] = AssetCheckEvaluationTargetMaterializationData(
                run_id=record.run_id, storage_id=record.storage_id, timestamp=record.timestamp
            )
    for deploy_id, results in checks.items():
        for check in results:
            yield dg.AssetCheckEvaluation(
                asset_key=context.asset_key,
                check_name=str(check.check_name),
                passed=check.passed,
                metadata=check.metadata,
                severity=check.severity,
                target_materialization_data=stored.get(deploy_id),
            )


def configured_targets(targets: TargetsResource, context: dg.AssetExecutionContext) -> dict[str, Target]:
    """The watched targets configured here, by name (for plans captured at analysis time); none when unconfigured."""
    try:
        return {t.name: t for t in targets.targets()}
    except ConfigError as exc:
        context.log.warning(f"plans cannot be captured during this analysis: {exc}")
        return {}


def _detections_log(result: "DeployAnalysis") -> list[str]:
    detected = result.verdicts[result.verdicts["verdict"] == Verdict.DETECTED]
    return [
        f"regression: queryid {r.queryid}: {r.mean_before_ms:.3f} → {r.mean_after_ms:.3f} ms "
        f"(×{r.change_factor:.2f}, confidence {r.confidence:.4f}, cause {r.cause}"
        f"{': ' + ' '.join(printable(r.cause_detail).split()) if isinstance(r.cause_detail, str) else ''})"
        for r in detected.itertuples()
    ]


def _metadata(result: "DeployAnalysis") -> dict[str, Any]:
    """The materialization's metadata, the deploy's state first (radar.deploy_state: pass, fail or inconclusive, and
    the share of its execution time after the deploy that is cleared), then its verdict counts and tables."""
    v = result.verdicts
    counts = v["verdict"].value_counts()
    detected = v[v["verdict"] == Verdict.DETECTED].sort_values("confidence", ascending=False)
    rows = [
        {
            **detection_cells(row, result.texts.get(int(row.queryid), "")),
            "confidence": round(float(row.confidence), 4),
            "change_vs_deploy_s": round((row.change_at - result.event.deployed_at).total_seconds()),
            "cause": row.cause,
            "cause_detail": row.cause_detail if isinstance(row.cause_detail, str) else "",
            "undo": row.undo_hint or "",
            "plan": _plan_summary(row.plan_diff),
        }
        for row in detected.head(DETECTION_ROWS_SHOWN).itertuples()
    ]
    return {
        "state": str(result.state["state"]),
        "cleared_share": rounded(result.state["cleared_share"], 4),  # None where nothing ran after the deploy
        "pass_share": float(result.state["pass_share"]),
        # the rule's margins (sql/0036): the time one open statement, and all of them, may add beyond θ, with the bars
        "largest_excess_share": rounded(result.state.get("largest_excess_share"), 4),
        "max_open_excess": rounded(result.state.get("max_open_excess"), 4),
        "open_excess_share": rounded(result.state.get("open_excess_share"), 4),
        "max_total_excess": rounded(result.state.get("max_total_excess"), 4),
        "largest_open_share": rounded(result.state.get("largest_open_share"), 4),
        "deploy": dg.MetadataValue.json(
            {
                "deploy_id": result.event.deploy_id,
                "target": result.event.target,
                "deployed_at": result.event.deployed_at.isoformat() if result.event.deployed_at else None,
                "service": result.event.service,
                "version": result.event.version,
            }
        ),
        "queries": len(v),
        "detected": int(counts.get(Verdict.DETECTED, 0)),
        "no_regression": int(counts.get(Verdict.NO_REGRESSION, 0)),
        "inconclusive": int(counts.get(Verdict.INCONCLUSIVE, 0)),
        "insufficient_data": int(counts.get(Verdict.INSUFFICIENT_DATA, 0)),
        "improved": int((v["tier"] == Tier.IMPROVED).sum()),
        "probably_slower": int((v["tier"] == Tier.PROBABLY_SLOWER).sum()),
        "tiers": table(TIER_COLUMNS, _tier_rows(result)),
        "plan_diffs": table(
            PLAN_DIFF_COLUMNS,
            [
                {
                    "query": result.texts.get(int(r.queryid), ""),
                    **_plan_diff_row(key_label((r.dbid, r.userid, r.queryid, r.toplevel)), r.plan_diff),
                }
                for r in detected.head(DETECTION_ROWS_SHOWN).itertuples()
                if isinstance(r.plan_diff, dict) and r.plan_diff
            ],
        ),
        "reasons": table(
            [("reason", "string"), ("statements", "int")],
            [{"reason": str(k), "statements": int(n)} for k, n in v["reason"].value_counts().items()],
        ),
        "detections": table(DETECTION_COLUMNS, rows),
        "database_time": table(SUMMARY_COLUMNS, _summary_rows(result)),
        "load_changes": table(CHANGE_COLUMNS, _change_rows(result)),
        "load_changes_not_shown": max(0, len(result.changes) - DETECTION_ROWS_SHOWN),  # radar.statement_change
        "detections_not_shown": max(0, len(detected) - DETECTION_ROWS_SHOWN),  # the rest: radar.regression
        "read_s": round(result.seconds.read, 3),
        "engine_s": round(result.seconds.engine, 3),
        "plans_s": round(result.seconds.plans, 3),
        "write_s": round(result.seconds.write, 3),
    }


def _tier_rows(result: "DeployAnalysis") -> list[dict[str, Any]]:
    """The statements marked probably slower, then those improved, each the busiest first (at most
    DETECTION_ROWS_SHOWN of each): the factor at the change (else the window's) with its 95% interval and the
    statement's share of the execution time after the deploy."""
    import numpy as np

    v = result.verdicts
    spent = (v["calls_after"].astype(float) * v["mean_after_ms"].astype(float)).to_numpy()
    spent = np.where(np.isfinite(spent) & (spent > 0), spent, 0.0)
    whole = spent.sum()
    at_change = (v["segment_mean_after_ms"] / v["segment_mean_before_ms"]).to_numpy(np.float64)
    factor = np.where(np.isfinite(at_change), at_change, v["change_factor"].to_numpy(np.float64))
    rows = []
    for tier in (Tier.PROBABLY_SLOWER, Tier.IMPROVED):
        marked = np.flatnonzero((v["tier"] == tier).to_numpy())
        for i in marked[np.argsort(-spent[marked], kind="stable")][:DETECTION_ROWS_SHOWN]:
            row = v.iloc[i]
            rows.append(
                {
                    "tier": tier.value,
                    "query": result.texts.get(int(row["queryid"]), ""),
                    "queryid": int(row["queryid"]),
                    "verdict": row["verdict"],
                    "factor": rounded(factor[i]),
                    "factor_low": rounded(row["factor_low"]),
                    "factor_high": rounded(row["factor_high"]),
                    "share_of_time_after": rounded(spent[i] / whole, 4) if whole > 0 else None,
                }
            )
    return rows


def _summary_rows(result: "DeployAnalysis") -> list[dict[str, Any]]:
    """The impact summary: the whole target, then each database, execution time and calls per minute (the cells
    before the deploy left empty, with a note, when no statement had calls there: no data, not a load of 0)."""
    rows = []
    for r in result.summary.itertuples():
        before = int(r.statements_before) > 0
        rows.append(
            {
                "database": "all" if int(r.dbid) == -1 else str(int(r.dbid)),
                "exec_ms_per_min_before": round(float(r.exec_ms_per_min_before), 1) if before else None,
                "exec_ms_per_min_after": round(float(r.exec_ms_per_min_after), 1),
                "calls_per_min_before": round(float(r.calls_per_min_before), 1) if before else None,
                "calls_per_min_after": round(float(r.calls_per_min_after), 1),
                "statements_before": int(r.statements_before),
                "statements_after": int(r.statements_after),
                "note": "" if before else NO_DATA_BEFORE,
            }
        )
    return rows


def _change_rows(result: "DeployAnalysis") -> list[dict[str, Any]]:
    """The statements whose load changed (new, stopped, surge, n_plus_one, rows_per_call, replaced with its partner,
    deploy_statement), heaviest first."""
    return [
        {
            "kind": r.kind,
            "heavy": bool(r.heavy),
            "query": r.query,
            "queryid": int(r.queryid),
            "calls_per_min_before": round(float(r.calls_per_min_before), 1),
            "calls_per_min_after": round(float(r.calls_per_min_after), 1),
            "exec_ms_per_min_before": round(float(r.exec_ms_per_min_before), 1),
            "exec_ms_per_min_after": round(float(r.exec_ms_per_min_after), 1),
            "mean_after_ms": rounded(r.mean_after_ms, 3),
            "rows_per_call_before": rounded(r.rows_per_call_before),
            "rows_per_call_after": rounded(r.rows_per_call_after),
            "share_ratio": rounded(r.share_ratio),
            "p_family": rounded(r.p_family, 4),
            "partner_queryid": r.partner_queryid,
            "per_call_factor": rounded(r.per_call_factor),
        }
        for r in result.changes.head(DETECTION_ROWS_SHOWN).itertuples()
    ]


def _plan_diff_row(statement: str, plan_diff: dict[str, Any]) -> dict[str, Any]:
    """A detection's plan diff (plan_shape.diff, or why there is none) as one row of the plan_diffs table."""
    row: dict[str, Any] = {"statement": statement, "summary": plan_shape.summary(plan_diff), **plan_diff}
    for name in ("removed", "added", "changes", "cautions"):
        row[name] = "; ".join(plan_diff.get(name) or [])
    return row


def _plan_summary(plan_diff: object) -> str:
    if not isinstance(plan_diff, dict):
        return ""
    return plan_shape.summary(plan_diff)


def _checks(result: "DeployAnalysis", scrape_interval_s: float) -> list[dg.AssetCheckResult]:
    h = result.health
    return [
        dg.AssetCheckResult(
            check_name=COVERAGE_CHECK,
            passed=h.longest_gap_s <= 3 * scrape_interval_s and h.scrapes > 0,
            severity=dg.AssetCheckSeverity.WARN,
            metadata={"scrapes": h.scrapes, "longest_gap_s": round(h.longest_gap_s, 1)},
        ),
        dg.AssetCheckResult(
            check_name=RESETS_CHECK,
            passed=h.stats_resets == 0 and h.dealloc == 0,
            severity=dg.AssetCheckSeverity.WARN,
            metadata={"stats_resets": h.stats_resets, "dealloc": h.dealloc},
        ),
    ]


# One run per deploy decides, then alerts, sends the commit's status and extends the histories: what depends on it
# directly (regression_alerts, code_host_statuses and query_history, defined in their own modules).
# In the run's own process, one step after another: the default multiprocess executor starts a process per step,
# each loading the code location again before the analysis can begin (benchmarks/gate_latency.py: from the run's
# start to the stored analysis 4.0 s before, 1.3 s after, medians on a quiet machine; 9.7 s before at a load of 5).
# Retries are Dagster's: a step that fails (the warehouse away for a moment, a connection cut) is tried again in the
# same run, with backoff (RetryPolicy; a refusal is a Failure that allows none), and a run whose process died (its pod
# evicted, its code server gone) is started again by the daemon (run retries: dagster.yaml and the Helm values enable
# them for crashes only, the step retries covering step failures). radar_reconciler requests the deploys still without
# an analysis after that, in bounded runs with backoff.
# Two retries, 15 s then 45 s after the failures: a blip of the warehouse or a cut connection. The run holds its slot of
# the analysis pool while it waits, so longer outages are radar_reconciler's: its runs, minutes apart, hold none.
ANALYSIS_RETRY = dg.RetryPolicy(max_retries=2, delay=15, backoff=dg.Backoff.EXPONENTIAL)
ANALYSIS_RUN_RETRIES = 2
deploy_verdicts_job = dg.define_asset_job(
    "deploy_verdicts_job",
    # the later looks (deploy_looks) run when each is due, in deploy_looks_job
    selection=dg.AssetSelection.assets("deploy_verdicts").downstream(depth=1)
    - dg.AssetSelection.assets("deploy_looks"),
    executor_def=dg.in_process_executor,
    op_retry_policy=ANALYSIS_RETRY,
    tags={"dagster/max_retries": str(ANALYSIS_RUN_RETRIES)},
)
# How often deploy_event_sensor looks: a CI job or a rollout waits on it (`radar gate`), and each look is one query.
SENSOR_INTERVAL_S = 10


@dg.sensor(
    job=deploy_verdicts_job,
    minimum_interval_seconds=SENSOR_INTERVAL_S,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Turns each deploy event into a deploys partition and one analysis run, once its window has closed.",
)
def deploy_event_sensor(
    context: dg.SensorEvaluationContext, warehouse: WarehouseResource, analysis: AnalysisResource
) -> dg.SensorResult:
    """Request one deploy_verdicts run per deploy event whose window (plus one scrape interval) has closed, or whose
    window has closed and is complete: a scrape of its target captured at or after the close is stored.

    Cursor: {"ready_at": ISO time, "deploy_id": id}, the keyset position of the last event requested. An event is
    ready at max(received_at, deployed_at + window + scrape interval) by the warehouse's clock, so an event reported
    late (deployed_at long past) is ready when it arrives and is not lost. Each evaluation requests the next
    SENSOR_PAGE events after the position in (ready_at, deploy_id) order and moves the position to the last of them,
    so a burst of any size is drained over ticks and no event is read twice; run_key = deploy id besides. An event
    whose transaction committed after the position had passed it is left to radar_reconciler.

    A deploy whose window is complete before its ready_at is requested then too, outside the keyset (the cursor does
    not move for it): the scrape interval of settle is then not waited for. Its run key is its id, so when the keyset
    reaches it later Dagster starts no second run.
    """
    from radar_pipeline.warehouse import deploys

    position = cursor_position(context.cursor)
    window = timedelta(seconds=analysis.window_seconds)
    delay = window + analysis.settle
    with warehouse.engine().begin() as conn:
        deploys.record_timing(conn, window, analysis.settle)  # what radar deploy and radar gate say is due
        due = deploys.due_events(conn, position, delay, limit=SENSOR_PAGE)
        early = deploys.scraped_events(conn, window, delay, limit=SENSOR_PAGE)
    if not due and not early:
        return dg.SensorResult(skip_reason="no deploy whose window has closed since the last evaluation")
    requested = {e.deploy_id: e for e in [*early, *due]}.values()
    new_partitions = [
        e.deploy_id for e in requested if not context.instance.has_dynamic_partition("deploys", e.deploy_id)
    ]
    last = due[-1] if due else None
    context.log.info(
        f"requesting {len(requested)} analyses"
        + (f" ({due[0].deploy_id} … {due[-1].deploy_id})" if due else "")
        + (f"; {len(early)} whose window is complete before its settle" if early else "")
        + (f"; more are ready: the next tick continues after {due[-1].deploy_id}" if len(due) == SENSOR_PAGE else "")
    )
    return dg.SensorResult(
        run_requests=[
            dg.RunRequest(run_key=e.deploy_id, partition_key=e.deploy_id, tags={"radar/target": e.target})
            for e in requested
        ],
        dynamic_partitions_requests=[deploys_partitions.build_add_request(new_partitions)] if new_partitions else [],
        cursor=json.dumps({"ready_at": last.ready_at.isoformat(), "deploy_id": last.deploy_id})
        if last
        else context.cursor,
    )


def cursor_position(cursor: str | None) -> tuple[datetime, str] | None:
    """The keyset position (ready_at, deploy_id) a deploy_event_sensor cursor holds; None before the first request.

    A cursor of the earlier form {"ready_through", "recent"} resumes at ready_through: events inside its old margin
    that were not yet requested are requested by radar_reconciler.
    """
    state = json.loads(cursor) if cursor else {}
    if state.get("ready_at"):
        return datetime.fromisoformat(state["ready_at"]), str(state.get("deploy_id", ""))
    if state.get("ready_through"):
        return datetime.fromisoformat(state["ready_through"]), ""
    return None


@dg.schedule(
    job=deploy_verdicts_job,
    cron_schedule="41 2 * * *",
    default_status=dg.DefaultScheduleStatus.RUNNING,
    description="Nightly: re-analyse recent deploys whose analysis used other settings or another engine version.",
)
def deploy_reanalysis_schedule(
    context: dg.ScheduleEvaluationContext, warehouse: WarehouseResource, analysis: AnalysisResource
) -> list[dg.RunRequest] | dg.SkipReason:
    """Deploys of the last RADAR_REANALYSIS_DAYS days (default 7) analysed with settings other than today's; the
    runs are tagged REANALYSIS_TAG, so their regressions are recorded in the outbox and never posted."""
    from radar_pipeline.engine import ENGINE_VERSION
    from radar_pipeline.warehouse import analysis as analysis_store

    days = count_setting(REANALYSIS_DAYS_VAR)
    current = analysis.settings().to_dict()
    with warehouse.engine().connect() as conn:
        stale = analysis_store.stale_analyses(conn, current, ENGINE_VERSION, timedelta(days=days))
    if not stale:
        return dg.SkipReason(f"every deploy of the last {days} days was analysed with the current settings")
    stamp = datetime.now(UTC).strftime("%Y%m%d")  # one reanalysis of a deploy per night, whatever the tick
    return [
        dg.RunRequest(run_key=f"reanalysis-{stamp}-{d}", partition_key=d, tags={REANALYSIS_TAG: "true"}) for d in stale
    ]
