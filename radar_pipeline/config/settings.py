"""Every RADAR_* setting in one tree, RadarSettings (pydantic-settings): the only reader of the RADAR_* environment.

The tree: the analysis times, the warehouse and targets, the collector's and the schedules' settings at the top; a
model per destination (`slack`, `github`, `gitlab`, `pagerduty`, `teams`, `grafana`) and one for the receiver
(`receiver`), each read from its variables (RADAR_SLACK_TOKEN is `slack.token`). The Dagster resources are built from
these models (defs/resources.py), secrets as EnvVar.

A message names the variable and never shows a secret; a URL whose password cannot be masked is refused. Secrets are
SecretStr: they print as '**********'. The code location checks them all when its definitions load (`settings()`); a
command reads the few it needs (`settings("window_seconds", "slack")`), so a bad value elsewhere in its environment
does not stop it.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, ClassVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, SecretStr, ValidationError, ValidationInfo, model_validator
from pydantic_core import PydanticUseDefault
from pydantic_settings import BaseSettings, EnvSettingsSource, NoDecode, SettingsConfigDict

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
DEFAULT_PAGERDUTY_URL = "https://events.pagerduty.com"
# the catalog and settings facts read at most this often (and after each deploy): 180 s keeps their share of a
# one-minute scrape at 2,000 tables, with the wait samples, within 0.1 CPU-s (docs/causes.md, "Cost")
CATALOG_INTERVAL = timedelta(seconds=180)
# channels: what the channels beyond Slack take (RADAR_CHANNEL_ROUTES)
CHANNEL_OUTCOMES = ("regression", "load_change", "deploy")  # a detection, a load change, a deploy (as a mark)
# the receiver: a source's token or HMAC key is long enough not to be guessed (`openssl rand -hex 32`: 64).
MIN_SHARED_SECRET = 16
# record deploys (POST /v1/deploys/generic); read a deploy's gate; label verdicts (POST /v1/labels)
RECEIVER_SCOPES = ("deploy", "gate", "label")
_ROLE = re.compile(r"[A-Za-z_][A-Za-z0-9_$]{0,62}")
_HTTP = re.compile(r"https?://[^\s\x00-\x1f\x7f]+")
_CHANNEL = re.compile(r"(slack|pagerduty|teams|grafana|webhook:[a-z0-9][a-z0-9_-]{0,39})")


class Invalid(ValueError):
    """What is wrong with a value, said after its variable's name ("must be ...", ": item 2 is ...")."""


def named(variable: str, problem: Invalid) -> ConfigError:
    """The ConfigError of a problem with `variable`'s value."""
    text = str(problem)
    return ConfigError(variable + (text if text[:1] in ":,(" else " " + text))


def parsed(parse: Callable[[str], Any], value: str, variable: str) -> Any:
    """`parse(value)`, its problem named after `variable` (a ConfigError)."""
    try:
        return parse(value)
    except Invalid as problem:
        raise named(variable, problem) from None


def _raw(value: object) -> str:
    return value.get_secret_value() if isinstance(value, SecretStr) else str(value)


def check(parse: Callable[[str], Any]) -> BeforeValidator:
    """A field's check: `parse` of the variable's raw text (never empty: empty is unset), raising Invalid."""
    return BeforeValidator(lambda value: parse(_raw(value)))


def _named(parse: Callable[[str, str], Any]) -> BeforeValidator:
    # for the top-level settings whose parser (config.targets') names the variable itself
    def validate(value: object, info: ValidationInfo) -> Any:
        return parse(_raw(value), variable(str(info.field_name)))

    return BeforeValidator(validate)


# Each check below takes a variable's raw text and returns it parsed, or raises Invalid.


def whole(text: str, low: int = 1, unit: str = "") -> int:
    """A whole number from `low` to a million (of `unit`, as messages say it)."""
    try:
        number = int(text)
    except ValueError:
        raise Invalid(f"must be a whole number, not {text!r}") from None
    if number < low:
        raise Invalid(f"must be at least {low}{unit}, not {number}")
    if number > 1_000_000:
        raise Invalid(f"must be at most 1000000, not {number}")
    return number


def _count(text: str) -> int:
    if not text.strip():  # white space only: unset
        raise PydanticUseDefault()
    return whole(text)


def seconds(text: str) -> float:
    """A positive, finite number of seconds (at most a year)."""
    try:
        number = float(text)
    except ValueError:
        raise Invalid(f"must be a number of seconds, not {text!r}") from None
    if not number > 0:
        raise Invalid(f"must be more than 0 seconds, not {text!r}")
    if not number <= MAX_SECONDS:  # also refuses inf
        raise Invalid(f"must be at most {MAX_SECONDS:.0f} seconds (a year), not {text!r}")
    return number


def hours(text: str) -> float:
    """Hours after a deploy's window (or a periodic check's hour) closed beyond which its alerts are recorded as
    withheld instead of sent: a backfill or a reanalysis of old deploys must not flood the channel."""
    try:
        number = float(text)
    except ValueError:
        raise Invalid(f"must be a number of hours, not {text!r}") from None
    if not 0 < number <= 24 * 365:
        raise Invalid(f"must be more than 0 and at most 8760 hours (a year), not {text!r}")
    return number


def _hour_start(text: str) -> str:
    try:
        datetime.strptime(text, "%Y-%m-%d-%H:%M")
    except ValueError:
        raise Invalid(f"must look like 2026-11-01-00:00 (an hour, UTC), not {text!r}") from None
    return text


def _minute(text: str) -> int:
    if not text.isdigit() or not 0 <= int(text) <= 59:
        raise Invalid(f"must be a minute of the hour, 0 to 59, not {text!r}")
    return int(text)


def parse_auto_explain_logs(text: str) -> dict[str, Path]:
    """Whitespace-separated target=/absolute/path pairs: each target's PostgreSQL jsonlog file, or the directory of
    its *.json logs (the newest is read), where auto_explain writes the plans that ran."""
    logs: dict[str, Path] = {}
    for position, item in enumerate(text.split(), start=1):
        name, sep, path = item.partition("=")
        if not sep or not name or not path.startswith("/"):
            raise Invalid(f": item {position} is not target=/absolute/path/of/the/jsonlog")
        if name in logs:
            raise Invalid(f": target {name!r} appears twice")
        logs[name] = Path(path)
    return logs


def _dagster_storage(text: str, variable: str) -> str:
    url = database_url(text.strip(), variable)
    if url.drivername != "postgresql+psycopg2":
        raise ConfigError(
            f"{variable} must spell out the psycopg2 driver (postgresql+psycopg2://...), which Dagster's storage uses, "
            f"not {url.drivername!r}"
        )
    return text.strip()


_warehouse = warehouse_url  # a field's name too: the annotations below must not see the field


def _targets(text: str, variable: str) -> str:
    parse_targets(text, variable)
    return text


def _role(text: str) -> str:
    if not _ROLE.fullmatch(text):
        raise Invalid(f"must be a role name (letters, digits, _), not {text!r}")
    return text


def _slack_token(text: str) -> str:
    if not text.startswith("xox"):
        raise Invalid("is not a Slack token (xoxb-...)")
    return text


def _https(text: str) -> str:
    if not (text.startswith("https://") and _HTTP.fullmatch(text)):
        raise Invalid("must be an https:// URL")
    return text


def _token(text: str) -> str:
    if any(c.isspace() or not c.isprintable() for c in text):
        raise Invalid("holds white space or control characters: not a token")
    return text


def _shared_secret(text: str) -> str:
    _token(text)
    if len(text) < MIN_SHARED_SECRET:
        raise Invalid(f"is shorter than {MIN_SHARED_SECRET} characters: too easy to guess")
    return text


def _http_url(text: str, why_no_at: str = "") -> str:
    if "@" in text:
        raise Invalid(f"must not hold @ (a user name or password){why_no_at}")
    if not _HTTP.fullmatch(text):
        raise Invalid(f"must be an http(s) URL, not {text!r}")
    return text


def _link(text: str) -> str:
    return _http_url(text, ": alerts show it as a link")


def _folder(text: str) -> Path:
    if Path(text).exists() and not Path(text).is_dir():
        raise Invalid(f"{text!r} exists and is not a folder")
    return Path(text)


def _dashboard_uid(text: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9_-]{1,40}", text.strip()):
        raise Invalid("must be a dashboard UID (1 to 40 of letters, digits, _ and -)")
    return text.strip()


def _hosts(text: str) -> list[str]:
    hosts = [h.strip().lower() for h in text.split(",") if h.strip()]
    for host in hosts:
        try:
            allowed_host(host)
        except ValueError:
            raise Invalid(f"must list hosts (each with an optional :port) separated by commas, not {host!r}") from None
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


def parse_webhooks(text: str) -> dict[str, dict[str, Any]]:
    """RADAR_WEBHOOKS's form: a JSON object of name → {"url", optional "template" or "template_file", "headers"};
    raises Invalid showing none of its values (URLs and headers may hold secrets). Each webhook's URL, host and
    template are checked by alerts.webhook.validate when the definitions make the channels."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise Invalid(f"is not valid JSON: {exc.msg} (line {exc.lineno} column {exc.colno})") from None
    if not isinstance(data, dict) or not data:
        raise Invalid('must be a JSON object of webhooks by name: {"ops": {"url": ..., ...}}')
    for name, spec in data.items():
        if not re.fullmatch(r"[a-z0-9][a-z0-9_-]{0,39}", name):
            raise Invalid(f": a webhook's name must be 1 to 40 of a-z, 0-9, _ and -, not {name!r}")
        if not isinstance(spec, dict) or not isinstance(spec.get("url"), str):
            raise Invalid(f"({name}): needs a url")
        if "template" in spec and "template_file" in spec:
            raise Invalid(f"({name}): takes a template or a template_file, not both")
        unknown = set(spec) - {"url", "template", "template_file", "headers"}
        if unknown:
            raise Invalid(f"({name}): unknown keys {sorted(unknown)}")
        headers = spec.get("headers", {})
        if not isinstance(headers, dict) or not all(
            isinstance(k, str) and isinstance(v, str) and (k + v).isascii() and (k + v).isprintable() and k
            for k, v in headers.items()
        ):
            raise Invalid(f"({name}): headers must be an object of printable ASCII strings")
    return data


def receiver_tokens(text: str) -> list[tuple[str, frozenset[str]]]:
    """The CI tokens of RADAR_RECEIVER_TOKENS, a JSON list of {"token": ..., "scopes": ["deploy" and/or "gate"]}, as
    (token, scopes); Invalid names the entry that is wrong, never a token."""
    try:
        entries = json.loads(text)
    except ValueError:
        raise Invalid('is not JSON: give a list such as [{"token": "...", "scopes": ["deploy"]}]') from None
    if not isinstance(entries, list) or not entries:
        raise Invalid("must be a non-empty JSON list of {token, scopes} objects")
    found: list[tuple[str, frozenset[str]]] = []
    for n, entry in enumerate(entries, 1):
        where = f", entry {n}"
        if not isinstance(entry, dict) or set(entry) != {"token", "scopes"}:
            raise Invalid(f"{where}: must be an object with exactly the keys token and scopes")
        token, scopes = entry["token"], entry["scopes"]
        if not isinstance(token, str) or any(c.isspace() or not c.isprintable() or not c.isascii() for c in token):
            raise Invalid(f"{where}: the token must be printable ASCII without white space")
        if len(token) < MIN_SHARED_SECRET:
            raise Invalid(f"{where}: the token is shorter than {MIN_SHARED_SECRET} characters: too easy to guess")
        if not isinstance(scopes, list) or not scopes or not all(s in RECEIVER_SCOPES for s in scopes):
            raise Invalid(f"{where}: scopes must be a non-empty list of {', '.join(map(repr, RECEIVER_SCOPES))}")
        if any(token == other for other, _ in found):
            raise Invalid(f"{where}: the same token as an earlier entry: give each token once")
        found.append((token, frozenset(scopes)))
    return found


def _receiver_sources(text: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    if not names or any(not re.fullmatch(r"[a-z][a-z0-9-]{0,30}", n) for n in names):
        raise Invalid("must be a comma-separated list of source names, e.g. github,gitlab")
    return names


def _body_bytes(text: str) -> int:
    return whole(text, 1024, " bytes")


def parse_channel_routes(text: str) -> dict[str, tuple[str, ...]]:
    """Outcome → channels, from 'regression=pagerduty,teams load_change=teams deploy=pagerduty,grafana'; Invalid
    names the unknown outcome or channel."""
    routes: dict[str, tuple[str, ...]] = {}
    for part in text.split():
        outcome, sep, names = part.partition("=")
        if not sep or outcome not in CHANNEL_OUTCOMES:
            raise Invalid(f": {outcome!r} is not an outcome ({', '.join(CHANNEL_OUTCOMES)}); write outcome=channel,...")
        if outcome in routes:
            raise Invalid(f"names {outcome} twice")
        channels = tuple(n for n in names.split(",") if n)
        for name in channels:
            if not _CHANNEL.fullmatch(name):
                raise Invalid(
                    f": {printable(name)!r} is not a channel (slack, pagerduty, teams, grafana, webhook:<name>)"
                )
        routes[outcome] = channels
    return routes


def _routing_key(text: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9]{32}", text):
        raise Invalid("must be a PagerDuty integration key (32 letters and digits)")
    return text


def _keeping(parse: Callable[[str], Any]) -> Callable[[str], str]:
    # a secret's text, checked by `parse` but kept as given (its parsed form would print)
    def keep(text: str) -> str:
        parse(text)
        return text

    return keep


Count = Annotated[int, check(_count)]
Seconds = Annotated[float | None, check(seconds)]
Secret = Annotated[SecretStr | None, check(_token)]
ApiUrl = Annotated[str, check(_http_url)]
SharedSecret = Annotated[SecretStr | None, check(_shared_secret)]


class Group(BaseModel):
    """A branch of the tree: the settings RADAR_<GROUP>_<FIELD> of one destination or of the receiver; `PAIRS`: a
    field that needs another (checked on the raw values, before each field's own check, so that a half-configured
    destination names what is missing)."""

    model_config = ConfigDict(
        alias_generator=str.upper, frozen=True, extra="ignore", hide_input_in_errors=True, validate_default=False
    )
    NAME: ClassVar[str] = ""
    PAIRS: ClassVar[tuple[tuple[str, str, str], ...]] = ()

    @model_validator(mode="before")
    @classmethod
    def _pairs(cls, data: Any) -> Any:
        return _pairs(data, cls.NAME, cls.PAIRS)


def _pairs(data: Any, group: str, pairs: tuple[tuple[str, str, str], ...]) -> Any:
    if isinstance(data, dict):
        raw = {str(k).lower(): v for k, v in data.items()}
        for one, other, why in pairs:
            if raw.get(one) and not raw.get(other):
                one, other = (variable(f"{group}.{name}" if group else name) for name in (one, other))
                raise ConfigError(f"{one} is set but {other} is not: {why}")
    return data


class SlackSettings(Group):
    """Slack: a bot token and a channel (messages and chart images), or an incoming webhook (messages only); and a row
    of label buttons under each regression (docs/labels.md), whose requests go to the receiver."""

    token: Annotated[SecretStr | None, check(_slack_token)] = None
    channel: str | None = None
    webhook_url: Annotated[SecretStr | None, check(_https)] = None
    label_buttons: bool = False
    NAME = "slack"
    PAIRS = (("token", "channel", "name the channel to post in"), ("channel", "token", "a channel needs a bot token"))


class CodeHostSettings(Group):
    """A code host (commit statuses, review comments): its token, and the API the token is sent to."""

    token: Secret = None
    api_url: ApiUrl = DEFAULT_API_URLS["github"]


class GitLabSettings(CodeHostSettings):
    """GitLab's token and API (default gitlab.com's)."""

    api_url: ApiUrl = DEFAULT_API_URLS["gitlab"]


class PagerDutySettings(Group):
    """PagerDuty's Events API v2: a service integration's routing key, and the API's address (the EU service region,
    a proxy)."""

    routing_key: Annotated[SecretStr | None, check(_routing_key)] = None
    url: ApiUrl = DEFAULT_PAGERDUTY_URL


class TeamsSettings(Group):
    """Microsoft Teams: a Workflows webhook's URL (its sig= is a secret)."""

    webhook_url: Annotated[SecretStr | None, check(_https)] = None


class GrafanaSettings(Group):
    """Grafana: its URL, a service account token, and optionally the dashboard (and panel) annotations belong to."""

    url: Annotated[str | None, check(_http_url)] = None
    token: Secret = None
    dashboard_uid: Annotated[str | None, check(_dashboard_uid)] = None
    panel_id: Count | None = None
    NAME = "grafana"
    PAIRS = (
        ("url", "token", "it needs a service account token to send"),
        ("token", "url", "it needs the Grafana to send it to"),
        ("panel_id", "dashboard_uid", "it needs its dashboard's UID"),
    )


class ReceiverSettings(Group):
    """`radar webhook serve`: the sources it accepts (unset: each one whose secret is set, and generic when a token
    may record deploys), each source's secret (the HMAC key or token its sender is configured with), the CI tokens
    with their scopes (JSON, see receiver_tokens), the Slack app's signing secret (label buttons), and the largest
    body it reads."""

    sources: Annotated[tuple[str, ...] | None, NoDecode, check(_receiver_sources)] = None
    github_secret: SharedSecret = None
    gitlab_secret: SharedSecret = None
    argocd_secret: SharedSecret = None
    flux_secret: SharedSecret = None
    rollouts_secret: SharedSecret = None
    tokens: Annotated[SecretStr | None, check(_keeping(receiver_tokens))] = None
    slack_signing_secret: SharedSecret = None
    max_body_bytes: Annotated[int, check(_body_bytes)] = 256 * 1024

    def secret(self, source: str) -> SecretStr | None:
        """A source's secret (github, gitlab, argocd, flux, rollouts), or None."""
        found: SecretStr | None = getattr(self, f"{source.replace('-', '_')}_secret", None)
        return found

    def token_scopes(self) -> list[tuple[str, frozenset[str]]]:
        """The CI tokens with their scopes (none when RADAR_RECEIVER_TOKENS is unset)."""
        return receiver_tokens(self.tokens.get_secret_value()) if self.tokens else []


GROUPS = ("slack", "github", "gitlab", "pagerduty", "teams", "grafana", "receiver")


class RadarSettings(BaseSettings):
    """radar's settings: each top-level field is the variable RADAR_<FIELD NAME IN CAPITALS>, each group's field
    RADAR_<GROUP>_<FIELD>; unset (or empty) variables keep the defaults. Fields are checked in this order, so an
    error names the first bad variable."""

    model_config = SettingsConfigDict(
        env_prefix=PREFIX,
        env_prefix_target="all",  # the prefix goes before the aliases: WAREHOUSE_URL → RADAR_WAREHOUSE_URL
        alias_generator=str.upper,
        case_sensitive=True,
        env_nested_delimiter="_",  # RADAR_SLACK_WEBHOOK_URL: slack.webhook_url (split once, after the group)
        env_nested_max_split=1,
        env_ignore_empty=True,
        extra="ignore",
        frozen=True,
        hide_input_in_errors=True,
        validate_default=False,  # the defaults are right; the checks are for what the environment says
    )

    # The periodic partitions: the first hour they offer (backfills reach back to it), as 2026-11-01-00:00 UTC; and
    # the minutes past the hour when the schedule runs the hour just ended.
    periodic_start: Annotated[str, check(_hour_start)] = DEFAULT_PERIODIC_START
    periodic_minute: Annotated[int, check(_minute)] = 5
    # The warehouse (a SQLAlchemy URL, given the psycopg 3 driver) and the watched targets (name=postgresql://...).
    warehouse_url: Annotated[SecretStr | None, _named(_warehouse)] = None
    targets: Annotated[SecretStr | None, _named(_targets)] = None
    retention_days: Count = DEFAULT_RETENTION_DAYS
    # The analysis times (the Dagster resources' defaults when unset) and the periodic check's period P.
    window_seconds: Seconds = None
    scrape_interval_seconds: Seconds = None
    tolerance_floor_seconds: Seconds = None
    period_seconds: Seconds = None
    plan_top_n: Count = 200
    reanalysis_days: Count = 7
    dagster_run_retention_days: Count = 7
    snapshot_shards: Count = 1
    # every destination's: alerts of an analysis whose window closed longer ago than this are withheld, not sent
    alert_max_age_hours: Annotated[float, check(hours)] = DEFAULT_ALERT_MAX_AGE_HOURS
    collector_role: Annotated[str | None, check(_role)] = None  # whose statements are left out
    # where auto_explain's plans can be read, per target (target=/path pairs: a jsonlog file or its directory)
    auto_explain_logs: Annotated[dict[str, Path], NoDecode, check(parse_auto_explain_logs)] = {}
    slack: SlackSettings = SlackSettings()
    github: CodeHostSettings = CodeHostSettings()
    gitlab: GitLabSettings = GitLabSettings()
    # channels: which outcome goes to which channel beyond Slack (unset: every configured channel gets what it can
    # take)
    channel_routes: Annotated[dict[str, tuple[str, ...]] | None, NoDecode, check(parse_channel_routes)] = None
    pagerduty: PagerDutySettings = PagerDutySettings()
    dagster_url: Annotated[str | None, check(_link)] = None  # the Dagster UI's address, for links in alerts
    chart_dir: Annotated[Path | None, check(_folder)] = None  # unset: a new temporary folder per analysis
    dagster_pg_url: Annotated[SecretStr | None, _named(_dagster_storage)] = None  # Dagster's own storage
    # Crons, checked where their schedules are built (unset: the schedule's default).
    snapshot_cron: str | None = None
    plan_cron: str | None = None
    deploy_target: str | None = None  # `radar deploy`'s target when --target is not given
    home: Path | None = None  # where the embedded default lives (unset: ./.radar)
    teams: TeamsSettings = TeamsSettings()
    grafana: GrafanaSettings = GrafanaSettings()
    # Generic webhooks: a JSON object of name → {"url", optional "template" or "template_file", "headers"} (a secret:
    # URLs and headers may hold one), posting only to the hosts of the allowlist (comma-separated; *.example.com
    # allowed).
    webhook_allowed_hosts: Annotated[list[str] | None, NoDecode, check(_hosts)] = None
    # H3, plans for every active statement (issue 28, item 5): per plan capture and target, beyond the plan_top_n
    # busiest, how many statements are planned in turn (those first seen since the last capture, then the least
    # recently planned of those with calls within a day).
    plan_rotation_n: Count = 200
    # FB, catalog facts (issue 28): how often a scrape reads them, in seconds (CATALOG_INTERVAL)
    catalog_interval: Annotated[float, check(seconds)] = CATALOG_INTERVAL.total_seconds()
    webhooks: Annotated[SecretStr | None, check(_keeping(parse_webhooks))] = None
    receiver: ReceiverSettings = ReceiverSettings()

    @model_validator(mode="before")
    @classmethod
    def _webhook_hosts(cls, data: Any) -> Any:
        return _pairs(data, "", (("webhooks", "webhook_allowed_hosts", "it needs the hosts webhooks may post to"),))

    def target_list(self) -> list[Target]:
        """The watched targets RADAR_TARGETS names (none when it is unset)."""
        return parse_targets(self.targets.get_secret_value(), TARGETS_VAR) if self.targets else []

    def code_host(self, host: str) -> CodeHostSettings:
        """A code host's settings (github, gitlab)."""
        found: CodeHostSettings = getattr(self, host)
        return found


def _model(path: str) -> tuple[type[BaseModel], str]:
    # the model holding a field path's last part ("slack.token": SlackSettings, "token"); KeyError when none
    model: type[BaseModel] = RadarSettings
    *groups, last = path.split(".")
    for group in groups:
        if group not in GROUPS:
            raise KeyError(path)
        model = model.model_fields[group].annotation  # type: ignore[assignment]
    if last not in model.model_fields:
        raise KeyError(path)
    return model, last


def variable(path: str) -> str:
    """The environment variable of a setting: a top-level field ("window_seconds"), a group's field ("slack.token")
    or a group ("slack": the prefix of its variables, RADAR_SLACK_*). KeyError when there is no such setting."""
    _model(path)
    return PREFIX + path.replace(".", "_").upper()


def field_of(name: str) -> str:
    """The top-level RadarSettings field a RADAR_* variable sets (KeyError when it is none)."""
    field = name.removeprefix(PREFIX).lower()
    if not name.startswith(PREFIX) or field in GROUPS or field not in RadarSettings.model_fields:
        raise KeyError(name)
    return field


def setting_paths() -> list[str]:
    """Every setting's path, groups' fields as group.field, in the tree's order."""
    paths = []
    for name, info in RadarSettings.model_fields.items():
        if name in GROUPS:
            paths += [f"{name}.{field}" for field in info.annotation.model_fields]  # type: ignore[union-attr]
        else:
            paths.append(name)
    return paths


class _Environ(EnvSettingsSource):
    """pydantic-settings' environment source over a given mapping (a command's environment, a test's)."""

    def __init__(self, settings_cls: type[BaseSettings], environ: Mapping[str, str]) -> None:
        self._environ = environ
        super().__init__(settings_cls)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        return {k: v for k, v in self._environ.items() if v != ""}


def settings(*fields: str, environ: Mapping[str, str] | None = None) -> RadarSettings:
    """The settings of `environ` (default: this process's environment, read again whenever a RADAR_* variable
    changed). Without `fields`, every variable is checked; with them (top-level fields and groups), only theirs are
    read (the rest keep their defaults). Raises ConfigError naming the first bad variable, never showing a secret."""
    source = os.environ if environ is None else environ
    wanted = tuple(variable(f) + ("_" if f in GROUPS else "") for f in fields)

    def read(name: str) -> bool:
        return not fields or any(name == w or w.endswith("_") and name.startswith(w) for w in wanted)

    return _load(tuple(sorted((k, v) for k, v in source.items() if k.startswith(PREFIX) and read(k))))


@lru_cache(maxsize=32)
def _load(items: tuple[tuple[str, str], ...]) -> RadarSettings:
    try:
        return RadarSettings(_build_sources=((_Environ(RadarSettings, dict(items)),), {}))  # type: ignore[call-arg]
    except ValidationError as exc:
        raise _config_error(exc) from None


def _config_error(exc: ValidationError) -> ConfigError:
    """The first problem as a ConfigError: a check's own message after the variable's name, else pydantic's (never
    the value)."""
    error = exc.errors(include_input=False)[0]
    where = PREFIX + "_".join(map(str, error["loc"])) if error["loc"] else "a RADAR_* setting"
    cause = error.get("ctx", {}).get("error")
    if isinstance(cause, ConfigError):
        return ConfigError(str(cause))
    if isinstance(cause, Invalid):
        return named(where, cause)
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
SNAPSHOT_CRON_VAR = variable("snapshot_cron")
PLAN_CRON_VAR = variable("plan_cron")
ALERT_MAX_AGE_VAR = variable("alert_max_age_hours")
DAGSTER_PG_URL_VAR = variable("dagster_pg_url")
DEPLOY_TARGET_VAR = variable("deploy_target")
HOME_VAR = variable("home")
CHANNEL_ROUTES_VAR = variable("channel_routes")
WINDOW_VAR = variable("window_seconds")
PLAN_TOP_N_VAR = variable("plan_top_n")
REANALYSIS_DAYS_VAR = variable("reanalysis_days")
RUN_RETENTION_VAR = variable("dagster_run_retention_days")
SHARDS_VAR = variable("snapshot_shards")
# Whole-number settings and their defaults.
COUNTS: dict[str, int] = {
    v: RadarSettings.model_fields[field_of(v)].default
    for v in (PLAN_TOP_N_VAR, REANALYSIS_DAYS_VAR, RUN_RETENTION_VAR, SHARDS_VAR)
}


def secret_fields() -> list[str]:
    """The settings that hold secrets (SecretStr), by path: never printed, never stored in Dagster's config."""
    return [path for path in setting_paths() if _is_secret(*_model(path))]


def _is_secret(model: type[BaseModel], field: str) -> bool:
    annotation = model.model_fields[field].annotation
    return SecretStr in getattr(annotation, "__args__", (annotation,))
