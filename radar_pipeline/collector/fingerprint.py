"""Query fingerprints: one 64-bit identity per normalised statement text, stable across queryid rotation."""

from __future__ import annotations

import hashlib
import re

from pglast import parser

_WHITESPACE = re.compile(r"\s+")


def fingerprint(text: str) -> int:
    """The libpg_query fingerprint of a statement text as a signed 64-bit integer (it fits a bigint column).

    The fingerprint ignores literal values, parameter numbers, comments and formatting, so the same statement keeps it
    when its queryid changes (a recreated table or function, a major upgrade). A text that does not parse (PostgreSQL
    syntax the parser version does not know) falls back to a hash of its whitespace-folded text.
    """
    try:
        digest = bytes.fromhex(parser.fingerprint(text))
    except parser.ParseError:
        folded = _WHITESPACE.sub(" ", text.strip()).lower().encode()
        digest = hashlib.blake2b(folded, digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)
