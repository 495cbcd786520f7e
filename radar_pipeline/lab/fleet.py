"""A fleet of simulated statements with known truth, as one analysis sees them: the null-calibration test and the
detection-quality lab (benchmarks/detection_quality.py) both draw from it.

Per statement: calls per scrape λ log-uniform in [0.5, 1500] (Poisson per interval, so a sparse statement has many
intervals without calls); per-call latency log-normal with coefficient of variation CV log-uniform in [0.5, 3]; the
interval's true mean wanders around the level by a log-normal overdispersion of spread s (log-uniform 2%–20%) that
follows an AR(1) with φ uniform in [0, 0.8]. Stepped statements multiply their level by a factor from one interval a
minute after the deploy; drifting ones rise linearly through the whole window by a total rise, nothing at the deploy.

Calls are drawn one by one where an interval holds at most EXACT_CALLS of them; busier intervals draw their total
from the Fenton–Wilkinson log-normal with the same mean and variance, and their sum of squared deviations from a
scaled χ². The cumulative counters then follow exactly, stddev_exec_time included (the parallel-variance combination
run forwards, as pg_stat_statements' Welford updates would give it).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

DEPLOY = pd.Timestamp("2026-11-29 12:00", tz="UTC")
EXACT_CALLS = 30


@dataclass(frozen=True)
class Fleet:
    """The counters of one analysis and each statement's truth (arrays by statement index = query_key)."""

    counters: pd.DataFrame
    rate: np.ndarray  # λ, mean calls per scrape
    cv: np.ndarray
    phi: np.ndarray
    spread: np.ndarray  # overdispersion s of the interval means (log scale)
    base: np.ndarray  # level before, ms
    factor: np.ndarray  # step factor (1 = no step)
    step_at: int  # first interval at the new level
    rise: np.ndarray  # total drift across the window (0 = none)
    calls: np.ndarray  # [statements, intervals]
    true_mean: np.ndarray  # [statements, intervals]: the interval's expected per-call mean
    intervals_before: int


def draw(
    statements: int,
    seed: int,
    *,
    stepped: float = 0.0,
    drifting: float = 0.0,
    steps: tuple[float, ...] = (1.3, 1.5, 2.0, 4.0),
    rises: tuple[float, float] = (0.2, 0.6),
    minutes: int = 30,
    scrape_s: int = 60,
    lag_intervals: int = 1,
    rate: tuple[float, float] = (0.5, 1500.0),
    cv: tuple[float, float] = (0.5, 3.0),
    phi: tuple[float, float] = (0.0, 0.8),
    spread: tuple[float, float] = (0.02, 0.2),
    deploy: pd.Timestamp = DEPLOY,
) -> Fleet:
    """A fleet of `statements`: a share `stepped` steps by one of `steps` `lag_intervals` after the deploy, a share
    `drifting` drifts by a rise drawn from `rises`; the rest is unchanged. `minutes` each side, one scrape every
    `scrape_s` seconds."""
    rng = np.random.default_rng(seed)
    per_side = minutes * 60 // scrape_s
    n = 2 * per_side
    lam = np.exp(rng.uniform(np.log(rate[0]), np.log(rate[1]), statements))
    cvs = np.exp(rng.uniform(np.log(cv[0]), np.log(cv[1]), statements))
    phis = rng.uniform(phi[0], phi[1], statements)
    spreads = np.exp(rng.uniform(np.log(spread[0]), np.log(spread[1]), statements))
    base = rng.lognormal(0.0, 1.0, statements)
    kind = rng.random(statements)
    is_step = kind < stepped
    is_drift = (kind >= stepped) & (kind < stepped + drifting)
    factor = np.where(is_step, rng.choice(np.asarray(steps), statements), 1.0)
    rise = np.where(is_drift, rng.uniform(rises[0], rises[1], statements), 0.0)
    step_at = per_side + lag_intervals

    z = rng.standard_normal((statements, n))
    ar = np.empty_like(z)
    ar[:, 0] = z[:, 0]
    for i in range(1, n):  # stationary AR(1), unit variance
        ar[:, i] = phis * ar[:, i - 1] + np.sqrt(1 - phis**2) * z[:, i]
    position = (np.arange(n) + 0.5) / n
    level = base[:, None] * np.where(np.arange(n)[None, :] >= step_at, factor[:, None], 1.0)
    level = level * (1 + rise[:, None] * position[None, :])
    true_mean = level * np.exp(spreads[:, None] * ar - spreads[:, None] ** 2 / 2)
    calls = rng.poisson(lam[:, None], (statements, n))

    sigma_call = cvs[:, None] * true_mean  # per-call standard deviation
    total, sumsq = _interval_sums(rng, calls, true_mean, sigma_call)
    counters = _counters(calls, total, sumsq, deploy, per_side, scrape_s, rng)
    return Fleet(
        counters=counters,
        rate=lam,
        cv=cvs,
        phi=phis,
        spread=spreads,
        base=base,
        factor=factor,
        step_at=step_at,
        rise=rise,
        calls=calls,
        true_mean=true_mean,
        intervals_before=per_side,
    )


def _interval_sums(
    rng: np.random.Generator, calls: np.ndarray, mean: np.ndarray, sd: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per interval: the total time of its calls and their sum of squared deviations about their own mean."""
    total = np.zeros(calls.shape)
    sumsq = np.zeros(calls.shape)
    s2 = np.log1p((sd / mean) ** 2)  # log-normal per call with this mean and sd
    exact = (calls > 0) & (calls <= EXACT_CALLS)
    rows, cols = np.nonzero(exact)
    counts = calls[rows, cols]
    owner = np.repeat(np.arange(len(rows)), counts)
    mu_log = (np.log(mean) - s2 / 2)[rows, cols]
    x = rng.lognormal(mu_log[owner], np.sqrt(s2[rows, cols])[owner])
    sums = np.bincount(owner, weights=x, minlength=len(rows))
    squares = np.bincount(owner, weights=x * x, minlength=len(rows))
    total[rows, cols] = sums
    sumsq[rows, cols] = np.maximum(squares - sums**2 / counts, 0.0)
    busy = calls > EXACT_CALLS
    c = calls[busy].astype(np.float64)
    m, v = c * mean[busy], c * sd[busy] ** 2
    fw = np.log1p(v / m**2)
    total[busy] = rng.lognormal(np.log(m) - fw / 2, np.sqrt(fw))
    sumsq[busy] = sd[busy] ** 2 * rng.chisquare(c - 1)
    return total, sumsq


def _counters(
    calls: np.ndarray,
    total: np.ndarray,
    sumsq: np.ndarray,
    deploy: pd.Timestamp,
    per_side: int,
    scrape_s: int,
    rng: np.random.Generator,
) -> pd.DataFrame:
    """Cumulative counters (one row per statement and scrape, statements with history before the window) with
    stddev_exec_time accumulated by the parallel-variance combination."""
    statements, n = calls.shape
    start_calls = rng.integers(1_000, 1_000_000, statements).astype(np.float64)
    start_mean = np.where(calls.sum(axis=1) > 0, total.sum(axis=1) / np.maximum(calls.sum(axis=1), 1), 1.0)
    start_total = start_calls * start_mean
    start_m2 = start_calls * (start_mean * 1.5) ** 2
    cum_c = np.empty((statements, n + 1))
    cum_t = np.empty((statements, n + 1))
    cum_m2 = np.empty((statements, n + 1))
    cum_c[:, 0], cum_t[:, 0], cum_m2[:, 0] = start_calls, start_total, start_m2
    for i in range(n):
        c1, t1, c = cum_c[:, i], cum_t[:, i], calls[:, i].astype(np.float64)
        c2 = c1 + c
        with np.errstate(divide="ignore", invalid="ignore"):
            m_interval = np.where(c > 0, total[:, i] / np.maximum(c, 1), 0.0)
            cross = np.where(c > 0, c1 * c / c2 * (t1 / c1 - m_interval) ** 2, 0.0)
        cum_c[:, i + 1] = c2
        cum_t[:, i + 1] = t1 + total[:, i]
        cum_m2[:, i + 1] = cum_m2[:, i] + sumsq[:, i] + cross
    every = pd.Timedelta(seconds=scrape_s)
    times = deploy + every * np.arange(-per_side, per_side + 1)
    return pd.DataFrame(
        {
            "query_key": np.repeat(np.arange(statements), n + 1),
            "captured_at": np.tile(times, statements),
            "calls": cum_c.ravel().astype(np.int64),
            "total_exec_time": cum_t.ravel(),
            "stddev_exec_time": np.sqrt(cum_m2 / cum_c).ravel(),
        }
    )


def shared_noise_counters(
    statements: int, seed: int, rho: float, factor: float, per_side: int = 8 * 30, deploy: pd.Timestamp = DEPLOY
) -> pd.DataFrame:
    """Counters of `statements` each exactly ×`factor` from the deploy's own interval (×(1 + θ): H0's boundary), a
    one-minute scrape `per_side` times either side, of the lab's noise law (rates 0.5–1,500 calls a scrape, CV 0.5–3,
    overdispersion 2–20% with AR(1) φ in 0–0.8), a share ρ of every statement's overdispersion one AR(1) series
    (φ 0.5) common to all: the server's load, interval to interval, no change in mean. Each statement's own noise law
    is unchanged, so each one's own test is as valid as in the lab (a review's design for the groups' joint test)."""
    rng = np.random.default_rng(seed)
    n = 2 * per_side
    lam = np.exp(rng.uniform(np.log(0.5), np.log(1500), statements))
    cvs = np.exp(rng.uniform(np.log(0.5), np.log(3.0), statements))
    spreads = np.exp(rng.uniform(np.log(0.02), np.log(0.2), statements))

    def ar1(phi: np.ndarray, rows: int) -> np.ndarray:
        z = rng.standard_normal((rows, n))
        a = np.empty_like(z)
        a[:, 0] = z[:, 0]
        for i in range(1, n):
            a[:, i] = phi * a[:, i - 1] + np.sqrt(1 - phi**2) * z[:, i]
        return a

    noise = np.sqrt(1 - rho) * ar1(rng.uniform(0, 0.8, statements), statements) + np.sqrt(rho) * ar1(np.full(1, 0.5), 1)
    step = np.where(np.arange(n) >= per_side, factor, 1.0)
    level = rng.lognormal(0, 1, statements)[:, None] * step[None, :]
    mean = level * np.exp(spreads[:, None] * noise - spreads[:, None] ** 2 / 2)
    calls = rng.poisson(lam[:, None], (statements, n))
    total, sumsq = _interval_sums(rng, calls, mean, cvs[:, None] * mean)
    return _counters(calls, total, sumsq, deploy, per_side, 60, rng)


def past_counters(fleet: Fleet, intervals: int, seed: int, ends_at: pd.Timestamp, scrape_s: int = 60) -> pd.DataFrame:
    """Counters of the `intervals` scrapes before `ends_at` (the window's start: the history a statement has before
    it), each statement with its own calls per scrape, per-call CV, overdispersion, AR(1) φ and level as in the
    fleet, nothing changed. Without stddev_exec_time (the history estimates use interval totals only), and each
    interval's total drawn from the Fenton–Wilkinson log-normal of its calls (mean and variance exact) however few
    they are, so a day of history for thousands of statements is cheap to draw."""
    rng = np.random.default_rng(seed)
    statements = len(fleet.rate)
    z = rng.standard_normal((statements, intervals))
    ar = np.empty_like(z)
    ar[:, 0] = z[:, 0]
    for i in range(1, intervals):
        ar[:, i] = fleet.phi * ar[:, i - 1] + np.sqrt(1 - fleet.phi**2) * z[:, i]
    spread = fleet.spread[:, None]
    mean = fleet.base[:, None] * np.exp(spread * ar - spread**2 / 2)
    del z, ar
    calls = rng.poisson(fleet.rate[:, None], (statements, intervals))
    c = np.maximum(calls, 1).astype(np.float64)
    fw = np.log1p(fleet.cv[:, None] ** 2 / c)  # total of c calls: mean c·m, variance c·(CV·m)²
    total = np.where(calls > 0, rng.lognormal(np.log(c * mean) - fw / 2, np.sqrt(fw)), 0.0)
    cum_c = np.concatenate([np.full((statements, 1), 1000.0), 1000.0 + np.cumsum(calls, axis=1)], axis=1)
    cum_t = np.concatenate([np.zeros((statements, 1)), np.cumsum(total, axis=1)], axis=1) + 1000.0 * fleet.base[:, None]
    every = pd.Timedelta(seconds=scrape_s)
    times = ends_at + every * np.arange(-intervals, 1)
    return pd.DataFrame(
        {
            "query_key": np.repeat(np.arange(statements), intervals + 1),
            "captured_at": np.tile(times, statements),
            "calls": cum_c.ravel().astype(np.int64),
            "total_exec_time": cum_t.ravel(),
        }
    )


def history_estimates(fleet: Fleet, intervals: int, seed: int, window_start: pd.Timestamp) -> pd.DataFrame:
    """The noise estimates production would have for the fleet's statements (engine.noise, from `intervals` scrapes
    of history ending at `window_start`), the frame analyse takes as `prior`."""
    from radar_pipeline.engine.noise import noise_estimates, noise_sums

    past = past_counters(fleet, intervals, seed, window_start)
    return noise_estimates(noise_sums(past, window_start - pd.Timedelta(minutes=intervals), window_start))


def p_at_the_deploy(
    counters: pd.DataFrame, with_stddev: bool, history: pd.DataFrame | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """The call-level test's one-sided p of each statement at the split at DEPLOY, with θ = 0 (the null's boundary,
    where the level is attained), from the interval sums of squares or, without stddev, the interval means only, and
    with the statements' `history` estimates when given (default settings); and the mask of the statements tested
    (three intervals or more each side), whose p's these are, in statement order."""
    from radar_pipeline.engine.decision import _padded, _prior_rows
    from radar_pipeline.engine.inference import split_tests
    from radar_pipeline.engine.samples import window_samples
    from radar_pipeline.engine.settings import EngineSettings

    if not with_stddev:
        counters = counters.drop(columns="stddev_exec_time")  # as the engine reads rows stored without it
    width = 1800 * 10**9
    samples = window_samples(counters, DEPLOY.value - width, DEPLOY.value + width)
    padded = _padded(samples, np.arange(samples.groups))
    inside = np.arange(padded.end.shape[1])[None, :] < padded.n[:, None]
    k = ((padded.end <= DEPLOY.value) & inside).sum(axis=1)
    ok = (k >= 3) & (padded.n - k >= 3)
    candidate = np.zeros((len(k), padded.end.shape[1] + 1), dtype=bool)
    candidate[np.arange(len(k)), k] = ok
    known = _prior_rows(samples, history, EngineSettings())
    test = split_tests(padded.calls, padded.time, padded.sumsq, padded.n, candidate, 0.0, known)
    return test.p[ok], ok


def oracle_evidence(
    fleet: Fleet, rows: np.ndarray | None = None, lo: int = 0, hi: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """The ceilings' evidence: per statement (of `rows`, default all), the realised log ratio of the call-weighted means
    after and before the true split, on the intervals [lo, step_at) and [step_at, hi), and its true variance (each
    side's overdispersed, serially correlated interval levels and per-call noise, as drawn); NaN elsewhere and where a
    side has no calls or a mean that is not positive."""
    c = fleet.calls.astype(np.float64)
    n = c.shape[1]
    hi = n if hi is None else hi
    level = fleet.base[:, None] * np.where(np.arange(n)[None, :] >= fleet.step_at, fleet.factor[:, None], 1.0)
    time_ = np.diff(fleet.counters["total_exec_time"].to_numpy().reshape(-1, n + 1), axis=1)
    y, var = np.full(len(c), np.nan), np.full(len(c), np.nan)
    for i in range(len(c)) if rows is None else rows:
        parts, means = [], []
        for side in (slice(lo, fleet.step_at), slice(fleet.step_at, hi)):
            ci, li = c[i, side], level[i, side]
            calls = ci.sum()
            if calls == 0:
                break
            lag = np.abs(np.arange(len(ci))[:, None] - np.arange(len(ci))[None, :])
            s2 = fleet.spread[i] ** 2
            cov = np.outer(ci * li, ci * li) * np.expm1(s2 * fleet.phi[i] ** lag)
            per_call = (fleet.cv[i] ** 2) * (ci * li**2 * np.exp(s2)).sum()
            parts.append((cov.sum() + per_call) / calls**2 / (li @ ci / calls) ** 2)
            means.append(time_[i, side].sum() / calls)
        if len(means) == 2 and means[0] > 0 and means[1] > 0:
            y[i], var[i] = np.log(means[1] / means[0]), parts[0] + parts[1]
    return y, var
