"""Generic webhooks: a fixed, versioned JSON payload (docs/channels.md, modelled on Alertmanager's webhook), or the
user's own JSON body rendered from the same facts by a Jinja2 template, posted to a destination whose host is on an
allowlist.

A template runs in a child process (alerts/webhook_render.py) with its address space capped at RENDER_MEMORY and its
time at RENDER_SECONDS, inside Jinja2's immutable sandbox: whatever it builds or however long it loops, the child
stops and the delivery fails finally, with its reason. The child gets the template and the detection's facts only
(an empty environment, never the URL or the headers). Every `{{ field }}` is inserted JSON-escaped: a string's
characters escaped for use between quotes ("{{ service }}"), a number, true, false or null as JSON; `{{ field|tojson
}}` inserts any value as a whole JSON value, quotes included. A webhook is checked when the definitions load
(validate): its URL is https (http only to a loopback address) on an allowed host, and its template, if any, renders
valid JSON from sample detections.

Delivery is at least once: a receiver cannot be asked what it received, so a request whose answer was lost is sent
again; each request carries an Idempotency-Key header, the same for every attempt at a detection (a hash of the
webhook, the analysis, the target and the statement), that a receiver can dedupe on. Redirects are not followed (the
allowlist would not hold), and the URL's query string and the configured headers' values are never shown."""

from __future__ import annotations

import hashlib
import json
import math
import sys
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from radar_pipeline.alerts.channel import ChannelError, Delivered, Detection
from radar_pipeline.alerts.outlet_http import DEFAULT_TIMEOUT, Http, url_secrets
from radar_pipeline.alerts.render import (
    CHANGE_WORDS,
    AnalysisFacts,
    CanaryArms,
    LoadChange,
    Regression,
    canary_words,
    shown_target,
)
from radar_pipeline.config import printable
from radar_pipeline.config.masking import mask_query
from radar_pipeline.config.targets import ConfigError
from radar_pipeline.pgss_model import Key

SETTING = "RADAR_WEBHOOKS"
HOSTS_SETTING = "RADAR_WEBHOOK_ALLOWED_HOSTS"
PAYLOAD_VERSION = "1"  # of the default payload's form: a change a receiver must follow gets another
MAX_QUERY = 4000  # characters of a statement's text in the payload
MAX_BODY = 512 * 1024  # bytes of a rendered body
RENDER_MEMORY = 256 * 2**20  # bytes of the render process's address space (Python and Jinja2 take about 30 MB)
RENDER_SECONDS = 10.0  # of one render process, wall-clock and CPU (it renders in about 0.1 s on an idle machine)
LOOPBACK = {"127.0.0.1", "::1", "localhost"}
_RENDERER = Path(__file__).with_name("webhook_render.py")


class WebhookChannel:
    """Posts each detection to a receiver as the default payload, or as the JSON its template renders."""

    per_detection = True
    can_check = False

    def __init__(
        self,
        name: str,
        url: str,
        template: str | None,
        allowed_hosts: list[str],
        headers: dict[str, str] | None = None,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        validate(url, template, allowed_hosts, setting=f"{SETTING} ({name})")
        self.name = f"webhook:{name}"
        self._url = url
        self._template = template
        self._headers = dict(headers or {})
        # A header's value, and its credentials without the scheme ("Bearer <token>"): a receiver's error may echo the
        # token alone.
        values = self._headers.values()
        self._http = Http(self.name, (*url_secrets(url), *values, *(v.split(" ", 1)[-1] for v in values)), timeout)

    def __repr__(self) -> str:
        return f"WebhookChannel({self.name!r}, {mask_query(self._url)!r})"

    def notify(self, facts: AnalysisFacts, detections: list[Detection], delivery_id: str) -> Delivered:
        """Post one detection as the payload, or as the template renders it; raises ChannelError (a template that
        renders no valid JSON for it, or is stopped: final)."""
        if len(detections) != 1:
            raise ChannelError(f"{self.name} takes one detection a request, not {len(detections)}", False)
        body = payload(facts, detections[0], delivery_id, self.name)
        if self._template is None:
            sent = json.dumps(body, ensure_ascii=False, allow_nan=False).encode()
        else:
            sent = render_body(self._template, fields(body), self.name)
        headers = {
            **self._headers,
            "Content-Type": "application/json; charset=utf-8",
            "Idempotency-Key": body["idempotency_key"],
            "User-Agent": "radar-pipeline",
        }
        answer = self._http.request("POST", self._url, content=sent, headers=headers)
        if 200 <= answer.status < 300 and not answer.html:
            return Delivered(None)
        if 200 <= answer.status < 300:
            raise self._http.not_the_api(answer)
        raise self._http.refused(answer, self._http.quote(answer.text))

    def find_delivered(self, facts: AnalysisFacts, earlier: dict[Key, str], since: datetime) -> dict[Key, Delivered]:
        """A receiver cannot be asked what it received: never called (can_check is False)."""
        raise ChannelError(f"{self.name} cannot look up what it delivered", False)


def idempotency_key(channel: str, facts: AnalysisFacts, key: Key) -> str:
    """The Idempotency-Key of one detection's request: made of what the outbox row is (the webhook, the analysis, the
    target and the statement), not of the attempt, so it is the same for every attempt at that row."""
    dbid, userid, queryid, toplevel = key
    row = json.dumps([channel, facts.analysis_id, facts.target, dbid, userid, queryid, bool(toplevel)])
    return "radar-" + hashlib.sha256(row.encode()).hexdigest()[:40]


def render_body(template: str, context: dict[str, Any], who: str) -> bytes:
    """The template's body for these fields, rendered in the capped child process and checked there to be JSON (no
    NaN or Infinity, no key twice) of at most MAX_BODY bytes; else ChannelError (final) saying why."""
    results = _render(template, [context], who)
    if "syntax" in results:
        raise ChannelError(f"the template of {who} has a syntax error on line {results['syntax'][0]}", False)
    (result,) = results
    if "error" in result:
        raise ChannelError(f"the template of {who} {result['error']}", False)
    return str(result["body"]).encode()


def _render(template: str, contexts: list[dict[str, Any]], who: str) -> Any:
    """The child's answer for these contexts (one result each, or {"syntax": [line, message]}); ChannelError (final)
    when the child was stopped or ended without one."""
    import subprocess

    limits = [str(RENDER_MEMORY), str(math.ceil(RENDER_SECONDS)), str(MAX_BODY)]
    request = json.dumps({"template": template, "contexts": contexts}).encode()
    command, pipe = [sys.executable, "-I", str(_RENDERER), *limits], subprocess.PIPE
    try:
        child = subprocess.Popen(command, stdin=pipe, stdout=pipe, stderr=pipe, env={})
    except OSError as exc:  # the machine's, not the template's: nothing was sent, a later attempt may start it
        raise ChannelError(f"the template of {who} could not start its render process: {exc.strerror}", True) from None
    with child:
        try:
            out, err = child.communicate(request, timeout=RENDER_SECONDS)
        except subprocess.TimeoutExpired:
            child.kill()
            child.communicate()
            raise ChannelError(f"the template of {who} ran over {RENDER_SECONDS:g} seconds: stopped", False) from None
    try:
        return json.loads(out)
    except ValueError:
        pass
    if b"MemoryError" in err:
        why = f"needed over {RENDER_MEMORY // 2**20} MB of memory"
    elif child.returncode < 0:
        why = f"was stopped by signal {-child.returncode} (its caps: {RENDER_MEMORY // 2**20} MB, {RENDER_SECONDS:g} s)"
    else:
        why = f"ended its render process with code {child.returncode} and no answer"
    raise ChannelError(f"the template of {who} {why}", False)


def payload(
    facts: AnalysisFacts, found: Detection, delivery_id: str, channel: str = "webhook:sample"
) -> dict[str, Any]:
    """The default body, version PAYLOAD_VERSION (docs/channels.md lists each field): an envelope naming the webhook,
    this attempt's `delivery_id` and the `idempotency_key` every attempt shares, the analysis, and its detections
    (one a request)."""
    regression, change = found.regression, found.change
    dbid, userid, queryid, toplevel = found.key
    query = regression.query if regression is not None else change.query if change is not None else ""
    before, after = facts.load_ms_per_min or (None, None)
    kind = "regression" if regression is not None else change.kind if change is not None else "detection"
    analysis = {
        "analysis_id": facts.analysis_id,
        "deploy_id": None if facts.period else facts.analysis_id,
        "periodic": facts.period is not None,
        "period_start": facts.period[0] if facts.period else None,
        "period_end": facts.period[1] if facts.period else None,
        "target": shown_target(facts),  # a canary's facts.target is the outbox's canary:<target>
        "service": facts.service,
        "version": facts.version,
        "deploy_url": facts.url,
        "run_url": facts.run_url,
        "split_at": facts.split_at,
        "state": facts.state,
        "load_ms_per_min_before": before,
        "load_ms_per_min_after": after,
    }
    detection = {
        "kind": kind,
        "summary": _summary(facts, regression, change),
        "statement": {"dbid": dbid, "userid": userid, "queryid": queryid, "toplevel": toplevel},
        "query": _cut(" ".join(printable(query).split()), MAX_QUERY),
        "regression": _regression(regression, facts.canary) if regression is not None else None,
        "change": _change(change) if change is not None else None,
        "canary": _canary(facts.canary, regression) if facts.canary and regression is not None else None,
    }
    return _plain(
        {
            "version": PAYLOAD_VERSION,
            "status": "firing",
            "webhook": channel.removeprefix("webhook:"),
            "delivery_id": delivery_id,
            "idempotency_key": idempotency_key(channel, facts, found.key),
            "analysis": analysis,
            "detections": [detection],
        }
    )


def fields(body: dict[str, Any]) -> dict[str, Any]:
    """A template's fields, from a payload: the analysis's and its detection's by their own names, `delivery_id`,
    `idempotency_key`, and the whole payload as `payload`."""
    (detection,) = body["detections"]
    return {
        **body["analysis"],
        **detection,
        "delivery_id": body["delivery_id"],
        "idempotency_key": body["idempotency_key"],
        "payload": body,
    }


def _summary(facts: AnalysisFacts, regression: Regression | None, change: LoadChange | None) -> str:
    what = " ".join(p for p in (facts.service, facts.version) if p) or facts.analysis_id
    if facts.canary is not None and regression is not None:
        arms = facts.canary
        words = canary_words(arms.canary_role, regression.change_factor, arms.stable_role)
        where = f"on {arms.target} in canary deploy {what}"
        return printable(f"slower in the canary arm ({words}) {where} (queryid {regression.queryid})")
    where = f"on {facts.target} " + ("in the periodic check" if facts.period else f"after deploy {what}")
    if regression is not None:
        return printable(f"×{regression.change_factor:.2f} slower {where} (queryid {regression.queryid})")
    if change is not None:
        return printable(f"{CHANGE_WORDS.get(change.kind, change.kind)} {where} (queryid {change.queryid})")
    return printable(f"a detection {where}")


def _regression(r: Regression, canary: CanaryArms | None) -> dict[str, Any]:
    """A regression's fields; a canary arm's keeps them (before: the stable arm, after: the canary, over the same
    minutes) but has no moment its change began (change_at null): its `canary` field says what it is."""
    return {
        "queryid": r.queryid,
        "mean_before_ms": r.mean_before_ms,
        "mean_after_ms": r.mean_after_ms,
        "change_factor": r.change_factor,
        "factor_low": r.factor_low,
        "factor_high": r.factor_high,
        "confidence": r.confidence,
        "change_at": r.change_at if canary is None else None,
        "calls_before": r.calls_before,
        "calls_after": r.calls_after,
        "cause": r.cause,
        "cause_detail": r.cause_detail,
        "named_changes": list(r.named_changes or []),
        "undo_hint": r.undo_hint,
        "plan_summary": r.plan_summary,
        "shared_with": list(r.shared_with or []),
    }


def _canary(arms: CanaryArms, r: Regression) -> dict[str, Any]:
    """A canary arm's detection by its own names: both roles, the minutes both arms were read in, each arm's mean
    and calls."""
    return {
        "canary_role": arms.canary_role,
        "stable_role": arms.stable_role,
        "window_start": arms.window[0],
        "window_end": arms.window[1],
        "mean_canary_ms": r.mean_after_ms,
        "mean_stable_ms": r.mean_before_ms,
        "calls_canary": r.calls_after,
        "calls_stable": r.calls_before,
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


def validate(url: str, template: str | None, allowed_hosts: list[str], setting: str = SETTING) -> None:
    """Check a webhook when the definitions load: an https URL (http only to a loopback address) on an allowed host,
    with no credentials in it, and a template (if any) that parses and renders valid JSON from sample detections (a
    regression, a load change, a canary arm's) within its caps, touching nothing the sandbox forbids and no field
    that does not exist. Raises ConfigError naming `setting`, showing no secret."""
    parts = urlsplit(url)
    shown = mask_query(url)
    host = (parts.hostname or "").lower()
    if parts.scheme not in ("https", "http") or not host:
        raise ConfigError(f"{setting}: the URL must be an https:// URL, not {shown!r}")
    if parts.scheme == "http" and host not in LOOPBACK:
        raise ConfigError(f"{setting}: the URL must be https:// (http only to a loopback address), not {shown!r}")
    if "@" in parts.netloc:
        raise ConfigError(f"{setting}: the URL must not hold a user name or password (put them in its headers)")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise ConfigError(f"{setting}: the URL's port is not a port number: {shown!r}") from None
    if not allowed_hosts:
        raise ConfigError(f"{setting}: {HOSTS_SETTING} is empty: name the hosts webhooks may post to")
    if not any(_allowed(host, port, parts.scheme, pattern) for pattern in allowed_hosts):
        where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        raise ConfigError(f"{setting}: the URL's host and port {where!r} are not in {HOSTS_SETTING}")
    if template is None:
        return
    samples = _samples()
    try:
        results = _render(template, samples, "it")
    except ChannelError as exc:
        raise ConfigError(f"{setting}: for the sample detections, {exc}") from None
    if "syntax" in results:
        line, message = results["syntax"]
        raise ConfigError(f"{setting}: the template has a syntax error on line {line}: {message}")
    for sample, result in zip(samples, results, strict=True):
        if "error" in result:
            what = (
                "a canary detection"
                if sample["canary"]
                else "a regression"
                if sample["regression"]
                else "a load change"
            )
            raise ConfigError(f"{setting}: for {what}, the template of it {result['error']}")


def _allowed(host: str, port: int, scheme: str, entry: str) -> bool:
    """Whether an allowlist entry takes the URL's host and port (an entry without a port: the scheme's default)."""
    from radar_pipeline.config.settings import allowed_host

    try:
        pattern, allowed_port = allowed_host(entry)
    except ValueError:
        return False
    if port != (allowed_port or (443 if scheme == "https" else 80)):
        return False
    if pattern.startswith("*."):
        return host.endswith(pattern[1:]) and host != pattern[2:]
    return host == pattern


def _samples() -> list[dict[str, Any]]:
    """A regression's fields, a load change's and a canary arm's detection's, to check a template with."""
    at = datetime.fromisoformat("2026-11-29T12:00:00+00:00")
    facts = AnalysisFacts("shop-v2", "main", at, "shop", "v2", "https://ci.example/1", "https://dagster.example/runs/1")
    regression = Regression(1, 'SELECT "a" FROM t -- {{ x }}\n', 1.0, 3.0, 3.0, 0.999, at, 10, 10, "plan_changed", None)
    change = LoadChange(2, "SELECT 1", "new", 0.0, 5.0, 0.0, 1.0, None, 0.2, 0.1)
    arms = CanaryArms("main", "web_canary", "web", (at, at + timedelta(minutes=30)))
    canary = replace(facts, target="canary:main", canary=arms)
    return [
        fields(payload(facts, Detection((1, 2, 1, True), regression=regression), "sample")),
        fields(payload(facts, Detection((1, 2, 2, True), change=change), "sample")),
        fields(payload(canary, Detection((1, 3, 1, True), regression=replace(regression, cause="canary")), "sample")),
    ]


def template_of(spec: dict[str, Any], name: str) -> str | None:
    """A webhook's template: its `template`, the text of its `template_file`, or None (the default payload)."""
    if "template" in spec:
        return str(spec["template"])
    if "template_file" not in spec:
        return None
    try:
        return Path(spec["template_file"]).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{SETTING} ({name}): template_file cannot be read: {exc.strerror}") from None
