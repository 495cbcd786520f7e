"""Intended means a new baseline (issue 41 part 2), on a real warehouse: an intended label begins a new segment of the
statement's history bands (the points computed before it judged again, in the label's transaction), closes its
periodic episode (no more `already_reported`, and the same step not reported again), and its alert is resolved and
its Slack message updated by the retry run the reconciler asks for. And the measurement of the issue's target: after
an intended ×2 step at a deploy, what the next 10 deploys' history points and 10 periodic checks raise for it.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import dagster as dg
import numpy as np
import pandas as pd
import pytest
import sqlalchemy as sa
from click.testing import CliRunner

from radar_pipeline.alerts.slack import DeliveryError, SlackSender
from radar_pipeline.cli import main
from radar_pipeline.config.settings import periodic_minute, periodic_start
from radar_pipeline.defs.periodic.periodic_check import periodic_definitions
from radar_pipeline.defs.resources import AnalysisResource, ChannelsResource, SlackResource, TargetsResource
from radar_pipeline.defs.retry_jobs import periodic_alert_retry_job
from radar_pipeline.engine.history import STATE, HistorySettings, extend_history
from radar_pipeline.steps.deploy_analysis import AnalysisRun, analyse_deploy
from radar_pipeline.steps.history import update_history
from radar_pipeline.steps.periodic_check import analyse_period
from radar_pipeline.warehouse import deploys

from . import fake_pagerduty, fake_slack
from .helpers import store_counters
from .test_alerts import analysed  # noqa: F401 - the fixture is used by name
from .test_channels import KEY
from .test_periodic import _key, timeline  # noqa: F401 - the fixture is used by name
from .test_reconciler import _defs, _execute, _resources, _tick

TEXTS = {61: "SELECT * FROM audit_log WHERE account = $1", 62: "SELECT * FROM carts WHERE id = $1"}
RESOURCE = AnalysisResource()  # the defaults: deploys analysed W = 30 min either side, periodic checks P = 1 h
MIN_CALLS = RESOURCE.settings().min_calls


def _label(url: str, *args: str) -> str:
    result = CliRunner().invoke(main, ["label", *args, "--by", "ana", "--warehouse", url], env={"COLUMNS": None})
    assert result.exit_code == 0, result.output
    return result.output


def _counters(base: datetime, hours: int, mean_at, sigma: dict[int, float], seed: int) -> pd.DataFrame:  # type: ignore[no-untyped-def]
    """Cumulative counters of TEXTS' queries, a scrape a minute for `hours` from `base`, 20 calls a minute, each
    minute's mean mean_at(queryid, minutes after base) with log-normal noise of sigma[queryid]."""
    rng = np.random.default_rng(seed)
    rows = []
    for queryid in TEXTS:
        calls, total = 0, 0.0
        for minute in range(hours * 60 + 1):
            mean = mean_at(queryid, minute) * rng.lognormal(0, sigma[queryid])
            calls, total = calls + 20, total + 20 * mean
            rows.append((queryid, base + timedelta(minutes=minute), calls, total))
    return pd.DataFrame(rows, columns=["queryid", "captured_at", "calls", "total_exec_time"])


def _points(warehouse, queryid: int) -> pd.DataFrame:  # type: ignore[no-untyped-def]
    with warehouse.connect() as conn:
        return pd.read_sql(
            sa.text("SELECT * FROM radar.query_history WHERE queryid = :q ORDER BY deployed_at"),
            conn,
            params={"q": queryid},
        ).set_index("deploy_id")


def _as_if_computed_in_order(points: pd.DataFrame) -> pd.DataFrame:
    """The stored points judged afresh from their means and where their segments begin."""
    return extend_history(
        pd.DataFrame(columns=["series", "mean_ms", *STATE]),
        points.assign(series=0)[["series", "mean_ms", "begins_segment"]],
    )


def test_an_intended_label_begins_a_segment_and_judges_the_points_after_it_again(warehouse, warehouse_url):
    """61 rises ×1.15 at deploy 4 of 8 (below θ: not detected there), 62 stays flat. Every point is computed before
    anyone labels; the label judges 61's points from deploy 4 on again in its own transaction, a later label that
    replaces it undoes that, and a label that comes before the deploy's points is seen when they are added."""
    base = (datetime.now(UTC) - timedelta(hours=10)).replace(minute=0, second=0, microsecond=0)
    at = [base + timedelta(minutes=30 + 60 * d) for d in range(8)]
    store_counters(
        warehouse,
        "main",
        _counters(base, 9, lambda q, m: 2.3 if q == 61 and m > 30 + 4 * 60 else 2.0, {61: 0.03, 62: 0.03}, 4),
        TEXTS,
    )
    for d, when in enumerate(at):
        deploys.record(warehouse, deploys.DeployEvent(f"i-{d}", "main", when))
        assert analyse_deploy(AnalysisRun(warehouse, RESOURCE.settings()), f"i-{d}").verdicts is not None
    with warehouse.begin() as conn:
        for d in range(7):  # i-7's points come after the labels
            update_history(conn, f"i-{d}", HistorySettings(), MIN_CALLS)
    before, flat = _points(warehouse, 61), _points(warehouse, 62)
    assert not before.loc["i-4", "begins_segment"] and (before["segment"] == 0).all()
    with warehouse.connect() as conn:
        verdict = conn.execute(sa.text("SELECT verdict FROM radar.verdict WHERE deploy_id = 'i-4' AND queryid = 61"))
        assert verdict.scalar_one() != "detected"

    said = _label(warehouse_url, "i-4", "61", "--as", "intended", "--note", "the audit trigger, on purpose")
    assert "a new baseline for 1 verdicts: 3 history points judged again, 0 periodic episodes closed" in said
    after = _points(warehouse, 61)
    assert after["begins_segment"].tolist() == [True, False, False, False, True, False, False]
    assert (after.loc[["i-4", "i-5", "i-6"], "segment"] == 1).all()
    assert after.loc["i-5", "centre_ms"] == pytest.approx(after.loc["i-4", "mean_ms"])  # the new level at once
    redo = _as_if_computed_in_order(after)
    for column in ("centre_ms", "spread_ms", "z_score", "drift_rise", *STATE):
        np.testing.assert_allclose(after[column].to_numpy(float), redo[column].to_numpy(float), rtol=1e-9)
    pd.testing.assert_frame_equal(_points(warehouse, 62), flat)  # another query's points are left as they were
    with warehouse.connect() as conn:
        effect = conn.execute(sa.text("SELECT verdicts, history_points FROM radar.label_effect")).one()
    assert tuple(effect) == (1, 3)  # i-4, i-5 and i-6 judged again

    with warehouse.begin() as conn:  # the deploy after the label: its point continues the new segment
        update_history(conn, "i-7", HistorySettings(), MIN_CALLS)
    assert _points(warehouse, 61).loc["i-7", "segment"] == 1

    _label(warehouse_url, "i-4", "61", "--as", "false_alarm", "--note", "no: noise after all")
    undone = _points(warehouse, 61)
    assert not undone["begins_segment"].iloc[1:].any() and (undone["segment"] == 0).all()


def test_nothing_commits_an_intended_label_without_applying_it(analysed, warehouse):  # noqa: F811
    with warehouse.connect() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO radar.label (kind, deploy_id, target, dbid, userid, queryid, toplevel, label, "
                "labelled_by, source) VALUES ('statement', 'd-7', 'main', 5, 10, 11, true, 'intended', 'bo', 'cli')"
            )
        )
        with pytest.raises(sa.exc.IntegrityError, match="stored without its effects"):
            conn.commit()


PERIODIC_BASE_HOURS = 7


def test_an_intended_episode_is_closed_and_its_step_not_reported_again(warehouse, warehouse_url):
    """61 slows ×3 at B+1h40 with no deploy behind it, labelled intended after the hour that reported it; at B+4h20
    it slows ×2 more. Hour 2 still sees the labelled step: intended, not reported again; hour 4 reports the new step
    (without the label the episode never recovers to the old level, and hour 4 would answer already_reported). A
    re-run of the hour that reported it keeps the episode, and answers intended."""
    last_closed = (datetime.now(UTC) - timedelta(minutes=2)).replace(minute=0, second=0, microsecond=0)
    base = last_closed - timedelta(hours=PERIODIC_BASE_HOURS)

    def mean_at(queryid: int, minute: float) -> float:
        if queryid != 61:
            return 2.0
        return 1.0 * (3.0 if minute > 100 else 1.0) * (2.0 if minute > 260 else 1.0)

    store_counters(warehouse, "main", _counters(base, PERIODIC_BASE_HOURS, mean_at, {61: 0.1, 62: 0.1}, 9), TEXTS)
    run = AnalysisRun(warehouse, RESOURCE.periodic_settings())
    tolerance = RESOURCE.settings().tolerance

    def check(hour: int) -> str | None:
        key = (base + timedelta(hours=hour)).strftime("%Y-%m-%d-%H:%M")
        (done,), failed = analyse_period(run, key, base + timedelta(hours=hour + 1), tolerance)
        assert not failed
        found = done.verdicts[(done.verdicts["queryid"] == 61) & (done.verdicts["verdict"] == "detected")]
        return None if found.empty else str(found["report"].iloc[0])

    assert check(1) == "reported"
    _label(warehouse_url, f"periodic:{(base + timedelta(hours=1)).strftime('%Y-%m-%d-%H:%M')}", "61", "--as",
           "intended", "--note", "the nightly report, heavier on purpose")  # fmt: skip
    with warehouse.connect() as conn:
        episode = conn.execute(
            sa.text("SELECT recovered_at IS NOT NULL, recovered_by, intended_label FROM radar.regression_episode")
        ).one()
    assert episode[0] and episode[1] is None and episode[2] is not None
    assert check(2) == "intended"  # the labelled step, still in the window
    assert check(3) is None
    assert check(4) == "reported"  # a new step: reported, not already_reported
    assert check(1) == "intended"
    with warehouse.connect() as conn:
        kept = conn.execute(sa.text("SELECT count(*) FROM radar.regression_episode WHERE intended_label IS NOT NULL"))
        assert kept.scalar_one() == 1


def test_an_intended_alert_is_resolved_and_its_message_updated(analysed, warehouse, warehouse_url, slack):  # noqa: F811
    """d-7's regression alerted on Slack and PagerDuty; the label comes after. The label's transaction enqueues the
    resolve and the message's update; the reconciler's next tick asks for the alert retry run, which sends both."""
    pd_state, pd_http = fake_pagerduty.start()
    try:
        bot = SlackResource(token="xoxb-test-token", channel="#radar", base_url=slack.api_url, label_buttons=True)
        channels = ChannelsResource(pagerduty_routing_key=KEY, pagerduty_url=pd_state.url)
        resources = {**_resources(warehouse_url, bot), "channels": channels}
        defs = _defs(resources)
        with dg.instance_for_test() as instance:
            instance.add_dynamic_partitions("deploys", ["d-7"])
            first = defs.resolve_job_def("alert_retry_job").execute_in_process(instance=instance, partition_key="d-7")
            assert first.success
            assert [i.status for i in pd_state.incidents] == ["triggered"]
            (posted,) = slack.messages()
            assert "Labelled" not in json.dumps(posted)
            idle = _tick(instance, resources)
            assert not idle.run_requests  # nothing waits

            _label(warehouse_url, "d-7", "11", "--as", "intended", "--note", "the audit trigger, on purpose")
            with warehouse.connect() as conn:
                waiting = conn.execute(
                    sa.text("SELECT kind, status FROM radar.channel_event WHERE kind <> 'deploy_mark' ORDER BY kind")
                ).fetchall()
            assert [tuple(r) for r in waiting] == [("message_update", "pending"), ("resolve", "pending")]

            tick = _tick(instance, resources)
            (request,) = tick.run_requests
            assert request.job_name == "alert_retry_job" and request.partition_key == "d-7"
            assert _execute(instance, defs, request).success
            assert [i.status for i in pd_state.incidents] == ["resolved"]
            (update,) = slack.calls_to("/api/chat.update")
            assert update.json["channel"] == "C0RADAR" and update.json["ts"] == posted["ts"]
            blocks = update.json["blocks"]
            shown = json.dumps(json.loads(blocks) if isinstance(blocks, str) else blocks)
            assert "Labelled intended by ana: the audit trigger, on purpose" in shown
            assert "radar_label:intended" in shown  # the buttons stay
            assert slack.messages()[0]["edited"]
            assert not _tick(instance, resources).run_requests  # delivered: nothing waits any more
        with warehouse.connect() as conn:
            done = conn.execute(sa.text("SELECT kind, status FROM radar.channel_event WHERE kind <> 'deploy_mark'"))
            assert sorted(tuple(r) for r in done) == [("message_update", "sent"), ("resolve", "sent")]
    finally:
        pd_http.shutdown()


def test_a_group_label_stands_for_its_members_and_the_latest_covering_label_stands(analysed, warehouse, warehouse_url):  # noqa: F811
    """d-7's statements 11 and 12 decided together as one group: the group's intended label stands for both; a later
    label of 12 alone replaces it for 12."""
    with warehouse.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO radar.group_verdict (deploy_id, target, group_id, kind, label, verdict, members, "
                "members_above, statements, member_dbid, member_userid, member_queryid, member_toplevel) VALUES "
                "('d-7', 'main', 'shape:ab', 'shape', 'two statements', 'detected', 2, 1, 2, '{5,5}', '{10,10}', "
                "'{11,12}', '{true,true}')"
            )
        )
    _label(warehouse_url, "d-7", "--group", "shape:ab", "--as", "intended", "--note", "both, on purpose")

    def intended() -> list[int]:
        with warehouse.connect() as conn:
            rows = conn.execute(sa.text("SELECT queryid FROM radar.intended_verdict ORDER BY queryid"))
            return [int(r[0]) for r in rows]

    assert intended() == [11, 12]
    with warehouse.connect() as conn:
        assert conn.execute(sa.text("SELECT verdicts FROM radar.label_effect")).scalar_one() == 2
    _label(warehouse_url, "d-7", "12", "--as", "false_alarm", "--note", "12 is noise")
    assert intended() == [11]


def test_a_message_is_updated_by_the_channel_id_and_ts_slack_answered(slack):
    """chat.update as Slack takes it: the channel's id (a name is channel_not_found) and the ts of a message there
    (another is message_not_found); both refusals are final."""
    sender = SlackSender(token="xoxb-test-token", channel="#radar", base_url=slack.api_url)
    posted = sender.send("1 query slower", [{"type": "section", "text": {"type": "mrkdwn", "text": "before"}}])
    assert posted.message_channel == fake_slack.CHANNEL_ID and posted.ts
    blocks = [{"type": "section", "text": {"type": "mrkdwn", "text": "after"}}]
    for channel, ts, error in (
        ("#radar", posted.ts, "channel_not_found"),
        (posted.message_channel, "1.2", "message_not_found"),
    ):
        with pytest.raises(DeliveryError, match=error) as refused:
            sender.update(channel, ts, "1 query slower", blocks)
        assert not refused.value.retryable
    sender.update(posted.message_channel, posted.ts, "1 query slower", blocks)
    assert slack.messages()[0]["blocks"] == blocks


def test_an_intended_episode_is_resolved_by_its_hours_retry_run_even_past_the_alert_age(
    timeline,  # noqa: F811
    warehouse,
    warehouse_url,
    slack,
):
    """test_periodic's statement 31, reported by hour 1 on Slack and PagerDuty, is labelled intended. The
    reconciler asks for hour 1's periodic_alert_retry_job, whose run resolves the incident and updates the message
    although the hour is older than the alert age limit by then (closing is never noise)."""
    pd_state, pd_http = fake_pagerduty.start()
    try:
        bot = SlackResource(token="xoxb-test-token", channel="#radar", base_url=slack.api_url)
        channels = ChannelsResource(pagerduty_routing_key=KEY, pagerduty_url=pd_state.url)
        periodic = periodic_definitions(periodic_start(), periodic_minute())
        assets = [periodic.get_assets_def("periodic_verdicts"), periodic.get_assets_def("periodic_alerts")]
        resources = {
            **_resources(warehouse_url, bot),
            "analysis": AnalysisResource(),
            "targets": TargetsResource(spec=""),
            "channels": channels,
        }
        hour = _key(timeline, 1)
        with dg.instance_for_test() as instance:
            assert dg.materialize(assets, partition_key=hour, resources=resources, instance=instance).success
            assert [i.status for i in pd_state.incidents] == ["triggered"]
            (posted,) = slack.messages()
            _label(warehouse_url, f"periodic:{hour}", "31", "--as", "intended", "--note", "the report, on purpose")

            old = {**resources, "slack": SlackResource(**{**bot.model_dump(), "alert_max_age_hours": 1.0})}
            asked = [r for r in _tick(instance, old).run_requests if r.job_name == periodic_alert_retry_job.name]
            (request,) = asked  # and an analysis of test_periodic's deploy, which is not this test's
            assert request.partition_key == hour
            defs = dg.Definitions(assets=assets, jobs=[periodic_alert_retry_job], resources=old)
            assert _execute(instance, defs, request).success
            assert [i.status for i in pd_state.incidents] == ["resolved"]
            (update,) = slack.calls_to("/api/chat.update")
            assert update.json["ts"] == posted["ts"]
            assert "Labelled intended by ana: the report, on purpose" in json.dumps(update.json["blocks"])
            later = _tick(instance, old).run_requests
            assert not [r for r in later if r.job_name == periodic_alert_retry_job.name]
    finally:
        pd_http.shutdown()


def test_a_fleet_label_stands_for_the_statement_on_each_deploy_of_the_release(analysed, warehouse, warehouse_url):  # noqa: F811
    """d-7 as the one member deploy of release r-1, whose fleet verdict on statement 11 is labelled intended: the
    label stands for 11's verdict on d-7 (the release's latest decision's deploys), and for nothing else."""
    with warehouse.begin() as conn:
        conn.execute(sa.text("UPDATE radar.deploy_event SET release_id = 'r-1' WHERE deploy_id = 'd-7'"))
        conn.execute(
            sa.text(
                "INSERT INTO radar.release_look (release_id, look, member_deploys, member_analysed_at) "
                "VALUES ('r-1', 0, '{d-7}', ARRAY[now()])"
            )
        )
        conn.execute(
            sa.text(
                "INSERT INTO radar.release_verdict (release_id, fingerprint, toplevel, status, look, verdict, factor, "
                "factor_low, factor_high, p_value, p_family, budget_share, heterogeneity_p, i_squared, tau2, targets, "
                "targets_agreeing, consistent, only_on, report, member_targets, members, analysed, example_deploy_id, "
                "example_target, example_queryid, example_dbid, example_userid) VALUES ('r-1', 11, true, 'final', 0, "
                "'detected', 4, 3.5, 4.5, 1e-9, 1e-8, 0.1, 0.9, 0, 0, 1, 1, true, '{}', '×4.00 on 1 of 1 targets', "
                "'{main}', 1, 1, 'd-7', 'main', 11, 5, 10)"
            )
        )
    said = _label(warehouse_url, "d-7", "11", "--fleet", "--as", "intended", "--note", "the whole fleet, on purpose")
    assert "a new baseline for 1 verdicts" in said
    with warehouse.connect() as conn:
        rows = conn.execute(sa.text("SELECT deploy_id, queryid FROM radar.intended_verdict")).fetchall()
    assert [tuple(r) for r in rows] == [("d-7", 11)]
