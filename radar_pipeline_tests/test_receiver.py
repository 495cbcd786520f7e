"""`radar webhook serve`: the real receiver (the console script, uvicorn on loopback, stopped by its PID) in front of
the embedded PostgreSQL, fed as GitHub, GitLab and a CI job's curl feed it, and as a hostile client would.

The warehouse is test_gate's (st-pass passes, st-fail fails, st-unsure is inconclusive, st-open is pending): the
deploys posted here go to target st-pass, so the gate's answers over HTTP are checked on the same server.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from click.testing import CliRunner

from radar_pipeline.cli import main
from radar_pipeline.demo.local_postgres import free_port
from radar_pipeline.warehouse.database import make_engine

from .silent_proxy import SilentProxy
from .test_gate import TIMES, gate_url  # noqa: F401 - the module's warehouse is test_gate's

RADAR = str(Path(sys.executable).parent / "radar")
GITHUB_SECRET = "gh-hook-s3cret-value"
GITLAB_SECRET = "gl-hook-t0ken-value"
KUBE_SECRET = "kube-tools-t0ken-value"  # Argo CD's, Flux's and Rollouts'
DEPLOY_TOKEN = "deploy-token-0123456789"
GATE_TOKEN = "gate-token-0123456789ab"
BOTH_TOKEN = "both-token-0123456789ab"
LIMIT = 16 * 1024
TOKENS = [
    {"token": DEPLOY_TOKEN, "scopes": ["deploy"]},
    {"token": GATE_TOKEN, "scopes": ["gate"]},
    {"token": BOTH_TOKEN, "scopes": ["deploy", "gate"]},
]
SHA = "279484c09fbe69ededfced8c1bb6e6d24616b468"
DEADLINE_S = 60.0
# Every CI variable `radar deploy` reads, unset: the comparisons below give each CI's variables themselves.
MAIN = {"RADAR_TARGETS": "main=postgresql://nowhere.invalid/none"}  # the target the docs' snippets name
NO_CI = {name: None for name in ("CI", "GITHUB_ACTIONS", "GITLAB_CI", "GITHUB_RUN_ID", "CI_JOB_ID")}


@dataclass
class Served:
    """A receiver process and what it serves."""

    url: str
    warehouse: str
    proc: subprocess.Popen

    def post(self, source: str, body: bytes | str | dict, headers: dict[str, str] | None = None, **params: str):
        content = json.dumps(body).encode() if isinstance(body, dict) else body
        return httpx.post(f"{self.url}/v1/deploys/{source}", content=content, headers=headers or {}, params=params,
                          timeout=30)  # fmt: skip

    def gate(self, deploy_id: str, token: str | None = GATE_TOKEN, **params: str):
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.get(f"{self.url}/v1/deploys/{deploy_id}/gate", headers=headers, params=params, timeout=90)


def _serve(warehouse: str, extra: dict[str, str] | None = None) -> Served:
    """Start `radar webhook serve` and wait until /healthz answers."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RADAR_")}
    env.update(TIMES)
    env.update(
        {
            "RADAR_RECEIVER_GITHUB_SECRET": GITHUB_SECRET,
            "RADAR_RECEIVER_GITLAB_SECRET": GITLAB_SECRET,
            **{f"RADAR_RECEIVER_{tool}_SECRET": KUBE_SECRET for tool in ("ARGOCD", "FLUX", "ROLLOUTS")},
            "RADAR_RECEIVER_TOKENS": json.dumps(TOKENS),
            "RADAR_RECEIVER_MAX_BODY_BYTES": str(LIMIT),
            **MAIN,
            **(extra or {}),
        }
    )
    proc = subprocess.Popen(
        [RADAR, "webhook", "serve", "--port", str(port), "--warehouse", warehouse],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + DEADLINE_S
    while True:
        assert proc.poll() is None, f"the receiver ended: {proc.stdout.read() if proc.stdout else ''}"
        try:
            if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                return Served(url, warehouse, proc)
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, "the receiver did not come up"
        time.sleep(0.1)


def _stop(served: Served) -> None:
    os.kill(served.proc.pid, 15)
    try:
        served.proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.kill(served.proc.pid, 9)
        served.proc.wait(timeout=30)


@pytest.fixture(scope="module")
def served(gate_url) -> Iterator[Served]:  # noqa: F811
    receiver = _serve(gate_url)
    yield receiver
    _stop(receiver)


def _row(warehouse: str, deploy_id: str) -> dict[str, Any] | None:
    engine = make_engine(warehouse)
    with engine.connect() as conn:
        row = conn.execute(sa.text("SELECT * FROM radar.deploy_event WHERE deploy_id = :id"), {"id": deploy_id})
        found = row.mappings().fetchone()
    engine.dispose()
    return dict(found) if found is not None else None


def _count(warehouse: str) -> int:
    engine = make_engine(warehouse)
    with engine.connect() as conn:
        counted = conn.execute(sa.text("SELECT count(*) FROM radar.deploy_event")).scalar_one()
    engine.dispose()
    return int(counted)


def _facts(row: dict[str, Any] | None) -> dict[str, Any]:
    """A stored deploy's facts: what `radar deploy` and the receiver must agree on (not its id, source, arrival)."""
    assert row is not None
    return {k: v for k, v in row.items() if k not in ("deploy_id", "source", "received_at")}


def _radar_deploy(warehouse: str, args: list[str], env: dict[str, str | None] | None = None) -> str:
    result = CliRunner().invoke(main, ["deploy", *args, "--warehouse", warehouse], env={**NO_CI, **(env or {})})
    assert result.exit_code == 0, result.output
    return result.output


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _at(minutes_ago: int) -> datetime:
    return (datetime.now(UTC) - timedelta(minutes=minutes_ago)).replace(microsecond=0)


def _new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


# --- generic JSON (the curl of a CI job) ---------------------------------------------------------------------------


def _generic(deploy_id: str, at: datetime, **over: Any) -> dict[str, Any]:
    return {
        "deploy_id": deploy_id,
        "target": "st-pass",
        "deployed_at": at.isoformat(),
        "service": "shop ünïcødé 🚀",
        "version": "v2.1-ß",
        "url": "https://ci.example/runs/7?x=é",
        "commit_sha": SHA,
        "repository": "acme/shop",
        "code_host": "github",
        "api_url": "https://api.github.com",
        "run_url": "https://github.com/acme/shop/actions/runs/7",
        "github_deployment_id": 77,
        **over,
    }


def test_a_generic_deploy_stores_the_row_radar_deploy_would(served):
    at = _at(10)
    by_cli, by_http = _new_id("cli"), _new_id("http")
    body = {**_generic(by_http, at), "release_id": "2026.12.06-1", "canary_role": "shop_canary"}
    _radar_deploy(
        served.warehouse,
        ["--id", by_cli, "--target", "st-pass", "--at", at.isoformat(), "--service", body["service"], "--version",
         body["version"], "--url", body["url"], "--commit", SHA, "--repository", "acme/shop", "--code-host", "github",
         "--api-url", body["api_url"], "--run-url", body["run_url"], "--github-deployment", "77",
         "--release", "2026.12.06-1", "--canary-role", "shop_canary"],
    )  # fmt: skip
    answer = served.post("generic", body, _bearer(DEPLOY_TOKEN))
    assert answer.status_code == 201, answer.text
    assert answer.text == f"deploy {by_http} to st-pass at {at.isoformat()}: recorded\n"
    assert _facts(_row(served.warehouse, by_http)) == _facts(_row(served.warehouse, by_cli))
    assert _row(served.warehouse, by_http)["source"] == "webhook-generic"  # type: ignore[index]
    assert _facts(_row(served.warehouse, by_http))["canary_role"] == "shop_canary"

    again = served.post("generic", body, _bearer(BOTH_TOKEN))  # the same event again: idempotent
    assert again.status_code == 200 and again.text.endswith(": already recorded, unchanged\n"), again.text
    before = _row(served.warehouse, by_http)
    conflict = served.post("generic", {**body, "version": "v3"}, _bearer(DEPLOY_TOKEN))
    assert conflict.status_code == 409
    # a deploy token may not read what is stored: the fields that differ are named, their values are not
    assert conflict.text == f"deploy {by_http!r} is already recorded with other values (version); nothing changed\n"
    assert _row(served.warehouse, by_http) == before

    # the target as a query parameter, no time (recorded at the warehouse's clock), the fewest fields
    bare = _new_id("bare")
    plain = served.post("generic", {"deploy_id": bare}, _bearer(DEPLOY_TOKEN), target="st-pass")
    assert plain.status_code == 201, plain.text
    row = _row(served.warehouse, bare)
    assert row is not None and abs(row["deployed_at"] - datetime.now(UTC)) < timedelta(minutes=1)
    assert httpx.get(f"{served.url}/readyz", timeout=10).text == "ready\n"


FIELDS = ("deploy_id", "target", "deployed_at", "service", "version", "url", "commit_sha", "repository",
          "code_host", "api_url", "run_url")  # fmt: skip


@pytest.mark.parametrize("field", FIELDS)
@pytest.mark.parametrize("bad", ["\x1b[31mred", "a\nb", "\u202eevil", "nul\x00", "\x85c1"])
def test_control_characters_in_every_field_are_refused_and_nothing_is_stored(served, field, bad):
    deploy_id = _new_id("ctl")
    body = {**_generic(deploy_id, _at(5)), field: bad if field != "deploy_id" else deploy_id + bad}
    before = _count(served.warehouse)
    answer = served.post("generic", body, _bearer(DEPLOY_TOKEN))
    assert answer.status_code == 400, (field, answer.text)
    line = answer.text
    assert line.endswith("\n") and "\n" not in line[:-1] and "\x1b" not in line and "\u202e" not in line
    name = {"deploy_id": "deploy id", "commit_sha": "commit", "code_host": "code host"}.get(field, field)
    assert name in line, line
    assert _count(served.warehouse) == before and _row(served.warehouse, deploy_id) is None


def test_unicode_in_every_free_text_field_is_stored_exactly(served):
    deploy_id = _new_id("uni")
    text = "Zürich ✓ 日本語 🚀 ‮"[:-1] + "ﬁ"  # no control character: stored as it is
    body = _generic(deploy_id, _at(5), service=text, version=text, url="https://ex.example/ü?q=日本")
    answer = served.post("generic", body, _bearer(DEPLOY_TOKEN))
    assert answer.status_code == 201, answer.text
    row = _row(served.warehouse, deploy_id)
    assert row is not None and row["service"] == text and row["version"] == text
    assert row["url"] == "https://ex.example/ü?q=日本"


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"", "the body is not JSON"),
        (b"{", "the body is not JSON"),
        (b"[1]", "the body must be a JSON object, not list"),
        (b"\xff\xfe{}", "the body is not UTF-8"),
        (b'{"deploy_id": "x-1", "target": "st-pass", "github_deployment_id": NaN}', "NaN is not a JSON number"),
        (b'{"deploy_id": "x-1", "target": "st-pass", "service": "\\ud800"}', "service holds a lone surrogate"),
        (b"[" * 5000 + b"]" * 5000, "nested too deeply"),
        (b'{"target": "st-pass"}', "deploy_id is missing"),
        (b'{"deploy_id": "x-1"}', "target is missing"),
        (b'{"deploy_id": "x-1", "target": "st-pass", "colour": "red"}', "unknown field(s) 'colour'"),
        (
            json.dumps({"deploy_id": "x-1", "k" * 9000: 1, **{f"a{i}": 1 for i in range(9)}}).encode(),
            "unknown field(s) 'a0', 'a1', 'a2' and 7 more: the fields are deploy_id,",
        ),
        (json.dumps({"deploy_id": "x-1", "k" * 9000: 1}).encode(), f"unknown field(s) '{'k' * 40}…': the fields"),
        (b'{"deploy_id": 7, "target": "st-pass"}', "deploy_id must be a string, not int"),
        (b'{"deploy_id": "x-1", "target": "st-pass", "github_deployment_id": "7"}', "must be a positive whole"),
        (b'{"deploy_id": "x-1", "target": "nowhere"}', "target 'nowhere' is not known"),
        (b'{"deploy_id": "x-1", "target": "st-pass", "deployed_at": "2099-01-01T00:00:00Z"}', "ahead of the"),
        (b'{"deploy_id": "x-1", "target": "st-pass", "deployed_at": "yesterday"}', "not an ISO 8601 timestamp"),
        (b'{"deploy_id": "periodic:1", "target": "st-pass"}', "names periodic analyses"),
    ],
)
def test_bad_generic_bodies_get_a_one_line_reason(served, body, reason):
    before = _count(served.warehouse)
    answer = served.post("generic", body, _bearer(DEPLOY_TOKEN))
    assert answer.status_code == 400 and reason in answer.text, answer.text[:500]
    assert answer.text.count("\n") == 1 and len(answer.text) < 500
    assert _count(served.warehouse) == before


# --- GitHub deployment_status ----------------------------------------------------------------------------------------


def _github_payload(deployment: int, at: datetime, state: str = "success", **over: Any) -> dict[str, Any]:
    return {
        "action": "created",
        "deployment_status": {
            "id": deployment * 10,
            "state": state,
            "created_at": at.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "log_url": "https://github.com/acme/shop/actions/runs/555",
            "target_url": "https://github.com/acme/shop/actions/runs/555",
            "environment": "production",
        },
        "deployment": {"id": deployment, "sha": SHA, "ref": "main", "environment": "production", "task": "deploy"},
        "repository": {"full_name": "acme/shop", "url": "https://api.github.com/repos/acme/shop"},
        "sender": {"login": "octocat"},
        **over,
    }


def _github_headers(body: bytes, event: str = "deployment_status", delivery: str | None = None,
                    secret: str = GITHUB_SECRET) -> dict[str, str]:  # fmt: skip
    signature = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return {
        "Content-Type": "application/json",
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": delivery or str(uuid.uuid4()),
        "X-Hub-Signature-256": signature,
        "User-Agent": "GitHub-Hookshot/abc",
    }


def test_a_github_deployment_status_is_the_deploy_radar_deploy_records_in_that_run(served, tmp_path):
    at = _at(8)
    deployment = int(time.time() * 1000) % 10**9
    event_file = tmp_path / "event.json"
    event_file.write_text(json.dumps({"deployment": {"id": deployment}}))
    github_ci = {
        "GITHUB_ACTIONS": "true", "GITHUB_RUN_ID": "555", "GITHUB_RUN_ATTEMPT": "1", "GITHUB_REPOSITORY": "acme/shop",
        "GITHUB_SHA": SHA, "GITHUB_SERVER_URL": "https://github.com", "GITHUB_API_URL": "https://api.github.com",
        "GITHUB_EVENT_NAME": "deployment_status", "GITHUB_EVENT_PATH": str(event_file),
    }  # fmt: skip
    deploy_id = f"gh-deployment-{deployment}"
    _radar_deploy(served.warehouse, ["--id", deploy_id, "--target", "st-pass", "--at", at.isoformat()], github_ci)
    stored = _row(served.warehouse, deploy_id)
    body = json.dumps(_github_payload(deployment, at)).encode()
    delivery = str(uuid.uuid4())
    # every fact the webhook gives agrees with what `radar deploy` stored in that run: the same deploy, unchanged
    same = served.post("github", body, _github_headers(body, delivery=delivery), target="st-pass")
    assert same.status_code == 200 and same.text.endswith("already recorded, unchanged\n"), same.text
    assert _row(served.warehouse, deploy_id) == stored
    replay = served.post("github", body, _github_headers(body, delivery=delivery), target="st-pass")
    assert replay.status_code == 200 and replay.text == same.text, replay.text  # a redelivery: the same deploy
    other = json.dumps(_github_payload(deployment + 5, at)).encode()
    replay = served.post("github", other, _github_headers(other, delivery=delivery), target="st-pass")
    assert replay.status_code == 409 and replay.text == (
        f"refused: delivery {delivery!r} was received before with another deploy; nothing changed\n"
    ), replay.text

    fresh = json.dumps(_github_payload(deployment + 1, at)).encode()
    answer = served.post("github", fresh, _github_headers(fresh), target="st-pass", environment="production")
    assert answer.status_code == 201, answer.text
    row = _row(served.warehouse, f"gh-deployment-{deployment + 1}")
    assert row is not None and row["github_deployment_id"] == deployment + 1 and row["source"] == "webhook-github"
    assert _facts(row) == {**_facts(stored), "github_deployment_id": deployment + 1}


@pytest.mark.parametrize(
    ("change", "status", "reason"),
    [
        ({"event": "push"}, 202, "ignored: event 'push' is not deployment_status"),
        ({"event": "ping"}, 202, "ignored: event 'ping' is not deployment_status"),
        ({"state": "failure"}, 202, "ignored: deployment_status state 'failure' is not success"),
        ({"state": "in_progress"}, 202, "ignored: deployment_status state 'in_progress' is not success"),
        ({"environment": "staging"}, 202, "ignored: environment 'production' is not 'staging'"),
        ({"secret": "wrong-secret"}, 401, "X-Hub-Signature-256 does not match the body"),
        ({"drop": "X-Hub-Signature-256"}, 401, "X-Hub-Signature-256 is missing"),
        ({"drop": "X-GitHub-Event"}, 400, "X-GitHub-Event is missing"),
        ({"drop": "X-GitHub-Delivery"}, 400, "X-GitHub-Delivery is missing"),
        ({"tamper": True}, 401, "X-Hub-Signature-256 does not match the body"),
        ({"form": True}, 415, "set it to application/json"),
        ({"no_target": True}, 400, "no target: add ?target=<name>"),
        ({"payload": {"deployment": None}}, 400, "deployment is missing or not an object"),
        ({"payload": {"repository": {"full_name": "acme/shop\x1b[2J"}}}, 400, "'acme/shop\\x1b[2J' holds control"),
        ({"deployment": {"id": 5, "sha": "abc"}}, 400, "commit 'abc' is not a full commit SHA"),
        ({"deployment": {"id": -5, "sha": SHA}}, 400, "deployment.id must be a positive whole number"),
        ({"target": "st-pass\x07"}, 400, "target 'st-pass\\x07' holds control characters"),
        ({"delivery": "x" * 300}, 400, "the delivery id is not 1-200 printable ASCII characters"),
    ],
)
def test_github_deliveries_that_are_not_deploys(served, change, status, reason):
    payload = _github_payload(900_000 + len(reason), _at(3), change.get("state", "success"))
    payload.update(change.get("payload", {}))
    if "deployment" in change:
        payload["deployment"] = {**change["deployment"], "environment": "production"}
    body = json.dumps(payload).encode()
    headers = _github_headers(body, change.get("event", "deployment_status"), change.get("delivery"),
                              change.get("secret", GITHUB_SECRET))  # fmt: skip
    headers.pop(change.get("drop", ""), None)
    if change.get("form"):
        headers["Content-Type"] = "application/x-www-form-urlencoded"
    if change.get("tamper"):
        body = body.replace(b"acme/shop", b"evil/shop")
    params = {} if change.get("no_target") else {"target": change.get("target", "st-pass")}
    if "environment" in change:
        params["environment"] = change["environment"]
    before = _count(served.warehouse)
    answer = served.post("github", body, headers, **params)
    assert (answer.status_code, reason in answer.text) == (status, True), answer.text
    assert GITHUB_SECRET not in answer.text and _count(served.warehouse) == before


# --- GitLab deployment events ----------------------------------------------------------------------------------------


def _gitlab_payload(job: int, at: datetime, status: str = "success") -> dict[str, Any]:
    return {
        "object_kind": "deployment",
        "status": status,
        "status_changed_at": at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S +0000"),
        "deployment_id": job + 1,
        "deployable_id": job,
        "deployable_url": f"https://gitlab.example.com/group/shop/-/jobs/{job}",
        "environment": "production",
        "project": {"id": 30, "path_with_namespace": "group/shop", "web_url": "https://gitlab.example.com/group/shop"},
        "short_sha": SHA[:8],
        "commit_url": f"https://gitlab.example.com/group/shop/-/commit/{SHA}",
        "commit_title": "Add a file ✓",
    }


def _gitlab_headers(token: str = GITLAB_SECRET, uuid_: str | None = None,
                    event: str = "Deployment Hook") -> dict[str, str]:  # fmt: skip
    return {"X-Gitlab-Event": event, "X-Gitlab-Token": token, "X-Gitlab-Event-UUID": uuid_ or str(uuid.uuid4()),
            "Content-Type": "application/json"}  # fmt: skip


def test_a_gitlab_deployment_event_is_the_deploy_radar_deploy_records_in_that_job(served):
    at = _at(7)
    job = int(time.time() * 1000) % 10**9
    gitlab_ci = {
        "GITLAB_CI": "true", "CI_JOB_ID": str(job), "CI_PROJECT_PATH": "group/shop", "CI_COMMIT_SHA": SHA,
        "CI_COMMIT_SHORT_SHA": SHA[:8], "CI_JOB_URL": f"https://gitlab.example.com/group/shop/-/jobs/{job}",
        "CI_API_V4_URL": "https://gitlab.example.com/api/v4",
    }  # fmt: skip
    # `radar deploy` in the job, as a pipeline runs it: at the warehouse's clock, with microseconds
    _radar_deploy(served.warehouse, ["--target", "st-pass"], gitlab_ci)
    stored = _row(served.warehouse, f"gl-{job}")
    assert stored is not None and stored["source"] == "gitlab-ci" and stored["deployed_at"].microsecond != 0
    # GitLab's webhook when the job ends, at the status's change (later, whole seconds): the same deploy, its first
    # time kept
    ended = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=2)
    event = str(uuid.uuid4())
    same = served.post("gitlab", _gitlab_payload(job, ended), _gitlab_headers(uuid_=event), target="st-pass")
    assert same.status_code == 200 and same.text.endswith("already recorded, unchanged\n"), same.text
    assert same.text == f"deploy gl-{job} to st-pass: already recorded, unchanged\n"  # not the stored time
    assert stored["deployed_at"].isoformat() not in same.text and "+00:00" not in same.text
    assert _row(served.warehouse, f"gl-{job}") == stored
    # GitLab sends the delivery again (its answer was lost): the deploy it stored, unchanged
    replay = served.post("gitlab", _gitlab_payload(job, ended), _gitlab_headers(uuid_=event), target="st-pass")
    assert replay.status_code == 200 and replay.text == same.text, replay.text
    # that delivery's id with another deploy in it is refused
    other = served.post("gitlab", _gitlab_payload(job + 7, ended), _gitlab_headers(uuid_=event), target="st-pass")
    assert other.status_code == 409 and other.text == (
        f"refused: delivery {event!r} was received before with another deploy; nothing changed\n"
    ), other.text
    assert _row(served.warehouse, f"gl-{job + 7}") is None
    # another project's job with that id is not this job: refused, the fields named and not their stored values
    elsewhere = _gitlab_payload(job, ended)
    elsewhere["project"] = {**elsewhere["project"], "path_with_namespace": "other/app"}
    refused = served.post("gitlab", elsewhere, _gitlab_headers(), target="st-pass")
    assert (
        refused.status_code == 409
        and "(service, repository, api_url)" in refused.text
        and "group/shop" not in refused.text
    )
    assert _row(served.warehouse, f"gl-{job}") == stored

    fresh = served.post("gitlab", _gitlab_payload(job + 1, at), _gitlab_headers(), target="st-pass")
    assert fresh.status_code == 201, fresh.text
    row = _row(served.warehouse, f"gl-{job + 1}")
    job_url = f"https://gitlab.example.com/group/shop/-/jobs/{job + 1}"
    assert _facts(row) == {**_facts(stored), "url": job_url, "run_url": job_url, "deployed_at": at}


@pytest.mark.parametrize(
    ("change", "status", "reason"),
    [
        ({"token": "not-the-token"}, 401, "X-Gitlab-Token is not RADAR_RECEIVER_GITLAB_SECRET"),
        ({"token": ""}, 401, "X-Gitlab-Token is missing"),
        ({"token": GITLAB_SECRET + "x"}, 401, "X-Gitlab-Token is not"),
        ({"event": "Push Hook"}, 202, "ignored: event 'Push Hook' is not 'Deployment Hook'"),
        ({"status": "running"}, 202, "ignored: deployment status 'running' is not success"),
        ({"status": "failed"}, 202, "ignored: deployment status 'failed' is not success"),
        ({"drop": "project"}, 400, "project is missing or not an object"),
        ({"drop": "status_changed_at"}, 400, "status_changed_at is missing"),
        ({"set": {"object_kind": "push"}}, 400, "object_kind is not 'deployment'"),
        ({"set": {"status_changed_at": "soon"}}, 400, "status_changed_at 'soon' is not an ISO 8601 timestamp"),
        ({"set": {"short_sha": "27\u202e94"}}, 400, "version '27\\u202e94' holds control characters"),
        ({"set": {"deployable_url": "javascript:alert(1)"}}, 400, "is not an http(s) URL"),
    ],
)
def test_gitlab_deliveries_that_are_not_deploys(served, change, status, reason):
    payload: dict[str, Any] = _gitlab_payload(800_000 + len(reason), _at(3), change.get("status", "success"))
    payload.pop(change.get("drop", ""), None)
    payload.update(change.get("set", {}))
    headers = _gitlab_headers(change.get("token", GITLAB_SECRET), event=change.get("event", "Deployment Hook"))
    before = _count(served.warehouse)
    answer = served.post("gitlab", payload, headers, target="st-pass")
    assert (answer.status_code, reason in answer.text) == (status, True), answer.text
    assert GITLAB_SECRET not in answer.text and _count(served.warehouse) == before


# --- sizes, tokens, sources ------------------------------------------------------------------------------------------


def _raw(port: int, head: bytes, parts: Iterable[bytes]) -> str:
    """Send a request by hand (headers, then the parts, stopping quietly when the server has closed) and return
    the first line of its answer, read until the server closes the connection (the test fails if it does not
    within DEADLINE_S: a refused body's rest is not waited for)."""
    with socket.create_connection(("127.0.0.1", port), timeout=DEADLINE_S) as sock:
        sock.sendall(head)
        try:
            for part in parts:
                sock.sendall(part)
        except (BrokenPipeError, ConnectionResetError):
            pass
        answer = b""
        try:
            while True:
                got = sock.recv(4096)
                if not got:
                    break
                answer += got
        except ConnectionResetError:
            pass
    assert answer.count(b"HTTP/1.1 ") == 1, answer  # one answer: nothing in a body is read as a request
    return answer.split(b"\r\n", 1)[0].decode()


def _head(length: str | None, token: str = DEPLOY_TOKEN) -> bytes:
    framing = f"Content-Length: {length}" if length is not None else "Transfer-Encoding: chunked"
    return (f"POST /v1/deploys/generic HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
            f"Content-Type: application/json\r\n{framing}\r\n\r\n").encode()  # fmt: skip


def test_oversized_bodies_are_refused_while_they_arrive(served):
    port = int(served.url.rsplit(":", 1)[1])
    before = _count(served.warehouse)
    # said too large: refused before a byte of the body is read
    assert _raw(port, _head(str(10**12)), []) == "HTTP/1.1 413 Request Entity Too Large"
    # sent whole, past the limit: refused, and the connection closed (what the body holds is never read as requests)
    smuggled = (b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n" * 1000)[: LIMIT + 1000]
    assert _raw(port, _head(str(len(smuggled))), [smuggled]) == "HTTP/1.1 413 Request Entity Too Large"
    # chunked, past the limit and never ended: refused as the limit is passed (waiting for its end would be 408)
    chunk = b"2000\r\n" + b" " * 0x2000 + b"\r\n"
    assert _raw(port, _head(None), [chunk] * (LIMIT // 0x2000 + 1)) == "HTTP/1.1 413 Request Entity Too Large"
    # an ordinary JSON body over the limit
    big = json.dumps({**_generic("big-1", _at(2)), "service": "x" * LIMIT}).encode()
    answer = served.post("generic", big, _bearer(DEPLOY_TOKEN))
    assert answer.status_code == 413 and answer.text == f"the body is larger than {LIMIT} bytes\n"
    # a Content-Length that lies low: only that much is the request (not JSON), the rest is not read as a body
    valid = json.dumps(_generic("lie-1", _at(2))).encode()
    assert _raw(port, _head("20"), [valid + b" " * LIMIT * 4]) == "HTTP/1.1 400 Bad Request"
    assert _count(served.warehouse) == before and _row(served.warehouse, "lie-1") is None


def test_headers_past_their_bound_are_refused_before_the_app(served):
    port = int(served.url.rsplit(":", 1)[1])
    pad = b"X-Pad: " + b"a" * 1_000_000 + b"\r\n"  # arrives in pieces: refused once 16 KiB are buffered unended
    assert _raw(port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + pad + b"\r\n", []) == "HTTP/1.1 400 Bad Request"


def test_a_body_that_stops_arriving_is_given_up(served):
    port = int(served.url.rsplit(":", 1)[1])
    started = time.monotonic()
    assert _raw(port, _head("500"), [b'{"deploy_id": ']) == "HTTP/1.1 408 Request Timeout"
    assert time.monotonic() - started < 30


def test_scoped_tokens_each_way(served):
    deploy_id = _new_id("scope")
    body = _generic(deploy_id, _at(4))
    # a read token cannot record
    refused = served.post("generic", body, _bearer(GATE_TOKEN))
    assert refused.status_code == 403 and "may not record deploys" in refused.text
    for headers, reason in (
        ({}, "Authorization is missing"),
        (_bearer("unknown-token-0123456789"), "the bearer token is not known here"),
        ({"Authorization": f"Basic {DEPLOY_TOKEN}"}, "Authorization is missing"),
    ):
        answer = served.post("generic", body, headers)
        assert answer.status_code == 401 and reason in answer.text, answer.text
    assert _row(served.warehouse, deploy_id) is None
    # a deploy token records, and cannot read a gate (nor learn whether the deploy exists)
    assert served.post("generic", body, _bearer(DEPLOY_TOKEN)).status_code == 201
    for deploy in (deploy_id, "st-fail", "nope-1"):
        answer = served.gate(deploy, token=DEPLOY_TOKEN)
        assert answer.status_code == 403 and answer.text == "this token may not read the gate (its scopes: deploy)\n"
    assert served.gate("st-fail", token=None).status_code == 401
    assert served.gate("st-fail", token="unknown-token-0123456789").status_code == 401
    assert served.gate("st-fail", token=BOTH_TOKEN).status_code == 409
    # the source secrets are not tokens
    assert served.gate("st-fail", token=GITHUB_SECRET).status_code == 401
    assert served.post("github", body, _bearer(DEPLOY_TOKEN), target="st-pass").status_code == 401
    # which sources are enabled is not told
    assert served.post("nosuch", body, _bearer(DEPLOY_TOKEN)).text == "no source 'nosuch' here\n"


@pytest.mark.parametrize("deploy_id", ["gh-deployment-5", "gl-deployment-6", "argocd:shop:1f2e", "flux-ks:a.b:9",
                                       "flux-hr:a.b:9", "rollout:apps.shop:7"])  # fmt: skip
def test_a_deploy_token_can_neither_claim_another_source_s_ids_nor_list_targets(served, deploy_id):
    answer = served.post("generic", _generic(deploy_id, _at(3)), _bearer(DEPLOY_TOKEN))
    assert answer.status_code == 400 and answer.text.startswith(f"deploy_id {deploy_id!r} starts with "), answer.text
    assert _row(served.warehouse, deploy_id) is None
    unknown = served.post("generic", _generic(_new_id("tg"), _at(3), target="nope-db"), _bearer(DEPLOY_TOKEN))
    assert (unknown.status_code, unknown.text) == (400, "target 'nope-db' is not known here\n")
    own = _new_id("gl-ci")  # an id of no source's: the caller's own (gl-<job id> included: the CI's id)
    assert served.post("generic", _generic(own, _at(3)), _bearer(DEPLOY_TOKEN)).status_code == 201


def _kube_bodies() -> dict[str, dict[str, Any]]:
    from .test_receiver_sources import ARGOCD, FLUX_KS, ROLLOUT

    return {"argocd": ARGOCD, "flux": FLUX_KS, "rollouts": ROLLOUT}


def _leaves(node: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """The path of every string in a JSON value."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _leaves(value, (*path, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _leaves(value, (*path, i))
    elif isinstance(node, str):
        yield path


def _set(payload: Any, path: tuple[Any, ...], value: Any) -> Any:
    changed = json.loads(json.dumps(payload))
    node = changed
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return changed


def test_lone_surrogates_in_every_field_of_every_source_are_refused_not_a_500(served):
    bodies: dict[str, tuple[Any, dict[str, str]]] = {
        "generic": (_generic(_new_id("sur"), _at(3)), {}),
        "github": (_github_payload(900_001, _at(3)), {"target": "st-pass"}),
        "gitlab": (_gitlab_payload(900_002, _at(3)), {"target": "st-pass"}),
        **{name: (body, {}) for name, body in _kube_bodies().items()},
    }
    bodies["flux"] = (bodies["flux"][0], {"target": "main"})
    before = _count(served.warehouse)
    tried, wrong = 0, []
    for source, (good, params) in bodies.items():
        for path in _leaves(good):
            for bad in (_set(good, path, _value(good, path) + "\ud800x"), _set(good, path[:-1] + ("k\udfff",), "v")):
                raw = json.dumps(bad).encode()  # ASCII: the surrogate as its \\ud800 escape
                if source == "github":
                    headers = _github_headers(raw)
                elif source == "gitlab":
                    headers = _gitlab_headers()
                else:
                    headers = _bearer(DEPLOY_TOKEN if source == "generic" else KUBE_SECRET)
                answer = served.post(source, raw, headers, **params)
                if answer.status_code != 400 or "lone surrogate" not in answer.text:
                    wrong.append((source, path, answer.status_code, answer.text))
                tried += 1
    assert not wrong and tried > 100, wrong
    assert _count(served.warehouse) == before


def _value(payload: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        payload = payload[key]
    return payload


def test_health_is_answered_while_a_body_is_being_read():
    """A source's check and reading of a body run off the event loop: /healthz (and every other request) is
    answered while one is slow. The source here blocks until the test has had its health answer."""
    import asyncio
    import threading
    import types

    from radar_pipeline.receiver.app import Receiver, make_app
    from radar_pipeline.receiver.sources.base import Refused

    started, release = threading.Event(), threading.Event()

    def parse(headers: Any, body: bytes, params: Any) -> Any:
        started.set()
        release.wait(20)
        raise Refused(400, f"read after the health answer: {release.is_set()}")

    slow = types.ModuleType("slow")
    slow.NAME, slow.authenticate, slow.parse = "slow", lambda headers, body, secret: None, parse  # type: ignore[attr-defined]
    receiver = Receiver("postgresql+psycopg://radar@127.0.0.1:1/radar", {"slow": (slow, ["s3cret"])}, [], 1024)

    async def exchange() -> tuple[int, bool, httpx.Response]:
        transport = httpx.ASGITransport(app=make_app(receiver))
        async with httpx.AsyncClient(transport=transport, base_url="http://receiver", timeout=60) as client:
            post = asyncio.create_task(client.post("/v1/deploys/slow", content=b"{}"))
            assert await asyncio.to_thread(started.wait, DEADLINE_S)
            health = await client.get("/healthz")
            pending = not post.done()
            release.set()
            return health.status_code, pending, await post

    try:
        status, pending, posted = asyncio.run(exchange())
    finally:
        release.set()
        receiver.engine.dispose()
    assert (status, pending) == (200, True)
    assert (posted.status_code, posted.text) == (400, "read after the health answer: True\n")


def test_a_warehouse_refusing_a_value_is_a_one_line_400_and_failing_otherwise_a_503(gate_url):  # noqa: F811
    import asyncio

    from radar_pipeline.receiver.app import in_worker
    from radar_pipeline.receiver.sources.base import Refused

    engine = make_engine(gate_url)

    def run(sql: str) -> None:
        with engine.begin() as conn:
            for statement in sql.split(";"):
                conn.execute(sa.text(statement))

    cases = {
        "SELECT CAST('not-a-number-s3cret' AS integer)": 400,  # DataError
        "CREATE TEMP TABLE t (x int NOT NULL); INSERT INTO t VALUES (NULL)": 400,  # IntegrityError
        "DO $$ BEGIN RAISE EXCEPTION 'internal s3cret'; END $$": 503,  # InternalError: any other DBAPIError
    }
    try:
        for sql, status in cases.items():
            with pytest.raises(Refused) as caught:
                asyncio.run(in_worker(gate_url, run, sql))
            assert caught.value.status == status and "s3cret" not in caught.value.reason, caught.value.reason
            assert "\n" not in caught.value.reason
    finally:
        engine.dispose()


def test_a_deploy_answered_503_at_the_deadline_is_not_stored_after_it_and_its_redelivery_records_it(served):
    """A warehouse slow enough to pass the 8 s deadline with statements each shorter than their own 5 s bound: the
    request is answered 503, and its transaction must not commit afterwards (else GitHub's redelivery, same
    X-GitHub-Delivery, would find the delivery stored)."""
    from concurrent.futures import ThreadPoolExecutor

    deployment = 910_000 + int(time.time()) % 10_000
    body = json.dumps(_github_payload(deployment, _at(2))).encode()
    headers = _github_headers(body)
    engine = make_engine(served.warehouse)
    try:
        with engine.connect() as deploys_lock, engine.connect() as deliveries_lock:
            deploys_lock.execute(sa.text("LOCK TABLE radar.deploy_event IN EXCLUSIVE MODE"))
            deliveries_lock.execute(sa.text("LOCK TABLE radar.webhook_delivery IN EXCLUSIVE MODE"))
            with ThreadPoolExecutor(1) as pool:
                started = time.monotonic()
                sent = pool.submit(served.post, "github", body, headers, target="st-pass")
                # the deploy's INSERT waits 4 s for its table, then the delivery's INSERT for the other one
                while time.monotonic() - started < 4.0:
                    assert not sent.done(), sent.result().text
                    time.sleep(0.05)
                deploys_lock.rollback()
                answer = sent.result(timeout=60)
            assert answer.status_code == 503, answer.text
            deliveries_lock.rollback()  # the abandoned transaction may go on now: it must not commit
        again = served.post("github", body, headers, target="st-pass")  # waits for that transaction's end
        assert again.status_code == 201, again.text
        assert _row(served.warehouse, f"gh-deployment-{deployment}") is not None
    finally:
        engine.dispose()


# --- the gate over HTTP ----------------------------------------------------------------------------------------------


def test_the_gate_over_http_answers_as_radar_gate_does(served):
    for deploy_id, status, state, code in (
        ("st-pass", 200, "pass", 0),
        ("st-fail", 409, "fail", 1),
        ("st-unsure", 422, "inconclusive", 3),
        ("st-open", 202, "pending", 4),
    ):
        answer = served.gate(deploy_id)
        assert answer.status_code == status and answer.headers["content-type"] == "application/json", answer.text
        found = answer.json()
        assert found["state"] == state and found["exit_code"] == code
        cli = CliRunner().invoke(main, ["gate", deploy_id, "--format", "json", "--warehouse", served.warehouse],
                                 env={"COLUMNS": None, **TIMES})  # fmt: skip
        assert cli.exit_code == code
        expected = json.loads(cli.stdout)
        if state == "pending":  # how far the window is from closing moves with the clock; the rest does not
            assert found["deploy"] == expected["deploy"]
        assert found == expected if state != "pending" else found["counts"] == expected["counts"]
    ok = served.gate("st-unsure", inconclusive_ok="1")
    assert ok.status_code == 200 and ok.json()["exit_code"] == 0
    assert served.gate("st-fail").json()["detections"][0]["queryid"] == 1

    started = time.monotonic()
    waited = served.gate("st-open", wait="2s")
    assert waited.status_code == 202 and 2 <= time.monotonic() - started < 20
    capped = served.gate("st-pass", wait="45m")  # capped, and not waited at all: it is decided
    assert capped.status_code == 200
    assert served.gate("nope-1").status_code == 404 and served.gate("nope-1").text == (
        "deploy 'nope-1' is not recorded\n"
    )
    assert served.gate("st-pass", wait="soon").status_code == 400


def test_refusing_to_start_without_a_secret():
    base = {k: None for k in os.environ if k.startswith("RADAR_")}
    url = "postgresql+psycopg://radar@127.0.0.1:1/radar"
    for env, message in (
        ({}, "nothing to serve: set a source's secret"),
        ({"RADAR_RECEIVER_SOURCES": "github"}, "RADAR_RECEIVER_SOURCES enables github but RADAR_RECEIVER_GITHUB_"),
        ({"RADAR_RECEIVER_SOURCES": "generic", "RADAR_RECEIVER_TOKENS": json.dumps(TOKENS[1:2])},
         "enables generic but RADAR_RECEIVER_TOKENS (a token whose scopes include deploy) is not set"),
        ({"RADAR_RECEIVER_SOURCES": "gitlab,nope", "RADAR_RECEIVER_GITLAB_SECRET": GITLAB_SECRET},
         "names 'nope', which is"),
        ({"RADAR_RECEIVER_TOKENS": "[{\"token\": \"sh0rt\", \"scopes\": [\"deploy\"]}]"}, "shorter than 16"),
        ({"RADAR_RECEIVER_TOKENS": json.dumps([{**TOKENS[0], "scopes": ["admin"]}])}, "scopes must be"),
        ({"RADAR_RECEIVER_TOKENS": "not json " + DEPLOY_TOKEN}, "RADAR_RECEIVER_TOKENS is not JSON"),
    ):  # fmt: skip
        result = CliRunner().invoke(main, ["webhook", "serve", "--warehouse", url], env={**base, **env})
        assert result.exit_code == 1 and message in result.output, result.output
        assert DEPLOY_TOKEN not in result.output and "sh0rt" not in result.output


def test_a_warehouse_down_is_503_at_once_and_health_still_answers():
    down = _serve(f"postgresql+psycopg://radar:Hid%2Fden9@127.0.0.1:{free_port()}/radar")
    try:
        started = time.monotonic()
        answer = down.post("generic", _generic("down-1", _at(1)), _bearer(DEPLOY_TOKEN))
        assert answer.status_code == 503 and time.monotonic() - started < 10, answer.text
        assert answer.text.startswith("the warehouse did not answer: OperationalError: ") and "Hid" not in answer.text
        assert down.gate("st-pass").status_code == 503
        assert httpx.get(f"{down.url}/healthz", timeout=10).status_code == 200
        ready = httpx.get(f"{down.url}/readyz", timeout=10)
        assert ready.status_code == 503 and "Hid" not in ready.text
        # asked without a token: nothing of the warehouse's address or role (issue 40), the log says why
        assert ready.text == "not ready: the warehouse does not answer as radar's (the receiver's log says why)\n"
    finally:
        _stop(down)


def test_a_warehouse_gone_silent_is_503_at_the_deadline(served, pg18):
    database = served.warehouse.rsplit("/", 1)[1]
    with SilentProxy("127.0.0.1", pg18.pg.port) as proxy:
        silent = _serve(f"postgresql+psycopg://postgres:Hid%2Fden9@127.0.0.1:{proxy.port}/{database}?sslmode=disable")
        try:
            started = time.monotonic()
            answer = silent.post("generic", _generic("silent-1", _at(1)), _bearer(DEPLOY_TOKEN))
            assert answer.status_code == 503 and answer.text == "the warehouse did not answer within 8 s\n"
            assert time.monotonic() - started < 30
            assert httpx.get(f"{silent.url}/healthz", timeout=10).status_code == 200  # the process is not stuck
            ready = httpx.get(f"{silent.url}/readyz", timeout=10)
            assert ready.status_code == 503 and ready.text.startswith("not ready: "), ready.text
        finally:
            proxy.release()
            _stop(silent)
    assert _row(served.warehouse, "silent-1") is None


def test_the_same_delivery_or_deploy_at_the_same_moment_is_stored_once(served):
    from concurrent.futures import ThreadPoolExecutor

    deployment = 700_000 + int(time.time()) % 10_000
    body = json.dumps(_github_payload(deployment, _at(2))).encode()
    headers = _github_headers(body)  # one delivery, sent eight times at once
    deploy_id = _new_id("race")
    variants = [_generic(deploy_id, _at(2), version=f"v{i}") for i in range(8)]  # one id, eight different events
    with ThreadPoolExecutor(max_workers=16) as pool:
        same = list(pool.map(lambda _: served.post("github", body, headers, target="st-pass"), range(8)))
        rival = list(pool.map(lambda b: served.post("generic", b, _bearer(DEPLOY_TOKEN)), variants))
    assert sorted(a.status_code for a in same) == [200] * 7 + [201], [a.text for a in same]
    assert all("already recorded" in a.text for a in same if a.status_code == 200)
    assert sorted(a.status_code for a in rival) == [201] + [409] * 7, [a.text for a in rival]
    won = next(b for b, a in zip(variants, rival, strict=True) if a.status_code == 201)
    assert _row(served.warehouse, deploy_id)["version"] == won["version"]  # type: ignore[index]


def test_the_gate_over_http_waits_for_an_analysis_made_while_it_waits(served):
    from concurrent.futures import ThreadPoolExecutor

    from radar_pipeline.steps.deploy_analysis import AnalysisRun, analyse_deploy

    from .test_deploy_state import SETTINGS

    assert served.gate("st-late").status_code == 202
    with ThreadPoolExecutor(max_workers=1) as pool:
        started = time.monotonic()
        waiting = pool.submit(served.gate, "st-late", wait="60s")  # open while the analysis (a second or more) runs
        engine = make_engine(served.warehouse)
        analyse_deploy(AnalysisRun(engine, SETTINGS), "st-late")
        engine.dispose()
        answer = waiting.result(timeout=DEADLINE_S)
    assert answer.status_code == 200 and answer.json()["state"] == "pass"
    assert time.monotonic() - started < 55  # answered once decided, not at the end of the wait


def _analysed_like(warehouse: str, deploy_id: str, like: str) -> None:
    """Record `deploy_id` on `like`'s target at its time, and analyse it: the same state as `like`."""
    from radar_pipeline.steps.deploy_analysis import AnalysisRun, analyse_deploy
    from radar_pipeline.warehouse import deploys

    from .test_deploy_state import SETTINGS

    engine = make_engine(warehouse)
    with engine.connect() as conn:
        stored = deploys.get(conn, like)
    assert stored is not None
    deploys.record(engine, deploys.DeployEvent(deploy_id, stored.target, stored.deployed_at))
    analyse_deploy(AnalysisRun(engine, SETTINGS), deploy_id)
    engine.dispose()


def _run_script(script: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG")}
    return subprocess.run(["bash", "-ec", script], env={**base, **env}, cwd=cwd, capture_output=True, text=True,
                          timeout=DEADLINE_S * 2)  # fmt: skip


def test_the_documented_ci_snippets_deploy_and_gate_with_curl_only(served, tmp_path):
    import re

    import yaml

    text = (Path(__file__).resolve().parents[1] / "docs" / "receiver.md").read_text()
    github = yaml.safe_load(re.search(r"```yaml\n(# GitHub Actions.*?)```", text, re.S).group(1))  # type: ignore[union-attr]
    gitlab = yaml.safe_load(re.search(r"```yaml\n(# GitLab CI.*?)```", text, re.S).group(1))  # type: ignore[union-attr]
    run = int(time.time() * 1000) % 10**9
    github_ci = {
        "GITHUB_ACTIONS": "true", "GITHUB_RUN_ID": str(run), "GITHUB_RUN_ATTEMPT": "1",
        "GITHUB_REPOSITORY": "acme/shop", "GITHUB_SHA": SHA, "GITHUB_SERVER_URL": "https://github.com",
        "GITHUB_API_URL": "https://api.github.com",
    }  # fmt: skip
    report, gate = github
    # the snippet's deploy is the one `radar deploy` records in the same run: posted after it, nothing differs
    _radar_deploy(served.warehouse, [], {**github_ci, **MAIN, "RADAR_DEPLOY_TARGET": "main"})
    stored = _row(served.warehouse, f"gh-{run}-1")
    env = {**github_ci, "RADAR_URL": served.url, "TOKEN": DEPLOY_TOKEN}
    posted = _run_script(report["run"], env, tmp_path)
    assert posted.returncode == 0 and posted.stdout.endswith(": already recorded, unchanged\n"), posted
    assert _row(served.warehouse, f"gh-{run}-1") == stored
    # the gate step passes on a deploy that passes and fails on one that fails, the answer printed
    _analysed_like(served.warehouse, f"gh-{run + 1}-1", "st-pass")
    _analysed_like(served.warehouse, f"gh-{run + 2}-1", "st-fail")
    for offset, code, state in ((1, 0, "pass"), (2, 1, "fail")):
        env = {**github_ci, "GITHUB_RUN_ID": str(run + offset), "RADAR_URL": served.url, "TOKEN": GATE_TOKEN}
        answer = _run_script(gate["run"], env, tmp_path)
        assert answer.returncode == code and f'"state": "{state}"' in answer.stdout, answer

    job = run + 10
    gitlab_ci = {
        "CI_JOB_ID": str(job), "CI_PROJECT_PATH": "group/shop", "CI_COMMIT_SHA": SHA, "CI_COMMIT_SHORT_SHA": SHA[:8],
        "CI_JOB_URL": f"https://gitlab.example.com/group/shop/-/jobs/{job}",
        "CI_API_V4_URL": "https://gitlab.example.com/api/v4",
        "RADAR_URL": served.url, "RADAR_DEPLOY_TOKEN": DEPLOY_TOKEN, "RADAR_GATE_TOKEN": GATE_TOKEN,
    }  # fmt: skip
    # the report is in the job that deploys (the one with `environment:`), after its rollout: GitLab's deployment
    # event names that job, so the webhook, if set up too, is the same deploy (one, not two)
    deploy_job = gitlab["deploy"]
    assert deploy_job["environment"] and gitlab["radar-gate"]["needs"] == ["deploy"]
    rollout, *report = deploy_job["script"]
    assert "curl" not in rollout and any("/v1/deploys/generic" in line for line in report)
    for line in report:
        done = _run_script(line, gitlab_ci, tmp_path)
        assert done.returncode == 0, done
    assert (tmp_path / "deploy.env").read_text() == f"DEPLOY_ID=gl-{job}\n"
    ended = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=2)
    hook = served.post("gitlab", _gitlab_payload(job, ended), _gitlab_headers(), target="main")
    assert (hook.status_code, hook.text) == (200, f"deploy gl-{job} to main: already recorded, unchanged\n")
    _radar_deploy(
        served.warehouse, ["--id", f"gl-{job}-cli", "--target", "main"], {**gitlab_ci, **MAIN, "GITLAB_CI": "true"}
    )
    assert _facts(_row(served.warehouse, f"gl-{job}")) == {
        **_facts(_row(served.warehouse, f"gl-{job}-cli")),
        "deployed_at": _row(served.warehouse, f"gl-{job}")["deployed_at"],  # type: ignore[index]
    }
    (gate_script,) = gitlab["radar-gate"]["script"]
    for offset, code in ((1, 0), (2, 1)):
        answer = _run_script(gate_script, {**gitlab_ci, "DEPLOY_ID": f"gh-{run + offset}-1"}, tmp_path)
        assert answer.returncode == code, answer
