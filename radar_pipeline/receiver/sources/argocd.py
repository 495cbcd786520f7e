"""Argo CD notifications: a finished sync posted by the notifications controller's webhook service.

Argo CD's webhook service (Argo CD docs, operator manual, notifications › services › webhook; the notifications
engine's pkg/services/webhook.go) sends the body a template renders, with the headers the service names; it signs
nothing. So the body is the one docs/receiver-sources.md recommends (sprig's toJson quotes every value):

    {"app": "shop", "namespace": "argocd", "revision": "<the synced commit or chart version>",
     "phase": "Succeeded", "sync_status": "Synced", "health": "Healthy",
     "finished_at": "2026-11-29T12:00:00Z", "repo_url": "https://...", "app_url": "https://argocd/applications/shop",
     "target": "main"}

from .app.metadata, .app.status.operationState (phase, finishedAt, syncResult.revision), .app.status.sync and
.health, and .app.spec.source.repoURL. The target (the watched database) is the body's `target` or the URL's
?target=. The request carries `Authorization: Bearer <token>` (a header of the webhook service, its value taken
from argocd-notifications-secret).

A sync whose operation phase is Succeeded (the on-deployed and on-sync-succeeded triggers) is a deploy at its
finishedAt; its id is the same for the same (app, revision, finishedAt), so a re-delivery, or both triggers firing
for one sync, is one deploy. Any other phase (Running, Failed, Error) is answered and not recorded.
"""

from __future__ import annotations

from collections.abc import Mapping

from radar_pipeline.receiver.sources import _kube, common
from radar_pipeline.receiver.sources.base import Parsed

NAME = "argocd"
ID_PREFIXES: tuple[str, ...] = ("argocd:",)
SUCCEEDED = "Succeeded"


def authenticate(headers: Mapping[str, str], body: bytes, secret: str) -> None:
    """The webhook service's bearer token (401 when missing or wrong)."""
    _kube.check_bearer(headers, secret)


def parse(headers: Mapping[str, str], body: bytes, params: Mapping[str, str]) -> Parsed:
    """A succeeded sync as a deploy; another phase as ignored, with why (Refused when the body is not usable)."""
    obj = common.json_object(body)
    app = _kube.kube_name(obj, "app")
    phase = _kube.text(obj, "phase")
    if phase != SUCCEEDED:
        return Parsed(None, ignored=f"Argo CD sync of {app} is {phase}, not {SUCCEEDED}: not a finished deploy")
    revision = _kube.text(obj, "revision")
    finished_at = _kube.timestamp(obj, "finished_at")
    assert revision is not None
    namespace = _kube.text(obj, "namespace", required=False)
    metadata = {
        key: value
        for key in ("namespace", "sync_status", "health", "repo_url")
        if (value := _kube.text(obj, key, required=False)) is not None
    }
    return Parsed(
        _kube.event(
            deploy_id=_kube.stable_id("argocd", app, namespace or "", app, revision, finished_at.isoformat()),
            target=_kube.target(obj, params),
            deployed_at=finished_at,
            service=app,
            version=revision,
            source=NAME,
            url=_kube.text(obj, "app_url", required=False),
            metadata={"argocd": {**metadata, "phase": phase}},
        )
    )
