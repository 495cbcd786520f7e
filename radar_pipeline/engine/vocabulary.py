"""The words a verdict is written in: verdicts, the reasons behind them, and the causes of a detection."""

DETECTED, NO_REGRESSION, INSUFFICIENT_DATA = "detected", "no_regression", "insufficient_data"
VERDICTS = (DETECTED, NO_REGRESSION, INSUFFICIENT_DATA)
REASONS = (
    "floor_samples",
    "floor_calls",
    "below_threshold",
    "no_change_point",
    "outside_tolerance",
    "not_significant",
    "significant",
    "drift",  # engine 2: significant at the split, but no level shift beyond the trend the window already shows
)
# plan_changed comes from the plans around the change (set by the analysis, which has them); the others from counters.
# contention is stored as "contention: <queryid> <text>", naming the statement whose surge or new heavy load coincided
# with the change (engine/impact.py finds it; the analysis adds its text).
CAUSES = ("plan_changed", "fleet_wide", "more_rows", "contention", "more_blocks_read", "unexplained")
