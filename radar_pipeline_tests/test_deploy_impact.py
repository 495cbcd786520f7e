"""The deploy's impact in the warehouse: summary and statement changes stored with the analysis, the collateral
cause, the alert and `radar verdicts`. Synthetic counters stored as the collector would (deterministic on a busy
machine: the collateral case cannot be made reliable with real load on two shared cores)."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import dagster as dg
import numpy as np
import pandas as pd
import pytest
import sqlalchemy as sa

from radar_pipeline.defs.alerts.regression_alerts import regression_alerts
from radar_pipeline.defs.resources import AnalysisResource, ChannelsResource, SlackResource, WarehouseResource
from radar_pipeline.engine import EngineSettings
from radar_pipeline.steps.alert_delivery import plain_text
from radar_pipeline.steps.deploy_analysis import AnalysisRun, analyse_deploy
from radar_pipeline.warehouse import deploys
from radar_pipeline.warehouse.analysis import impact_of

from . import fake_slack
from .helpers import run_log_text

SETTINGS = EngineSettings(window=timedelta(seconds=200), tolerance_floor=timedelta(seconds=10))
STEP = 10  # seconds between scrapes
LIST = "SELECT id FROM orders WHERE customer_id = $1"
LOOKUP = "SELECT name FROM products WHERE id = $1"
UPDATE = "UPDATE accounts SET balance = balance + $1 WHERE id = $2"
SCAN = "SELECT * FROM accounts WHERE note LIKE $1"
OTHER = "SELECT 1 FROM customers WHERE id = $1"


def store(warehouse: sa.Engine, deploy_id: str, statements: dict[int, dict]) -> datetime:
    """Counters of target 'main' around a deploy 300 s ago, a scrape every STEP seconds (±20 intervals). Per queryid:
    text, calls per interval before/after (Poisson), mean ms before/after (log-normal 10%), new (no row before
    the deploy), and tail (calls per interval after the deploy for that many intervals, then none: a rolling deploy's
    old code), wal (WAL bytes per call before/after; none: null, as a server without the counter). Records the deploy
    and returns its time."""
    deployed_at = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=300)
    rng = np.random.default_rng(7)
    rows, scrapes = [], set()
    for queryid, s in statements.items():
        calls = time = wal = 0.0
        for i in range(-21, 21):
            at = deployed_at + timedelta(seconds=STEP * i)
            after = i > 0
            rate = s["calls"][after]
            if "tail" in s and after:
                rate = s["tail"][0] if i <= s["tail"][1] else 0
            if s.get("new") and not after:
                continue
            c = float(rng.poisson(rate)) if i > -21 else 0.0
            mean = s["ms"][after] * rng.lognormal(0, 0.1)
            calls, time = calls + c, time + c * mean
            wal += c * s["wal"][after] if "wal" in s else 0
            rows.append({"at": at, "q": queryid, "c": int(calls), "t": time, "r": int(calls) * s.get("rows", 1)})
            rows[-1]["w"] = int(wal) if "wal" in s else None
            scrapes.add(at)
    with warehouse.begin() as conn:
        conn.execute(
            sa.text("SELECT radar.ensure_pgss_snapshot_partitions(CAST(:d AS date) - 1, 3)"), {"d": deployed_at}
        )
        conn.execute(
            sa.text(
                "INSERT INTO radar.pgss_snapshot VALUES ('main', :at, 5, 10, :q, true, :c, :t, :r, 0, 0, 0, "
                "0.0, NULL, false, :q)"
            ),
            rows,
        )
        conn.execute(
            sa.text(
                "UPDATE radar.pgss_snapshot SET wal_bytes = :w "
                "WHERE target = 'main' AND queryid = :q AND captured_at = :at"
            ),
            [r for r in rows if r["w"] is not None] or [{"w": None, "q": 0, "at": deployed_at}],
        )
        conn.execute(
            sa.text("INSERT INTO radar.pgss_info_snapshot VALUES ('main', :at, 0, NULL, 180000, '1.12', 2, 2)"),
            [{"at": at} for at in sorted(scrapes)],
        )
        conn.execute(
            sa.text("INSERT INTO radar.query VALUES ('main', 5, 10, :q, true, :q, :text, :at, :at, 0, 0, NULL, NULL)"),
            [{"q": q, "text": s["text"], "at": deployed_at} for q, s in statements.items()],
        )
    deploys.record(warehouse, deploys.DeployEvent(deploy_id, "main", deployed_at, service="api", version="v2"))
    return deployed_at


def changes_of(warehouse: sa.Engine, deploy_id: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    with warehouse.connect() as conn:
        summary, changes = impact_of(conn, deploy_id)
    return summary.set_index("dbid"), changes.set_index("queryid")


def test_an_n_plus_one_loop_is_a_surge_with_latency_unchanged(warehouse):
    store(
        warehouse,
        "n1",
        {
            31: {"text": LIST, "calls": (20, 20), "ms": (2.0, 2.0)},
            32: {"text": LOOKUP, "calls": (20, 400), "ms": (0.1, 0.1)},  # called per row of the list
            33: {"text": OTHER, "calls": (50, 50), "ms": (0.5, 0.5)},
        },
    )
    result = analyse_deploy(AnalysisRun(warehouse, SETTINGS), "n1")
    assert (result.verdicts["verdict"] != "detected").all()
    summary, changes = changes_of(warehouse, "n1")
    assert list(changes.index) == [32]
    row = changes.loc[32]
    assert row["kind"] == "n_plus_one" and row["share_ratio"] > 10 and row["p_family"] <= 0.1
    assert row["calls_per_min_after"] == pytest.approx(row["calls_per_min_before"] * 20, rel=0.2)
    assert row["query"] == LOOKUP
    whole = summary.loc[-1]
    assert whole["calls_per_min_after"] > 4 * whole["calls_per_min_before"]
    assert set(summary.index) == {-1, 5}


def test_a_new_slow_statement_is_reported_heavy(warehouse):
    store(
        warehouse,
        "new",
        {
            41: {"text": SCAN, "calls": (0, 5), "ms": (0.0, 80.0), "new": True},
            42: {"text": OTHER, "calls": (50, 50), "ms": (0.5, 0.5)},
        },
    )
    result = analyse_deploy(AnalysisRun(warehouse, SETTINGS), "new")
    assert result.verdicts.set_index("queryid").loc[41, "verdict"] == "insufficient_data"
    summary, changes = changes_of(warehouse, "new")
    row = changes.loc[41]
    assert row["kind"] == "new" and row["heavy"] and row["calls_before"] == 0
    assert row["mean_after_ms"] == pytest.approx(80.0, rel=0.1)
    assert summary.loc[-1, "exec_ms_per_min_after"] > 10 * summary.loc[-1, "exec_ms_per_min_before"]
    assert summary.loc[-1, "statements_before"] == 1 and summary.loc[-1, "statements_after"] == 2


def test_a_slowdown_beside_a_new_heavy_statement_is_collateral(warehouse):
    store(
        warehouse,
        "idx",
        {
            51: {"text": UPDATE, "calls": (100, 100), "ms": (1.0, 1.5)},  # slowed by the scans' load
            52: {"text": SCAN, "calls": (0, 10), "ms": (0.0, 200.0), "new": True},  # the index dropped: a seq scan
            53: {"text": OTHER, "calls": (50, 50), "ms": (0.5, 0.5)},
        },
    )
    result = analyse_deploy(AnalysisRun(warehouse, SETTINGS), "idx")
    verdicts = result.verdicts.set_index("queryid")
    assert verdicts.loc[51, "verdict"] == "detected"
    assert verdicts.loc[51, "cause"] == "collateral"
    detail = verdicts.loc[51, "cause_detail"]
    assert detail.startswith("collateral of queryid 52 (new, ") and detail.endswith(
        f" ms of database time per minute at the same change): {SCAN}"
    )
    assert verdicts.loc[53, "verdict"] != "detected"
    with warehouse.connect() as conn:
        stored = conn.execute(
            sa.text("SELECT cause, cause_detail FROM radar.regression WHERE deploy_id = 'idx' AND queryid = 51")
        )
        assert tuple(stored.one()) == ("collateral", detail)
    _, changes = changes_of(warehouse, "idx")
    assert changes.loc[52, "kind"] == "new" and changes.loc[52, "heavy"]


def test_a_traffic_doubling_is_no_surge(warehouse):
    store(
        warehouse,
        "twice",
        {
            61: {"text": LIST, "calls": (20, 40), "ms": (2.0, 2.0)},
            62: {"text": LOOKUP, "calls": (100, 200), "ms": (0.1, 0.1)},
            63: {"text": OTHER, "calls": (50, 100), "ms": (0.5, 0.5)},
        },
    )
    result = analyse_deploy(AnalysisRun(warehouse, SETTINGS), "twice")
    assert (result.verdicts["verdict"] != "detected").all()
    summary, changes = changes_of(warehouse, "twice")
    assert changes.empty
    assert summary.loc[-1, "calls_per_min_after"] == pytest.approx(2 * summary.loc[-1, "calls_per_min_before"], rel=0.1)


def test_reanalysis_replaces_the_impact(warehouse):
    store(
        warehouse,
        "again",
        {
            71: {"text": LOOKUP, "calls": (20, 400), "ms": (0.1, 0.1)},
            72: {"text": OTHER, "calls": (50, 50), "ms": (0.5, 0.5)},
        },
    )
    analyse_deploy(AnalysisRun(warehouse, SETTINGS), "again")
    analyse_deploy(AnalysisRun(warehouse, SETTINGS), "again")
    summary, changes = changes_of(warehouse, "again")
    assert len(changes) == 1 and len(summary) == 2


def _alert(warehouse_url: str, slack: fake_slack.FakeSlack, deploy_id: str) -> tuple[dict, str]:
    """Materialise regression_alerts for the deploy with the real slack-sdk client against the stand-in; returns the
    posts' blocks joined as text (what the channel shows) and the fallback text of the last post."""
    bot = SlackResource(token="xoxb-test-token", channel="#radar", base_url=slack.api_url)
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("deploys", [deploy_id])
        result = dg.materialize(
            [regression_alerts],
            partition_key=deploy_id,
            resources={
                "warehouse": WarehouseResource(url=warehouse_url),
                "slack": bot,
                "channels": ChannelsResource(),
                "analysis": AnalysisResource(),
            },
            instance=instance,
            selection=[regression_alerts],
        )
        assert result.success, run_log_text(instance, result.run_id)
    posts = slack.calls_to("/api/chat.postMessage")
    if not posts:
        return {}, ""
    body = posts[-1].json
    blocks = body["blocks"] if isinstance(body["blocks"], list) else json.loads(body["blocks"])
    return body, plain_text(blocks)


def test_an_n_plus_one_alone_is_announced_once(warehouse, warehouse_url, slack):
    store(
        warehouse,
        "n1-alert",
        {
            31: {"text": LIST, "calls": (20, 20), "ms": (2.0, 2.0)},
            32: {"text": LOOKUP, "calls": (20, 400), "ms": (0.1, 0.1)},
        },
    )
    analyse_deploy(AnalysisRun(warehouse, SETTINGS), "n1-alert")
    body, text = _alert(warehouse_url, slack, "n1-alert")
    assert body["text"] == "1 N+1 surge after deploy api v2 on main"
    assert "*Database time:*" in text and "ms per minute (×" in text
    assert f"```{LOOKUP}```" in text
    assert "*Load change:* N+1: calls surged, latency unchanged, calls ×" in text
    print(f"\n--- N+1 alert ---\n{body['text']}\n{text}")
    _alert(warehouse_url, slack, "n1-alert")  # sent already: not again
    assert len(slack.calls_to("/api/chat.postMessage")) == 1
    with warehouse.connect() as conn:
        rows = conn.execute(sa.text("SELECT queryid, status FROM radar.alert WHERE deploy_id = 'n1-alert'")).all()
    assert [tuple(r) for r in rows] == [(32, "sent")]


def test_a_collateral_slowdown_alert_leads_with_its_cause(warehouse, warehouse_url, slack):
    store(
        warehouse,
        "idx-alert",
        {
            51: {"text": UPDATE, "calls": (100, 100), "ms": (1.0, 1.5)},
            52: {"text": SCAN, "calls": (0, 10), "ms": (0.0, 200.0), "new": True},
            53: {"text": OTHER, "calls": (50, 50), "ms": (0.5, 0.5)},
        },
    )
    analyse_deploy(AnalysisRun(warehouse, SETTINGS), "idx-alert")
    with warehouse.begin() as conn:  # the scan's plan, as plan capture stores it
        conn.execute(
            sa.text(
                "INSERT INTO radar.plan_snapshot VALUES ('main', 5, 10, 52, true, now(), 'generic_plan', 'h1', "
                "'Seq Scan on accounts', 1234.5, '{}')"
            )
        )
    body, text = _alert(warehouse_url, slack, "idx-alert")
    assert body["text"] == "1 query slower, 1 new heavy statement after deploy api v2 on main"
    assert text.index(SCAN.replace("$1", "$1")) < text.index(UPDATE)  # the cause first
    assert "*Load change:* new statement, " in text and "of the database time after the deploy" in text
    assert "*Cause:* collateral of queryid 52 (new, " in text and f"): {SCAN}" in text
    assert "*First plan:* Seq Scan on accounts" in text
    print(f"\n--- collateral alert ---\n{body['text']}\n{text}")
    assert not fake_slack.limit_errors(body)


def test_a_traffic_doubling_sends_nothing(warehouse, warehouse_url, slack):
    store(
        warehouse,
        "twice-alert",
        {
            61: {"text": LIST, "calls": (20, 40), "ms": (2.0, 2.0)},
            62: {"text": LOOKUP, "calls": (100, 200), "ms": (0.1, 0.1)},
        },
    )
    analyse_deploy(AnalysisRun(warehouse, SETTINGS), "twice-alert")
    assert _alert(warehouse_url, slack, "twice-alert") == ({}, "")


def test_verdicts_command_and_metadata_show_the_summary(warehouse, warehouse_url):
    import os
    import subprocess
    import sys
    from pathlib import Path

    from radar_pipeline.defs.deploys.deploy_verdicts import _metadata

    store(
        warehouse,
        "idx-cli",
        {
            51: {"text": UPDATE, "calls": (100, 100), "ms": (1.0, 1.5)},
            52: {"text": SCAN, "calls": (0, 10), "ms": (0.0, 200.0), "new": True},
            53: {"text": OTHER, "calls": (50, 50), "ms": (0.5, 0.5)},
        },
    )
    result = analyse_deploy(AnalysisRun(warehouse, SETTINGS), "idx-cli")
    metadata = _metadata(result)
    summary = metadata["database_time"].records[0].data
    assert summary["database"] == "all" and summary["exec_ms_per_min_after"] > 10 * summary["exec_ms_per_min_before"]
    change = metadata["load_changes"].records[0].data
    assert change["kind"] == "new" and change["heavy"] and change["query"] == SCAN and change["queryid"] == "52"

    proc = subprocess.run(
        [str(Path(sys.executable).parent / "radar"), "verdicts", "idx-cli", "--warehouse", warehouse_url],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "160"},
    )
    assert proc.returncode == 0, proc.stderr
    print(f"\n--- radar verdicts idx-cli ---\n{proc.stdout}")
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("deploy idx-cli: fail; 1 detected, ")  # the state, then counts
    assert "of the time after the deploy cleared; open adds ≤ " in lines[1]
    assert " together (pass: 1%, 3%)" in lines[1]
    assert lines[2].startswith("database time: ") and "; statements 2 → 3" in lines[2]
    changes_at = next(i for i, line in enumerate(lines) if "┃ change" in line)
    verdicts_at = next(i for i, line in enumerate(lines) if "┃ verdict" in line)
    assert changes_at < verdicts_at  # the summary above the verdicts
    assert "new (heavy)" in lines[changes_at + 2] and SCAN in lines[changes_at + 2]
    assert "collateral" in lines[verdicts_at + 2]
    at = next(i for i, line in enumerate(lines) if line.startswith("cause of queryid 51: "))
    cause = " ".join([lines[at], *(line.strip() for line in lines[at + 1 :] if line.startswith("  "))][:4])
    assert cause.startswith("cause of queryid 51: collateral of queryid 52 (new, ") and SCAN in cause
    assert max(len(line) for line in lines) <= 160


@pytest.mark.parametrize("changes", [1, 3, 4, 200])
@pytest.mark.parametrize("regressions", [0, 1, 60])
def test_load_changes_keep_messages_within_slacks_limits(changes, regressions):
    from radar_pipeline.alerts.render import MAX_CHANGES, LoadChange, render

    from .test_alerts import _many

    facts, slower = _many(regressions, long=True)
    facts = replace(facts, load_ms_per_min=(100.0, 2500.0))
    filler = "x" * 5000
    load = [
        LoadChange(
            queryid=i,
            query=f"SELECT {i} FROM t WHERE note = '<!channel> {filler}'",
            kind=("new", "n_plus_one", "surge")[i % 3],
            calls_per_min_before=0.0 if i % 3 == 0 else 10.0,
            calls_per_min_after=200.0,
            exec_ms_per_min_before=0.0,
            exec_ms_per_min_after=2000.0,
            mean_before_ms=None if i % 3 == 0 else 1.0,
            mean_after_ms=10.0,
            share_of_time_after=0.8,
            plan_summary="Seq Scan on t " + filler,
        )
        for i in range(changes)
    ]
    text, blocks = render(facts, slower, load)
    assert fake_slack.limit_errors({"text": text, "blocks": blocks}) == []
    assert "*Database time:* 100.0 → 2,500.0 ms per minute (×25.00)" in blocks[1]["fields"][-1]["text"]
    assert "<!channel>" not in json.dumps(blocks)
    shown_changes = [b for b in blocks if b["type"] == "section" and "*Load change:*" in json.dumps(b)]
    assert len(shown_changes) == min(changes, MAX_CHANGES)
    if changes > MAX_CHANGES:
        assert f"{changes - MAX_CHANGES} more load changes" in json.dumps(blocks)


def test_a_deploy_with_no_data_before_it_says_so(warehouse, warehouse_url, slack):
    """A target first scraped after its deploy has no data before it, not a load of 0 ms per minute."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from radar_pipeline.defs.deploys.deploy_verdicts import _metadata

    store(
        warehouse,
        "first-look",
        {
            71: {"text": SCAN, "calls": (0, 10), "ms": (0.0, 200.0), "new": True},
            72: {"text": OTHER, "calls": (0, 50), "ms": (0.0, 0.5), "new": True},
        },
    )
    result = analyse_deploy(AnalysisRun(warehouse, SETTINGS), "first-look")
    summary = _metadata(result)["database_time"].records[0].data
    assert summary["note"] == "no data before the deploy" and summary["exec_ms_per_min_before"] is None
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "radar"), "verdicts", "first-look", "--warehouse", warehouse_url],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "160"},
    )
    assert proc.returncode == 0, proc.stderr
    (line,) = [line for line in proc.stdout.splitlines() if line.startswith("database time: ")]
    assert line.startswith("database time: no data before the deploy; after it ") and " → " not in line, line
    body, text = _alert(warehouse_url, slack, "first-look")
    print(f"\n--- no data before ---\n{body.get('text')}\n{text}\n{proc.stdout}")
    assert "*Database time:* " in text and "(no data before the deploy)" in text
    assert "0.0 →" not in text.split("*Database time:*", 1)[1].splitlines()[0]


def test_a_slowdown_beside_a_heavier_detection_is_its_collateral(warehouse):
    """The issue's lab: an index dropped makes one statement ×50 slower, and its scans' CPU and I/O slow another
    ×2 at the same moment. The lighter detection is collateral of the heavier one, saying what rose."""
    store(
        warehouse,
        "idx-drop",
        {
            81: {"text": LIST, "calls": (20, 20), "ms": (1.0, 50.0)},  # the dropped index's statement
            82: {"text": UPDATE, "calls": (100, 100), "ms": (1.0, 2.0)},
            83: {"text": OTHER, "calls": (50, 50), "ms": (0.5, 0.5)},
            84: {"text": LOOKUP, "calls": (50, 50), "ms": (0.5, 0.5)},
        },
    )
    result = analyse_deploy(AnalysisRun(warehouse, SETTINGS), "idx-drop")
    verdicts = result.verdicts.set_index("queryid")
    assert list(verdicts.index[verdicts["verdict"] == "detected"].sort_values()) == [81, 82]
    assert verdicts.loc[81, "cause"] == "unexplained"  # the heaviest is nobody's collateral
    assert verdicts.loc[82, "cause"] == "collateral"
    detail = verdicts.loc[82, "cause_detail"]
    assert detail.startswith("collateral of queryid 81 (its database time ×") and detail.endswith(
        f" at the same change): {LIST}"
    )
    assert 30 < float(detail.split("×")[1].split(" ")[0]) < 80, detail


def test_a_read_writing_more_wal_is_collateral_of_the_writer_and_a_write_is_wal_bound(warehouse):
    """The lab's migration: a backfill's writes leave dead rows, and a SELECT that prunes them writes WAL it never
    wrote before. Its WAL is the writer's doing: it is collateral of the statement whose load rose; an UPDATE writing
    more WAL of its own stays wal_bound."""
    store(
        warehouse,
        "wal",
        {
            91: {"text": OTHER, "calls": (100, 100), "ms": (1.0, 2.5), "wal": (10, 20_000)},
            92: {"text": LIST, "calls": (20, 20), "ms": (1.0, 50.0)},  # the heavy writer's stand-in
            93: {"text": UPDATE, "calls": (100, 100), "ms": (1.0, 2.5), "wal": (100, 50_000)},
        },
    )
    verdicts = analyse_deploy(AnalysisRun(warehouse, SETTINGS), "wal").verdicts.set_index("queryid")
    assert list(verdicts.index[verdicts["verdict"] == "detected"].sort_values()) == [91, 92, 93]
    assert verdicts.loc[93, "cause"] == "wal_bound"
    assert verdicts.loc[91, "cause"] == "collateral", verdicts.loc[91, "cause_detail"]
    assert verdicts.loc[91, "cause_detail"].startswith("collateral of queryid 92 ")


def test_a_rewritten_statement_is_replaced_despite_a_rolling_tail(warehouse, warehouse_url, slack):
    """An ORM adds a column to a SELECT: the old text stops (its old pods call it a few more times after the
    deploy), the new one starts ×4 slower per call. Both halves are stored as replaced, each naming the other; the
    deploy's DROP INDEX is its own statement, and BEGIN's surge no load change. Slack announces the heavier rewrite,
    `radar verdicts` lists all three."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    old, new = "SELECT id FROM orders WHERE customer_id = $1", "SELECT id, note FROM orders WHERE customer_id = $1"
    drop = "DROP INDEX orders_customer_idx"
    store(
        warehouse,
        "orm",
        {
            91: {"text": old, "calls": (30, 0), "ms": (2.0, 2.0), "tail": (5, 2)},
            92: {"text": new, "calls": (0, 30), "ms": (0.0, 8.0), "new": True},
            93: {"text": OTHER, "calls": (50, 50), "ms": (0.5, 0.5)},
            94: {"text": "BEGIN", "calls": (10, 300), "ms": (0.01, 0.01)},  # control: never a load change
            95: {"text": drop, "calls": (0, 0.2), "ms": (0.0, 30.0), "new": True},
        },
    )
    from radar_pipeline.defs.deploys.deploy_verdicts import _metadata

    result = analyse_deploy(AnalysisRun(warehouse, SETTINGS), "orm")
    shown = {r.data["queryid"]: r.data for r in _metadata(result)["load_changes"].records}
    assert shown["92"]["kind"] == "replaced" and shown["92"]["partner_queryid"] == "91"
    _, changes = changes_of(warehouse, "orm")
    assert list(changes.index.sort_values()) == [91, 92, 95], changes[["kind", "calls_before", "calls_after"]]
    assert changes.loc[91, "kind"] == "replaced" and changes.loc[92, "kind"] == "replaced"
    assert 0 < changes.loc[91, "calls_after"] <= 0.05 * changes.loc[91, "calls_before"]
    assert changes.loc[91, "partner_queryid"] == 92 and changes.loc[92, "partner_queryid"] == 91
    factor = changes.loc[92, "per_call_factor"]
    assert factor == pytest.approx(4.0, rel=0.15)
    assert changes.loc[92, "heavy"] and not changes.loc[91, "heavy"]
    assert changes.loc[95, "kind"] == "deploy_statement" and not changes.loc[95, "heavy"]

    body, text = _alert(warehouse_url, slack, "orm")
    print(f"\n--- rewrite alert ---\n{body['text']}\n{text}")
    assert body["text"] == "1 heavier rewritten statement after deploy api v2 on main"
    assert f"*Load change:* replaces queryid 91 (×{factor:.1f} per call), " in text
    assert drop not in text
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "radar"), "verdicts", "orm", "--warehouse", warehouse_url],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert proc.returncode == 0, proc.stderr
    print(proc.stdout)
    rows = {line.split("│")[1].strip(): line for line in proc.stdout.splitlines() if line.count("│") > 3}
    assert f"replaces queryid 91 (×{factor:.1f} per call) (heavy)" in rows
    assert f"replaced by queryid 92 (×{factor:.1f} per call)" in rows
    assert "the deploy's own statement" in rows
