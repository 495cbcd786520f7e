"""deploy/receiver/ checked against the code, since no Kubernetes cluster runs here: the Deployment runs `radar webhook
serve` from deploy/Dockerfile's image as its user, with a read-only root file system and no privilege; its variables
are settings config/settings.py knows, every secret taken from a Secret; each source of the receiver has its token
there; the probes and the Service use the port the command is given; and docs/receiver-sources.md points each tool
at the Service, at /v1/deploys/<the source's NAME>, with the Secret's keys the Deployment reads."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from radar_pipeline import cli
from radar_pipeline.config import settings as config
from radar_pipeline.receiver.sources import SOURCES as REGISTRY
from radar_pipeline_tests.test_deploy_files import DOCKERFILE, dockerfile_instructions, known_settings, option

ROOT = Path(__file__).resolve().parents[1]
RECEIVER = ROOT / "deploy" / "receiver"
DOCS = ROOT / "docs" / "receiver-sources.md"
SOURCES = tuple(m for name, m in REGISTRY.items() if name != "generic")  # generic: RADAR_RECEIVER_TOKENS
TOOLS = tuple(REGISTRY[name] for name in ("argocd", "flux", "rollouts"))  # the tools docs/receiver-sources.md sets up


@pytest.fixture(scope="module")
def manifests() -> dict[str, dict[str, Any]]:
    """Every object of deploy/receiver/, by kind (one each)."""
    found: dict[str, dict[str, Any]] = {}
    for path in sorted(RECEIVER.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            assert isinstance(doc, dict) and doc.get("apiVersion") and doc.get("kind"), path
            assert doc["kind"] not in found, f"{path}: a second {doc['kind']}"
            found[doc["kind"]] = doc
    assert set(found) == {"Deployment", "Service"}, sorted(found)
    return found


@pytest.fixture(scope="module")
def pod(manifests: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return manifests["Deployment"]["spec"]["template"]["spec"]


@pytest.fixture(scope="module")
def container(pod: dict[str, Any]) -> dict[str, Any]:
    (only,) = pod["containers"]
    return only


def test_it_runs_radar_webhook_serve_from_the_image_as_the_image_s_user(
    pod: dict[str, Any], container: dict[str, Any]
) -> None:
    instructions = dockerfile_instructions(DOCKERFILE.read_text())
    assert not [i for i in instructions if i[0] == "ENTRYPOINT"], "an ENTRYPOINT would run before the command"
    (user,) = [arguments for keyword, arguments in instructions if keyword == "USER"]
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["radar"] == "radar_pipeline.cli:main"
    assert container["command"][:3] == ["radar", "webhook", "serve"]
    assert str(pod["securityContext"]["runAsUser"]) == user.split(":")[0]
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["automountServiceAccountToken"] is False


def test_the_command_has_the_options_the_manifest_gives(container: dict[str, Any]) -> None:
    serve = cli.main.commands["webhook"].commands["serve"]  # type: ignore[attr-defined]
    given = {word for word in container["command"][3:] if word.startswith("--")}
    options = {name for param in serve.params for name in getattr(param, "opts", [])}
    assert given <= options, f"options the command does not have: {sorted(given - options)}"


def test_the_variables_are_settings_and_every_secret_comes_from_a_secret(container: dict[str, Any]) -> None:
    known = known_settings()
    secrets = {config.variable(f) for f in config.secret_fields()}
    names = [e["name"] for e in container["env"]]
    assert len(names) == len(set(names)) and set(names) <= known, sorted(set(names) - known)
    assert config.WAREHOUSE_URL_VAR in names
    assert config.TARGETS_VAR not in names, "the receiver needs no collector passwords"
    for entry in container["env"]:
        if entry["name"] in secrets:
            assert "value" not in entry and set(entry["valueFrom"]) == {"secretKeyRef"}, entry


def test_every_source_has_its_token_in_the_deployment(container: dict[str, Any]) -> None:
    env = {e["name"]: e for e in container["env"]}
    for source in SOURCES:
        variable = config.variable(f"receiver.{source.NAME}_secret")
        assert variable in env, f"{source.NAME}: {variable} is not set"
        ref = env[variable]["valueFrom"]["secretKeyRef"]
        assert ref["optional"] is True, f"{variable}: a source not configured must not stop the pod"
    secrets = {p.split(".")[1].removesuffix("_secret") for p in config.setting_paths() if p.endswith("_secret")}
    assert secrets - {"slack_signing"} == {s.NAME for s in SOURCES}


def test_probes_and_the_service_use_the_command_s_port(
    manifests: dict[str, dict[str, Any]], container: dict[str, Any]
) -> None:
    port = int(option(container["command"], "--port"))
    (named,) = container["ports"]
    assert named["containerPort"] == port
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz"), ("startupProbe", "/healthz")):
        get = container[probe]["httpGet"]
        assert (get["path"], get["port"]) == (path, named["name"]), probe
        assert container[probe]["timeoutSeconds" if probe != "startupProbe" else "periodSeconds"] >= 2
    service = manifests["Service"]["spec"]
    (exposed,) = service["ports"]
    assert exposed["targetPort"] in (named["name"], port)
    labels = manifests["Deployment"]["spec"]["template"]["metadata"]["labels"]
    assert service["selector"].items() <= labels.items()
    assert manifests["Deployment"]["spec"]["selector"]["matchLabels"].items() <= labels.items()


def test_it_runs_without_privilege_on_a_read_only_root_with_bounded_resources(container: dict[str, Any]) -> None:
    context = container["securityContext"]
    assert context["readOnlyRootFilesystem"] is True and context["allowPrivilegeEscalation"] is False
    assert context["capabilities"]["drop"] == ["ALL"]
    resources = container["resources"]
    assert {"cpu", "memory"} <= set(resources["requests"]) and "memory" in resources["limits"]
    assert [m["mountPath"] for m in container["volumeMounts"]] == ["/tmp"]


def test_the_docs_point_each_tool_at_the_service_and_the_deployment_s_secret(
    manifests: dict[str, dict[str, Any]], container: dict[str, Any]
) -> None:
    text = DOCS.read_text()
    service = manifests["Service"]["metadata"]["name"]
    urls = re.findall(rf"http://{re.escape(service)}\.[a-z0-9-]+\.svc(?::\d+)?/v1/deploys/([a-z-]+)", text)
    assert {s.NAME for s in TOOLS} <= set(urls), urls
    assert set(urls) <= {s.NAME for s in TOOLS} | {"github", "gitlab", "generic"}, urls
    keys = {e["valueFrom"]["secretKeyRef"]["key"] for e in container["env"] if "valueFrom" in e}
    for key in keys:
        assert f"{key}=" in (RECEIVER / "deployment.yaml").read_text() + text, f"the Secret's {key} is not shown"
    for source in TOOLS:
        assert config.variable(f"receiver.{source.NAME}_secret") in text
