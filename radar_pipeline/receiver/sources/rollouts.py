"""Argo Rollouts notifications: a rollout that completed (or whose canary took its first step), posted by the
controller's webhook service.

Argo Rollouts notifies through the same notifications engine as Argo CD (Argo Rollouts docs, features ›
notifications; the engine's pkg/services/webhook.go): a trigger is named from the controller's event reason
(RolloutCompleted → on-rollout-completed, RolloutStepCompleted → on-rollout-step-completed, RolloutAborted →
on-rollout-aborted; utils/record/record.go), a template sees only `.rollout`, and the webhook body is what the
template renders. A template cannot tell which trigger sent it, so docs/receiver-sources.md gives one template per
trigger, each naming its trigger:

    {"trigger": "on-rollout-completed", "rollout": "shop", "namespace": "apps", "revision": "7",
     "pod_hash": "6b7f9c8d5", "phase": "Healthy", "step": 3, "image": "registry/shop:1.4.2", "target": "main"}

from .rollout.metadata (name, namespace, the rollout.argoproj.io/revision annotation), .rollout.status
(currentPodHash, phase, currentStepIndex) and the first container's image; the target is the body's or the URL's
?target=. The request carries `Authorization: Bearer <token>`, as for Argo CD.

A completed rollout is a deploy; so is the first step of a canary (step 1 completed: the new version takes traffic),
for those who subscribe on-rollout-step-completed. Both are the same deploy, keyed by (namespace, rollout, revision)
with no time of its own: the first report's arrival is its time and the later one is the same deploy. An aborted
rollout, later steps and other triggers are answered and not recorded.
"""

from __future__ import annotations

from collections.abc import Mapping

from radar_pipeline.receiver.sources import _kube, common
from radar_pipeline.receiver.sources.base import Parsed, Refused

NAME = "rollouts"
ID_PREFIXES: tuple[str, ...] = ("rollout:",)
COMPLETED, STEP_COMPLETED, ABORTED = "on-rollout-completed", "on-rollout-step-completed", "on-rollout-aborted"


def authenticate(headers: Mapping[str, str], body: bytes, secret: str) -> None:
    """The webhook service's bearer token (401 when missing or wrong)."""
    _kube.check_bearer(headers, secret)


def parse(headers: Mapping[str, str], body: bytes, params: Mapping[str, str]) -> Parsed:
    """A completed rollout, or a canary's first step, as a deploy; an aborted rollout or any other notification as
    ignored, with why (Refused when the body is not usable)."""
    obj = common.json_object(body)
    trigger = _kube.text(obj, "trigger")
    namespace = _kube.kube_name(obj, "namespace")
    rollout = _kube.kube_name(obj, "rollout")
    what = f"Rollout {namespace}/{rollout}"
    if trigger == ABORTED:
        return Parsed(None, ignored=f"{what} was aborted: not a deploy")
    if trigger not in (COMPLETED, STEP_COMPLETED):
        return Parsed(None, ignored=f"{what}: {trigger} is not {COMPLETED} or {STEP_COMPLETED}")
    step = obj.get("step")
    if step is not None and (not isinstance(step, int) or isinstance(step, bool) or step < 0):
        raise Refused(422, "step is not a whole number (the rollout's status.currentStepIndex)")
    if trigger == STEP_COMPLETED and step != 1:
        return Parsed(None, ignored=f"{what} completed step {step}: only the canary's first step is a deploy")
    revision = _kube.text(obj, "revision")
    assert revision is not None
    metadata = {
        key: value
        for key in ("pod_hash", "phase", "image")
        if (value := _kube.text(obj, key, required=False)) is not None
    }
    return Parsed(
        _kube.event(
            deploy_id=_kube.stable_id("rollout", f"{namespace}.{rollout}", namespace, rollout, revision),
            target=_kube.target(obj, params),
            service=rollout,
            version=metadata.get("image") or f"revision {revision}",
            source=NAME,
            metadata={"rollouts": {**metadata, "namespace": namespace, "revision": revision, "trigger": trigger}},
        )
    )
