"""The change-point engine: pure computation over counters (numpy, scipy, pandas; no I/O, no clock).

from radar_pipeline.engine import analyse, EngineSettings
verdicts = analyse(counters, deploy_at, settings=EngineSettings())
"""

from radar_pipeline.engine.decision import (
    COLUMNS,
    DETECTED,
    INSUFFICIENT_DATA,
    NO_REGRESSION,
    REASONS,
    VERDICTS,
    analyse,
)
from radar_pipeline.engine.settings import ENGINE_VERSION, EngineSettings

__all__ = [
    "COLUMNS",
    "DETECTED",
    "ENGINE_VERSION",
    "INSUFFICIENT_DATA",
    "NO_REGRESSION",
    "REASONS",
    "VERDICTS",
    "EngineSettings",
    "analyse",
]
