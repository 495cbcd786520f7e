"""The gate in simulation (issue 38, "Targets: Simulation"): unchanged deploys pass, a wrong clear at the boundary
stays within 5% over all looks (statements and fleet keys), recall and the added execution time detected.

Run: `.venv/bin/python benchmarks/gate_sim.py` (default sizes, ~10–20 minutes on two busy cores), or smaller with
`--deploys 10 --boundary-fleets 1 --releases 2 --recall-runs 2 --recall-statements 300` (a minute). Seeded: the same
arguments print the same tables. Every table is markdown, headed by the command line and the machine's load
(os.getloadavg) at the start; the run's time and load at the end close it.

The lab is radar_pipeline/lab/fleet.py's simulated statements (lab.fleet.draw: calls per scrape log-uniform 0.5–1,500,
per-call CV 0.5–3, overdispersion 2–20% with AR(1) φ 0–0.8, one-minute scrapes, stddev_exec_time), drawn
30 · LOOK_SPANS[-1] = 240 minutes either side of the deploy so every look (W, 2W, 4W, 8W after; W = 30 min, the
before side growing with it) sees its own spans. Default engine settings (θ = 0.2, B = 0.1, β = 0.95).

1. **Unchanged deploys** (`--deploys` N, default 100, of `--statements` 300 each, nothing changed). Each deploy is
   decided as production decides it: the first look (steps.looks.look_span / decide_look: look_budget(B, 0), clearing
   at look_clear_level(β, 0)), then each later look on what is still open; a look's row replaces the previous row of
   the statements it decides (warehouse.looks.replace_open), an undecided statement keeps its last decided-or-first
   row, and every statement keeps its weight T = calls_after · mean_after_ms of its first look (radar.verdict's
   first_exec_ms). The gate's state after each look is engine.gate.deploy_state on those rows. Two rows: each
   statement with its noise prior from a day of its own history ending where the widest look's window begins
   (lab.fleet.history_estimates, as production's prior_for and engine/test_looks_budget.py have it), and the same
   fleets with history off (prior None: a new target). Columns: pass rate at the first look and by the last look (a
   deploy counts as passed by the last look when its state after its last look is pass) with 95% Wilson intervals
   (targets ≥ 95% and ≥ 99%); deploys failed (something detected) by the last look; false detections per deploy over
   all looks (target ≤ 0.1); the open excess (Σ over the statements not cleared of T · (1 − (1 + θ)/u)⁺ as a share of
   Σ T, the quantity the gate holds at ≤ 1%) as its median and 90th percentile at the first and the last look: the
   margin against 1%. Below it, where the open excess comes from, at the first and the last look: by the open
   statements' reason (share of the summed open excess), and by their true calls a minute (open statements a deploy,
   their excess a deploy, median share of the time and factor_bound, reasons); then each deploy not passed at the
   first look with its open statements' count, the share of its excess from statements of ≥ 200 calls a minute and
   its three largest contributors (share of the time, excess, reason, factor_bound, change factor, calls per interval
   after; the lab's true overdispersion s, φ and CV); and the deploys not passed by the last look, their five largest
   contributors.
2. **Wrong clears at the boundary.** Statements: every statement slowed exactly ×1.2 = 1 + θ (draw(..., stepped=1.0,
   steps=(1.2,), rate=(20, 1500))) one interval after the deploy (draw's default lag) and at the deploy instant
   (lag_intervals=0), `--boundary-fleets` fleets of 300 (default 4: 1,200 statements per design), each with and
   without its noise prior, decided by steps.looks.all_looks: the share cleared (no_regression) at the first look and
   by the last look with 95% Wilson intervals (target ≤ 5% over all looks), and by calls a minute by the last look.
   Fleet keys: a release of `--keys` keys (default 100) on 8 targets (benchmarks/power_fleets.py's statements and
   per-target differences: level ×e^N(0, 0.5), calls ×1/3–×3, overdispersion ×0.7–×1.4, per-call CV ×0.8–×1.25),
   every key slowed ×1.2 on all 8 targets at the deploy instant or one minute after it; each target's first verdict by
   engine analyse (its deploy_log_factor, deploy_log_se and calls_before · mean_before_ms as the evidence), look 0 by
   engine.releases.fleet_verdicts (look=0, dilution = engine.budget.clear_dilution(tolerance, W)), then looks 1–3 on
   the keys still open on each target's engine deploy_evidence over the look's spans (look=k, the key's family
   share fixed at look 0, dilution = clear_dilution(tolerance, look_after(W, k))), as steps/releases.py does. Keys'
   base calls a minute log-uniform in 20–1,500 (the busy keys that clearing can reach) and, as a second design, the
   lab's 0.5–1,500. `--releases` releases per design (default 15). Columns: the share of keys cleared at the first
   look and over all looks (a key cleared at any look counts) with 95% Wilson intervals, of the keys drawn; keys that
   had a fleet verdict. Without noise priors (the targets' history is not simulated here).
3. **Recall and added time**: benchmarks/power_looks.py's stepped_runs (imported, not re-implemented): 5% of
   `--recall-statements` (default 1,000) step ×1.3, ×1.5, ×2 or ×4 a minute after the deploy, `--recall-runs`
   deploys (default 15), with noise priors, decided at all looks; recall at the first look and by the last look, the
   same-design ceiling (an oracle z-test told the true split and variances, θ inside H0, the same looks, spending and
   family shares) and the ratios (target ≥ 0.9 at each step); the share of the execution time the steps added over
   the 8W after the deploy that belongs to statements detected by the last look (target ≥ 97%); and per step the
   statements the ceiling found by the last look and the engine did not, and the reverse. power_looks.py's own
   main prints the same table beside its null rows; this prints only the stepped table, from the same function.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from radar_pipeline.engine import ENGINE_VERSION, EngineSettings, Verdict, analyse  # noqa: E402
from radar_pipeline.engine.budget import LOOK_SPANS  # noqa: E402
from radar_pipeline.engine.decision import deploy_evidence  # noqa: E402
from radar_pipeline.engine.gate import (  # noqa: E402
    GATE_FACTOR,
    MAX_OPEN_EXCESS,
    MAX_TOTAL_EXCESS,
    deploy_state,
    open_excess,
)
from radar_pipeline.lab.fleet import DEPLOY, _counters, _interval_sums, draw, history_estimates  # noqa: E402
from radar_pipeline.steps.looks import DECIDED, OPEN, all_looks, decide_look, look_span  # noqa: E402

MINUTES = 30 * LOOK_SPANS[-1]  # each side: the last look's after side, and the before side grown to match it
HISTORY = 1440  # one-minute intervals of each statement's history (a day), for its noise prior
HISTORY_SEED = 77_000
LOOKS = len(LOOK_SPANS)
TARGETS = 8
# The columns a look's decided row replaces (the weight, calls_after · mean_after_ms, stays the first look's).
REPLACED = ("verdict", "reason", "factor_bound", "factor_low", "factor_high", "change_factor", "tier")


def wilson(hits: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """The 95% Wilson score interval of a proportion hits / n."""
    if n == 0:
        return float("nan"), float("nan")
    p = hits / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


def margins(states: list, look: int) -> str:
    """The open excess at look `look` over the deploys' states: the largest statement's, and all of them together,
    each as median / 90th percentile."""
    one = np.asarray([s[look].largest_excess for s in states])
    every = np.asarray([s[look].open_excess for s in states])
    return f"{np.median(one):.3%} / {np.quantile(one, 0.9):.3%}, {np.median(every):.3%} / {np.quantile(every, 0.9):.3%}"


def share_cell(hits: int, n: int) -> str:
    low, high = wilson(hits, n)
    return f"{hits / n:.1%} ({hits}/{n}; {low:.1%}–{high:.1%})" if n else "–"


def prior_of(fleet, seed: int, history: bool) -> pd.DataFrame | None:
    """The statements' noise priors from a day of history ending where the widest look's window begins, or None."""
    if not history:
        return None
    return history_estimates(fleet, HISTORY, HISTORY_SEED + seed, DEPLOY - pd.Timedelta(minutes=MINUTES))


# ---------------------------------------------------------------------------------------------------------------------
# 1. Unchanged deploys


def gate_looks(counters: pd.DataFrame, settings: EngineSettings, prior: pd.DataFrame | None):
    """One deploy decided at each of its looks as production decides it (module docstring, 1). Returns the gate's
    state after each look (engine.gate.GateState, one per look; a look with nothing open repeats the state) and the
    rows after the first and after the last look (query_key index)."""
    at = DEPLOY.to_pydatetime()
    first_span = look_span(settings, 0, at)
    assert first_span is not None
    first = decide_look(counters, DEPLOY, settings, first_span, pd.unique(counters["query_key"]), prior)
    rows = first.set_index("query_key", drop=False).copy()
    rows["look"] = np.where(rows["verdict"].isin(DECIDED), 0.0, np.nan)
    first_rows = rows.copy()
    states = [deploy_state(rows, settings.threshold)]
    for look in range(1, LOOKS):
        still = rows.index[rows["verdict"].isin(OPEN)]
        if len(still):
            span = look_span(settings, look, at)
            assert span is not None
            found = decide_look(counters, DEPLOY, settings, span, still, prior)
            decided = found[found["verdict"].isin(DECIDED) & found["query_key"].isin(still)].set_index("query_key")
            for column in REPLACED:
                rows.loc[decided.index, column] = decided[column].to_numpy()
            rows.loc[decided.index, "look"] = float(look)
        states.append(deploy_state(rows, settings.threshold))
    return states, first_rows, rows


def contributions(rows: pd.DataFrame, threshold: float) -> pd.DataFrame:
    """Per statement left open: its share of the time after the deploy (the first look's T), its contribution to the
    open excess, verdict, reason, bounds and calls per interval after the deploy (the first look's)."""
    time_ = rows["calls_after"].to_numpy(np.float64) * rows["mean_after_ms"].to_numpy(np.float64)
    time_ = np.where(np.isfinite(time_) & (time_ > 0), time_, 0.0)
    share = time_ / time_.sum()
    verdict, bound = rows["verdict"].to_numpy(), rows["factor_bound"].to_numpy(np.float64)
    part = open_excess(share, verdict, bound, rows["calls_before"].to_numpy(np.float64) > 0, threshold)
    out = pd.DataFrame(
        {
            "query_key": rows["query_key"].to_numpy(),
            "share": share,
            "excess": part,
            "verdict": rows["verdict"].astype(str).to_numpy(),
            "reason": rows["reason"].astype(str).to_numpy(),
            "factor_bound": rows["factor_bound"].to_numpy(np.float64),
            "change_factor": rows["change_factor"].to_numpy(np.float64),
            "calls_per_interval": (rows["calls_after"] / rows["n_after"].replace(0, np.nan)).to_numpy(np.float64),
            "history_intervals": rows["history_intervals"].to_numpy(np.float64),
            "tier": rows["tier"].astype(str).to_numpy(),
        }
    )
    open_ = ~out["verdict"].isin([Verdict.NO_REGRESSION.value, Verdict.DETECTED.value])
    return out[open_ & (out["excess"] > 0)]


def _with_truth(c: pd.DataFrame, fleet, deploy: int, state) -> pd.DataFrame:
    """Open statements' contributions with the deploy, its state and the lab's truth (calls per scrape, s, φ, CV)."""
    key = c["query_key"].to_numpy(dtype=np.int64)
    return c.assign(
        deploy=deploy,
        deploy_state=state.state,
        deploy_excess=state.open_excess,
        rate=fleet.rate[key],
        spread=fleet.spread[key],
        phi=fleet.phi[key],
        cv=fleet.cv[key],
    )


CALL_BINS = (0.0, 2.0, 10.0, 50.0, 200.0, 2000.0)  # true calls a minute, for where the open excess sits


def unchanged(deploys: int, statements: int, seed: int) -> None:
    settings = EngineSettings()
    results: dict[str, dict] = {}
    started = time.perf_counter()
    for name, history in (("with history (production)", True), ("history off (a new target)", False)):
        got: dict = {"states": [], "false": [], "open_first": [], "open_last": []}
        for d in range(deploys):
            fleet = draw(statements, seed + d, minutes=MINUTES)
            prior = prior_of(fleet, seed + d, history)
            states, first_rows, rows = gate_looks(fleet.counters, settings, prior)
            got["states"].append(states)
            got["false"].append(int((rows["verdict"] == Verdict.DETECTED).sum()))
            got["open_first"].append(
                _with_truth(contributions(first_rows, settings.threshold), fleet, seed + d, states[0])
            )
            got["open_last"].append(_with_truth(contributions(rows, settings.threshold), fleet, seed + d, states[-1]))
        results[name] = got
        print(f"<!-- {name}: {deploys} deploys in {time.perf_counter() - started:.0f} s -->", flush=True)

    print(f"### 1. Unchanged deploys: {deploys} deploys × {statements} statements, nothing changed (seeds {seed}…)\n")
    print(
        "| noise prior | pass at the first look (95% Wilson) | pass by the last look (95% Wilson) | failed by the last "
        "look | false detections per deploy, all looks | open excess, first look: the largest statement's median / "
        "p90, all of them median / p90 | by the last look: the same | pass by look 0/1/2/3 |"
    )
    print("|---|---|---|---:|---:|---|---|---|")
    for name, got in results.items():
        states = got["states"]
        n = len(states)
        first = sum(s[0].state == "pass" for s in states)
        last = sum(s[-1].state == "pass" for s in states)
        failed = sum(s[-1].state == "fail" for s in states)
        by_look = " / ".join(str(sum(s[k].state == "pass" for s in states)) for k in range(LOOKS))

        print(
            f"| {name} | {share_cell(first, n)} | {share_cell(last, n)} | {failed} | {np.mean(got['false']):.3f} | "
            f"{margins(states, 0)} | {margins(states, -1)} | {by_look} |"
        )
    print(f"\nTargets: pass ≥ 95% at the first look, ≥ 99% by the last; a pass needs no statement with an excess above "
          f"{MAX_OPEN_EXCESS:.0%} and a bound beyond ×{GATE_FACTOR}, and the others jointly at most "
          f"{MAX_TOTAL_EXCESS:.0%} (engine.gate).\n")  # fmt: skip

    print("Where the open excess comes from (summed over all deploys): by the open statements' reason\n")
    print("| noise prior | look | mean open excess a deploy | reason: share of the summed open excess |")
    print("|---|---|---:|---|")
    for name, got in results.items():
        for label, key in (("first", "open_first"), ("last", "open_last")):
            frame = pd.concat(got[key], ignore_index=True)
            reasons = frame.groupby("reason")["excess"].sum().sort_values(ascending=False)
            total = reasons.sum()
            cells = ", ".join(f"{r} {v / total:.0%}" for r, v in reasons.items() if v > 0)
            print(f"| {name} | {label} | {total / len(got['states']):.3%} | {cells or '–'} |")
    print()
    print("… and by the statements' true calls a minute (open statements with a positive excess, per deploy)\n")
    print("| noise prior | look | calls a minute | open statements a deploy | their excess a deploy | median share of "
          "time | median factor_bound | reasons (count) |")  # fmt: skip
    print("|---|---|---|---:|---:|---:|---:|---|")
    for name, got in results.items():
        for label, key in (("first", "open_first"), ("last", "open_last")):
            frame = pd.concat(got[key], ignore_index=True)
            bins = pd.cut(frame["rate"], CALL_BINS)
            for interval, part in frame.groupby(bins, observed=False):
                if part.empty:
                    continue
                count = ", ".join(f"{r} {v}" for r, v in part["reason"].value_counts().items())
                print(
                    f"| {name} | {label} | {interval.left:g}–{interval.right:g} | {len(part) / len(got['states']):.1f} "
                    f"| {part['excess'].sum() / len(got['states']):.3%} | {part['share'].median():.3%} | "
                    f"{part['factor_bound'].median():.3f} | {count} |"
                )
    print()

    for name, got in results.items():
        frame = pd.concat(got["open_first"], ignore_index=True)
        frame = frame[frame["deploy_state"] != "pass"].sort_values(["deploy", "excess"], ascending=[True, False])
        if frame.empty:
            print(f"{name}: every deploy passed at its first look.\n")
            continue
        print(
            f"{name}: the {frame['deploy'].nunique()} deploys not passed at the first look, each with the open "
            "statements' count and its three largest contributors to the open excess (share of the time, excess, "
            "reason, factor_bound, the window's change factor, calls per interval after; the lab's true "
            "overdispersion s, AR(1) φ and per-call CV)\n"
        )
        print(
            "| deploy | state, open excess | open | share of the excess from statements ≥ 200 calls a minute "
            "| largest three: share / excess / reason / bound / change / calls per interval / s / φ / CV |"
        )
        print("|---|---|---:|---:|---|")
        for deploy, part in frame.groupby("deploy", sort=True):
            busy = part.loc[part["rate"] >= 200, "excess"].sum() / part["excess"].sum()
            top = "; ".join(
                f"{r.share:.1%} / {r.excess:.2%} / {r.reason} / ×{r.factor_bound:.2f} / ×{r.change_factor:.2f} / "
                f"{r.calls_per_interval:.0f} / {r.spread:.2f} / {r.phi:.2f} / {r.cv:.1f}"
                for r in part.head(3).itertuples()
            )
            head = part.iloc[0]
            print(f"| {deploy} | {head.deploy_state}, {head.deploy_excess:.2%} | {len(part)} | {busy:.0%} | {top} |")
        print()

    for name, got in results.items():
        frame = pd.concat(got["open_last"], ignore_index=True)
        frame = frame[frame["deploy_state"] != "pass"].sort_values(["deploy", "excess"], ascending=[True, False])
        if frame.empty:
            print(f"{name}: every deploy passed by its last look.\n")
            continue
        kept = frame.groupby("deploy").head(5)
        print(
            f"{name}: the deploys not passed by the last look ({frame['deploy'].nunique()}), their five largest "
            "contributors to the open excess (the first look's share of the time; bound and reason of the row stored "
            "after the last look; true calls per interval, overdispersion s, φ and CV from the lab)\n"
        )
        print(
            "| deploy | state, open excess | key | share of time | excess | verdict | reason | factor_bound | change "
            "| calls/interval after | true rate | s | φ | CV | history intervals |"
        )
        print("|---|---|---:|---:|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for r in kept.itertuples():
            print(
                f"| {r.deploy} | {r.deploy_state}, {r.deploy_excess:.2%} | {r.query_key} | {r.share:.2%} | "
                f"{r.excess:.3%} | {r.verdict} | {r.reason} | {r.factor_bound:.3f} | {r.change_factor:.3f} | "
                f"{r.calls_per_interval:.1f} | {r.rate:.1f} | {r.spread:.3f} | {r.phi:.2f} | {r.cv:.2f} | "
                f"{r.history_intervals:.0f} |"
            )
        print()


# ---------------------------------------------------------------------------------------------------------------------
# 2. Wrong clears at the boundary


def boundary_statements(fleets: int, statements: int, seed: int) -> None:
    settings = EngineSettings()
    print(f"### 2. Wrong clears at the boundary: statements slowed exactly ×{1 + settings.threshold:g}, "
          f"20–1,500 calls a minute, {fleets} fleets × {statements} per design\n")  # fmt: skip
    print(
        "| change begins | noise prior | statements | cleared at the first look (95% Wilson) | cleared by the last "
        "look (95% Wilson) | cleared by look 0/1/2/3 | by the last look, 20–100 / 100–500 / 500–1,500 calls a minute |"
    )
    print("|---|---|---:|---|---|---|---|")
    for lag, when in ((1, "one interval after the deploy"), (0, "at the deploy instant")):
        for history in (True, False):
            first = last = total = 0
            by_look = np.zeros(LOOKS, dtype=np.int64)
            rates, cleared = [], []
            for f in range(fleets):
                s = seed + 100 * lag + f
                fleet = draw(
                    statements, s, stepped=1.0, steps=(1.2,), rate=(20.0, 1500.0), minutes=MINUTES, lag_intervals=lag
                )
                out = all_looks(fleet.counters, DEPLOY, settings, prior=prior_of(fleet, s, history))
                ok = (out["verdict"] == Verdict.NO_REGRESSION).to_numpy()
                first += int((out["first_verdict"] == Verdict.NO_REGRESSION).sum())
                last += int(ok.sum())
                total += len(out)
                for k in out.loc[ok, "look"].astype(int):
                    by_look[k] += 1
                rates.append(fleet.rate[out["query_key"].to_numpy(dtype=np.int64)])
                cleared.append(ok)
            rate, hit = np.concatenate(rates), np.concatenate(cleared)
            bins = []
            for lo, hi in ((20, 100), (100, 500), (500, 1501)):
                inside = (rate >= lo) & (rate < hi)
                bins.append(f"{hit[inside].mean():.1%} of {int(inside.sum())}" if inside.any() else "–")
            print(
                f"| {when} | {'history' if history else 'none'} | {total} | {share_cell(first, total)} | "
                f"{share_cell(last, total)} | {' / '.join(str(v) for v in by_look)} | {' / '.join(bins)} |",
                flush=True,
            )
    print("\nTarget: ≤ 5% cleared over all looks.\n")


def target_counters(
    rate: np.ndarray,
    cv: np.ndarray,
    phi: np.ndarray,
    spread: np.ndarray,
    base: np.ndarray,
    factor: float,
    lag: int,
    rng: np.random.Generator,
) -> pd.DataFrame:
    """One target's counters over ±8W (power_fleets.target_fleet's differences and generation, with the step's lag
    given): every statement ×`factor` from `lag` intervals after the deploy."""
    count, side = len(rate), MINUTES
    n = 2 * side
    rate = rate * np.exp(rng.uniform(np.log(1 / 3), np.log(3), count))
    spread = spread * rng.uniform(0.7, 1.4, count)
    cv = cv * rng.uniform(0.8, 1.25, count)
    base = base * rng.lognormal(0.0, 0.5, count)
    z = rng.standard_normal((count, n))
    ar = np.empty_like(z)
    ar[:, 0] = z[:, 0]
    for i in range(1, n):
        ar[:, i] = phi * ar[:, i - 1] + np.sqrt(1 - phi**2) * z[:, i]
    level = base[:, None] * np.where(np.arange(n)[None, :] >= side + lag, factor, 1.0)
    true_mean = level * np.exp(spread[:, None] * ar - spread[:, None] ** 2 / 2)
    calls = rng.poisson(rate[:, None], (count, n))
    total, sumsq = _interval_sums(rng, calls, true_mean, cv[:, None] * true_mean)
    return _counters(calls, total, sumsq, DEPLOY, side, 60, rng)


def fleet_release(keys: int, seed: int, lag: int, rate: tuple[float, float], settings: EngineSettings) -> pd.DataFrame:
    """One release of `keys` keys, every one ×(1 + θ) on all 8 targets `lag` intervals after the deploy, decided at
    its looks (module docstring, 2): per key the final verdict, the look that decided it and the first verdict."""
    from power_fleets import _evidence, release_looks  # one target's fleet evidence, the looks: as power_fleets

    rng = np.random.default_rng(seed)
    lam = np.exp(rng.uniform(np.log(rate[0]), np.log(rate[1]), keys))
    cv = np.exp(rng.uniform(np.log(0.5), np.log(3.0), keys))
    phi = rng.uniform(0.0, 0.8, keys)
    spread = np.exp(rng.uniform(np.log(0.02), np.log(0.2), keys))
    base = rng.lognormal(0.0, 1.0, keys)
    at = DEPLOY.to_pydatetime()
    spans = [look_span(settings, k, at) for k in range(LOOKS)]
    first, later = [], {k: [] for k in range(1, LOOKS)}
    for t in range(TARGETS):
        target = f"shard-{t}"
        counters = target_counters(lam, cv, phi, spread, base, 1 + settings.threshold, lag, rng)
        out = analyse(counters, DEPLOY, settings)
        first.append(_evidence(out, target))
        for k in later:
            span = spans[k]
            assert span is not None
            got = deploy_evidence(counters, DEPLOY, settings, before=span.before, after=span.after)
            later[k].append(_evidence(got[got["decidable"]], target))
    decided = release_looks(first, later, settings, TARGETS).rename(columns={"decided_look": "look"})
    return decided.reset_index()


def boundary_fleets(keys: int, releases: int, seed: int) -> None:
    settings = EngineSettings()
    print(f"Fleet keys slowed ×{1 + settings.threshold:g} on all {TARGETS} targets: {releases} releases × {keys} keys "
          "per design\n")  # fmt: skip
    print("| change begins | key calls a minute | keys | with a fleet verdict | cleared at the first look (95% Wilson) "
          "| cleared over all looks (95% Wilson) | cleared by look 0/1/2/3 | detected |")  # fmt: skip
    print("|---|---|---:|---:|---|---|---|---:|")
    for rate, rate_name in (((20.0, 1500.0), "20–1,500"), ((0.5, 1500.0), "0.5–1,500 (the lab's)")):
        for lag, when in ((0, "at the deploy instant"), (1, "one minute after the deploy")):
            first = last = verdicts = detected = 0
            by_look = np.zeros(LOOKS, dtype=np.int64)
            for r in range(releases):
                got = fleet_release(keys, seed + 1000 * lag + 100_000 * (rate[0] < 1) + r, lag, rate, settings)
                verdicts += len(got)
                first += int((got["first_verdict"] == "no_regression").sum())
                ok = got["verdict"] == "no_regression"
                last += int(ok.sum())
                detected += int((got["verdict"] == "detected").sum())
                for k in got.loc[ok, "look"].astype(int):
                    by_look[k] += 1
            total = keys * releases
            print(
                f"| {when} | {rate_name} | {total} | {verdicts} | {share_cell(first, total)} | "
                f"{share_cell(last, total)} | {' / '.join(str(v) for v in by_look)} | {detected} |",
                flush=True,
            )
    print("\nTarget: ≤ 5% of keys cleared over all looks.\n")


# ---------------------------------------------------------------------------------------------------------------------
# 3. Recall and added time (power_looks.stepped_runs)


def recall(statements: int, runs: int) -> None:
    from power_looks import STEPS, stepped_runs

    table = stepped_runs(statements, runs, 31_000)  # power_looks.py's own seed: its default table
    print(f"### 3. Recall and added time: benchmarks/power_looks.py's stepped_runs({statements}, {runs}, 31000)\n")
    print("| step | statements | first look | by the last look | ceiling first | ceiling last | ratio first "
          "| ratio last | by the last look: ceiling only / engine only |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for factor in STEPS:
        s = table[table["factor"] == factor]
        first, final = (s["look"] == 0).mean(), s["look"].notna().mean()
        c_first, c_final = (s["ceiling_look"] == 0).mean(), s["ceiling_look"].notna().mean()
        r_first = first / c_first if c_first else float("nan")
        r_final = final / c_final if c_final else float("nan")
        print(
            f"| ×{factor:g} | {len(s)} | {first:.1%} | {final:.1%} | {c_first:.1%} | {c_final:.1%} "
            f"| {r_first:.2f} | {r_final:.2f} "
            f"| {int((s['ceiling_look'].notna() & s['look'].isna()).sum())} / "
            f"{int((s['look'].notna() & s['ceiling_look'].isna()).sum())} |"
        )
    total = table["added_ms"].sum()
    last = table.loc[table["look"].notna(), "added_ms"].sum() / total
    first = table.loc[table["look"] == 0, "added_ms"].sum() / total
    ceiling = table.loc[table["ceiling_look"].notna(), "added_ms"].sum() / total
    print(
        f"\nAdded execution time detected (over the 8W after the deploy): by the last look {last:.1%} (target ≥ 97%), "
        f"at the first look {first:.1%}; the ceiling by the last look {ceiling:.1%}. Targets: ratio ≥ 0.9 at each "
        "step.\n"
    )


# ---------------------------------------------------------------------------------------------------------------------
# 4. Slowdowns the gate must not pass


HEAVY_SHARES = (0.05, 0.1, 0.4)  # the share of the time before the deploy the one heavy statement holds
HEAVY_WANDER = (0.2, 0.3)  # per-interval wander, AR(1) φ = 0.6 (the real lab's report: 0.23 a minute, lag-1 0.62)
SPARSE_SHARE = 0.2  # the share the stepped sparse statements hold together


def _scaled(counters: pd.DataFrame, factor: float, offset: int) -> pd.DataFrame:
    """Counters with every time multiplied by `factor` (each interval's mean and per-call spread with it) and the
    statements' keys moved past `offset`."""
    return counters.assign(
        query_key=counters["query_key"] + offset,
        total_exec_time=counters["total_exec_time"] * factor,
        stddev_exec_time=counters["stddev_exec_time"] * factor,
    )


def _time_before(fleet) -> float:
    """A fleet's execution time over its before side (its true means over its calls)."""
    side = fleet.intervals_before
    return float((fleet.calls[:, :side] * fleet.true_mean[:, :side]).sum())


def heavy_statements(deploys: int, statements: int, seed: int) -> None:
    """4. What the gate's bars protect, and what they let through: (a) one heavy statement as noisy as the real lab's
    report or more (30 calls a minute, per-call CV 1, a wander of 0.2 or 0.3 with AR(1) φ = 0.6) holding 40% of the
    time, unchanged: how often the deploy passes; (b) the same statement holding 5%, 10% or 40% of the time and stepping
    ×1.5 one interval after the deploy, and (c) 60 sparse statements (0.5–5 calls a minute) holding 20% of the time
    together each stepping ×1.5, none adding 1% alone: how often the deploy passes (target at most 5%). Beside each, an
    unchanged fleet of `statements`; decided at every look without noise priors. Each design draws its own deploys."""
    settings = EngineSettings()
    designs = [(f"one statement, 40% of the time, wander {w}, unchanged", 0.4, 1.0, w) for w in HEAVY_WANDER]
    designs += [(f"one statement, {s:.0%} of the time, wander {w}, ×1.5", s, 1.5, w) for w in HEAVY_WANDER
                for s in HEAVY_SHARES]  # fmt: skip
    designs.append((f"60 sparse statements, {SPARSE_SHARE:.0%} of the time together, each ×1.5", SPARSE_SHARE, 1.5, 0))
    print(f"### 4. Heavy and sparse statements: {deploys} deploys a design, {statements} unchanged statements beside "
          f"them (seeds {seed}…)\n")  # fmt: skip
    print("| design | pass at the first look (95% Wilson) | pass by the last look (95% Wilson) | detected by the last "
          "look | deploys with a statement bounded within the gate factor at the first look |")  # fmt: skip
    print("|---|---|---|---:|---:|")
    for i, (label, share, step, wander) in enumerate(designs):
        first = last = found = bounded = 0
        for d in range(deploys):
            own = seed + 1000 * i + d  # each design its own deploys
            fleet = draw(statements, own, minutes=MINUTES)
            if wander:
                stepped = draw(1, own + 50_000, minutes=MINUTES, stepped=1.0, steps=(step,), rate=(30.0, 30.0),
                               cv=(1.0, 1.0), phi=(0.6, 0.6), spread=(wander, wander))  # fmt: skip
            else:
                stepped = draw(60, own + 50_000, minutes=MINUTES, stepped=1.0, steps=(step,), rate=(0.5, 5.0))
            factor = share / (1 - share) * _time_before(fleet) / _time_before(stepped)
            counters = pd.concat([fleet.counters, _scaled(stepped.counters, factor, statements)], ignore_index=True)
            states, _, rows = gate_looks(counters, settings, None)
            first += states[0].state == "pass"
            last += states[-1].state == "pass"
            found += bool((rows.loc[rows["query_key"] >= statements, "verdict"] == Verdict.DETECTED).any())
            bounded += states[0].bounded > 0
        print(f"| {label} | {share_cell(first, deploys)} | {share_cell(last, deploys)} | {found} of {deploys} | "
              f"{bounded} of {deploys} |", flush=True)  # fmt: skip
    print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deploys", type=int, default=100, help="unchanged deploys per row (default 100)")
    parser.add_argument("--statements", type=int, default=300, help="statements per unchanged deploy (default 300)")
    parser.add_argument("--boundary-fleets", type=int, default=4, help="fleets of 300 per boundary design (default 4)")
    parser.add_argument("--keys", type=int, default=100, help="keys per release (default 100)")
    parser.add_argument("--releases", type=int, default=15, help="releases per fleet design (default 15)")
    parser.add_argument("--recall-statements", type=int, default=1000, help="statements per stepped deploy")
    parser.add_argument("--recall-runs", type=int, default=15, help="stepped deploys (default 15)")
    parser.add_argument("--seed", type=int, default=38_000)
    parser.add_argument("--heavy-deploys", type=int, default=60, help="deploys per design in part 4 (default 60)")
    parser.add_argument("--only", choices=("unchanged", "boundary", "fleets", "recall", "heavy"), action="append")
    args = parser.parse_args()
    parts = set(args.only or ("unchanged", "boundary", "fleets", "recall", "heavy"))
    started = time.perf_counter()
    load = os.getloadavg()
    print(f"## The gate in simulation (engine {ENGINE_VERSION})\n")
    print(f"`{' '.join([Path(sys.executable).name, *sys.argv])}`; load average at the start "
          f"{load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f} (1/5/15 min) on {os.cpu_count()} cores\n")  # fmt: skip
    if "unchanged" in parts:
        unchanged(args.deploys, args.statements, args.seed)
    if "boundary" in parts:
        boundary_statements(args.boundary_fleets, 300, args.seed + 5000)
    if "fleets" in parts:
        boundary_fleets(args.keys, args.releases, args.seed + 9000)
    if "recall" in parts:
        recall(args.recall_statements, args.recall_runs)
    if "heavy" in parts:
        heavy_statements(args.heavy_deploys, args.statements, args.seed + 13_000)
    load = os.getloadavg()
    print(f"({time.perf_counter() - started:.0f} s; load average at the end {load[0]:.2f} / {load[1]:.2f} / "
          f"{load[2]:.2f})")  # fmt: skip


if __name__ == "__main__":
    main()
