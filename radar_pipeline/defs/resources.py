"""Dagster resources: the warehouse, the watched targets, the analysis times and the channels, configured from the
settings (config.settings); secrets reach Dagster as EnvVar, resolved at run time and never stored in its config."""

import dataclasses
from datetime import timedelta
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, get_type_hints

import dagster as dg
import pydantic
from pydantic import SecretStr

from radar_pipeline.alerts.channels import (
    CAN_TAKE,
    DEPLOY,
    SLACK,
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
    CATALOG_INTERVAL,
    CHANNEL_ROUTES_VAR,
    DEFAULT_ALERT_MAX_AGE_HOURS,
    DEFAULT_API_URLS,
    DEFAULT_PAGERDUTY_URL,
    DEFAULT_SCRAPE_INTERVAL_SECONDS,
    RadarSettings,
    field_of,
    hours,
    parse_auto_explain_logs,
    parse_channel_routes,
    parsed,
    settings,
    variable,
)
from radar_pipeline.engine.settings import EngineSettings

if TYPE_CHECKING:  # SQLAlchemy and slack_sdk load when a run or a tick uses the resource
    import sqlalchemy as sa

    from radar_pipeline.alerts.code_hosts import HostClient
    from radar_pipeline.alerts.slack import SlackSender
    from radar_pipeline.warehouse.status import Times


class WarehouseResource(dg.ConfigurableResource):
    """The warehouse PostgreSQL (schema radar), from RADAR_WAREHOUSE_URL."""

    url: str

    def engine(self) -> "sa.Engine":
        """A pooled engine, shared by every use in this process."""
        return _engine_for(self.url)


class TargetsResource(dg.ConfigurableResource):
    """The watched servers (RADAR_TARGETS: whitespace-separated name=postgresql://... pairs) and how they are read:
    the collector's own role, left out of what is collected (RADAR_COLLECTOR_ROLE); each target's auto_explain
    jsonlog (RADAR_AUTO_EXPLAIN_LOGS); how often a scrape reads the catalog's facts (RADAR_CATALOG_INTERVAL)."""

    spec: str
    collector_role: str = ""
    auto_explain_logs_spec: str = ""
    catalog_interval_seconds: float = CATALOG_INTERVAL.total_seconds()

    def targets(self) -> list[Target]:
        """The parsed targets; a malformed value raises ConfigError naming RADAR_TARGETS."""
        return parse_targets(self.spec, TARGETS_VAR)

    def auto_explain_logs(self) -> dict[str, Path]:
        """Each target's auto_explain jsonlog, checked against the targets: a name that is not one raises ConfigError
        naming the variable."""
        name = variable("auto_explain_logs")
        logs: dict[str, Path] = parsed(parse_auto_explain_logs, self.auto_explain_logs_spec, name)
        unknown = sorted(set(logs) - {t.name for t in self.targets()})
        if unknown:
            raise ConfigError(f"{name}: {', '.join(map(repr, unknown))} is not a target of RADAR_TARGETS")
        return logs

    @property
    def catalog_interval(self) -> timedelta:
        """The catalog's facts are read at most this often (and after each deploy)."""
        return timedelta(seconds=self.catalog_interval_seconds)


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
    chart_dir: str = ""  # where charts of an analysis are drawn, a folder per partition (unset: a temporary one)

    @property
    def chart_root(self) -> Path | None:
        """The folder of the analyses' chart folders (None: each a new temporary folder)."""
        return Path(self.chart_dir) if self.chart_dir else None

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


def default_resources(found: RadarSettings | None = None) -> dict[str, dg.ConfigurableResource]:
    """The warehouse's, the targets' and the analysis' resources as the settings configure them (`found`; default:
    the environment's): secrets come from the environment at run time; analysis times from RADAR_WINDOW_SECONDS,
    RADAR_SCRAPE_INTERVAL_SECONDS, RADAR_TOLERANCE_FLOOR_SECONDS and RADAR_PERIOD_SECONDS when set."""
    found = found or settings(*ANALYSIS_TIMES, "collector_role", "auto_explain_logs", "catalog_interval", "chart_dir")
    times = {field: getattr(found, field) for field in ANALYSIS_TIMES if getattr(found, field) is not None}
    times |= {"chart_dir": str(found.chart_dir)} if found.chart_dir else {}
    logs = " ".join(f"{name}={path}" for name, path in found.auto_explain_logs.items())
    targets = TargetsResource(
        spec=dg.EnvVar(TARGETS_VAR),
        collector_role=found.collector_role or "",
        auto_explain_logs_spec=logs,
        catalog_interval_seconds=found.catalog_interval,
    )
    return {
        "warehouse": WarehouseResource(url=dg.EnvVar(WAREHOUSE_URL_VAR)),
        "targets": targets,
        "analysis": AnalysisResource(**times),
        "reconciler": ReconcilerResource(),
    }


class Destination(dg.ConfigurableResource):
    """What every destination's resource shares: its client-side time bound, the Dagster UI's address its links to runs
    use, and the age past which an analysis's deliveries are withheld instead of sent (RADAR_ALERT_MAX_AGE_HOURS): a
    backfill or a reanalysis of old deploys must not flood a channel."""

    timeout_seconds: float = 10.0
    alert_max_age_hours: float = DEFAULT_ALERT_MAX_AGE_HOURS
    dagster_url: str = ""  # RADAR_DAGSTER_URL: the Dagster UI's address, for links to runs (unset: localhost:3000)

    @property
    def alert_max_age(self) -> timedelta:
        """Deliveries of an analysis whose window closed longer ago than this are withheld."""
        return timedelta(hours=parsed(hours, str(self.alert_max_age_hours), ALERT_MAX_AGE_VAR))


class SlackResource(Destination):
    """Slack (settings.slack): a bot token and a channel (messages and chart images) or an incoming webhook (messages
    without images). Neither: alerts are recorded as skipped and the message is written to the run log."""

    token: str = ""
    channel: str = ""
    webhook_url: str = ""
    base_url: str = "https://slack.com/api/"
    label_buttons: bool = False  # RADAR_SLACK_LABEL_BUTTONS
    outcomes: list[str] = sorted(CAN_TAKE[SLACK])  # what RADAR_CHANNEL_ROUTES sends here (unnamed there: all it can)

    def takes(self, outcome: str) -> bool:
        """Whether the routes send Slack this outcome (regression, load_change)."""
        return outcome in self.outcomes

    def sender(self) -> "SlackSender":
        """A sender for the configured mode: bot token and channel, webhook, or none."""
        from radar_pipeline.alerts.slack import SlackSender  # slack_sdk: only runs that deliver pay for its import

        return SlackSender(
            token=self.token or None,
            channel=self.channel or None,
            webhook_url=self.webhook_url or None,
            base_url=self.base_url,
            timeout=int(self.timeout_seconds),
            buttons=self.label_buttons,
        )


class CodeHostResource(Destination):
    """GitHub and GitLab (settings.github, settings.gitlab), for commit statuses and review comments: a token each (a
    host without one gets nothing) and its API's URL: the token is sent there only."""

    github_token: str = ""
    github_api_url: str = DEFAULT_API_URLS["github"]
    gitlab_token: str = ""
    gitlab_api_url: str = DEFAULT_API_URLS["gitlab"]

    def clients(self) -> dict[str, "HostClient"]:
        """A client per host with a token, by host (github, gitlab)."""
        from radar_pipeline.alerts.code_hosts import HostClient  # httpx: only runs that deliver pay for its import

        given = {"github": (self.github_token, self.github_api_url), "gitlab": (self.gitlab_token, self.gitlab_api_url)}
        return {
            kind: HostClient(kind, url, token, self.timeout_seconds) for kind, (token, url) in given.items() if token
        }

    def deliver(self, log: Any, engine: "sa.Engine", deploy_id: str, times: "Times", reanalysis: bool = False) -> dict:
        """Send what is due of a deploy's code-host deliveries (steps/code_host_delivery.py `deliver`) through a
        client per configured host, closed after; returns what the run's metadata shows."""
        from datetime import UTC, datetime

        from radar_pipeline.steps.code_host_delivery import deliver  # httpx: only the runs that deliver load it

        clients = self.clients()
        try:
            now = datetime.now(UTC)
            link = self.dagster_url or None
            return deliver(log, engine, clients, deploy_id, self.alert_max_age, now, times, reanalysis, link)
        finally:
            for client in clients.values():
                client.close()


class ChannelsResource(Destination):
    """The channels beyond Slack (alerts/channels.py), routed by RADAR_CHANNEL_ROUTES (unset: each configured channel
    takes every outcome it can): PagerDuty (settings.pagerduty), Microsoft Teams (settings.teams), Grafana
    (settings.grafana: optionally its dashboard and panel) and generic webhooks (RADAR_WEBHOOKS,
    RADAR_WEBHOOK_ALLOWED_HOSTS). None configured: nothing is sent beyond Slack."""

    routes: str = ""
    pagerduty_routing_key: str = ""
    pagerduty_url: str = DEFAULT_PAGERDUTY_URL
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
            hosts = [h for h in self.webhook_allowed_hosts.split(",") if h]
            made |= webhook_factories(self.webhooks, hosts, self.timeout_seconds)
        return made

    def _routes(self) -> dict[str, tuple[str, ...]] | None:
        # Slack's routes are SlackResource's (destinations); here, the channels beyond it
        routes = parsed(parse_channel_routes, self.routes, CHANNEL_ROUTES_VAR) if self.routes else None
        return {k: tuple(n for n in v if n != SLACK) for k, v in routes.items()} if routes else None

    def routed(self) -> list[Routed]:
        """The configured channels that take something, made, each with what it takes."""
        return build(self._routes(), self.factories())

    def marking(self) -> list[str]:
        """The names of the configured channels routed deploys (none made: cheap enough for a sensor's tick)."""
        taken = routing(self._routes(), list(self.factories()))
        return [name for name, outcomes in taken.items() if DEPLOY in outcomes]


def configured(group: Any, path: str, prefix: str = "") -> dict[str, Any]:
    """A resource's fields from a branch of the settings tree (`path`: "slack", "grafana"; the resource's fields are
    named `prefix` + the branch's): each value set, a secret as Dagster's EnvVar of its variable (resolved at run
    time, never in Dagster's stored config)."""
    fields: dict[str, Any] = {}
    for name in type(group).model_fields:
        value = getattr(group, name)
        if value is None:
            continue
        if isinstance(value, SecretStr):
            value = dg.EnvVar(variable(f"{path}.{name}"))
        fields[prefix + name] = value
    return fields


def destinations(found: RadarSettings) -> dict[str, dg.ConfigurableResource]:
    """The destinations' resources as the settings configure them (`found`: every setting, checked): a route to a
    channel that is not configured, or that cannot take the outcome, stops the load naming RADAR_CHANNEL_ROUTES."""
    shared: dict[str, Any] = {"alert_max_age_hours": found.alert_max_age_hours}
    shared |= {"dagster_url": found.dagster_url} if found.dagster_url else {}
    channels: dict[str, Any] = {**shared, **configured(found.pagerduty, "pagerduty", "pagerduty_")}
    channels |= configured(found.teams, "teams", "teams_")
    if found.grafana.url and found.grafana.token:
        channels |= configured(found.grafana, "grafana", "grafana_")
    if found.webhooks:
        hosts = found.webhook_allowed_hosts or []
        channels |= {"webhooks": dg.EnvVar(variable("webhooks")), "webhook_allowed_hosts": ",".join(hosts)}
    names = ["pagerduty"] if found.pagerduty.routing_key else []
    names += ["teams"] if found.teams.webhook_url else []
    names += ["grafana"] if found.grafana.url and found.grafana.token else []
    names += webhook_names(found.webhooks.get_secret_value(), hosts) if found.webhooks else []
    names += [SLACK] if found.slack.token or found.slack.webhook_url else []
    taken = routing(found.channel_routes, names)
    if found.channel_routes:
        channels["routes"] = " ".join(f"{k}={','.join(v)}" for k, v in found.channel_routes.items())
    slack = configured(found.slack, "slack") | ({"outcomes": sorted(taken[SLACK])} if SLACK in taken else {})
    code_hosts = {
        k: v for host in DEFAULT_API_URLS for k, v in configured(found.code_host(host), host, f"{host}_").items()
    }
    return {
        "slack": SlackResource(**shared, **slack),
        "code_hosts": CodeHostResource(**shared, **code_hosts),
        "channels": ChannelsResource(**channels),
    }


@dg.definitions
def resources() -> dg.Definitions:
    """The resources every asset, check, sensor and schedule here uses, configured when the location loads."""
    return dg.Definitions(resources={**default_resources(found := settings()), **destinations(found)})
