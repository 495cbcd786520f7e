"""Secrets kept out of text: passwords in connection URLs masked, control characters removed from what is shown."""

from __future__ import annotations

import re
from urllib.parse import unquote

# scheme://user:password@ — the password runs to the last @ of the word: SQLAlchemy and libpq accept unencoded
# / # ? in it, which is where urlsplit (and masking built on it) goes wrong. Masking too much is harmless.
_URL_PASSWORD = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*:/{1,3}[^:/@\s]*):\S*@")
_KEYWORD_PASSWORD = re.compile(r"(password\s*=\s*)('[^']*'|\S+)", re.IGNORECASE)
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


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
    """Remove a DSN's password from an error text, wherever it appears (as written and percent-decoded)."""
    password = url_password(dsn)
    if password:
        for form in sorted({password, unquote(password)}, key=len, reverse=True):
            if form:
                text = text.replace(form, "***")
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
