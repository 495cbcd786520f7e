"""A regression's chart: interval means over the window, the deploy, the located change, the tolerance band and the
two segment means, drawn with matplotlib into a PNG."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no display: render to files only

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def render_chart(
    path: Path,
    ends: np.ndarray,
    means: np.ndarray,
    deployed_at: datetime,
    change_at: datetime,
    tolerance: timedelta,
    segment_before_ms: float,
    segment_after_ms: float,
    title: str,
) -> Path:
    """Draw one regression's chart to `path` (PNG) and return the path. `ends` are the intervals' end times."""
    seconds = np.array([(e - deployed_at).total_seconds() for e in ends])
    change = (change_at - deployed_at).total_seconds()
    tol = tolerance.total_seconds()
    fig, ax = plt.subplots(figsize=(8, 3.2), dpi=100)
    try:
        ax.axvspan(-tol, tol, color="#f2c94c", alpha=0.25, label=f"tolerance ±{tol:.0f} s")
        ax.plot(seconds, means, "o-", color="#2f80ed", markersize=3, linewidth=1, label="interval mean")
        ax.axvline(0, color="#333333", linestyle="--", linewidth=1.2, label="deploy", zorder=4)
        ax.axvline(change, color="#eb5757", linewidth=1.5, label="located change")
        left, right = float(seconds.min(initial=-1.0)), float(seconds.max(initial=1.0))
        ax.hlines(segment_before_ms, left, change, colors="#27ae60", linewidth=2, label="segment means")
        ax.hlines(segment_after_ms, change, right, colors="#27ae60", linewidth=2)
        ax.set_xlabel("seconds from the deploy")
        ax.set_ylabel("ms per call")
        ax.set_title(title[:90], fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper left")
        fig.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, format="png")
    finally:
        plt.close(fig)
    return path
