"""Flux notification-controller events, from a Provider of type `generic` or `generic-hmac`.

Both post the event as JSON (Flux docs, notification-controller spec v1beta3, providers.md › Generic webhook, and
events.md; the Go type is fluxcd/pkg's apis/event Event):

    {"involvedObject": {"kind": "Kustomization", "namespace": "apps", "name": "webapp", ...},
     "severity": "info", "timestamp": "2026-11-29T12:00:00Z", "message": "...", "reason": "ReconciliationSucceeded",
     "metadata": {"revision": "main@sha1:731f7ead..."}, "reportingController": "kustomize-controller"}

The controller strips the API group from metadata keys (internal/server/event_handlers.go, combineEventMetadata);
older versions posted `kustomize.toolkit.fluxcd.io/revision`, also read. Authentication (internal/notifier/
forwarder.go): `generic` sends no token of its own, only the headers of the Secret's `headers` key, so the Secret
sets `Authorization: Bearer <token>`; `generic-hmac` signs the body with the Secret's `token` key and sends
`X-Signature: sha256=<hex>` (the docs' verifier also names sha224, sha384 and sha512). One source, "flux", takes
both: a request with X-Signature is checked as signed, one without it by its bearer token; the secret is the same.
The target is the Provider address's ?target=.

A deploy is an info event of a Kustomization that reconciled (ReconciliationSucceeded) or of a HelmRelease that
installed or upgraded (InstallSucceeded, UpgradeSucceeded); errors, other reasons and other kinds are answered and not
recorded. A Kustomization reports ReconciliationSucceeded again at every interval for the revision already applied,
so its deploy is (kind, namespace, name, revision), recorded with no time of its own: the first report's arrival is
its time and the later ones are the same deploy. A HelmRelease reports each install or upgrade once, and a values-only
upgrade keeps the chart version (its revision), so its deploy is also keyed by the event's timestamp, its time.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from radar_pipeline.receiver.sources import _kube, common
from radar_pipeline.receiver.sources.base import Parsed, Refused

NAME = "flux"
ID_PREFIXES: tuple[str, ...] = ("flux-ks:", "flux-hr:")
DEPLOYED = {"Kustomization": {"ReconciliationSucceeded"}, "HelmRelease": {"InstallSucceeded", "UpgradeSucceeded"}}
PREFIX = {"Kustomization": "flux-ks", "HelmRelease": "flux-hr"}
KEPT = ("app-version", "oci-digest", "origin-revision")  # metadata kept with the deploy, beside its revision


def authenticate(headers: Mapping[str, str], body: bytes, secret: str) -> None:
    """generic-hmac's X-Signature when the request has one, else generic's bearer token (401 when wrong)."""
    if "x-signature" in headers:
        _kube.check_signature(headers, body, secret)
    else:
        _kube.check_bearer(headers, secret)


def parse(headers: Mapping[str, str], body: bytes, params: Mapping[str, str]) -> Parsed:
    """A reconciled Kustomization or an installed or upgraded HelmRelease as a deploy; any other event as ignored,
    with why (Refused when the body is not a usable event)."""
    obj = common.json_object(body)
    involved = _kube.section(obj, "involvedObject")
    kind = _kube.text(involved, "kind", "involvedObject.")
    namespace = _kube.kube_name(involved, "namespace", "involvedObject.")
    name = _kube.kube_name(involved, "name", "involvedObject.")
    severity = _kube.text(obj, "severity")
    reason = _kube.text(obj, "reason")
    at = _kube.timestamp(obj, "timestamp")
    assert kind is not None and reason is not None
    what = f"Flux {kind} {namespace}/{name}"
    if kind not in DEPLOYED:
        return Parsed(None, ignored=f"{what}: only Kustomization and HelmRelease events are deploys")
    if severity != "info":
        return Parsed(None, ignored=f"{what} reported {severity} ({reason}): not a deploy")
    if reason not in DEPLOYED[kind]:
        return Parsed(None, ignored=f"{what} reported {reason}, not {' or '.join(sorted(DEPLOYED[kind]))}")
    metadata = _metadata(obj)
    revision = _revision(metadata)
    controller = _kube.text(obj, "reportingController", required=False)
    keyed = (kind, namespace, name, revision) if kind == "Kustomization" else (kind, namespace, name, revision, at)
    return Parsed(
        _kube.event(
            deploy_id=_kube.stable_id(PREFIX[kind], f"{namespace}.{name}", *(str(k) for k in keyed)),
            target=_kube.target({}, params),
            deployed_at=None if kind == "Kustomization" else at,
            service=name,
            version=revision,
            source=NAME,
            metadata={
                "flux": {
                    "kind": kind,
                    "namespace": namespace,
                    "reason": reason,
                    "timestamp": at.isoformat(),
                    **({"controller": controller} if controller else {}),
                    **{k: v for k, v in metadata.items() if k in KEPT},
                }
            },
        )
    )


def _metadata(obj: Mapping[str, Any]) -> dict[str, str]:
    """The metadata a deploy keeps (its revision, and KEPT), each value a string by the deploy event's rules; the
    API group prefix of older controllers' keys dropped (`kustomize.toolkit.fluxcd.io/revision` → `revision`). Other
    keys (an Alert's summary, the commit status flag) are not read, so they refuse nothing."""
    raw = obj.get("metadata")
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise Refused(422, "metadata is not an object")
    found: dict[str, str] = {}
    for key in raw:
        short = key.rsplit("/", 1)[-1]
        if short in ("revision", *KEPT) and (value := _kube.text(raw, key, "metadata.", required=False)):
            found[short] = value
    return found


def _revision(metadata: Mapping[str, str]) -> str:
    revision = metadata.get("revision")
    if not revision:
        raise Refused(422, "metadata.revision is missing: Flux names the applied revision there")
    return revision
