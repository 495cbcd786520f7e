"""The change-point engine: pure computation over counters (numpy, scipy, pandas; no I/O, no clock).

from radar_pipeline.engine import analyse, EngineSettings
verdicts = analyse(counters, deploy_at, settings=EngineSettings())
"""

from typing import TYPE_CHECKING, Any

from radar_pipeline.engine.settings import ENGINE_VERSION, EngineSettings
from radar_pipeline.engine.vocabulary import CAUSES, REASONS, TIERS, VERDICTS, Cause, Reason, Tier, Verdict

if TYPE_CHECKING:
    from radar_pipeline.engine.decision import COLUMNS, analyse, explain_detections
    from radar_pipeline.engine.frames import VERDICT_FRAME, FrameError

# Loaded on first use: they bring numpy, scipy and pandas, which the code location and the CLI, importing the
# settings and the vocabulary from here, need not pay for.
_LAZY = {
    "analyse": "decision",
    "explain_detections": "decision",
    "COLUMNS": "decision",
    "VERDICT_FRAME": "frames",
    "FrameError": "frames",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from importlib import import_module

        return getattr(import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "CAUSES",
    "COLUMNS",
    "ENGINE_VERSION",
    "REASONS",
    "TIERS",
    "VERDICTS",
    "VERDICT_FRAME",
    "Cause",
    "EngineSettings",
    "FrameError",
    "Reason",
    "Tier",
    "Verdict",
    "analyse",
    "explain_detections",
]
