"""regression_alerts with the real slack-sdk client against a local stand-in for Slack's API."""

from __future__ import annotations

import dataclasses
import json
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import dagster as dg
import numpy as np
import pytest
import sqlalchemy as sa

from radar_pipeline.defs.alerts.regression_alerts import regression_alerts, slack_run_failure_sensor
from radar_pipeline.defs.deploys.deploy_verdicts import RANGE_END, RANGE_START
from radar_pipeline.defs.resources import AnalysisResource, ChannelsResource, SlackResource, WarehouseResource
from radar_pipeline.engine import EngineSettings
from radar_pipeline.steps.deploy_analysis import AnalysisRun, analyse_deploy
from radar_pipeline.warehouse import deploys

from . import fake_slack
from .helpers import run_log_text

EVIL = "SELECT * FROM orders WHERE note = '<!channel> & <@U123>' AND id = $1"
SETTINGS = EngineSettings(window=timedelta(seconds=200), tolerance_floor=timedelta(seconds=10))
ARTIFACTS = Path("/tmp/radar-test-artifacts")


@pytest.fixture
def analysed(warehouse):
    """A deploy whose window is in the warehouse: queryid 11 got 4× slower at the deploy, 12 did not."""
    deployed_at = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=300)
    rng = np.random.default_rng(5)
    with warehouse.begin() as conn:
        conn.execute(
            sa.text("SELECT radar.ensure_pgss_snapshot_partitions(CAST(:d AS date) - 1, 3)"), {"d": deployed_at}
        )
        for queryid, text, factor in ((11, EVIL, 4.0), (12, "SELECT 1 FROM customers WHERE id = $1", 1.0)):
            calls = time = 0.0
            for i in range(-21, 21):
                at = deployed_at + timedelta(seconds=10 * i)
                mean = (factor if i > 0 else 1.0) * rng.lognormal(0, 0.1)
                calls, time = calls + 20, time + 20 * mean
                conn.execute(
                    sa.text(
                        "INSERT INTO radar.pgss_snapshot VALUES ('main', :at, 5, 10, :q, true, :c, :t, :c, 0, :c, 0, "
                        "0.0, NULL, false, :q)"
                    ),
                    {"at": at, "q": queryid, "c": int(calls), "t": time},
                )
                conn.execute(
                    sa.text(
                        "INSERT INTO radar.pgss_info_snapshot VALUES ('main', :at, 0, NULL, 180000, '1.12', 2, 2) "
                        "ON CONFLICT DO NOTHING"
                    ),
                    {"at": at},
                )
            conn.execute(
                sa.text(
                    "INSERT INTO radar.query VALUES ('main', 5, 10, :q, true, :q, :text, :at, :at, 0, 0, NULL, NULL)"
                ),
                {"q": queryid, "text": text, "at": deployed_at},
            )
    deploys.record(
        warehouse,
        deploys.DeployEvent("d-7", "main", deployed_at, service="api", version="v7", url="https://ci.example/runs/7"),
    )
    result = analyse_deploy(AnalysisRun(warehouse, SETTINGS, run_id="abcdef12-run"), "d-7")
    assert result.verdicts.set_index("queryid").loc[11, "verdict"] == "detected"
    assert result.verdicts.set_index("queryid").loc[12, "verdict"] != "detected"
    return warehouse


def _alert(warehouse_url: str, slack: SlackResource) -> tuple[dg.ExecuteInProcessResult, str]:
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("deploys", ["d-7"])
        result = dg.materialize(
            [regression_alerts],
            partition_key="d-7",
            resources={
                "warehouse": WarehouseResource(url=warehouse_url),
                "analysis": AnalysisResource(),
                "slack": slack,
                "channels": ChannelsResource(),
            },
            instance=instance,
            selection=[regression_alerts],
        )
        return result, run_log_text(instance, result.run_id)


def _outbox(warehouse) -> list[tuple]:
    with warehouse.connect() as conn:
        return [
            tuple(r)
            for r in conn.execute(sa.text("SELECT queryid, channel, status, attempts, message_ts FROM radar.alert"))
        ]


def _bot(slack: fake_slack.FakeSlack) -> SlackResource:
    return SlackResource(token="xoxb-test-token", channel="#radar", base_url=slack.api_url)


def test_message_structure_escaping_and_chart(analysed, warehouse_url, slack):
    result, _ = _alert(warehouse_url, _bot(slack))
    assert result.success
    posts = slack.calls_to("/api/chat.postMessage")
    assert len(posts) == 1
    assert posts[0].headers["authorization"] == "Bearer xoxb-test-token"
    body = posts[0].json
    raw = posts[0].body.decode()
    assert body["channel"] == "#radar"
    assert body["text"] == "1 query slower after deploy api v7 on main"
    blocks = body["blocks"] if isinstance(body["blocks"], list) else json.loads(body["blocks"])
    assert blocks[0] == {"type": "header", "text": {"type": "plain_text", "text": body["text"], "emoji": False}}
    code = blocks[3]["text"]["text"]
    assert code == "```SELECT * FROM orders WHERE note = '&lt;!channel&gt; &amp; &lt;@U123&gt;' AND id = $1```"
    assert "<!channel>" not in raw and "<@U123>" not in raw
    fields = " | ".join(f["text"] for f in blocks[4]["fields"])
    for expected in (
        "*Mean:*",
        "(×",
        "*Confidence:*",
        "; noise from this window alone)",  # no noise history stored for this target
        "*Change began:*",
        "*Calls:* 400 before",
        "*Cause:*",
        "queryid:* 11",
    ):
        assert expected in fields
    assert "<https://ci.example/runs/7|d-7>" in blocks[1]["fields"][0]["text"]
    # The deploy's state leads with its counts (radar.deploy_state): the slowed query detected, the other one decided.
    (state,) = [f["text"] for f in blocks[1]["fields"] if f["text"].startswith("*Deploy state:*")]
    assert state.startswith("*Deploy state:* fail (1 detected, ") and " 0 insufficient_data; " in state, state
    assert state.endswith("% of the time after the deploy cleared)")
    assert blocks[-1]["elements"][0]["text"] == "<http://localhost:3000/runs/abcdef12-run|Analysis run in Dagster>"

    uploads = [c for c in slack.calls if c.path.startswith("/upload/")]
    assert len(uploads) == 1 and uploads[0].body[:8] == b"\x89PNG\r\n\x1a\n"
    complete = slack.calls_to("/api/files.completeUploadExternal")[0].json
    assert complete["thread_ts"] == "1764000000.000001" and complete["channel_id"] == "C0RADAR"
    assert _outbox(analysed) == [(11, "#radar", "sent", 1, "1764000000.000001")]

    ARTIFACTS.mkdir(parents=True, exist_ok=True)  # for a person to look at: the message and its chart
    (ARTIFACTS / "slack_blocks.json").write_text(json.dumps(blocks, indent=1, ensure_ascii=False))
    metadata = result.asset_materializations_for_node("regression_alerts")[0].metadata
    shutil.copy(metadata["charts"].value[0], ARTIFACTS / "regression_chart.png")
    # The outbox by status, numbers the UI charts (not a JSON object).
    assert {k: v for k, v in metadata.items() if k.startswith("alerts_")} == {
        "alerts_pending": dg.MetadataValue.int(0),
        "alerts_sending": dg.MetadataValue.int(0),
        "alerts_sent": dg.MetadataValue.int(1),
        "alerts_failed": dg.MetadataValue.int(0),
        "alerts_skipped": dg.MetadataValue.int(0),
        "alerts_withheld": dg.MetadataValue.int(0),
    }

    again, _ = _alert(warehouse_url, _bot(slack))  # sent already: nothing goes out twice
    assert again.success and len(slack.calls_to("/api/chat.postMessage")) == 1


def test_a_deploy_whose_only_news_is_a_probably_slower_statement_is_said_once(analysed, warehouse_url, slack):
    """A statement left open but slower than 1 + θ on its own evidence (inconclusive, tier probably_slower, as the
    engine marks it when its family's budget holds it back) is the deploy's only news: Slack is told once, as a
    warning that does not block, and the outbox keeps it from going out twice."""
    with analysed.begin() as conn:
        conn.execute(
            sa.text(
                "UPDATE radar.verdict SET verdict = 'inconclusive', reason = 'not_significant', "
                "tier = 'probably_slower' WHERE deploy_id = 'd-7' AND queryid = 11"
            )
        )
    result, _ = _alert(warehouse_url, _bot(slack))
    assert result.success
    (post,) = slack.calls_to("/api/chat.postMessage")
    body = post.json
    assert body["text"] == "1 query probably slower (not proven) after deploy api v7 on main"
    blocks = body["blocks"] if isinstance(body["blocks"], list) else json.loads(body["blocks"])
    warning = next(b["text"]["text"] for b in blocks if "probably slower*" in b.get("text", {}).get("text", ""))
    assert "1 statement probably slower" in warning and "the gate warns, it does not block" in warning
    assert "&lt;!channel&gt;" in warning and "<!channel>" not in post.body.decode()
    assert _outbox(analysed) == [(11, "#radar", "sent", 1, "1764000000.000001")]
    metadata = result.asset_materializations_for_node("regression_alerts")[0].metadata
    assert metadata["probably_slower"].value == 1 and metadata["regressions"].value == 0
    again, _ = _alert(warehouse_url, _bot(slack))
    assert again.success and len(slack.calls_to("/api/chat.postMessage")) == 1


def test_rate_limited_then_sent(analysed, warehouse_url, slack):
    slack.fail_next("/api/chat.postMessage", (429, {"Retry-After": "1"}))
    result, _ = _alert(warehouse_url, _bot(slack))
    assert result.success
    assert len(slack.calls_to("/api/chat.postMessage")) == 2  # slack-sdk waited Retry-After, then retried
    assert [r[2] for r in _outbox(analysed)] == ["sent"]


def test_server_errors_leave_the_alert_pending_and_the_next_run_sends_it_once(analysed, warehouse_url, slack):
    slack.fail_next("/api/chat.postMessage", (500, {}), (500, {}), (500, {}))  # the first try and both retries
    first, log = _alert(warehouse_url, _bot(slack))
    assert first.success and "Slack: Slack refused the message: scripted" in log
    assert _outbox(analysed) == [(11, "#radar", "pending", 1, None)]
    waiting, _ = _alert(warehouse_url, _bot(slack))  # inside the backoff: nothing is tried
    assert waiting.success and len(slack.calls_to("/api/chat.postMessage")) == 3
    with analysed.begin() as conn:  # the backoff passes
        conn.execute(sa.text("UPDATE radar.alert SET next_attempt_at = now()"))
    second, _ = _alert(warehouse_url, _bot(slack))
    assert second.success
    assert _outbox(analysed)[0][2] == "sent"
    assert len(slack.calls_to("/api/chat.postMessage")) == 4
    third, _ = _alert(warehouse_url, _bot(slack))
    assert third.success and len(slack.calls_to("/api/chat.postMessage")) == 4


def test_webhook_mode(analysed, warehouse_url, slack):
    result, _ = _alert(warehouse_url, SlackResource(webhook_url=slack.webhook_url))
    assert result.success
    hooks = [c for c in slack.calls if c.path.startswith("/hook/")]
    assert len(hooks) == 1
    body = hooks[0].json
    assert body["text"] == "1 query slower after deploy api v7 on main" and body["blocks"][0]["type"] == "header"
    assert not [c for c in slack.calls if c.path.startswith("/upload/")]  # no images through a webhook
    assert _outbox(analysed) == [(11, "webhook", "sent", 1, None)]


def test_the_chart_is_in_the_ui_not_only_a_path_on_the_server(analysed, warehouse_url, slack):
    """The chart goes into the materialization's metadata as an image (a data URI in Markdown, nothing else in it),
    as the UI reads it from the instance, whether Slack takes images (a bot), not (a webhook) or is not set up."""
    import base64
    import re

    for number, resource in enumerate((SlackResource(webhook_url=slack.webhook_url), _bot(slack))):
        with dg.instance_for_test() as instance:
            instance.add_dynamic_partitions("deploys", ["d-7"])
            with analysed.begin() as conn:  # a fresh delivery each time
                conn.execute(sa.text("DELETE FROM radar.alert"))
            result = dg.materialize(
                [regression_alerts],
                partition_key="d-7",
                resources={
                    "warehouse": WarehouseResource(url=warehouse_url),
                    "analysis": AnalysisResource(),
                    "slack": resource,
                    "channels": ChannelsResource(),
                },
                instance=instance,
                selection=[regression_alerts],
            )
            assert result.success
            (record,) = instance.fetch_materializations(dg.AssetKey("regression_alerts"), limit=1).records
            stored = record.asset_materialization.metadata
        image = stored["chart_images"]
        assert isinstance(image, dg.MarkdownMetadataValue), number
        found = re.fullmatch(r"!\[chart 1\]\(data:image/png;base64,([A-Za-z0-9+/]+=*)\)", image.md_str)
        assert found, image.md_str[:200]
        (path,) = stored["charts"].value
        assert base64.b64decode(found[1]) == Path(path).read_bytes()
        assert len(image.md_str) < 100_000  # one chart of about 43 kB


def test_chart_images_are_bounded_in_size(tmp_path):
    from radar_pipeline.defs.metadata import chart_images

    charts = []
    for n in range(6):
        charts.append(tmp_path / f"c{n}.png")
        charts[-1].write_bytes(b"\x89PNG\r\n\x1a\n" + bytes([n]) * 30_000)  # 40,012 characters in base64
    (tmp_path / "not.png").write_bytes(b"<svg onload=alert(1)>")
    shown = chart_images([tmp_path / "gone.png", tmp_path / "not.png", *charts], limit=130_000).md_str
    assert shown.count("](data:image/png;base64,") == 3 and len(shown) < 130_500
    assert shown.endswith("\n\n3 more chart(s) not shown here: the `charts` entry names their files")
    assert "svg" not in shown and chart_images([tmp_path / "gone.png"]) is None


def test_without_slack_alerts_are_skipped_and_printed(analysed, warehouse_url):
    result, log = _alert(warehouse_url, SlackResource())
    assert result.success
    assert "Slack is not configured; the alert would read:" in log and "&lt;!channel&gt;" in log
    assert _outbox(analysed) == [(11, "-", "skipped", 1, None)]


def test_a_failed_run_is_reported_to_slack(slack):
    @dg.op
    def explode() -> None:
        raise RuntimeError("the warehouse is on fire")

    @dg.job
    def failing_job() -> None:
        explode()

    # A backfill's run over several deploys has no partition tag; the message names the range instead.
    ranged = {RANGE_START: "d-<1>", RANGE_END: "d-9"}
    with dg.instance_for_test() as instance:
        for tags in ({"dagster/partition": "d-7"}, ranged):
            result = failing_job.execute_in_process(instance=instance, raise_on_error=False, tags=tags)
            failure = next(e for e in result.all_events if e.event_type_value == "PIPELINE_FAILURE")
            context = dg.build_run_status_sensor_context(
                sensor_name="slack_run_failure_sensor",
                dagster_event=failure,
                dagster_instance=instance,
                dagster_run=result.dagster_run,
                resources={"slack": SlackResource(token="xoxb-test-token", channel="#ops", base_url=slack.api_url)},
            ).for_run_failure()
            slack_run_failure_sensor(context)
    posts = [call.json for call in slack.calls_to("/api/chat.postMessage")]
    assert [(p["channel"], p["text"]) for p in posts] == [("#ops", "radar: run of failing_job failed")] * 2
    fields = [[f["text"] for f in p["blocks"][1]["fields"]] for p in posts]
    assert fields[0][1] == "*Partition:* d-7" and fields[1][1] == "*Partition:* d-&lt;1&gt; … d-9"


def test_links_and_texts_cannot_break_out_of_their_markup():
    from radar_pipeline.alerts.render import excerpt, link

    assert link("https://ci.example/a?b=1&c=<x>|y") == "https://ci.example/a?b=1&amp;c=&lt;x&gt;%7Cy"
    assert excerpt("SELECT `x`\n  FROM t") == "SELECT 'x' FROM t"
    assert excerpt("SELECT " + "a, " * 200 + "b").endswith("…") and len(excerpt("SELECT " + "a, " * 200)) == 300


def _many(count: int, long: bool = False):  # type: ignore[no-untyped-def]
    from radar_pipeline.alerts.render import AnalysisFacts, Regression

    at = datetime(2026, 11, 29, 12, tzinfo=UTC)
    filler = "&<>" * 2000 if long else ""
    facts = AnalysisFacts(
        analysis_id="d-" + "9" * 120,
        target="main",
        split_at=at,
        service="svc" + filler[:997],
        version="v" + filler[:999],
        url="https://ci.example/" + "&" * 900,
        run_url="http://localhost:3000/runs/abc",
    )
    regressions = [
        Regression(
            queryid=i,
            query=f"SELECT {i} FROM t WHERE note = '{filler}'",
            mean_before_ms=1.0,
            mean_after_ms=2.0 + i,
            change_factor=2.0 + i,
            confidence=0.99,
            change_at=at + timedelta(seconds=5),
            calls_before=1000,
            calls_after=1000,
            cause="plan_changed",
            plan_summary=("Index Scan on t → Seq Scan on t " + filler)[:5000],
        )
        for i in range(count)
    ]
    return facts, regressions


@pytest.mark.parametrize("count", [1, 10, 11, 12, 60, 500])
@pytest.mark.parametrize("long", [False, True])
def test_messages_stay_within_slacks_limits_whatever_the_number_of_regressions(count, long):
    from radar_pipeline.alerts.render import MAX_SHOWN, render

    facts, regressions = _many(count, long)
    text, blocks = render(facts, regressions)
    assert fake_slack.limit_errors({"text": text, "blocks": blocks}) == []
    shown = [b for b in blocks if b["type"] == "divider"]
    assert len(shown) == min(count, MAX_SHOWN)
    if count > MAX_SHOWN:
        summary = blocks[-2]["text"]["text"]
        assert f"*… and {count - MAX_SHOWN} more* (up to ×{count + 1:.2f})" in summary
        assert "<http://localhost:3000/runs/abc|all of them in Dagster>" in summary


def test_the_message_says_what_the_noise_estimate_rests_on():
    from radar_pipeline.alerts.render import render

    facts, (regression,) = _many(1, False)
    said = {
        1440.0: "*Confidence:* 0.9900 (1 − the family-adjusted p-value; noise from 1,440 intervals of its history)",
        0.0: "*Confidence:* 0.9900 (1 − the family-adjusted p-value; noise from this window alone)",
        None: "*Confidence:* 0.9900 (1 − the family-adjusted p-value)",  # a verdict stored before the column
    }
    for intervals, text in said.items():
        _, blocks = render(facts, [dataclasses.replace(regression, history_intervals=intervals)])
        assert text in [f["text"] for b in blocks for f in b.get("fields", [])]


def test_the_stand_in_refuses_what_slack_refuses_and_takes_a_message_of_many_regressions(slack):
    from slack_sdk import WebClient
    from slack_sdk.errors import SlackApiError

    from radar_pipeline.alerts.render import render
    from radar_pipeline.alerts.slack import DeliveryError, SlackSender

    client = WebClient(token="xoxb-t", base_url=slack.api_url)
    with pytest.raises(SlackApiError, match="invalid_blocks"):
        client.chat_postMessage(channel="#r", text="x", blocks=[{"type": "divider"}] * 51)
    with pytest.raises(SlackApiError, match="invalid_blocks"):
        client.chat_postMessage(
            channel="#r", text="x", blocks=[{"type": "section", "text": {"type": "mrkdwn", "text": "a" * 3001}}]
        )
    hook = SlackSender(webhook_url=slack.webhook_url)
    with pytest.raises(DeliveryError, match="400") as err:
        hook.send("x", [{"type": "header", "text": {"type": "plain_text", "text": "h" * 151}}])
    assert not err.value.retryable
    facts, regressions = _many(60, long=True)
    text, blocks = render(facts, regressions)
    delivered = SlackSender(token="xoxb-t", channel="#r", base_url=slack.api_url).send(text, blocks)
    assert delivered.ts is not None


def test_the_fallback_text_mentions_no_one():
    from datetime import UTC, datetime

    from radar_pipeline.alerts.render import AnalysisFacts, render

    facts = AnalysisFacts("d-1", "main", datetime(2026, 11, 30, tzinfo=UTC), "<!channel>", "<@U123>", None, None)
    text, _ = render(facts, [])
    assert "<!channel>" not in text and "<@U123>" not in text and "&lt;!channel&gt;" in text


HIDDEN = "\u202e\u202a\u2066\u2069\u2028\x1b[31m\x07\x9b"  # bidi overrides and isolates, a line separator, escapes


def _texts(value) -> list[str]:  # type: ignore[no-untyped-def]
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [t for item in value.values() for t in _texts(item)]
    if isinstance(value, list):
        return [t for item in value for t in _texts(item)]
    return []


def test_no_control_or_bidi_character_reaches_the_slack_message(analysed, warehouse_url, slack):
    """A right-to-left override in a statement text (or a deploy's fields, stored before they were checked) would
    reorder what the channel reads: `SELECT … 'gnp.exe'` shown as `… 'exe.png'`. The message is cleaned as `radar
    verdicts` cleans its output."""
    with analysed.begin() as conn:
        conn.execute(
            sa.text("UPDATE radar.query SET query = :q WHERE queryid = 11"),
            {"q": f"SELECT * FROM orders /* {HIDDEN} */ WHERE note = '\u202egnp.exe' AND id = $1"},
        )
        conn.execute(
            sa.text("UPDATE radar.deploy_event SET service = :s, version = :v, url = :u WHERE deploy_id = 'd-7'"),
            {"s": f"api{HIDDEN}", "v": f"v7\u202e{HIDDEN}", "u": f"https://ci.example/runs/7\u202e{HIDDEN}"},
        )
    result, _ = _alert(warehouse_url, _bot(slack))
    assert result.success
    body = slack.calls_to("/api/chat.postMessage")[0].json
    blocks = body["blocks"] if isinstance(body["blocks"], list) else json.loads(body["blocks"])
    texts = _texts(blocks) + [body["text"]]
    assert "SELECT * FROM orders /* [31m */ WHERE note = 'gnp.exe' AND id = $1" in " ".join(texts)
    assert body["text"] == "1 query slower after deploy api[31m v7[31m on main"
    for text in texts:
        assert not any(c in text for c in HIDDEN.replace("[31m", "")), text


def test_a_chart_title_carries_no_control_or_bidi_character():
    from radar_pipeline.alerts.chart import chart_title

    title = chart_title("SELECT \x1b[31mred\x07 \u202egnp.\x9b $1", "interval means")
    assert not any(c in title for c in "\x1b\x07\u202e\x9b"), repr(title)
    assert title == "SELECT [31mred gnp. \\$1\ninterval means"


@pytest.mark.parametrize("long", [False, True])
def test_a_regression_with_every_optional_line_stays_within_slacks_fields(long):
    """Every optional line at once (a later look's detection, its group, other named changes, an undo hint and a
    shared queryid's caution), at the longest: no section carries more than Slack's 10 fields, which Slack would
    refuse (invalid_blocks, not retried: the whole message lost)."""
    from radar_pipeline.alerts.render import MAX_FIELDS, render

    facts, (regression,) = _many(1, long)
    filler = "&<>" * 1000 if long else ""
    worst = dataclasses.replace(
        regression,
        factor_low=1.5,
        factor_high=2.5,
        history_intervals=0.0,
        shared_with=["a" + filler, "b"],
        cause="index_dropped",
        cause_detail="index public.orders_idx dropped" + filler,
        named_changes=["index public.orders_idx dropped", "setting work_mem changed" + filler],
        undo_hint="CREATE INDEX orders_idx ON orders (id)" + filler,
        group="one of 15 statements of this shape" + filler,
        look=2,
        found_after=timedelta(hours=2),
    )
    _, blocks = render(facts, [worst] * 10)
    assert fake_slack.limit_errors({"text": "x", "blocks": blocks}) == []
    sections = [b for b in blocks if b["type"] == "section" and "fields" in b]
    assert max(len(b["fields"]) for b in sections) <= MAX_FIELDS
    texts = [f["text"] for f in sections[1]["fields"]]
    assert any(t.startswith("*Change began:* +5 s from the deploy; found 2 h after deploy d-") for t in texts), texts
    assert "(later look 2)" in " ".join(texts)
    for label in ("*Also changed:*", "*To undo:*", "*Group:*", "*Caution:*"):
        assert any(t.startswith(label) for t in texts), label


def test_spans_in_words_one_way_for_every_message():
    from radar_pipeline.alerts.render import AnalysisFacts, render, span_words

    assert [span_words(timedelta(seconds=s)) for s in (20, 2400, 5400, 7200, 86400)] == [
        "20 s",
        "40 min",
        "1.5 h",
        "2 h",
        "24 h",
    ]
    # spelled, for "the … before it": the unit alone for one of it
    assert [span_words(timedelta(seconds=s), spelled=True) for s in (20, 2400, 3600, 5400, 7200)] == [
        "20 seconds",
        "40 minutes",
        "hour",
        "1.5 hours",
        "2 hours",
    ]
    start = datetime(2026, 11, 29, 10, tzinfo=UTC)
    facts = AnalysisFacts(
        "periodic:1", "main", start, None, None, None, None, period=(start, start + timedelta(hours=2))
    )
    _, blocks = render(facts, [])
    assert "*Compared with:* the 2 hours before it" in [f["text"] for f in blocks[1]["fields"]]
