"""The change-point engine: pure computation over counters (numpy, scipy, pandas; no I/O, no clock).

from radar_pipeline.engine import analyse, EngineSettings
verdicts = analyse(counters, deploy_at, settings=EngineSettings())
"""

from radar_pipeline.engine.decision import COLUMNS, analyse
from radar_pipeline.engine.settings import ENGINE_VERSION, EngineSettings
from radar_pipeline.engine.vocabulary import (
    CAUSES,
    DETECTED,
    INCONCLUSIVE,
    INSUFFICIENT_DATA,
    NO_REGRESSION,
    REASONS,
    VERDICTS,
)

__all__ = [
    "CAUSES",
    "COLUMNS",
    "DETECTED",
    "ENGINE_VERSION",
    "INCONCLUSIVE",
    "INSUFFICIENT_DATA",
    "NO_REGRESSION",
    "REASONS",
    "VERDICTS",
    "EngineSettings",
    "analyse",
]
