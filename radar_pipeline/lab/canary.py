"""Two arms of simulated statements scraped at the same moments (issue 29, the canary arm): the stable role and the
canary role run the same statements, each arm with its own calls and its own noise, and both with one per-interval
load factor of the whole server (an AR(1) log-normal wander, and optionally a step at the deploy that slows both arms
alike). The statements' parameters are the detection lab's (lab/fleet.py: calls per scrape, per-call CV,
overdispersion and its AR(1) φ, level), and each arm's interval sums are drawn as the lab draws them."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from radar_pipeline.lab.fleet import DEPLOY, _counters, _interval_sums


@dataclass(frozen=True)
class Arms:
    """The counters of both arms and each statement's truth (arrays by statement index = query_key). The stable arm
    runs W before and W after the deploy; the canary arm from the deploy on (its first row, at the deploy, is its
    baseline)."""

    canary: pd.DataFrame
    stable: pd.DataFrame
    factor: np.ndarray  # the canary's true factor over the stable (1 = unchanged)
    rate: np.ndarray
    cv: np.ndarray
    phi: np.ndarray
    spread: np.ndarray
    base: np.ndarray  # level before any load, ms
    level_canary: np.ndarray  # [statements, intervals after the deploy]: expected per-call mean, load included
    level_stable: np.ndarray
    calls_canary: np.ndarray  # [statements, intervals after the deploy]
    calls_stable: np.ndarray


def _ar(rng: np.random.Generator, phi: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """Stationary AR(1) series of unit variance, one per row."""
    z = rng.standard_normal(shape)
    out = np.empty_like(z)
    out[:, 0] = z[:, 0]
    for i in range(1, shape[1]):
        out[:, i] = phi * out[:, i - 1] + np.sqrt(1 - phi**2) * z[:, i]
    return out


def draw_arms(
    statements: int,
    seed: int,
    *,
    factor: float | np.ndarray = 1.0,
    canary_share: float = 0.2,
    load_step: float = 1.0,
    load_spread: float = 0.1,
    load_phi: float = 0.8,
    minutes: int = 30,
    scrape_s: int = 60,
    rate: tuple[float, float] = (0.5, 1500.0),
    cv: tuple[float, float] = (0.5, 3.0),
    phi: tuple[float, float] = (0.0, 0.8),
    spread: tuple[float, float] = (0.02, 0.2),
    deploy: pd.Timestamp = DEPLOY,
) -> Arms:
    """`statements` statements run by both arms: the canary takes `canary_share` of each statement's calls, the
    stable arm the rest; the canary's latency is `factor` × the stable's (a scalar, or one per statement); the whole
    server's load wanders by `load_spread` (AR(1) `load_phi`) and steps by `load_step` at the deploy for both arms."""
    rng = np.random.default_rng(seed)
    per_side = minutes * 60 // scrape_s
    n = 2 * per_side
    lam = np.exp(rng.uniform(np.log(rate[0]), np.log(rate[1]), statements))
    cvs = np.exp(rng.uniform(np.log(cv[0]), np.log(cv[1]), statements))
    phis = rng.uniform(phi[0], phi[1], statements)
    spreads = np.exp(rng.uniform(np.log(spread[0]), np.log(spread[1]), statements))
    base = rng.lognormal(0.0, 1.0, statements)
    factors = np.broadcast_to(np.asarray(factor, dtype=np.float64), (statements,)).copy()
    load = np.exp(load_spread * _ar(rng, np.array([load_phi]), (1, n))[0] - load_spread**2 / 2)
    load = load * np.where(np.arange(n) >= per_side, load_step, 1.0)

    out = {}
    for arm, share, f in (("stable", 1 - canary_share, np.ones(statements)), ("canary", canary_share, factors)):
        level = base[:, None] * load[None, :] * f[:, None]
        mean = level * np.exp(spreads[:, None] * _ar(rng, phis, (statements, n)) - spreads[:, None] ** 2 / 2)
        calls = rng.poisson(lam[:, None] * share, (statements, n))
        if arm == "canary":
            calls[:, :per_side] = 0  # the canary starts at the deploy
        total, sumsq = _interval_sums(rng, calls, mean, cvs[:, None] * mean)
        counters = _counters(calls, total, sumsq, deploy, per_side, scrape_s, rng)
        if arm == "canary":
            counters = counters[counters["captured_at"] >= deploy].reset_index(drop=True)
        out[arm] = (counters, level[:, per_side:], calls[:, per_side:])
    return Arms(
        canary=out["canary"][0],
        stable=out["stable"][0],
        factor=factors,
        rate=lam,
        cv=cvs,
        phi=phis,
        spread=spreads,
        base=base,
        level_canary=out["canary"][1],
        level_stable=out["stable"][1],
        calls_canary=out["canary"][2],
        calls_stable=out["stable"][2],
    )


def history_estimates(arms: Arms, intervals: int, seed: int) -> pd.DataFrame:
    """The noise prior production would have for the arms' statements: `intervals` one-minute scrapes before the
    deploy of each statement's whole traffic (both roles' calls, one series, as the stable version ran it before the
    canary), nothing changed, no load step (lab/fleet.py's past_counters, engine.noise's estimates)."""
    from types import SimpleNamespace

    from radar_pipeline.engine.noise import noise_estimates, noise_sums
    from radar_pipeline.lab.fleet import past_counters

    like = SimpleNamespace(rate=arms.rate, cv=arms.cv, phi=arms.phi, spread=arms.spread, base=arms.base)
    past = past_counters(like, intervals, seed, DEPLOY)  # type: ignore[arg-type]
    return noise_estimates(noise_sums(past, DEPLOY - pd.Timedelta(minutes=intervals), DEPLOY))
