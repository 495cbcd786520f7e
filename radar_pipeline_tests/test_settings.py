"""One settings object: RadarSettings is the only reader of the RADAR_* environment, its secrets never print, and the
Dagster config of the engine settings is made from EngineSettings, so it cannot drift from it."""

from __future__ import annotations

import ast
import dataclasses
import json
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from radar_pipeline.config import ConfigError
from radar_pipeline.config import settings as settings_module
from radar_pipeline.config.settings import secret_fields, settings, variable
from radar_pipeline.engine import EngineSettings

PACKAGE = Path(__file__).resolve().parents[1] / "radar_pipeline"
READER = PACKAGE / "config" / "settings.py"


def _radar_names(root: Path) -> tuple[set[str], set[str]]:
    """Names that stand for a RADAR_* variable (and for collections of them) anywhere in the package: module-level
    constants assigned one, and the settings module's names whose value is one."""
    names: set[str] = set()
    collections: set[str] = set()
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                texts = [c.value for c in ast.walk(node.value) if isinstance(c, ast.Constant)]
                if any(isinstance(t, str) and t.startswith("RADAR_") for t in texts):
                    target = node.targets[0].id
                    (names if isinstance(node.value, ast.Constant) else collections).add(target)
    for name, value in vars(settings_module).items():
        values = (
            list(value.values()) if isinstance(value, dict) else list(value) if isinstance(value, tuple) else [value]
        )
        if any(isinstance(v, str) and v.startswith("RADAR_") for v in values):
            (names if isinstance(value, str) else collections).add(name)
    return names, collections


def _is_radar_key(node: ast.AST, names: set[str], collections: set[str]) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str) and node.value.startswith("RADAR_")
    if isinstance(node, ast.JoinedStr):
        first = node.values[0] if node.values else None
        return isinstance(first, ast.Constant) and str(first.value).startswith("RADAR_")
    if isinstance(node, ast.Name):
        return node.id in names
    if isinstance(node, ast.Subscript):
        return isinstance(node.value, ast.Name) and node.value.id in collections
    return False


def _environment_like(node: ast.AST) -> bool:
    """os.environ, os.getenv's module, or a mapping named env/environ (a copy of the environment, a CI's)."""
    text = ast.unparse(node)
    return "environ" in text or text.split(".")[-1] in {"env", "environ"}


def environment_reads(root: Path, skip: set[Path]) -> list[str]:
    """Every place under `root` (outside `skip`) that reads a RADAR_* variable from the environment or from a
    mapping of it: os.getenv(K), os.environ[K], <env>.get(K) and the like, K a RADAR_* name."""
    names, collections = _radar_names(root)
    found = []
    for path in sorted(root.rglob("*.py")):
        if path in skip:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            key = None
            if isinstance(node, ast.Call) and node.args:
                func = node.func
                if isinstance(func, ast.Attribute) and func.attr == "getenv":
                    key = node.args[0]
                elif isinstance(func, ast.Attribute) and func.attr in {"get", "pop", "setdefault"}:
                    key = node.args[0] if _environment_like(func.value) else None
            elif isinstance(node, ast.Subscript) and _environment_like(node.value):
                key = node.slice
            if key is not None and _is_radar_key(key, names, collections):
                found.append(f"{path.relative_to(root.parent)}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_only_the_settings_object_reads_radar_variables():
    """Nothing outside config/settings.py reads a RADAR_* variable itself: each use asks RadarSettings (Dagster's
    EnvVar still resolves the secrets at run time, by the names the settings give, so they are never stored; click
    binds --warehouse to RADAR_WAREHOUSE_URL, checked by the same warehouse_url)."""
    reads = environment_reads(PACKAGE, {READER})
    assert not reads, "read RADAR_* through config.settings:\n" + "\n".join(reads)


def test_the_scan_finds_a_direct_read(tmp_path):
    """The scan is not blind: direct reads by literal, by constant and by a constant collection are all found."""
    package = tmp_path / "radar_pipeline"
    package.mkdir()
    (package / "sneaky.py").write_text(
        "import os\n"
        "from radar_pipeline.config.settings import WINDOW_VAR\n"
        "a = os.environ.get('RADAR_TARGETS')\n"
        "b = os.environ[WINDOW_VAR]\n"
        "c = os.getenv(TOKENS['github'])\n"
        "def f(env):\n"
        "    return env.get(f'RADAR_{1}')\n"
        "d = os.environ.get('HOME')\n"
        "TOKENS = {'github': 'RADAR_GITHUB_TOKEN'}\n"
    )
    assert [line.split(": ", 1)[0] for line in environment_reads(package, set())] == [
        "radar_pipeline/sneaky.py:3",
        "radar_pipeline/sneaky.py:4",
        "radar_pipeline/sneaky.py:5",
        "radar_pipeline/sneaky.py:7",
    ]


SECRETS = {
    "RADAR_WAREHOUSE_URL": "postgresql://radar:Wh0use9pw@db.example/radar",
    "RADAR_TARGETS": "main=postgresql://collector:Tg7secret@db.example/app",
    "RADAR_DAGSTER_PG_URL": "postgresql+psycopg2://dagster:Dg5secret@db.example/dagster",
    "RADAR_SLACK_TOKEN": "xoxb-Sl4cksecret",
    "RADAR_SLACK_CHANNEL": "#radar",
    "RADAR_SLACK_WEBHOOK_URL": "https://hooks.slack.com/services/T0/B0/Wb3secret",
    "RADAR_GITHUB_TOKEN": "ghp_Gh2secret",
    "RADAR_GITLAB_TOKEN": "glpat-Gl1secret",
    # channels: Teams, Grafana, generic webhooks
    "RADAR_TEAMS_WEBHOOK_URL": "https://prod-1.westeurope.logic.azure.com/workflows/1/invoke?sv=1.0&sig=Tm8secret",
    "RADAR_GRAFANA_TOKEN": "glsa_Gf6secret",
    "RADAR_WEBHOOKS": '{"ops": {"url": "https://hooks.example.com/x?key=Wk1secret", "template": "{}"}}',
    "RADAR_PAGERDUTY_ROUTING_KEY": "R0Pd8secret000000000000000000000",
    # receiver
    "RADAR_RECEIVER_GITHUB_SECRET": "Rh1secret-0123456789",
    "RADAR_RECEIVER_GITLAB_SECRET": "Rl2secret-0123456789",
    "RADAR_RECEIVER_ARGOCD_SECRET": "Ra3secret-0123456789",
    "RADAR_RECEIVER_FLUX_SECRET": "Rf4secret-0123456789",
    "RADAR_RECEIVER_ROLLOUTS_SECRET": "Rr5secret-0123456789",
    "RADAR_RECEIVER_TOKENS": '[{"token": "Rt6secret-0123456789", "scopes": ["deploy"]}]',
    "RADAR_RECEIVER_SLACK_SIGNING_SECRET": "Rs7secret-0123456789",
}
OTHERS = {"RADAR_SLACK_CHANNEL", "RADAR_GRAFANA_URL", "RADAR_WEBHOOK_ALLOWED_HOSTS"}  # not secrets, set beside them
SECRETS |= {"RADAR_GRAFANA_URL": "https://grafana.example.com", "RADAR_WEBHOOK_ALLOWED_HOSTS": "hooks.example.com"}
PIECES = ("Wh0use9pw", "Tg7secret", "Dg5secret", "Sl4cksecret", "Wb3secret", "Gh2secret", "Gl1secret")
PIECES += ("Tm8secret", "Gf6secret", "Wk1secret", "Pd8secret")
PIECES += ("Rh1secret", "Rl2secret", "Ra3secret", "Rf4secret", "Rr5secret", "Rt6secret", "Rs7secret")


def test_secrets_never_print():
    loaded = settings(environ=SECRETS)
    shown = [
        repr(loaded),
        str(loaded),
        f"{loaded}",
        loaded.model_dump_json(),
        json.dumps(loaded.model_dump(), default=str),
    ]
    for text in shown:
        assert not [p for p in PIECES if p in text], text
    assert loaded.warehouse_url is not None and "Wh0use9pw" in loaded.warehouse_url.get_secret_value()
    assert loaded.github.token is not None and loaded.github.token.get_secret_value() == "ghp_Gh2secret"
    assert [t.name for t in loaded.target_list()] == ["main"]
    assert "Tg7secret" not in repr(loaded.target_list())
    # Every setting that can hold a password or a token is a secret type.
    assert {variable(f) for f in secret_fields()} == set(SECRETS) - OTHERS


@pytest.mark.parametrize(
    ("variable_name", "bad"),
    [
        ("RADAR_WAREHOUSE_URL", "postgresql://radar:Wh0use9pw@x@db.example/radar"),
        ("RADAR_TARGETS", "main=postgresql://collector:Tg7secret/x@db.example/app"),
        ("RADAR_DAGSTER_PG_URL", "postgresql://dagster:Dg5secret@db.example/dagster"),
        ("RADAR_SLACK_TOKEN", "Sl4cksecret"),
        ("RADAR_SLACK_WEBHOOK_URL", "http://hooks.slack.com/services/T0/B0/Wb3secret"),
        ("RADAR_GITHUB_TOKEN", "ghp_Gh2secret x"),
        ("RADAR_GITLAB_TOKEN", "glpat-Gl1secret\x1b"),
        ("RADAR_RECEIVER_ARGOCD_SECRET", "Ra3secret-0123456789 x"),
        ("RADAR_RECEIVER_FLUX_SECRET", "Rf4secret"),
        ("RADAR_RECEIVER_ROLLOUTS_SECRET", "Rr5secret-0123456789\x1b"),
        ("RADAR_TEAMS_WEBHOOK_URL", "http://prod-1.westeurope.logic.azure.com/workflows/1?sig=Tm8secret"),
        ("RADAR_GRAFANA_TOKEN", "glsa_Gf6secret\n"),
        ("RADAR_WEBHOOKS", '{"ops": {"url": "https://hooks.example.com/x?key=Wk1secret", "template": "{}"'),
        ("RADAR_WEBHOOKS", '{"ops": {"url": "https://hooks.example.com/x", "headers": {"A": "Wk1secret\\n"}}}'),
        ("RADAR_RECEIVER_GITHUB_SECRET", "Rh1secret x"),
        ("RADAR_RECEIVER_TOKENS", '[{"token": "Rt6secret", "scopes": ["deploy"]}]'),
        ("RADAR_RECEIVER_TOKENS", '[{"token": "Rt6secret-0123456789", "scopes": ["root"]}]'),
        ("RADAR_RECEIVER_TOKENS", '[{"token": "Rt6secret-0123456789\x1b", "scopes": ["gate"]}]'),
        ("RADAR_RECEIVER_TOKENS", '{"token": "Rt6secret-0123456789"'),
    ],
)
def test_a_refused_secret_is_not_shown(variable_name, bad):
    """A secret refused for its form is not echoed: the message names the variable only."""
    with pytest.raises(ConfigError, match=variable_name) as err:
        settings(environ={**SECRETS, variable_name: bad})
    assert not [p for p in PIECES if p in str(err.value)], str(err.value)


def test_the_object_follows_the_environment_and_a_command_reads_only_its_own(monkeypatch):
    monkeypatch.setenv("RADAR_WINDOW_SECONDS", "200")
    assert settings().window_seconds == 200
    monkeypatch.setenv("RADAR_WINDOW_SECONDS", "300")
    assert settings().window_seconds == 300  # not a stale copy
    monkeypatch.setenv("RADAR_SLACK_TOKEN", "xoxb-1")  # without its channel: the code location refuses it...
    with pytest.raises(ConfigError, match="RADAR_SLACK_CHANNEL is not"):
        settings()
    assert settings("window_seconds").window_seconds == 300  # ...a command that reads the window is not stopped


def test_the_settings_import_no_heavy_library_and_the_cli_no_pydantic_settings():
    """`radar` commands start quickly: the settings module loads neither pandas, Dagster nor SQLAlchemy, and the
    command's module does not even load pydantic-settings until a command asks for a setting."""
    code = (
        "import sys\n"
        "import radar_pipeline.cli\n"
        "print('pydantic_settings' in sys.modules)\n"
        "from radar_pipeline.config.settings import settings\n"
        "settings()\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'pandas', 'dagster', 'sqlalchemy', 'numpy'}))\n"
    )
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("RADAR_")}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["False", "[]"], proc.stdout


# --- the engine's settings: validated by pydantic, and the Dagster config made from them ---


def test_engine_settings_refuse_bad_values_naming_the_field():
    for bad, field in [
        ({"min_samples": "three"}, "min_samples"),
        ({"budget_time_weight": 1.5}, "budget_time_weight"),
        ({"prior_conflict_alpha": 0.0}, "prior_conflict_alpha"),
        ({"window": timedelta(seconds=-1)}, "window"),
        ({"prior_min_intervals": 50, "prior_max_intervals": 10}, "prior_max_intervals"),
    ]:
        with pytest.raises(ValueError, match=f"invalid EngineSettings: .*{field}") as err:
            EngineSettings(**bad)  # type: ignore[arg-type]
        assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match="clear_level"):
        dataclasses.replace(EngineSettings(), clear_level=1.0)
    with pytest.raises(ValueError, match="min_rise_ms"):
        EngineSettings.from_dict({"min_rise_ms": float("inf")})
    assert EngineSettings(window=timedelta(minutes=30)) == EngineSettings()


def _optional_type(annotation: Any) -> Any:
    (inner,) = [a for a in annotation.__args__ if a is not type(None)]
    return inner


def test_the_run_config_of_the_analyses_is_every_engine_setting():
    """VerdictConfig (deploy_verdicts' and periodic_verdicts' run config) has exactly EngineSettings' fields, each an
    optional override of the same type (durations in seconds), and each reaches the settings a run uses."""
    from radar_pipeline.defs.deploys.deploy_verdicts import VerdictConfig
    from radar_pipeline.defs.resources import AnalysisResource

    engine = {f.name: f for f in dataclasses.fields(EngineSettings)}
    config = VerdictConfig.model_fields
    assert list(config) == list(engine)
    hints = __import__("typing").get_type_hints(EngineSettings)
    for name, info in config.items():
        expected = float if hints[name] is timedelta else hints[name]
        assert _optional_type(info.annotation) is expected and info.default is None, name
    changed = {
        "window": 900.0,
        "min_samples": 4,
        "budget_time_weight": 0.25,
        "tolerance_floor": 30.0,
        "fleet_min_queries": 9,
        "prior_min_intervals": 60,
        "prior_max_intervals": 600,
        "prior_conflict_alpha": 0.01,
        "clear_level": 0.9,
    }
    built = AnalysisResource().settings(**VerdictConfig(**changed).model_dump()).to_dict()
    assert {k: built[k] for k in changed} == changed


def test_a_new_engine_setting_becomes_run_config_by_itself():
    from pydantic.dataclasses import dataclass

    from radar_pipeline.defs.resources import engine_overrides_config

    @dataclass(frozen=True)
    class Wider(EngineSettings):
        new_knob: float = 1.0

    made = engine_overrides_config("WiderConfig", "test", __name__, Wider)
    assert "new_knob" in made.model_fields and list(made.model_fields)[:-1] == [
        f.name for f in dataclasses.fields(EngineSettings)
    ]


def test_the_deployment_defaults_are_the_engine_s():
    """The analysis resource's window and tolerance floor, and the window `radar gate` assumes, are EngineSettings'
    defaults: set in one place."""
    from radar_pipeline.defs.resources import ENGINE_TIMES, AnalysisResource

    defaults = EngineSettings()
    for field, setting in ENGINE_TIMES.items():
        assert AnalysisResource.model_fields[field].default == getattr(defaults, setting).total_seconds()
    assert settings_module.DEFAULT_WINDOW_SECONDS == defaults.window.total_seconds()
    assert AnalysisResource().settings() == defaults


def test_a_slack_token_without_its_channel_is_told_as_that_before_the_token_s_format():
    """As before the settings object: the pair is checked first, so a half-configured Slack names what is missing."""
    for environ, message in [
        ({"RADAR_SLACK_TOKEN": "abc"}, "RADAR_SLACK_TOKEN is set but RADAR_SLACK_CHANNEL is not"),
        ({"RADAR_SLACK_CHANNEL": "#x"}, "RADAR_SLACK_CHANNEL is set but RADAR_SLACK_TOKEN is not"),
        ({"RADAR_SLACK_TOKEN": "abc", "RADAR_SLACK_CHANNEL": "#x"}, "RADAR_SLACK_TOKEN is not a Slack token"),
    ]:
        with pytest.raises(ConfigError, match=message):
            settings_module.settings(environ=environ)


def test_the_resources_are_built_from_the_tree(monkeypatch):
    """Each branch reaches its resource: a set value as the field, a secret as an EnvVar of its variable (never the
    value in Dagster's config), and what every destination shares (the alert age, the Dagster UI's address) on each."""
    from radar_pipeline.defs.resources import CodeHostResource, SlackResource, default_resources, destinations
    from radar_pipeline.steps.alert_delivery import run_url

    environ = {
        **SECRETS,
        "RADAR_ALERT_MAX_AGE_HOURS": "6",
        "RADAR_DAGSTER_URL": "https://dagster.example/",
        "RADAR_GITHUB_API_URL": "https://ghe.example/api/v3",
        "RADAR_SLACK_LABEL_BUTTONS": "true",
        "RADAR_CATALOG_INTERVAL": "90",
        "RADAR_CHART_DIR": "/tmp/charts",
        "RADAR_WINDOW_SECONDS": "600",
    }
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    found = settings(environ=environ)
    built = {**default_resources(found), **destinations(found)}
    shown = "".join(repr(r) + str(r.model_dump()) for r in built.values())
    assert not [p for p in PIECES if p in shown], shown
    slack, hosts = built["slack"], built["code_hosts"]
    assert isinstance(slack, SlackResource) and isinstance(hosts, CodeHostResource)
    assert slack.channel == "#radar" and slack.label_buttons and hosts.github_api_url == "https://ghe.example/api/v3"
    for resource in (slack, hosts, built["channels"]):
        assert resource.alert_max_age.total_seconds() == 6 * 3600  # type: ignore[attr-defined]
        assert resource.dagster_url == "https://dagster.example/"  # type: ignore[attr-defined]
    assert run_url("r-1", slack.dagster_url) == "https://dagster.example/runs/r-1"
    running = {name: r.process_config_and_initialize() for name, r in built.items()}  # the EnvVars, resolved
    assert running["slack"].token == "xoxb-Sl4cksecret"  # type: ignore[attr-defined]
    assert running["code_hosts"].gitlab_token == "glpat-Gl1secret"  # type: ignore[attr-defined]
    assert running["channels"].pagerduty_routing_key == SECRETS["RADAR_PAGERDUTY_ROUTING_KEY"]  # type: ignore[attr-defined]
    analysis, targets = running["analysis"], running["targets"]
    assert analysis.window_seconds == 600 and analysis.chart_root == Path("/tmp/charts")  # type: ignore[attr-defined]
    assert targets.catalog_interval.total_seconds() == 90 and targets.targets()[0].name == "main"  # type: ignore[attr-defined]
