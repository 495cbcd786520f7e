"""Commit statuses, deployment statuses and review comments for analysed deploys, sent by radar's httpx client to
loopback stand-ins for GitHub and GitLab that enforce their APIs' contracts (fake_code_host.py), through the outbox
in radar.code_host_delivery: each host answer (401, 403, 404, 422, 5xx, 429, rate limits) ends in a stored outcome,
a comment is never posted twice (a lost answer, a killed run), a re-analysis edits it in place, the reconciler
retries what waits, and the token shows nowhere."""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import dagster as dg
import pandas as pd
import pytest
import sqlalchemy as sa

from radar_pipeline.alerts.code_hosts import HostClient, HostError, Review
from radar_pipeline.defs.alerts.code_host_statuses import code_host_statuses
from radar_pipeline.defs.alerts.regression_alerts import regression_alerts
from radar_pipeline.defs.reconcile.reconciler import radar_reconciler
from radar_pipeline.defs.resources import (
    AnalysisResource,
    ChannelsResource,
    CodeHostResource,
    SlackResource,
    WarehouseResource,
)
from radar_pipeline.defs.retry_jobs import alert_retry_job
from radar_pipeline.steps.code_host_delivery import Deploy, comment_body, comment_marker, deliver, description
from radar_pipeline.steps.deploy_analysis import AnalysisRun, analyse_deploy
from radar_pipeline.warehouse import deploys, outbox
from radar_pipeline.warehouse.reconcile import withhold_old

from . import fake_code_host
from .fake_code_host import ECHO, TOKEN, FakeHost
from .helpers import run_log_text
from .test_alerts import EVIL, SETTINGS, analysed  # noqa: F401 - the fixture is used by name
from .test_reconciler import ANALYSIS, NOW, _execute, _tick

COMMIT = "c0ffee" + "0123456789abcdef" * 2 + "01"
REPOSITORIES = {"github": "acme/api", "gitlab": "acme/platform/api"}
TIMEOUT = 2.0  # the client's bound in these tests (10 s by default)
AGE = timedelta(hours=24)


@pytest.fixture(params=["github", "gitlab"])
def host(request: pytest.FixtureRequest) -> Iterator[FakeHost]:
    """A stand-in for the code host, which knows the repository, the commit and the request (12) that merged it."""
    state = FakeHost(request.param, REPOSITORIES[request.param], COMMIT, reviews=[12])
    server = fake_code_host.start(state)
    yield state
    server.shutdown()


@pytest.fixture
def github() -> Iterator[FakeHost]:
    state = FakeHost("github", REPOSITORIES["github"], COMMIT, reviews=[12])
    server = fake_code_host.start(state)
    yield state
    server.shutdown()


def _ship(warehouse, host: FakeHost, **changes: object) -> None:
    """Give the analysed deploy d-7 (a ×4 regression: state fail) what a status needs, as `radar deploy` records it
    in the host's CI."""
    fields = {
        "commit_sha": COMMIT,
        "repository": host.repository,
        "code_host": host.kind,
        "api_url": host.api_url,
        "run_url": "https://ci.example/runs/7",
        "github_deployment_id": host.deployment if host.kind == "github" else None,
        **changes,
    }
    with warehouse.begin() as conn:
        conn.execute(
            sa.text(
                "UPDATE radar.deploy_event SET " + ", ".join(f"{k} = :{k}" for k in fields) + " WHERE deploy_id = 'd-7'"
            ),
            fields,
        )


def _resource(host: FakeHost, token: str = TOKEN, **kwargs: object) -> CodeHostResource:
    return CodeHostResource(
        **{f"{host.kind}_token": token, f"{host.kind}_api_url": host.api_url},  # type: ignore[arg-type]
        timeout_seconds=TIMEOUT,
        **kwargs,  # type: ignore[arg-type]
    )


def _materialize(warehouse_url: str, resource: CodeHostResource, tags: dict | None = None) -> tuple[dict, str]:
    """code_host_statuses for d-7 in Dagster: its metadata and the run's log text."""
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("deploys", ["d-7"])
        result = dg.materialize(
            [code_host_statuses],
            partition_key="d-7",
            resources={
                "warehouse": WarehouseResource(url=warehouse_url),
                "code_hosts": resource,
                "analysis": AnalysisResource(),
            },
            instance=instance,
            tags=tags,
        )
        assert result.success
        (materialization,) = result.asset_materializations_for_node("code_host_statuses")
        return {k: v.value for k, v in materialization.metadata.items()}, run_log_text(instance, result.run_id)


def _deliver(warehouse, host: FakeHost, max_age: timedelta = AGE) -> dict:
    """The step alone (no Dagster run): one attempt at d-7's deliveries."""
    client = HostClient(host.kind, host.api_url, TOKEN, TIMEOUT)
    try:
        return deliver(
            logging.getLogger("test"), warehouse, {host.kind: client}, "d-7", max_age, datetime.now(UTC), ANALYSIS
        )
    finally:
        client.close()


def _rows(warehouse) -> dict[str, dict]:
    with warehouse.connect() as conn:
        return outbox.code_host_rows(conn, "d-7")


def _backoff_passes(warehouse, lease: bool = False) -> None:
    """Drive time through the recorded timestamps: the backoff (and, with `lease`, a stopped run's lease) is over."""
    with warehouse.begin() as conn:
        conn.execute(sa.text("UPDATE radar.code_host_delivery SET next_attempt_at = now()"))
        if lease:
            conn.execute(sa.text("UPDATE radar.code_host_delivery SET claimed_at = claimed_at - interval '1 day'"))


def _wait(warehouse) -> float:
    with warehouse.connect() as conn:
        return conn.execute(
            sa.text(
                "SELECT extract(epoch FROM next_attempt_at - now()) FROM radar.code_host_delivery "
                "WHERE kind = 'commit_status'"
            )
        ).scalar_one()


def test_a_failed_deploy_gets_its_statuses_and_one_comment_edited_in_place_on_reanalysis(analysed, warehouse_url, host):  # noqa: F811
    _ship(analysed, host)
    metadata, log = _materialize(warehouse_url, _resource(host))
    github = host.kind == "github"
    expected = {"commit_status": "sent", "review_comment": "sent"} | ({"deployment_status": "sent"} if github else {})
    assert metadata["deliveries"] == expected and metadata["state"] == "fail"
    (status,) = host.statuses
    assert status["state"] == ("failure" if github else "failed")
    assert status["context" if github else "name"] == "radar"
    assert status["description"].startswith("fail: 1 statement slower, up to ×")
    assert status["target_url"].endswith("/runs/abcdef12-run")  # the Dagster run that analysed it
    if github:
        assert [s["state"] for s in host.deployment_statuses] == ["failure"]
    (comment,) = host.comments.values()
    assert comment["review"] == 12 and comment["body"].startswith(comment_marker("d-7"))
    assert "**fail**" in comment["body"] and "×4" in comment["body"]
    # The statement's text sits in a code block: its mentions cannot notify anyone.
    assert f"  ```sql\n  {EVIL}\n  ```" in comment["body"]

    again, _ = _materialize(warehouse_url, _resource(host))  # the same analysis again: nothing new is sent
    assert again["deliveries"] == expected
    assert len(host.calls_to("status")) == 1 and len(host.calls_to("post_comment")) == 1

    # A re-analysis with a tolerance of ×10 no longer detects the ×4 statement: the deploy is no longer failed; the
    # status says so and the comment is edited, not posted again.
    analyse_deploy(AnalysisRun(analysed, dataclasses.replace(SETTINGS, threshold=9.0), run_id="rerun-2"), "d-7")
    metadata, rerun_log = _materialize(warehouse_url, _resource(host))
    state = metadata["state"]
    assert state in ("pass", "inconclusive") and metadata["deliveries"] == expected
    mapped = {"pass": "success", "inconclusive": "error" if github else "failed"}[state]
    assert [s["state"] for s in host.statuses] == ["failure" if github else "failed", mapped]
    assert host.statuses[-1]["description"].startswith(f"{state}: ")
    if github:
        assert [s["state"] for s in host.deployment_statuses] == ["failure", mapped]
    (comment,) = host.comments.values()
    assert f"**{state}**" in comment["body"] and "an earlier analysis found a regression" in comment["body"]
    assert len(host.calls_to("post_comment")) == 1 and len(host.calls_to("edit_comment")) == 1
    for text in (log, rerun_log, repr(metadata), repr(_rows(analysed))):
        assert TOKEN not in text


def test_every_answer_of_the_host_ends_in_a_stored_outcome(analysed, warehouse_url, host):  # noqa: F811
    """Each case starts from an empty outbox; the status request gets the answer. 401, 403, 404, 422 are final;
    5xx is retried inside the attempt and then left pending with backoff; a rate limit is waited out inside the
    attempt when short, else between runs for as long as the host asked."""
    _ship(analysed, host)
    reset = int(time.time()) + 900
    cases = [
        ((401, {}, {"message": "Bad credentials"}), "failed", "401 the token was refused"),
        ((403, {}, {"message": "Resource not accessible by personal access token"}), "failed", "403 the token may"),
        ((404, {}, {"message": "Not Found"}), "failed", "404 not found"),
        ((422, {}, {"message": "Validation Failed"}), "failed", "422 the fields were refused"),
        ((500, {}, {"message": "oops"}), "pending", "failed (HTTP 500)"),
        ((429, {"Retry-After": "600"}, {"message": "slow down"}), "pending", "wait 600 s"),
        ((403, {"x-ratelimit-remaining": "0", "x-ratelimit-reset": str(reset)}, {"message": "API rate limit"}),
         "pending", "rate-limited"),
        ((403, {}, {"message": "You have exceeded a secondary rate limit"}), "pending", "wait 60 s"),
        ((502, {}, ECHO), "pending", "failed (HTTP 502): proxy error"),  # quoting the request, token and all
    ]  # fmt: skip
    for answer, status, words in cases:
        with analysed.begin() as conn:
            conn.execute(sa.text("DELETE FROM radar.code_host_delivery"))
        before = len(host.calls_to("status"))
        repeat = 3 if answer[0] >= 500 else 1  # a 5xx: the attempt and its two retries
        host.fail_next("status", *[answer] * repeat)
        _deliver(analysed, host)
        row = _rows(analysed)["commit_status"]
        assert (row["status"], words in row["last_error"]) == (status, True), (answer, row)
        assert TOKEN not in row["last_error"] and len(host.calls_to("status")) - before == repeat
        if answer[1].get("Retry-After") == "600":
            assert 590 < _wait(analysed) <= 600
        if "x-ratelimit-reset" in answer[1]:
            assert 850 < _wait(analysed) <= 900
    assert not host.statuses  # none of them was applied

    # A short Retry-After (429, or GitHub's 403 secondary limit) is waited out inside the attempt: sent.
    with analysed.begin() as conn:
        conn.execute(sa.text("DELETE FROM radar.code_host_delivery"))
    host.fail_next("status", (429, {"Retry-After": "1"}, {"message": "slow down"}))
    host.fail_next("post_comment", (403, {"retry-after": "1"}, {"message": "You have exceeded a secondary rate limit"}))
    posted = len(host.comments)
    _deliver(analysed, host)
    assert _rows(analysed)["commit_status"]["status"] == "sent" and len(host.statuses) == 1
    assert _rows(analysed)["review_comment"]["status"] == "sent" and len(host.comments) == posted + 1


def test_a_host_that_asks_to_wait_holds_back_the_deploy_s_other_deliveries(analysed, github):  # noqa: F811
    """One delivery loop (steps/delivery.py): a Retry-After on the commit status holds the deployment status and the
    review comment back unsent, waiting as long, instead of asking the host that asked to wait again at once."""
    _ship(analysed, github)
    github.fail_next("status", (429, {"Retry-After": "600"}, {"message": "slow down"}))
    _deliver(analysed, github)
    rows = _rows(analysed)
    assert {kind: row["status"] for kind, row in rows.items()} == {
        "commit_status": "pending",
        "deployment_status": "pending",
        "review_comment": "pending",
    }
    assert "asked to wait" in rows["review_comment"]["last_error"] and not github.comments
    assert not github.calls_to("deployment_status") and not github.calls_to("post_comment")
    with analysed.connect() as conn:
        waits = conn.execute(
            sa.text("SELECT extract(epoch FROM next_attempt_at - now()) FROM radar.code_host_delivery")
        ).scalars()
        assert all(590 < w <= 600 for w in waits)
    _backoff_passes(analysed)
    _deliver(analysed, github)
    assert {row["status"] for row in _rows(analysed).values()} == {"sent"} and len(github.comments) == 1


def test_a_request_that_cannot_be_found_or_a_token_refused_is_final_and_said(analysed, warehouse_url, github):  # noqa: F811
    _ship(analysed, github)
    github.reviews.clear()  # no pull request merged the commit
    metadata, _ = _materialize(warehouse_url, _resource(github, token="ghp_wrong"))
    rows = _rows(analysed)
    assert rows["commit_status"]["status"] == "failed" and "401" in rows["commit_status"]["last_error"]
    assert "ghp_wrong" not in repr(rows) + repr(metadata)
    with analysed.begin() as conn:
        conn.execute(sa.text("DELETE FROM radar.code_host_delivery"))
    _materialize(warehouse_url, _resource(github))
    rows = _rows(analysed)
    assert rows["commit_status"]["status"] == "sent"
    assert rows["review_comment"]["status"] == "skipped"
    assert "no pull or merge request merged commit c0ffee012345" in rows["review_comment"]["last_error"]


def test_a_comment_applied_without_an_answer_is_found_not_posted_twice(analysed, warehouse_url, host):  # noqa: F811
    _ship(analysed, host)
    host.drop_next("status")  # applied, no answer: a status is idempotent, so it is sent again inside the attempt
    host.drop_next("post_comment")  # applied, no answer: the comment may exist
    _deliver(analysed, host)
    rows = _rows(analysed)
    assert rows["commit_status"]["status"] == "sent" and len(host.statuses) == 2
    assert len(host.calls_to("post_comment")) == 1  # not retried blindly
    assert (rows["review_comment"]["status"], len(host.comments)) == ("pending", 1)
    with analysed.connect() as conn:
        unknown = "SELECT outcome_unknown FROM radar.code_host_delivery WHERE kind = 'review_comment'"
        assert conn.execute(sa.text(unknown)).scalar_one()

    _backoff_passes(analysed)
    _deliver(analysed, host)
    assert len(host.calls_to("list_comments")) == 1  # looked for its marker …
    assert len(host.calls_to("post_comment")) == 1 and len(host.comments) == 1  # … found it: duplicated: nothing
    assert _rows(analysed)["review_comment"]["status"] == "sent"
    assert _rows(analysed)["review_comment"]["remote_ids"] == {"12": next(iter(host.comments))}


def test_a_run_killed_after_the_host_applied_the_comment_does_not_comment_twice(analysed, warehouse_url, github):  # noqa: F811
    """The outbox row is committed (`sending`) before the comment goes out; the run dies before it can record the
    outcome; the next attempt, after the lease, finds the comment by its marker."""
    _ship(analysed, github)
    github.late_next("post_comment", 60.0)
    script = (
        "import logging\n"
        "from datetime import UTC, datetime, timedelta\n"
        "from radar_pipeline.alerts.code_hosts import HostClient\n"
        "from radar_pipeline.defs.resources import AnalysisResource\n"
        "from radar_pipeline.steps.code_host_delivery import deliver\n"
        "from radar_pipeline.warehouse.database import make_engine\n"
        f"client = HostClient('github', {github.api_url!r}, {TOKEN!r}, 120)\n"
        f"deliver(logging.getLogger(), make_engine({warehouse_url!r}), {{'github': client}}, 'd-7', "
        "timedelta(hours=24), datetime.now(UTC), AnalysisResource())\n"
    )
    child = subprocess.Popen([sys.executable, "-c", script], env=os.environ.copy())
    try:
        deadline = time.monotonic() + 60
        while not github.comments:
            assert time.monotonic() < deadline, "the comment never reached the host"
            time.sleep(0.05)
        assert _rows(analysed)["review_comment"]["status"] == "sending"  # committed before the request
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert _rows(analysed)["review_comment"]["status"] == "sending"  # the run died before recording it

    _backoff_passes(analysed, lease=True)
    _deliver(analysed, github)
    assert len(github.calls_to("post_comment")) == 1 and len(github.comments) == 1  # lost: nothing; twice: never
    assert _rows(analysed)["review_comment"]["status"] == "sent"


def test_the_reconciler_retries_a_delivery_the_host_refused_for_now(analysed, warehouse_url, github):  # noqa: F811
    _ship(analysed, github)
    code_hosts = _resource(github)
    resources = {
        "warehouse": WarehouseResource(url=warehouse_url),
        "analysis": ANALYSIS,
        "slack": SlackResource(),
        "reconciler": NOW,
        "code_hosts": code_hosts,
        "channels": ChannelsResource(),
    }
    defs = dg.Definitions(  # one retry job for every destination of the deploy: its alerts and its code host's
        assets=[regression_alerts, code_host_statuses],
        jobs=[alert_retry_job],
        sensors=[radar_reconciler],
        resources=resources,
    )
    github.fail_next("status", *[(503, {}, {"message": "unavailable"})] * 3)
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("deploys", ["d-7"])
        first = _execute(instance, defs, dg.RunRequest(job_name="alert_retry_job", partition_key="d-7"))
        assert first.success and _rows(analysed)["commit_status"]["status"] == "pending" and not github.statuses

        assert not _tick(instance, resources).run_requests  # inside its backoff: nothing yet
        _backoff_passes(analysed)
        (request,) = _tick(instance, resources).run_requests
        assert (request.job_name, request.partition_key, request.run_key) == (
            "alert_retry_job",
            "d-7",
            "alerts:d-7:1:reconcile-1",
        )
        assert _execute(instance, defs, request).success
    assert _rows(analysed)["commit_status"]["status"] == "sent"
    assert [s["state"] for s in github.statuses] == ["failure"]


def test_old_reanalysed_or_unconfigured_deploys_send_nothing(analysed, warehouse_url, github):  # noqa: F811
    _ship(analysed, github)
    metadata, _ = _materialize(warehouse_url, CodeHostResource(timeout_seconds=TIMEOUT))  # no token
    assert metadata["note"] == "RADAR_GITHUB_TOKEN is not set: no status for github" and not github.calls

    metadata, _ = _materialize(warehouse_url, _resource(github), tags={"radar/reanalysis": "true"})
    assert metadata["withheld"].startswith("found by the nightly reanalysis")
    assert {r["status"] for r in _rows(analysed).values()} == {"withheld"} and not github.calls

    with analysed.begin() as conn:
        conn.execute(sa.text("DELETE FROM radar.code_host_delivery"))
    _deliver(analysed, github, max_age=timedelta(seconds=1))  # the window closed 100 s ago: too old
    assert {r["status"] for r in _rows(analysed).values()} == {"withheld"} and not github.calls
    # A status still waiting when its deploy becomes too old is withheld too, not sent late.
    with analysed.begin() as conn:
        conn.execute(sa.text("DELETE FROM radar.code_host_delivery"))
    github.fail_next("status", *[(503, {}, {"message": "unavailable"})] * 3)
    _deliver(analysed, github)
    assert _rows(analysed)["commit_status"]["status"] == "pending"
    _backoff_passes(analysed)
    _deliver(analysed, github, max_age=timedelta(seconds=1))
    assert _rows(analysed)["commit_status"]["status"] == "withheld" and len(github.calls_to("status")) == 3
    github.calls.clear()

    # A deploy record that names another API than radar's: the token is not sent there.
    with analysed.begin() as conn:
        conn.execute(sa.text("DELETE FROM radar.code_host_delivery"))
    _ship(analysed, github, api_url="https://evil.example/api")
    _deliver(analysed, github)
    row = _rows(analysed)["commit_status"]
    assert row["status"] == "failed" and "sends its GitHub token only to" in row["last_error"] and not github.calls

    _ship(analysed, github, commit_sha=None, repository=None, code_host=None, github_deployment_id=None, api_url=None)
    metadata, _ = _materialize(warehouse_url, _resource(github))
    assert metadata["note"].startswith("no commit and repository recorded") and not github.calls


def test_the_stand_in_refuses_what_the_hosts_refuse_and_radar_stays_within_their_limits(github):
    client = HostClient("github", github.api_url, TOKEN, TIMEOUT)
    try:
        with pytest.raises(HostError, match="422 the fields were refused: Validation Failed"):
            client.set_status(github.repository, COMMIT, "fail", "x" * 141, None)
        with pytest.raises(HostError, match="422 the fields were refused"):
            client.post_comment(github.repository, Review(12), "x" * 65_537)
        with pytest.raises(HostError, match="422 the fields were refused: No commit found"):
            client.set_status(github.repository, "0" * 40, "fail", "x", None)
        assert not github.statuses and not github.comments
        with pytest.raises(HostError, match="401 the token was refused") as refused:
            HostClient("github", github.api_url, "ghp_other", TIMEOUT).set_status(
                github.repository, COMMIT, "pass", "ok", None
            )
        assert not refused.value.retryable

        # The largest deploy radar can describe: 60 detections of 5,000-character statements full of backticks.
        many = pd.DataFrame(
            {
                "queryid": range(60),
                "target": "main",
                "change_factor": 3.5,
                "factor_low": 2.0,
                "factor_high": 6.0,
                "cause": "plan_change",
                "query": ["SELECT '```' || `x` FROM t WHERE a = $1 " * 130] * 60,
            }
        )
        state = pd.Series({"state": "fail", "detected": 60, "no_regression": 0, "inconclusive": 0,
                           "insufficient_data": 0, "cleared_share": 0.12345, "pass_share": 0.9})  # fmt: skip
        event = deploys.DeployEvent("d-" + "9" * 120, "t" * 1000, commit_sha=COMMIT, repository="acme/api",
                                    code_host="github")  # fmt: skip
        deploy = Deploy(event, state, many, datetime.now(UTC), "run-1")
        body = comment_body(deploy, "fail", comment_marker(event.deploy_id))
        text = description("fail", state, many)
        assert len(body) <= 65_536 and len(text) <= 140 and "and 50 more" in body
        client.set_status(github.repository, COMMIT, "fail", text, None)
        assert client.post_comment(github.repository, Review(12), body) > 0
        # No backtick run in a statement closes its code block early: each block's fence is longer than any run.
        assert body.count("\n  ````sql\n") == 10
    finally:
        client.close()


def test_code_host_settings_are_checked_at_load():
    from radar_pipeline.config import ConfigError
    from radar_pipeline.config.settings import validate_environment

    validate_environment({"RADAR_GITHUB_TOKEN": "ghp_x", "RADAR_GITHUB_API_URL": "https://ghe.example/api/v3"})
    for env, words in (
        ({"RADAR_GITHUB_TOKEN": "ghp_x\nX-Evil: 1"}, "RADAR_GITHUB_TOKEN holds white space"),
        ({"RADAR_GITLAB_API_URL": "https://user:pw@gitlab.example/api/v4"}, "RADAR_GITLAB_API_URL must not hold @"),
        ({"RADAR_GITHUB_API_URL": "api.github.com"}, "RADAR_GITHUB_API_URL must be an http(s) URL"),
    ):
        with pytest.raises(ConfigError, match=re.escape(words)) as refused:
            validate_environment(env)
        assert "pw@" not in str(refused.value) and "ghp_x" not in str(refused.value)


def test_an_odd_answer_is_quoted_without_the_token(github):
    """A 200 that is not the list asked for (a proxy echoing the request, headers and all) is quoted token-free."""
    client = HostClient("github", github.api_url, TOKEN, TIMEOUT)
    try:
        github.fail_next("pulls", (200, {}, ECHO))
        with pytest.raises(HostError, match="an answer that is not a list") as odd:
            client.reviews(github.repository, COMMIT)
        assert TOKEN[:12] not in str(odd.value) and "***" in str(odd.value)
    finally:
        client.close()


def test_a_retry_after_beyond_any_clock_is_clamped(analysed, github):  # noqa: F811
    """Retry-After `inf` or `1e20` cannot be a timedelta: the wait is clamped to the alert age limit, not a crash."""
    _ship(analysed, github)
    for asked in ("inf", "1e20"):
        with analysed.begin() as conn:
            conn.execute(sa.text("DELETE FROM radar.code_host_delivery"))
        github.fail_next("status", (429, {"Retry-After": asked}, {"message": "slow down"}))
        _deliver(analysed, github)
        assert _rows(analysed)["commit_status"]["status"] == "pending"
        assert 23 * 3600 < _wait(analysed) <= 24 * 3600, asked


def test_a_comment_answered_with_a_server_error_is_looked_for_not_posted_again(analysed, github):  # noqa: F811
    """A 5xx to a comment's POST may come after the host applied it: not retried inside the attempt (unknown); the
    next attempt finds it by its marker."""
    _ship(analysed, github)
    github.fail_after_next("post_comment", (502, {}, {"message": "Server Error"}))
    _deliver(analysed, github)
    row = _rows(analysed)["review_comment"]
    assert (row["status"], len(github.calls_to("post_comment")), len(github.comments)) == ("pending", 1, 1)
    assert "may have been applied" in row["last_error"]
    _backoff_passes(analysed)
    _deliver(analysed, github)
    assert len(github.comments) == 1 and len(github.calls_to("post_comment")) == 1
    assert _rows(analysed)["review_comment"]["status"] == "sent"


def _unknown(warehouse) -> bool:
    with warehouse.connect() as conn:
        return conn.execute(
            sa.text("SELECT outcome_unknown FROM radar.code_host_delivery WHERE kind = 'review_comment'")
        ).scalar_one()


def test_a_doubt_outlives_a_final_error_and_a_reanalysis(analysed, github):  # noqa: F811
    """Only a sent comment clears the doubt that an earlier attempt posted one: not a final error on the marker search,
    a withholding, or a run stopped out of attempts. A re-analysis then looks before it posts."""
    _ship(analysed, github)
    github.drop_next("post_comment")  # applied, no answer
    _deliver(analysed, github)
    assert len(github.comments) == 1 and _unknown(analysed)
    _backoff_passes(analysed)
    github.fail_next("list_comments", (403, {}, {"message": "Resource not accessible"}))  # final
    _deliver(analysed, github)
    assert _rows(analysed)["review_comment"]["status"] == "failed" and _unknown(analysed)
    with analysed.begin() as conn:
        # a failed row is not waiting: untouched
        outbox.withhold_waiting(conn, "d-7", "too old", outbox.CODE_HOST_KINDS)
        conn.execute(sa.text("UPDATE radar.code_host_delivery SET status = 'pending' WHERE kind = 'review_comment'"))
        outbox.withhold_waiting(conn, "d-7", "too old", outbox.CODE_HOST_KINDS)
    assert _rows(analysed)["review_comment"]["status"] == "withheld" and _unknown(analysed)
    with analysed.begin() as conn:  # and the reconciler's withholding of rows past the alert age limit
        conn.execute(sa.text("UPDATE radar.code_host_delivery SET status = 'pending' WHERE kind = 'review_comment'"))
        assert withhold_old(conn, timedelta(0)) >= 1
    assert _rows(analysed)["review_comment"]["status"] == "withheld" and _unknown(analysed)

    analyse_deploy(AnalysisRun(analysed, SETTINGS, run_id="rerun-2"), "d-7")  # the same state (fail), a new analysis
    _deliver(analysed, github)
    assert len(github.comments) == 1 and len(github.calls_to("edit_comment")) == 1  # found, edited: not posted again
    assert _rows(analysed)["review_comment"]["status"] == "sent" and not _unknown(analysed)

    # A run stopped while sending, out of attempts: failed, and it may have posted.
    with analysed.begin() as conn:
        conn.execute(
            sa.text(
                "UPDATE radar.code_host_delivery SET status = 'sending', attempts = 99, outcome_unknown = false, "
                "claimed_at = now() - interval '1 day' WHERE kind = 'review_comment'"
            )
        )
        outbox.claim(conn, "d-7", outbox.CODE_HOST_KINDS, timedelta(minutes=15))
    assert _rows(analysed)["review_comment"]["status"] == "failed" and _unknown(analysed)


def test_a_deploy_no_longer_failed_gets_no_new_comment_after_a_doubt(analysed, github):  # noqa: F811
    """An earlier post's outcome is unknown; a re-analysis clears the deploy; the marker is looked for and not found:
    nothing is posted (a comment is started only for a failed deploy), and the doubt is settled."""
    _ship(analysed, github)
    github.fail_next("post_comment", (200, {}, ECHO))  # not applied; an answer that is not GitHub's: unknown
    _deliver(analysed, github)
    assert not github.comments and _unknown(analysed)
    analyse_deploy(AnalysisRun(analysed, dataclasses.replace(SETTINGS, threshold=9.0), run_id="rerun-2"), "d-7")
    _deliver(analysed, github)
    assert len(github.calls_to("list_comments")) == 1 and not github.comments
    row = _rows(analysed)["review_comment"]
    assert row["status"] == "skipped" and "none to edit" in row["last_error"] and not _unknown(analysed)


def test_a_reanalysis_does_not_take_a_comment_another_run_is_posting(analysed, github):  # noqa: F811
    """Run A has claimed the deliveries and is posting the first comment; a re-analysis's run B records its analysis
    but leaves the rows to A; A's outcome, older than what is recorded, puts them back to pending, and the next
    attempt edits A's comment: one comment."""
    from radar_pipeline.warehouse.analysis import deploy_states

    _ship(analysed, github)
    with analysed.begin() as conn:  # run A, as deliver does it, stopped before it sends
        first = deploy_states(conn, ["d-7"]).iloc[0]["analysed_at"]
        outbox.enqueue_code_host(conn, "d-7", ["commit_status", "deployment_status", "review_comment"], "fail", first)
        claimed = outbox.claim(conn, "d-7", outbox.CODE_HOST_KINDS, timedelta(minutes=15))
    analyse_deploy(AnalysisRun(analysed, SETTINGS, run_id="rerun-2"), "d-7")  # still fail, a newer analysis
    _deliver(analysed, github)  # run B
    assert not github.comments and not github.statuses
    assert {r["status"] for r in _rows(analysed).values()} == {"sending"}

    client = HostClient("github", github.api_url, TOKEN, TIMEOUT)  # run A posts, then records what it sent
    try:
        posted = client.post_comment(github.repository, Review(12), "<!-- radar:deploy=d-7 --> older analysis")
    finally:
        client.close()
    for row in claimed.rows:
        with analysed.begin() as conn:
            ids = {"12": posted} if row.kind == "review_comment" else None
            outbox.settle(conn, claimed, [row], "sent", remote_ids=ids)
    assert {r["status"] for r in _rows(analysed).values()} == {"pending"}  # what A sent is older: again
    _deliver(analysed, github)
    assert len(github.comments) == 1 and len(github.calls_to("edit_comment")) == 1
    assert "rerun-2" in github.comments[posted]["body"]
    assert {r["status"] for r in _rows(analysed).values()} == {"sent"}


def test_a_trickling_answer_is_bounded_and_an_attempt_has_a_time_budget(analysed, github, monkeypatch):  # noqa: F811
    """httpx bounds each read, and a host sending a byte per 0.2 s satisfies every read: a request has a wall-clock
    bound of its own, and an attempt starts no request once its budget is spent (its rows wait for the next one)."""
    from radar_pipeline.alerts import code_hosts

    monkeypatch.setattr(code_hosts, "REQUEST_BOUND", 1.0, raising=False)
    client = HostClient("github", github.api_url, TOKEN, 0.5)
    github.trickle_next("pulls", count=3)
    started = time.monotonic()
    try:
        with pytest.raises(HostError, match="no whole answer within 1 s"):
            client.reviews(github.repository, COMMIT)
    finally:
        client.close()
    assert time.monotonic() - started < 7.5 and len(github.calls_to("pulls")) == 3  # a GET: retried, each bounded

    monkeypatch.setattr(code_hosts, "ATTEMPT_BUDGET", 0.5, raising=False)
    _ship(analysed, github)
    github.calls.clear()
    github.trickle_next("status")
    started = time.monotonic()
    _deliver(analysed, github)
    assert time.monotonic() - started < 7.5
    rows = _rows(analysed)
    assert {r["status"] for r in rows.values()} == {"pending"}
    assert "time budget" in rows["review_comment"]["last_error"] and not _unknown(analysed)
    assert [len(github.calls_to(r)) for r in ("status", "deployment_status", "pulls")] == [1, 0, 0]


def test_only_a_comment_of_the_tokens_own_user_is_taken_for_ours(host):
    """Someone else's comment that quotes our marker is not ours to edit: the search takes only the token's user's
    comments (GET /user, asked once per client)."""
    marker = comment_marker("d-7")
    host.comments[900] = {"review": 12, "body": f"> {marker}\n> as radar said", "author": 5}
    client = HostClient(host.kind, host.api_url, TOKEN, TIMEOUT)
    try:
        assert client.find_comment(host.repository, Review(12), marker) is None
        ours = client.post_comment(host.repository, Review(12), f"{marker}\nradar")
        assert client.find_comment(host.repository, Review(12), marker) == ours
    finally:
        client.close()
    assert len(host.calls_to("user")) == 1
