"""Fleets (issue 29, part 2): the fleet verdict of a release deployed to 8 targets, at its first look and at its
later looks, on the lab's simulated statements.

Run with `make bench-power` (every part), or `.venv/bin/python benchmarks/power_fleets.py [--quick]`.

A release: S statements drawn as radar_pipeline/lab/fleet.py draws them (calls per scrape log-uniform in 0.5–1,500,
per-call CV 0.5–3, overdispersion 2–20% with AR(1) φ 0–0.8, one-minute scrapes, W = 30 minutes, counters from 8W before
the deploy to 8W after), seen on 8 targets that differ per statement in level (×e^N(0, 0.5)), call rate (×1/3 to ×3),
overdispersion (×0.7 to ×1.4) and per-call CV (×0.8 to ×1.25), each with its own noise. Every target's first verdict
is the engine's (default settings, ±W); the release is decided as steps/releases.py decides it: look 0 on the
members' first-look evidence (fleet_verdicts, look 0: half of B = 0.1 per release), then at looks 1–3 (2W, 4W, 8W
either side) the keys still open at the fleet level (inconclusive) again, on each target's evidence over the look's
spans (engine deploy_evidence, as steps.looks.look_evidence reads it), at look_budget(B, k) · the key's share of the
family fixed at look 0.

- null: nothing changes; false fleet detections per release over all its looks (θ = 0.2), and at H0's boundary
  (θ = 0: every statement's factor is exactly 1 + θ). Target ≤ 0.1.
- steps: a quarter of the statements step by ×1.3, ×1.5, ×2 or ×4 on all 8 targets one minute after the deploy;
  recall at the first look and by the last look, of each target's own first verdict (per statement and target), and
  of a ceiling of the same design: a z-test of H0 (fleet factor ≤ 1 + θ) on the targets' realised log ratios at the
  true split over the same looks' spans, combined with the true variances (inverse-variance weights; the true effect
  is the same on every target), at each look with the same budget share (look_budget(B, k) · the key's family
  share), until it detects. Target: ×1.3 recall ≥ 50%.
- one target: a quarter of the statements step ×2 on shard-0 only: found by shard-0's own verdict (its first verdict,
  and by its own last look: steps.looks.all_looks), and what the fleet verdict says over all its looks (detected,
  reported "only on shard-0").
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from radar_pipeline.engine import EngineSettings, analyse  # noqa: E402
from radar_pipeline.engine.budget import LOOK_SPANS, clear_dilution, look_after, look_budget  # noqa: E402
from radar_pipeline.engine.decision import deploy_evidence  # noqa: E402
from radar_pipeline.engine.releases import fleet_verdicts  # noqa: E402
from radar_pipeline.lab.fleet import DEPLOY, Fleet, _counters, _interval_sums, oracle_evidence  # noqa: E402
from radar_pipeline.steps.looks import all_looks, look_span  # noqa: E402

TARGETS = [f"shard-{i}" for i in range(8)]
STEPS = (1.3, 1.5, 2.0, 4.0)
PER_SIDE = 30  # one-minute scrapes in W
SIDE = PER_SIDE * LOOK_SPANS[-1]  # intervals generated each side of the deploy: the last look's
LAG = 1  # the step's first interval after the deploy's


@dataclass(frozen=True)
class Statements:
    """A release's statements as lab/fleet.py draws them (per statement, before the targets' differences)."""

    rate: np.ndarray
    cv: np.ndarray
    phi: np.ndarray
    spread: np.ndarray
    base: np.ndarray


def statements(count: int, rng: np.random.Generator) -> Statements:
    """The lab's ranges (lab/fleet.py draw)."""
    return Statements(
        rate=np.exp(rng.uniform(np.log(0.5), np.log(1500.0), count)),
        cv=np.exp(rng.uniform(np.log(0.5), np.log(3.0), count)),
        phi=rng.uniform(0.0, 0.8, count),
        spread=np.exp(rng.uniform(np.log(0.02), np.log(0.2), count)),
        base=rng.lognormal(0.0, 1.0, count),
    )


def target_fleet(s: Statements, factor: np.ndarray, rng: np.random.Generator) -> Fleet:
    """One target's counters over ±8W: the statements with this target's differences and its own noise, stepping by
    `factor` LAG intervals after the deploy (lab/fleet.py's generation, per-statement parameters given)."""
    count, n = len(s.rate), 2 * SIDE
    rate = s.rate * np.exp(rng.uniform(np.log(1 / 3), np.log(3), count))
    spread = s.spread * rng.uniform(0.7, 1.4, count)
    cv = s.cv * rng.uniform(0.8, 1.25, count)
    base = s.base * rng.lognormal(0.0, 0.5, count)
    z = rng.standard_normal((count, n))
    ar = np.empty_like(z)
    ar[:, 0] = z[:, 0]
    for i in range(1, n):
        ar[:, i] = s.phi * ar[:, i - 1] + np.sqrt(1 - s.phi**2) * z[:, i]
    step_at = SIDE + LAG
    level = base[:, None] * np.where(np.arange(n)[None, :] >= step_at, factor[:, None], 1.0)
    true_mean = level * np.exp(spread[:, None] * ar - spread[:, None] ** 2 / 2)
    calls = rng.poisson(rate[:, None], (count, n))
    total, sumsq = _interval_sums(rng, calls, true_mean, cv[:, None] * true_mean)
    return Fleet(
        counters=_counters(calls, total, sumsq, DEPLOY, SIDE, 60, rng),
        rate=rate,
        cv=cv,
        phi=s.phi,
        spread=spread,
        base=base,
        factor=factor,
        step_at=step_at,
        rise=np.zeros(count),
        calls=calls,
        true_mean=true_mean,
        intervals_before=SIDE,
    )


def _evidence(frame: pd.DataFrame, target: str) -> pd.DataFrame:
    """The fleet evidence of one target from analyse's or deploy_evidence's rows."""
    return pd.DataFrame(
        {
            "key": frame["query_key"].to_numpy(dtype=np.int64),
            "target": target,
            "log_factor": frame["deploy_log_factor"].to_numpy(dtype=np.float64),
            "se": frame["deploy_log_se"].to_numpy(dtype=np.float64),
            "time_before": frame["time_before"].to_numpy(dtype=np.float64)
            if "time_before" in frame
            else (frame["mean_before_ms"] * frame["calls_before"]).to_numpy(dtype=np.float64),
        }
    )


def release(
    count: int, seed: int, factors: list[np.ndarray], settings: EngineSettings, own_looks: bool = False
) -> dict[str, pd.DataFrame]:
    """One release decided at its looks: per key the fleet verdict's final row with the look that decided it
    (`decided_look`, NaN: open) and the look the ceiling detected it (`ceiling_look`); per target its own first
    verdicts (and with `own_looks`, shard-0's verdicts by its last look)."""
    rng = np.random.default_rng(seed)
    s = statements(count, rng)
    spans = [look_span(settings, k, DEPLOY.to_pydatetime()) for k in range(len(LOOK_SPANS))]
    first, later, own, fleets = [], {k: [] for k in range(1, len(LOOK_SPANS))}, [], []
    for target, factor in zip(TARGETS, factors, strict=True):
        fleet = target_fleet(s, factor, rng)
        fleets.append(fleet)
        out = analyse(fleet.counters, DEPLOY, settings)
        first.append(_evidence(out, target))
        key = out["query_key"].to_numpy(dtype=np.int64)
        own_frame = pd.DataFrame({"key": key, "target": target, "verdict": out["verdict"], "factor": factor[key]})
        if own_looks and target == TARGETS[0]:
            final = all_looks(fleet.counters, DEPLOY, settings).set_index("query_key")
            own_frame["by_last_look"] = final.loc[key, "verdict"].to_numpy()
        own.append(own_frame)
        for k in later:
            span = spans[k]
            assert span is not None
            got = deploy_evidence(fleet.counters, DEPLOY, settings, before=span.before, after=span.after)
            later[k].append(_evidence(got[got["decidable"]], target))
    decided = release_looks(first, later, settings, len(TARGETS))
    decided["ceiling_look"] = ceiling_looks(fleets, decided["family_weight"], settings.threshold)
    return {"fleet": decided.reset_index(), "own": pd.concat(own, ignore_index=True)}


def release_looks(
    first: list[pd.DataFrame], later: dict[int, list[pd.DataFrame]], settings: EngineSettings, fleet_size: int
) -> pd.DataFrame:
    """A release's fleet verdicts over its looks, as steps/releases.py decides them: look 0 on the members' first-look
    evidence, then at each later look k the keys still open on the evidence over look k's spans, each key's share of
    the family fixed at look 0, clearing within clear_dilution of look k's after side. Per key (the index) the final
    verdict, `decided_look` (NaN: open), `first_verdict`, `family_weight` and `only_on`."""
    common = dict(time_weight=settings.budget_time_weight, clear_level=settings.clear_level, fleet_size=fleet_size)
    decided = fleet_verdicts(
        pd.concat(first, ignore_index=True),
        settings.threshold,
        settings.false_alert_budget,
        look=0,
        dilution=clear_dilution(settings.tolerance, look_after(settings.window, 0)),
        **common,
    ).set_index("key")
    decided["decided_look"] = np.where(decided["verdict"].isin(("detected", "no_regression")), 0.0, np.nan)
    decided["first_verdict"] = decided["verdict"]
    shares = decided["family_weight"]
    for k, parts in later.items():
        still = decided.index[decided["verdict"] == "inconclusive"]
        if not len(still):
            break
        got = fleet_verdicts(
            pd.concat(parts, ignore_index=True),
            settings.threshold,
            settings.false_alert_budget,
            look=k,
            shares=shares.loc[still],
            dilution=clear_dilution(settings.tolerance, look_after(settings.window, k)),
            **common,
        ).set_index("key")
        now = got.index[got["verdict"].isin(("detected", "no_regression"))]
        decided.loc[now, "verdict"] = got.loc[now, "verdict"]
        decided.loc[now, "decided_look"] = float(k)
        decided.loc[got.index, "only_on"] = pd.Series(list(got["only_on"]), index=got.index, dtype=object)
    return decided


def ceiling_looks(fleets: list[Fleet], shares: pd.Series, threshold: float) -> np.ndarray:
    """Per key with a share (aligned with `shares`): the first look at which the ceiling (module docstring) detects
    it, NaN if none."""
    from scipy import stats

    rows = shares.index.to_numpy(dtype=np.int64)
    found = np.full(len(rows), np.nan)
    for k, span in enumerate(LOOK_SPANS):
        lo, hi = SIDE - span * PER_SIDE, SIDE + span * PER_SIDE
        open_ = np.isnan(found)
        if not open_.any():
            break
        w = np.zeros(len(rows))
        wy = np.zeros(len(rows))
        for fleet in fleets:
            y, var = oracle_evidence(fleet, rows[open_], lo, hi)
            ok = np.isfinite(y[rows]) & np.isfinite(var[rows]) & (var[rows] > 0)
            w += np.where(ok, 1 / np.where(ok, var[rows], 1.0), 0.0)
            wy += np.where(ok, y[rows] / np.where(ok, var[rows], 1.0), 0.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            z = (wy / w - np.log1p(threshold)) * np.sqrt(w)
        p = np.where(w > 0, stats.norm.sf(z), 1.0)
        hit = open_ & (p <= look_budget(0.1, k) * shares.to_numpy())
        found[hit] = k
    return found


def _per_release(events: int, releases: int) -> str:
    """Events per release, their count and its exact (Garwood) 95% Poisson interval per release: a few events in a
    few dozen releases say little more than their order of magnitude."""
    from scipy import stats

    low = stats.chi2.ppf(0.025, 2 * events) / 2 if events else 0.0
    high = stats.chi2.ppf(0.975, 2 * events + 2) / 2
    return f"{events / releases:.3f} ({events} in {releases}; 95% {low / releases:.3f}–{high / releases:.3f})"


def run(count: int, releases: int, seed: int) -> None:
    """Every scenario, printed as markdown rows."""
    started = time.perf_counter()
    default, boundary = EngineSettings(), EngineSettings(threshold=0.0)
    rng = np.random.default_rng(seed)
    print(f"## Fleets at later looks: 8 targets, {count} statements a release, {releases} releases a scenario "
          f"(seed {seed})\n")  # fmt: skip
    print(
        "| null | releases | keys decided jointly | false fleet detections per release, first look | over all looks |"
    )
    print("|---|---|---|---|---|")
    for name, settings in (("nothing changed, θ = 0.2", default), ("at H0's boundary, θ = 0", boundary)):
        keys = at_first = overall = 0
        for r in range(releases):
            got = release(count, seed * 1000 + r, [np.ones(count)] * 8, settings)["fleet"]
            keys += len(got)
            detected = got["verdict"] == "detected"
            at_first += int((detected & (got["decided_look"] == 0)).sum())
            overall += int(detected.sum())
        print(
            f"| {name} | {releases} | {keys / releases:.1f} per release | {_per_release(at_first, releases)} | "
            f"{_per_release(overall, releases)} |"
        )

    hits = {f: np.zeros(5, dtype=np.int64) for f in STEPS}  # first, last, ceiling first, ceiling last, keys
    own_hits = {f: [0, 0] for f in STEPS}
    false_steps = 0
    for r in range(releases):
        stepped = rng.random(count) < 0.25
        factor = np.where(stepped, rng.choice(np.asarray(STEPS), count), 1.0)
        got = release(count, seed * 1000 + 500 + r, [factor] * 8, default)
        for row in got["fleet"].itertuples():
            f = factor[row.key]
            detected = row.verdict == "detected"
            if f == 1.0:
                false_steps += detected
                continue
            hits[f] += [
                detected and row.decided_look == 0,
                detected,
                row.ceiling_look == 0,
                np.isfinite(row.ceiling_look),
                1,
            ]
        own = got["own"][got["own"]["factor"] > 1]
        for f in STEPS:
            mine = own[own["factor"] == f]
            own_hits[f][0] += int((mine["verdict"] == "detected").sum())
            own_hits[f][1] += len(mine)
    print(
        "\n| step on all 8 targets | keys | first look | ceiling, first look | ratio | by the last look |"
        " ceiling, by the last look | ratio | each target's own first verdict |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for f in STEPS:
        first, last, c_first, c_last, n = (int(v) for v in hits[f])
        mine, n_own = own_hits[f]
        print(
            f"| ×{f:g} | {n} | {first / max(n, 1):.1%} | {c_first / max(n, 1):.1%} | {_ratio(first, c_first)} | "
            f"{last / max(n, 1):.1%} | {c_last / max(n, 1):.1%} | {_ratio(last, c_last)} | "
            f"{mine / max(n_own, 1):.1%} |"
        )
    print(f"\nfalse fleet detections among the unchanged statements of those releases, over all looks: {false_steps}")

    found = found_last = only = detected = keys = 0
    for r in range(releases):
        stepped = rng.random(count) < 0.25
        factors = [np.where(stepped, 2.0, 1.0)] + [np.ones(count)] * 7
        got = release(count, seed * 1000 + 900 + r, factors, default, own_looks=True)
        own = got["own"]
        mine = own[(own["target"] == "shard-0") & (own["factor"] == 2.0)]
        found += int((mine["verdict"] == "detected").sum())
        found_last += int((mine["by_last_look"] == "detected").sum())
        keys += len(mine)
        fleet = got["fleet"]
        lone = fleet[fleet["key"].isin(np.flatnonzero(stepped))]
        only += sum("shard-0" in o for o in lone["only_on"])
        detected += int((lone["verdict"] == "detected").sum())
    print(
        "\n| ×2 on shard-0 of 8 | statements | found by shard-0's own first verdict | by its own last look |"
        " fleet: reported only on shard-0 | fleet: detected, over all looks |"
    )
    print("|---|---|---|---|---|---|")
    print(
        f"| | {keys} | {found / max(keys, 1):.1%} | {found_last / max(keys, 1):.1%} | {only / max(keys, 1):.1%} | "
        f"{detected / max(keys, 1):.1%} |"
    )
    print(f"\n({time.perf_counter() - started:.0f} s)")


def correlated(keys: int, seed: int) -> None:
    """The combination's level when the targets' errors are correlated (docs/fleets.md, Limits): at H0's boundary
    (μ = 0 here) each target's log ratio is marginally N(0, s_i²) with its s_i exact, but a share ρ of its variance is
    one error common to every target of the key; the p-value is the fleet's (the larger of HKSJ's and CR2's), and the
    table gives P(p ≤ α) / α."""
    from scipy import stats

    from radar_pipeline.engine.releases import combine

    rng = np.random.default_rng(seed)
    levels = (0.05, 5e-3, 5e-4)
    print(f"## The fleet's level with errors correlated across targets ({keys:,} keys a row, seed {seed})\n")
    print("| targets | standard errors | ρ | " + " | ".join(f"× the level at α = {a:g}" for a in levels) + " |")
    print("|---|---|---|" + "---|" * len(levels))
    for k in (3, 8):
        for spread in (1.0, 5.0):
            for rho in (0.0, 0.1, 0.3):
                s = 0.1 * np.exp(rng.uniform(0.0, np.log(spread), (keys, k)))
                common, own = rng.standard_normal((keys, 1)), rng.standard_normal((keys, k))
                y = s * (np.sqrt(rho) * common + np.sqrt(1.0 - rho) * own)
                got = combine(y, s)
                p = np.fmax(
                    stats.t.sf(got.mean / got.se, got.dof), stats.t.sf(got.mean / got.robust_se, got.robust_dof)
                )
                spreads = "equal" if spread == 1.0 else f"{spread:g}-fold spread"
                cells = " | ".join(f"{(p <= a).mean() / a:.2f}" for a in levels)
                print(f"| {k} | {spreads} | {rho:g} | {cells} |", flush=True)


def _ratio(hit: int, ceiling: int) -> str:
    return f"{hit / ceiling:.2f}" if ceiling else "–"


def main() -> None:
    """The command line: --quick for a CI-sized run."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a CI-sized run (seconds)")
    parser.add_argument("--statements", type=int, default=None)
    parser.add_argument("--releases", type=int, default=None)
    parser.add_argument("--seed", type=int, default=29)
    parser.add_argument(
        "--correlated", action="store_true", help="only the level with errors correlated across targets (Limits)"
    )
    args = parser.parse_args()
    if args.correlated:
        correlated(20_000 if args.quick else 200_000, args.seed)
        return
    count = args.statements or (20 if args.quick else 60)
    releases = args.releases or (2 if args.quick else 40)
    run(count, releases, args.seed)


if __name__ == "__main__":
    main()
