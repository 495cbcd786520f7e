"""Deploy events: validation with the field named, idempotence, conflicts, CI variables and CSV import."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
import sqlalchemy as sa

from radar_pipeline.ci_env import ci_defaults
from radar_pipeline.warehouse import deploys
from radar_pipeline.warehouse.deploys import DeployError, DeployEvent

BIN = Path(sys.executable).parent


@pytest.fixture
def known(warehouse):
    """A warehouse that knows target 'main' (it has a scrape of it)."""
    with warehouse.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO radar.pgss_info_snapshot "
                "VALUES ('main', now() - interval '1 hour', 0, NULL, 180000, '1.12', 0, 0)"
            )
        )
    return warehouse


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


def test_ci_variables():
    github = {
        "GITHUB_ACTIONS": "true",
        "GITHUB_RUN_ID": "991",
        "GITHUB_RUN_ATTEMPT": "2",
        "GITHUB_REPOSITORY": "acme/api",
        "GITHUB_SHA": "0123456789abcdef0123",
        "GITHUB_SERVER_URL": "https://github.com",
        "RADAR_DEPLOY_TARGET": "main",
    }
    assert ci_defaults(github) == {
        "target": "main",
        "deploy_id": "gh-991-2",
        "source": "github-actions",
        "service": "acme/api",
        "url": "https://github.com/acme/api/actions/runs/991",
        "version": "0123456789ab",
    }
    gitlab = {
        "GITLAB_CI": "true",
        "CI_JOB_ID": "77",
        "CI_PROJECT_PATH": "acme/api",
        "CI_COMMIT_SHORT_SHA": "0123abcd",
        "CI_JOB_URL": "https://gitlab.example/acme/api/-/jobs/77",
    }
    assert ci_defaults(gitlab)["deploy_id"] == "gl-77" and ci_defaults(gitlab)["version"] == "0123abcd"
    assert ci_defaults({}) == {}


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
    with pytest.raises(DeployError, match="missing deploy_id, deployed_at; unknown id, when"):
        deploys.import_csv(known, odd)


def _radar(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "GITLAB_", "CI_", "RADAR_"))}
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
