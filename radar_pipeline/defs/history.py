"""query_history: after each deploy's analysis, each query's post-deploy mean against its history band."""

from pathlib import Path
from typing import Any

import dagster as dg

from radar_pipeline.defs.alerts import chart_folder
from radar_pipeline.defs.deploys import deploy_verdicts, deploys_partitions
from radar_pipeline.defs.history_update import HistoryRefused, HistoryUpdate, history_charts, update_history
from radar_pipeline.defs.resources import AnalysisResource, WarehouseResource
from radar_pipeline.engine.history import HistorySettings
from radar_pipeline.engine.settings import LEVEL_MIN_CALLS

FLAGGED_ROWS_SHOWN = 25


class HistoryConfig(dg.Config):
    """Per-run overrides of the band and drift settings; unset fields keep the defaults (see HistorySettings)."""

    z: float | None = None
    min_points: int | None = None
    drift_points: int | None = None
    drift_min_points: int | None = None
    drift_rise: float | None = None
    drift_alpha: float | None = None


@dg.asset(
    partitions_def=deploys_partitions,
    deps=[deploy_verdicts],
    group_name="analysis",
    description="Each query's mean after the deploy against its segment-aware history band, and creeping drift "
    "(radar.query_history).",
)
def query_history(
    context: dg.AssetExecutionContext, config: HistoryConfig, warehouse: WarehouseResource, analysis: AnalysisResource
) -> dg.MaterializeResult:
    """Add the deploy's points to the queries' histories; report the points above their band and the drifting."""
    try:
        settings = HistorySettings.from_dict({k: v for k, v in config.model_dump().items() if v is not None})
    except ValueError as exc:
        raise dg.Failure(description=f"run config for query_history: {exc}") from None
    with warehouse.engine().begin() as conn:
        try:
            update = update_history(
                conn, context.partition_key, settings, max(analysis.settings().min_calls, LEVEL_MIN_CALLS)
            )
        except HistoryRefused as exc:
            raise dg.Failure(description=str(exc)) from None
        charts = history_charts(conn, update, settings, chart_folder(context.partition_key))
    for row in update.flagged.itertuples():
        context.log.info(_describe(row, update))
    return dg.MaterializeResult(metadata=_metadata(update, settings, charts))


def _describe(row: Any, update: HistoryUpdate) -> str:
    text = update.texts.get(int(row.queryid), f"queryid {row.queryid}")
    if row.drift:
        return f"creeping drift: {text}: +{row.drift_rise:.0%} over the segment's last points (p {row.drift_p:.4f})"
    band = f"band {row.centre_ms:.3f} ± {row.band_ms:.3f} (spread {row.spread_ms:.3f})"
    return f"above the band: {text}: {row.mean_ms:.3f} ms vs {band} (z {row.z_score:.1f})"


def _metadata(update: HistoryUpdate, settings: HistorySettings, charts: list[Path]) -> dict[str, Any]:
    points = update.points
    flagged = update.flagged
    lines = [
        "| query | mean (ms) | band: centre ± half-width (ms) | spread (ms) | z | drift rise | drift p |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for row in flagged.head(FLAGGED_ROWS_SHOWN).itertuples():
        text = update.texts.get(int(row.queryid), str(row.queryid)).replace("|", "\\|").replace("`", "'")
        lines.append(
            f"| `{text}` | {row.mean_ms:.3f} | {row.centre_ms:.3f} ± {row.band_ms:.3f} | {row.spread_ms:.3f} "
            f"| {row.z_score:.1f} "
            f"| {_percent(row.drift_rise)} | {_number(row.drift_p)} |"
        )
    if len(flagged) > FLAGGED_ROWS_SHOWN:
        lines.append(f"| … and {len(flagged) - FLAGGED_ROWS_SHOWN} more in radar.query_history | | | | | | |")
    return {
        "points": len(points),
        "with_band": int(points["spread_ms"].notna().sum()),
        "above_band": int(points["above_band"].sum()),
        "drifting": int(points["drift"].sum()),
        "new_segments": int(points["begins_segment"].sum()),
        "later_points_recomputed": update.recomputed,
        "flagged": dg.MetadataValue.md("\n".join(lines) if len(flagged) else "No point above its band, no drift."),
        "charts": dg.MetadataValue.json([str(p) for p in charts]),
        "settings": dg.MetadataValue.json(settings.to_dict()),
        "seconds": round(update.seconds, 3),
    }


def _percent(value: float) -> str:
    return "" if value != value else f"{value:+.0%}"


def _number(value: float) -> str:
    return "" if value != value else f"{value:.4f}"
