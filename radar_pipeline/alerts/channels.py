"""The channels as configured: a factory for each configured channel beyond Slack, and which outcomes (a detection,
a load change, a deploy) each channel, Slack too, takes (RADAR_CHANNEL_ROUTES; unset: every configured channel takes
every outcome it can; Slack, when the routes do not name it, too). Checked when the definitions load: an outcome routed
to a channel that is not configured, or that cannot take it, stops the load with one line naming the setting."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from radar_pipeline.config import ConfigError
from radar_pipeline.config.settings import CHANNEL_OUTCOMES, CHANNEL_ROUTES_VAR, variable

REGRESSION, LOAD_CHANGE, DEPLOY = CHANNEL_OUTCOMES
SLACK = "slack"  # routed like the others, made by its own resource (defs.resources.SlackResource)
# What each kind of channel can take: a deploy only goes to a channel that marks deploys (a DeployMarker).
CAN_TAKE = {
    "slack": frozenset({REGRESSION, LOAD_CHANGE}),
    "pagerduty": frozenset(CHANNEL_OUTCOMES),
    "teams": frozenset({REGRESSION, LOAD_CHANGE}),
    "grafana": frozenset(CHANNEL_OUTCOMES),
    "webhook": frozenset({REGRESSION, LOAD_CHANGE}),
}
# The setting that configures each kind, for the message when a route names one that is not configured.
CONFIGURED_BY = {
    "slack": f"{variable('slack.token')} and {variable('slack.channel')}, or {variable('slack.webhook_url')}",
    "pagerduty": variable("pagerduty.routing_key"),
    "teams": variable("teams.webhook_url"),
    "grafana": f"{variable('grafana.url')} and {variable('grafana.token')}",
    "webhook": f"{variable('webhooks')} (a webhook of that name)",
}


@dataclass(frozen=True)
class Routed:
    """A channel object (a Channel; a DeployMarker and a Resolver too where it is one) and the outcomes it takes."""

    channel: Any
    outcomes: frozenset[str]

    @property
    def name(self) -> str:
        """The channel's name, as its outbox rows carry it."""
        return str(self.channel.name)


def kind(name: str) -> str:
    """A channel's kind: its name, or `webhook` for webhook:<name>."""
    return name.split(":", 1)[0]


def routing(routes: Mapping[str, tuple[str, ...]] | None, configured: list[str]) -> dict[str, frozenset[str]]:
    """Channel name → the outcomes it takes, for the `configured` channels: as `routes` says (config.settings
    channel_routes), else every outcome each can take. Slack takes every outcome it can unless the routes name it
    (routes written before Slack could be routed keep it as it was). Raises ConfigError naming
    RADAR_CHANNEL_ROUTES."""
    if routes is None:
        return {name: CAN_TAKE[kind(name)] for name in configured}
    taken: dict[str, set[str]] = {name: set() for name in configured}
    if SLACK in configured and not any(SLACK in names for names in routes.values()):
        taken[SLACK] = set(CAN_TAKE[SLACK])
    for outcome, names in routes.items():
        for name in names:
            if name not in taken:
                raise ConfigError(
                    f"{CHANNEL_ROUTES_VAR} routes {outcome} to {name}, which is not configured "
                    f"(set {CONFIGURED_BY[kind(name)]})"
                )
            if outcome not in CAN_TAKE[kind(name)]:
                raise ConfigError(f"{CHANNEL_ROUTES_VAR} routes {outcome} to {name}, which cannot take it")
            taken[name].add(outcome)
    return {name: frozenset(outcomes) for name, outcomes in taken.items() if outcomes}


def build(routes: Mapping[str, tuple[str, ...]] | None, factories: Mapping[str, Callable[[], Any]]) -> list[Routed]:
    """The routed channels, made by their factories (channel name → a function making it; one per configured
    channel), in the factories' order; a channel routed nothing is not made."""
    taken = routing(routes, list(factories))
    return [Routed(factories[name](), taken[name]) for name in factories if name in taken]


def close(routed: list[Routed]) -> None:
    """Close the channels' connections (those that keep any)."""
    for route in routed:
        closing = getattr(route.channel, "close", None)
        if callable(closing):
            closing()


def pagerduty_factory(routing_key: str, url: str, timeout: float) -> Callable[[], Any]:
    """PagerDuty's channel, made when a run needs it (httpx loads then)."""

    def make() -> Any:
        from radar_pipeline.alerts.pagerduty import PagerDutyChannel

        return PagerDutyChannel(routing_key, url, timeout)

    return make


def teams_factory(url: str, timeout: float) -> Callable[[], Any]:
    """Microsoft Teams' channel (a Workflows webhook), made when a run needs it."""

    def make() -> Any:
        from radar_pipeline.alerts.teams import TeamsChannel

        return TeamsChannel(url, timeout)

    return make


def grafana_factory(
    url: str, token: str, timeout: float, dashboard_uid: str | None, panel_id: int | None
) -> Callable[[], Any]:
    """Grafana's channel (annotations), made when a run needs it."""

    def make() -> Any:
        from radar_pipeline.alerts.grafana import GrafanaChannel

        return GrafanaChannel(url, token, timeout, dashboard_uid=dashboard_uid, panel_id=panel_id)

    return make


def webhook_factories(webhooks: str, allowed_hosts: list[str], timeout: float) -> dict[str, Callable[[], Any]]:
    """A factory per generic webhook of RADAR_WEBHOOKS (its JSON), by channel name (webhook:<name>); each webhook is
    checked (URL, allowed host, template) when made, and by `webhook_names` when the definitions load."""
    from radar_pipeline.config.settings import parse_webhooks, parsed

    def factory(name: str, spec: dict[str, Any]) -> Callable[[], Any]:
        def make() -> Any:
            from radar_pipeline.alerts.webhook import WebhookChannel, template_of

            template = template_of(spec, name)
            return WebhookChannel(name, spec["url"], template, allowed_hosts, spec.get("headers"), timeout)

        return make

    return {
        f"webhook:{name}": factory(name, spec)
        for name, spec in parsed(parse_webhooks, webhooks, variable("webhooks")).items()
    }


def webhook_names(webhooks: str, allowed_hosts: list[str]) -> list[str]:
    """The channel names of RADAR_WEBHOOKS's webhooks, each made once to check its URL, host and template (a
    ConfigError naming the setting and the webhook otherwise): run when the definitions load."""
    names = []
    for name, make in webhook_factories(webhooks, allowed_hosts, 1.0).items():
        make()
        names.append(name)
    return names
