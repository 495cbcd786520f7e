"""The family's budget (engine 2.6, issue 29 part 5): the weighted Benjamini–Hochberg step-up (engine/fdr.py) spends
B as expected false detections with nothing changed, gains when many statements regress, finds a cheap statement a
plan flip slowed ×50 with a dozen calls a side when others regressed with it, and stays valid with given shares."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from radar_pipeline.engine import EngineSettings, Verdict, analyse, fdr
from radar_pipeline.engine.decision import family_weights
from radar_pipeline.lab.fleet import DEPLOY, draw

NEW = EngineSettings(pool_serial_correlation=False)  # the family rules compared on the same variance (engine 2.6)
OLD = dataclasses.replace(NEW, family_rule="bonferroni")


def _shares(m: int, rng: np.random.Generator) -> np.ndarray:
    """engine-like shares: half evenly, half by a skewed 'execution time'."""
    time = rng.lognormal(0.0, 2.0, m)
    return family_weights(time, np.ones(m, dtype=bool), 0.5)


def test_the_level_spends_the_budget():
    alpha = fdr.level(0.1)
    assert alpha == pytest.approx(0.0839, abs=1e-4) and alpha / (1 - alpha) ** 2 == pytest.approx(0.1)
    assert fdr.budget_of(np.array([alpha]))[0] == pytest.approx(0.1)
    with pytest.raises(ValueError, match="between 0 and 1"):
        fdr.level(1.5)


def test_the_null_budget_by_a_seeded_simulation():
    # Every statement on H0's boundary (p uniform), independent: E[false detections] ≈ B and P(any) ≈ α(B) < B.
    rng = np.random.default_rng(29)
    m, runs, budget = 1000, 3000, 0.1
    shares = _shares(m, rng)
    false = np.array([fdr.step_up(rng.random(m), shares, budget)[0].sum() for _ in range(runs)])
    mean, any_ = false.mean(), (false > 0).mean()
    se = false.std() / np.sqrt(runs)
    assert mean <= budget + 3 * se, mean
    assert mean >= budget - 4 * se, mean  # it spends the budget: no slack left unused
    assert any_ <= fdr.level(budget) + 3 * np.sqrt(budget / runs), any_
    # engine 2.5's Bonferroni at B on the same shares: E = B exactly; the step-up's mean is no larger.
    bonf = np.array([fdr.bonferroni(rng.random(m), shares, budget)[0].sum() for _ in range(runs)])
    assert abs(bonf.mean() - budget) <= 3 * bonf.std() / np.sqrt(runs)


def test_positive_dependence_keeps_the_chance_of_any_but_not_the_mean():
    # A server-wide shift shared by every statement: one-sided tests of equicorrelated normals (ρ = 0.5) are
    # positively dependent (PRDS), under which the step-up keeps P(any) ≤ α(B) (Benjamini & Yekutieli 2001);
    # the mean count is no longer bounded by B: when one null falls, many fall together.
    from scipy import stats

    rng = np.random.default_rng(7)
    m, runs, rho = 500, 3000, 0.5
    shares = _shares(m, rng)
    common = rng.standard_normal((runs, 1))
    z = np.sqrt(rho) * common + np.sqrt(1 - rho) * rng.standard_normal((runs, m))
    p = stats.norm.sf(z)
    false = np.array([fdr.step_up(row, shares, 0.1)[0].sum() for row in p])
    assert (false > 0).mean() <= fdr.level(0.1) + 3 * np.sqrt(0.1 / runs)
    assert false[false > 0].mean() > 1.5  # rejections come in clumps: E[V] is not the budget's guarantee here


def test_the_step_up_reduces_to_bonferroni_for_one_and_gains_for_many():
    shares = np.full(1000, 1e-3)
    p = np.full(1000, 0.5)
    p[0] = 0.9 * fdr.level(0.1) * 1e-3  # alone: rejected at Bonferroni's level α(B) · w
    assert fdr.step_up(p, shares, 0.1)[0].sum() == 1
    p[1:11] = 8 * fdr.level(0.1) * 1e-3  # ten more at 8 × that: none alone, all eleven together
    rejected, family = fdr.step_up(p, shares, 0.1)
    assert rejected[:11].all() and not rejected[11:].any()
    assert (fdr.bonferroni(p, shares, 0.1)[0].sum(), (family[:11] <= 0.1).all()) == (1, True)
    # NaN p (not tested) and a share of 0 are never rejected and do not count.
    p[11], shares[12], p[12] = np.nan, 0.0, 0.0
    rejected, family = fdr.step_up(p, shares, 0.1)
    assert np.isnan(family[11]) and not rejected[11] and not rejected[12] and rejected[:11].all()


def _planner_change(seed: int) -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
    """The issue's lab in small: 300 unchanged statements, 8 busy ones slowed ×1.5–×3, and 2 cheap sparse ones a plan
    flip slowed ×59 and ×89 (a dozen calls a side). Returns the counters and the masks (busy, cheap) by query_key."""
    base = draw(300, seed).counters
    busy = draw(8, seed + 1, stepped=1.0, steps=(1.5, 2.0, 3.0), rate=(20.0, 200.0), cv=(0.5, 1.0)).counters
    cheap = draw(2, seed + 2, stepped=1.0, steps=(59.0, 89.0), rate=(0.4, 0.5), cv=(0.7, 0.7)).counters
    busy["query_key"] += 1000
    cheap["query_key"] += 2000
    return pd.concat([base, busy, cheap]), np.arange(1000, 1008), np.arange(2000, 2002)


def test_a_plan_flip_on_cheap_statements_is_found_when_others_regressed_with_it():
    counters, busy, cheap = _planner_change(0)
    old = analyse(counters, DEPLOY, OLD).set_index("query_key")
    new = analyse(counters, DEPLOY, NEW).set_index("query_key")
    found = {name: out["verdict"] == Verdict.DETECTED for name, out in (("old", old), ("new", new))}
    # engine 2.5 found the busy eight and one of the two flips; the step-up pays for the others' detections.
    assert found["old"][busy].all() and found["new"][busy].all()
    assert found["old"][cheap].sum() == 1 and found["new"][cheap].all()
    flipped = new.loc[cheap]
    assert (flipped[["calls_before", "calls_after"]].to_numpy() <= 20).all()
    assert (flipped["change_factor"] > 30).all() and (flipped["p_family"] <= NEW.false_alert_budget).all()
    assert not found["new"].drop(index=[*busy, *cheap]).any()  # nothing unchanged detected
    # p_family: the smallest budget that detects it; budget_share: its share of B, as before.
    assert new["budget_share"].sum() == pytest.approx(NEW.false_alert_budget)
    assert (old["budget_share"] == new["budget_share"]).all()
    missed = cheap[~found["old"][cheap].to_numpy()][0]
    assert old.loc[missed, "p_family"] > OLD.false_alert_budget >= new.loc[missed, "p_family"]


def test_more_found_when_many_regress():
    found = {"old": 0, "new": 0, "false": 0}
    # 15 of 415 statements slowed ×1.5 or ×2 (20–200 calls a minute), in each of two deploys
    for seed in (5, 6):
        base = draw(400, 100 + seed).counters
        stepped = draw(15, 200 + seed, stepped=1.0, steps=(1.5, 2.0), rate=(20.0, 200.0), cv=(0.5, 1.5)).counters
        stepped["query_key"] += 1000
        counters = pd.concat([base, stepped])
        for name, settings in (("old", OLD), ("new", NEW)):
            out = analyse(counters, DEPLOY, settings)
            detected = (out["verdict"] == Verdict.DETECTED).to_numpy()
            found[name] += int((detected & (out["query_key"] >= 1000)).sum())
            found["false"] += int((detected & (out["query_key"] < 1000)).sum())
    assert found["new"] >= found["old"] + 4 and found["old"] == 19, found  # 19 of 30 → 23
    assert found["false"] == 0, found


def test_given_weights_decide_the_open_statements_of_a_larger_family():
    counters, busy, cheap = _planner_change(8)
    whole = analyse(counters, DEPLOY, NEW).set_index("query_key")
    shares = whole["budget_share"].dropna() / NEW.false_alert_budget
    # the same shares given back: the same verdicts
    again = analyse(counters, DEPLOY, NEW, weights=shares).set_index("query_key")
    assert (again["verdict"] == whole["verdict"]).all()
    assert np.allclose(again["p_family"], whole["p_family"], equal_nan=True)
    # A later look: only the flips and 50 unchanged statements are still open; the whole family's shares are given
    # (Σ = 1 over statements this call does not hold). The busy detections are absent: they count as not rejected,
    # so the flips get no help from them and p_family can only grow.
    open_ = counters[counters["query_key"].isin([*cheap, *range(50)])]
    later = analyse(open_, DEPLOY, NEW, weights=shares).set_index("query_key")
    assert len(later) == 52 and later["budget_share"].sum() < whole["budget_share"].sum()
    assert (later.loc[cheap, "p_family"] >= whole.loc[cheap, "p_family"] - 1e-12).all()
    expected = fdr.step_up(
        later["p_value"].to_numpy(), shares.reindex(later.index).fillna(0.0).to_numpy(), NEW.false_alert_budget
    )[1]
    assert np.allclose(later["p_family"], expected, equal_nan=True)
    # a decidable statement the given shares leave out gets none: never detected, p_family 1 where it was tested
    without = shares.drop(index=cheap)
    left_out = analyse(open_, DEPLOY, NEW, weights=without).set_index("query_key")
    assert not (left_out.loc[cheap, "verdict"] == Verdict.DETECTED).any()
    assert (left_out.loc[cheap, "budget_share"] == 0).all()
    with pytest.raises(ValueError, match="sum to at most 1"):
        analyse(open_, DEPLOY, NEW, weights=shares * 2)


def test_the_family_rule_is_a_setting():
    with pytest.raises(ValueError, match="family_rule must be one of fdr, bonferroni, not 'holm'"):
        EngineSettings(family_rule="holm")
    assert EngineSettings.from_dict(OLD.to_dict()) == OLD
    # engine 2.5's rule: p_family = min(1, p / w) exactly
    counters, _, _ = _planner_change(4)
    out = analyse(counters, DEPLOY, OLD)
    tested = out["p_value"].notna()
    w = out["budget_share"] / OLD.false_alert_budget
    assert np.allclose(out.loc[tested, "p_family"], np.minimum(1, out["p_value"] / w)[tested])
