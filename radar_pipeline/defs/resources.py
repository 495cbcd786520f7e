"""Dagster resources: the warehouse, the watched targets, the analysis times and the channels, configured from the
settings (config.settings); secrets reach Dagster as EnvVar, resolved at run time and never stored in its config."""

import dataclasses
from datetime import timedelta
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, get_type_hints

import dagster as dg
import pydantic

from radar_pipeline.alerts.channels import (
    DEPLOY,
    Routed,
    build,
    grafana_factory,
    pagerduty_factory,
    routing,
    teams_factory,
    webhook_factories,
    webhook_names,
)
from radar_pipeline.config import TARGETS_VAR, WAREHOUSE_URL_VAR, ConfigError, Target, parse_targets
from radar_pipeline.config.settings import (
    ALERT_MAX_AGE_VAR,
    CODE_HOST_TOKEN_VARS,
    DEFAULT_ALERT_MAX_AGE_HOURS,
    DEFAULT_API_URLS,
    DEFAULT_PAGERDUTY_URL,
    DEFAULT_SCRAPE_INTERVAL_SECONDS,
    PAGERDUTY_KEY_VAR,
    SLACK_TOKEN_VAR,
    SLACK_WEBHOOK_VAR,
    alert_max_age_hours,
    auto_explain_logs,
    channel_routes,
    field_of,
    settings,
    variable,
)
from radar_pipeline.engine.settings import EngineSettings

if TYPE_CHECKING:  # SQLAlchemy and slack_sdk load when a run or a tick uses the resource
    import sqlalchemy as sa

    from radar_pipeline.alerts.code_hosts import HostClient
    from radar_pipeline.alerts.slack import SlackSender


class WarehouseResource(dg.ConfigurableResource):
    """The warehouse PostgreSQL (schema radar), from RADAR_WAREHOUSE_URL."""

    url: str

    def engine(self) -> "sa.Engine":
        """A pooled engine, shared by every use in this process."""
        return _engine_for(self.url)


class TargetsResource(dg.ConfigurableResource):
    """The watched servers, from RADAR_TARGETS (whitespace-separated name=postgresql://... pairs)."""

    spec: str
    collector_role: str = ""

    def targets(self) -> list[Target]:
        """The parsed targets; a malformed value raises ConfigError naming RADAR_TARGETS."""
        return parse_targets(self.spec, TARGETS_VAR)

    def auto_explain_logs(self) -> dict[str, Path]:
        """Each target's auto_explain jsonlog (RADAR_AUTO_EXPLAIN_LOGS), checked against the targets: a name that is
        not one raises ConfigError naming the variable."""
        name = variable("auto_explain_logs")
        logs = auto_explain_logs(settings("auto_explain_logs").auto_explain_logs, name)
        names = {t.name for t in self.targets()}
        unknown = sorted(set(logs) - names)
        if unknown:
            raise ConfigError(f"{name}: {', '.join(map(repr, unknown))} is not a target of RADAR_TARGETS")
        return logs

    def exclude_role(self) -> str | None:
        """The collector's dedicated role, whose statements are left out (RADAR_COLLECTOR_ROLE), if any."""
        return self.collector_role or settings("collector_role").collector_role or None


_ENGINE_DEFAULTS = EngineSettings()
# The resource's fields that set an engine setting (in seconds): their defaults are EngineSettings' own.
ENGINE_TIMES = {"window_seconds": "window", "tolerance_floor_seconds": "tolerance_floor"}
ANALYSIS_TIMES = ("window_seconds", "scrape_interval_seconds", "tolerance_floor_seconds", "period_seconds")


class AnalysisResource(dg.ConfigurableResource):
    """How deploys are analysed by default: the window each side, the scrape interval, the tolerance floor; and the
    period P of the periodic check.

    The demo and tests compress time through these same fields (seconds-scale windows and scrapes).
    """

    window_seconds: float = _ENGINE_DEFAULTS.window.total_seconds()
    scrape_interval_seconds: float = DEFAULT_SCRAPE_INTERVAL_SECONDS
    tolerance_floor_seconds: float = _ENGINE_DEFAULTS.tolerance_floor.total_seconds()
    period_seconds: float = 3600.0

    def settings(self, **overrides: object) -> EngineSettings:
        """Engine settings: EngineSettings' defaults, this resource's times, then per-run overrides."""
        base = {setting: getattr(self, field) for field, setting in ENGINE_TIMES.items()}
        return EngineSettings.from_dict({**base, **{k: v for k, v in overrides.items() if v is not None}})

    def periodic_settings(self, **overrides: object) -> EngineSettings:
        """Engine settings of the periodic check: as `settings`, with the window P (`window` overrides it) and a
        tolerance spanning the whole window, so a change anywhere in [t − 2P, t] counts; the false-alert budget is
        spread over a day's checks (B · P / 1 day each)."""
        budget = _ENGINE_DEFAULTS.false_alert_budget * self.period_seconds / 86400
        chosen = {
            "window": self.period_seconds,
            "false_alert_budget": budget,
            **{k: v for k, v in overrides.items() if v is not None},
        }
        window = float(chosen["window"])  # type: ignore[arg-type]
        return self.settings(**{**chosen, "tolerance_floor": window, "tolerance_fraction": 1.0})

    @property
    def settle(self) -> timedelta:
        """One scrape interval: the wait after a window ends before its last scrape is surely stored."""
        return timedelta(seconds=self.scrape_interval_seconds)


def engine_overrides_config(
    name: str, doc: str, module: str, engine_settings: type[EngineSettings] = EngineSettings
) -> type[dg.Config]:
    """A Dagster config class whose fields are every EngineSettings field as an optional per-run override (durations
    in seconds; unset keeps the default): made from EngineSettings, so a new engine setting is a run-config field by
    itself, and its values are checked by EngineSettings when the run builds its settings."""
    hints = get_type_hints(engine_settings)
    fields: dict[str, Any] = {
        f.name: (float | None if hints[f.name] is timedelta else hints[f.name] | None, None)
        for f in dataclasses.fields(engine_settings)
    }
    model: type[dg.Config] = pydantic.create_model(name, __base__=dg.Config, __doc__=doc, __module__=module, **fields)
    return model


class ReconcilerResource(dg.ConfigurableResource):
    """How radar_reconciler retries what waits: a deploy without an analysis (or an outbox attempt) gets at most
    `max_analysis_runs` runs, the next one `backoff_seconds` × 2^(n−1) after the n-th ended; a deploy is left to
    deploy_event_sensor for `grace_seconds` after it became ready; deploys ready more than `max_age_days` ago are left
    alone."""

    backoff_seconds: float = 300.0
    max_analysis_runs: int = 4
    grace_seconds: float = 600.0
    max_age_days: float = 7.0

    @property
    def backoff(self) -> timedelta:
        """The wait after the first failed run (doubling after each next one)."""
        return timedelta(seconds=self.backoff_seconds)

    @property
    def grace(self) -> timedelta:
        """How long after it became ready a deploy is the sensor's alone."""
        return timedelta(seconds=self.grace_seconds)

    @property
    def max_age(self) -> timedelta:
        """How far back deploys without an analysis are retried."""
        return timedelta(days=self.max_age_days)


def env_cron_schedule(name: str, job: Any, variable: str, default: str, description: str) -> dg.ScheduleDefinition:
    """A schedule that starts switched on, its cron from `variable` (else `default`), refused with the variable
    named when the cron does not parse."""
    field = field_of(variable)
    cron = getattr(settings(field), field) or default
    try:
        return dg.ScheduleDefinition(
            name=name,
            job=job,
            cron_schedule=cron,
            default_status=dg.DefaultScheduleStatus.RUNNING,
            description=description,
        )
    except Exception as exc:
        raise ConfigError(f"{variable} is not a valid cron schedule: {cron!r} ({exc})") from None


@lru_cache(maxsize=8)
def _engine_for(url: str) -> "sa.Engine":
    from radar_pipeline.warehouse.database import make_engine

    return make_engine(url)


def default_resources() -> dict[str, dg.ConfigurableResource]:
    """The resources as a deployment configures them: secrets come from the environment at run time; analysis
    times from RADAR_WINDOW_SECONDS, RADAR_SCRAPE_INTERVAL_SECONDS, RADAR_TOLERANCE_FLOOR_SECONDS and
    RADAR_PERIOD_SECONDS when set."""
    configured = settings(*ANALYSIS_TIMES)
    times = {field: getattr(configured, field) for field in ANALYSIS_TIMES if getattr(configured, field) is not None}
    return {
        "warehouse": WarehouseResource(url=dg.EnvVar(WAREHOUSE_URL_VAR)),
        "targets": TargetsResource(spec=dg.EnvVar(TARGETS_VAR)),
        "analysis": AnalysisResource(**times),
        "reconciler": ReconcilerResource(),
    }


class SlackResource(dg.ConfigurableResource):
    """Slack, from RADAR_SLACK_TOKEN and RADAR_SLACK_CHANNEL (a bot: messages and chart images) or
    RADAR_SLACK_WEBHOOK_URL (an incoming webhook: messages without images). Neither: alerts are recorded as skipped
    and the message is written to the run log."""

    token: str = ""
    channel: str = ""
    webhook_url: str = ""
    base_url: str = "https://slack.com/api/"
    timeout_seconds: int = 10
    alert_max_age_hours: float = DEFAULT_ALERT_MAX_AGE_HOURS
    label_buttons: bool = False  # RADAR_SLACK_LABEL_BUTTONS

    def sender(self) -> "SlackSender":
        """A sender for the configured mode: bot token and channel, webhook, or none."""
        from radar_pipeline.alerts.slack import SlackSender  # slack_sdk: only runs that deliver pay for its import

        return SlackSender(
            token=self.token or None,
            channel=self.channel or None,
            webhook_url=self.webhook_url or None,
            base_url=self.base_url,
            timeout=self.timeout_seconds,
            buttons=self.label_buttons,
        )

    @property
    def alert_max_age(self) -> timedelta:
        """Alerts of an analysis whose window closed longer ago than this are withheld (RADAR_ALERT_MAX_AGE_HOURS)."""
        return timedelta(hours=alert_max_age_hours(str(self.alert_max_age_hours), ALERT_MAX_AGE_VAR))


class CodeHostResource(dg.ConfigurableResource):
    """GitHub and GitLab, for commit statuses and review comments: a token each (RADAR_GITHUB_TOKEN,
    RADAR_GITLAB_TOKEN; a host without one gets nothing) and its API's URL (RADAR_GITHUB_API_URL, default
    https://api.github.com; RADAR_GITLAB_API_URL, default https://gitlab.com/api/v4): the token is sent there only."""

    github_token: str = ""
    github_api_url: str = DEFAULT_API_URLS["github"]
    gitlab_token: str = ""
    gitlab_api_url: str = DEFAULT_API_URLS["gitlab"]
    timeout_seconds: float = 10.0
    alert_max_age_hours: float = DEFAULT_ALERT_MAX_AGE_HOURS

    def clients(self) -> dict[str, "HostClient"]:
        """A client per host with a token, by host (github, gitlab)."""
        from radar_pipeline.alerts.code_hosts import HostClient  # httpx: only runs that deliver pay for its import

        given = {"github": (self.github_token, self.github_api_url), "gitlab": (self.gitlab_token, self.gitlab_api_url)}
        return {
            kind: HostClient(kind, url, token, self.timeout_seconds) for kind, (token, url) in given.items() if token
        }

    @property
    def alert_max_age(self) -> timedelta:
        """Deliveries of an analysis whose window closed longer ago than this are withheld (RADAR_ALERT_MAX_AGE_HOURS,
        as Slack's alerts)."""
        return timedelta(hours=alert_max_age_hours(str(self.alert_max_age_hours), ALERT_MAX_AGE_VAR))


def code_hosts_from_environment() -> CodeHostResource:
    """The code-host resource as configured: tokens resolved at run time through EnvVar, only when they are set."""
    hosts = tuple(DEFAULT_API_URLS)
    configured = settings(*(f"{kind}_{what}" for kind in hosts for what in ("token", "api_url")), "alert_max_age_hours")
    fields: dict[str, Any] = {f"{kind}_api_url": configured.api_url(kind) for kind in hosts}
    for kind in hosts:
        if configured.token(kind):
            fields[f"{kind}_token"] = dg.EnvVar(CODE_HOST_TOKEN_VARS[kind])
    fields["alert_max_age_hours"] = configured.alert_max_age_hours
    return CodeHostResource(**fields)


def slack_from_environment() -> SlackResource:
    """The Slack resource as configured: secrets are resolved at run time through EnvVar, only when they are set."""
    configured = settings(
        "slack_token", "slack_channel", "slack_webhook_url", "alert_max_age_hours", "slack_label_buttons"
    )
    fields: dict[str, Any] = {
        "alert_max_age_hours": configured.alert_max_age_hours,
        "label_buttons": configured.slack_label_buttons,
    }
    if configured.slack_token:
        fields["token"] = dg.EnvVar(SLACK_TOKEN_VAR)
    if configured.slack_webhook_url:
        fields["webhook_url"] = dg.EnvVar(SLACK_WEBHOOK_VAR)
    if configured.slack_channel:
        fields["channel"] = configured.slack_channel
    return SlackResource(**fields)


class ChannelsResource(dg.ConfigurableResource):
    """The channels beyond Slack (alerts/channels.py), routed by RADAR_CHANNEL_ROUTES (unset: each configured channel
    takes every outcome it can): PagerDuty (RADAR_PAGERDUTY_ROUTING_KEY, RADAR_PAGERDUTY_URL), Microsoft Teams
    (RADAR_TEAMS_WEBHOOK_URL), Grafana (RADAR_GRAFANA_URL, RADAR_GRAFANA_TOKEN, optionally its dashboard and panel)
    and generic webhooks (RADAR_WEBHOOKS, RADAR_WEBHOOK_ALLOWED_HOSTS). None configured: nothing is sent beyond
    Slack. The secrets come as EnvVar: resolved at run time, never in Dagster's stored config."""

    routes: str = ""
    pagerduty_routing_key: str = ""
    pagerduty_url: str = DEFAULT_PAGERDUTY_URL
    timeout_seconds: float = 10.0
    alert_max_age_hours: float = DEFAULT_ALERT_MAX_AGE_HOURS
    teams_webhook_url: str = ""
    grafana_url: str = ""
    grafana_token: str = ""
    grafana_dashboard_uid: str = ""
    grafana_panel_id: int = 0
    webhooks: str = ""  # RADAR_WEBHOOKS's JSON
    webhook_allowed_hosts: str = ""  # comma-separated

    def factories(self) -> dict[str, Any]:
        """A factory per configured channel, by its name (the channel is made when a run needs it)."""
        made: dict[str, Any] = {}
        if self.pagerduty_routing_key:
            made["pagerduty"] = pagerduty_factory(self.pagerduty_routing_key, self.pagerduty_url, self.timeout_seconds)
        if self.teams_webhook_url:
            made["teams"] = teams_factory(self.teams_webhook_url, self.timeout_seconds)
        if self.grafana_url and self.grafana_token:
            made["grafana"] = grafana_factory(
                self.grafana_url,
                self.grafana_token,
                self.timeout_seconds,
                self.grafana_dashboard_uid or None,
                self.grafana_panel_id or None,
            )
        if self.webhooks:
            made |= webhook_factories(self.webhooks, self._allowed_hosts(), self.timeout_seconds)
        return made

    def _allowed_hosts(self) -> list[str]:
        return [h for h in self.webhook_allowed_hosts.split(",") if h]

    def routed(self) -> list[Routed]:
        """The configured channels that take something, made, each with what it takes."""
        return build(channel_routes(self.routes) if self.routes else None, self.factories())

    def marking(self) -> list[str]:
        """The names of the configured channels routed deploys (none made: cheap enough for a sensor's tick)."""
        taken = routing(channel_routes(self.routes) if self.routes else None, list(self.factories()))
        return [name for name, outcomes in taken.items() if DEPLOY in outcomes]

    @property
    def alert_max_age(self) -> timedelta:
        """Deliveries of an analysis whose window closed longer ago than this are withheld (as Slack's)."""
        return timedelta(hours=alert_max_age_hours(str(self.alert_max_age_hours), ALERT_MAX_AGE_VAR))


def channels_from_environment() -> ChannelsResource:
    """The channels as configured, checked now (the definitions' load): a route to a channel that is not configured,
    or that cannot take the outcome, stops the load naming RADAR_CHANNEL_ROUTES. Secrets resolve at run time through
    EnvVar."""
    configured = settings(
        "channel_routes",
        "pagerduty_routing_key",
        "pagerduty_url",
        "alert_max_age_hours",
        "teams_webhook_url",
        "grafana_url",
        "grafana_token",
        "grafana_dashboard_uid",
        "grafana_panel_id",
        "webhooks",
        "webhook_allowed_hosts",
    )
    hosts = configured.webhook_allowed_hosts or []
    names = ["pagerduty"] if configured.pagerduty_routing_key else []
    names += ["teams"] if configured.teams_webhook_url else []
    names += ["grafana"] if configured.grafana_url and configured.grafana_token else []
    names += webhook_names(configured.webhooks.get_secret_value(), hosts) if configured.webhooks else []
    routing(channel_routes(configured.channel_routes) if configured.channel_routes else None, names)
    fields: dict[str, Any] = {
        "pagerduty_url": configured.pagerduty_url,
        "alert_max_age_hours": configured.alert_max_age_hours,
        "webhook_allowed_hosts": ",".join(hosts),
    }
    if configured.teams_webhook_url:
        fields["teams_webhook_url"] = dg.EnvVar(variable("teams_webhook_url"))
    if configured.grafana_url and configured.grafana_token:
        fields["grafana_url"] = configured.grafana_url
        fields["grafana_token"] = dg.EnvVar(variable("grafana_token"))
        fields["grafana_dashboard_uid"] = configured.grafana_dashboard_uid or ""
        fields["grafana_panel_id"] = configured.grafana_panel_id or 0
    if configured.webhooks:
        fields["webhooks"] = dg.EnvVar(variable("webhooks"))
    if configured.channel_routes:
        fields["routes"] = configured.channel_routes
    if configured.pagerduty_routing_key:
        fields["pagerduty_routing_key"] = dg.EnvVar(PAGERDUTY_KEY_VAR)
    return ChannelsResource(**fields)


@dg.definitions
def resources() -> dg.Definitions:
    """The resources every asset, check, sensor and schedule here uses, configured when the location loads."""
    return dg.Definitions(
        resources={
            **default_resources(),
            "slack": slack_from_environment(),
            "code_hosts": code_hosts_from_environment(),
            "channels": channels_from_environment(),
        }
    )
