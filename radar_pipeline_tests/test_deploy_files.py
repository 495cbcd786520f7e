"""deploy/ checked against the code, since no Kubernetes cluster or Docker daemon runs here: the Dockerfile serves a
module that loads a dg.Definitions on the port the Helm values give the code location; the values set only
variables the settings know, secrets only from a Secret, and those that are literal pass the settings validation; the
image's pins are pyproject.toml's; Dagster's storage is an external PostgreSQL, runs go through the K8sRunLauncher,
the queue limits tags the definitions put on runs, and telemetry is off everywhere."""

from __future__ import annotations

import importlib
import json
import re
import tomllib
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
import yaml

from radar_pipeline.config import settings as config

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = ROOT / "deploy" / "Dockerfile"
VALUES = ROOT / "deploy" / "helm" / "values.yaml"
# Variables whose values carry a password or a token: the values may only take them from a Secret.
SECRET_SETTINGS = {
    config.WAREHOUSE_URL_VAR,
    config.TARGETS_VAR,
    config.DAGSTER_PG_URL_VAR,
    "RADAR_SLACK_TOKEN",
    "RADAR_SLACK_WEBHOOK_URL",
}
# Stand-ins for what the Secret holds, of the form the settings accept, to validate the literal values beside them.
FAKE_SECRETS = {
    config.WAREHOUSE_URL_VAR: "postgresql://radar:x@warehouse:5432/radar",
    config.TARGETS_VAR: "main=postgresql://radar_collector:x@main:5432/app",
    config.DAGSTER_PG_URL_VAR: "postgresql+psycopg2://dagster:x@pg:5432/dagster",
    "RADAR_SLACK_TOKEN": "xoxb-0-0",
    "RADAR_SLACK_WEBHOOK_URL": "https://hooks.slack.com/services/T0/B0/x",
}


def dockerfile_instructions(text: str) -> list[tuple[str, str]]:
    """The Dockerfile's instructions as (INSTRUCTION, arguments), continuation lines joined, comments dropped."""
    instructions: list[tuple[str, str]] = []
    pending = ""
    for line in text.splitlines():
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if pending and stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        full = (pending + stripped).strip()
        pending = ""
        if full:
            keyword, _, rest = full.partition(" ")
            instructions.append((keyword.upper(), rest.strip()))
    assert not pending, "the Dockerfile ends inside a continued line"
    return instructions


def exec_form(arguments: str) -> list[str]:
    """A CMD or ENTRYPOINT in exec (JSON) form, as its list of words."""
    words = json.loads(arguments)
    assert isinstance(words, list) and all(isinstance(w, str) for w in words), arguments
    return words


def option(words: list[str], *names: str) -> str:
    """The value that follows the first of `names` in a command line."""
    for index, word in enumerate(words):
        if word in names:
            return words[index + 1]
    raise AssertionError(f"none of {names} in {words}")


def pins(requirements: list[str]) -> dict[str, str]:
    """name → version of every `name==version` requirement (extras dropped, names normalised)."""
    found: dict[str, str] = {}
    for requirement in requirements:
        match = re.fullmatch(r"\s*([A-Za-z0-9_.-]+)(\[[^\]]*\])?\s*==\s*([^\s;]+)\s*", requirement)
        if match:
            found[re.sub(r"[-_.]+", "-", match.group(1)).lower()] = match.group(3)
    return found


def known_settings() -> set[str]:
    """Every RADAR_* variable radar reads: the fields of its settings (config.settings.RadarSettings)."""
    return {config.variable(path) for path in config.setting_paths()}


@pytest.fixture(scope="module")
def docker() -> dict[str, Any]:
    """What the tests need of the Dockerfile."""
    instructions = dockerfile_instructions(DOCKERFILE.read_text())
    by_kind: dict[str, list[str]] = {}
    for keyword, arguments in instructions:
        by_kind.setdefault(keyword, []).append(arguments)
    (cmd,) = by_kind["CMD"]
    env: dict[str, str] = {}
    for arguments in by_kind.get("ENV", []):
        env.update(dict(re.findall(r'([A-Za-z_][A-Za-z0-9_]*)=("[^"]*"|\S+)', arguments)))
    return {"by_kind": by_kind, "cmd": exec_form(cmd), "env": {k: v.strip('"') for k, v in env.items()}}


@pytest.fixture(scope="module")
def values() -> dict[str, Any]:
    """deploy/helm/values.yaml, parsed."""
    parsed = yaml.safe_load(VALUES.read_text())
    assert isinstance(parsed, dict)
    return parsed


@pytest.fixture(scope="module")
def pyproject() -> dict[str, Any]:
    """pyproject.toml, parsed."""
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


@pytest.fixture(scope="module")
def radar(values: dict[str, Any]) -> dict[str, Any]:
    """The user deployment of the code location `radar`."""
    deployments = values["dagster-user-deployments"]["deployments"]
    (deployment,) = [d for d in deployments if d["name"] == "radar"]
    return deployment


def test_the_image_serves_a_module_that_loads_the_definitions(docker: dict[str, Any]) -> None:
    cmd = docker["cmd"]
    assert cmd[:3] == ["dagster", "code-server", "start"] or cmd[:3] == ["dagster", "api", "grpc"], cmd
    module_name = option(cmd, "-m", "--module-name")
    module = importlib.import_module(module_name)
    from dagster.components.definitions import LazyDefinitions

    # A dg.Definitions, or a @dg.definitions function (the dg layout) that returns one.
    found = [name for name, value in vars(module).items() if isinstance(value, dg.Definitions | LazyDefinitions)]
    assert found == ["defs"], f"{module_name} should hold one dg.Definitions, has {found}"
    assert isinstance(module.defs(), dg.Definitions)
    if "-a" in cmd or "--attribute" in cmd:
        assert option(cmd, "-a", "--attribute") in found


def test_the_image_module_and_location_are_the_workspace_s(docker: dict[str, Any], pyproject: dict[str, Any]) -> None:
    workspace = yaml.safe_load((ROOT / "workspace.yaml").read_text())
    (entry,) = [e["python_module"] for e in workspace["load_from"]]
    module_name = option(docker["cmd"], "-m", "--module-name")
    project = pyproject["tool"]["dg"]["project"]
    assert module_name == entry["module_name"] == project["code_location_target_module"]
    assert option(docker["cmd"], "--location-name") == entry["location_name"] == project["code_location_name"]


def test_the_chart_serves_the_image_s_module_on_the_image_s_port(docker: dict[str, Any], radar: dict[str, Any]) -> None:
    port = int(option(docker["cmd"], "-p", "--port"))
    assert radar["port"] == port
    assert [int(p.split("/")[0]) for p in docker["by_kind"]["EXPOSE"]] == [port]
    assert any(str(port) in check for check in docker["by_kind"].get("HEALTHCHECK", [str(port)]))
    args = radar["codeServerArgs"]
    assert option(args, "-m", "--module-name") == option(docker["cmd"], "-m", "--module-name")
    assert option(args, "--location-name") == radar["name"]
    # The chart passes its command as the container's args: an ENTRYPOINT would be prepended to it.
    assert "ENTRYPOINT" not in docker["by_kind"]
    assert "dagsterApiGrpcArgs" not in radar, "set codeServerArgs or dagsterApiGrpcArgs, not both"


def test_the_image_runs_python_3_11_as_a_user_of_its_own(docker: dict[str, Any], pyproject: dict[str, Any]) -> None:
    (base,) = docker["by_kind"]["FROM"]
    assert re.fullmatch(r"python:3\.11-slim(@sha256:[0-9a-f]{64})?", base), base
    assert pyproject["project"]["requires-python"] == ">=3.11"
    user = docker["by_kind"]["USER"][-1].split(":")[0]
    assert user not in ("0", "root"), user


def test_the_image_installs_pyproject_s_pins(docker: dict[str, Any], pyproject: dict[str, Any]) -> None:
    wanted = pins(pyproject["project"]["dependencies"])
    for extra in pyproject["project"]["optional-dependencies"].values():
        wanted.update(pins(extra))
    runs = " ".join(docker["by_kind"]["RUN"])
    written = pins(re.findall(r"[A-Za-z0-9_.\[\]-]+==[^\s\"']+", runs))
    assert {name: wanted.get(name) for name in written} == written, "a pin in the Dockerfile differs from pyproject"
    assert re.search(r"pip install --constraint requirements\.lock [\"']?\.\[k8s\][\"']?", runs), (
        "the image installs the package with its k8s extra, at the lock's versions"
    )
    # dagster-k8s ships with dagster-postgres, one version for both beside dagster's.
    k8s = pins(pyproject["project"]["optional-dependencies"]["k8s"])
    assert k8s["dagster-k8s"] == wanted["dagster-postgres"]


def test_the_build_context_holds_what_the_image_copies(docker: dict[str, Any]) -> None:
    allowed = {
        line[1:].rstrip("/") for line in (ROOT / ".dockerignore").read_text().splitlines() if line.startswith("!")
    }
    for arguments in docker["by_kind"]["COPY"]:
        for source in arguments.split()[:-1]:
            assert source.rstrip("/") in allowed, f"{source} is left out by .dockerignore"
            assert (ROOT / source).exists(), source


def test_the_values_set_only_settings_config_knows_and_no_secret(radar: dict[str, Any]) -> None:
    known = known_settings()
    assert {config.WAREHOUSE_URL_VAR, config.TARGETS_VAR, config.SHARDS_VAR, "RADAR_SLACK_TOKEN"} <= known
    env = radar["env"]
    names = [e["name"] for e in env]
    assert len(names) == len(set(names)), names
    assert set(names) <= known, f"not settings of config/settings.py: {sorted(set(names) - known)}"
    assert {config.WAREHOUSE_URL_VAR, config.TARGETS_VAR} <= set(names)
    for entry in env:
        if entry["name"] in SECRET_SETTINGS:
            assert "value" not in entry, f"{entry['name']} is a secret: take it from a Secret"
            assert set(entry["valueFrom"]) == {"secretKeyRef"}, entry
        else:
            assert isinstance(entry.get("value"), str), f"{entry['name']}: a literal value, quoted"
    for source in radar.get("envSecrets") or []:
        assert source["name"], source


def test_the_literal_values_pass_config_validation(radar: dict[str, Any]) -> None:
    environ = {e["name"]: e["value"] if "value" in e else FAKE_SECRETS[e["name"]] for e in radar["env"] if "name" in e}
    config.validate_environment(environ)
    assert config.count_setting(config.SHARDS_VAR, environ) >= 1


def test_dagster_s_storage_is_an_external_postgresql(values: dict[str, Any]) -> None:
    postgresql = values["postgresql"]
    assert postgresql["enabled"] is False
    assert postgresql["postgresqlHost"] and postgresql["postgresqlDatabase"] and postgresql["postgresqlUsername"]
    assert "postgresqlPassword" not in postgresql, "the password belongs in the Secret"
    assert values["generatePostgresqlPasswordSecret"] is False
    assert values["global"]["postgresqlSecretName"]
    # The storage outside Kubernetes is PostgreSQL too where radar runs (radar dev's instance); the project's
    # dagster.yaml, which `dg dev` and `dg check defs` read in its root, needs no environment (Dagster's SQLite).
    from radar_pipeline.demo.environment import INSTANCE_YAML

    assert set(yaml.safe_load(INSTANCE_YAML)["storage"]) == {"postgres"}
    assert "storage" not in yaml.safe_load((ROOT / "dagster.yaml").read_text())


def test_runs_go_through_the_kubernetes_run_launcher_and_the_daemon_s_queue(values: dict[str, Any]) -> None:
    assert values["runLauncher"]["type"] == "K8sRunLauncher"
    assert set(values["runLauncher"]["config"]) == {"k8sRunLauncher"}
    daemon = values["dagsterDaemon"]
    assert daemon["enabled"] is True
    coordinator = daemon["runCoordinator"]
    assert coordinator["enabled"] is True and coordinator["type"] == "QueuedRunCoordinator"
    queued = coordinator["config"]["queuedRunCoordinator"]
    assert queued["maxConcurrentRuns"] >= 1
    assert "runs" not in values.get("concurrency", {}), "the chart refuses run limits both here and in concurrency"


def test_the_analysis_pool_has_a_limit_here_and_in_the_helm_values(values: dict[str, Any]) -> None:
    """deploy_verdicts' pool is radar's only one, so each instance's default pool limit is its limit."""
    from radar_pipeline.definitions import defs
    from radar_pipeline.defs.deploys.deploy_verdicts import ANALYSIS_POOL, deploy_verdicts

    pools = {
        node.pool
        for job in defs().get_repository_def().get_all_jobs()
        for node in job.graph.node_defs
        if getattr(node, "pool", None)
    }
    assert pools == {ANALYSIS_POOL} == {deploy_verdicts.op.pool}
    helm = values["concurrency"]
    assert helm["enabled"] is True and helm["pools"]["granularity"] in ("run", "op")
    assert helm["pools"]["defaultLimit"] >= 1
    local = yaml.safe_load((ROOT / "dagster.yaml").read_text())["concurrency"]["pools"]
    assert local["default_limit"] >= 1 and local["granularity"] in ("run", "op")


def test_the_queue_limits_tags_the_definitions_put_on_runs(values: dict[str, Any]) -> None:
    source = "\n".join(p.read_text() for p in (ROOT / "radar_pipeline" / "defs").rglob("*.py"))
    limits = values["dagsterDaemon"]["runCoordinator"]["config"]["queuedRunCoordinator"]["tagConcurrencyLimits"]
    assert limits
    for limit in limits:
        key = limit["key"]
        assert key.startswith("dagster/") or f'"{key}' in source, f"no run of ours carries the tag {key}"
        assert limit["limit"] >= 1


def test_telemetry_is_off_everywhere(values: dict[str, Any], docker: dict[str, Any]) -> None:
    assert values["telemetry"]["enabled"] is False
    assert docker["env"].get("DAGSTER_DISABLE_TELEMETRY") == "1"
    assert yaml.safe_load((ROOT / "dagster.yaml").read_text())["telemetry"]["enabled"] is False


def test_the_docs_install_the_chart_of_the_pinned_dagster(pyproject: dict[str, Any]) -> None:
    dagster_pin = pins(pyproject["project"]["dependencies"])["dagster"]
    page = (ROOT / "docs" / "kubernetes.md").read_text()
    commands = re.findall(r"helm upgrade --install [^\n]*", page)
    assert commands, "docs/kubernetes.md shows no helm upgrade --install"
    for command in commands:
        assert f"--version {dagster_pin}" in command and "-f deploy/helm/values.yaml" in command, command
    assert f"--version {dagster_pin}" in VALUES.read_text()


def test_code_server_requests_and_starts_are_given_time_on_a_busy_machine(values: dict[str, Any]) -> None:
    """Dagster's 60 s for a request to the code server made 13 of 56 snapshot runs fail to launch on a loaded
    machine: the webserver and the daemon get 180 s (the Helm values; `radar dev`), local code servers 6 minutes to
    load; the instance files pass Dagster's own schema."""
    from dagster._config import validate_config
    from dagster._core.instance.config import dagster_instance_config_schema

    from radar_pipeline.demo import dev
    from radar_pipeline.demo.environment import INSTANCE_YAML

    for text in ((ROOT / "dagster.yaml").read_text(), INSTANCE_YAML):
        instance = yaml.safe_load(text)
        checked = validate_config(dagster_instance_config_schema(), instance)
        assert checked.success, checked.errors
        assert instance["code_servers"]["local_startup_timeout"] >= 300
        assert instance["code_servers"]["reload_timeout"] >= 300
    for service in ("dagsterWebserver", "dagsterDaemon"):
        env = {e["name"]: e["value"] for e in values[service]["env"]}
        assert int(env["DAGSTER_GRPC_TIMEOUT_SECONDS"]) >= 180, service
    assert int(dev.GRPC_TIMEOUT_S) >= 180
