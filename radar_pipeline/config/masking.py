"""Secrets kept out of text: passwords in connection URLs masked, control characters removed from what is shown."""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Iterable
from urllib.parse import unquote

# scheme://user:password@ — the password runs to the last @ of the word: SQLAlchemy and libpq accept unencoded
# / # ? in it, which is where urlsplit (and masking built on it) goes wrong. Masking too much is harmless.
_URL_PASSWORD = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*:/{1,3}[^:/@\s]*):\S*@")
_KEYWORD_PASSWORD = re.compile(r"(password\s*=\s*)('[^']*'|\S+)", re.IGNORECASE)
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
MIN_SECRET = 4  # a shorter "secret" (an empty query value, a one-letter path part) would mask ordinary words
MIN_BASE64_CORE = 8  # the base64 characters a secret alone decides, at any offset, when they are at least this many
SHOWN = 300  # the characters of a foreign answer an error quotes


def mask_password(url: str) -> str:
    """Replace every password in a text holding postgresql:// URLs (parseable or not) or password=... keywords
    with ***."""
    url = _KEYWORD_PASSWORD.sub(r"\1***", url)
    return _URL_PASSWORD.sub(r"\g<head>:***@", url)


def url_password(dsn: str) -> str | None:
    """The password a URL carries, as written (None when it has none), found the way mask_password finds it."""
    match = re.match(r"[A-Za-z][A-Za-z0-9+.-]*:/{1,3}[^:/@\s]*:(\S*)@", dsn.strip())
    if match and match.group(1):
        return match.group(1)
    keyword = _KEYWORD_PASSWORD.search(dsn)
    return keyword.group(2).strip("'") if keyword else None


def scrub_secret(text: str, dsn: str) -> str:
    """Remove a DSN's password from an error text, wherever and however it appears (`hidden`: as written,
    percent-decoded or encoded, escaped), and every password a URL or keyword in it shows."""
    password = url_password(dsn)
    if password and len(password) >= MIN_SECRET:
        text = hidden(text, [password])
    elif password:  # too short for its encodings to be told from other text: as written, wherever it is
        for form in sorted({password, unquote(password)}, key=len, reverse=True):
            text = text.replace(form, "***") if form else text
    return mask_password(text)


def printable(text: str) -> str:
    """Text for a terminal or a UI cell: control characters other than newline and tab (escape sequences, C1 codes,
    bidi overrides) removed, so hostile statement text cannot retitle a terminal or move the cursor."""
    return _CONTROL.sub("", text)


def mask_query(url: str) -> str:
    """A URL fit to show when its query string may hold a secret (a Teams Workflows URL's `sig=`): the query and the
    fragment replaced with ***, the user name and password dropped."""
    head = url.split("#", 1)[0]
    base, _, query = head.partition("?")
    scheme, sep, rest = base.partition("://")
    if sep:
        host, slash, path = rest.partition("/")
        base = f"{scheme}://{host.rpartition('@')[2]}{slash}{path}"
    return f"{printable(base)}?***" if query else printable(base)


def _char_pattern(char: str) -> str:
    """A regular expression for one character of a secret as an echo may write it: itself, percent-encoded (either
    case; `+` for a space), JSON-escaped (a \\u escape; `\\/` for a slash) or HTML-escaped (named or numeric)."""
    alternatives = [re.escape(char), "".join(f"%(?i:{byte:02x})" for byte in char.encode())]
    if ord(char) < 0x10000:
        alternatives.append(f"\\\\u(?i:{ord(char):04x})")
    alternatives.append(f"&#(?:{ord(char)}|(?i:x0*{ord(char):x}));")
    if char == "/":
        alternatives.append(r"\\/")
    elif char == " ":
        alternatives.append(r"\+")
    escaped = html.escape(char)
    if escaped != char:
        alternatives.append(re.escape(escaped))
    return f"(?:{'|'.join(alternatives)})"


def secret_pattern(secret: str) -> re.Pattern[str] | None:
    """What `hidden` replaces of one secret (None when it is shorter than MIN_SECRET): the secret as written or
    percent-decoded, each of its characters written in any of the ways `_char_pattern` knows, mixed as they come (a
    JSON answer quoting a URL-encoded header), and the base64 characters, standard or URL-safe, that the secret alone
    decides wherever it sits in an encoded header (`Authorization: Basic …` holds `user:token`)."""
    if len(secret) < MIN_SECRET:
        return None
    spelled = ["".join(_char_pattern(c) for c in text) for text in sorted({secret, unquote(secret)}, key=len)[::-1]]
    raw = secret.encode()
    cores = set()
    for offset in range(3):  # the secret's bytes at each position in a 3-byte group of a longer base64 text
        encoded = base64.b64encode(b"\0" * offset + raw).decode()
        core = encoded[4 * -(-offset // 3) : 4 * ((offset + len(raw)) // 3)]
        if len(core) >= MIN_BASE64_CORE:
            cores |= {core, core.replace("+", "-").replace("/", "_")}
    return re.compile("|".join([*spelled, *(re.escape(c) for c in sorted(cores, key=len, reverse=True))]))


def hidden(text: str, secrets: Iterable[str | None]) -> str:
    """`text` fit to store, log and show: each secret, in every form an answer may echo it (secret_pattern),
    replaced with ***, the longest secrets first (before the text is cut, so no part of one is left), and
    printable."""
    for secret in sorted({s for s in secrets if s}, key=len, reverse=True):
        pattern = secret_pattern(secret)
        if pattern is not None:
            text = pattern.sub("***", text)
    return printable(text)


def quoted(text: str, secrets: Iterable[str | None], limit: int = SHOWN) -> str:
    """A foreign answer as an error quotes it: hidden, on one line, cut to `limit` characters ("an empty body")."""
    shown = " ".join(hidden(text, secrets).split())
    return (f"{shown[:limit]}…" if len(shown) > limit else shown) or "an empty body"
