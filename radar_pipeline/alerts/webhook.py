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
again; each request carries an Idempotency-Key header, the same for every attempt at a detection (a hash of the
webhook, the analysis, the target and the statement), that a receiver can dedupe on. Redirects are not followed (the
allowlist would not hold), and the URL's query string and the configured headers' values are never shown."""

from __future__ import annotations

import hashlib
import json
import math
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import datetime, timedelta
from functools import lru_cache, wraps
from typing import Any, NoReturn
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
        given = fields(facts, detections[0], delivery_id, self.name)
        body = render_body(self._template, given, self.name)
        headers = {
            **self._headers,
            "Content-Type": "application/json; charset=utf-8",
            "Idempotency-Key": given["idempotency_key"],
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


def idempotency_key(channel: str, facts: AnalysisFacts, key: Key) -> str:
    """The Idempotency-Key of one detection's request: made of what the outbox row is (the webhook, the analysis, the
    target and the statement), not of the attempt, so it is the same for every attempt at that row."""
    dbid, userid, queryid, toplevel = key
    row = json.dumps([channel, facts.analysis_id, facts.target, dbid, userid, queryid, bool(toplevel)])
    return "radar-" + hashlib.sha256(row.encode()).hexdigest()[:40]


def render_body(template: Any, context: dict[str, Any], who: str) -> bytes:
    """The rendered body, checked to be JSON (no NaN or Infinity, no key twice) of at most MAX_BODY bytes; else
    ChannelError (final). Rendering stops as soon as the body is over MAX_BODY, or the template over its bounds."""
    from jinja2.exceptions import SecurityError

    _budget.steps, _budget.built, _budget.deadline = 0, 0, time.monotonic() + MAX_SECONDS
    parts: list[str] = []
    size = 0
    try:
        for part in template.generate(context):
            size += len(part.encode())
            if size > MAX_BODY:
                raise ChannelError(f"the template of {who} rendered over {MAX_BODY:,} bytes", False)
            _spend(1)
            parts.append(part)
    except SecurityError as exc:
        raise ChannelError(f"the template of {who} was stopped by the sandbox: {exc}", False) from None
    except ChannelError:
        raise
    except Exception as exc:  # noqa: BLE001 - the user's template: whatever it raises is its fault, final, said
        # (a filter's own assertion, `truncate(n)` with n < 0 for some detection, is no TemplateError)
        raise ChannelError(f"the template of {who} failed: {type(exc).__name__}: {exc}", False) from None
    finally:
        _budget.deadline = None  # a filter Jinja folds while compiling another template is not this render's
    text = "".join(parts)
    try:
        json.loads(text, parse_constant=_not_json, object_pairs_hook=_no_key_twice)
    except ValueError as exc:
        raise ChannelError(f"the template of {who} did not render valid JSON: {exc}", False) from None
    return text.encode()


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


def _no_key_twice(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    taken = dict(pairs)
    if len(taken) < len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise ValueError(f"the key {key!r} is given twice")
            seen.add(key)
    return taken


def fields(facts: AnalysisFacts, found: Detection, delivery_id: str, channel: str = "webhook:sample") -> dict[str, Any]:
    """What a template can use (docs/channels.md lists each field): `delivery_id` is this attempt's, `idempotency_key`
    the same for every attempt."""
    regression, change = found.regression, found.change
    dbid, userid, queryid, toplevel = found.key
    query = regression.query if regression is not None else change.query if change is not None else ""
    before, after = facts.load_ms_per_min or (None, None)
    kind = "regression" if regression is not None else change.kind if change is not None else "detection"
    return _plain(
        {
            "delivery_id": delivery_id,
            "idempotency_key": idempotency_key(channel, facts, found.key),
            "kind": kind,
            "summary": _summary(facts, regression, change),
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
            "statement": {"dbid": dbid, "userid": userid, "queryid": queryid, "toplevel": toplevel},
            "query": _cut(" ".join(printable(query).split()), MAX_QUERY),
            "regression": _regression(regression, facts.canary) if regression is not None else None,
            "change": _change(change) if change is not None else None,
            "canary": _canary(facts.canary, regression) if facts.canary and regression is not None else None,
        }
    )


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


# The sandbox and its checks
#
# A template is the operator's, but it runs in the code location's process (validate, when the definitions load) and
# in every run that delivers: what it may build and how long it may run are bounded, mostly before it is built. Each
# operation the template can grow a value with (a filter, a method call, `*`, `+`, `%`, `**`, `~`, a loop's step) is
# checked first: no single value over MAX_BODY (the deep size of a list of lists counts every item), no format whose
# result could be over MAX_BODY (estimated from its placeholders and its largest argument), no format width over
# MAX_WIDTH, no number over MAX_BITS bits, at most MAX_STEPS steps (each item of a list made or measured, or taken
# from a generator by a filter, is one: an item costs tens of bytes) and MAX_BUILT characters built in a render, no
# recursive loop (its inner iterations pass no hook); and whatever these counts miss, a render stops after
# MAX_SECONDS.

MAX_WIDTH = 1024  # of a %-format's or str.format's width or precision
MAX_BITS = 4096  # of an integer a template computes
MAX_RANGE = 10_000  # items of range()
MAX_STEPS = 100_000  # loop iterations, calls and items measured in one render
MAX_SECONDS = 2.0  # of one render, wall-clock (a sample renders in milliseconds)
MAX_BUILT = 32 * MAX_BODY  # characters and items built in one render, all values together
_GROWS_BY_TEXT = {"replace", "wordwrap", "join", "indent", "tojson"}  # output: input × a text argument's length
_GROWS_BY_NUMBER = {"indent", "expandtabs", "tojson"}  # output: input × a number argument (tojson: × nesting depth)
_WIDTHS = {"center", "ljust", "rjust", "zfill", "truncate", "batch", "slice"}  # output: up to a number argument
_REFUSED = {"translate", "maketrans"}  # str methods that map characters to texts of any length
_budget = threading.local()


def _refuse(why: str) -> NoReturn:
    from jinja2.exceptions import SecurityError

    raise SecurityError(why)


def _spend(steps: int, built: int = 0) -> None:
    """Count a render's steps and what it built; over the bounds, or past the render's deadline, the render stops."""
    _budget.steps = getattr(_budget, "steps", 0) + steps
    _budget.built = getattr(_budget, "built", 0) + built
    if _budget.steps > MAX_STEPS:
        _refuse(f"a template may take at most {MAX_STEPS:,} steps (loop iterations, calls and items measured)")
    if _budget.built > MAX_BUILT:
        _refuse(f"a template may build at most {MAX_BUILT:,} characters in all")
    deadline = getattr(_budget, "deadline", None)
    if deadline is not None and time.monotonic() > deadline:
        _refuse(f"a template may run for at most {MAX_SECONDS:g} seconds")


def _size(value: Any, cap: int = MAX_BODY) -> int:
    """A value's deep size: characters of its texts and items of its lists, counted until over `cap`. Each item of a
    list or mapping is a step, spent before it is looked at (measuring a long list again and again is work too)."""
    if isinstance(value, str | bytes):
        return len(value)
    if isinstance(value, dict):
        value = [*value.keys(), *value.values()]
    if isinstance(value, list | tuple | set | frozenset):
        _spend(len(value))
        total = len(value)
        for item in value:
            if total > cap:
                break
            total += _size(item, cap - total)
        return total
    if isinstance(value, int) and not isinstance(value, bool):
        return value.bit_length() // 3 + 1
    return 1


def _depth(value: Any) -> int:
    """How deeply lists and mappings nest in `value`: json.dumps indents each level."""
    if isinstance(value, dict):
        value = list(value.values())
    if not isinstance(value, list | tuple | set | frozenset):
        return 0
    return 1 + max(map(_depth, value), default=0)


def _numbers(values: Any) -> list[int]:
    return [abs(v) for v in values if isinstance(v, int) and not isinstance(v, bool)]


def _guard(name: str, value: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Refuse a filter or a str method (`name`, on `value`) whose result could be over MAX_BODY."""
    given = (*args, *kwargs.values())
    texts, numbers = [len(v) for v in given if isinstance(v, str)], _numbers(given)
    if name in _WIDTHS | _GROWS_BY_NUMBER and any(n > MAX_BODY for n in numbers):
        _refuse(f"{name}: a width or count over {MAX_BODY:,} is not allowed")
    size = _size(value)
    work = size + sum(_size(v) for v in given)
    if name in _WIDTHS:
        work += max(numbers, default=0)
    factor = max(texts if name in _GROWS_BY_TEXT else [], default=0)
    factor = max([factor, *(numbers if name in _GROWS_BY_NUMBER else [])])
    work += (size + 1) * factor * (_depth(value) if name == "tojson" and factor else 1)  # an indent a nesting level
    if work > MAX_BODY:
        _refuse(f"{name} could build over {MAX_BODY:,} characters")


def _made(value: Any) -> Any:
    """An operation's result, counted (and refused over MAX_BODY); a list's or mapping's items are steps too (each
    item costs tens of bytes, a character one)."""
    size = len(value) if isinstance(value, str | bytes) else 0
    if isinstance(value, list | tuple | dict | set | frozenset):
        size = _size(value)
    if size > MAX_BODY:
        _refuse(f"a value over {MAX_BODY:,} characters or items is not allowed")
    _spend(1, size)
    return value


_PERCENT = re.compile(r"%(?:\([^)]*\))?[-#0 +]*(\*|\d+)?(?:\.(\*|\d+))?")
_PLACEHOLDER = re.compile(r"%(?:\([^)]*\))?[-#0 +]*(?:\*|\d+)?(?:\.(?:\*|\d+))?[hlL]?(.)", re.S)


def _check_output(name: str, text: Any, values: list[Any], percent: bool) -> None:
    """Refuse a format (`name`: %-format if `percent`, else str.format) whose result could be over MAX_BODY, before it
    is built: its own length, plus for each placeholder its width and precision and the largest argument as text (a
    repr, 10 characters a character: `\\U000e0000`; a list or an object: 10 a character or item of its deep size)."""
    if not isinstance(text, str):
        return
    if percent:
        kinds = [kind for kind in _PLACEHOLDER.findall(text) if kind != "%"]
        widths = [int(n) for match in _PERCENT.finditer(text) for n in match.groups() if n and n.isdigit()]
    else:
        from string import Formatter

        try:
            parsed = [(conversion, spec) for _, field, spec, conversion in Formatter().parse(text) if field is not None]
        except ValueError:
            return  # str.format raises its own error
        kinds = [conversion or "s" for conversion, _ in parsed]
        widths = [int(n) for _, spec in parsed for n in re.findall(r"\d+", spec or "")]
    if not kinds:
        return
    shown = 1
    for value in values:
        if isinstance(value, str):
            shown = max(shown, len(value) * (10 if any(k in "ra" for k in kinds) else 1) + 2)
        elif isinstance(value, int | float):
            shown = max(shown, _size(value) + 330)  # a float's digits: up to 309 and a sign, a point, an exponent
        else:
            shown = max(shown, 10 * _size(value) + 16)
    factor = 6 if hasattr(text, "__html__") else 1  # Markup escapes each argument: & is &amp;
    if len(text) + len(kinds) * shown * factor + sum(widths) > MAX_BODY:
        _refuse(f"{name} could build over {MAX_BODY:,} characters")


def _arguments(values: Any, text: Any) -> list[Any]:
    """The values a %-format takes from its right side: a tuple's items, a mapping's values if it names them."""
    if isinstance(values, tuple):
        return list(values)
    if isinstance(values, dict) and isinstance(text, str) and "%(" in text:
        return list(values.values())
    return [values]


def _check_format(text: Any, percent: bool) -> None:
    """Refuse a %-format (`percent`) or a str.format whose widths or precisions are over MAX_WIDTH or computed."""
    if not isinstance(text, str):
        return
    if percent:
        found = [part for match in _PERCENT.finditer(text) for part in match.groups() if part]
    else:
        from string import Formatter

        try:
            specs = [spec for _, field, spec, _ in Formatter().parse(text) if field is not None and spec]
        except ValueError:
            return  # str.format raises its own error
        if any("{" in spec for spec in specs):
            _refuse("a computed width in a format is not allowed")
        found = [n for spec in specs for n in re.findall(r"\d+", spec)]
    if "*" in found or any(int(n) > MAX_WIDTH for n in found if n.isdigit()):
        _refuse(f"a format width or precision over {MAX_WIDTH} (or computed) is not allowed")


def _bounded_range(*args: int) -> range:
    numbers = range(*args)
    if len(numbers) > MAX_RANGE:
        _refuse(f"a range over {MAX_RANGE:,} items is not allowed")
    return numbers


def _steps(items: Any) -> Any:
    """A loop's items, each counted as a step."""
    for item in items:
        _spend(1)
        yield item


def _concat(parts: tuple[Any, ...]) -> str:
    """`a ~ b`: bounded like `+`."""
    if sum(_size(p) for p in parts) > MAX_BODY:
        _refuse(f"a value over {MAX_BODY:,} characters is not allowed")
    return str(_made("".join(str(p) for p in parts)))


def _text(context: Any, text: str) -> Any:
    """The template's own text, counted as built (a loop in a {% set %} block repeats it); Markup: _insert keeps it."""
    from markupsafe import Markup

    _spend(1, len(text))
    return Markup(text)


def _bounded_filter(name: str, function: Any) -> Any:
    passes = 1 if getattr(function, "jinja_pass_arg", None) is not None else 0

    @wraps(function)
    def bounded(*args: Any, **kwargs: Any) -> Any:
        if len(args) <= passes:
            return function(*args, **kwargs)
        value = args[passes]
        if isinstance(value, Iterator):  # a generator (batch, map, select): each item it yields is a step
            value = _steps(value)
            args = (*args[:passes], value, *args[passes + 1 :])
        if name == "join" and not isinstance(value, str | list | tuple | dict | set):
            value = list(value)  # a generator (map, select): its items are counted
            args = (*args[:passes], value, *args[passes + 1 :])
        if name == "format":
            _check_format(value, percent=True)
            _check_output(name, value, [*args[passes + 1 :], *kwargs.values()], percent=True)
        _guard(name, value, args[passes + 1 :], kwargs)
        return _made(function(*args, **kwargs))

    return bounded


def _insert(value: Any) -> Any:
    """How `{{ value }}` is written: JSON-escaped (a string's characters for use between quotes, anything else as a
    JSON value; an infinity or NaN the template computed is an error); tojson's output (Markup) is already JSON."""
    from jinja2 import Undefined

    if hasattr(value, "__html__"):  # Markup: tojson's output
        return value
    if isinstance(value, Undefined):
        return str(value)  # StrictUndefined: raises, naming the field (or the sandbox's refusal)
    size = _size(value)
    if size > MAX_BODY:
        _refuse(f"a value over {MAX_BODY:,} characters is not allowed")
    _spend(1, size)  # output captured by {% set %} blocks and macros is built too
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)[1:-1]
    return json.dumps(value, ensure_ascii=False, allow_nan=False, default=str)


@lru_cache(maxsize=1)
def _environment() -> Any:
    """Jinja2's immutable sandbox, StrictUndefined (a misspelt field is an error), every insertion JSON-escaped, and
    what a template may build and how long it may run bounded (see MAX_*)."""
    from jinja2 import StrictUndefined, TemplateSyntaxError, nodes, pass_context
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    from jinja2.visitor import NodeTransformer

    class Bound(NodeTransformer):
        """Each loop's items counted as steps, the template's own text counted as built, and `~` bounded: none of
        them passes through the sandbox's hooks."""

        def visit_For(self, node: Any) -> Any:  # noqa: N802 - the visitor's API
            if node.recursive:  # loop(x) runs the body again on x's items, past the counted iterable
                raise TemplateSyntaxError(
                    "a recursive loop (`for ... recursive`) is not allowed in a webhook's template", node.lineno
                )
            self.generic_visit(node)
            node.iter = nodes.Filter(node.iter, "radar_steps", [], [], None, None, lineno=node.lineno)
            return node

        def visit_Output(self, node: Any) -> Any:  # noqa: N802
            self.generic_visit(node)
            node.nodes = [
                nodes.Filter(nodes.Const(n.data), "radar_text", [], [], None, None, lineno=n.lineno)
                if isinstance(n, nodes.TemplateData)
                else n
                for n in node.nodes
            ]
            return node

        def visit_Concat(self, node: Any) -> Any:  # noqa: N802
            self.generic_visit(node)
            parts = nodes.Tuple(node.nodes, "load", lineno=node.lineno)
            return nodes.Filter(parts, "radar_concat", [], [], None, None, lineno=node.lineno)

    class Sandbox(ImmutableSandboxedEnvironment):
        intercepted_binops = frozenset({"*", "**", "+", "%"})

        def _parse(self, source: str, name: str | None, filename: str | None) -> Any:
            return Bound().visit(super()._parse(source, name, filename))

        def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
            numbers = [x for x in (left, right) if isinstance(x, int) and not isinstance(x, bool)]
            if operator == "**" and isinstance(right, int | float) and abs(right) > 64:
                _refuse("a power over 64 is not allowed")
            if operator == "**" and len(numbers) == 2 and left.bit_length() * abs(right) > MAX_BITS:
                _refuse(f"a number over {MAX_BITS} bits is not allowed")
            if operator == "*" and len(numbers) == 2 and sum(n.bit_length() for n in numbers) > MAX_BITS:
                _refuse(f"a number over {MAX_BITS} bits is not allowed")
            if operator == "*":
                size = next((_size(x) for x in (left, right) if isinstance(x, str | list | tuple)), None)
                times = next((x for x in (left, right) if isinstance(x, int)), None)
                if size is not None and times is not None and size * times > MAX_BODY:
                    _refuse(f"a repetition over {MAX_BODY:,} items is not allowed")
            if operator == "+" and all(isinstance(x, str | list | tuple) for x in (left, right)):
                if _size(left) + _size(right) > MAX_BODY:
                    _refuse(f"a value over {MAX_BODY:,} characters or items is not allowed")
            if operator == "%" and isinstance(left, str):
                _check_format(left, percent=True)
                _check_output("format", left, _arguments(right, left), percent=True)
                if _size(left) + _size(right) > MAX_BODY:
                    _refuse(f"a value over {MAX_BODY:,} characters is not allowed")
            return _made(super().call_binop(context, operator, left, right))

        def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805 - Jinja's API
            _spend(1)
            receiver, name = getattr(__obj, "__self__", None), getattr(__obj, "__name__", "")
            if isinstance(receiver, str) and name in _REFUSED:
                _refuse(f"str.{name} is not allowed")
            if isinstance(receiver, str) and name == "join":
                items = [*args[0]] if args and not isinstance(args[0], str | list | tuple) else args[0] if args else ()
                args = (items, *args[1:])
                _guard("join", items, (receiver,), {})
            elif isinstance(receiver, str) and name not in ("format", "format_map"):  # those: wrap_str_format
                _guard(name, receiver, args, kwargs)
            return _made(super().call(__context, __obj, *args, **kwargs))

        def wrap_str_format(self, value: Any) -> Any:
            name, text = getattr(value, "__name__", ""), getattr(value, "__self__", None)
            if name in ("format", "format_map"):
                _check_format(text, percent=False)
            wrapped = super().wrap_str_format(value)
            if wrapped is None:
                return None

            def checked(*args: Any, **kwargs: Any) -> Any:  # the result, estimated before it is built
                given = [*args, *kwargs.values()]
                if name == "format_map" and len(args) == 1 and isinstance(args[0], dict):
                    given = list(args[0].values())
                _check_output(name, text, given, percent=False)
                return wrapped(*args, **kwargs)

            return checked

    sandbox = Sandbox(undefined=StrictUndefined, autoescape=False, finalize=_insert, keep_trailing_newline=True)
    for unbounded in ("lipsum", "cycler", "joiner"):  # lipsum(n) builds n paragraphs
        del sandbox.globals[unbounded]
    del sandbox.filters["pprint"]  # indents each nesting level: its output is not bounded by its input
    sandbox.globals["range"] = _bounded_range
    sandbox.policies["json.dumps_kwargs"] = {"sort_keys": True, "allow_nan": False}
    tojson = sandbox.filters["tojson"]

    def strict_tojson(environment: Any, value: Any, indent: int | None = None) -> Any:
        if isinstance(value, StrictUndefined):
            value._fail_with_undefined_error()  # a missing field: its own error, naming it
        return tojson(environment, value, indent)

    strict_tojson.jinja_pass_arg = tojson.jinja_pass_arg  # type: ignore[attr-defined]
    sandbox.filters["tojson"] = strict_tojson
    sandbox.filters = {name: _bounded_filter(name, f) for name, f in sandbox.filters.items()}
    sandbox.filters["radar_steps"] = _steps
    sandbox.filters["radar_concat"] = _concat
    sandbox.filters["radar_text"] = pass_context(_text)  # with the context: never run as the template compiles
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
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise ConfigError(f"{setting}: the URL's port is not a port number: {shown!r}") from None
    if not allowed_hosts:
        raise ConfigError(f"{setting}: {HOSTS_SETTING} is empty: name the hosts webhooks may post to")
    if not any(_allowed(host, port, parts.scheme, pattern) for pattern in allowed_hosts):
        where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        raise ConfigError(f"{setting}: the URL's host and port {where!r} are not in {HOSTS_SETTING}")
    try:
        compiled = _environment().from_string(template)
    except TemplateSyntaxError as exc:
        raise ConfigError(f"{setting}: the template has a syntax error on line {exc.lineno}: {exc.message}") from None
    for sample in _samples():
        try:
            render_body(compiled, sample, "it")
        except ChannelError as exc:
            what = (
                "a canary detection"
                if sample["canary"]
                else "a regression"
                if sample["regression"]
                else "a load change"
            )
            raise ConfigError(f"{setting}: for {what}, {exc}") from None


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
        fields(facts, Detection((1, 2, 1, True), regression=regression), "sample"),
        fields(facts, Detection((1, 2, 2, True), change=change), "sample"),
        fields(canary, Detection((1, 3, 1, True), regression=replace(regression, cause="canary")), "sample"),
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
