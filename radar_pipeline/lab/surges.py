"""Simulated targets for the call-surge test: the unit tests and the lab (benchmarks/surge_lab.py) draw from here.

Per statement: calls per scrape λ log-uniform in [0.2, 2000], drawn negative-binomial (a gamma-mixed Poisson whose
shape k is log-uniform in [0.5, 50], so bursts inflate the variance up to λ/k-fold beyond Poisson) around λ times
the target's traffic level, which wanders by a log-normal AR(1) (spread 0.25, φ 0.7) shared by every statement, and
which a `traffic` factor multiplies from the deploy on (a traffic rise of everything, not a surge). `surge` maps a
statement index to a factor its own calls take from the deploy on. Latency 1 ms per call, one row per call.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

DEPLOY = pd.Timestamp("2026-11-29 12:00", tz="UTC")


def draw(
    statements: int,
    seed: int,
    per_side: int = 30,
    scrape_s: int = 60,
    traffic: float = 1.0,
    surge: dict[int, float] | None = None,
    new: dict[int, float] | None = None,
) -> pd.DataFrame:
    """Cumulative counters of one target around DEPLOY (the engine's counters frame). `new` maps a statement index
    to its calls per scrape after the deploy; such a statement has no row before (it first appears after)."""
    rng = np.random.default_rng(seed)
    n = 2 * per_side + 1  # the first scrape is the window's start row
    lam = np.exp(rng.uniform(np.log(0.2), np.log(2000), statements))
    shape = np.exp(rng.uniform(np.log(0.5), np.log(50), statements))
    level = np.zeros(n)
    for j in range(1, n):
        level[j] = 0.7 * level[j - 1] + rng.normal(0, 0.25 * np.sqrt(1 - 0.49))
    factor = np.exp(level) * np.where(np.arange(n) > per_side, traffic, 1.0)
    mean = lam[:, None] * factor[None, :]
    for i, f in (surge or {}).items():
        mean[i, per_side + 1 :] *= f
    for i, rate in (new or {}).items():
        mean[i, : per_side + 1] = 0.0
        mean[i, per_side + 1 :] = rate * factor[per_side + 1 :]
    gamma = rng.gamma(shape[:, None], mean / shape[:, None])
    calls = rng.poisson(gamma)
    calls[:, 0] = 0
    cum = np.cumsum(calls, axis=1) + rng.integers(1_000, 100_000, statements)[:, None]
    times = DEPLOY + pd.to_timedelta((np.arange(n) - per_side) * scrape_s, unit="s")
    alive = np.ones((statements, n), dtype=bool)
    for i in new or {}:
        cum[i] = np.cumsum(calls[i])
        alive[i, : per_side + 1] = False
    key, col = np.nonzero(alive)
    c = cum[key, col]
    return pd.DataFrame(
        {
            "query_key": key,
            "captured_at": times[col],
            "calls": c,
            "total_exec_time": c * 1.0,
            "rows": c,
            "dbid": np.where(key % 2 == 0, 5, 7),
            "stats_since": pd.Timestamp("2026-11-01", tz="UTC"),
        }
    )
