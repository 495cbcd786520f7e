"""The change-point engine: pure computation over counters (numpy, scipy, pandas; no I/O, no clock).

from radar_pipeline.engine import analyse, EngineSettings
verdicts = analyse(counters, deploy_at, settings=EngineSettings())
"""

from typing import TYPE_CHECKING, Any

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

if TYPE_CHECKING:
    from radar_pipeline.engine.decision import COLUMNS, analyse


def __getattr__(name: str) -> Any:
    # analyse and COLUMNS load numpy, scipy and pandas: the code location and the CLI import the settings and the
    # vocabulary from here without paying for them.
    if name in ("analyse", "COLUMNS"):
        from radar_pipeline.engine import decision

        return getattr(decision, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
