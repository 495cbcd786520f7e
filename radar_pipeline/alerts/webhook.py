"""Generic webhooks: the user's own JSON body, rendered from a detection's fields with Jinja2's sandbox, posted to a
destination whose host is on an allowlist.

The template is checked when the definitions load (validate): its syntax, that it renders valid JSON from sample
detections (a regression and a load change) without touching what the sandbox forbids or a field that does not exist,
and that its URL is https (http only to a loopback address) on an allowed host. Every `{{ field }}` is inserted JSON-
escaped: a string's characters escaped for use between quotes ("{{ service }}"), a number, true, false or null as
JSON; `{{ field|tojson }}` inserts any value as a whole JSON value, quotes included (the safe choice for a string that
may be null, or for an object). So a statement holding quotes, newlines, control characters or `{{` cannot break the
body or be read as a template.

Delivery is at least once: a receiver cannot be asked what it received, so a request whose answer was lost is sent
again; each request carries an Idempotency-Key header (the outbox delivery id and the statement) that a receiver can
dedupe on. Redirects are not followed (the allowlist would not hold), and the URL's query string and the configured
headers' values are never shown."""

from __future__ import annotations

import json
import math
from datetime import datetime
from functools import lru_cache
from typing import Any
from urllib.parse import urlsplit

from radar_pipeline.alerts.channel import ChannelError, Delivered, Detection
from radar_pipeline.alerts.outlet_http import DEFAULT_TIMEOUT, Http, url_secrets
from radar_pipeline.alerts.render import CHANGE_WORDS, AnalysisFacts, LoadChange, Regression
from radar_pipeline.config import printable
from radar_pipeline.config.masking import mask_query
from radar_pipeline.config.targets import ConfigError
from radar_pipeline.pgss_model import Key

SETTING = "RADAR_WEBHOOKS"
HOSTS_SETTING = "RADAR_WEBHOOK_ALLOWED_HOSTS"
MAX_QUERY = 4000  # characters of a statement's text given to the template
MAX_BODY = 512 * 1024  # bytes of a rendered body
LOOPBACK = {"127.0.0.1", "::1", "localhost"}


class WebhookChannel:
    """Posts each detection to a receiver as the JSON its template renders."""

    per_detection = True
    can_check = False

    def __init__(
        self,
        name: str,
        url: str,
        template: str,
        allowed_hosts: list[str],
        headers: dict[str, str] | None = None,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        validate(url, template, allowed_hosts, setting=f"{SETTING} ({name})")
        self.name = f"webhook:{name}"
        self._url = url
        self._template = _environment().from_string(template)
        self._headers = dict(headers or {})
        self._http = Http(self.name, (*url_secrets(url), *self._headers.values()), timeout)

    @classmethod
    def from_settings(cls, settings: Any) -> list[WebhookChannel] | None:
        """The webhooks RADAR_WEBHOOKS names (each checked as validate does), or None when it is unset."""
        if settings.webhooks is None:
            return None
        from radar_pipeline.config.settings import parse_webhooks

        hosts = settings.webhook_allowed_hosts or []
        return [
            cls(name, spec["url"], template_of(spec, name), hosts, spec.get("headers"))
            for name, spec in parse_webhooks(settings.webhooks.get_secret_value()).items()
        ]

    def __repr__(self) -> str:
        return f"WebhookChannel({self.name!r}, {mask_query(self._url)!r})"

    def notify(self, facts: AnalysisFacts, detections: list[Detection], delivery_id: str) -> Delivered:
        """Post one detection as the template renders it; raises ChannelError (a template that renders no valid
        JSON for it: final)."""
        if len(detections) != 1:
            raise ChannelError(f"{self.name} takes one detection a request, not {len(detections)}", False)
        body = render_body(self._template, fields(facts, detections[0], delivery_id), self.name)
        headers = {
            **self._headers,
            "Content-Type": "application/json; charset=utf-8",
            "Idempotency-Key": idempotency_key(delivery_id, detections[0].key),
            "User-Agent": "radar-pipeline",
        }
        answer = self._http.request("POST", self._url, content=body, headers=headers)
        if 200 <= answer.status < 300 and not answer.html:
            return Delivered(None)
        if 200 <= answer.status < 300:
            raise self._http.not_the_api(answer)
        raise self._http.refused(answer, self._http.quote(answer.text))

    def find_delivered(self, facts: AnalysisFacts, earlier: dict[Key, str], since: datetime) -> dict[Key, Delivered]:
        """A receiver cannot be asked what it received: never called (can_check is False)."""
        raise ChannelError(f"{self.name} cannot look up what it delivered", False)


def idempotency_key(delivery_id: str, key: Key) -> str:
    """The Idempotency-Key of one detection's request: the same for every attempt at it."""
    dbid, userid, queryid, toplevel = key
    return printable(f"{delivery_id}:{dbid}.{userid}.{queryid}.{'t' if toplevel else 'f'}")


def render_body(template: Any, context: dict[str, Any], who: str) -> bytes:
    """The rendered body, checked to be valid JSON of at most MAX_BODY bytes; else ChannelError (final)."""
    from jinja2.exceptions import SecurityError, TemplateError

    try:
        text = template.render(context)
    except SecurityError as exc:
        raise ChannelError(f"the template of {who} was stopped by the sandbox: {exc}", False) from None
    except (TemplateError, ArithmeticError, LookupError, TypeError, ValueError) as exc:  # the template's own faults
        raise ChannelError(f"the template of {who} failed: {type(exc).__name__}: {exc}", False) from None
    body = text.encode()
    if len(body) > MAX_BODY:
        raise ChannelError(f"the template of {who} rendered {len(body):,} bytes, over {MAX_BODY:,}", False)
    try:
        json.loads(text)
    except ValueError as exc:
        raise ChannelError(f"the template of {who} did not render valid JSON: {exc}", False) from None
    return body


def fields(facts: AnalysisFacts, found: Detection, delivery_id: str) -> dict[str, Any]:
    """What a template can use (docs/channels.md lists each field)."""
    regression, change = found.regression, found.change
    dbid, userid, queryid, toplevel = found.key
    query = regression.query if regression is not None else change.query if change is not None else ""
    before, after = facts.load_ms_per_min or (None, None)
    kind = "regression" if regression is not None else change.kind if change is not None else "detection"
    return _plain(
        {
            "delivery_id": delivery_id,
            "idempotency_key": idempotency_key(delivery_id, found.key),
            "kind": kind,
            "summary": _summary(facts, regression, change),
            "analysis_id": facts.analysis_id,
            "deploy_id": None if facts.period else facts.analysis_id,
            "periodic": facts.period is not None,
            "period_start": facts.period[0] if facts.period else None,
            "period_end": facts.period[1] if facts.period else None,
            "target": facts.target,
            "service": facts.service,
            "version": facts.version,
            "deploy_url": facts.url,
            "run_url": facts.run_url,
            "split_at": facts.split_at,
            "state": facts.state,
            "load_ms_per_min_before": before,
            "load_ms_per_min_after": after,
            "statement": {"dbid": dbid, "userid": userid, "queryid": queryid, "toplevel": toplevel},
            "query": _cut(" ".join(printable(query).split()), MAX_QUERY),
            "regression": _regression(regression) if regression is not None else None,
            "change": _change(change) if change is not None else None,
        }
    )


def _summary(facts: AnalysisFacts, regression: Regression | None, change: LoadChange | None) -> str:
    what = " ".join(p for p in (facts.service, facts.version) if p) or facts.analysis_id
    where = f"on {facts.target} " + ("in the periodic check" if facts.period else f"after deploy {what}")
    if regression is not None:
        return printable(f"×{regression.change_factor:.2f} slower {where} (queryid {regression.queryid})")
    if change is not None:
        return printable(f"{CHANGE_WORDS.get(change.kind, change.kind)} {where} (queryid {change.queryid})")
    return printable(f"a detection {where}")


def _regression(r: Regression) -> dict[str, Any]:
    return {
        "queryid": r.queryid,
        "mean_before_ms": r.mean_before_ms,
        "mean_after_ms": r.mean_after_ms,
        "change_factor": r.change_factor,
        "factor_low": r.factor_low,
        "factor_high": r.factor_high,
        "confidence": r.confidence,
        "change_at": r.change_at,
        "calls_before": r.calls_before,
        "calls_after": r.calls_after,
        "cause": r.cause,
        "plan_summary": r.plan_summary,
        "shared_with": list(r.shared_with or []),
    }


def _change(c: LoadChange) -> dict[str, Any]:
    return {
        "queryid": c.queryid,
        "kind": c.kind,
        "calls_per_min_before": c.calls_per_min_before,
        "calls_per_min_after": c.calls_per_min_after,
        "exec_ms_per_min_before": c.exec_ms_per_min_before,
        "exec_ms_per_min_after": c.exec_ms_per_min_after,
        "mean_before_ms": c.mean_before_ms,
        "mean_after_ms": c.mean_after_ms,
        "share_of_time_after": c.share_of_time_after,
        "plan_summary": c.plan_summary,
    }


def _plain(value: Any) -> Any:
    """Fields as JSON values: times as ISO 8601 text, NaN and infinities as None, texts printable."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, str):
        return printable(value)
    return value


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


# The sandbox and its checks


def _insert(value: Any) -> Any:
    """How `{{ value }}` is written: JSON-escaped (a string's characters for use between quotes, anything else as a
    JSON value); tojson's output (Markup) is already JSON."""
    from jinja2 import Undefined

    if hasattr(value, "__html__"):  # Markup: tojson's output
        return value
    if isinstance(value, Undefined):
        return str(value)  # StrictUndefined: raises, naming the field (or the sandbox's refusal)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)[1:-1]
    return json.dumps(value, ensure_ascii=False, default=str)


@lru_cache(maxsize=1)
def _environment() -> Any:
    """Jinja2's immutable sandbox, StrictUndefined (a misspelt field is an error), every insertion JSON-escaped, and
    repetition bounded (`"x" * 10**9` would fill the memory)."""
    from jinja2 import StrictUndefined
    from jinja2.exceptions import SecurityError
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Sandbox(ImmutableSandboxedEnvironment):
        intercepted_binops = frozenset({"*", "**"})

        def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
            if operator == "**" and isinstance(right, int | float) and abs(right) > 64:
                raise SecurityError("a power over 64 is not allowed")
            if operator == "*":
                size = next((len(x) for x in (left, right) if isinstance(x, str | list | tuple)), None)
                times = next((x for x in (left, right) if isinstance(x, int)), None)
                if size is not None and times is not None and size * times > MAX_BODY:
                    raise SecurityError(f"a repetition over {MAX_BODY:,} items is not allowed")
            return super().call_binop(context, operator, left, right)

    sandbox = Sandbox(undefined=StrictUndefined, autoescape=False, finalize=_insert, keep_trailing_newline=True)
    tojson = sandbox.filters["tojson"]

    def strict_tojson(environment: Any, value: Any, indent: int | None = None) -> Any:
        if isinstance(value, StrictUndefined):
            value._fail_with_undefined_error()  # a missing field: its own error, naming it
        return tojson(environment, value, indent)

    strict_tojson.jinja_pass_arg = tojson.jinja_pass_arg  # type: ignore[attr-defined]
    sandbox.filters["tojson"] = strict_tojson
    return sandbox


def validate(url: str, template: str, allowed_hosts: list[str], setting: str = SETTING) -> None:
    """Check a webhook when the definitions load: an https URL (http only to a loopback address) on an allowed host,
    with no credentials in it, and a template that parses and renders valid JSON from sample detections (a regression
    and a load change) without anything the sandbox forbids or a field that does not exist. Raises ConfigError
    naming `setting`, showing no secret."""
    from jinja2.exceptions import TemplateSyntaxError

    parts = urlsplit(url)
    shown = mask_query(url)
    host = (parts.hostname or "").lower()
    if parts.scheme not in ("https", "http") or not host:
        raise ConfigError(f"{setting}: the URL must be an https:// URL, not {shown!r}")
    if parts.scheme == "http" and host not in LOOPBACK:
        raise ConfigError(f"{setting}: the URL must be https:// (http only to a loopback address), not {shown!r}")
    if "@" in parts.netloc:
        raise ConfigError(f"{setting}: the URL must not hold a user name or password (put them in its headers)")
    if not allowed_hosts:
        raise ConfigError(f"{setting}: {HOSTS_SETTING} is empty: name the hosts webhooks may post to")
    if not any(_allowed(host, pattern) for pattern in allowed_hosts):
        raise ConfigError(f"{setting}: the URL's host {host!r} is not in {HOSTS_SETTING}")
    try:
        compiled = _environment().from_string(template)
    except TemplateSyntaxError as exc:
        raise ConfigError(f"{setting}: the template has a syntax error on line {exc.lineno}: {exc.message}") from None
    for sample in _samples():
        try:
            render_body(compiled, sample, "it")
        except ChannelError as exc:
            what = "a regression" if sample["regression"] else "a load change"
            raise ConfigError(f"{setting}: for {what}, {exc}") from None


def _allowed(host: str, pattern: str) -> bool:
    pattern = pattern.strip().lower()
    if pattern.startswith("*."):
        return host.endswith(pattern[1:]) and host != pattern[2:]
    return host == pattern


def _samples() -> list[dict[str, Any]]:
    """A regression's fields and a load change's, to check a template with."""
    at = datetime.fromisoformat("2026-11-29T12:00:00+00:00")
    facts = AnalysisFacts("shop-v2", "main", at, "shop", "v2", "https://ci.example/1", "https://dagster.example/runs/1")
    regression = Regression(1, 'SELECT "a" FROM t -- {{ x }}\n', 1.0, 3.0, 3.0, 0.999, at, 10, 10, "plan_changed", None)
    change = LoadChange(2, "SELECT 1", "new", 0.0, 5.0, 0.0, 1.0, None, 0.2, 0.1)
    return [
        fields(facts, Detection((1, 2, 1, True), regression=regression), "sample"),
        fields(facts, Detection((1, 2, 2, True), change=change), "sample"),
    ]


def template_of(spec: dict[str, Any], name: str) -> str:
    """A webhook's template: its `template`, or the text of its `template_file`."""
    if "template" in spec:
        return str(spec["template"])
    from pathlib import Path

    try:
        return Path(spec["template_file"]).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{SETTING} ({name}): template_file cannot be read: {exc.strerror}") from None
