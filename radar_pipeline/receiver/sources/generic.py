"""The generic JSON source: what `radar deploy` takes, as one JSON object posted with a bearer token whose scopes
include `deploy` (docs/receiver.md):

    {"deploy_id": "gh-123-1", "target": "shop", "deployed_at": "2026-11-29T12:00:00Z", "service": "shop",
     "version": "1f2e3d4c5b6a", "url": "https://...", "commit_sha": "<40 hex>", "repository": "acme/shop",
     "code_host": "github", "api_url": "https://api.github.com", "run_url": "https://...", "github_deployment_id": 7,
     "release_id": "2026.12.06-1", "canary_role": "shop_canary"}

deploy_id and target are required (the target may be given as ?target= instead); every other field is optional and
checked by the same rules as `radar deploy`'s flags; a key not listed here is refused. There is no delivery id: the
deploy id's idempotence stands for it (the same event again changes nothing, a different one is refused)."""

from __future__ import annotations

from collections.abc import Mapping

from radar_pipeline.receiver.sources.base import Parsed, Refused
from radar_pipeline.receiver.sources.common import bearer, json_object, same_token, text, whole
from radar_pipeline.warehouse.deploys import DeployError, DeployEvent, parse_time

NAME = "generic"
ID_PREFIXES: tuple[str, ...] = ()
TEXT_FIELDS = (
    "deploy_id", "target", "deployed_at", "service", "version", "url", "commit_sha", "repository", "code_host",
    "api_url", "run_url", "release_id", "canary_role",
)  # fmt: skip
FIELDS = (*TEXT_FIELDS, "github_deployment_id")


def authenticate(headers: Mapping[str, str], body: bytes, secret: str) -> None:
    """The request carries `Authorization: Bearer <secret>` (compared in constant time), else Refused(401)."""
    token = bearer(headers)
    if token is None:
        raise Refused(401, "Authorization is missing: send 'Authorization: Bearer <token>'")
    if not same_token(token, secret):
        raise Refused(401, "the bearer token is not known here")


def parse(headers: Mapping[str, str], body: bytes, params: Mapping[str, str]) -> Parsed:
    """The deploy the body describes (Refused(400) naming the field that is wrong)."""
    data = json_object(body)
    unknown = sorted(k for k in data if k not in FIELDS)
    if unknown:  # at most three named, each cut: the reason stays one short line whatever the body holds
        named = ", ".join(repr(k if len(k) <= 40 else k[:40] + "…") for k in unknown[:3])
        more = f" and {len(unknown) - 3} more" if len(unknown) > 3 else ""
        raise Refused(400, f"unknown field(s) {named}{more}: the fields are {', '.join(FIELDS)}")
    values = {name: text(data, name) for name in TEXT_FIELDS}
    target = values.pop("target") or params.get("target") or None
    if values["deploy_id"] is None:
        raise Refused(400, "deploy_id is missing")
    if target is None:
        raise Refused(400, "target is missing (in the body, or as ?target=)")
    at = values.pop("deployed_at")
    try:
        event = DeployEvent(
            target=target,
            deployed_at=parse_time(at) if at is not None else None,
            source="webhook-generic",
            github_deployment_id=whole(data, "github_deployment_id"),
            **values,  # type: ignore[arg-type]
        )
    except DeployError as exc:
        raise Refused(400, str(exc)) from None
    return Parsed(event)
