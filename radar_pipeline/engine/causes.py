"""Why a detected query got slower, where the counters can tell: computed from the same intervals, not declared.

For each detection the two segments the located change defines (samples ending at or before change_at, and after
it, inside the window) are compared on two further counters:

- rows per call, Σ Δrows / Σ Δcalls: a query returning more rows per call does more work (data growth, a parameter
  mix that changed, a missing LIMIT);
- shared blocks read per call, Σ Δshared_blks_read / Σ Δcalls: more reads from outside shared buffers (a plan that
  scans more, a cache that no longer holds the working set).

And across queries: when at least `fleet_share` of a target's decidable queries (and at least `fleet_min_queries`) are
detected at the same deploy, the shift is fleet-wide — something outside the deploy (the server, its host, a
neighbour) is suspected, and alerts should carry a lower severity.

cause, one value per detection, first that applies: `fleet_wide`, `more_rows` (rows per call rose by at least θ),
`more_blocks_read` (blocks read per call rose by at least θ, and by at least one block per call), `unexplained`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from radar_pipeline.engine.samples import WindowSamples
from radar_pipeline.engine.settings import EngineSettings
from radar_pipeline.engine.vocabulary import Cause, Verdict

ROWS, BLOCKS = "rows", "shared_blks_read"


def explain(samples: WindowSamples, verdicts: pd.DataFrame, settings: EngineSettings) -> pd.DataFrame:
    """Per-segment rows and blocks read per call for every detection, and its cause (None for other verdicts).

    `samples` must be the samples `verdicts` was decided on (one group per verdict row, same order); where they do
    not carry rows or shared_blks_read, those measures are unknown and only `fleet_wide` or `unexplained` remain.
    """
    g = samples.groups
    out = pd.DataFrame(
        {
            "rows_per_call_before": np.full(g, np.nan),
            "rows_per_call_after": np.full(g, np.nan),
            "blks_read_per_call_before": np.full(g, np.nan),
            "blks_read_per_call_after": np.full(g, np.nan),
            "cause": np.full(g, None, dtype=object),
            "cause_detail": np.full(g, None, dtype=object),
        },
        index=verdicts.index,
    )
    detected = (verdicts["verdict"] == Verdict.DETECTED).to_numpy()
    if not detected.any():
        return out
    change = verdicts["change_at"].array.as_unit("ns").asi8
    group = samples.group
    after = samples.end > change[group]
    chosen = detected[group]
    per_call = {}
    for name in (ROWS, BLOCKS):
        values = samples.extra.get(name, np.full(len(samples.end), np.nan))
        for side, mask in (("before", ~after), ("after", after)):
            m = mask & chosen & ~np.isnan(values)
            amount = np.bincount(group[m], weights=values[m], minlength=g)
            calls = np.bincount(group[m], weights=samples.calls[m], minlength=g)
            with np.errstate(divide="ignore", invalid="ignore"):
                per_call[name, side] = np.where(detected & (calls > 0), amount / calls, np.nan)
    out["rows_per_call_before"], out["rows_per_call_after"] = per_call[ROWS, "before"], per_call[ROWS, "after"]
    out["blks_read_per_call_before"] = per_call[BLOCKS, "before"]
    out["blks_read_per_call_after"] = per_call[BLOCKS, "after"]

    rise = 1.0 + settings.threshold
    more_rows = per_call[ROWS, "after"] >= rise * per_call[ROWS, "before"]
    more_rows &= per_call[ROWS, "after"] > per_call[ROWS, "before"]
    more_blocks = (per_call[BLOCKS, "after"] >= rise * per_call[BLOCKS, "before"]) & (
        per_call[BLOCKS, "after"] - per_call[BLOCKS, "before"] >= 1.0
    )
    decidable = int((verdicts["verdict"] != Verdict.INSUFFICIENT_DATA).sum())
    n_detected = int(detected.sum())
    fleet = n_detected >= settings.fleet_min_queries and n_detected >= settings.fleet_share * decidable
    cause = np.select(
        [np.full(g, fleet), more_rows, more_blocks],
        [Cause.FLEET_WIDE.value, Cause.MORE_ROWS.value, Cause.MORE_BLOCKS_READ.value],
        Cause.UNEXPLAINED.value,
    ).astype(object)
    cause[~detected] = None
    out["cause"] = cause
    return out
