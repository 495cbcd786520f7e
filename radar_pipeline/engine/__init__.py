"""The change-point engine: pure computation over counters (numpy, scipy, pandas; no I/O, no clock).

from radar_pipeline.engine import analyse, EngineSettings
verdicts = analyse(counters, deploy_at, settings=EngineSettings())
"""

from radar_pipeline.engine.decision import COLUMNS, analyse
from radar_pipeline.engine.frames import VERDICT_FRAME, FrameError
from radar_pipeline.engine.settings import ENGINE_VERSION, EngineSettings
from radar_pipeline.engine.vocabulary import CAUSES, REASONS, VERDICTS, Cause, Reason, Verdict

__all__ = [
    "CAUSES",
    "COLUMNS",
    "ENGINE_VERSION",
    "REASONS",
    "VERDICTS",
    "VERDICT_FRAME",
    "Cause",
    "EngineSettings",
    "FrameError",
    "Reason",
    "Verdict",
    "analyse",
]
