"""Fleets (issue 29, part 2): the fleet verdict of a release deployed to 8 targets, on the lab's simulated statements.

Run with `make bench-power` (every part), or `.venv/bin/python benchmarks/power_fleets.py [--quick]`.

A release: S statements drawn as radar_pipeline/lab/fleet.py draws them (calls per scrape log-uniform in 0.5–1,500,
per-call CV 0.5–3, overdispersion 2–20% with AR(1) φ 0–0.8, one-minute scrapes, 30 minutes each side), seen on 8
targets that differ per statement in level (×e^N(0, 0.5)), call rate (×1/3 to ×3), overdispersion (×0.7 to ×1.4) and
per-call CV (×0.8 to ×1.25), each with its own noise. Every target is analysed by the engine (default settings), and
the release's statement keys by the fleet verdict (engine/releases.py, look 0: half of B = 0.1 per release).

- null: nothing changes; false fleet detections per release (θ = 0.2), and at H0's boundary (θ = 0: every statement's
  factor is exactly 1 + θ). Target ≤ 0.1 (look 0 spends 0.05).
- steps: a quarter of the statements step by ×1.3, ×1.5, ×2 or ×4 on all 8 targets one minute after the deploy;
  recall of the fleet verdict per step, of each target's own verdict (per statement and target), and of a ceiling of
  the same design: a z-test of H0 (fleet factor ≤ 1 + θ) on the targets' realised log ratios at the true split,
  combined with the true variances (inverse-variance weights; the true effect is the same on every target), at the
  budget share the fleet verdict gave the key. Target: ×1.3 recall ≥ 50%.
- one target: a quarter of the statements step ×2 on shard-0 only: found by shard-0's own verdict, and what the
  fleet verdict says (detected, reported "only on shard-0").
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
from radar_pipeline.engine.releases import fleet_verdicts  # noqa: E402
from radar_pipeline.lab.fleet import DEPLOY, Fleet, _counters, _interval_sums, oracle_evidence  # noqa: E402

TARGETS = [f"shard-{i}" for i in range(8)]
STEPS = (1.3, 1.5, 2.0, 4.0)
PER_SIDE = 30  # one-minute scrapes each side of the deploy
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
    """One target's counters: the statements with this target's differences and its own noise, stepping by `factor`
    LAG intervals after the deploy (lab/fleet.py's generation, per-statement parameters given)."""
    count, n = len(s.rate), 2 * PER_SIDE
    rate = s.rate * np.exp(rng.uniform(np.log(1 / 3), np.log(3), count))
    spread = s.spread * rng.uniform(0.7, 1.4, count)
    cv = s.cv * rng.uniform(0.8, 1.25, count)
    base = s.base * rng.lognormal(0.0, 0.5, count)
    z = rng.standard_normal((count, n))
    ar = np.empty_like(z)
    ar[:, 0] = z[:, 0]
    for i in range(1, n):
        ar[:, i] = s.phi * ar[:, i - 1] + np.sqrt(1 - s.phi**2) * z[:, i]
    step_at = PER_SIDE + LAG
    level = base[:, None] * np.where(np.arange(n)[None, :] >= step_at, factor[:, None], 1.0)
    true_mean = level * np.exp(spread[:, None] * ar - spread[:, None] ** 2 / 2)
    calls = rng.poisson(rate[:, None], (count, n))
    total, sumsq = _interval_sums(rng, calls, true_mean, cv[:, None] * true_mean)
    return Fleet(
        counters=_counters(calls, total, sumsq, DEPLOY, PER_SIDE, 60, rng),
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
        intervals_before=PER_SIDE,
    )


def release(count: int, seed: int, factors: list[np.ndarray], settings: EngineSettings) -> dict[str, pd.DataFrame]:
    """One release: per target its own verdicts, the fleet verdicts, and the ceiling's evidence."""
    rng = np.random.default_rng(seed)
    s = statements(count, rng)
    rows, own, oracle = [], [], []
    for target, factor in zip(TARGETS, factors, strict=True):
        fleet = target_fleet(s, factor, rng)
        out = analyse(fleet.counters, DEPLOY, settings)
        key = out["query_key"].to_numpy(dtype=np.int64)
        rows.append(
            pd.DataFrame(
                {
                    "key": key,
                    "target": target,
                    "log_factor": out["deploy_log_factor"],
                    "se": out["deploy_log_se"],
                    "time_before": out["mean_before_ms"] * out["calls_before"],
                }
            )
        )
        own.append(pd.DataFrame({"key": key, "target": target, "verdict": out["verdict"], "factor": factor[key]}))
        y, var = oracle_evidence(fleet)
        oracle.append(pd.DataFrame({"key": np.arange(count), "target": target, "y": y, "var": var}))
    evidence = pd.concat(rows, ignore_index=True)
    fleet_out = fleet_verdicts(evidence, settings.threshold, settings.false_alert_budget, fleet_size=len(TARGETS))
    fleet_out = fleet_out.join(variants(evidence, fleet_out, settings.threshold), on="key")
    return {"fleet": fleet_out, "own": pd.concat(own, ignore_index=True), "oracle": pd.concat(oracle)}


def variants(evidence: pd.DataFrame, fleet: pd.DataFrame, threshold: float) -> pd.DataFrame:
    """Where the fleet verdict's power goes, per key at its budget share: HKSJ alone (without the robust variance's
    caution) and a fixed-effect z-test on the engine's standard errors (as if τ² were known to be 0 and the
    standard errors exact: not valid under heterogeneity, shown for the decomposition only)."""
    from scipy import stats

    from radar_pipeline.engine.releases import combine

    keys = list(fleet["key"])
    wide_y = evidence.pivot(index="key", columns="target", values="log_factor").reindex(keys)
    wide_s = evidence.pivot(index="key", columns="target", values="se").reindex(keys)
    got = combine(wide_y.to_numpy(), wide_s.to_numpy())
    excess = got.mean - np.log1p(threshold)
    hksj = stats.t.sf(excess / got.se, got.dof)
    present = np.isfinite(wide_y.to_numpy()) & np.isfinite(wide_s.to_numpy()) & (wide_s.to_numpy() > 0)
    w = np.where(present, 1 / np.where(present, wide_s.to_numpy(), 1.0) ** 2, 0.0)
    fe = (w * np.nan_to_num(wide_y.to_numpy())).sum(axis=1) / w.sum(axis=1)
    z = stats.norm.sf((fe - np.log1p(threshold)) * np.sqrt(w.sum(axis=1)))
    share = fleet["budget_share"].to_numpy()
    return pd.DataFrame({"hksj_alone": hksj <= share, "fixed_z": z <= share}, index=pd.Index(keys, name="key"))


def ceiling(oracle: pd.DataFrame, share: pd.Series, threshold: float) -> pd.Series:
    """Per key with a share: detected by the z-test on the true variances (module docstring)."""
    from scipy import stats

    o = oracle.dropna()
    w = 1 / o["var"]
    g = pd.DataFrame({"key": o["key"], "w": w, "wy": w * o["y"]}).groupby("key").sum()
    z = (g["wy"] / g["w"] - np.log1p(threshold)) * np.sqrt(g["w"])
    p = pd.Series(stats.norm.sf(z), index=g.index)
    return (p.reindex(share.index) <= share).fillna(False)


def run(count: int, releases: int, seed: int) -> None:
    """Every scenario, printed as markdown rows."""
    started = time.perf_counter()
    default, boundary = EngineSettings(), EngineSettings(threshold=0.0)
    rng = np.random.default_rng(seed)
    print(f"## Fleets: 8 targets, {count} statements a release, {releases} releases a scenario (seed {seed})\n")
    print(
        "| scenario | releases | keys decided jointly | false fleet detections per release | HKSJ alone |"
        " fixed-effect z (τ² = 0 assumed) |"
    )
    print("|---|---|---|---|---|---|")
    for name, settings in (("null, θ = 0.2", default), ("null at H0's boundary, θ = 0", boundary)):
        keys = false = hksj = fixed = 0
        for r in range(releases):
            got = release(count, seed * 1000 + r, [np.ones(count)] * 8, settings)["fleet"]
            keys += len(got)
            false += int((got["verdict"] == "detected").sum())
            hksj += int(got["hksj_alone"].sum())
            fixed += int(got["fixed_z"].sum())
        print(
            f"| {name} | {releases} | {keys / releases:.1f} per release | {false / releases:.3f} ({false}) | "
            f"{hksj / releases:.3f} | {fixed / releases:.3f} |"
        )

    fleet_hits = {f: [0, 0, 0, 0, 0] for f in STEPS}  # fleet, ceiling, keys, HKSJ alone, fixed-effect z
    own_hits = {f: [0, 0] for f in STEPS}
    false_steps = 0
    for r in range(releases):
        stepped = rng.random(count) < 0.25
        factor = np.where(stepped, rng.choice(np.asarray(STEPS), count), 1.0)
        got = release(count, seed * 1000 + 500 + r, [factor] * 8, default)
        fleet, share = got["fleet"].set_index("key"), got["fleet"].set_index("key")["budget_share"]
        top = ceiling(got["oracle"], share, default.threshold)
        for key, row in fleet.iterrows():
            f = factor[key]
            if f == 1.0:
                false_steps += row["verdict"] == "detected"
                continue
            fleet_hits[f][0] += row["verdict"] == "detected"
            fleet_hits[f][1] += bool(top.get(key, False))
            fleet_hits[f][2] += 1
            fleet_hits[f][3] += bool(row["hksj_alone"])
            fleet_hits[f][4] += bool(row["fixed_z"])
        own = got["own"][got["own"]["factor"] > 1]
        for f in STEPS:
            mine = own[own["factor"] == f]
            own_hits[f][0] += int((mine["verdict"] == "detected").sum())
            own_hits[f][1] += len(mine)
    print(
        "\n| step on all 8 targets | keys | fleet verdict recall | ceiling recall | ratio | each target's own verdict |"
        " HKSJ alone | fixed-effect z (τ² = 0 assumed) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for f in STEPS:
        hit, top_hit, n, hksj, fixed = fleet_hits[f]
        mine, n_own = own_hits[f]
        ratio = f"{hit / top_hit:.2f}" if top_hit else "–"
        print(
            f"| ×{f:g} | {n} | {hit / max(n, 1):.1%} | {top_hit / max(n, 1):.1%} | {ratio} | "
            f"{mine / max(n_own, 1):.1%} | {hksj / max(n, 1):.1%} | {fixed / max(n, 1):.1%} |"
        )
    print(f"\nfalse fleet detections among the unchanged statements of those releases: {false_steps}")

    found = only = detected = keys = 0
    for r in range(releases):
        stepped = rng.random(count) < 0.25
        factors = [np.where(stepped, 2.0, 1.0)] + [np.ones(count)] * 7
        got = release(count, seed * 1000 + 900 + r, factors, default)
        own = got["own"]
        mine = own[(own["target"] == "shard-0") & (own["factor"] == 2.0)]
        found += int((mine["verdict"] == "detected").sum())
        keys += len(mine)
        fleet = got["fleet"]
        lone = fleet[fleet["key"].isin(np.flatnonzero(stepped))]
        only += sum("shard-0" in o for o in lone["only_on"])
        detected += int((lone["verdict"] == "detected").sum())
    print(
        "\n| ×2 on shard-0 of 8 | statements | found by shard-0's own verdict | fleet: reported only on shard-0 |"
        " fleet: detected |"
    )
    print("|---|---|---|---|---|")
    print(f"| | {keys} | {found / max(keys, 1):.1%} | {only / max(keys, 1):.1%} | {detected / max(keys, 1):.1%} |")
    print(f"\n({time.perf_counter() - started:.0f} s)")


def main() -> None:
    """The command line: --quick for a CI-sized run."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a CI-sized run (seconds)")
    parser.add_argument("--statements", type=int, default=None)
    parser.add_argument("--releases", type=int, default=None)
    parser.add_argument("--seed", type=int, default=29)
    args = parser.parse_args()
    count = args.statements or (30 if args.quick else 60)
    releases = args.releases or (3 if args.quick else 40)
    run(count, releases, args.seed)


if __name__ == "__main__":
    main()
