"""What the Kubernetes tools' sources (Argo CD, Flux, Argo Rollouts) share (the body is read by common.json_object):
each field taken with its type and the deploy event's own text rules (radar_pipeline.warehouse.deploys: its control
characters and length limit), object names checked as Kubernetes names, a deploy id stable for the facts that make
a deploy, and the bearer token or HMAC signature checked in constant time. Pure: no I/O."""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from radar_pipeline.receiver.sources import common
from radar_pipeline.receiver.sources.base import Refused
from radar_pipeline.warehouse import deploys

# A Kubernetes object name (a DNS subdomain, RFC 1123): what Argo CD, Flux and Rollouts objects are named.
KUBE_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
MAX_KUBE_NAME = 253
DIGEST = 16  # hex characters of the deploy id's hash: 64 bits, no collision among a warehouse's deploys
HMAC_HASHES = {"sha224", "sha256", "sha384", "sha512"}  # what Flux's documented verifier accepts


def section(obj: Mapping[str, Any], key: str, where: str = "") -> dict[str, Any]:
    """obj[key], which must be a JSON object (422 naming the field)."""
    value = obj.get(key)
    if not isinstance(value, dict):
        raise Refused(422, f"{where}{key} is {'missing' if value is None else 'a ' + _kind(value)}: an object needed")
    return value


def text(obj: Mapping[str, Any], key: str, where: str = "", required: bool = True) -> str | None:
    """obj[key] as a string that a deploy event may hold: no control characters, at most deploys.MAX_TEXT characters
    (422 naming the field); None when absent or null and not required. An empty string is absent."""
    value = obj.get(key)
    if value is None or value == "":
        if required:
            raise Refused(422, f"{where}{key} is missing")
        return None
    if not isinstance(value, str):
        raise Refused(422, f"{where}{key} is a {_kind(value)}, not a string")
    if len(value) > deploys.MAX_TEXT:
        raise Refused(422, f"{where}{key} is longer than {deploys.MAX_TEXT} characters")
    if deploys.CONTROL.search(value):
        raise Refused(422, f"{where}{key} holds control characters (a newline, an escape sequence)")
    common.unicode_only(value, f"{where}{key}")
    return value


def kube_name(obj: Mapping[str, Any], key: str, where: str = "") -> str:
    """obj[key] as a Kubernetes object name (422 naming the field when it is not one)."""
    value = text(obj, key, where)
    assert value is not None
    if len(value) > MAX_KUBE_NAME or not KUBE_NAME.fullmatch(value):
        raise Refused(422, f"{where}{key} is not a Kubernetes name (lowercase letters, digits, '-' and '.')")
    return value


def timestamp(obj: Mapping[str, Any], key: str, where: str = "") -> datetime:
    """obj[key] as a time with its zone, by deploys.parse_time's rules (422 naming the field)."""
    value = text(obj, key, where)
    assert value is not None
    try:
        return deploys.parse_time(value, f"{where}{key}")
    except deploys.DeployError as exc:
        raise Refused(422, str(exc)) from None


def target(obj: Mapping[str, Any], params: Mapping[str, str]) -> str:
    """The watched database the deploy is for: the URL's ?target=, or the body's target (the same when both; a
    source whose bodies cannot name it passes an empty obj)."""
    given = text(params, "target", "the URL's ?", required=False)
    written = text(obj, "target", required=False)
    if given and written and given != written:
        raise Refused(422, "target differs between the URL's ?target= and the body: give one")
    found = given or written
    if not found:
        where = "add ?target=NAME to the URL" + (", or a target field to the body" if obj else "")
        raise Refused(422, f"target is missing: {where}")
    return found


def stable_id(prefix: str, readable: str, *facts: str) -> str:
    """A deploy id that is the same whenever the same facts are reported (a re-delivery is the same deploy):
    prefix:readable, cut to fit, then a hash of the facts. `readable` holds only Kubernetes name characters."""
    digest = hashlib.sha256(json.dumps([prefix, *facts]).encode()).hexdigest()[:DIGEST]
    head = f"{prefix}:{readable}"[: 128 - DIGEST - 1]
    return f"{head}:{digest}"


def event(**fields: Any) -> deploys.DeployEvent:
    """The deploy event, validated by its own rules (422 with the rule's message when one is broken)."""
    try:
        return deploys.DeployEvent(**fields)
    except deploys.DeployError as exc:
        raise Refused(422, str(exc)) from None


def check_bearer(headers: Mapping[str, str], secret: str) -> None:
    """The request carries `Authorization: Bearer <secret>` (401 otherwise), compared in constant time."""
    _configured(secret)
    value = headers.get("authorization")
    if value is None:
        raise Refused(401, "the Authorization header is missing: send Authorization: Bearer <token>")
    scheme, _, token = value.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Refused(401, "the Authorization header is not of the form Bearer <token>")
    if not hmac.compare_digest(_bytes(token.strip()), _bytes(secret)):
        raise Refused(401, "the bearer token is not the one configured for this source")


def check_signature(headers: Mapping[str, str], body: bytes, secret: str, header: str = "x-signature") -> None:
    """The header holds <hash>=<hex HMAC of the body keyed with the secret> (401 otherwise), compared in constant
    time."""
    _configured(secret)
    value = headers.get(header)
    if value is None:
        raise Refused(401, f"the {header} header is missing")
    algorithm, _, given = value.strip().partition("=")
    if algorithm.lower() not in HMAC_HASHES:
        raise Refused(401, f"the {header} header is not of the form sha256=<hex>")
    expected = hmac.new(_bytes(secret), body, algorithm.lower()).hexdigest()
    if not hmac.compare_digest(_bytes(given.strip().lower()), expected.encode()):
        raise Refused(401, f"the {header} signature does not match the body")


def _configured(secret: str) -> None:
    if not secret:
        raise Refused(401, "no secret is configured for this source")


def _bytes(value: str) -> bytes:
    return value.encode("utf-8", "replace")


def _kind(value: object) -> str:
    """The JSON name of a value's type, for messages (never the value itself)."""
    if isinstance(value, bool):
        return "boolean"
    return {dict: "object", list: "array", str: "string", int: "number", float: "number"}.get(type(value), "null")
