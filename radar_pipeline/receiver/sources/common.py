"""What the sources share: the JSON body read strictly, typed fields taken from it with a one-line reason naming
the field, and the constant-time checks of a token and of an HMAC-SHA256 signature."""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from collections.abc import Mapping
from typing import Any

from radar_pipeline.receiver.sources.base import Refused

SURROGATE = re.compile("[\ud800-\udfff]")


def json_object(body: bytes) -> dict[str, Any]:
    """The body as a JSON object (UTF-8; NaN, Infinity and lone surrogates refused: PostgreSQL stores none of them),
    else Refused(400)."""
    try:
        found = json.loads(body.decode("utf-8"), parse_constant=_no_constant)
    except UnicodeDecodeError as exc:
        raise Refused(400, f"the body is not UTF-8 (byte 0x{exc.object[exc.start]:02x} at {exc.start})") from None
    except RecursionError:
        raise Refused(400, "the body's JSON is nested too deeply") from None
    except ValueError as exc:
        raise Refused(400, f"the body is not JSON: {str(exc).splitlines()[0]}") from None
    if not isinstance(found, dict):
        raise Refused(400, f"the body must be a JSON object, not {type(found).__name__}")
    unicode_only(found)
    return found


def unicode_only(value: Any, where: str = "") -> None:
    """Refused(400) naming the field when a string anywhere in `value` (a JSON value: keys too) holds a lone
    surrogate, which JSON's \\ud800 escapes allow but PostgreSQL cannot store (as text or jsonb)."""
    # Not recursive (the parser's nesting limit is deeper than Python's stack allows here), and no path is built
    # until a surrogate is found: a container waiting its turn keeps only its parent's crumb and its own key (many
    # values under a long key do not each copy it), and strings and numbers are checked at once, never queued.
    if isinstance(value, str):
        if SURROGATE.search(value):
            raise Refused(400, f"{where or 'the body'} holds a lone surrogate (not valid Unicode text)")
        return
    stack: list[tuple[Crumb, Any]] = [(None, value)] if isinstance(value, (dict, list)) else []
    while stack:
        crumb, node = stack.pop()
        for key, item in node.items() if isinstance(node, dict) else enumerate(node):
            if isinstance(key, str) and SURROGATE.search(key):
                where_key = _path(crumb, where)
                raise Refused(400, f"a key in {where_key} holds a lone surrogate (not valid Unicode text)")
            if isinstance(item, str):
                if SURROGATE.search(item):
                    raise Refused(400, f"{_path((crumb, key), where)} holds a lone surrogate (not valid Unicode text)")
            elif isinstance(item, (dict, list)) and item:
                stack.append(((crumb, key), item))


Crumb = tuple[Any, str | int] | None  # (the parent's crumb, the key or index), None at the top
MAX_PATH = 200  # a longer path is shown cut in its middle: a reason stays one short line


def _path(crumb: Crumb, where: str) -> str:
    """The dotted path a crumb stands for (`where` first), cut to MAX_PATH characters; 'the body' when empty."""
    parts: list[str] = []
    while crumb is not None:
        crumb, key = crumb
        parts.append(f"[{key}]" if isinstance(key, int) else f".{key}")
    path = where + "".join(reversed(parts))
    if not where and path.startswith("."):
        path = path[1:]
    if len(path) > MAX_PATH:
        path = f"{path[: MAX_PATH // 2]}…{path[-MAX_PATH // 2 :]}"
    return path or "the body"


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not a JSON number")


def obj(data: Mapping[str, Any], name: str, where: str = "") -> dict[str, Any]:
    """The object under `name`, else Refused(400) naming it."""
    value = data.get(name)
    if not isinstance(value, dict):
        raise Refused(400, f"{where}{name} is missing or not an object")
    return value


def text(data: Mapping[str, Any], name: str, where: str = "", required: bool = False) -> str | None:
    """The string under `name` (None when absent, null or empty, unless required), else Refused(400) naming it."""
    value = data.get(name)
    if value is None or value == "":
        if required:
            raise Refused(400, f"{where}{name} is missing")
        return None
    if not isinstance(value, str):
        raise Refused(400, f"{where}{name} must be a string, not {type(value).__name__}")
    unicode_only(value, f"{where}{name}")
    return value


def whole(data: Mapping[str, Any], name: str, where: str = "", required: bool = False) -> int | None:
    """The positive whole number under `name` (None when absent, unless required), else Refused(400) naming it."""
    value = data.get(name)
    if value is None:
        if required:
            raise Refused(400, f"{where}{name} is missing")
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not 0 < value < 2**63:
        raise Refused(400, f"{where}{name} must be a positive whole number")
    return value


def header(headers: Mapping[str, str], name: str) -> str | None:
    """A header's value (names lower-case), None when absent or empty."""
    value = headers.get(name.lower())
    return value if value else None


def bearer(headers: Mapping[str, str]) -> str | None:
    """The token of an `Authorization: Bearer <token>` header, or None."""
    scheme, _, token = (header(headers, "authorization") or "").partition(" ")
    return (token.strip() or None) if scheme.lower() == "bearer" else None


def same_token(given: str | None, secret: str) -> bool:
    """Whether a token given matches the secret, compared in constant time (as bytes: any text compares)."""
    return given is not None and hmac.compare_digest(given.encode(), secret.encode())


def signed(body: bytes, signature: str | None, secret: str, prefix: str = "sha256=") -> bool:
    """Whether `signature` is `prefix` + the hex HMAC-SHA256 of the body under the secret (constant time)."""
    expected = prefix + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return signature is not None and hmac.compare_digest(signature.strip().lower().encode(), expected.encode())
