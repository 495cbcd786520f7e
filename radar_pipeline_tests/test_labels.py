"""People close the loop (issue 41, sql/0037): labels from `radar label`, the receiver and Slack's buttons, stored
append-only and shown beside the verdict; mutes that keep a detection stored and shown but not alerted, and not
failing the gate; and the realised false-alert rate.

The warehouse is test_gate's (st-fail detects queryid 1 on target st-fail, st-pass passes), a copy for this module.
A mute covers a detection when it was in force between the deploy and the end of the window that found it, so the
mute tests copy st-fail's analysis into a deploy of their own and give their mute a start before it (a mute made
now covers the deploys to come: `radar mute` starts it now)."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from urllib.parse import urlencode

import httpx
import pytest
import sqlalchemy as sa

from radar_pipeline.warehouse import deploys
from radar_pipeline.warehouse.database import make_engine

from . import fake_slack
from .test_alerts import analysed  # noqa: F401 - a deploy analysed with one detection, to alert
from .test_gate import _copy_analysis, _invoke, _radar, gate_url  # noqa: F401 - the module's warehouse is test_gate's
from .test_receiver import TOKENS, Served, _serve, _stop

LABEL_TOKEN = "label-token-0123456789ab"
SLACK_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"  # the form of a Slack app's signing secret


def _count(url: str, table: str = "radar.label") -> int:
    engine = make_engine(url)
    with engine.connect() as conn:
        counted = conn.execute(sa.text(f"SELECT count(*) FROM {table}")).scalar_one()
    engine.dispose()
    return int(counted)


def _sql(url: str, sql: str, **params: object) -> list[sa.Row]:
    engine = make_engine(url)
    with engine.begin() as conn:
        result = conn.execute(sa.text(sql), params)
        rows = result.fetchall() if result.returns_rows else []
    engine.dispose()
    return rows


def _copy_of_st_fail(url: str, deploy_id: str, release_id: str | None = None) -> datetime:
    """A deploy of its own, to a target of its own (named as the deploy: mutes of one test cover no other's),
    holding st-fail's analysis and verdicts; returns its time."""
    engine = make_engine(url)
    with engine.begin() as conn:
        at = conn.execute(sa.text("SELECT deployed_at FROM radar.deploy_event WHERE deploy_id = 'st-fail'")).scalar()
    event = deploys.DeployEvent(deploy_id, deploy_id, at, service="shop", version="v3", release_id=release_id)
    deploys.record(engine, event, [deploy_id])
    with engine.begin() as conn:
        _copy_analysis(conn, "st-fail", deploy_id, {"target": f"'{deploy_id}'"})
    engine.dispose()
    return at


def _mute_since(url: str, at: datetime, reason: str, **subject: object) -> int:
    """A mute in force since before `at` for the next hour (as `radar mute` stores one, started earlier)."""
    scope = "group" if "group_id" in subject else "statement" if "queryid" in subject else "target"
    columns = ", ".join(subject)
    values = ", ".join(f":{k}" for k in subject)
    rows = _sql(
        url,
        f"WITH m AS (INSERT INTO radar.mute (scope, {columns}, starts_at, until, reason, muted_by) "
        f"VALUES (:scope, {values}, :start, now() + interval '1 hour', :reason, 'ops') RETURNING mute_id) "
        "SELECT mute_id FROM m",
        scope=scope,
        start=at - timedelta(minutes=5),
        reason=reason,
        **subject,
    )
    return int(rows[0][0])


# --- radar label ---------------------------------------------------------------------------------------------------


def test_a_label_is_stored_once_shown_beside_the_verdict_and_the_latest_stands(gate_url):  # noqa: F811
    first = _invoke(["label", "st-fail", "1", "--as", "intended", "--note", "the audit trigger", "--by", "ana",
                     "--warehouse", gate_url])  # fmt: skip
    assert first.exit_code == 0, first.output
    assert first.stdout.startswith("labelled queryid 1 of st-fail on st-fail: intended by ana: the audit trigger")
    later = _invoke(["label", "st-fail", "1", "--as", "false_alarm", "--note", "noise\x1b[31m <b>", "--by", "bo",
                     "--warehouse", gate_url])  # fmt: skip
    assert later.exit_code == 0, later.output
    rows = _sql(gate_url, "SELECT label, labelled_by, source FROM radar.label WHERE deploy_id = 'st-fail' ORDER BY 1")
    assert [tuple(r) for r in rows] == [("false_alarm", "bo", "cli"), ("intended", "ana", "cli")]
    latest = _sql(gate_url, "SELECT label FROM radar.verdict_label WHERE deploy_id = 'st-fail' AND queryid = 1")
    assert latest[0][0] == "false_alarm"
    # the verdict itself is untouched
    assert _sql(gate_url, "SELECT verdict FROM radar.verdict WHERE deploy_id = 'st-fail' AND queryid = 1")[0][0] == (
        "detected"
    )

    table = _radar(["verdicts", "st-fail", "--warehouse", gate_url])
    assert table.returncode == 0, table.stderr
    assert "│ detected      │ false_alarm │" in table.stdout, table.stdout
    assert "queryid 1 labelled false_alarm by bo: noise[31m <b>" in table.stdout  # the escape character is gone
    assert "\x1b" not in table.stdout
    as_json = json.loads(_invoke(["verdicts", "st-fail", "--format", "json", "--warehouse", gate_url]).stdout)
    one = next(v for v in as_json if v["queryid"] == 1)
    assert (one["label"], one["labelled_by"], one["label_note"]) == ("false_alarm", "bo", "noise[31m <b>")
    assert next(v for v in as_json if v["queryid"] == 2)["label"] is None
    as_csv = _invoke(["verdicts", "st-fail", "--format", "csv", "--warehouse", gate_url]).stdout
    assert "label" in as_csv.splitlines()[0].split(",") and "false_alarm" in as_csv

    gate = _radar(["gate", "st-fail", "--warehouse", gate_url], env={"COLUMNS": "200"})
    assert gate.returncode == 1
    assert "    labelled false_alarm by bo: noise[31m <b>" in gate.stdout.splitlines()
    answer = json.loads(_invoke(["gate", "st-fail", "--format", "json", "--warehouse", gate_url]).stdout)
    assert answer["detections"][0]["label"] == "false_alarm" and answer["muted"] == []


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["nope-9", "1", "--as", "intended"], "DEPLOY_ID: deploy 'nope-9' is not recorded"),
        (["st-fail", "77", "--as", "intended"], "QUERYID: queryid 77 has no verdict in deploy 'st-fail'"),
        (["st-fail", "1", "--as", "wrong"], "--as: 'wrong' is not a label: one of intended, false_alarm, fixed"),
        (["st-fail", "1", "--as", "fixed"], "--fixed-by: a `fixed` label names the deploy that fixed it"),
        (["st-fail", "1", "--as", "fixed", "--fixed-by", "nope-3"], "--fixed-by: deploy 'nope-3' is not recorded"),
        (["st-fail", "1", "--as", "intended", "--fixed-by", "st-pass"], "--fixed-by: only a `fixed` label"),
        (["st-fail", "--group", "shape:none", "--as", "intended"], "--group: group 'shape:none' of deploy"),
        (["st-fail", "1", "--as", "intended", "--by", "two\nlines"], "--by: give 1 to 200 printable characters"),
        (["st-fail", "--as", "intended"], "QUERYID: name one thing to label"),
    ],
)
def test_bad_label_input_names_the_field_and_stores_nothing(gate_url, args, error):  # noqa: F811
    before = _count(gate_url)
    result = _invoke(["label", *args, "--note", "n", "--warehouse", gate_url])
    assert result.exit_code == 1, result.output
    assert result.stderr.startswith(f"Error: {error}"), result.stderr
    assert result.stderr.rstrip().endswith("nothing stored")
    assert _count(gate_url) == before


def test_fixed_names_the_deploy_that_fixed_it(gate_url):  # noqa: F811
    done = _invoke(["label", "st-fail", "1", "--as", "fixed", "--fixed-by", "st-pass", "--note", "index back",
                    "--by", "cy", "--warehouse", gate_url])  # fmt: skip
    assert done.exit_code == 0, done.output
    assert "fixed in st-pass by cy: index back" in done.stdout


def test_labels_and_mutes_are_append_only(gate_url):  # noqa: F811
    _mute_since(gate_url, datetime.now(UTC), "to end", target="st-pass")
    _sql(gate_url, "INSERT INTO radar.mute_end (mute_id, ended_by) SELECT max(mute_id), 'ops' FROM radar.mute")
    engine = make_engine(gate_url)
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO radar.label (kind, deploy_id, target, dbid, userid, queryid, toplevel, label, "
                "labelled_by, source) VALUES ('statement', 'st-pass', 'st-pass', 5, 10, 1, true, 'acknowledged', "
                "'x', 'cli')"
            )
        )
    for sql in ("UPDATE radar.label SET label = 'intended'", "DELETE FROM radar.label",
                "UPDATE radar.mute SET reason = 'x'", "DELETE FROM radar.mute_end"):  # fmt: skip
        with pytest.raises(sa.exc.DBAPIError, match="is append-only"), engine.begin() as conn:
            conn.execute(sa.text(sql))
    with pytest.raises(sa.exc.IntegrityError), engine.begin() as conn:  # `fixed` without the deploy that fixed it
        conn.execute(
            sa.text(
                "INSERT INTO radar.label (kind, deploy_id, target, dbid, userid, queryid, toplevel, label, "
                "labelled_by, source) VALUES ('statement', 'st-pass', 'st-pass', 5, 10, 1, true, 'fixed', 'x', 'cli')"
            )
        )
    engine.dispose()


# --- radar mute ----------------------------------------------------------------------------------------------------


def test_a_muted_detection_is_stored_and_shown_not_alerted_and_the_gate_names_what_it_ignored(gate_url):  # noqa: F811
    from radar_pipeline.warehouse import alerts
    from radar_pipeline.warehouse.analysis import deploy_states

    at = _copy_of_st_fail(gate_url, "mute-1")
    engine = make_engine(gate_url)
    with engine.connect() as conn:
        assert len(alerts.detections(conn, "mute-1")) == 1
        assert deploy_states(conn, ["mute-1"]).iloc[0]["state"] == "fail"
    reason = "maintenance \x1b]8;;x\x07 <!channel>"
    mute_id = _mute_since(gate_url, at, reason, target="mute-1", queryid=1)
    with engine.connect() as conn:
        assert alerts.detections(conn, "mute-1").empty  # not alerted, on any channel
        state = deploy_states(conn, ["mute-1"]).iloc[0]
        assert state["state"] != "fail" and state["detected"] == 1 and state["muted_detected"] == 1
        assert deploy_states(conn, ["st-fail"]).iloc[0]["state"] == "fail"  # another target: not covered
    engine.dispose()
    assert _sql(gate_url, "SELECT verdict FROM radar.verdict WHERE deploy_id = 'mute-1' AND queryid = 1")[0][0] == (
        "detected"
    )

    gate = _radar(["gate", "mute-1", "--warehouse", gate_url])
    assert gate.returncode in (0, 3), gate.stdout
    ignored = [line for line in gate.stdout.splitlines() if line.startswith("ignored (muted): ")]
    assert len(ignored) == 1, gate.stdout
    assert ignored[0].startswith(f"ignored (muted): queryid 1 on mute-1, mute {mute_id} until ")
    assert "maintenance ]8;;x <!channel>" in ignored[0] and "\x1b" not in gate.stdout and "\x07" not in gate.stdout
    assert "detections (" not in gate.stdout
    answer = json.loads(_invoke(["gate", "mute-1", "--format", "json", "--warehouse", gate_url]).stdout)
    assert answer["state"] != "fail" and answer["muted"][0]["mute_id"] == mute_id
    assert answer["detections"][0]["mute_reason"] == reason

    table = _radar(["verdicts", "mute-1", "--warehouse", gate_url], env={"COLUMNS": "250"})
    assert "queryid 1 muted until " in table.stdout and f"(mute {mute_id}): maintenance" in table.stdout
    assert "│ detected      │ muted │" in table.stdout, table.stdout


def test_a_muted_target_covers_its_groups_and_a_mute_names_only_what_it_matches(gate_url):  # noqa: F811
    at = _copy_of_st_fail(gate_url, "mute-2")
    _mute_since(gate_url, at, "another target", target="st-pass")
    _mute_since(gate_url, at, "another statement", target="mute-2", queryid=2)
    _mute_since(gate_url, at, "a group elsewhere", group_id="shape:elsewhere", target="st-pass")
    _mute_since(gate_url, at - timedelta(hours=2), "over before the deploy", target="mute-2")
    _sql(gate_url, "INSERT INTO radar.mute_end (mute_id, ended_at, ended_by) SELECT max(mute_id), :at, 'ops' "
         "FROM radar.mute", at=at - timedelta(hours=1))  # fmt: skip
    assert _sql(gate_url, "SELECT count(*) FROM radar.muted_verdict WHERE deploy_id = 'mute-2'")[0][0] == 0
    _mute_since(gate_url, at, "the whole target", target="mute-2")
    found = _sql(gate_url, "SELECT queryid, reason FROM radar.muted_verdict WHERE deploy_id = 'mute-2'")
    assert [tuple(r) for r in found] == [(1, "the whole target")]


def test_radar_mute_stores_lists_and_ends_a_mute(gate_url):  # noqa: F811
    made = _invoke(["mute", "--target", "st-fail", "--statement", "1", "--until", "2h", "--reason", "noisy <b>",
                    "--by", "ops", "--warehouse", gate_url])  # fmt: skip
    assert made.exit_code == 0, made.output
    assert made.stdout.startswith("mute ") and "queryid 1 on st-fail until " in made.stdout
    mute_id = int(made.stdout.split()[1].rstrip(":"))
    listed = _invoke(["mute", "--list", "--warehouse", gate_url], env={"COLUMNS": "200"})
    assert listed.exit_code == 0 and "noisy <b>" in listed.stdout and "queryid 1 on st-fail" in listed.stdout
    ended = _invoke(["mute", "--end", str(mute_id), "--by", "ops", "--warehouse", gate_url])
    assert ended.exit_code == 0 and ended.stdout.startswith(f"mute {mute_id} ended at "), ended.output
    again = _invoke(["mute", "--end", str(mute_id), "--warehouse", gate_url])
    assert again.exit_code == 1 and f"--end: mute {mute_id} is over already" in again.stderr
    assert f"\n{mute_id} " not in _invoke(["mute", "--list", "--warehouse", gate_url]).stdout
    assert (
        "(ended by ops)" in _invoke(["mute", "--list", "--all", "--warehouse", gate_url], env={"COLUMNS": "250"}).stdout
    )


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["--target", "st-fail", "--until", "2020-01-01T00:00:00Z", "--reason", "r"], "--until: 2020-01-01"),
        (["--target", "nowhere", "--until", "1h", "--reason", "r"], "--target: 'nowhere' is not a target radar knows"),
        (["--target", "st-fail", "--until", "1h", "--reason", " "], "--reason: say why"),
        (["--target", "st-fail", "--statement", "99", "--until", "1h", "--reason", "r"], "--statement: queryid 99"),
        (["--group", "shape:none", "--until", "1h", "--reason", "r"], "--group: group 'shape:none' was never decided"),
        (["--end", "424242"], "--end: there is no mute 424242"),
    ],
)
def test_bad_mute_input_names_the_field_and_stores_nothing(gate_url, args, error):  # noqa: F811
    before = _count(gate_url, "radar.mute"), _count(gate_url, "radar.mute_end")
    result = _invoke(["mute", *args, "--warehouse", gate_url])
    assert result.exit_code == 1, result.output
    assert result.stderr.startswith(f"Error: {error}"), result.stderr
    assert (_count(gate_url, "radar.mute"), _count(gate_url, "radar.mute_end")) == before


# --- the realised rate ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("k", [0, 1, 2, 7, 40, 400])
def test_the_poisson_interval_is_garwood_s_exact_one(gate_url, k):  # noqa: F811
    from scipy.stats import chi2

    low, high = _sql(
        gate_url,
        "SELECT CASE WHEN :k = 0 THEN 0 ELSE radar.poisson_mean_at(:k - 1, 0.975) END, "
        "radar.poisson_mean_at(:k, 0.025)",
        k=k,
    )[0]
    assert low == pytest.approx(chi2.ppf(0.025, 2 * k) / 2 if k else 0.0, rel=1e-9, abs=1e-12)
    assert high == pytest.approx(chi2.ppf(0.975, 2 * k + 2) / 2, rel=1e-9)


def test_the_realised_rate_counts_labelled_false_alarms_per_analysis_and_radar_status_shows_it(gate_url):  # noqa: F811
    from scipy.stats import chi2

    _copy_of_st_fail(gate_url, "rate-1")
    row = _sql(gate_url, "SELECT * FROM radar.realised_false_alerts WHERE target = 'rate-1'")[0]._mapping
    assert (row["analyses"], row["detections"], row["false_alarm"], row["unlabelled"]) == (1, 1, 0, 1)
    assert (row["rate"], row["rate_low"], row["rate_if_unlabelled_false"]) == (0, 0, 1)
    _invoke(["label", "rate-1", "1", "--as", "false_alarm", "--note", "n", "--by", "x", "--warehouse", gate_url])
    row = _sql(gate_url, "SELECT * FROM radar.realised_false_alerts WHERE target = 'rate-1'")[0]._mapping
    assert (row["analyses"], row["detections"], row["false_alarm"], row["unlabelled"]) == (1, 1, 1, 0)
    assert row["budget"] == pytest.approx(0.1) and row["expected_false"] == pytest.approx(0.1)
    assert row["rate"] == 1.0
    assert row["rate_low"] == pytest.approx(chi2.ppf(0.025, 2) / 2, rel=1e-9)
    assert row["rate_high"] == pytest.approx(chi2.ppf(0.975, 4) / 2, rel=1e-9)
    status = _radar(["status", "--no-probe", "--warehouse", gate_url], env={"COLUMNS": "250"})
    assert status.returncode == 0, status.stderr
    assert "realised false alerts per deploy analysis, by labels (docs/budget.md):" in status.stdout
    line = next(line for line in status.stdout.splitlines() if "rate-1" in line)
    assert "1.000 [0.025, 5.572]" in line and "cannot tell yet" in line, line


# --- over HTTP, and Slack's buttons --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def served(gate_url) -> Iterator[Served]:  # noqa: F811
    tokens = [*TOKENS, {"token": LABEL_TOKEN, "scopes": ["label"]}]
    receiver = _serve(
        gate_url,
        {"RADAR_RECEIVER_TOKENS": json.dumps(tokens), "RADAR_RECEIVER_SLACK_SIGNING_SECRET": SLACK_SECRET},
    )
    yield receiver
    _stop(receiver)


def _post_label(served: Served, body: dict, token: str | None = LABEL_TOKEN, key: str | None = None):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    if key:
        headers["Idempotency-Key"] = key
    return httpx.post(f"{served.url}/v1/labels", content=json.dumps(body), headers=headers, timeout=30)


def test_labels_over_http_land_once_under_retries_and_refuse_as_the_other_endpoints(served):
    from .test_receiver import GATE_TOKEN

    _copy_of_st_fail(served.warehouse, "http-1")
    body = {"deploy_id": "http-1", "queryid": 1, "label": "acknowledged", "note": "on it", "by": "dee"}
    key = f"retry-{uuid.uuid4().hex}"
    first = _post_label(served, body, key=key)
    assert first.status_code == 201 and first.text.startswith("label ") and ": stored" in first.text, first.text
    for _ in range(3):
        again = _post_label(served, body, key=key)
        assert again.status_code == 200 and "already stored" in again.text
    other = _post_label(served, {**body, "label": "intended"}, key=key)
    assert other.status_code == 409 and "idempotency_key: used before for another label" in other.text
    rows = _sql(served.warehouse, "SELECT source, labelled_by FROM radar.label WHERE deploy_id = 'http-1'")
    assert [tuple(r) for r in rows] == [("receiver", "dee")]

    assert _post_label(served, body, token=None).status_code == 401
    assert _post_label(served, body, token="unknown-token-0123456789").status_code == 401
    refused = _post_label(served, body, token=GATE_TOKEN)
    assert refused.status_code == 403 and refused.text == "this token may not label verdicts (its scopes: gate)\n"
    for bad, reason in (
        ({**body, "queryid": 99}, "queryid: queryid 99 has no verdict in deploy 'http-1'; nothing stored"),
        ({**body, "label": "fixed"}, "fixed_by: a `fixed` label names the deploy that fixed it; nothing stored"),
        ({**body, "deploy_id": "nope-4"}, "deploy_id: deploy 'nope-4' is not recorded"),
        ({**body, "queryid": "1"}, "queryid must be a whole number"),
        ({**body, "colour": "red"}, "colour is not a field of a label"),
    ):
        answer = _post_label(served, bad)
        assert answer.status_code == 400 and reason in answer.text, answer.text
    assert _sql(served.warehouse, "SELECT count(*) FROM radar.label WHERE deploy_id = 'http-1'")[0][0] == 1


def _slack_click(value: str, label: str = "false_alarm", action_ts: str | None = None) -> bytes:
    """The form body Slack posts when a user clicks one of radar's buttons (a block_actions payload)."""
    payload = {
        "type": "block_actions",
        "user": {"id": "U024BE7LH", "username": "ana.s", "team_id": "T0001"},
        "team": {"id": "T0001", "domain": "acme"},
        "trigger_id": "12466734323.1395872398.cd8b1f0f2b2c7dfe6e4b2d9c8d0f6a3e",
        "response_url": "https://hooks.slack.com/actions/T0001/123/abc",
        "container": {"type": "message", "message_ts": "1700000000.000100", "channel_id": "C0001"},
        "actions": [
            {
                "type": "button",
                "action_id": f"radar_label:{label}",
                "block_id": "radar-label-0",
                "value": value,
                "text": {"type": "plain_text", "text": "False alarm"},
                "action_ts": action_ts or f"{time.time():.6f}",
            }
        ],
    }
    return urlencode({"payload": json.dumps(payload)}).encode()


def _signed(body: bytes, secret: str = SLACK_SECRET, at: int | None = None) -> dict[str, str]:
    """The headers Slack sends: the timestamp, and v0= the HMAC-SHA256 of v0:{timestamp}:{body}."""
    stamp = str(int(time.time()) if at is None else at)
    digest = hmac.new(secret.encode(), b"v0:" + stamp.encode() + b":" + body, hashlib.sha256).hexdigest()
    return {
        "X-Slack-Request-Timestamp": stamp,
        "X-Slack-Signature": f"v0={digest}",
        "Content-Type": "application/x-www-form-urlencoded",
    }


def test_slack_s_buttons_label_once_however_often_slack_sends_and_forgeries_are_refused(served):
    from radar_pipeline.alerts.render import label_buttons

    _copy_of_st_fail(served.warehouse, "slack-1")
    value = label_buttons("slack-1", "slack-1", (5, 10, 1, True), 0)["elements"][1]["value"]
    url = f"{served.url}/v1/slack/interactions"
    body = _slack_click(value)
    for _ in range(3):  # Slack resends a request it got no answer to: the same body
        started = time.monotonic()
        answer = httpx.post(url, content=body, headers=_signed(body), timeout=30)
        assert answer.status_code == 200, answer.text
        assert time.monotonic() - started < 2.5  # within Slack's 3 s, with room for the network
    rows = _sql(served.warehouse, "SELECT label, labelled_by, source FROM radar.label WHERE deploy_id = 'slack-1'")
    assert [tuple(r) for r in rows] == [("false_alarm", "slack:ana.s", "slack")]
    # another click is another label (its own action_ts)
    later = _slack_click(value, "acknowledged", action_ts="1700000999.000001")
    assert httpx.post(url, content=later, headers=_signed(later), timeout=30).status_code == 200
    assert _sql(served.warehouse, "SELECT count(*) FROM radar.label WHERE deploy_id = 'slack-1'")[0][0] == 2

    forged = _slack_click(value, "intended")
    for headers, reason in (
        (_signed(forged, secret="not-the-signing-secret-0000"), "X-Slack-Signature does not match"),
        (_signed(forged, at=int(time.time()) - 6 * 60), "more than 5 minutes from now"),
        ({**_signed(forged), "X-Slack-Signature": "v0=" + "0" * 64}, "X-Slack-Signature does not match"),
        ({"Content-Type": "application/x-www-form-urlencoded"}, "X-Slack-Signature and X-Slack-Request-Timestamp"),
    ):
        answer = httpx.post(url, content=forged, headers=headers, timeout=30)
        assert answer.status_code == 401 and reason in answer.text, answer.text
        assert SLACK_SECRET not in answer.text
    signed_then_changed = _signed(body)
    tampered = body.replace(b"false_alarm", b"intended_xx")
    assert httpx.post(url, content=tampered, headers=signed_then_changed, timeout=30).status_code == 401
    assert _sql(served.warehouse, "SELECT count(*) FROM radar.label WHERE deploy_id = 'slack-1'")[0][0] == 2
    # an interaction that is not one of radar's buttons is acknowledged, nothing stored
    other = urlencode({"payload": json.dumps({"type": "view_submission"})}).encode()
    assert httpx.post(url, content=other, headers=_signed(other), timeout=30).status_code == 200


def test_alerts_carry_label_buttons_within_slack_s_limits():
    from radar_pipeline.alerts.render import MAX_SHOWN_WITH_BUTTONS, button_subject, render

    from .test_alerts import _many

    for count in (1, 8, 9, 60):
        facts, regressions = _many(count, long=True)
        keyed = [replace(r, key=(5, 10, r.queryid, True)) for r in regressions]
        text, blocks = render(facts, keyed, buttons=True)
        assert fake_slack.limit_errors({"text": text, "blocks": blocks}) == []
        rows = [b for b in blocks if b["type"] == "actions"]
        assert len(rows) == min(count, MAX_SHOWN_WITH_BUTTONS)
        labels = [e["action_id"] for e in rows[0]["elements"]]
        assert labels == ["radar_label:intended", "radar_label:false_alarm", "radar_label:acknowledged"]
        subject = button_subject(rows[0]["elements"][0]["value"])
        assert subject == (facts.analysis_id, facts.target, (5, 10, keyed[0].queryid, True))
        assert not [b for b in render(facts, keyed)[1] if b["type"] == "actions"]  # no buttons unless asked


# --- through the alert itself --------------------------------------------------------------------------------------


def test_the_slack_alert_s_own_button_labels_its_verdict(analysed, warehouse_url, slack):  # noqa: F811
    from radar_pipeline.defs.resources import SlackResource
    from radar_pipeline.steps.labelling import slack_label
    from radar_pipeline.warehouse import labels

    from .test_alerts import _alert

    bot = SlackResource(token="xoxb-test-token", channel="#radar", base_url=slack.api_url, label_buttons=True)
    result, _ = _alert(warehouse_url, bot)
    assert result.success
    posted = slack.calls_to("/api/chat.postMessage")[0].json
    blocks = posted["blocks"] if isinstance(posted["blocks"], list) else json.loads(posted["blocks"])
    assert fake_slack.limit_errors({"text": posted["text"], "blocks": blocks}) == []
    rows = [b for b in blocks if b["type"] == "actions"]
    assert len(rows) == 1  # the one regression
    button = rows[0]["elements"][1]
    click = {
        "type": "block_actions",
        "user": {"id": "U1", "username": "ana.s"},
        "actions": [{**button, "block_id": rows[0]["block_id"], "action_ts": "1700000000.000001"}],
    }
    label = slack_label(click)
    assert label is not None
    with analysed.begin() as conn:
        stored = labels.add(conn, label).row
    assert (stored["deploy_id"], stored["target"], stored["queryid"], stored["label"]) == ("d-7", "main", 11,
                                                                                           "false_alarm")  # fmt: skip


def test_a_muted_detection_is_not_posted(analysed, warehouse_url, slack):  # noqa: F811
    from radar_pipeline.defs.resources import SlackResource

    from .test_alerts import _alert

    at = _sql(warehouse_url, "SELECT deployed_at FROM radar.deploy_event WHERE deploy_id = 'd-7'")[0][0]
    _mute_since(warehouse_url, at, "maintenance", target="main")
    result, _ = _alert(warehouse_url, SlackResource(token="xoxb-test-token", channel="#radar", base_url=slack.api_url))
    assert result.success
    assert slack.calls_to("/api/chat.postMessage") == []
    assert _count(warehouse_url, "radar.alert") == 0


def test_a_radar_command_in_a_review_comment_labels_once_per_comment(served):
    from .test_receiver import GITHUB_SECRET, GITLAB_SECRET

    _copy_of_st_fail(served.warehouse, "pr-1")
    comment = {
        "action": "created",
        "issue": {"number": 7, "pull_request": {"url": "https://api.github.com/repos/acme/shop/pulls/7"}},
        "comment": {"id": 991, "body": "Thanks!\n/radar label pr-1 1 intended the audit trigger <b>\nmore", "user":
                    {"login": "octo-cat"}},
    }  # fmt: skip

    def github(payload: dict, event: str = "issue_comment", secret: str = GITHUB_SECRET) -> httpx.Response:
        body = json.dumps(payload).encode()
        digest = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
        headers = {"X-GitHub-Event": event, "X-GitHub-Delivery": str(uuid.uuid4()),
                   "X-Hub-Signature-256": f"sha256={digest}", "Content-Type": "application/json"}  # fmt: skip
        return httpx.post(f"{served.url}/v1/comments/github", content=body, headers=headers, timeout=30)

    first = github(comment)
    assert first.status_code == 201, first.text
    assert github(comment).status_code == 200  # GitHub redelivers: the same comment lands once
    rows = _sql(served.warehouse, "SELECT label, labelled_by, note, source FROM radar.label WHERE deploy_id = 'pr-1'")
    assert [tuple(r) for r in rows] == [("intended", "github:octo-cat", "the audit trigger <b>", "code_host")]
    assert github(comment, secret="not-the-webhook-secret-000").status_code == 401
    chat = {**comment, "comment": {**comment["comment"], "id": 992, "body": "looks good"}}
    assert github(chat).status_code == 202 and "no /radar line" in github(chat).text
    assert github(comment, event="push").status_code == 202
    wrong = {**comment, "comment": {**comment["comment"], "id": 993, "body": "/radar label pr-1 1 maybe so"}}
    answer = github(wrong)
    assert answer.status_code == 400 and "label: 'maybe' is not a label" in answer.text
    short = {**comment, "comment": {**comment["comment"], "id": 994, "body": "/radar label pr-1"}}
    assert github(short).status_code == 400 and "the command is /radar label" in github(short).text

    note = {
        "object_kind": "note",
        "user": {"username": "gl-dev"},
        "object_attributes": {"id": 55, "note": "/radar label pr-1 1 fixed st-pass index back", "noteable_type":
                              "MergeRequest"},
    }  # fmt: skip
    body = json.dumps(note).encode()
    url = f"{served.url}/v1/comments/gitlab"
    for status in (201, 200):
        answer = httpx.post(url, content=body, headers={"X-Gitlab-Token": GITLAB_SECRET}, timeout=30)
        assert answer.status_code == status, answer.text
    assert (
        httpx.post(url, content=body, headers={"X-Gitlab-Token": "wrong-token-0123456789"}, timeout=30).status_code
        == 401
    )
    latest = _sql(
        served.warehouse, "SELECT label, fixed_by, labelled_by FROM radar.latest_label WHERE deploy_id = 'pr-1'"
    )
    assert tuple(latest[0]) == ("fixed", "st-pass", "gitlab:gl-dev")
    assert httpx.post(f"{served.url}/v1/comments/bitbucket", content=body, timeout=30).status_code == 404


def test_a_group_is_labelled_muted_and_counted(gate_url):  # noqa: F811
    """A detected group (a row as steps/groups.py writes one) on a copy of st-fail: its label shows on its line and
    counts in the realised rate; a mute of the group, with its member's statement muted too, leaves nothing failing."""
    at = _copy_of_st_fail(gate_url, "grp-1")
    _sql(
        gate_url,
        "INSERT INTO radar.group_verdict (deploy_id, target, group_id, kind, label, verdict, members, members_above, "
        "statements, sentence, member_dbid, member_userid, member_queryid, member_toplevel) VALUES ('grp-1', "
        "'grp-1', 'shape:abc', 'shape', 'statements of this shape', 'detected', 2, 2, 2, "
        "'2 statements of this shape slowed as a group', '{5,5}', '{10,10}', '{1,2}', '{true,true}')",
    )
    done = _invoke(["label", "grp-1", "--group", "shape:abc", "--as", "false_alarm", "--note", "batch", "--by", "ed",
                    "--warehouse", gate_url])  # fmt: skip
    assert done.exit_code == 0 and "labelled group shape:abc of grp-1 on grp-1: false_alarm by ed" in done.stdout
    shown = _invoke(["verdicts", "grp-1", "--warehouse", gate_url]).stdout
    assert "(queryids 1, 2; id shape:abc); labelled false_alarm by ed: batch" in shown, shown
    row = _sql(gate_url, "SELECT * FROM radar.realised_false_alerts WHERE target = 'grp-1'")[0]._mapping
    assert (row["detections"], row["false_alarm"], row["unlabelled"]) == (2, 1, 1)

    _mute_since(gate_url, at, "batch rewrite", group_id="shape:abc")  # of any target
    _mute_since(gate_url, at, "noisy", target="grp-1", queryid=1)
    state = _sql(
        gate_url, "SELECT state, groups_muted, muted_detected FROM radar.deploy_state WHERE deploy_id = 'grp-1'"
    )
    assert tuple(state[0])[1:] == (1, 1) and state[0][0] != "fail"
    gate = _invoke(["gate", "grp-1", "--warehouse", gate_url]).stdout
    assert "ignored (muted): group shape:abc on grp-1, mute " in gate and ": batch rewrite" in gate


def test_a_fleet_verdict_is_labelled_through_one_of_its_deploys(gate_url):  # noqa: F811
    _copy_of_st_fail(gate_url, "fl-1", release_id="rel-41")
    _sql(
        gate_url,
        "INSERT INTO radar.release_verdict (release_id, fingerprint, toplevel, status, look, verdict, factor, "
        "factor_low, factor_high, p_value, p_family, budget_share, heterogeneity_p, i_squared, tau2, targets, "
        "targets_agreeing, consistent, only_on, report, member_targets, members, analysed, example_deploy_id, "
        "example_target, example_queryid, example_dbid, example_userid) VALUES ('rel-41', 1, true, 'final', 0, "
        "'detected', 3, 2.9, 3.1, 0.001, 0.01, 0.05, 0.5, 0, 0, 1, 1, true, '{}', '×3.00 on 1 of 1 targets', "
        "'{fl-1}', 1, 1, 'fl-1', 'fl-1', 1, 5, 10)",
    )
    done = _invoke(["label", "fl-1", "1", "--fleet", "--as", "acknowledged", "--note", "looking", "--by", "fo",
                    "--warehouse", gate_url])  # fmt: skip
    assert done.exit_code == 0, done.output
    assert "labelled the fleet verdict of release rel-41 on fingerprint 1: acknowledged by fo" in done.stdout
    stored = _sql(gate_url, "SELECT kind, release_id, fingerprint, toplevel, deploy_id FROM radar.label "
                  "WHERE release_id = 'rel-41'")  # fmt: skip
    assert [tuple(r) for r in stored] == [("fleet", "rel-41", 1, True, None)]
    alone = _invoke(["label", "st-pass", "1", "--fleet", "--as", "acknowledged", "--note", "n", "--warehouse",
                     gate_url])  # fmt: skip
    assert alone.exit_code == 1 and alone.stderr.startswith("Error: --fleet: queryid 1 has no fleet verdict")
