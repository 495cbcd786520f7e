"""Every default of the detection engine, in one place, recorded with each analysis."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, fields
from datetime import timedelta
from functools import wraps
from typing import Any, TypeVar

from pydantic import ValidationError, model_validator
from pydantic.dataclasses import dataclass

ENGINE_VERSION = "2.8.1"  # what each version changed: CHANGELOG.md, "Engine versions"
# Calls a window mean needs before it stands for a statement's level (a history point, an episode's recovery): with
# per-call CV 1 such a mean is good to about ±10%. Engine 1's min_calls default; the verdicts no longer use it.
LEVEL_MIN_CALLS = 100
# How the family spends the budget (EngineSettings.family_rule).
FAMILY_RULES = ("fdr", "bonferroni")
# Settings of earlier engine versions, accepted (and ignored) when an old analysis record is read back.
RETIRED = frozenset({"alpha"})
# Settings renamed since they were stored (the noise prior's were called history_* until issue 26, when "history"
# came to mean the history bands alone): an old analysis record is read back under the new names.
RENAMED = {
    "history_min_intervals": "prior_min_intervals",
    "history_max_intervals": "prior_max_intervals",
    "history_conflict_alpha": "prior_conflict_alpha",
}


_T = TypeVar("_T")


def _one_line_errors(cls: type[_T]) -> type[_T]:
    """Construction (and dataclasses.replace) refuses bad values with one ValueError line naming each field, as
    `invalid EngineSettings: min_samples must be at least 3 (…), not 2`, or, for a value of the wrong type,
    `invalid EngineSettings: min_samples: Input should be a valid integer…, not 'three'`."""
    validated: Callable[..., None] = cls.__init__  # type: ignore[misc]

    @wraps(validated)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        try:
            validated(self, *args, **kwargs)
        except ValidationError as exc:
            problems = [
                (f"{'.'.join(map(str, e['loc']))}: " if e["loc"] else "")
                + e["msg"].removeprefix("Value error, ")
                + (f", not {e['input']!r}" if e["loc"] else "")
                for e in exc.errors()
            ]
            raise ValueError(f"invalid {cls.__name__}: " + "; ".join(problems)) from None

    cls.__init__ = __init__  # type: ignore[method-assign]
    return cls


@_one_line_errors
@dataclass(frozen=True)
class EngineSettings:
    """The engine's parameters (reference: the detection-math note, whose defaults these are).

    window: length W of each side of the deploy; samples ending in (deploy − W, deploy + W] are analysed.
    min_samples: intervals with calls each side needs before anything is decided: the test estimates a spread and a
    serial correlation from them (3 leaves two degrees of freedom a side; the t reference pays for fewer).
    min_calls: calls each side needs; 2 is what a per-call variance needs. No larger floor: the test's own standard
    error says when a sparse statement's evidence suffices.
    threshold: θ, the practical tolerance inside the hypothesis: H0 is "after ≤ (1 + θ) · before".
    min_rise_ms: the smallest rise of the mean, in ms per call, worth a finding: below it a statement is
    `below_threshold` whatever its factor (0 → 0.001 ms is an infinite factor and nothing anyone would act on).
    false_alert_budget: B, the expected number of false detections per analysis with nothing changed (a weighted
    Benjamini–Hochberg step-up over the analysis' statements at the level that spends B: engine/fdr.py). The periodic
    check runs every period P and gets B · P / 1 day, so its checks together spend B a day.
    budget_time_weight: the share of the budget spread by execution time before the deploy (the rest evenly: every
    decidable statement's floor).
    family_rule: how the family spends B: "fdr" (engine 2.6: the weighted step-up, which gains power when many
    statements regress) or "bonferroni" (engine 2.5: weighted Bonferroni, each statement alone at B · its share).
    tolerance_floor, tolerance_fraction: the located change must lie within max(floor, fraction × W) of the deploy.
    fleet_share, fleet_min_queries: when at least this share of the decidable queries (and at least this many) are
    detected at one deploy, the shift is fleet-wide and an external cause is suspected (causes, not the verdicts).
    surge_ratio: ρ, the call-surge test's practical threshold: H0 is "the statement's share of the target's calls
    after ≤ ρ · before" (engine/impact.py); the same factor marks a rows-per-call change.
    new_statement_share: a statement new after the deploy is reported as heavy when its execution time after is at
    least this share of the target's.
    prior_min_intervals: intervals a statement's noise prior (analyse's `prior`, estimated from its earlier days)
    must rest on to be used.
    prior_max_intervals: the most intervals a prior counts for, however long (a discount of the prior, as a power
    prior's: the earlier days are other days, which may not be quite like today); one day of one-minute scrapes.
    prior_conflict_alpha: a window noisier or more serially correlated than its prior at this level is tested on its
    own (a prior–data conflict check).
    clear_level: β, the one-sided confidence of the upper bound that clears a statement (`no_regression`): a statement
    that truly slowed by more than θ is cleared with probability at most 1 − β (per statement; engine/inference.py,
    "Clearing"); a deploy's looks together (engine/budget.py, look_clear_level).
    pool_serial_correlation: whether a statement tested on its window alone has its serial correlation shrunk towards
    the one the analysis' statements of like busyness show (engine 2.7, inference.pooled_serial_correlation); off, as
    engine 2.6.
    """

    window: timedelta = timedelta(minutes=30)
    min_samples: int = 3
    min_calls: int = 2
    threshold: float = 0.20
    min_rise_ms: float = 0.01
    false_alert_budget: float = 0.1
    budget_time_weight: float = 0.5
    family_rule: str = "fdr"
    tolerance_floor: timedelta = timedelta(minutes=2)
    tolerance_fraction: float = 0.20
    fleet_share: float = 0.5
    fleet_min_queries: int = 5
    surge_ratio: float = 2.0
    new_statement_share: float = 0.05
    prior_min_intervals: int = 120
    prior_max_intervals: int = 1440
    prior_conflict_alpha: float = 0.001
    clear_level: float = 0.95
    pool_serial_correlation: bool = True

    @model_validator(mode="after")
    def _ranges(self) -> EngineSettings:
        # pydantic checks the types; the ranges are checked here, each with the sentence users have always had.
        problems = []
        if self.window <= timedelta(0):
            problems.append(f"window must be positive, not {self.window}")
        if self.min_samples < 3:
            problems.append(
                f"min_samples must be at least 3 (a variance and a lag-1 correlation), not {self.min_samples}"
            )
        if self.min_calls < 0:
            problems.append(f"min_calls must not be negative, not {self.min_calls}")
        if not self.threshold >= 0:
            problems.append(f"threshold must be ≥ 0, not {self.threshold}")
        if not 0 <= self.min_rise_ms < float("inf"):
            problems.append(f"min_rise_ms must be a finite number ≥ 0, not {self.min_rise_ms}")
        if not 0 < self.false_alert_budget < 1:
            problems.append(f"false_alert_budget must lie strictly between 0 and 1, not {self.false_alert_budget}")
        if not 0 <= self.budget_time_weight <= 1:
            problems.append(f"budget_time_weight must lie in [0, 1], not {self.budget_time_weight}")
        if self.family_rule not in FAMILY_RULES:
            problems.append(f"family_rule must be one of {', '.join(FAMILY_RULES)}, not {self.family_rule!r}")
        if self.tolerance_floor < timedelta(0):
            problems.append(f"tolerance_floor must not be negative, not {self.tolerance_floor}")
        if not 0 <= self.tolerance_fraction <= 1:
            problems.append(f"tolerance_fraction must lie in [0, 1], not {self.tolerance_fraction}")
        if not 0 < self.fleet_share <= 1:
            problems.append(f"fleet_share must lie in (0, 1], not {self.fleet_share}")
        if self.fleet_min_queries < 1:
            problems.append(f"fleet_min_queries must be at least 1, not {self.fleet_min_queries}")
        if not self.surge_ratio >= 1:
            problems.append(f"surge_ratio must be ≥ 1, not {self.surge_ratio}")
        if not 0 < self.new_statement_share <= 1:
            problems.append(f"new_statement_share must lie in (0, 1], not {self.new_statement_share}")
        if self.prior_min_intervals < 1:
            problems.append(f"prior_min_intervals must be at least 1, not {self.prior_min_intervals}")
        if self.prior_max_intervals < self.prior_min_intervals:
            problems.append(
                f"prior_max_intervals ({self.prior_max_intervals}) must be at least prior_min_intervals "
                f"({self.prior_min_intervals})"
            )
        if not 0 < self.prior_conflict_alpha < 1:
            problems.append(f"prior_conflict_alpha must lie strictly between 0 and 1, not {self.prior_conflict_alpha}")
        if not 0.5 <= self.clear_level < 1:
            problems.append(f"clear_level must lie in [0.5, 1), not {self.clear_level}")
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @property
    def tolerance(self) -> timedelta:
        """How far from the deploy the located change may lie: max(tolerance_floor, tolerance_fraction × window)."""
        return max(self.tolerance_floor, self.window * self.tolerance_fraction)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready record of the settings (durations in seconds), stored with every analysis."""
        out: dict[str, Any] = {}
        for key, value in asdict(self).items():
            out[key] = value.total_seconds() if isinstance(value, timedelta) else value
        out["engine_version"] = ENGINE_VERSION
        return out

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> EngineSettings:
        """Settings from a record made by `to_dict` or from run config (durations in seconds); unknown keys refused,
        retired ones ignored, renamed ones (RENAMED) read under their new names."""
        values = {RENAMED.get(key, key): value for key, value in values.items()}
        known = {f.name: f for f in fields(cls)}
        unknown = sorted(set(values) - set(known) - {"engine_version"} - RETIRED)
        if unknown:
            raise ValueError(f"unknown engine settings: {', '.join(unknown)} (known: {', '.join(known)})")
        kwargs: dict[str, Any] = {}
        for key, value in values.items():
            if key == "engine_version" or key in RETIRED:
                continue
            kwargs[key] = timedelta(seconds=float(value)) if isinstance(known[key].default, timedelta) else value
        return cls(**kwargs)
