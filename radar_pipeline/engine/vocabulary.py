"""The words a verdict is written in: verdicts, the reasons behind them, and the causes of a detection.

Each is a StrEnum, so a member equals (and hashes as) its word: frames, the warehouse (whose CHECK constraints list the
same words, sql/0017) and JSON hold the plain strings, and code compares them with the members. Frames the engine
returns hold the plain strings (`.value`), never the members.
"""

from enum import StrEnum


class Verdict(StrEnum):
    """A statement's verdict. no_regression means cleared (engine 2.5): the slowdown's upper bound lies within the
    tolerance (docs/method.md, "Clearing"); inconclusive: decidable, but neither detected nor cleared."""

    DETECTED = "detected"
    NO_REGRESSION = "no_regression"
    INCONCLUSIVE = "inconclusive"
    INSUFFICIENT_DATA = "insufficient_data"


class Reason(StrEnum):
    """Why a statement got its verdict (the step of engine/decision.py that stopped or decided it)."""

    FLOOR_SAMPLES = "floor_samples"
    FLOOR_CALLS = "floor_calls"
    BELOW_THRESHOLD = "below_threshold"
    NO_CHANGE_POINT = "no_change_point"
    OUTSIDE_TOLERANCE = "outside_tolerance"
    NOT_SIGNIFICANT = "not_significant"
    SIGNIFICANT = "significant"
    DRIFT = "drift"  # engine 2: significant at the split, but no level shift beyond the trend the window already shows
    # engine 2.5, why a statement the pre-filter stopped is not cleared (inconclusive):
    INTERVAL_SPANS_THRESHOLD = "interval_spans_threshold"  # precise enough to clear, but too close to 1 + θ
    INTERVAL_TOO_WIDE = "interval_too_wide"  # too few calls for their noise: even an unchanged estimate's bound exceeds
    # as interval_too_wide, with a window unlike its noise prior (the statement's earlier days), so tested on the window
    # alone. The stored word keeps "history" (radar.verdict's CHECK constraint, sql/0017): only the member is renamed.
    PRIOR_CONFLICT = "history_conflict"


class Cause(StrEnum):
    """Why a detected statement got slower. plan_changed comes from the plans around the change (set by the analysis,
    which has them); the others from counters. contention is stored as "contention: <queryid> <text>", naming the
    statement whose surge or new heavy load coincided with the change (engine/impact.py finds it; the analysis adds
    its text)."""

    PLAN_CHANGED = "plan_changed"
    FLEET_WIDE = "fleet_wide"
    MORE_ROWS = "more_rows"
    CONTENTION = "contention"
    MORE_BLOCKS_READ = "more_blocks_read"
    UNEXPLAINED = "unexplained"


# What else a deploy changed, per statement (engine/impact.py's `kind`).
IMPACT_KINDS = ("new", "stopped", "surge", "n_plus_one", "rows_per_call")

VERDICTS = tuple(Verdict)
REASONS = tuple(Reason)
CAUSES = tuple(Cause)
