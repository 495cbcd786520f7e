"""The process that renders a webhook's template, started by alerts/webhook.py as `python -I webhook_render.py MEMORY
SECONDS MAX_BODY` with an empty environment: its address space is capped at MEMORY bytes and its CPU time at SECONDS
before Jinja2 loads (the parent stops it at SECONDS of wall-clock time too), so whatever the template builds or
however long it loops, only this process pays.

It reads {"template": text, "contexts": [fields, ...]} as JSON on stdin and writes JSON on stdout: {"syntax": [line,
message]} for a template that does not parse, else one {"body": text} or {"error": why} for each context. A body is
valid JSON (no NaN or Infinity, no key given twice) of at most MAX_BODY bytes. It imports nothing of radar's."""

from __future__ import annotations

import json
import resource
import sys
from typing import Any

MAX_ERROR = 500  # characters of an error's text (an exception may quote a huge value)


def main(argv: list[str]) -> None:
    """Cap this process, then render each context of the request on stdin and write the results on stdout."""
    memory, seconds, max_body = (int(a) for a in argv[1:4])
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_CPU, (seconds, seconds + 1))
    from jinja2 import TemplateSyntaxError

    request = json.loads(sys.stdin.buffer.read())
    try:
        template = _environment().from_string(request["template"])
    except TemplateSyntaxError as exc:
        _answer({"syntax": [exc.lineno, _cut(exc.message or "")]})
        return
    except Exception as exc:  # noqa: BLE001 - Jinja folds constants as it compiles: `"x" * 10**9` fails here
        _answer([_failure(exc, memory)] * len(request["contexts"]))
        return
    _answer([_render(template, context, max_body, memory) for context in request["contexts"]])


def _render(template: Any, context: dict[str, Any], max_body: int, memory: int) -> dict[str, str]:
    parts: list[str] = []
    size = 0
    try:
        for part in template.generate(context):
            size += len(part.encode())
            if size > max_body:
                return {"error": f"rendered over {max_body:,} bytes"}
            parts.append(part)
        text = "".join(parts)
    except Exception as exc:  # noqa: BLE001 - the user's template: whatever it raises is its fault, final, said
        # (a filter's own assertion, `truncate(n)` with n < 0 for some detection, is no TemplateError)
        return _failure(exc, memory)
    try:
        json.loads(text, parse_constant=_not_json, object_pairs_hook=_no_key_twice)
    except ValueError as exc:
        return {"error": _cut(f"did not render valid JSON: {exc}")}
    return {"body": text}


def _failure(exc: BaseException, memory: int) -> dict[str, str]:
    from jinja2.exceptions import SecurityError

    if isinstance(exc, MemoryError):
        return {"error": f"needed over {memory // 2**20} MB of memory"}
    if isinstance(exc, SecurityError):
        return {"error": _cut(f"was stopped by the sandbox: {exc}")}
    return {"error": _cut(f"failed: {type(exc).__name__}: {exc}")}


def _environment() -> Any:
    """Jinja2's immutable sandbox, StrictUndefined (a misspelt field is an error), every insertion JSON-escaped."""
    from jinja2 import StrictUndefined
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    sandbox = ImmutableSandboxedEnvironment(
        undefined=StrictUndefined, autoescape=False, finalize=_insert, keep_trailing_newline=True
    )
    sandbox.policies["json.dumps_kwargs"] = {"sort_keys": True, "allow_nan": False}
    tojson = sandbox.filters["tojson"]

    def strict_tojson(environment: Any, value: Any, indent: int | None = None) -> Any:
        if isinstance(value, StrictUndefined):
            value._fail_with_undefined_error()  # a missing field: its own error, naming it
        return tojson(environment, value, indent)

    strict_tojson.jinja_pass_arg = tojson.jinja_pass_arg  # type: ignore[attr-defined]
    sandbox.filters["tojson"] = strict_tojson
    return sandbox


def _insert(value: Any) -> Any:
    """How `{{ value }}` is written: JSON-escaped (a string's characters for use between quotes, anything else as a
    JSON value; an infinity or NaN the template computed is an error); tojson's output (Markup) is already JSON."""
    from jinja2 import Undefined

    if hasattr(value, "__html__"):
        return value
    if isinstance(value, Undefined):
        return str(value)  # StrictUndefined: raises, naming the field
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)[1:-1]
    return json.dumps(value, ensure_ascii=False, allow_nan=False, default=str)


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


def _cut(text: str) -> str:
    return text if len(text) <= MAX_ERROR else text[: MAX_ERROR - 1] + "…"


def _answer(value: Any) -> None:
    sys.stdout.buffer.write(json.dumps(value, ensure_ascii=False).encode())


if __name__ == "__main__":
    main(sys.argv)
