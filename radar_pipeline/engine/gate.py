"""A deploy's state from its statements' verdicts: the gate's rule (docs/method.md, "The gate's rule").

`pass` when nothing is detected, the cleared statements hold at least `pass_share` of the execution time after the
deploy, and no statement left open (inconclusive) holds `max_open_share` or more of it: a busy statement the evidence
could not bound is never outweighed by many cleared ones. `fail` when something is detected; `inconclusive`
otherwise. radar.deploy_state (sql/) applies the same rule to the stored verdicts; this is the engine's copy for
frames (the canary's arm, the labs), held to the view by a test.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from radar_pipeline.engine.vocabulary import Tier, Verdict

PASS_SHARE = 0.9  # the share of the execution time after the deploy its cleared statements must hold
MAX_OPEN_SHARE = 0.05  # the share of it no single statement left open may hold


@dataclass(frozen=True)
class GateState:
    """A deploy's state and its margins: `cleared_share` against pass_share, `largest_open_share` (the largest share
    of the execution time one inconclusive statement holds) against max_open_share; how many statements were
    detected, improved or probably slower."""

    state: str
    cleared_share: float
    largest_open_share: float
    detected: int
    improved: int
    probably_slower: int


def deploy_state(
    verdicts: pd.DataFrame, pass_share: float = PASS_SHARE, max_open_share: float = MAX_OPEN_SHARE
) -> GateState:
    """The state of a deploy from analyse()'s result (or any frame with verdict, calls_after, mean_after_ms and
    optionally tier): each statement weighs its execution time after the deploy."""
    verdict = verdicts["verdict"].to_numpy()
    time = verdicts["calls_after"].to_numpy(np.float64) * verdicts["mean_after_ms"].to_numpy(np.float64)
    time = np.where(np.isfinite(time) & (time > 0), time, 0.0)
    whole = time.sum()
    tier = verdicts["tier"].to_numpy() if "tier" in verdicts else np.full(len(verdicts), None, dtype=object)
    detected = int((verdict == Verdict.DETECTED).sum())
    share = time / whole if whole > 0 else np.zeros_like(time)
    cleared = float(share[verdict == Verdict.NO_REGRESSION].sum())
    open_ = share[verdict == Verdict.INCONCLUSIVE]
    largest = float(open_.max()) if len(open_) else 0.0
    if detected:
        state = "fail"
    elif whole > 0 and cleared >= pass_share and largest < max_open_share:
        state = "pass"
    else:
        state = "inconclusive"
    return GateState(
        state=state,
        cleared_share=cleared,
        largest_open_share=largest,
        detected=detected,
        improved=int((tier == Tier.IMPROVED).sum()),
        probably_slower=int((tier == Tier.PROBABLY_SLOWER).sum()),
    )
