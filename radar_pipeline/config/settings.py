"""Every RADAR_* setting in one object, RadarSettings (pydantic-settings): the only reader of the RADAR_* environment.

Each variable is checked by the same rules and with the same messages as ever: a message names the variable and never
shows a secret; a URL whose password cannot be masked is refused. Secrets are SecretStr: they print as '**********'.
The code location checks them all when its definitions load (`settings()`); a command reads the few it needs
(`settings("window_seconds", ...)`), so a bad value elsewhere in its environment does not stop it.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any

from pydantic import BeforeValidator, SecretStr, ValidationError, ValidationInfo, model_validator
from pydantic_core import PydanticUseDefault
from pydantic_settings import BaseSettings, EnvSettingsSource, SettingsConfigDict

from radar_pipeline.config.masking import printable
from radar_pipeline.config.targets import TARGETS_VAR as TARGETS_VAR
from radar_pipeline.config.targets import WAREHOUSE_URL_VAR as WAREHOUSE_URL_VAR
from radar_pipeline.config.targets import ConfigError, Target, database_url, parse_targets, warehouse_url

PREFIX = "RADAR_"
MAX_SECONDS = 366 * 86400.0  # a year: longer windows or periods are a typo (and inf overflows timedelta)
DEFAULT_PERIODIC_START = "2026-11-01-00:00"
DEFAULT_ALERT_MAX_AGE_HOURS = 24.0
DEFAULT_RETENTION_DAYS = 14
DEFAULT_SNAPSHOT_CRON = "* * * * *"
# The analysis window each side of a deploy and the scrape interval when RADAR_WINDOW_SECONDS and
# RADAR_SCRAPE_INTERVAL_SECONDS are unset (`radar deploy` and `radar gate` tell when a verdict is due from the same;
# the window is EngineSettings' default, which a test holds it to).
DEFAULT_WINDOW_SECONDS = 1800.0
DEFAULT_SCRAPE_INTERVAL_SECONDS = 60.0
DEFAULT_API_URLS = {"github": "https://api.github.com", "gitlab": "https://gitlab.com/api/v4"}
_ROLE = re.compile(r"[A-Za-z_][A-Za-z0-9_$]{0,62}")
_HTTP = re.compile(r"https?://[^\s\x00-\x1f\x7f]+")


def positive_int(value: str | None, variable: str, default: int) -> int:
    """A whole number of at least 1 from a variable's value; the default when it is unset or empty."""
    if value is None or not value.strip():
        return default
    try:
        number = int(value)
    except ValueError:
        raise ConfigError(f"{variable} must be a whole number, not {value!r}") from None
    if number < 1:
        raise ConfigError(f"{variable} must be at least 1, not {number}")
    if number > 1_000_000:
        raise ConfigError(f"{variable} must be at most 1000000, not {number}")
    return number


def positive_seconds(value: str, variable: str) -> float:
    """A positive, finite number of seconds (at most a year) from a variable's value."""
    try:
        number = float(value)
    except ValueError:
        raise ConfigError(f"{variable} must be a number of seconds, not {value!r}") from None
    if not number > 0:
        raise ConfigError(f"{variable} must be more than 0 seconds, not {value!r}")
    if not number <= MAX_SECONDS:  # also refuses inf
        raise ConfigError(f"{variable} must be at most {MAX_SECONDS:.0f} seconds (a year), not {value!r}")
    return number


def retention_days(value: str | None, variable: str = "RADAR_RETENTION_DAYS") -> int:
    """Days of snapshots to keep (default 14)."""
    return positive_int(value, variable, DEFAULT_RETENTION_DAYS)


def alert_max_age_hours(value: str | None, variable: str = "RADAR_ALERT_MAX_AGE_HOURS") -> float:
    """Hours after a deploy's window (or a periodic check's hour) closed beyond which its alerts are recorded as
    withheld instead of sent (default 24): a backfill or a reanalysis of old deploys must not flood the channel."""
    if value is None or not value.strip():
        return DEFAULT_ALERT_MAX_AGE_HOURS
    try:
        hours = float(value)
    except ValueError:
        raise ConfigError(f"{variable} must be a number of hours, not {value!r}") from None
    if not 0 < hours <= 24 * 365:
        raise ConfigError(f"{variable} must be more than 0 and at most 8760 hours (a year), not {value!r}")
    return hours


# Each check below takes a variable's raw value (never empty: empty is unset) and returns it parsed, or raises
# ConfigError naming the variable; PydanticUseDefault keeps the field's default.


def _variable(info: ValidationInfo) -> str:
    return variable(str(info.field_name))


def _raw(value: object) -> str:
    return value.get_secret_value() if isinstance(value, SecretStr) else str(value)


def _count(value: object, info: ValidationInfo) -> int:
    number = positive_int(_raw(value), _variable(info), 0)
    if number == 0:  # white space only: unset
        raise PydanticUseDefault()
    return number


def _seconds(value: object, info: ValidationInfo) -> float:
    return positive_seconds(_raw(value), _variable(info))


def _hours(value: object, info: ValidationInfo) -> float:
    return alert_max_age_hours(_raw(value), _variable(info))


def _retention(value: object, info: ValidationInfo) -> int:
    return retention_days(_raw(value), _variable(info))


def _hour_start(value: object, info: ValidationInfo) -> str:
    text = _raw(value)
    try:
        datetime.strptime(text, "%Y-%m-%d-%H:%M")
    except ValueError:
        raise ConfigError(f"{_variable(info)} must look like 2026-11-01-00:00 (an hour, UTC), not {text!r}") from None
    return text


def _minute(value: object, info: ValidationInfo) -> int:
    text = _raw(value)
    if not text.isdigit() or not 0 <= int(text) <= 59:
        raise ConfigError(f"{_variable(info)} must be a minute of the hour, 0 to 59, not {text!r}")
    return int(text)


def auto_explain_logs(value: str | None, variable: str) -> dict[str, Path]:
    """Whitespace-separated target=/absolute/path pairs: each target's PostgreSQL jsonlog file, or the directory of
    its *.json logs (the newest is read), where auto_explain writes the plans that ran. ConfigError naming the
    variable for anything else."""
    logs: dict[str, Path] = {}
    for position, item in enumerate((value or "").split(), start=1):
        name, sep, path = item.partition("=")
        if not sep or not name or not path.startswith("/"):
            raise ConfigError(f"{variable}: item {position} is not target=/absolute/path/of/the/jsonlog")
        if name in logs:
            raise ConfigError(f"{variable}: target {name!r} appears twice")
        logs[name] = Path(path)
    return logs


def _auto_explain(value: object, info: ValidationInfo) -> str:
    text = _raw(value)
    auto_explain_logs(text, _variable(info))
    return text


def _warehouse(value: object, info: ValidationInfo) -> str:
    return warehouse_url(_raw(value), _variable(info))


def _targets(value: object, info: ValidationInfo) -> str:
    text = _raw(value)
    parse_targets(text, _variable(info))
    return text


def _dagster_storage(value: object, info: ValidationInfo) -> str:
    variable, text = _variable(info), _raw(value).strip()
    url = database_url(text, variable)
    if url.drivername != "postgresql+psycopg2":
        raise ConfigError(
            f"{variable} must spell out the psycopg2 driver (postgresql+psycopg2://...), which Dagster's storage uses, "
            f"not {url.drivername!r}"
        )
    return text


def _role(value: object, info: ValidationInfo) -> str:
    text = _raw(value)
    if not _ROLE.fullmatch(text):
        raise ConfigError(f"{_variable(info)} must be a role name (letters, digits, _), not {text!r}")
    return text


def _slack_token(value: object, info: ValidationInfo) -> str:
    text = _raw(value)
    if not text.startswith("xox"):
        raise ConfigError(f"{_variable(info)} is not a Slack token (xoxb-...)")
    return text


def _https(value: object, info: ValidationInfo) -> str:
    text = _raw(value)
    if not (text.startswith("https://") and _HTTP.fullmatch(text)):
        raise ConfigError(f"{_variable(info)} must be an https:// URL")
    return text


def _token(value: object, info: ValidationInfo) -> str:
    text = _raw(value)
    if any(c.isspace() or not c.isprintable() for c in text):
        raise ConfigError(f"{_variable(info)} holds white space or control characters: not a token")
    return text


# the receiver: a source's token or HMAC key is long enough not to be guessed (`openssl rand -hex 32`: 64).
MIN_SHARED_SECRET = 16


def _shared_secret(value: object, info: ValidationInfo) -> str:
    text = _token(value, info)
    if len(text) < MIN_SHARED_SECRET:
        raise ConfigError(f"{_variable(info)} is shorter than {MIN_SHARED_SECRET} characters: too easy to guess")
    return text


def _api_url(value: object, info: ValidationInfo) -> str:
    return _http_url(value, info)


def _link(value: object, info: ValidationInfo) -> str:
    return _http_url(value, info, ": alerts show it as a link")


def _http_url(value: object, info: ValidationInfo, why_no_at: str = "") -> str:
    variable, text = _variable(info), _raw(value)
    if "@" in text:
        raise ConfigError(f"{variable} must not hold @ (a user name or password){why_no_at}")
    if not _HTTP.fullmatch(text):
        raise ConfigError(f"{variable} must be an http(s) URL, not {text!r}")
    return text


def _folder(value: object, info: ValidationInfo) -> Path:
    text = _raw(value)
    if Path(text).exists() and not Path(text).is_dir():
        raise ConfigError(f"{_variable(info)} {text!r} exists and is not a folder")
    return Path(text)


# channels: Teams, Grafana, generic webhooks


def _dashboard_uid(value: object, info: ValidationInfo) -> str:
    text = _raw(value).strip()
    if not re.fullmatch(r"[A-Za-z0-9_-]{1,40}", text):
        raise ConfigError(f"{_variable(info)} must be a dashboard UID (1 to 40 of letters, digits, _ and -)")
    return text


def _hosts(value: object, info: ValidationInfo) -> list[str]:
    hosts = [h.strip().lower() for h in _raw(value).split(",") if h.strip()]
    for host in hosts:
        try:
            allowed_host(host)
        except ValueError:
            raise ConfigError(
                f"{_variable(info)} must list hosts (each with an optional :port) separated by commas, not {host!r}"
            ) from None
    return hosts


def allowed_host(entry: str) -> tuple[str, int | None]:
    """An entry of RADAR_WEBHOOK_ALLOWED_HOSTS as (host, port or None): a host name (`*.` for its subdomains) or an
    IP address (IPv6 in brackets, or bare without a port), optionally followed by `:port`; ValueError otherwise."""
    entry = entry.strip().lower()
    host, port = entry, None
    if entry.startswith("["):
        host, _, rest = entry[1:].partition("]")
        if rest:
            port = rest.removeprefix(":") if rest.startswith(":") else "x"
    elif entry.count(":") == 1:
        host, port = entry.split(":")
    name = r"(\*\.)?[a-z0-9]([a-z0-9.-]*[a-z0-9])?"
    if not (re.fullmatch(name, host) or (":" in host and re.fullmatch(r"[0-9a-f:.]+", host))):
        raise ValueError(entry)
    if port is not None and not (port.isdigit() and 0 < int(port) < 65536):
        raise ValueError(entry)
    return host, int(port) if port is not None else None


def _webhooks(value: object, info: ValidationInfo) -> str:
    text = _raw(value)
    parse_webhooks(text, _variable(info))
    return text


def parse_webhooks(text: str, setting: str = "RADAR_WEBHOOKS") -> dict[str, dict[str, Any]]:
    """RADAR_WEBHOOKS's form: a JSON object of name → {"url", optional "template" or "template_file", "headers"};
    raises ConfigError naming the setting, showing none of its values (URLs and headers may hold secrets). Each
    webhook's URL, host and template are checked by alerts.webhook.validate when the definitions make the channels."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{setting} is not valid JSON: {exc.msg} (line {exc.lineno} column {exc.colno})") from None
    if not isinstance(data, dict) or not data:
        raise ConfigError(f'{setting} must be a JSON object of webhooks by name: {{"ops": {{"url": ..., ...}}}}')
    for name, spec in data.items():
        if not re.fullmatch(r"[a-z0-9][a-z0-9_-]{0,39}", name):
            raise ConfigError(f"{setting}: a webhook's name must be 1 to 40 of a-z, 0-9, _ and -, not {name!r}")
        if not isinstance(spec, dict) or not isinstance(spec.get("url"), str):
            raise ConfigError(f"{setting} ({name}): needs a url")
        if "template" in spec and "template_file" in spec:
            raise ConfigError(f"{setting} ({name}): takes a template or a template_file, not both")
        unknown = set(spec) - {"url", "template", "template_file", "headers"}
        if unknown:
            raise ConfigError(f"{setting} ({name}): unknown keys {sorted(unknown)}")
        headers = spec.get("headers", {})
        if not isinstance(headers, dict) or not all(
            isinstance(k, str) and isinstance(v, str) and (k + v).isascii() and (k + v).isprintable() and k
            for k, v in headers.items()
        ):
            raise ConfigError(f"{setting} ({name}): headers must be an object of printable ASCII strings")
    return data


# receiver: the checks of `radar webhook serve`'s settings (the fields are at the end of RadarSettings).
# record deploys (POST /v1/deploys/generic); read a deploy's gate; label verdicts (POST /v1/labels)
RECEIVER_SCOPES = ("deploy", "gate", "label")


def receiver_tokens(text: str, variable: str) -> list[tuple[str, frozenset[str]]]:
    """The CI tokens of RADAR_RECEIVER_TOKENS, a JSON list of {"token": ..., "scopes": ["deploy" and/or "gate"]}, as
    (token, scopes); ConfigError names the entry that is wrong, never a token."""
    import json

    try:
        entries = json.loads(text)
    except ValueError:
        raise ConfigError(
            f'{variable} is not JSON: give a list such as [{{"token": "...", "scopes": ["deploy"]}}]'
        ) from None
    if not isinstance(entries, list) or not entries:
        raise ConfigError(f"{variable} must be a non-empty JSON list of {{token, scopes}} objects")
    found: list[tuple[str, frozenset[str]]] = []
    for n, entry in enumerate(entries, 1):
        where = f"{variable}, entry {n}"
        if not isinstance(entry, dict) or set(entry) != {"token", "scopes"}:
            raise ConfigError(f"{where}: must be an object with exactly the keys token and scopes")
        token, scopes = entry["token"], entry["scopes"]
        if not isinstance(token, str) or any(c.isspace() or not c.isprintable() or not c.isascii() for c in token):
            raise ConfigError(f"{where}: the token must be printable ASCII without white space")
        if len(token) < MIN_SHARED_SECRET:
            raise ConfigError(f"{where}: the token is shorter than {MIN_SHARED_SECRET} characters: too easy to guess")
        if not isinstance(scopes, list) or not scopes or not all(s in RECEIVER_SCOPES for s in scopes):
            raise ConfigError(f"{where}: scopes must be a non-empty list of {', '.join(map(repr, RECEIVER_SCOPES))}")
        if any(token == other for other, _ in found):
            raise ConfigError(f"{where}: the same token as an earlier entry: give each token once")
        found.append((token, frozenset(scopes)))
    return found


def _receiver_tokens(value: object, info: ValidationInfo) -> str:
    text = _raw(value)
    receiver_tokens(text, _variable(info))
    return text


def _receiver_sources(value: object, info: ValidationInfo) -> tuple[str, ...]:
    names = tuple(n.strip() for n in _raw(value).split(",") if n.strip())
    if not names or any(not re.fullmatch(r"[a-z][a-z0-9-]{0,30}", n) for n in names):
        raise ConfigError(f"{_variable(info)} must be a comma-separated list of source names, e.g. github,gitlab")
    return names


def _body_bytes(value: object, info: ValidationInfo) -> int:
    number = positive_int(_raw(value), _variable(info), 0)
    if number < 1024:
        raise ConfigError(f"{_variable(info)} must be at least 1024 bytes, not {number}")
    return number


# channels: what the channels beyond Slack take (RADAR_CHANNEL_ROUTES) and PagerDuty's settings.
CHANNEL_OUTCOMES = ("regression", "load_change", "deploy")  # a detection, a load change, a deploy (as a mark)
CHANNEL_KINDS = ("pagerduty", "teams", "grafana", "webhook")  # a webhook is named: webhook:<name>
DEFAULT_PAGERDUTY_URL = "https://events.pagerduty.com"
_CHANNEL = re.compile(r"(pagerduty|teams|grafana|webhook:[a-z0-9][a-z0-9_-]{0,39})")
_ROUTING_KEY = re.compile(r"[A-Za-z0-9]{32}")


def channel_routes(text: str, variable: str = "RADAR_CHANNEL_ROUTES") -> dict[str, tuple[str, ...]]:
    """Outcome → channels, from 'regression=pagerduty,teams load_change=teams deploy=pagerduty,grafana'; raises
    ConfigError naming the variable and the unknown outcome or channel."""
    routes: dict[str, tuple[str, ...]] = {}
    for part in text.split():
        outcome, sep, names = part.partition("=")
        if not sep or outcome not in CHANNEL_OUTCOMES:
            raise ConfigError(
                f"{variable}: {outcome!r} is not an outcome ({', '.join(CHANNEL_OUTCOMES)}); write outcome=channel,..."
            )
        if outcome in routes:
            raise ConfigError(f"{variable} names {outcome} twice")
        channels = tuple(n for n in names.split(",") if n)
        for name in channels:
            if name == "slack":
                raise ConfigError(f"{variable}: slack is not routed (it gets every detection when it is configured)")
            if not _CHANNEL.fullmatch(name):
                raise ConfigError(
                    f"{variable}: {printable(name)!r} is not a channel (pagerduty, teams, grafana, webhook:<name>)"
                )
        routes[outcome] = channels
    return routes


def _routes(value: object, info: ValidationInfo) -> str:
    text = _raw(value)
    channel_routes(text, _variable(info))
    return text


def _routing_key(value: object, info: ValidationInfo) -> str:
    text = _raw(value)
    if not _ROUTING_KEY.fullmatch(text):
        raise ConfigError(f"{_variable(info)} must be a PagerDuty integration key (32 letters and digits)")
    return text


Count = Annotated[int, BeforeValidator(_count)]
Seconds = Annotated[float | None, BeforeValidator(_seconds)]


class RadarSettings(BaseSettings):
    """radar's settings: each field is the variable RADAR_<FIELD NAME IN CAPITALS>; unset (or empty) variables keep
    the defaults. Fields are checked in this order, so an error names the first bad variable."""

    model_config = SettingsConfigDict(
        env_prefix=PREFIX,
        env_prefix_target="all",  # the prefix goes before the aliases: WAREHOUSE_URL → RADAR_WAREHOUSE_URL
        alias_generator=str.upper,
        case_sensitive=True,
        env_ignore_empty=True,
        extra="ignore",
        frozen=True,
        hide_input_in_errors=True,
        validate_default=False,  # the defaults are right; the checks are for what the environment says
    )

    # The periodic partitions: the first hour they offer (backfills reach back to it), as 2026-11-01-00:00 UTC; and
    # the minutes past the hour when the schedule runs the hour just ended.
    periodic_start: Annotated[str, BeforeValidator(_hour_start)] = DEFAULT_PERIODIC_START
    periodic_minute: Annotated[int, BeforeValidator(_minute)] = 5
    # The warehouse (a SQLAlchemy URL, given the psycopg 3 driver) and the watched targets (name=postgresql://...).
    warehouse_url: Annotated[SecretStr | None, BeforeValidator(_warehouse)] = None
    targets: Annotated[SecretStr | None, BeforeValidator(_targets)] = None
    retention_days: Annotated[int, BeforeValidator(_retention)] = DEFAULT_RETENTION_DAYS
    # The analysis times (the Dagster resources' defaults when unset) and the periodic check's period P.
    window_seconds: Seconds = None
    scrape_interval_seconds: Seconds = None
    tolerance_floor_seconds: Seconds = None
    period_seconds: Seconds = None
    plan_top_n: Count = 200
    reanalysis_days: Count = 7
    dagster_run_retention_days: Count = 7
    snapshot_shards: Count = 1
    alert_max_age_hours: Annotated[float, BeforeValidator(_hours)] = DEFAULT_ALERT_MAX_AGE_HOURS
    collector_role: Annotated[str | None, BeforeValidator(_role)] = None  # whose statements are left out
    # where auto_explain's plans can be read, per target (target=/path pairs: a jsonlog file or its directory)
    auto_explain_logs: Annotated[str | None, BeforeValidator(_auto_explain)] = None
    # Slack: a bot token and a channel (messages and chart images), or an incoming webhook (messages only).
    slack_token: Annotated[SecretStr | None, BeforeValidator(_slack_token)] = None
    slack_channel: str | None = None
    slack_webhook_url: Annotated[SecretStr | None, BeforeValidator(_https)] = None
    # a row of label buttons under each regression (docs/labels.md): the Slack app's interactivity requests go to the
    # receiver, which needs receiver_slack_signing_secret
    slack_label_buttons: bool = False
    # Code hosts (commit statuses, review comments): a token each, and the API the token is sent to.
    github_token: Annotated[SecretStr | None, BeforeValidator(_token)] = None
    github_api_url: Annotated[str, BeforeValidator(_api_url)] = DEFAULT_API_URLS["github"]
    gitlab_token: Annotated[SecretStr | None, BeforeValidator(_token)] = None
    gitlab_api_url: Annotated[str, BeforeValidator(_api_url)] = DEFAULT_API_URLS["gitlab"]
    # channels: which outcome goes to which channel beyond Slack (unset: every configured channel gets what it
    # can take), and PagerDuty's Events API v2 (a service integration's routing key; the API's address, for the EU
    # service region or a proxy).
    channel_routes: Annotated[str | None, BeforeValidator(_routes)] = None
    pagerduty_routing_key: Annotated[SecretStr | None, BeforeValidator(_routing_key)] = None
    pagerduty_url: Annotated[str, BeforeValidator(_api_url)] = DEFAULT_PAGERDUTY_URL
    dagster_url: Annotated[str | None, BeforeValidator(_link)] = None  # the Dagster UI's address, for links in alerts
    chart_dir: Annotated[Path | None, BeforeValidator(_folder)] = None  # unset: a new temporary folder per analysis
    dagster_pg_url: Annotated[SecretStr | None, BeforeValidator(_dagster_storage)] = None  # Dagster's own storage
    # Crons, checked where their schedules are built (unset: the schedule's default).
    snapshot_cron: str | None = None
    plan_cron: str | None = None
    deploy_target: str | None = None  # `radar deploy`'s target when --target is not given
    home: Path | None = None  # where the embedded default lives (unset: ./.radar)
    # channels: Teams, Grafana, generic webhooks. Microsoft Teams: a Workflows webhook's URL (its sig= is a secret).
    # Grafana: its URL, a service account token, and optionally the dashboard (and panel) the annotations belong to.
    # Generic webhooks: a JSON object of name → {"url", optional "template" or "template_file", "headers"} (a secret:
    # URLs and headers may hold one), posting only to the hosts of the allowlist (comma-separated; *.example.com
    # allowed).
    teams_webhook_url: Annotated[SecretStr | None, BeforeValidator(_https)] = None
    grafana_url: Annotated[str | None, BeforeValidator(_api_url)] = None
    grafana_token: Annotated[SecretStr | None, BeforeValidator(_token)] = None
    grafana_dashboard_uid: Annotated[str | None, BeforeValidator(_dashboard_uid)] = None
    grafana_panel_id: Count | None = None
    webhook_allowed_hosts: Annotated[list[str] | None, BeforeValidator(_hosts)] = None
    # H3, plans for every active statement (issue 28, item 5): per plan capture and target, beyond the plan_top_n
    # busiest, how many statements are planned in turn (those first seen since the last capture, then the least
    # recently planned of those with calls within a day).
    plan_rotation_n: Count = 200
    # FB, catalog facts (issue 28, items 1 and 2): how often a scrape reads the watched database's catalog digests
    # (seconds); a deploy recorded for the target since the last read has it read at the next scrape.
    # the catalog and settings facts read at most this often (and after each deploy): 180 s keeps their share of a
    # one-minute scrape at 2,000 tables, with the wait samples, within 0.1 CPU-s (docs/causes.md, "Cost")
    catalog_interval: Annotated[float, BeforeValidator(_seconds)] = 180.0
    webhooks: Annotated[SecretStr | None, BeforeValidator(_webhooks)] = None

    @model_validator(mode="before")
    @classmethod
    def _channel_pairs(cls, data: Any) -> Any:
        # On the raw values: a Grafana URL without its token (or the reverse), a panel without its dashboard.
        if isinstance(data, dict):
            raw = {str(k).lower(): v for k, v in data.items()}
            for one, other, why in (
                ("grafana_url", "grafana_token", "a service account token to send"),
                ("grafana_token", "grafana_url", "the Grafana to send it to"),
                ("grafana_panel_id", "grafana_dashboard_uid", "its dashboard's UID"),
                ("webhooks", "webhook_allowed_hosts", "the hosts webhooks may post to"),
            ):
                if raw.get(one) and not raw.get(other):
                    raise ConfigError(f"{variable(one)} is set but {variable(other)} is not: it needs {why}")
        return data

    # receiver: `radar webhook serve`. The sources it accepts (unset: each one whose secret is set, and generic
    # when a token may record deploys), each source's secret (the HMAC key or token its sender is configured with),
    # the CI tokens with their scopes (JSON, see receiver_tokens), and the largest body it reads.
    receiver_sources: Annotated[tuple[str, ...] | None, BeforeValidator(_receiver_sources)] = None
    receiver_github_secret: Annotated[SecretStr | None, BeforeValidator(_shared_secret)] = None
    receiver_gitlab_secret: Annotated[SecretStr | None, BeforeValidator(_shared_secret)] = None
    receiver_argocd_secret: Annotated[SecretStr | None, BeforeValidator(_shared_secret)] = None
    receiver_flux_secret: Annotated[SecretStr | None, BeforeValidator(_shared_secret)] = None
    receiver_rollouts_secret: Annotated[SecretStr | None, BeforeValidator(_shared_secret)] = None
    receiver_tokens: Annotated[SecretStr | None, BeforeValidator(_receiver_tokens)] = None
    # the Slack app's signing secret: its interactivity requests (an alert's label buttons) are verified with it
    receiver_slack_signing_secret: Annotated[SecretStr | None, BeforeValidator(_shared_secret)] = None
    receiver_max_body_bytes: Annotated[int, BeforeValidator(_body_bytes)] = 256 * 1024

    @model_validator(mode="before")
    @classmethod
    def _slack_pairs(cls, data: Any) -> Any:
        # On the raw values, before the token's own check: a token without its channel is told as that.
        if isinstance(data, dict):
            raw = {str(k).lower(): v for k, v in data.items()}  # the environment source keeps the variables' case
            token, channel = raw.get("slack_token"), raw.get("slack_channel")
            if token and not channel:
                raise ConfigError(
                    "RADAR_SLACK_TOKEN is set but RADAR_SLACK_CHANNEL is not: name the channel to post in"
                )
            if channel and not token:
                raise ConfigError(
                    "RADAR_SLACK_CHANNEL is set but RADAR_SLACK_TOKEN is not: a channel needs a bot token"
                )
        return data

    @classmethod
    def variables(cls) -> dict[str, str]:
        """Field name → its variable, for every setting."""
        return {name: variable(name) for name in cls.model_fields}

    def target_list(self) -> list[Target]:
        """The watched targets RADAR_TARGETS names (none when it is unset)."""
        return parse_targets(self.targets.get_secret_value(), TARGETS_VAR) if self.targets else []

    def token(self, host: str) -> str | None:
        """A code host's token (github, gitlab), or None."""
        secret: SecretStr | None = getattr(self, f"{host}_token")
        return secret.get_secret_value() if secret else None

    def api_url(self, host: str) -> str:
        """A code host's API URL (github, gitlab)."""
        return str(getattr(self, f"{host}_api_url"))


def variable(field: str) -> str:
    """The environment variable of a RadarSettings field (KeyError when there is no such field)."""
    if field not in RadarSettings.model_fields:
        raise KeyError(field)
    return PREFIX + field.upper()


def field_of(name: str) -> str:
    """The RadarSettings field a RADAR_* variable sets (KeyError when it is none)."""
    field = name.removeprefix(PREFIX).lower()
    if not name.startswith(PREFIX) or field not in RadarSettings.model_fields:
        raise KeyError(name)
    return field


class _Environ(EnvSettingsSource):
    """pydantic-settings' environment source over a given mapping (a command's environment, a test's)."""

    def __init__(self, settings_cls: type[BaseSettings], environ: Mapping[str, str]) -> None:
        self._environ = environ
        super().__init__(settings_cls)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        return {k: v for k, v in self._environ.items() if v != ""}


def settings(*fields: str, environ: Mapping[str, str] | None = None) -> RadarSettings:
    """The settings of `environ` (default: this process's environment, read again whenever a RADAR_* variable
    changed). Without `fields`, every variable is checked; with them, only theirs are read (the rest keep their
    defaults). Raises ConfigError naming the first bad variable, never showing a secret."""
    source = os.environ if environ is None else environ
    wanted = {variable(f) for f in fields}
    return _load(
        tuple(sorted((k, v) for k, v in source.items() if k.startswith(PREFIX) and (not fields or k in wanted)))
    )


@lru_cache(maxsize=32)
def _load(items: tuple[tuple[str, str], ...]) -> RadarSettings:
    try:
        return RadarSettings(_build_sources=((_Environ(RadarSettings, dict(items)),), {}))  # type: ignore[call-arg]
    except ValidationError as exc:
        raise _config_error(exc) from None


def _config_error(exc: ValidationError) -> ConfigError:
    """The first problem as a ConfigError: a check's own message, else pydantic's, after the variable's name (never
    the value)."""
    error = exc.errors(include_input=False)[0]
    cause = error.get("ctx", {}).get("error")
    if isinstance(cause, ConfigError):
        return ConfigError(str(cause))
    where = PREFIX + str(error["loc"][0]) if error["loc"] else "a RADAR_* setting"
    return ConfigError(f"{where}: {error['msg']}")


def validate_environment(environ: Mapping[str, str]) -> None:
    """Check every RADAR_* setting that is set (the crons are checked where their schedules are built); raises
    ConfigError naming the first bad variable, never showing a password."""
    settings(environ=environ)


def count_setting(name: str, environ: Mapping[str, str] | None = None) -> int:
    """One of the whole-number settings (COUNTS), by its variable, from the environment or its default."""
    field = field_of(name)
    return int(getattr(settings(field, environ=environ), field))


def periodic_start(environ: Mapping[str, str] | None = None) -> str:
    """The first hour of the periodic partitions, RADAR_PERIODIC_START (an hour, UTC, as 2026-11-01-00:00)."""
    return settings("periodic_start", environ=environ).periodic_start


def periodic_minute(environ: Mapping[str, str] | None = None) -> int:
    """Minutes past the hour when the periodic check runs, RADAR_PERIODIC_MINUTE (default 5)."""
    return settings("periodic_minute", environ=environ).periodic_minute


# The variables by name, for messages and for Dagster's EnvVar (which resolves secrets at run time, unstored); the
# warehouse's and the targets' are config.targets' (the same names: a test holds them to it).
COLLECTOR_ROLE_VAR = variable("collector_role")
RETENTION_DAYS_VAR = variable("retention_days")
SNAPSHOT_CRON_VAR = variable("snapshot_cron")
PLAN_CRON_VAR = variable("plan_cron")
ALERT_MAX_AGE_VAR = variable("alert_max_age_hours")
DAGSTER_URL_VAR = variable("dagster_url")
DAGSTER_PG_URL_VAR = variable("dagster_pg_url")
CHART_DIR_VAR = variable("chart_dir")
DEPLOY_TARGET_VAR = variable("deploy_target")
HOME_VAR = variable("home")
SLACK_TOKEN_VAR, SLACK_CHANNEL_VAR, SLACK_WEBHOOK_VAR = (
    variable("slack_token"),
    variable("slack_channel"),
    variable("slack_webhook_url"),
)
CHANNEL_ROUTES_VAR, PAGERDUTY_KEY_VAR = variable("channel_routes"), variable("pagerduty_routing_key")  # channels
CODE_HOST_TOKEN_VARS = {host: variable(f"{host}_token") for host in DEFAULT_API_URLS}
CODE_HOST_API_VARS = {host: variable(f"{host}_api_url") for host in DEFAULT_API_URLS}
SECONDS_VARS = tuple(
    variable(f) for f in ("window_seconds", "scrape_interval_seconds", "tolerance_floor_seconds", "period_seconds")
)
WINDOW_VAR, SCRAPE_INTERVAL_VAR = SECONDS_VARS[:2]
PLAN_TOP_N_VAR = variable("plan_top_n")
REANALYSIS_DAYS_VAR = variable("reanalysis_days")
RUN_RETENTION_VAR = variable("dagster_run_retention_days")
SHARDS_VAR = variable("snapshot_shards")
PERIODIC_START_VAR = variable("periodic_start")
PERIODIC_MINUTE_VAR = variable("periodic_minute")
# the receiver: each source's secret by its NAME (generic is authenticated by RADAR_RECEIVER_TOKENS).
RECEIVER_SOURCE_SECRET_VARS = {
    name: variable(f"receiver_{name}_secret") for name in ("github", "gitlab", "argocd", "flux", "rollouts")
}
# Whole-number settings and their defaults.
COUNTS: dict[str, int] = {
    v: RadarSettings.model_fields[field_of(v)].default
    for v in (PLAN_TOP_N_VAR, REANALYSIS_DAYS_VAR, RUN_RETENTION_VAR, SHARDS_VAR)
}


def secret_fields() -> list[str]:
    """The fields that hold secrets (SecretStr): never printed, never stored in Dagster's config."""
    return [
        name
        for name, info in RadarSettings.model_fields.items()
        if SecretStr in getattr(info.annotation, "__args__", (info.annotation,))
    ]
