"""query_history: after each deploy's analysis, each query's post-deploy mean against its history band."""

from pathlib import Path
from typing import TYPE_CHECKING, Any

import dagster as dg

from radar_pipeline.defs.deploys.deploy_verdicts import deploy_verdicts, deploys_partitions
from radar_pipeline.defs.metadata import ID, OWNERS, chart_images, table
from radar_pipeline.defs.resources import AnalysisResource, WarehouseResource

if TYPE_CHECKING:
    from radar_pipeline.engine.history import HistorySettings
    from radar_pipeline.steps.history import HistoryUpdate

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
    kinds={"python", "postgres"},
    owners=OWNERS,
    description="Each query's mean after the deploy against its segment-aware history band, and creeping drift "
    "(radar.query_history).",
)
def query_history(
    context: dg.AssetExecutionContext, config: HistoryConfig, warehouse: WarehouseResource, analysis: AnalysisResource
) -> dg.MaterializeResult:
    """Add the deploy's points to the queries' histories; report the points above their band and the drifting."""
    from radar_pipeline.engine.history import HistorySettings
    from radar_pipeline.engine.settings import LEVEL_MIN_CALLS
    from radar_pipeline.steps.alert_delivery import chart_folder
    from radar_pipeline.steps.history import HistoryRefused, history_charts, update_history

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
        charts = history_charts(conn, update, settings, chart_folder(context.partition_key, analysis.chart_root))
    for row in update.flagged.itertuples():
        context.log.info(_describe(row, update))
    return dg.MaterializeResult(metadata=_metadata(update, settings, charts))


def _describe(row: Any, update: "HistoryUpdate") -> str:
    text = update.texts.get(int(row.queryid), f"queryid {row.queryid}")
    if row.drift:
        return f"creeping drift: {text}: +{row.drift_rise:.0%} over the segment's last points (p {row.drift_p:.4f})"
    band = f"band {row.centre_ms:.3f} ± {row.band_ms:.3f} (spread {row.spread_ms:.3f})"
    return f"above the band: {text}: {row.mean_ms:.3f} ms vs {band} (z {row.z_score:.1f})"


def _metadata(update: "HistoryUpdate", settings: "HistorySettings", charts: list[Path]) -> dict[str, Any]:
    points = update.points
    flagged = update.flagged
    rows = [
        {
            "query": update.texts.get(int(row.queryid), str(row.queryid)),
            "queryid": int(row.queryid),
            "mean_ms": _rounded(row.mean_ms, 3),
            "centre_ms": _rounded(row.centre_ms, 3),
            "band_ms": _rounded(row.band_ms, 3),
            "spread_ms": _rounded(row.spread_ms, 3),
            "z": _rounded(row.z_score, 1),
            "drift_rise": _rounded(row.drift_rise, 3),
            "drift_p": _rounded(row.drift_p, 4),
        }
        for row in flagged.head(FLAGGED_ROWS_SHOWN).itertuples()
    ]
    columns = [("query", "string"), ("queryid", ID)] + [
        (name, "float") for name in ("mean_ms", "centre_ms", "band_ms", "spread_ms", "z", "drift_rise", "drift_p")
    ]
    return {
        "points": len(points),
        "with_band": int(points["spread_ms"].notna().sum()),
        "above_band": int(points["above_band"].sum()),
        "drifting": int(points["drift"].sum()),
        "new_segments": int(points["begins_segment"].sum()),
        "later_points_recomputed": update.recomputed,
        "flagged": table(columns, rows),
        "flagged_not_shown": max(0, len(flagged) - FLAGGED_ROWS_SHOWN),  # the rest: radar.query_history
        "charts": dg.MetadataValue.json([str(p) for p in charts]),
        **({"chart_images": images} if (images := chart_images(charts)) is not None else {}),
        "settings": dg.MetadataValue.json(settings.to_dict()),
        "seconds": round(update.seconds, 3),
    }


def _rounded(value: float, digits: int) -> float | None:
    return None if value is None or value != value else round(float(value), digits)
