"""A statement's noise prior, estimated from its own earlier days: serial correlation and relative dispersion per call.

The deploy's test estimates both from its window alone (about 30 intervals a side, `inference`), and pays for that
with a Student-t reference on few degrees of freedom; the statement's earlier days say the same things with hundreds
of times more intervals. This module turns stored counters into the estimates the test combines with its window's
(`inference.Prior`; docs/method.md), in two steps, so the warehouse can keep the first per day and add days up:

- `noise_sums`: per statement, additive sums over blocks of the window's side length (30 minutes by default, aligned
  to the epoch so a day holds whole blocks): each block is demeaned on its own, as the test demeans each side, and
  its residuals are taken on the relative scale, r_i = (ΔT_i − μ̂_b ΔC_i) / μ̂_b with μ̂_b = Σ ΔT / Σ ΔC over the
  block (the test's scale, so a statement's level may change from day to day without changing its estimates). Sums
  over the blocks with at least three intervals: intervals N, blocks B, calls C, Σ_b C_b / n_b, Σ r², and Σ r_i r_i+1
  and Σ r_i r_i+2 over intervals with calls one and two apart inside a block (lag 1 as the test pairs them).
- `noise_estimates`: from sums (one day's, or several days' added up) to ρ_h and κ_h. The residuals are modelled
  as AR(1) overdispersion plus white per-call noise, whose autocorrelations are ρ_k = ρ_1 φ^(k−1) (an ARMA(1, 1))
  and whose long-run variance inflation is f = 1 + 2 ρ_1 / (1 − φ), φ = ρ_2 / ρ_1 (`long_run_inflation`; for a
  pure AR(1), φ = ρ_1 and f = (1 + ρ_1)/(1 − ρ_1)). Each block is demeaned on its own, which lowers every
  autocovariance by the variance of the block's mean, f γ_0 / m for m points, so ρ̂_k ≈ (ρ_k − f/m)/(1 − f/m);
  inverted with the mean block length m = N/B, and iterated with f, it gives ρ_1 and ρ_2 (for lag 1 this is close
  to Kendall's 1954 correction the window's test uses). ρ_h = (f − 1)/(f + 1) is the AR(1) coefficient with the
  same inflation, which the test uses as its ρ. The dispersion is κ_h = Σ r² / Σ_b C_b (n_b − f) / n_b, since
  demeaning a block of n_b points removes about f of its n_b squared deviations' expectation: E Σ r² ≈ (n_b − f) v
  with v ∝ C_b / n_b the relative variance of one interval. κ_h / C is then what the prior predicts for the
  relative variance of a side's pooled mean over C calls, the quantity the test's sandwich estimates from its
  window (this assumes an interval's variance grows with its calls; the window's own estimate and the test's
  prior–data conflict check cover a day busier or noisier than the earlier days).

The earlier days must end before the window they serve (the caller chooses the range): nothing of the change is seen.
Like `samples`, this is pure computation: no I/O, no clock.
"""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pandas as pd

from radar_pipeline.engine.inference import INFLATION_MAX, RHO_MARGIN, RHO_MAX
from radar_pipeline.engine.samples import window_samples

BLOCK = timedelta(minutes=30)  # the default window W: a block is what one side of a deploy's test demeans
MIN_BLOCK = 3  # intervals a block needs to give a residual and a lag pair (the engine's min_samples)
SUMS = ["intervals", "blocks", "calls", "calls_per_interval", "sum_squares", "sum_lag", "sum_lag2"]
ESTIMATES = ["query_key", "serial_correlation", "dispersion", "intervals", "calls_per_interval"]


def noise_sums(counters: pd.DataFrame, lo: pd.Timestamp, hi: pd.Timestamp, block: timedelta = BLOCK) -> pd.DataFrame:
    """Per query_key of `counters`, the additive sums (SUMS, see the module docstring) of its intervals ending in
    (lo, hi], in blocks of `block` aligned to the epoch. Keys are never merged by fingerprint here: the sums belong
    to the statement. Only keys with at least one usable block are returned."""
    counters = counters.drop(columns=[c for c in ("fingerprint", "stddev_exec_time") if c in counters.columns])
    samples = window_samples(counters, int(pd.Timestamp(lo).value), int(pd.Timestamp(hi).value))
    width = int(block.total_seconds() * 1e9)
    if width <= 0:
        raise ValueError(f"block must be positive, not {block}")
    group = samples.group
    if not len(group):
        return pd.DataFrame({"query_key": samples.keys[:0], **{name: np.zeros(0) for name in SUMS}})
    run = np.append(
        True, (group[1:] != group[:-1]) | ((samples.end[1:] - 1) // width != (samples.end[:-1] - 1) // width)
    )
    run_id = np.cumsum(run) - 1
    runs = int(run_id[-1]) + 1
    n = np.bincount(run_id, minlength=runs).astype(np.float64)
    calls = np.bincount(run_id, weights=samples.calls, minlength=runs)
    time = np.bincount(run_id, weights=samples.time, minlength=runs)
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = time / calls
        r = (samples.time - mean[run_id] * samples.calls) / mean[run_id]
    pair = run_id[1:] == run_id[:-1]
    pair2 = run_id[2:] == run_id[:-2]
    squares = np.bincount(run_id, weights=r * r, minlength=runs)
    lag = np.bincount(run_id[1:][pair], weights=(r[1:] * r[:-1])[pair], minlength=runs)
    lag2 = np.bincount(run_id[2:][pair2], weights=(r[2:] * r[:-2])[pair2], minlength=runs)
    usable = (n >= MIN_BLOCK) & (mean > 0) & np.isfinite(squares)
    owner = group[run][usable]
    g = samples.groups

    def per_key(values: np.ndarray) -> np.ndarray:
        return np.bincount(owner, weights=values[usable], minlength=g)

    out = pd.DataFrame(
        {
            "query_key": samples.keys,
            "intervals": per_key(n).astype(np.int64),
            "blocks": per_key(np.ones(runs)).astype(np.int64),
            "calls": per_key(calls),
            "calls_per_interval": per_key(calls / n),
            "sum_squares": per_key(squares),
            "sum_lag": per_key(lag),
            "sum_lag2": per_key(lag2),
        }
    )
    return out[out["blocks"] > 0].reset_index(drop=True)


def long_run_inflation(rho1: np.ndarray, rho2: np.ndarray, n: np.ndarray) -> np.ndarray:
    """The long-run variance inflation f = 1 + 2 Σ_k ρ_k of relative residuals modelled as AR(1) overdispersion plus
    white per-call noise, i.e. ARMA(1, 1) with ρ_k = ρ_1 φ^(k−1): f = 1 + 2 ρ_1 / (1 − φ), φ = ρ_2 / ρ_1 (module
    docstring). Both are taken RHO_MARGIN standard errors high (se ρ_k ≈ 1/√n; se φ ≈ √(1 + φ²) / (ρ_1 √n) by the
    delta method), as the window's ρ is; φ falls back to ρ_1 (AR(1)) where ρ_1 is within two standard errors of 0,
    where the ratio means nothing; f is capped at RHO_MAX's inflation."""
    se = 1 / np.sqrt(n)
    r1 = np.maximum(rho1, 0.0) + RHO_MARGIN * se
    ratio = np.where(rho1 > 2 * se, rho2 / np.where(rho1 > 0, rho1, 1.0), rho1)
    phi = np.clip(ratio + RHO_MARGIN * np.sqrt(1 + ratio**2) * se / np.maximum(rho1, se), 0.0, RHO_MAX)
    phi = np.maximum(phi, np.minimum(r1, RHO_MAX))  # never below the AR(1) reading of ρ_1
    return np.minimum(1 + 2 * np.minimum(r1, RHO_MAX) / (1 - phi), INFLATION_MAX)


def noise_estimates(sums: pd.DataFrame) -> pd.DataFrame:
    """From sums (`noise_sums`, possibly several ranges' added up per key) to the estimates `analyse` takes as
    `prior`: query_key, serial_correlation ρ_h, dispersion κ_h (relative variance per call), intervals N and
    calls_per_interval (the mean over blocks of a block's calls per interval; see the module docstring). A key
    whose sums give no estimate (no spread at all) gets NaN, which analyse ignores."""
    missing = [c for c in ("query_key", *SUMS) if c not in sums.columns]
    if missing:
        raise ValueError(f"noise sums lack column(s) {', '.join(missing)}")
    n = sums["intervals"].to_numpy(dtype=np.float64)
    ss = sums["sum_squares"].to_numpy(dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        raw1 = sums["sum_lag"].to_numpy(dtype=np.float64) / ss
        raw2 = sums["sum_lag2"].to_numpy(dtype=np.float64) / ss
        per_block = sums["blocks"].to_numpy(dtype=np.float64) / n  # 1 / m, m the mean block length
        inflation = np.ones(len(n))
        for _ in range(3):  # the demeaning bias depends on the inflation it helps estimate: a few fixed-point steps
            rho1, rho2 = (raw + (1 - raw) * inflation * per_block for raw in (raw1, raw2))
            inflation = long_run_inflation(rho1, rho2, n)
        kept = sums["calls"].to_numpy(dtype=np.float64) - inflation * sums["calls_per_interval"].to_numpy(
            dtype=np.float64
        )
        dispersion = np.where(kept > 0, ss / kept, np.nan)
        rho = (inflation - 1) / (inflation + 1)
    ok = (ss > 0) & np.isfinite(rho) & np.isfinite(dispersion)
    return pd.DataFrame(
        {
            "query_key": sums["query_key"].to_numpy(),
            "serial_correlation": np.where(ok, rho, np.nan),
            "dispersion": np.where(ok, dispersion, np.nan),
            "intervals": n.astype(np.int64),
            "calls_per_interval": sums["calls_per_interval"].to_numpy(dtype=np.float64)
            / sums["blocks"].to_numpy(dtype=np.float64),
        }
    )
