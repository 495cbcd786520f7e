"""The words a verdict is written in: verdicts, the reasons behind them, and the causes of a detection."""

DETECTED, NO_REGRESSION, INCONCLUSIVE = "detected", "no_regression", "inconclusive"
INSUFFICIENT_DATA = "insufficient_data"
# no_regression means cleared (engine 2.5): the slowdown's upper bound lies within the tolerance (engine/inference.py,
# "Clearing"); inconclusive: decidable, but neither detected nor cleared.
VERDICTS = (DETECTED, NO_REGRESSION, INCONCLUSIVE, INSUFFICIENT_DATA)
REASONS = (
    "floor_samples",
    "floor_calls",
    "below_threshold",
    "no_change_point",
    "outside_tolerance",
    "not_significant",
    "significant",
    "drift",  # engine 2: significant at the split, but no level shift beyond the trend the window already shows
    # engine 2.5, why a statement the pre-filter stopped is not cleared (inconclusive):
    "interval_spans_threshold",  # precise enough to clear, but the estimate lies too close to 1 + θ
    "interval_too_wide",  # too few calls for their noise: even an unchanged estimate's bound would exceed 1 + θ
    "history_conflict",  # as interval_too_wide, with a window unlike its history, so tested on the window alone
)
# plan_changed comes from the plans around the change (set by the analysis, which has them); the others from counters.
# contention is stored as "contention: <queryid> <text>", naming the statement whose surge or new heavy load coincided
# with the change (engine/impact.py finds it; the analysis adds its text).
CAUSES = ("plan_changed", "fleet_wide", "more_rows", "contention", "more_blocks_read", "unexplained")
