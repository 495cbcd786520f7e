"""A regression's chart: interval means over the window, the deploy, the located change, the tolerance band and the
two segment means; and a query's history with its band. Drawn with matplotlib into PNGs."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no display: render to files only

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402


def render_chart(
    path: Path,
    ends: np.ndarray,
    means: np.ndarray,
    split_at: datetime,
    change_at: datetime,
    tolerance: timedelta | None,
    segment_before_ms: float,
    segment_after_ms: float,
    title: str,
    marker: str = "deploy",
) -> Path:
    """Draw one regression's chart to `path` (PNG) and return the path. `ends` are the intervals' end times;
    `split_at` is where the window is split (`marker` names it: the deploy, or the periodic check's split), and
    the tolerance band is left out when `tolerance` is None."""
    seconds = np.array([(e - split_at).total_seconds() for e in ends])
    change = (change_at - split_at).total_seconds()
    fig, ax = plt.subplots(figsize=(8, 3.2), dpi=100)
    try:
        if tolerance is not None:
            tol = tolerance.total_seconds()
            ax.axvspan(-tol, tol, color="#f2c94c", alpha=0.25, label=f"tolerance ±{tol:.0f} s")
        ax.plot(seconds, means, "o-", color="#2f80ed", markersize=3, linewidth=1, label="interval mean")
        ax.axvline(0, color="#333333", linestyle="--", linewidth=1.2, label=marker, zorder=4)
        ax.axvline(change, color="#eb5757", linewidth=1.5, label="located change")
        left, right = float(seconds.min(initial=-1.0)), float(seconds.max(initial=1.0))
        ax.hlines(segment_before_ms, left, change, colors="#27ae60", linewidth=2, label="segment means")
        ax.hlines(segment_after_ms, change, right, colors="#27ae60", linewidth=2)
        ax.set_xlabel(f"seconds from the {marker}")
        _finish(fig, ax, path, title)
    finally:
        plt.close(fig)
    return path


def render_history_chart(
    path: Path,
    deployed_at: list[datetime],
    means: np.ndarray,
    centre: np.ndarray,
    half_width: np.ndarray,
    z: float,
    begins_segment: np.ndarray,
    flagged: np.ndarray,
    title: str,
    trend: tuple[int, float, float] | None = None,
) -> Path:
    """Draw a query's history to `path` (PNG): its post-deploy means, the band (centre ± half-width, the prediction
    interval of a z-sigma tail) each point was judged against, segment starts, points above the band, and (trend =
    first index, start level, rise per deploy) the drift line."""
    x = np.arange(len(means))
    fig, ax = plt.subplots(figsize=(8, 3.4), dpi=100)
    try:
        ax.fill_between(
            x,
            centre - half_width,
            centre + half_width,
            color="#2f80ed",
            alpha=0.15,
            step="mid",
            label=f"band ({z:g}-sigma prediction interval)",
        )
        ax.plot(x, centre, color="#2f80ed", linewidth=1, drawstyle="steps-mid", label="band centre")
        ax.plot(x, means, "o-", color="#333333", markersize=4, linewidth=1, label="mean after the deploy")
        if flagged.any():
            ax.plot(x[flagged], means[flagged], "o", color="#eb5757", markersize=8, label="above the band")
        for i in np.flatnonzero(begins_segment):
            if i > 0:
                ax.axvline(i - 0.5, color="#f2994a", linestyle=":", linewidth=1.5)
        if trend is not None:
            first, start, slope = trend
            xs = np.arange(first, len(means))
            ax.plot(xs, start + slope * (xs - first), color="#9b51e0", linewidth=2, label="drift trend")
        step = max(1, len(x) // 8)
        labels = [d.strftime("%m-%d %H:%M") for d in deployed_at][::step]
        ax.set_xticks(x[::step], labels, fontsize=7, rotation=30, ha="right")
        # A band made from few points can be far wider than the data: keep the means readable, never below zero.
        low, high = float(np.nanmin(means)), float(np.nanmax(means))
        pad = max(high - low, 0.1 * high, 1e-6) * 0.6
        ax.set_ylim(max(0.0, low - pad), high + pad)
        ax.set_xlabel("deploys (segment starts dotted)")
        _finish(fig, ax, path, title)
    finally:
        plt.close(fig)
    return path


def _finish(fig: Figure, ax: Axes, path: Path, title: str) -> None:
    """The parts every chart shares (axis label, title, grid, legend), then the PNG written to `path`."""
    ax.set_ylabel("ms per call")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png")


def chart_title(statement: str | None, what: str, limit: int = 70) -> str:
    """A chart's title: the statement's text on one line, cut with an ellipsis, then what the chart shows; `$` is
    escaped, since matplotlib reads text between two `$` (a statement's $1 and $2) as mathematics; control and bidi
    characters are removed, as everywhere the statement is shown."""
    from radar_pipeline.config import printable

    text = " ".join(printable(statement or "").split())
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return f"{text}\n{what}".replace("$", r"\$") if text else what.replace("$", r"\$")
