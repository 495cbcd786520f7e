"""GitLab deployment events: a deployment whose status became `success` is a deploy.

The project's webhook (Settings → Webhooks, "Deployment events") posts to /v1/deploys/gitlab?target=<name> with a
secret token, which GitLab sends as X-Gitlab-Token (compared in constant time); X-Gitlab-Event names the event and
X-Gitlab-Event-UUID the delivery (the id replays are refused by). `&environment=<name>` keeps only that
environment's deployments. The deploy is `gl-<job id>`, the id `radar deploy` gives the same job in GitLab CI, with
the facts it takes from there: the project path as service and repository, the short commit as version, the job's
URL as url and run_url, the full commit (from the commit's URL) and the API's URL."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime

from radar_pipeline.receiver.sources.base import Parsed, Refused
from radar_pipeline.receiver.sources.common import header, json_object, obj, same_token, text, whole
from radar_pipeline.warehouse.deploys import DeployError, DeployEvent, parse_time

NAME = "gitlab"
ID_PREFIXES: tuple[str, ...] = ("gl-deployment-",)
EVENT = "Deployment Hook"
COMMIT = re.compile(r"/-/commit/([0-9a-f]{40}|[0-9a-f]{64})")


def authenticate(headers: Mapping[str, str], body: bytes, secret: str) -> None:
    """X-Gitlab-Token is the webhook's secret token, else Refused(401)."""
    token = header(headers, "x-gitlab-token")
    if token is None:
        raise Refused(401, "X-Gitlab-Token is missing: give the webhook a secret token")
    if not same_token(token, secret):
        raise Refused(401, "X-Gitlab-Token is not RADAR_RECEIVER_GITLAB_SECRET")


def parse(headers: Mapping[str, str], body: bytes, params: Mapping[str, str]) -> Parsed:
    """A deploy for a deployment event with status `success`; any other event or status is ignored with its
    reason."""
    event = header(headers, "x-gitlab-event")
    delivery = header(headers, "x-gitlab-event-uuid")
    if event is None:
        raise Refused(400, "X-Gitlab-Event is missing: not a GitLab webhook delivery")
    if event != EVENT:
        return Parsed(None, delivery, f"event {event!r} is not {EVENT!r}")
    data = json_object(body)
    if data.get("object_kind") != "deployment":
        raise Refused(400, "object_kind is not 'deployment'")
    status = text(data, "status", required=True)
    wanted = params.get("environment")
    environment = text(data, "environment")
    if wanted is not None and environment != wanted:
        return Parsed(None, delivery, f"environment {environment!r} is not {wanted!r}")
    if status != "success":
        return Parsed(None, delivery, f"deployment status {status!r} is not success")
    target = params.get("target")
    if not target:
        raise Refused(400, "no target: add ?target=<name> to the webhook's URL")
    project = obj(data, "project")
    path = text(project, "path_with_namespace", "project.", required=True) or ""
    web = text(project, "web_url", "project.")
    job = whole(data, "deployable_id")
    deployment = whole(data, "deployment_id", required=True)
    commit = COMMIT.search(text(data, "commit_url") or "")
    job_url = text(data, "deployable_url")
    try:
        return Parsed(
            DeployEvent(
                deploy_id=f"gl-{job}" if job is not None else f"gl-deployment-{deployment}",
                target=target,
                deployed_at=_time(text(data, "status_changed_at", required=True) or ""),
                service=path,
                version=text(data, "short_sha"),
                source="webhook-gitlab",
                url=job_url,
                commit_sha=commit.group(1) if commit else None,
                repository=path,
                code_host="gitlab",
                api_url=web[: -len(path)] + "api/v4" if web and web.endswith("/" + path) else None,
                run_url=job_url,
            ),
            delivery,
        )
    except DeployError as exc:
        raise Refused(400, str(exc)) from None


def _time(value: str) -> datetime:
    """GitLab's `2021-04-28 21:50:00 +0200`, or ISO 8601."""
    try:
        return datetime.strptime(value, "%Y-%m-%d %H:%M:%S %z")
    except ValueError:
        return parse_time(value, "status_changed_at")
