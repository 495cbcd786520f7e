"""Every default of the detection engine, in one place, recorded with each analysis."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from datetime import timedelta
from typing import Any

ENGINE_VERSION = "1.0.0"


@dataclass(frozen=True)
class EngineSettings:
    """The engine's parameters (reference: the detection-math note, whose defaults these are).

    window: length W of each side of the deploy; samples ending in (deploy − W, deploy + W] are analysed.
    min_samples: interval means each side needs before anything is decided (floor, §2).
    min_calls: calls each side needs; with per-call CV 1, 100 calls give a window mean good to about ±10%.
    threshold: θ, the smallest relative slowdown of the call-weighted window means worth testing (pre-filter).
    alpha: the p-value at or below which a located slowdown is `detected`.
    tolerance_floor, tolerance_fraction: the located change must lie within max(floor, fraction × W) of the deploy.
    fleet_share, fleet_min_queries: when at least this share of the decidable queries (and at least this many) are
    detected at one deploy, the shift is fleet-wide and an external cause is suspected (causes, not the verdicts).
    """

    window: timedelta = timedelta(minutes=30)
    min_samples: int = 10
    min_calls: int = 100
    threshold: float = 0.20
    alpha: float = 0.05
    tolerance_floor: timedelta = timedelta(minutes=2)
    tolerance_fraction: float = 0.20
    fleet_share: float = 0.5
    fleet_min_queries: int = 5

    def __post_init__(self) -> None:
        problems = []
        if self.window <= timedelta(0):
            problems.append(f"window must be positive, not {self.window}")
        if self.min_samples < 2:
            problems.append(f"min_samples must be at least 2 (a variance needs two points), not {self.min_samples}")
        if self.min_calls < 0:
            problems.append(f"min_calls must not be negative, not {self.min_calls}")
        if not self.threshold >= 0:
            problems.append(f"threshold must be ≥ 0, not {self.threshold}")
        if not 0 < self.alpha < 1:
            problems.append(f"alpha must lie strictly between 0 and 1, not {self.alpha}")
        if self.tolerance_floor < timedelta(0):
            problems.append(f"tolerance_floor must not be negative, not {self.tolerance_floor}")
        if not 0 <= self.tolerance_fraction <= 1:
            problems.append(f"tolerance_fraction must lie in [0, 1], not {self.tolerance_fraction}")
        if not 0 < self.fleet_share <= 1:
            problems.append(f"fleet_share must lie in (0, 1], not {self.fleet_share}")
        if self.fleet_min_queries < 1:
            problems.append(f"fleet_min_queries must be at least 1, not {self.fleet_min_queries}")
        if problems:
            raise ValueError("invalid EngineSettings: " + "; ".join(problems))

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
        """Settings from a record made by `to_dict` or from run config (durations in seconds); unknown keys refused."""
        known = {f.name: f for f in fields(cls)}
        unknown = sorted(set(values) - set(known) - {"engine_version"})
        if unknown:
            raise ValueError(f"unknown engine settings: {', '.join(unknown)} (known: {', '.join(known)})")
        kwargs: dict[str, Any] = {}
        for key, value in values.items():
            if key == "engine_version":
                continue
            kwargs[key] = timedelta(seconds=float(value)) if isinstance(known[key].default, timedelta) else value
        return cls(**kwargs)
