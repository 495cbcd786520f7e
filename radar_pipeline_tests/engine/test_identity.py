"""The engine's input check and query identity: fingerprints merge only within (dbid, userid, toplevel); non-finite
counters are refused."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from radar_pipeline.engine import analyse
from radar_pipeline.lab.synthetic import DEPLOY, counters, step


def _tenant(key: str, dbid: int, means: np.ndarray, calls: int, userid: int = 10, toplevel: bool = True):  # type: ignore[no-untyped-def]
    frame = counters(key, means, calls=calls, fingerprint=42)
    return frame.assign(dbid=dbid, userid=userid, toplevel=toplevel)


def test_a_tenants_regression_is_not_merged_with_its_unchanged_twin_in_another_database():
    slow = _tenant("tenant_a", 1, step(before=1.0, after=3.0, seed=1), calls=50)
    twin = _tenant("tenant_b", 2, step(before=1.0, after=1.0, seed=2), calls=1000)  # 20× the calls, unchanged
    out = analyse(pd.concat([slow, twin]), DEPLOY).set_index("query_key")
    assert len(out) == 2
    assert out.loc["tenant_a", "verdict"] == "detected" and out.loc["tenant_a", "change_factor"] > 2.5
    assert out.loc["tenant_b", "verdict"] == "no_regression"
    merged = analyse(pd.concat([slow, twin]).drop(columns=["dbid", "userid", "toplevel"]), DEPLOY)
    assert len(merged) == 1 and merged.iloc[0]["change_factor"] < 1.2  # what one key per fingerprint gave: ×1.1


@pytest.mark.parametrize(("column", "other"), [("userid", 11), ("toplevel", False)])
def test_other_users_and_nesting_levels_are_not_merged(column, other):
    a = _tenant("a", 1, step(seed=3), calls=50)
    b = _tenant("b", 1, step(seed=4), calls=50).assign(**{column: other})
    assert len(analyse(pd.concat([a, b]), DEPLOY)) == 2
    same = _tenant("c", 1, step(seed=4), calls=50)
    assert len(analyse(pd.concat([a, same]), DEPLOY)) == 1  # same database, user and level: one query


@pytest.mark.parametrize("column", ["calls", "total_exec_time"])
def test_infinite_counters_are_refused(column):
    frame = counters("q", step())
    frame[column] = frame[column].astype(float)
    frame.loc[5, column] = np.inf
    with pytest.raises(ValueError, match=f"{column} has infinite values"):
        analyse(frame, DEPLOY)
