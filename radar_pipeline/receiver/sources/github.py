"""GitHub `deployment_status` webhooks: a deployment whose status became `success` is a deploy.

The webhook (repository or organisation settings → Webhooks) posts application/json to
/v1/deploys/github?target=<name> with a secret: GitHub signs the raw body with it (X-Hub-Signature-256, HMAC-SHA256)
and names the event (X-GitHub-Event) and the delivery (X-GitHub-Delivery, the id replays are refused by).
`&environment=<name>` keeps only that environment's deployments. The deploy is `gh-deployment-<deployment id>`,
with the facts `radar deploy` takes from a GitHub Actions run: the repository as service and repository, the commit
(12 characters as version), the status's log URL as url and run_url, the API's URL and the deployment's id."""

from __future__ import annotations

from collections.abc import Mapping

from radar_pipeline.receiver.sources.base import Parsed, Refused
from radar_pipeline.receiver.sources.common import header, json_object, obj, signed, text, whole
from radar_pipeline.warehouse.deploys import DeployError, DeployEvent, parse_time

NAME = "github"
ID_PREFIXES: tuple[str, ...] = ("gh-deployment-",)
EVENT = "deployment_status"


def authenticate(headers: Mapping[str, str], body: bytes, secret: str) -> None:
    """X-Hub-Signature-256 is the body's HMAC-SHA256 under the webhook's secret, else Refused(401)."""
    signature = header(headers, "x-hub-signature-256")
    if signature is None:
        raise Refused(401, "X-Hub-Signature-256 is missing: give the webhook a secret")
    if not signed(body, signature, secret):
        raise Refused(401, "X-Hub-Signature-256 does not match the body under RADAR_RECEIVER_GITHUB_SECRET")


def parse(headers: Mapping[str, str], body: bytes, params: Mapping[str, str]) -> Parsed:
    """A deploy for a deployment_status `success`; any other event or state is ignored with its reason."""
    event = header(headers, "x-github-event")
    delivery = header(headers, "x-github-delivery")
    if event is None:
        raise Refused(400, "X-GitHub-Event is missing: not a GitHub webhook delivery")
    if delivery is None:
        raise Refused(400, "X-GitHub-Delivery is missing: not a GitHub webhook delivery")
    if "x-www-form-urlencoded" in (header(headers, "content-type") or ""):
        raise Refused(415, "the webhook's content type is form data: set it to application/json")
    if event != EVENT:
        return Parsed(None, delivery, f"event {event!r} is not {EVENT}")
    data = json_object(body)
    status, deployment, repo = obj(data, "deployment_status"), obj(data, "deployment"), obj(data, "repository")
    state = text(status, "state", "deployment_status.", required=True)
    wanted = params.get("environment")
    environment = text(deployment, "environment", "deployment.")
    if wanted is not None and environment != wanted:
        return Parsed(None, delivery, f"environment {environment!r} is not {wanted!r}")
    if state != "success":
        return Parsed(None, delivery, f"deployment_status state {state!r} is not success")
    target = params.get("target")
    if not target:
        raise Refused(400, "no target: add ?target=<name> to the webhook's URL")
    full_name = text(repo, "full_name", "repository.", required=True)
    sha = text(deployment, "sha", "deployment.", required=True)
    deployment_id = whole(deployment, "id", "deployment.", required=True)
    log = text(status, "log_url", "deployment_status.") or text(status, "target_url", "deployment_status.")
    api = text(repo, "url", "repository.")
    suffix = f"/repos/{full_name}"
    try:
        return Parsed(
            DeployEvent(
                deploy_id=f"gh-deployment-{deployment_id}",
                target=target,
                deployed_at=parse_time(
                    text(status, "created_at", "deployment_status.", required=True) or "",
                    "deployment_status.created_at",
                ),
                service=full_name,
                version=(sha or "")[:12],
                source="webhook-github",
                url=log,
                commit_sha=sha,
                repository=full_name,
                code_host="github",
                api_url=api[: -len(suffix)] if api and api.endswith(suffix) else None,
                run_url=log,
                github_deployment_id=deployment_id,
            ),
            delivery,
        )
    except DeployError as exc:
        raise Refused(400, str(exc)) from None
