"""deploy/argo-rollouts/ checked without a cluster: the AnalysisTemplates and the example Rollout against the part of
Argo Rollouts' documented schema they rely on (written below from its documentation: the analysis and Job metric
pages, the Rollout specification), every `{{args.X}}` declared and passed, the Jobs running the `radar` command the
image installs (deploy/Dockerfile has no ENTRYPOINT) with options the command has, the gate's --wait inside the Job's
deadline, and the warehouse's URL taken from a Secret, never written in."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import click
import jsonschema
import pytest
import yaml

from radar_pipeline import cli, config
from radar_pipeline_tests.test_deploy_files import DOCKERFILE, VALUES, dockerfile_instructions

ROOT = Path(__file__).resolve().parents[1]
ARGO = ROOT / "deploy" / "argo-rollouts"
TEMPLATES = ARGO / "analysis-templates.yaml"
ROLLOUT = ARGO / "rollout-example.yaml"
RECORD, GATE = "radar-record-deploy", "radar-gate"
DEPLOY_ID = "{{args.rollout}}-rev{{args.revision}}"  # the deploy recorded and gated
ARG = re.compile(r"\{\{\s*args\.([A-Za-z0-9_.-]+)\s*\}\}")

# Argo Rollouts v1alpha1, the fields these manifests use (unknown ones refused, so a misspelt field fails here rather
# than being dropped by the cluster). Analysis: a metric has a name and exactly one provider; failureLimit,
# inconclusiveLimit, consecutiveErrorLimit and count are integers or strings; args are {name, value | valueFrom}, a
# template's valueFrom a secretKeyRef or fieldRef. The Job provider: {metadata, spec}, spec a Kubernetes batch/v1
# JobSpec, whose pod template's restartPolicy must be Never or OnFailure.
INT_OR_STRING = {"anyOf": [{"type": "integer", "minimum": 0}, {"type": "string"}]}
SECRET_KEY_REF = {
    "type": "object",
    "required": ["name", "key"],
    "additionalProperties": False,
    "properties": {"name": {"type": "string"}, "key": {"type": "string"}, "optional": {"type": "boolean"}},
}
ENV_VAR = {
    "type": "object",
    "required": ["name"],
    "additionalProperties": False,
    "properties": {
        "name": {"type": "string"},
        "value": {"type": "string"},
        "valueFrom": {
            "type": "object",
            "additionalProperties": False,
            "minProperties": 1,
            "maxProperties": 1,
            "properties": {
                "secretKeyRef": SECRET_KEY_REF,
                "configMapKeyRef": SECRET_KEY_REF,
                "fieldRef": {"type": "object", "required": ["fieldPath"]},
            },
        },
    },
}
CONTAINER = {
    "type": "object",
    "required": ["name", "image", "command"],
    "properties": {
        "name": {"type": "string"},
        "image": {"type": "string"},
        "command": {"type": "array", "items": {"type": "string"}, "minItems": 1},
        "args": {"type": "array", "items": {"type": "string"}},
        "env": {"type": "array", "items": ENV_VAR},
        "resources": {"type": "object"},
        "securityContext": {"type": "object"},
    },
    "additionalProperties": False,
}
JOB_SPEC = {
    "type": "object",
    "required": ["template"],
    "additionalProperties": False,
    "properties": {
        "activeDeadlineSeconds": {"type": "integer", "minimum": 1},
        "backoffLimit": {"type": "integer", "minimum": 0},
        "ttlSecondsAfterFinished": {"type": "integer", "minimum": 0},
        "completions": {"type": "integer"},
        "parallelism": {"type": "integer"},
        "template": {
            "type": "object",
            "required": ["spec"],
            "properties": {
                "metadata": {"type": "object"},
                "spec": {
                    "type": "object",
                    "required": ["containers", "restartPolicy"],
                    "properties": {
                        "restartPolicy": {"enum": ["Never", "OnFailure"]},
                        "containers": {"type": "array", "minItems": 1, "items": CONTAINER},
                        "securityContext": {"type": "object"},
                        "serviceAccountName": {"type": "string"},
                    },
                    "additionalProperties": False,
                },
            },
            "additionalProperties": False,
        },
    },
}
PROVIDERS = ["job", "web", "prometheus", "datadog", "newRelic", "wavefront", "kayenta", "cloudWatch", "graphite"]
PROVIDERS += ["influxdb", "skywalking", "plugin"]
METRIC = {
    "type": "object",
    "required": ["name", "provider"],
    "additionalProperties": False,
    "properties": {
        "name": {"type": "string", "minLength": 1},
        "interval": {"type": "string"},
        "initialDelay": {"type": "string"},
        "count": INT_OR_STRING,
        "failureLimit": INT_OR_STRING,
        "inconclusiveLimit": INT_OR_STRING,
        "consecutiveErrorLimit": INT_OR_STRING,
        "successCondition": {"type": "string"},
        "failureCondition": {"type": "string"},
        "provider": {
            "type": "object",
            "minProperties": 1,
            "maxProperties": 1,
            "propertyNames": {"enum": PROVIDERS},
            "properties": {
                "job": {
                    "type": "object",
                    "required": ["spec"],
                    "additionalProperties": False,
                    "properties": {
                        "metadata": {
                            "type": "object",
                            "additionalProperties": False,
                            "properties": {"labels": {"type": "object"}, "annotations": {"type": "object"}},
                        },
                        "spec": JOB_SPEC,
                    },
                }
            },
        },
    },
}
TEMPLATE_ARG = {
    "type": "object",
    "required": ["name"],
    "additionalProperties": False,
    "properties": {
        "name": {"type": "string", "minLength": 1},
        "value": {"type": "string"},
        "valueFrom": {
            "type": "object",
            "minProperties": 1,
            "maxProperties": 1,
            "additionalProperties": False,
            "properties": {"secretKeyRef": SECRET_KEY_REF, "fieldRef": {"type": "object", "required": ["fieldPath"]}},
        },
    },
}
METADATA = {"type": "object", "required": ["name"], "properties": {"name": {"type": "string", "minLength": 1}}}
ANALYSIS_TEMPLATE = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "additionalProperties": False,
    "properties": {
        "apiVersion": {"const": "argoproj.io/v1alpha1"},
        "kind": {"const": "AnalysisTemplate"},
        "metadata": METADATA,
        "spec": {
            "type": "object",
            "required": ["metrics"],
            "additionalProperties": False,
            "properties": {
                "args": {"type": "array", "items": TEMPLATE_ARG},
                "metrics": {"type": "array", "minItems": 1, "items": METRIC},
                "dryRun": {"type": "array"},
                "measurementRetention": {"type": "array"},
            },
        },
    },
}
# A Rollout's step is exactly one of its kinds; an analysis step names templates and passes args, whose valueFrom in
# a Rollout may also be podTemplateHashValue (Stable or Latest).
ROLLOUT_ARG = {
    "type": "object",
    "required": ["name"],
    "additionalProperties": False,
    "properties": {
        "name": {"type": "string"},
        "value": {"type": "string"},
        "valueFrom": {
            "type": "object",
            "minProperties": 1,
            "maxProperties": 1,
            "additionalProperties": False,
            "properties": {
                "podTemplateHashValue": {"enum": ["Stable", "Latest"]},
                "fieldRef": {"type": "object", "required": ["fieldPath"]},
            },
        },
    },
}
STEP = {
    "type": "object",
    "minProperties": 1,
    "maxProperties": 1,
    "additionalProperties": False,
    "properties": {
        "setWeight": {"type": "integer", "minimum": 0, "maximum": 100},
        "pause": {"type": "object", "properties": {"duration": INT_OR_STRING}, "additionalProperties": False},
        "analysis": {
            "type": "object",
            "required": ["templates"],
            "additionalProperties": False,
            "properties": {
                "templates": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "required": ["templateName"],
                        "additionalProperties": False,
                        "properties": {"templateName": {"type": "string"}, "clusterScope": {"type": "boolean"}},
                    },
                },
                "args": {"type": "array", "items": ROLLOUT_ARG},
            },
        },
        "experiment": {"type": "object"},
        "setCanaryScale": {"type": "object"},
        "setHeaderRoute": {"type": "object"},
        "setMirrorRoute": {"type": "object"},
        "plugin": {"type": "object"},
    },
}
ROLLOUT_SCHEMA = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "argoproj.io/v1alpha1"},
        "kind": {"const": "Rollout"},
        "metadata": METADATA,
        "spec": {
            "type": "object",
            "required": ["selector", "template", "strategy"],
            "properties": {
                "replicas": {"type": "integer", "minimum": 0},
                "selector": {"type": "object", "required": ["matchLabels"]},
                "template": {"type": "object", "required": ["metadata", "spec"]},
                "strategy": {
                    "type": "object",
                    "required": ["canary"],
                    "properties": {
                        "canary": {
                            "type": "object",
                            "required": ["steps"],
                            "properties": {"steps": {"type": "array", "minItems": 1, "items": STEP}},
                        }
                    },
                },
            },
        },
    },
}


@pytest.fixture(scope="module")
def templates() -> dict[str, dict[str, Any]]:
    """The AnalysisTemplates by name."""
    found = {d["metadata"]["name"]: d for d in yaml.safe_load_all(TEMPLATES.read_text()) if d}
    assert set(found) == {RECORD, GATE}
    return found


@pytest.fixture(scope="module")
def rollout() -> dict[str, Any]:
    """The example Rollout."""
    (document,) = [d for d in yaml.safe_load_all(ROLLOUT.read_text()) if d]
    return document


def job_container(template: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The template's only metric, its Job's spec and its only container."""
    (metric,) = template["spec"]["metrics"]
    job = metric["provider"]["job"]["spec"]
    (container,) = job["template"]["spec"]["containers"]
    return metric, job, container


def seconds(duration: str) -> float:
    """A duration as radar gate's --wait takes it: a number and a unit (s, m or h)."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([smh])", duration)
    assert match, f"not a duration: {duration!r}"
    return float(match[1]) * {"s": 1, "m": 60, "h": 3600}[match[2]]


def test_manifests_match_the_documented_schema(templates: dict[str, dict[str, Any]], rollout: dict[str, Any]) -> None:
    for template in templates.values():
        jsonschema.validate(template, ANALYSIS_TEMPLATE)
    jsonschema.validate(rollout, ROLLOUT_SCHEMA)
    # The schema refuses what the documentation does not allow (a failing copy shows it checks something).
    broken = yaml.safe_load(yaml.safe_dump(templates[GATE]))
    broken["spec"]["metrics"][0]["failurelimit"] = 0
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, ANALYSIS_TEMPLATE)


def test_every_argument_used_is_declared_and_passed(
    templates: dict[str, dict[str, Any]], rollout: dict[str, Any]
) -> None:
    for name, template in templates.items():
        declared = {a["name"] for a in template["spec"].get("args", [])}
        used = set(ARG.findall(yaml.safe_dump(template["spec"]["metrics"])))
        assert used and used <= declared, f"{name}: {used - declared} used but not declared"
    steps = rollout["spec"]["strategy"]["canary"]["steps"]
    analyses = [s["analysis"] for s in steps if "analysis" in s]
    for step in analyses:
        passed = {a["name"] for a in step.get("args", [])}
        for ref in step["templates"]:
            template = templates[ref["templateName"]]
            args = template["spec"].get("args", [])
            required = {a["name"] for a in args if "value" not in a and "valueFrom" not in a}
            assert required <= passed, f"{ref['templateName']}: {required - passed} not passed"
            assert passed <= {a["name"] for a in args}, f"{ref['templateName']}: {passed} not all declared"
    # One deploy id for both steps, and a new one for each rollout: the Rollout's name and revision, read from it.
    for step in analyses:
        given = {a["name"]: a.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") for a in step["args"]}
        assert given["rollout"] == "metadata.name"
        assert given["revision"] == "metadata.annotations['rollout.argoproj.io/revision']"


def test_the_canary_records_then_gates_then_promotes(rollout: dict[str, Any]) -> None:
    steps = rollout["spec"]["strategy"]["canary"]["steps"]
    kinds = [
        s["analysis"]["templates"][0]["templateName"] if "analysis" in s else next(iter(s)) for s in steps
    ]  # fmt: skip
    assert kinds.index("setWeight") < kinds.index(RECORD) < kinds.index(GATE), kinds
    assert steps[-1] == {"setWeight": 100}, "the last step promotes the new version to every pod"
    assert 0 < steps[kinds.index("setWeight")]["setWeight"] < 100, "the window sees the canary beside the stable"


def test_jobs_run_the_radar_command_with_its_options(templates: dict[str, dict[str, Any]]) -> None:
    commands = {name: job_container(t)[2]["command"] for name, t in templates.items()}
    assert commands[RECORD][:2] == ["radar", "deploy"]
    assert commands[GATE][:3] == ["radar", "gate", DEPLOY_ID]
    assert DEPLOY_ID == commands[RECORD][commands[RECORD].index("--id") + 1]
    assert "{{args.target}}" == commands[RECORD][commands[RECORD].index("--target") + 1]
    for words in commands.values():
        command = cli.main.commands.get(words[1])
        assert isinstance(command, click.Command), f"`radar {words[1]}` does not exist"
        options = {o for p in command.params if isinstance(p, click.Option) for o in p.opts}
        given = {w for w in words[2:] if w.startswith("--")}
        assert given <= options, f"radar {words[1]} has no {given - options}"
    # Every Job uses the image the Helm values deploy (the code server's), so the gate runs the same radar.
    repository = yaml.safe_load(VALUES.read_text())["dagster-user-deployments"]["deployments"][0]["image"]
    images = {job_container(t)[2]["image"] for t in templates.values()}
    assert {i.rsplit(":", 1)[0] for i in images} == {repository["repository"]}


def test_the_gate_answers_before_its_job_is_killed(templates: dict[str, dict[str, Any]]) -> None:
    metric, job, container = job_container(templates[GATE])
    command = container["command"]
    wait = seconds(command[command.index("--wait") + 1])
    assert wait >= 30 * 60, "--wait covers the default 30-minute window after the deploy"
    assert wait + 60 <= job["activeDeadlineSeconds"], "the gate's own answer (exit 4) comes before the deadline"
    for template in templates.values():
        metric, job, _ = job_container(template)
        # One run, no retry: the exit code of `radar gate` is the answer (a retry would record or wait again).
        assert job["backoffLimit"] == 0 and metric["failureLimit"] == 0
        assert "interval" not in metric and "count" not in metric, "one measurement, not a repeated one"


def test_the_warehouse_url_comes_from_a_secret(templates: dict[str, dict[str, Any]]) -> None:
    for name, template in templates.items():
        env = {e["name"]: e for e in job_container(template)[2].get("env", [])}
        url = env[config.WAREHOUSE_URL_VAR]
        assert set(url) == {"name", "valueFrom"} and "secretKeyRef" in url["valueFrom"], name
    for path in (TEMPLATES, ROLLOUT):
        text = path.read_text()
        code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
        assert not re.search(r"postgres(ql)?(\+\w+)?://", code), f"{path.name} writes a connection URL in"


def test_the_image_runs_the_radar_console_script() -> None:
    """The image installs the package (pyproject's console script `radar`) and has no ENTRYPOINT, so a Job's
    command ["radar", "gate", ...] runs that script; here the same entry point, installed, answers `gate --help`."""
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["radar"] == "radar_pipeline.cli:main"
    instructions = dockerfile_instructions(DOCKERFILE.read_text())
    assert "ENTRYPOINT" not in {keyword for keyword, _ in instructions}
    installs = [rest for keyword, rest in instructions if keyword == "RUN" and "pip install" in rest]
    assert installs and not any(" -e " in f" {rest} " for rest in installs), "a regular install puts `radar` on PATH"
    (installed,) = entry_points(group="console_scripts", name="radar")
    assert installed.value == scripts["radar"]
    radar = Path(sys.executable).parent / "radar"
    listed = subprocess.run([radar, "--help"], capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0 and "deploy" in listed.stdout, listed.stderr
    # Fails until `radar gate` exists (issue 24's gate command, built beside these manifests).
    helped = subprocess.run([radar, "gate", "--help"], capture_output=True, text=True, timeout=120)
    assert helped.returncode == 0, f"`radar gate --help` failed: {helped.stderr.strip()[-300:]}"
    assert "--wait" in helped.stdout and "--inconclusive-ok" in helped.stdout
