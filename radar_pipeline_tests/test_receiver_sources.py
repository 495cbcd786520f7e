"""The receiver's Argo CD, Flux and Argo Rollouts sources, pure: bodies shaped as each tool posts them (Flux's as Go's
encoding/json writes its Event; Argo CD's and Rollouts' as the templates of docs/receiver-sources.md render), each
answered with the right deploy event, an ignored reason, or a Refused with its status and a one-line reason naming
the field: hostile text in every field, wrong types, missing fields, oversized strings, wrong or missing tokens and
signatures. One test records the parsed events in the real warehouse: re-deliveries are one deploy."""

from __future__ import annotations

import copy
import hashlib
import hmac
import json
import re
import shlex
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest
import sqlalchemy as sa
import yaml

from radar_pipeline.receiver.sources import argocd, flux, rollouts
from radar_pipeline.receiver.sources.base import Parsed, Refused
from radar_pipeline.warehouse import deploys

SECRET = "s3cret-token-0123456789"
SHA = "731f7eaddfb6af01cb2173e18f0f75b0ba780ef1"
FINISHED = "2026-11-29T12:00:00Z"

# What the recommended Argo CD template renders for a succeeded sync (docs/receiver-sources.md).
ARGOCD = {
    "app": "shop",
    "namespace": "argocd",
    "revision": SHA,
    "phase": "Succeeded",
    "sync_status": "Synced",
    "health": "Healthy",
    "finished_at": FINISHED,
    "repo_url": "https://github.com/acme/shop-deploy.git",
    "app_url": "https://argocd.example.com/applications/shop",
    "target": "main",
}
# Flux's Event as kustomize-controller reports a reconciled revision (notification-controller docs, events.md), in the
# field order of Go's encoding/json.
FLUX_KS = {
    "involvedObject": {
        "kind": "Kustomization",
        "namespace": "apps",
        "name": "webapp",
        "uid": "7d0cdc51-ddcf-4743-b223-83ca5c699632",
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
    },
    "severity": "info",
    "timestamp": FINISHED,
    "message": "Reconciliation finished in 1.2s, next run in 10m0s",
    "reason": "ReconciliationSucceeded",
    "metadata": {"revision": f"main@sha1:{SHA}", "commit_status": "update"},
    "reportingController": "kustomize-controller",
    "reportingInstance": "kustomize-controller-7c7b47f5f-8bhrp",
}
FLUX_HR = {
    "involvedObject": {"kind": "HelmRelease", "namespace": "apps", "name": "podinfo"},
    "severity": "info",
    "timestamp": FINISHED,
    "message": "Helm upgrade succeeded for release apps/podinfo.v5 with chart podinfo@6.5.4",
    "reason": "UpgradeSucceeded",
    "metadata": {"revision": "6.5.4", "app-version": "6.5.4", "oci-digest": "sha256:" + "b" * 64},
    "reportingController": "helm-controller",
}
# What the recommended Argo Rollouts template renders when the rollout completed.
ROLLOUT = {
    "trigger": "on-rollout-completed",
    "rollout": "shop",
    "namespace": "apps",
    "revision": "7",
    "pod_hash": "6b7f9c8d5",
    "phase": "Healthy",
    "step": 3,
    "image": "registry.example.com/shop:1.4.2",
    "target": "main",
}


def body(payload: Mapping[str, Any]) -> bytes:
    """The payload as Go's encoding/json writes it: compact, UTF-8, keys in order."""
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()


def bearer(token: str = SECRET) -> dict[str, str]:
    return {"authorization": f"Bearer {token}", "content-type": "application/json"}


def signed(raw: bytes, key: str = SECRET, algorithm: str = "sha256") -> dict[str, str]:
    digest = hmac.new(key.encode(), raw, getattr(hashlib, algorithm)).hexdigest()
    return {"x-signature": f"{algorithm}={digest}", "gotk-component": "kustomize-controller"}


def with_field(payload: Mapping[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A copy with the field at a dotted path set (a value of DROP removes it)."""
    changed = copy.deepcopy(dict(payload))
    *parents, last = path.split(".")
    node = changed
    for key in parents:
        node = node[key]
    if value is DROP:
        node.pop(last, None)
    else:
        node[last] = value
    return changed


DROP = object()


def refused(parse: Callable[..., Parsed], payload: bytes, params: Mapping[str, str] | None = None) -> Refused:
    with pytest.raises(Refused) as caught:
        parse({}, payload, params or {})
    reason = caught.value.reason
    assert "\n" not in reason and not deploys.CONTROL.search(reason), reason  # one printable line
    assert SECRET not in reason
    return caught.value


# --- Argo CD ---


def test_argocd_a_succeeded_sync_is_a_deploy_at_its_finish():
    parsed = argocd.parse(bearer(), body(ARGOCD), {})
    event = parsed.event
    assert parsed.ignored is None and event is not None
    assert event.deploy_id.startswith("argocd:shop:") and deploys.DEPLOY_ID.fullmatch(event.deploy_id)
    assert (event.target, event.service, event.version, event.source) == ("main", "shop", SHA, "argocd")
    assert event.deployed_at == datetime(2026, 11, 29, 12, tzinfo=UTC)
    assert event.url == ARGOCD["app_url"]
    assert event.metadata == {
        "argocd": {
            "namespace": "argocd",
            "sync_status": "Synced",
            "health": "Healthy",
            "repo_url": ARGOCD["repo_url"],
            "phase": "Succeeded",
        }
    }


def test_argocd_the_same_sync_is_the_same_deploy_and_another_sync_is_another():
    first = argocd.parse({}, body(ARGOCD), {}).event
    # on-deployed and on-sync-succeeded both firing, or a re-delivery: health differs, the sync is the same.
    again = argocd.parse({}, body(with_field(ARGOCD, "health", "Progressing")), {}).event
    resynced = argocd.parse({}, body(with_field(ARGOCD, "finished_at", "2026-11-29T13:00:00Z")), {}).event
    other_app = argocd.parse({}, body(with_field(ARGOCD, "app", "cart")), {}).event
    assert first is not None and again is not None and resynced is not None and other_app is not None
    assert first.deploy_id == again.deploy_id
    assert len({first.deploy_id, resynced.deploy_id, other_app.deploy_id}) == 3


@pytest.mark.parametrize("phase", ["Running", "Failed", "Error", "Terminating"])
def test_argocd_a_sync_not_succeeded_is_ignored_with_why(phase):
    parsed = argocd.parse({}, body(with_field(ARGOCD, "phase", phase)), {})
    assert parsed.event is None and parsed.ignored is not None and phase in parsed.ignored


def test_argocd_the_target_comes_from_the_url_or_the_body():
    no_target = with_field(ARGOCD, "target", DROP)
    event = argocd.parse({}, body(no_target), {"target": "billing"}).event
    assert event is not None and event.target == "billing"
    same = argocd.parse({}, body(ARGOCD), {"target": "main"}).event
    assert same is not None and same.target == "main"
    assert "?target=" in refused(argocd.parse, body(no_target)).reason
    conflict = refused(argocd.parse, body(ARGOCD), {"target": "billing"})
    assert conflict.status == 422 and "target" in conflict.reason
    assert "target" in refused(argocd.parse, body(no_target), {"target": "bad\x1b[2J"}).reason


# --- Flux ---


def test_flux_a_reconciled_kustomization_is_a_deploy_of_its_revision():
    raw = body(FLUX_KS)
    parsed = flux.parse(signed(raw), raw, {"target": "main"})
    event = parsed.event
    assert event is not None and parsed.ignored is None
    assert event.deploy_id.startswith("flux-ks:apps.webapp:") and deploys.DEPLOY_ID.fullmatch(event.deploy_id)
    assert (event.target, event.service, event.version, event.source) == ("main", "webapp", f"main@sha1:{SHA}", "flux")
    assert event.deployed_at is None  # its first report's arrival: the same revision is reported at every interval
    assert event.metadata["flux"]["reason"] == "ReconciliationSucceeded"
    assert event.metadata["flux"]["timestamp"] == "2026-11-29T12:00:00+00:00"


def test_flux_the_interval_s_repeat_is_the_same_deploy_and_a_new_revision_another():
    first = flux.parse({}, body(FLUX_KS), {"target": "main"}).event
    later = with_field(with_field(FLUX_KS, "timestamp", "2026-11-29T12:10:00Z"), "message", "finished in 0.9s")
    repeat = flux.parse({}, body(later), {"target": "main"}).event
    new = flux.parse({}, body(with_field(FLUX_KS, "metadata.revision", "main@sha1:" + "c" * 40)), {"target": "main"})
    other_ns = flux.parse({}, body(with_field(FLUX_KS, "involvedObject.namespace", "shop")), {"target": "main"})
    assert first is not None and repeat is not None and new.event is not None and other_ns.event is not None
    assert (first.deploy_id, first.deployed_at, first.version) == (repeat.deploy_id, None, repeat.version)
    assert len({first.deploy_id, new.event.deploy_id, other_ns.event.deploy_id}) == 3


def test_flux_an_upgraded_helm_release_is_a_deploy_at_its_time_values_only_upgrades_included():
    event = flux.parse({}, body(FLUX_HR), {"target": "main"}).event
    assert event is not None and event.deploy_id.startswith("flux-hr:apps.podinfo:")
    assert event.deployed_at == datetime(2026, 11, 29, 12, tzinfo=UTC) and event.version == "6.5.4"
    assert event.metadata["flux"]["app-version"] == "6.5.4"
    # A values-only upgrade keeps the chart version: it is its own deploy; the same event delivered again is not.
    values_only = flux.parse({}, body(with_field(FLUX_HR, "timestamp", "2026-11-29T14:00:00Z")), {"target": "main"})
    assert values_only.event is not None and values_only.event.deploy_id != event.deploy_id
    assert flux.parse({}, body(FLUX_HR), {"target": "main"}).event == event
    installed = flux.parse({}, body(with_field(FLUX_HR, "reason", "InstallSucceeded")), {"target": "main"})
    assert installed.event is not None


def test_flux_older_controllers_metadata_keys_with_their_api_group_are_read():
    old = with_field(FLUX_KS, "metadata", {"kustomize.toolkit.fluxcd.io/revision": f"main/{SHA}"})
    event = flux.parse({}, body(old), {"target": "main"}).event
    assert event is not None and event.version == f"main/{SHA}"


@pytest.mark.parametrize(
    ("path", "value", "said"),
    [
        ("severity", "error", "error"),
        ("reason", "Progressing", "Progressing"),
        ("reason", "HealthCheckFailed", "HealthCheckFailed"),
        ("reason", "UpgradeSucceeded", "UpgradeSucceeded"),  # a Kustomization's reason is not a HelmRelease's
        ("involvedObject.kind", "GitRepository", "GitRepository"),
        ("involvedObject.kind", "HelmChart", "HelmChart"),
    ],
)
def test_flux_errors_other_reasons_and_other_kinds_are_ignored_with_why(path, value, said):
    parsed = flux.parse({}, body(with_field(FLUX_KS, path, value)), {"target": "main"})
    assert parsed.event is None and parsed.ignored is not None and said in parsed.ignored


def test_flux_a_helm_release_failure_is_ignored():
    failed = with_field(with_field(FLUX_HR, "severity", "error"), "reason", "UpgradeFailed")
    parsed = flux.parse({}, body(failed), {"target": "main"})
    assert parsed.event is None and parsed.ignored is not None and "UpgradeFailed" in parsed.ignored


def test_flux_a_deploy_needs_its_revision_and_its_target():
    for metadata in ({}, DROP, {"app-version": "1.0"}):
        without = body(with_field(FLUX_KS, "metadata", metadata))
        assert "metadata.revision" in refused(flux.parse, without, {"target": "m"}).reason
    assert "metadata" in refused(flux.parse, body(with_field(FLUX_KS, "metadata", ["x"])), {"target": "m"}).reason
    assert "target" in refused(flux.parse, body(FLUX_KS)).reason
    assert "involvedObject" in refused(flux.parse, body(with_field(FLUX_KS, "involvedObject", "webapp"))).reason


def test_flux_generic_hmac_signature_is_checked_over_the_exact_body():
    raw = body(FLUX_KS)
    # A known answer, computed apart: body(FLUX_KS) written to a file, `openssl dgst -sha256 -hmac KEY FILE`.
    known = {"x-signature": "sha256=d3b79fe310e877861759b74caa9234fb4991b70f19b2d301bc24db07bf181ae2"}
    flux.authenticate(known, raw, "flux-hmac-key-0123456789")
    flux.authenticate(signed(raw), raw, SECRET)
    flux.authenticate({"x-signature": signed(raw)["x-signature"].upper().replace("SHA256", "sha256")}, raw, SECRET)
    for algorithm in ("sha224", "sha384", "sha512"):  # named by Flux's documented verifier
        flux.authenticate(signed(raw, algorithm=algorithm), raw, SECRET)
    other_body = body(with_field(FLUX_KS, "metadata.revision", "main@sha1:" + "d" * 40))
    cases = {
        "over another body": (signed(other_body), raw),
        "the body changed by one byte": (signed(raw), raw + b" "),
        "another key": (signed(raw, key="another-key-0123456789"), raw),
        "no hash name": ({"x-signature": signed(raw)["x-signature"].split("=", 1)[1]}, raw),
        "an unknown hash": ({"x-signature": "md5=" + hashlib.md5(raw).hexdigest()}, raw),
        "empty": ({"x-signature": ""}, raw),
        "not hex": ({"x-signature": "sha256=ünïcødé"}, raw),
    }
    for case, (headers, sent) in cases.items():
        with pytest.raises(Refused) as caught:
            flux.authenticate(headers, sent, SECRET)
        assert caught.value.status == 401, case
        assert SECRET not in caught.value.reason and "\n" not in caught.value.reason


def test_flux_generic_bearer_token_and_no_secret_refused():
    raw = body(FLUX_KS)
    flux.authenticate(bearer(), raw, SECRET)
    for headers in ({}, bearer("wrong-token-0123456789"), {"authorization": SECRET}, {"authorization": "Bearer "}):
        with pytest.raises(Refused) as caught:
            flux.authenticate(headers, raw, SECRET)
        assert caught.value.status == 401 and SECRET not in caught.value.reason
    with pytest.raises(Refused, match="no secret"):
        flux.authenticate(bearer(""), raw, "")
    with pytest.raises(Refused, match="no secret"):
        flux.authenticate(signed(raw, key=""), raw, "")


# --- Argo Rollouts ---


def test_rollouts_a_completed_rollout_is_a_deploy_and_its_first_canary_step_the_same_one():
    completed = rollouts.parse(bearer(), body(ROLLOUT), {}).event
    assert completed is not None and completed.deploy_id.startswith("rollout:apps.shop:")
    assert (completed.target, completed.service, completed.version, completed.source) == (
        "main",
        "shop",
        ROLLOUT["image"],
        "rollouts",
    )
    assert completed.deployed_at is None
    assert completed.metadata["rollouts"]["revision"] == "7"
    first_step = with_field(with_field(ROLLOUT, "trigger", "on-rollout-step-completed"), "step", 1)
    stepped = rollouts.parse({}, body(with_field(first_step, "phase", "Paused")), {}).event
    assert stepped is not None and stepped.deploy_id == completed.deploy_id
    next_revision = rollouts.parse({}, body(with_field(ROLLOUT, "revision", "8")), {}).event
    assert next_revision is not None and next_revision.deploy_id != completed.deploy_id
    no_image = rollouts.parse({}, body(with_field(ROLLOUT, "image", DROP)), {}).event
    assert no_image is not None and no_image.version == "revision 7"


@pytest.mark.parametrize(
    ("trigger", "step", "said"),
    [
        ("on-rollout-aborted", 1, "aborted"),
        ("on-rollout-step-completed", 2, "step 2"),
        ("on-rollout-step-completed", None, "step None"),
        ("on-rollout-updated", 0, "on-rollout-updated"),
        ("on-analysis-run-failed", 0, "on-analysis-run-failed"),
    ],
)
def test_rollouts_aborted_later_steps_and_other_triggers_are_ignored_with_why(trigger, step, said):
    payload = with_field(with_field(ROLLOUT, "trigger", trigger), "step", step)
    parsed = rollouts.parse({}, body(payload), {})
    assert parsed.event is None and parsed.ignored is not None and said in parsed.ignored


@pytest.mark.parametrize("step", ["1", 1.5, True, -1, [1]])
def test_rollouts_a_step_that_is_not_a_whole_number_is_refused(step):
    assert "step" in refused(rollouts.parse, body(with_field(ROLLOUT, "step", step))).reason


@pytest.mark.parametrize("source", [argocd, rollouts])
def test_argocd_and_rollouts_bearer_token(source):
    source.authenticate(bearer(), b"{}", SECRET)
    source.authenticate({"authorization": f"bearer   {SECRET}  "}, b"{}", SECRET)
    wrong = [
        {},
        bearer("x"),
        bearer(SECRET + "x"),
        bearer(SECRET[:-1]),
        {"authorization": f"Basic {SECRET}"},
        {"authorization": SECRET},
        bearer("ünïcødé-tøken"),
        signed(b"{}"),  # a signature is not what these sources take
    ]
    for headers in wrong:
        with pytest.raises(Refused) as caught:
            source.authenticate(headers, b"{}", SECRET)
        assert caught.value.status == 401 and SECRET not in caught.value.reason


# --- hostile input, every field of every source ---

# (source, a good payload, URL parameters, its fields: path → required, what the field must be)
SOURCES = {
    "argocd": (
        argocd,
        ARGOCD,
        {},
        {
            "app": "name",
            "phase": "text",
            "revision": "text",
            "finished_at": "time",
            "namespace": "optional",
            "sync_status": "optional",
            "health": "optional",
            "repo_url": "optional",
            "app_url": "optional",
            "target": "text",
        },
    ),
    "flux": (
        flux,
        FLUX_KS,
        {"target": "main"},
        {
            "involvedObject.kind": "text",
            "involvedObject.namespace": "name",
            "involvedObject.name": "name",
            "severity": "text",
            "reason": "text",
            "timestamp": "time",
            "metadata.revision": "text",
            "reportingController": "optional",
        },
    ),
    "rollouts": (
        rollouts,
        ROLLOUT,
        {},
        {
            "trigger": "text",
            "rollout": "name",
            "namespace": "name",
            "revision": "text",
            "pod_hash": "optional",
            "phase": "optional",
            "image": "optional",
            "target": "text",
        },
    ),
}
FIELDS = [(source, path, kind) for source, (_, _, _, fields) in SOURCES.items() for path, kind in fields.items()]
HOSTILE = ["\n", "\r", "\x00", "\x1b[2J", "\x7f", "\x85", "\u2028", "\u202e", "\u2066"]


def _stored_strings(event: deploys.DeployEvent) -> list[str]:
    found = [v for v in (event.deploy_id, event.target, event.service, event.version, event.url) if v]
    stack: list[Any] = [event.metadata]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, str):
            found.append(node)
    return found


@pytest.mark.parametrize(("source", "path", "kind"), FIELDS)
def test_every_field_refuses_control_characters_wrong_types_and_oversized_text_naming_it(source, path, kind):
    module, good, params, _ = SOURCES[source]
    name = path.rsplit(".", 1)[-1]
    original = good
    for key in path.split("."):
        original = original[key]
    for char in HOSTILE:
        payload = body(with_field(good, path, f"{original[:3]}{char}x"))
        caught = refused(module.parse, payload, params)
        assert caught.status == 422 and name in caught.reason, (repr(char), caught.reason)
    for wrong in (7, 1.5, True, ["x"], {"x": "y"}):
        caught = refused(module.parse, body(with_field(good, path, wrong)), params)
        assert caught.status == 422 and name in caught.reason, (wrong, caught.reason)
    caught = refused(module.parse, body(with_field(good, path, "a" * (deploys.MAX_TEXT + 1))), params)
    assert caught.status == 422 and name in caught.reason and len(caught.reason) < 300, caught.reason


@pytest.mark.parametrize(("source", "path", "kind"), FIELDS)
def test_every_field_missing_is_refused_naming_it_or_left_out(source, path, kind):
    module, good, params, _ = SOURCES[source]
    name = path.rsplit(".", 1)[-1]
    for absent in (DROP, None, ""):
        payload = body(with_field(good, path, absent))
        if kind == "optional":
            event = module.parse({}, payload, params).event
            assert event is not None and all(v for v in _stored_strings(event))
        else:
            caught = refused(module.parse, payload, params)
            assert caught.status == 422 and name in caught.reason, caught.reason


@pytest.mark.parametrize(("source", "path", "kind"), FIELDS)
def test_unicode_in_every_field_is_kept_where_text_is_free_and_refused_in_names(source, path, kind):
    module, good, params, _ = SOURCES[source]
    unicode = "ünïcødé ✓ 部署 🚀"
    payload = body(with_field(good, path, unicode))
    if kind in ("name", "time"):
        caught = refused(module.parse, payload, params)
        assert caught.status == 422 and path.rsplit(".", 1)[-1] in caught.reason
        return
    if path in ("phase", "trigger", "severity", "reason", "involvedObject.kind") and kind == "text":
        parsed = module.parse({}, payload, params)  # not a finished deploy: ignored, the text told as it is
        assert parsed.event is None and parsed.ignored is not None and unicode in parsed.ignored
        return
    if path == "app_url":
        assert "url" in refused(module.parse, payload, params).reason  # not an http(s) URL
        return
    parsed = module.parse({}, payload, params)
    assert parsed.event is not None and unicode in _stored_strings(parsed.event)


@pytest.mark.parametrize("source", sorted(SOURCES))
def test_a_body_that_is_not_a_json_object_is_a_400(source):
    module, good, params, _ = SOURCES[source]
    for raw in (b"", b"not json", b"[1, 2]", b'"text"', b"null", b"\xff\xfe{}", body(good)[:-1], b"[" * 100_000):
        assert refused(module.parse, raw, params).status == 400


def test_many_values_under_a_long_key_are_read_in_little_memory_and_time():
    """Each value once carried a copy of its path, so every child of a long key copied the key: 68,000 zeros under a
    120,000-character key (256,007 bytes) took 7.8 GB and 9 s. The small body first: a regression fails on it (40 MB
    then) before the big one could take the machine's memory. A lone surrogate at the end is still found and named,
    the long key shortened in the reason."""
    import time
    import tracemalloc

    from radar_pipeline.receiver.sources import common

    for key, count in ((2_000, 20_000), (120_000, 68_000)):
        raw = ('{"' + "k" * key + '": [' + ",".join(["0"] * count) + "]}").encode()
        spoiled = raw[:-2] + b',"\\ud800"]}'  # the surrogate as its JSON escape
        for read in (common.json_object,):
            tracemalloc.start()
            started = time.monotonic()
            try:
                assert read(raw)["k" * key] == [0] * count
                with pytest.raises(Refused) as caught:
                    read(spoiled)
                took = time.monotonic() - started
                peak = tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()
            assert peak < 12 * 2**20 and took < 10, (len(raw), read.__module__, peak, took)
            reason = caught.value.reason
            assert caught.value.status == 400 and len(reason) < 300, reason[:300]
            assert reason.endswith(f"[{count}] holds a lone surrogate (not valid Unicode text)"), reason


def test_free_text_that_is_not_stored_may_hold_anything():
    """Flux's message (a change set, with newlines) is not stored, so it refuses nothing."""
    noisy = with_field(FLUX_KS, "message", "Deployment/apps/webapp configured\n\x1b[31mred\x1b[0m \u202e")
    event = flux.parse({}, body(noisy), {"target": "main"}).event
    assert event is not None and not [s for s in _stored_strings(event) if deploys.CONTROL.search(s)]


def test_names_too_long_for_a_deploy_id_still_give_a_valid_stable_one():
    long_name = "a" * 200 + "." + "b" * 52
    event = argocd.parse({}, body(with_field(ARGOCD, "app", long_name)), {}).event
    again = argocd.parse({}, body(with_field(ARGOCD, "app", long_name)), {}).event
    other = argocd.parse({}, body(with_field(ARGOCD, "app", long_name[:-1] + "c")), {}).event
    assert event is not None and again is not None and other is not None
    assert deploys.DEPLOY_ID.fullmatch(event.deploy_id) and event.deploy_id == again.deploy_id
    assert other.deploy_id != event.deploy_id


# --- recorded in the real warehouse ---


def test_redeliveries_are_one_deploy_in_the_warehouse(warehouse):
    """Each source's re-delivery (and Flux's report of the same revision at the next interval, at a later time) is
    'already recorded, unchanged'; a different sync is a new deploy."""
    with warehouse.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO radar.pgss_info_snapshot "
                "VALUES ('main', now() - interval '1 hour', 0, NULL, 180000, '1.12', 0, 0)"
            )
        )
    recent = datetime.now(UTC).replace(microsecond=0).isoformat()
    argo = with_field(ARGOCD, "finished_at", recent)
    deliveries = [
        [argocd.parse({}, body(argo), {}), argocd.parse({}, body(with_field(argo, "health", "Degraded")), {})],
        [
            flux.parse({}, body(FLUX_KS), {"target": "main"}),
            flux.parse({}, body(with_field(FLUX_KS, "timestamp", recent)), {"target": "main"}),
        ],
        [
            rollouts.parse({}, body(with_field(ROLLOUT, "trigger", "on-rollout-step-completed") | {"step": 1}), {}),
            rollouts.parse({}, body(ROLLOUT), {}),
        ],
    ]
    for first, again in deliveries:
        assert first.event is not None and again.event is not None
        stored = deploys.record(warehouse, first.event)
        assert stored.inserted
        repeat = deploys.record(warehouse, again.event)
        assert not repeat.inserted and repeat.event.deployed_at == stored.event.deployed_at
    resynced = argocd.parse({}, body(with_field(argo, "revision", "e" * 40)), {}).event
    assert resynced is not None and deploys.record(warehouse, resynced).inserted
    with warehouse.connect() as conn:
        sources = conn.execute(sa.text("SELECT source, count(*) FROM radar.deploy_event GROUP BY 1 ORDER BY 1"))
        assert [tuple(r) for r in sources] == [("argocd", 2), ("flux", 1), ("rollouts", 1)]


# --- the templates docs/receiver-sources.md recommends, rendered against real-shaped objects ---

DOCS = Path(__file__).resolve().parents[1] / "docs" / "receiver-sources.md"
ACTION = re.compile(r"\{\{\s*toJson\s+(.+?)\s*\}\}")
NO_VALUE = object()  # what Go's templates give for a key a map does not have


def _lookup(value: Any, path: str) -> Any:
    """A Go template's field chain (.a.b.c) on maps: a missing key is no value; a field of no value is an error."""
    for key in [k for k in path.split(".") if k]:
        if value is NO_VALUE or not isinstance(value, dict):
            raise ValueError(f"nil pointer evaluating .{key}")
        value = value.get(key, NO_VALUE)
    return value


def _evaluate(expr: str, data: dict[str, Any]) -> Any:
    """The few forms of Go template expressions the documented templates use, each evaluated as text/template does:
    .a.b, (index .a "key"), (index .a 0).b, (printf "%s/x/%s" .a .b). Anything else fails the test."""
    expr = expr.strip()
    if expr.startswith("."):
        return _lookup(data, expr)
    match = re.fullmatch(r"\((\w+)\s+(.*)\)(\.[\w.]+)?", expr)
    assert match, f"a template expression this test does not know: {expr}"
    function, arguments, chain = match.groups()
    args = [
        _lookup(data, word) if word.startswith(".") else int(word) if word.isdigit() else word
        for word in shlex.split(arguments)
    ]
    if function == "index":
        container, key = args
        result = container[key] if isinstance(container, list) else container.get(key, NO_VALUE)
    elif function == "printf":
        result = args[0].replace("%s", "{}").format(*args[1:])
    else:
        raise AssertionError(f"a template function this test does not know: {function}")
    return _lookup(result, chain) if chain else result


def render(template: str, data: dict[str, Any]) -> bytes:
    """The template's body with each {{ toJson X }} replaced by sprig's toJson of X (no value is null)."""

    def to_json(match: re.Match[str]) -> str:
        value = _evaluate(match.group(1), data)
        return json.dumps(None if value is NO_VALUE else value, ensure_ascii=False)

    rendered = ACTION.sub(to_json, template)
    assert "{{" not in rendered, rendered
    return rendered.encode()


def documented() -> list[dict[str, Any]]:
    """Every YAML object of the docs page's yaml blocks."""
    blocks = re.findall(r"```yaml\n(.*?)```", DOCS.read_text(), flags=re.S)
    return [doc for block in blocks for doc in yaml.safe_load_all(block) if isinstance(doc, dict)]


def _config_map(name: str) -> dict[str, str]:
    (found,) = [d for d in documented() if d.get("kind") == "ConfigMap" and d["metadata"]["name"] == name]
    return found["data"]


def _webhook_body(data: dict[str, str], template: str) -> str:
    return yaml.safe_load(data[f"template.{template}"])["webhook"]["radar"]["body"]


APPLICATION = {  # an Argo CD Application as the notifications controller sees it after a sync
    "metadata": {
        "name": "shop",
        "namespace": "argocd",
        "annotations": {"notifications.argoproj.io/subscribe.on-deployed-radar.radar": "", "radar/target": "main"},
    },
    "spec": {"source": {"repoURL": "https://github.com/acme/shop-deploy.git", "path": "k8s", "targetRevision": "HEAD"}},
    "status": {
        "sync": {"status": "Synced", "revision": SHA},
        "health": {"status": "Healthy"},
        "operationState": {
            "phase": "Succeeded",
            "startedAt": "2026-11-29T11:59:40Z",
            "finishedAt": FINISHED,
            "syncResult": {"revision": SHA, "source": {"repoURL": "https://github.com/acme/shop-deploy.git"}},
        },
    },
}
ROLLOUT_OBJECT = {  # an Argo Rollout as its controller sends it to the notifications engine
    "metadata": {
        "name": "shop",
        "namespace": "apps",
        "annotations": {"rollout.argoproj.io/revision": "7", "radar/target": "main"},
    },
    "spec": {"template": {"spec": {"containers": [{"name": "shop", "image": "registry.example.com/shop:1.4.2"}]}}},
    "status": {"currentPodHash": "6b7f9c8d5", "phase": "Healthy", "currentStepIndex": 3, "abort": False},
}


def test_the_documented_argocd_template_renders_a_body_mapped_to_the_deploy():
    data = _config_map("argocd-notifications-cm")
    context = yaml.safe_load(data["context"])
    raw = render(_webhook_body(data, "radar-deploy"), {"app": APPLICATION, "context": context})
    event = argocd.parse(bearer(), raw, {}).event
    assert event is not None and event.url == "https://argocd.example.com/applications/shop"
    assert (event.target, event.service, event.version) == ("main", "shop", SHA)
    assert event == argocd.parse({}, body(ARGOCD), {}).event  # the payload the other tests use is this one
    assert "$radar-token" in data["service.webhook.radar"] and "/v1/deploys/argocd" in data["service.webhook.radar"]
    running = copy.deepcopy(APPLICATION)
    running["status"]["operationState"]["phase"] = "Running"
    assert argocd.parse(
        {}, render(_webhook_body(data, "radar-deploy"), {"app": running, "context": context}), {}
    ).ignored


def test_the_documented_rollouts_template_renders_a_body_mapped_to_the_deploy():
    data = _config_map("argo-rollouts-notification-configmap")
    raw = render(_webhook_body(data, "radar-rollout-completed"), {"rollout": ROLLOUT_OBJECT})
    event = rollouts.parse(bearer(), raw, {}).event
    assert event is not None and event == rollouts.parse({}, body(ROLLOUT), {}).event
    blue_green = copy.deepcopy(ROLLOUT_OBJECT)
    del blue_green["status"]["currentStepIndex"]  # no steps: no value, rendered null
    assert rollouts.parse({}, render(_webhook_body(data, "radar-rollout-completed"), {"rollout": blue_green}), {}).event
    assert "radar-rollout-completed" in data["trigger.on-rollout-completed"]


def test_the_documented_flux_providers_post_to_the_flux_source_with_the_target():
    providers = [d for d in documented() if d.get("kind") == "Provider"]
    assert sorted(p["spec"]["type"] for p in providers) == ["generic", "generic-hmac"]
    for provider in providers:
        address = urlsplit(provider["spec"]["address"])
        assert address.path == f"/v1/deploys/{flux.NAME}"
        params = dict(parse_qsl(address.query))
        assert flux.parse({}, body(FLUX_KS), params).event is not None
    secrets = {
        d["stringData"].get("headers", "") + d["stringData"].get("token", "")
        for d in documented()
        if d.get("kind") == "Secret" and d["metadata"].get("namespace") == "flux-system"
    }
    assert any(s.startswith("Authorization: Bearer ") for s in secrets) and len(secrets) == 2


def test_flux_metadata_radar_does_not_keep_refuses_nothing():
    """An Alert's summary or eventMetadata may hold anything: only the revision and the kept keys are read."""
    noisy = with_field(FLUX_KS, "metadata.summary", "prod\ncluster \x1b[1m")
    noisy = with_field(noisy, "metadata.env", {"nested": ["not", "a", "string"]})
    event = flux.parse({}, body(noisy), {"target": "main"}).event
    assert event is not None and "summary" not in event.metadata["flux"] and "env" not in event.metadata["flux"]
    for key in ("app-version", "oci-digest", "origin-revision"):
        assert (
            "metadata"
            in refused(flux.parse, body(with_field(FLUX_HR, f"metadata.{key}", "x\x1b")), {"target": "m"}).reason
        )
