"""Deploy events: validation with the field named, idempotence, conflicts, CI variables and CSV import."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
import sqlalchemy as sa

from radar_pipeline.ci_env import ci_defaults, ci_warnings
from radar_pipeline.warehouse import deploys
from radar_pipeline.warehouse.deploys import DeployError, DeployEvent

from .silent_proxy import pipe

BIN = Path(sys.executable).parent


def _rows(warehouse) -> list[tuple]:
    with warehouse.connect() as conn:
        return [tuple(r) for r in conn.execute(sa.text("SELECT * FROM radar.deploy_event ORDER BY deploy_id"))]


def test_record_is_idempotent_and_refuses_conflicts(known):
    at = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)
    event = DeployEvent("d-1", "main", at, service="api", version="abc123", url="https://ci.example/1")
    assert deploys.record(known, event).inserted
    before = _rows(known)
    again = deploys.record(known, event)
    assert not again.inserted and _rows(known) == before
    same_instant = DeployEvent(
        "d-1", "main", at.astimezone(timezone(timedelta(hours=2))), "api", "abc123", url="https://ci.example/1"
    )
    assert not deploys.record(known, same_instant).inserted
    with pytest.raises(
        DeployError, match=r"already recorded with other values \(version: stored 'abc123', given 'zzz'\)"
    ):
        deploys.record(known, DeployEvent("d-1", "main", at, service="api", version="zzz", url="https://ci.example/1"))
    assert _rows(known) == before


def test_one_gitlab_job_s_ci_step_and_webhook_are_one_deploy_whichever_comes_first(known):
    """Their times differ by design (the step ran before the job ended): the first stands, each way; another id, or
    two reports from the same path, still conflict on their time."""
    at = datetime(2026, 11, 29, 10, 0, 0, 123456, tzinfo=UTC)
    ended = datetime(2026, 11, 29, 10, 3, 0, tzinfo=UTC)
    facts = {"service": "group/shop", "version": "27948", "url": "https://gitlab.example/group/shop/-/jobs/41"}
    for first, second in (("gitlab-ci", "webhook-gitlab"), ("webhook-gitlab", "cli")):
        job = f"gl-{41 if first == 'gitlab-ci' else 42}"
        assert deploys.record(known, DeployEvent(job, "main", at, source=first, **facts)).inserted
        later = deploys.record(known, DeployEvent(job, "main", ended, source=second, **facts))
        assert not later.inserted and later.event.deployed_at == at
    with pytest.raises(DeployError, match=r"\(deployed_at: stored"):  # two webhook reports of one job
        deploys.record(known, DeployEvent("gl-42", "main", ended, source="webhook-gitlab", **facts))
    deploys.record(known, DeployEvent("ci-43", "main", at, source="cli", **facts))
    with pytest.raises(DeployError, match=r"\(deployed_at: stored"):  # not a GitLab job's id
        deploys.record(known, DeployEvent("ci-43", "main", ended, source="webhook-gitlab", **facts))


def test_at_defaults_to_the_warehouse_clock(known):
    recorded = deploys.record(known, DeployEvent("d-now", "main"))
    assert abs(recorded.event.deployed_at - datetime.now(UTC)) < timedelta(seconds=30)
    assert not deploys.record(known, DeployEvent("d-now", "main")).inserted  # "now" again is the same event


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"deploy_id": "bad id"}, "deploy id 'bad id' is not usable"),
        ({"deploy_id": "a...b"}, "is not usable"),
        ({"deploy_id": ""}, "is not usable"),
        ({"deploy_id": "x" * 129}, "is not usable"),
        ({"deploy_id": "periodic:2026-11-29-21:00"}, "names periodic analyses"),
        ({"deployed_at": datetime(2026, 1, 1)}, "has no time zone"),
        ({"url": "javascript:alert(1)"}, "is not an http"),
        ({"target": ""}, "target is empty"),
        ({"deploy_id": "d-1\n"}, "is not usable"),
        ({"url": "https://ci.example/1\n"}, "url .* holds control characters"),
        ({"service": "api\x1b]0;pwned\x07"}, "service .* holds control characters"),
        ({"version": "v1\n"}, "version .* holds control characters"),
        ({"target": "main\r"}, "holds control characters"),
        ({"deployed_at": datetime(1900, 1, 1, tzinfo=UTC)}, "is before 2000-01-01"),
    ],
)
def test_malformed_events_name_the_field(kwargs, message):
    with pytest.raises(DeployError, match=message):
        DeployEvent(**{"deploy_id": "ok-1", "target": "main", **kwargs})


def test_unknown_target_and_far_future_are_refused(known):
    with pytest.raises(DeployError, match=r"target 'nope' is not known \(known targets: main\)"):
        deploys.record(known, DeployEvent("d-2", "nope"))
    future = datetime.now(UTC) + timedelta(hours=1)
    with pytest.raises(DeployError, match="more than 5 minutes ahead of the warehouse's clock"):
        deploys.record(known, DeployEvent("d-3", "main", future))
    assert _rows(known) == []
    assert deploys.record(known, DeployEvent("d-4", "later", datetime.now(UTC)), configured_targets=["later"]).inserted


def test_time_parsing():
    assert deploys.parse_time("2026-11-29T12:00:00Z") == datetime(2026, 11, 29, 12, tzinfo=UTC)
    with pytest.raises(DeployError, match="--at '2026-11-29T12:00' has no time zone"):
        deploys.parse_time("2026-11-29T12:00", "--at")
    with pytest.raises(DeployError, match="is not an ISO 8601 timestamp"):
        deploys.parse_time("yesterday")
    with pytest.raises(DeployError, match="--at is empty"):
        deploys.parse_time("", "--at")
    with pytest.raises(DeployError, match="out of range"):
        deploys.parse_time("0001-01-01T00:00:00+14:00", "--at")
    for old in ("0001-01-01T00:00:00Z", "1900-01-01T00:00:00Z", "1999-12-31T23:59:59Z"):
        with pytest.raises(DeployError, match="is before 2000-01-01"):
            deploys.parse_time(old)


def test_ci_variables(tmp_path):
    event = tmp_path / "event.json"
    event.write_text('{"deployment": {"id": 4242, "environment": "production"}}')
    github = {
        "GITHUB_ACTIONS": "true",
        "GITHUB_RUN_ID": "991",
        "GITHUB_RUN_ATTEMPT": "2",
        "GITHUB_REPOSITORY": "acme/api",
        "GITHUB_SHA": "0123456789abcdef0123456789abcdef01234567",
        "GITHUB_SERVER_URL": "https://github.example",
        "GITHUB_API_URL": "https://github.example/api/v3",
        "GITHUB_EVENT_NAME": "deployment",
        "GITHUB_EVENT_PATH": str(event),
        "RADAR_DEPLOY_TARGET": "main",  # radar's setting, not the CI's: ci_defaults leaves it to config.settings
    }
    assert ci_defaults(github) == {
        "deploy_id": "gh-991-2",
        "source": "github-actions",
        "service": "acme/api",
        "url": "https://github.example/acme/api/actions/runs/991",
        "version": "0123456789ab",
        "code_host": "github",
        "repository": "acme/api",
        "commit_sha": "0123456789abcdef0123456789abcdef01234567",
        "run_url": "https://github.example/acme/api/actions/runs/991",
        "api_url": "https://github.example/api/v3",
        "github_deployment_id": "4242",
    }
    event.write_text("not json")  # a push, or an unreadable payload: no deployment, nothing else lost
    assert "github_deployment_id" not in ci_defaults(github) and ci_defaults(github)["repository"] == "acme/api"
    # A pull_request run: GITHUB_SHA is GitHub's synthetic merge commit; the commit deployed is the request's head.
    head = "fedcba98" * 5
    event.write_text(f'{{"pull_request": {{"number": 12, "head": {{"sha": "{head}"}}}}}}')
    found = ci_defaults({**github, "GITHUB_EVENT_NAME": "pull_request"})
    assert (found["commit_sha"], found["version"]) == (head, head[:12]) and "github_deployment_id" not in found
    event.write_text('{"pull_request": {"head": {"sha": "not a sha"}}}')  # an odd payload: GITHUB_SHA, as before
    assert ci_defaults({**github, "GITHUB_EVENT_NAME": "pull_request"})["commit_sha"] == github["GITHUB_SHA"]
    gitlab = {
        "GITLAB_CI": "true",
        "CI_JOB_ID": "77",
        "CI_PROJECT_PATH": "acme/platform/api",
        "CI_COMMIT_SHA": "89abcdef" * 5,
        "CI_COMMIT_SHORT_SHA": "89abcdef",
        "CI_JOB_URL": "https://gitlab.example/acme/platform/api/-/jobs/77",
        "CI_API_V4_URL": "https://gitlab.example/api/v4",
    }
    found = ci_defaults(gitlab)
    assert (found["deploy_id"], found["version"], found["commit_sha"]) == ("gl-77", "89abcdef", "89abcdef" * 5)
    assert (found["code_host"], found["repository"], found["api_url"], found["run_url"]) == (
        "gitlab",
        "acme/platform/api",
        "https://gitlab.example/api/v4",
        "https://gitlab.example/acme/platform/api/-/jobs/77",
    )
    assert ci_defaults({}) == {}
    assert ci_warnings(github, ci_defaults(github)) == [] and ci_warnings({}, {}) == []
    bare = {"GITHUB_ACTIONS": "true", "GITHUB_RUN_ID": "5"}  # nothing a status needs: each missing variable named
    assert ci_warnings(bare, ci_defaults(bare)) == [
        "warning: GITHUB_SHA is not set: no commit status can be sent (give --commit)",
        "warning: GITHUB_REPOSITORY is not set: no commit status can be sent (give --repository)",
        "warning: GITHUB_REPOSITORY is not set: service is empty (give --service)",
        "warning: GITHUB_SHA is not set: version is empty (give --version)",
    ]
    assert ci_warnings(bare, {**ci_defaults(bare), "service": "api", "version": "v1"}) == ci_warnings(bare, {})[:2]
    assert "CI_COMMIT_SHA is not set" in ci_warnings({"GITLAB_CI": "true", "CI_JOB_ID": "1"}, {})[0]
    assert "neither GitHub Actions nor GitLab CI" in ci_warnings({"CI": "true"}, {})[0]


def test_status_facts_are_checked_before_anything_is_stored(known):
    good = {"commit_sha": "ab" * 20, "repository": "acme/api", "code_host": "github"}
    cases = [
        ({**good, "commit_sha": "abc123"}, "is not a full commit SHA"),
        ({**good, "code_host": None}, "needs its code host"),
        ({**good, "code_host": "bitbucket"}, "is not one of github, gitlab"),
        ({**good, "repository": "acme"}, "is not owner/name"),
        ({**good, "code_host": "gitlab", "repository": "acme/../x y"}, "is not a project path"),
        ({**good, "api_url": "https://user:pw@github.example/api"}, "must not hold @"),
        ({**good, "api_url": "ftp://x"}, "is not an http(s) URL"),
        ({**good, "github_deployment_id": 0}, "is not a positive number"),
        ({**good, "code_host": "gitlab", "github_deployment_id": 5}, "needs --code-host github"),
    ]
    for fields, words in cases:
        with pytest.raises(DeployError, match=re.escape(words)):
            deploys.record(known, deploys.DeployEvent("s-1", "main", **fields))  # type: ignore[arg-type]
    assert _rows(known) == []
    stored = deploys.record(known, deploys.DeployEvent("s-1", "main", github_deployment_id=7, **good)).event
    assert (stored.commit_sha, stored.repository, stored.code_host, stored.github_deployment_id) == (
        "ab" * 20, "acme/api", "github", 7,
    )  # fmt: skip


def test_csv_import_is_all_or_nothing(known, tmp_path):
    good = tmp_path / "deploys.csv"
    good.write_text(
        "deploy_id,target,deployed_at,service,version\n"
        "h-1,main,2026-11-01T10:00:00Z,api,v1\n"
        "h-2,main,2026-11-02T10:00:00+01:00,api,v2\n"
    )
    bad = tmp_path / "bad.csv"
    bad.write_text("deploy_id,target,deployed_at\nh-3,main,2026-11-03T10:00:00Z\nh-4,main,2026-11-04T10:00:00\n")
    with pytest.raises(DeployError, match=r"bad.csv, line 3: deployed_at '2026-11-04T10:00:00' has no time zone"):
        deploys.import_csv(known, bad)
    assert _rows(known) == []
    recorded = deploys.import_csv(known, good)
    assert [r.inserted for r in recorded] == [True, True]
    assert [r.inserted for r in deploys.import_csv(known, good)] == [False, False]
    odd = tmp_path / "odd.csv"
    odd.write_text("id,target,when\nx,main,2026-11-01T10:00:00Z\n")
    with pytest.raises(DeployError, match="missing deploy_id, deployed_at; unknown 'id', 'when'"):
        deploys.import_csv(known, odd)


def _outside_ci() -> dict[str, str]:
    """This environment without any CI's or radar's variables: a command run in it is outside any CI."""
    ci = ("GITHUB_", "GITLAB_", "CI_", "RADAR_")
    return {k: v for k, v in os.environ.items() if k != "CI" and not k.startswith(ci)}


def _python(code: str, warehouse_url: str) -> subprocess.CompletedProcess:
    """`code` run by this Python outside any CI, on the warehouse at `warehouse_url`."""
    env = {**_outside_ci(), "RADAR_WAREHOUSE_URL": warehouse_url}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)


def _radar(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    clean = _outside_ci()
    return subprocess.run([str(BIN / "radar"), *args], capture_output=True, text=True, env={**clean, **env}, timeout=60)


def test_radar_deploy_command(known, warehouse_url):
    env = {"RADAR_WAREHOUSE_URL": warehouse_url}
    ok = _radar(["deploy", "--target", "main", "--id", "c-1", "--at", "2026-11-29T09:00:00Z", "--service", "api"], env)
    assert ok.returncode == 0, ok.stderr
    assert "deploy c-1 to main at 2026-11-29 09:00:00+00:00: recorded" in ok.stdout
    again = _radar(
        ["deploy", "--target", "main", "--id", "c-1", "--at", "2026-11-29T09:00:00Z", "--service", "api"], env
    )
    assert again.returncode == 0 and "already recorded, unchanged" in again.stdout
    clash = _radar(["deploy", "--target", "main", "--id", "c-1", "--at", "2026-11-29T09:05:00Z"], env)
    assert clash.returncode != 0 and "deployed_at: stored" in clash.stderr
    naive = _radar(["deploy", "--target", "main", "--id", "c-2", "--at", "2026-11-29T09:00"], env)
    assert naive.returncode != 0 and "--at '2026-11-29T09:00' has no time zone" in naive.stderr
    no_id = _radar(["deploy", "--target", "main"], env)
    assert no_id.returncode != 0 and "no deploy id" in no_id.stderr
    github = _radar(
        ["deploy"],
        {
            **env,
            "GITHUB_ACTIONS": "true",
            "GITHUB_RUN_ID": "5",
            "GITHUB_REPOSITORY": "acme/api",
            "GITHUB_SHA": "f" * 40,
            "RADAR_DEPLOY_TARGET": "main",
        },
    )
    assert github.returncode == 0, github.stderr
    with known.connect() as conn:
        row = conn.execute(
            sa.text("SELECT source, service, version FROM radar.deploy_event WHERE deploy_id = 'gh-5-1'")
        ).one()
    assert tuple(row) == ("github-actions", "acme/api", "f" * 12)
    assert "warning" not in github.stderr  # everything a status needs was there


def test_radar_deploy_says_which_ci_variables_a_status_lacks(known, warehouse_url):
    env = {"RADAR_WAREHOUSE_URL": warehouse_url, "RADAR_DEPLOY_TARGET": "main", "GITHUB_ACTIONS": "true"}
    bare = _radar(["deploy"], {**env, "GITHUB_RUN_ID": "6"})
    assert bare.returncode == 0, bare.stderr
    lines = bare.stderr.splitlines()
    assert "warning: GITHUB_SHA is not set: no commit status can be sent (give --commit)" in lines
    assert "warning: GITHUB_REPOSITORY is not set: service is empty (give --service)" in lines and len(lines) == 4
    by_hand = _radar(
        ["deploy", "--commit", "e" * 40, "--repository", "acme/api", "--service", "api", "--version", "v6"],
        {**env, "GITHUB_RUN_ID": "7", "GITHUB_API_URL": "https://ghe.example/api/v3"},
    )
    assert by_hand.returncode == 0 and by_hand.stderr == "", by_hand.stderr
    with known.connect() as conn:
        row = conn.execute(
            sa.text(
                "SELECT commit_sha, repository, code_host, api_url, run_url FROM radar.deploy_event "
                "WHERE deploy_id = 'gh-7-1'"
            )
        ).one()
    assert tuple(row) == ("e" * 40, "acme/api", "github", "https://ghe.example/api/v3", None)
    short = _radar(["deploy", "--commit", "abc123"], {**env, "GITHUB_RUN_ID": "8", "GITHUB_REPOSITORY": "acme/api"})
    assert short.returncode == 1 and "commit 'abc123' is not a full commit SHA" in short.stderr


def test_csv_import_encodings_and_surplus_fields(known, tmp_path):
    bom = tmp_path / "excel.csv"
    bom.write_bytes(
        "deploy_id,target,deployed_at,service\r\nb-1,main,2026-11-01T10:00:00Z,café\r\n".encode("utf-8-sig")
    )
    assert [r.inserted for r in deploys.import_csv(known, bom)] == [True]
    latin = tmp_path / "latin.csv"
    latin.write_bytes("deploy_id,target,deployed_at,service\nl-1,main,2026-11-01T10:00:00Z,café\n".encode("latin-1"))
    with pytest.raises(DeployError, match=r"latin.csv is not UTF-8 \(byte 0xe9"):
        deploys.import_csv(known, latin)
    surplus = tmp_path / "surplus.csv"
    surplus.write_text(
        "deploy_id,target,deployed_at\ns-1,main,2026-11-01T10:00:00Z\ns-2,main,2026-11-01T11:00:00Z,x,y\n"
    )
    with pytest.raises(DeployError, match="surplus.csv, line 3: 2 more field"):
        deploys.import_csv(known, surplus)
    assert [r[0] for r in _rows(known)] == ["b-1"]


def test_csv_import_checks_every_row_before_writing(known, tmp_path):
    deploys.record(known, DeployEvent("old", "main", datetime(2026, 11, 1, tzinfo=UTC), service="api"))
    before = _rows(known)
    cases = {
        "line 4: target 'nope' is not known": "n-1,main,2026-11-02T10:00:00Z,\nn-2,main,2026-11-02T11:00:00Z,\n"
        "n-3,nope,2026-11-02T12:00:00Z,\n",
        "line 3: deployed_at .* ahead of the warehouse's clock": "n-1,main,2026-11-02T10:00:00Z,\n"
        f"n-2,main,{(datetime.now(UTC) + timedelta(days=1)).isoformat()},\n",
        "line 3: deploy 'old' is already recorded with other values": "n-1,main,2026-11-02T10:00:00Z,\n"
        "old,main,2026-11-01T00:00:00Z,web\n",
    }
    for message, body in cases.items():
        path = tmp_path / "batch.csv"
        path.write_text("deploy_id,target,deployed_at,service\n" + body)
        with pytest.raises(DeployError, match=message):
            deploys.import_csv(known, path)
        assert _rows(known) == before


def test_csv_import_of_many_rows_is_one_batched_transaction(known, tmp_path):
    path = tmp_path / "many.csv"
    start = datetime(2026, 1, 1, tzinfo=UTC)
    lines = [f"m-{i},main,{(start + timedelta(minutes=i)).isoformat()},api,v{i}" for i in range(20_000)]
    path.write_text("deploy_id,target,deployed_at,service,version\n" + "\n".join(lines) + "\n")
    statements: list[str] = []
    sa.event.listen(known, "before_cursor_execute", lambda *a: statements.append(a[2]))
    recorded = deploys.import_csv(known, path)
    assert sum(r.inserted for r in recorded) == 20_000
    assert sum(s.startswith("INSERT") for s in statements) == 4  # 5,000 rows per statement
    statements.clear()
    again = deploys.import_csv(known, path)
    assert not any(r.inserted for r in again) and not any(s.startswith("INSERT") for s in statements)
    with known.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM radar.deploy_event")).scalar_one() == 20_000


def test_cli_errors_are_one_line_when_the_warehouse_is_down(tmp_path):
    from radar_pipeline.demo.local_postgres import free_port

    env = {"RADAR_WAREHOUSE_URL": f"postgresql://radar:Hid%2Fden9@127.0.0.1:{free_port()}/radar"}
    csv_file = tmp_path / "d.csv"
    csv_file.write_text("deploy_id,target,deployed_at\nx-1,main,2026-11-01T10:00:00Z\n")
    for args in (
        ["deploy", "--target", "main", "--id", "d-1"],
        ["deploy", "import", str(csv_file)],
        ["verdicts", "d-1"],
        ["db", "upgrade"],
    ):
        proc = _radar(args, env)
        assert proc.returncode == 1, (args, proc.stderr)
        assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
        assert "failed" in proc.stderr and "Hid" not in proc.stderr + proc.stdout


def test_cli_refuses_empty_and_ancient_times(known, warehouse_url):
    env = {"RADAR_WAREHOUSE_URL": warehouse_url}
    for at, message in (
        ("", "--at is empty"),
        ("0001-01-01T00:00:00+14:00", "out of range"),
        ("1900-01-01T00:00:00Z", "is before 2000-01-01"),
    ):
        proc = _radar(["deploy", "--target", "main", "--id", "t-1", "--at", at], env)
        assert proc.returncode != 0 and message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert _rows(known) == []


def test_radar_verdicts_prints_no_control_characters(known, warehouse_url):
    hostile = "SELECT 1 /* \x1b]0;owned\x07\x1b[2J\x9b1m\u202e */ FROM t WHERE a = $1"
    deploys.record(known, DeployEvent("v-1", "main", datetime(2026, 11, 29, 9, tzinfo=UTC)))
    with known.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO radar.query (target, dbid, userid, queryid, toplevel, fingerprint, query, first_seen, "
                "last_seen, last_calls, last_total_exec_time) VALUES ('main', 1, 10, 7, true, 70, :q, now(), now(), "
                "1, 1)"
            ),
            {"q": hostile},
        )
        conn.execute(
            sa.text(
                "INSERT INTO radar.analysis (deploy_id, target, settings, engine_version, window_start, window_end, "
                "queries, detected, no_regression, insufficient_data) VALUES ('v-1', 'main', '{}', '1', "
                "'2026-11-29T08:30Z', '2026-11-29T09:30Z', 1, 1, 0, 0)"
            )
        )
        conn.execute(
            sa.text(
                "INSERT INTO radar.verdict (deploy_id, target, dbid, userid, queryid, toplevel, fingerprint, verdict, "
                "reason, change_at, mean_before_ms, mean_after_ms, change_factor, confidence, n_before, n_after, "
                "calls_before, calls_after, cause) VALUES ('v-1', 'main', 1, 10, 7, true, 70, 'detected', "
                "'significant', '2026-11-29T09:01Z', 1, 3, 3, 0.99, 30, 30, 300, 300, 'unexplained')"
            )
        )
    proc = _radar(["verdicts", "v-1"], {"RADAR_WAREHOUSE_URL": warehouse_url, "COLUMNS": "200"})
    assert proc.returncode == 0, proc.stderr
    assert "SELECT 1 /* ]0;owned[2J1m */ FROM t" in proc.stdout
    as_csv = _radar(["verdicts", "v-1", "--format", "csv"], {"RADAR_WAREHOUSE_URL": warehouse_url})
    assert "SELECT 1 /* ]0;owned[2J1m */ FROM t" in as_csv.stdout
    assert not any(c in as_csv.stdout for c in "\x1b\x07\x9b\u202e")
    assert not any(c in proc.stdout for c in "\x1b\x07\x9b\u202e")


def test_events_stored_under_older_rules_are_still_read(known, warehouse):
    """Rows the checks of today would refuse (stored before they existed) are read back as they are, so their
    analyses, histories and reanalyses keep working."""
    with warehouse.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO radar.deploy_event (deploy_id, target, deployed_at, service, version, source) "
                "VALUES ('old-1', 'main', '1990-01-01T00:00:00Z', 'api', E'v1\\x1b[31m', 'cli')"
            )
        )
    with warehouse.connect() as conn:
        event = deploys.get(conn, "old-1")
    assert event is not None and event.version == "v1\x1b[31m" and event.deployed_at.year == 1990
    with pytest.raises(DeployError):  # the same fields from outside are still refused
        DeployEvent("old-2", "main", deployed_at=datetime(1990, 1, 1, tzinfo=UTC))


class _HeldProxy:
    """A loopback TCP proxy to a server that holds each connection, unanswered, until `release` is set: a warehouse
    reached late, as on a busy machine or a slow network."""

    def __init__(self, upstream_port: int) -> None:
        import socket
        import threading

        self.upstream_port = upstream_port
        self.accepted, self.release = threading.Event(), threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        import threading

        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._forward, args=(client,), daemon=True).start()

    def _forward(self, client) -> None:  # type: ignore[no-untyped-def]
        import socket
        import threading

        self.accepted.set()
        if not self.release.wait(300):
            client.close()
            return
        upstream = socket.create_connection(("127.0.0.1", self.upstream_port), timeout=60)
        threading.Thread(target=pipe, args=(upstream, client), daemon=True).start()
        pipe(client, upstream)

    def close(self) -> None:
        self.release.set()
        self.listener.close()


def test_radar_deploy_records_when_it_started_not_when_the_warehouse_answered(known, warehouse_url, pg18):
    """Without --at, the deploy's time is the command's start (by the warehouse's clock, less the time the command
    spent): a warehouse that answers late (the proxy holds the connection until the test lets it through) must not
    move the deploy past its window's tolerance."""
    proxy = _HeldProxy(pg18.pg.port)
    try:
        late = sa.engine.make_url(warehouse_url).set(port=proxy.port).render_as_string(hide_password=False)
        clean = _outside_ci()
        launched = datetime.now(UTC)
        proc = subprocess.Popen(
            [str(BIN / "radar"), "deploy", "--target", "main", "--id", "late-1"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**clean, "RADAR_WAREHOUSE_URL": late},
        )
        assert proxy.accepted.wait(300), proc.communicate(timeout=60)
        answered = datetime.now(UTC)  # the warehouse hears of the command only from now on
        proxy.release.set()
        out, err = proc.communicate(timeout=300)
    finally:
        proxy.close()
    assert proc.returncode == 0, err
    with known.connect() as conn:
        stored = conn.execute(
            sa.text("SELECT deployed_at FROM radar.deploy_event WHERE deploy_id = 'late-1'")
        ).scalar_one()
    assert launched <= stored < answered, (launched, stored, answered)
    assert f"at {stored}: recorded" in out


def test_radar_deploy_takes_its_time_from_the_warehouses_clock_not_the_runners(known, warehouse_url):
    """A CI runner whose wall clock is 10 minutes behind the warehouse's (faked in the command's process only, time
    and datetime both) recorded the deploy 10 minutes early: before its window, whose regression went unseen."""
    code = (
        "import datetime, sys, time\n"
        "real_time, skew = time.time, datetime.timedelta(minutes=-10)\n"
        "class Behind(datetime.datetime):\n"
        "    @classmethod\n"
        "    def now(cls, tz=None):\n"
        "        return super().now(tz) + skew\n"
        "    @classmethod\n"
        "    def utcnow(cls):\n"
        "        return super().utcnow() + skew\n"
        "datetime.datetime = Behind\n"
        "time.time = lambda: real_time() + skew.total_seconds()\n"
        "from radar_pipeline.cli import main\n"
        "main(['deploy', '--target', 'main', '--id', 'skewed-1'])\n"
    )
    with known.connect() as conn:  # the warehouse runs on this machine: its clock is the test's
        launched = conn.execute(sa.text("SELECT clock_timestamp()")).scalar_one()
    proc = _python(code, warehouse_url)
    assert proc.returncode == 0, proc.stderr
    with known.connect() as conn:
        finished = conn.execute(sa.text("SELECT clock_timestamp()")).scalar_one()
        stored = conn.execute(
            sa.text("SELECT deployed_at FROM radar.deploy_event WHERE deploy_id = 'skewed-1'")
        ).scalar_one()
    assert launched <= stored <= finished, (launched, stored, finished)


def test_radar_deploy_imports_no_heavy_library(known, warehouse_url):
    """`radar deploy` runs in CI after every deploy: it loads neither pandas nor numpy, Dagster, matplotlib or scipy."""
    code = (
        "import sys\n"
        "from radar_pipeline.cli import main\n"
        "try:\n"
        "    main(['deploy', '--target', 'main', '--id', 'light-1'])\n"
        "except SystemExit as exc:\n"
        "    assert not exc.code, exc.code\n"
        "heavy = {'pandas', 'numpy', 'dagster', 'matplotlib', 'scipy'}\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & heavy))\n"
    )
    proc = _python(code, warehouse_url)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == "[]", proc.stdout
    with known.connect() as conn:
        assert deploys.get(conn, "light-1") is not None


@pytest.mark.parametrize(
    ("header", "row", "column"),
    [
        ("deploy_id,target,deployed_at,service,service", "t-1,main,2026-11-01T10:00:00Z,api,web", "service"),
        ("deploy_id,target,deployed_at,target", "t-1,main,2026-11-01T10:00:00Z,main", "target"),
        ("deploy_id, target,target ,deployed_at", "t-1,main,main,2026-11-01T10:00:00Z", "target"),
    ],
)
def test_csv_import_refuses_a_column_named_twice(known, warehouse_url, tmp_path, header, row, column):
    """csv.DictReader keeps the last of two same-named columns: the file is refused, naming the column, and nothing is
    stored."""
    from click.testing import CliRunner

    from radar_pipeline.cli import main

    path = tmp_path / "twice.csv"
    path.write_text(f"{header}\n{row}\n")
    with pytest.raises(DeployError, match=f"names {column!r} twice"):
        deploys.import_csv(known, path)
    result = CliRunner().invoke(main, ["deploy", "import", str(path)], env={"RADAR_WAREHOUSE_URL": warehouse_url})
    assert result.exit_code != 0 and f"names {column!r} twice" in result.output, result.output
    assert _rows(known) == []
