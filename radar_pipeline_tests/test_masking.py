"""No secret in any error text, in any encoding an answer may echo it in (issue 40: a hostile error page echoing the
Authorization header with `/` written `\\/` kept a webhook's token in radar.alert.last_error and Dagster's event
log): one masking (config.masking.hidden), and every channel's quoting goes through it."""

from __future__ import annotations

import base64
import html
import json
import re
from collections.abc import Callable
from urllib.parse import quote, quote_plus, unquote

import pytest

from radar_pipeline.alerts import slack
from radar_pipeline.alerts.code_hosts import HostClient
from radar_pipeline.alerts.outlet_http import Http
from radar_pipeline.alerts.pagerduty import PagerDutyChannel
from radar_pipeline.config.masking import hidden, quoted

SECRET = "glsa_Zx9/Qp+Ab==to<k> en"


def _b64(prefix: str, urlsafe: bool = False) -> str:
    data = (prefix + SECRET).encode()
    return (base64.urlsafe_b64encode if urlsafe else base64.b64encode)(data).decode()


ECHOES = {
    "as written": SECRET,
    "JSON, / escaped": json.dumps(SECRET)[1:-1].replace("/", "\\/"),
    "JSON, \\u escapes": "".join(f"\\u{ord(c):04x}" for c in SECRET),
    "percent-encoded": quote(SECRET, safe=""),
    "percent-encoded, lower-case hex": re.sub(r"%[0-9A-F]{2}", lambda m: m.group(0).lower(), quote(SECRET, safe="")),
    "percent-encoded, / kept": quote(SECRET),
    "form-encoded": quote_plus(SECRET),
    "HTML-escaped": html.escape(SECRET),
    "HTML numeric": "".join(f"&#{ord(c)};" for c in SECRET),
    "JSON quoting a URL-encoded header": json.dumps(quote(SECRET, safe=""))[1:-1].replace("/", "\\/"),
    **{f"Basic user:token, offset {n}": _b64("u" * n + ":") for n in range(3)},
    "base64 URL-safe": _b64("user:", urlsafe=True),
}


def _quoters() -> dict[str, Callable[[str], str]]:
    return {
        "config.masking.quoted": lambda text: quoted(text, [SECRET], 10_000),
        "webhooks, Teams, Grafana (outlet_http.Http)": Http("the webhook", (SECRET,)).quote,
        "GitHub and GitLab (code_hosts.HostClient)": HostClient("github", "https://api.github.invalid", SECRET)._quote,
        "PagerDuty": PagerDutyChannel(SECRET)._quote,
        "Slack": lambda text: slack._shown(text, (SECRET,)),
    }


def _decoded(text: str) -> str:
    """What a reader could make of a quoted text by undoing each encoding."""
    text = html.unescape(text.replace("\\/", "/"))
    try:
        text = json.loads(f'"{text}"')
    except ValueError:
        pass
    return unquote(text)


@pytest.mark.parametrize("echo", ECHOES)
@pytest.mark.parametrize("quoter", _quoters())
def test_every_channel_quotes_an_echo_without_the_secret_in_any_encoding(quoter, echo):
    page = f"403 Forbidden: the proxy refused Authorization: Bearer {ECHOES[echo]} (rule 12)"
    shown = _quoters()[quoter](page)
    assert "***" in shown and "rule 12" in shown, shown
    assert SECRET not in _decoded(shown) and ECHOES[echo] not in shown, shown
    if echo.startswith("Basic") or echo.startswith("base64"):
        for token in shown.replace("*", " ").split():  # what is left of the header decodes to no part of the secret
            padded = token + "=" * (-len(token) % 4)
            try:
                decoded = base64.b64decode(padded.replace("-", "+").replace("_", "/"), validate=True)
            except ValueError:
                continue
            assert SECRET[:6].encode() not in decoded and SECRET[-6:].encode() not in decoded, token


def test_masking_leaves_other_text_alone_and_ignores_short_secrets():
    assert hidden("50% of 100%: ab%cd", ["ab%ce", None, "", "ab"]) == "50% of 100%: ab%cd"
    assert hidden("a \x1b]0;title\x07 b", []) == "a ]0;title b"  # printable, as before
    assert quoted("", [SECRET]) == "an empty body" and quoted("x " * 300, [], 10) == "x x x x x …"
