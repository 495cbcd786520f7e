"""What people see of the tiers beyond `radar gate` (sql/0036): the Slack message names the probably-slower
statements (a warning) and the improvements, their texts escaped, within Slack's limits; the commit status's one line
counts them; the deploy_verdicts metadata has a table of them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pandas as pd

from radar_pipeline.alerts.render import MAX_BLOCKS, AnalysisFacts, Regression, TierNote, render
from radar_pipeline.steps.code_host_delivery import MAX_DESCRIPTION, description

AT = datetime(2026, 12, 6, 12, tzinfo=UTC)
SLOWER = TierNote(
    42, "UPDATE orders SET total = $1 /* <!channel> & <@U1> */", 3.35, 1.72, 6.52, 0.021, "temp_spill (0 → 1,024 <x>)"
)
FASTER = tuple(
    TierNote(q, f"SELECT * FROM t{q} WHERE id = $1", 0.13 * q, 0.05 * q, 0.3 * q, 0.4 / q) for q in (1, 2, 3, 4)
)


def _facts(**tiers: object) -> AnalysisFacts:
    return AnalysisFacts(
        "shop-v2", "main", AT, "shop", "v2", None, None, state="pass", verdict_counts=(("no_regression", 9),),
        cleared_share=0.97, **tiers,  # type: ignore[arg-type]
    )  # fmt: skip


def _texts(blocks: list[dict]) -> str:
    out = []
    for block in blocks:
        if "text" in block:
            out.append(block["text"]["text"])
        out += [f["text"] for f in block.get("fields", [])] + [e["text"] for e in block.get("elements", [])]
    return "\n".join(out)


def test_slack_names_probably_slower_statements_and_improvements_escaped():
    facts = _facts(probably_slower=(SLOWER,), probably_slower_count=1, improved=FASTER[:3], improved_count=4)
    _, blocks = render(facts, [])
    text = _texts(blocks)
    assert "1 probably slower; 4 improved" in text  # in the deploy state's field
    assert "1 statement probably slower" in text and "the gate warns, it does not block" in text
    assert "×3.35 (95% interval ×1.72 to ×6.52), 2.1% of the time after the deploy, queryid 42" in text
    assert "queryid 42, cause: temp_spill (0 → 1,024 &lt;x&gt;)" in text  # its cause on its line (issue 39)
    assert "&lt;!channel&gt; &amp; &lt;@U1&gt;" in text and "<!channel>" not in text
    assert "*4 statements faster:* ×0.13 (95% interval ×0.05 to ×0.30), 40.0% of the time after the deploy" in text
    assert text.count("queryid ") == 4 and " …" in text  # the three busiest named, the fourth counted
    assert "probably slower" not in _texts(render(_facts(), [])[1])  # none: nothing said


def test_slack_stays_within_its_limits_with_every_part_full():
    many = [
        Regression(q, "SELECT 1", 1.0, 3.0, 3.0, 0.999, AT + timedelta(minutes=1), 100, 100, "unexplained", None)
        for q in range(40)
    ]
    slower = tuple(TierNote(q, "SELECT '" + "<&>" * 400 + "'", 1.5, 1.3, 1.8, 0.01) for q in range(10))
    facts = _facts(probably_slower=slower, probably_slower_count=30, improved=FASTER, improved_count=4)
    _, blocks = render(facts, many)
    assert len(blocks) <= MAX_BLOCKS
    for block in blocks:
        if block["type"] == "section" and "text" in block:
            assert len(block["text"]["text"]) <= 3000
    assert "… and 27 more: `radar verdicts shop-v2`" in _texts(blocks)


def test_the_commit_status_counts_the_tiers():
    row = pd.Series({"state": "pass", "cleared_share": 0.97, "largest_excess_share": 0.004, "max_open_excess": 0.01,
                     "improved": 3, "probably_slower": 1, "groups_probably_slower": 1})  # fmt: skip
    text = description("pass", row, pd.DataFrame())
    assert (
        text == "pass: 97% of execution time cleared; open may add ≤ 0.4% each (pass: 1%); 2 probably slower, 3 faster"
    )
    found = pd.DataFrame({"change_factor": [2.5]})
    failed = description("fail", pd.Series({**row, "improved": 0, "groups_probably_slower": 0}), found)
    assert failed == "fail: 1 statement slower, up to ×2.50; 1 probably slower" and len(failed) <= MAX_DESCRIPTION
    assert description(
        "pass", pd.Series({**row, "improved": 0, "probably_slower": 0, "groups_probably_slower": 0}), found
    ) == ("pass: 97% of execution time cleared; open may add ≤ 0.4% each (pass: 1%)")


def test_the_materialization_lists_the_tiered_statements_busiest_first():
    from types import SimpleNamespace

    from radar_pipeline.defs.deploys.deploy_verdicts import _tier_rows

    verdicts = pd.DataFrame(
        {
            "queryid": [1, 2, 3, 4],
            "verdict": ["no_regression", "no_regression", "inconclusive", "no_regression"],
            "tier": ["improved", "improved", "probably_slower", None],
            "calls_after": [10, 100, 5, 880],
            "mean_after_ms": [1.0, 1.0, 2.0, 1.0],
            "segment_mean_before_ms": [2.0, float("nan"), 1.0, 1.0],
            "segment_mean_after_ms": [1.0, float("nan"), 3.35, 1.0],
            "change_factor": [0.5, 0.25, 3.0, 1.0],
            "factor_low": [0.4, 0.2, 1.72, 0.9],
            "factor_high": [0.6, 0.3, 6.52, 1.1],
        }
    )
    rows = _tier_rows(SimpleNamespace(verdicts=verdicts, texts={3: "UPDATE t SET x = $1"}))  # type: ignore[arg-type]
    assert [(r["tier"], r["queryid"], r["factor"], r["share_of_time_after"]) for r in rows] == [
        ("probably_slower", 3, 3.35, 0.01),
        ("improved", 2, 0.25, 0.1),  # no factor at the change: the window's
        ("improved", 1, 0.5, 0.01),
    ]
    assert rows[0]["query"] == "UPDATE t SET x = $1" and rows[1]["query"] == ""
