"""The engine's output on a seeded input is what the engine gave before its speed-ups (issue 29, cost).

`expected_verdicts.csv.gz` was first written by this module's `write` with the engine of main at ec7fcb9 (before
the speed-ups of issue 29): 600 statements through every step (floors, pre-filter, E-divisive, the split test, the
trend, clearing), with stddev_exec_time (some unknown), stats_since (some resets), fingerprints (rotated queryids
merged), repeated and missing snapshots, uneven series lengths, a noise prior and a later look's longer spans. Each row
order the engine reads (sorted, a collector's scrape by scrape, shuffled) must give it again: verdicts, reasons, counts
and times exactly, figures to within 1e-9 relative (rounding may differ in the last bits across numpy builds).
It was written again by engine 2.7.0 (issue 38), whose pooled serial correlation and clearing against the side before
the deploy change the variance and the bounds by design (each checked against the per-query reference,
test_analyse.py): regenerate only for such a change of method, never for a speed-up,
`python -m radar_pipeline_tests.engine.test_unchanged_by_speedups`. The cases run with `family_rule="bonferroni"`,
the family rule of ec7fcb9.
"""

from __future__ import annotations

from datetime import timedelta
from functools import cache
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from radar_pipeline.engine import EngineSettings, analyse

EXPECTED = Path(__file__).with_name("expected_verdicts.csv.gz")
DEPLOY = pd.Timestamp("2026-11-29 12:00", tz="UTC")
SCRAPE = pd.Timedelta(seconds=30)
STATEMENTS = 600
EXACT = ["query_key", "verdict", "reason", "change_at", "n_before", "n_after", "calls_before", "calls_after"]
EXACT += ["segment_n_before", "segment_n_after"]
FIGURES = [
    "mean_before_ms",
    "mean_after_ms",
    "change_factor",
    "t_stat",
    "dof",
    "p_value",
    "p_family",
    "q_stat",
    "segment_mean_before_ms",
    "segment_mean_after_ms",
    "factor_low",
    "factor_high",
    "serial_correlation",
    "history_intervals",
    "factor_bound",
    "budget_share",
    "confidence",
]
CASES = {  # name → analyse's keyword arguments
    "first look": {},
    "with a noise prior": {"prior": True},
    "later look": {"before": timedelta(minutes=30), "after": timedelta(minutes=50)},
}


@cache
def seeded_counters(seed: int = 29) -> pd.DataFrame:
    """Cumulative counters of STATEMENTS statements around DEPLOY, sorted by key and time (module docstring; made
    once, never modified)."""
    rng = np.random.default_rng(seed)
    scrapes = 201  # 50 minutes each side, so a later look has more to read
    times = DEPLOY + SCRAPE * np.arange(-100, 101)
    after = (times > DEPLOY)[1:]
    frames = []
    for q in range(STATEMENTS):
        kind = rng.choice(["step", "small step", "early step", "drift", "flat", "sparse", "few"])
        level = rng.lognormal(0.0, 1.2)
        means = level * rng.lognormal(0.0, rng.choice([0.1, 0.3, 0.6]), scrapes - 1)
        if kind == "step":
            means = np.where(after, means * rng.choice([1.3, 2.0, 4.0]), means)
        elif kind == "small step":
            means = np.where(after, means * 1.12, means)
        elif kind == "early step":
            means[: 100 - rng.integers(20, 40)] /= 2.0
        elif kind == "drift":  # a steady climb through the window
            means = level * rng.lognormal(0.0, 0.05, scrapes - 1) * np.linspace(1.0, 4.0, scrapes - 1)
        busy = {"sparse": 0.6, "few": 0.05, "drift": 200.0}.get(kind, rng.choice([5.0, 40.0]))
        calls = rng.poisson(busy, scrapes - 1)
        within = means**2 * rng.chisquare(np.maximum(calls - 1, 1)) * (calls > 1)
        c = np.concatenate([[rng.integers(0, 5000)], calls]).astype(np.float64)
        t = np.concatenate([[c[0] * level], calls * means])
        m2 = np.zeros(scrapes)
        m2[0] = c[0] * level**2 * 0.25
        cum_c, cum_t = np.cumsum(c), np.cumsum(t)
        for i in range(1, scrapes):
            before_c = cum_c[i - 1]
            jump = (cum_t[i - 1] / before_c - means[i - 1]) ** 2 if before_c > 0 and calls[i - 1] > 0 else 0.0
            m2[i] = m2[i - 1] + within[i - 1] + (before_c * calls[i - 1] / cum_c[i] * jump if cum_c[i] > 0 else 0.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            stddev = np.where(cum_c > 0, np.sqrt(m2 / cum_c), 0.0)
        since = np.full(scrapes, pd.Timestamp("2026-11-28", tz="UTC").value)
        if rng.random() < 0.03:  # a reset: the counters start again
            at = int(rng.integers(10, scrapes - 10))
            cum_c[at:] -= cum_c[at - 1]
            cum_t[at:] -= cum_t[at - 1]
            m2[at:] = 0.0
            with np.errstate(divide="ignore", invalid="ignore"):
                restarted = np.sqrt(within[at - 1 :].cumsum()[: scrapes - at] / cum_c[at:])
            stddev[at:] = np.where(cum_c[at:] > 0, restarted, 0.0)
            since[at:] = times[at].value
        frame = pd.DataFrame(
            {
                "query_key": q,
                "captured_at": times,
                "calls": cum_c.astype(np.int64),
                "total_exec_time": cum_t,
                "stddev_exec_time": stddev if rng.random() > 0.1 else np.nan,
                "stats_since": pd.to_datetime(since, utc=True),
                "fingerprint": f"fp{q}",
            }
        )
        if rng.random() < 0.15:  # missing snapshots
            frame = frame[rng.random(len(frame)) > 0.2]
        if rng.random() < 0.1:  # a shorter series
            frame = frame.iloc[int(rng.integers(0, 60)) :]
        if rng.random() < 0.02:  # a snapshot stored twice
            frame = pd.concat([frame, frame.iloc[[len(frame) // 2]]])
        frames.append(frame)
    counters = pd.concat(frames, ignore_index=True)
    for old, new in ((3, 4), (17, 18), (40, 41)):  # rotated queryids: the old key stops at the deploy, the new starts
        counters.loc[counters["query_key"] == new, "fingerprint"] = f"fp{old}"
        counters = counters[~((counters["query_key"] == old) & (counters["captured_at"] > DEPLOY))]
        counters = counters[~((counters["query_key"] == new) & (counters["captured_at"] <= DEPLOY))]
    return counters.sort_values(["query_key", "captured_at"], kind="stable").reset_index(drop=True)


def noise_prior(seed: int = 30) -> pd.DataFrame:
    """A noise prior for two statements in three (the others are tested on their window alone)."""
    rng = np.random.default_rng(seed)
    keys = np.arange(STATEMENTS)[rng.random(STATEMENTS) < 2 / 3]
    return pd.DataFrame(
        {
            "query_key": keys,
            "serial_correlation": rng.uniform(-0.1, 0.5, len(keys)),
            "dispersion": rng.lognormal(-1.0, 0.5, len(keys)),
            "intervals": rng.choice([100, 600, 1440], len(keys)).astype(float),
        }
    )


def orders(counters: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """The rows sorted, scrape by scrape (each snapshot's rows together, as a collector writes them) and shuffled."""
    by_scrape = counters.sort_values(["captured_at", "query_key"], kind="stable").reset_index(drop=True)
    return {
        "sorted": counters,
        "scrape by scrape": by_scrape,
        "shuffled": counters.sample(frac=1.0, random_state=7).reset_index(drop=True),
    }


def verdicts(counters: pd.DataFrame) -> pd.DataFrame:
    """Every case's verdict frame (EXACT and FIGURES columns), stacked with a `case` column."""
    frames = []
    for case, kwargs in CASES.items():
        arguments = dict(kwargs)
        if arguments.pop("prior", False):
            arguments["prior"] = noise_prior()
        out = analyse(counters, DEPLOY, EngineSettings(family_rule="bonferroni"), **arguments)
        frames.append(out[EXACT + FIGURES].assign(case=case).sort_values("query_key", kind="stable"))
    return pd.concat(frames, ignore_index=True)  # rows follow the keys' first appearance: compared by key


def write() -> None:
    """Store the expected frame (module docstring: only for a change of method, never for a speed-up)."""
    got = verdicts(seeded_counters())
    got.to_csv(EXPECTED, index=False, float_format="%.17g", compression="gzip")


def expected() -> pd.DataFrame:
    frame = pd.read_csv(EXPECTED, compression="gzip", keep_default_na=False, na_values=[""])
    frame["change_at"] = pd.to_datetime(frame["change_at"], utc=True).dt.as_unit("ns")
    return frame


@pytest.mark.parametrize("order", ["sorted", "scrape by scrape", "shuffled"])
def test_verdicts_unchanged_by_the_speedups(order):
    counters = orders(seeded_counters())[order]
    got, want = verdicts(counters), expected()
    assert len(got) == len(want) == len(CASES) * (STATEMENTS - 3)
    # the input reaches every step: each of these verdicts and reasons is among the expected
    assert {"detected", "no_regression", "inconclusive", "insufficient_data"} <= set(want["verdict"])
    assert {"significant", "not_significant", "outside_tolerance", "below_threshold", "floor_samples"} <= set(
        want["reason"]
    )
    for name in ["query_key", "verdict", "reason", "case"]:
        assert got[name].astype(str).tolist() == want[name].astype(str).tolist(), name
    pd.testing.assert_series_equal(got["change_at"], want["change_at"], check_names=False)
    for name in EXACT[4:]:
        np.testing.assert_array_equal(got[name].to_numpy(float), want[name].to_numpy(float), err_msg=name)
    for name in FIGURES:
        np.testing.assert_allclose(
            got[name].to_numpy(float), want[name].to_numpy(float), rtol=1e-9, atol=0, equal_nan=True, err_msg=name
        )


if __name__ == "__main__":
    write()
