"""Synthetic cumulative counters with known answers: a query's calls and time per scrape, turned into counters."""

from __future__ import annotations

import numpy as np
import pandas as pd

DEPLOY = pd.Timestamp("2026-11-29 12:00", tz="UTC")
ONE_MINUTE = pd.Timedelta(minutes=1)
THIRTY_MINUTES = pd.Timedelta(minutes=30)


def counters(
    key: str,
    means: np.ndarray,
    calls: np.ndarray | int = 50,
    start_calls: int = 0,
    start_time: float = 0.0,
    first: pd.Timestamp = DEPLOY - THIRTY_MINUTES,
    every: pd.Timedelta = ONE_MINUTE,
    fingerprint: int | None = None,
    per_call: dict[str, np.ndarray] | None = None,
) -> pd.DataFrame:
    """Counters whose interval i (closed by snapshot i + 1) has mean `means[i]` ms over `calls[i]` calls (and, for
    each counter in `per_call`, that many per call)."""
    means = np.asarray(means, dtype=float)
    calls = np.broadcast_to(np.asarray(calls, dtype=np.int64), means.shape)
    c = start_calls + np.concatenate([[0], np.cumsum(calls)])
    t = start_time + np.concatenate([[0.0], np.cumsum(calls * means)])
    frame = pd.DataFrame(
        {
            "query_key": key,
            "captured_at": first + every * np.arange(len(c)),
            "calls": c,
            "total_exec_time": t,
        }
    )
    if fingerprint is not None:
        frame["fingerprint"] = fingerprint
    for name, values in (per_call or {}).items():  # further counters, given per call of each interval
        frame[name] = np.concatenate([[0.0], np.cumsum(calls * np.broadcast_to(values, means.shape))])
    return frame


def step(
    n_before: int = 30, n_after: int = 30, before: float = 1.0, after: float = 2.0, cv: float = 0.1, seed: int = 0
):
    """Interval means: `before` for n_before intervals, then `after`, with log-normal noise of the given CV."""
    rng = np.random.default_rng(seed)
    base = np.concatenate([np.full(n_before, before), np.full(n_after, after)])
    sigma = np.sqrt(np.log1p(cv**2))
    return base * rng.lognormal(-(sigma**2) / 2, sigma, len(base))
