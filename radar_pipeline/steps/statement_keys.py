"""Stored statement keys brought to the current key (sql/0008): every statement of radar.query gets the key of its
text, and every table that carries a statement's key follows, in one transaction. And stored texts cleaned of what
the collector now redacts (a utility statement's literals, such as a CREATE ROLE's password), their keys following."""

from __future__ import annotations

import json
import re

import sqlalchemy as sa
from pglast import parser

from radar_pipeline.collector.fingerprint import REDACTED, STRING_TOKENS, fingerprint, redact
from radar_pipeline.warehouse import history, snapshots
from radar_pipeline.warehouse.snapshots import MAX_QUERY_TEXT

KEY_VERSION = 2
# From version 3 the stored texts are redacted from the scanner's tokens. The first redaction read a text the parser
# rejected with a regex, which a quote in a comment or an E'\'' could put out of step, keeping a literal (a password)
# between two '<redacted>': the upgrade to 3 blanks such texts from their first quote on, once.
TEXT_VERSION = 3
_STATEMENT = "target, dbid, userid, queryid, toplevel"
# Tables whose rows name a statement and carry its key; history and episodes have a key per query in their primary
# key, so two of their rows that now share one keep the one with more calls (the later episode).
_FOLLOWERS = ("radar.pgss_snapshot", "radar.verdict")
_DEDUPED = {
    "radar.query_history": ("deploy_id", "calls DESC, queryid"),
    "radar.regression_episode": ("opened_by", "opened_at DESC, queryid"),
}


def rekey(engine: sa.Engine) -> int:
    """Recompute the stored statement keys when they predate KEY_VERSION; returns the statements whose key changed.

    Texts cut to the stored length (MAX_QUERY_TEXT) keep their key: the cut text would not parse as the whole did.
    """
    with engine.begin() as conn:
        version = conn.execute(sa.text("SELECT version FROM radar.key_version FOR UPDATE")).scalar_one()
        if version >= KEY_VERSION:
            return 0
        _lock_writers(conn)
        rows = conn.execute(sa.text(f"SELECT {_STATEMENT}, fingerprint, query FROM radar.query")).fetchall()
        remap = [
            (*r[:5], new)
            for r in rows
            if len(r.query) < MAX_QUERY_TEXT and (new := fingerprint(r.query)) != r.fingerprint
        ]
        _follow(conn, remap)
        conn.execute(sa.text("UPDATE radar.key_version SET version = :v"), {"v": KEY_VERSION})
    return len(remap)


def redact_texts(engine: sa.Engine) -> int:
    """Redact the stored statement texts as the collector now does (collector/fingerprint.py's `redact`), each
    statement's key following its text as `rekey` would have it; returns the texts changed. Idempotent: a redacted
    text is left as it is. Texts cut to the stored length keep their key, as in `rekey`."""
    # only a text with a quote, a dollar quote ($$, $tag$; not $1) or a SET can hold a literal
    literals = sa.text(
        f"SELECT {_STATEMENT}, fingerprint, query FROM radar.query "
        "WHERE strpos(query, chr(39)) > 0 OR query ~ '[$]([^$[:digit:][:space:]][^$[:space:]]*)?[$]' "
        "OR query ~* '\\mset\\M'"
    )
    version_sql = "SELECT version FROM radar.key_version"
    with engine.connect() as conn:  # the usual case, nothing to redact, holds no lock
        version = conn.execute(sa.text(version_sql)).scalar_one()
        if version >= TEXT_VERSION and all(redact(r.query) == r.query for r in conn.execute(literals)):
            return 0
    with engine.begin() as conn:
        version = conn.execute(sa.text(version_sql + " FOR UPDATE")).scalar_one()
        _lock_writers(conn)
        changed = [
            (r, text) for r in conn.execute(literals).fetchall() if (text := _redacted(r.query, version)) != r.query
        ]
        if changed:
            columns = [list(c) for c in zip(*(r[:5] for r, _ in changed), strict=True)]
            conn.execute(
                sa.text(
                    "UPDATE radar.query x SET query = t.query FROM unnest(CAST(:t AS text[]), CAST(:d AS oid[]), "
                    "CAST(:u AS oid[]), CAST(:q AS bigint[]), CAST(:l AS boolean[]), CAST(:text AS text[])) "
                    f"AS t({_STATEMENT}, query) WHERE " + " AND ".join(f"x.{c} = t.{c}" for c in _STATEMENT.split(", "))
                ),
                {**dict(zip("tduql", columns, strict=True)), "text": [text[:MAX_QUERY_TEXT] for _, text in changed]},
            )
            remap = [
                (*r[:5], new)
                for r, text in changed
                if len(r.query) < MAX_QUERY_TEXT and (new := fingerprint(text)) != r.fingerprint
            ]
            _follow(conn, remap)
        # after rekey's version (KEY_VERSION) only: a warehouse whose keys predate it keeps its version for rekey
        conn.execute(sa.text("UPDATE radar.key_version SET version = :v WHERE version = :v - 1"), {"v": TEXT_VERSION})
    return len(changed)


def _redacted(text: str, version: int) -> str:
    """`text` redacted as the collector now does; before TEXT_VERSION, a text the first redaction's regex may have
    put out of step is blanked from its first quote on first."""
    if version < TEXT_VERSION and _by_the_regex(text):
        text = re.split("['$]", text, maxsplit=1)[0] + REDACTED
    return redact(text)


def _by_the_regex(text: str) -> bool:
    """Whether the first redaction may have stored `text` through its regex: it holds a '<redacted>', and is not a
    statement the parser reads whose every literal is one (what its scanner path stored)."""
    if REDACTED not in text:
        return False
    try:
        if not json.loads(parser.parse_sql_json(text)).get("stmts"):
            return True
        return any(text[t.start : t.end + 1] != REDACTED for t in parser.scan(text) if t.name in STRING_TOKENS)
    except (parser.ParseError, ValueError):
        return True


def _lock_writers(conn: sa.Connection) -> None:
    # Every target's snapshot and history writers wait until the keys are rewritten: a scrape that read the old
    # keys before this transaction would otherwise write them back after it.
    for (target,) in conn.execute(sa.text("SELECT DISTINCT target FROM radar.query ORDER BY target")):
        snapshots.lock_target(conn, target)
        history.lock_target(conn, target)


def _follow(conn: sa.Connection, remap: list[tuple]) -> None:
    """Give each statement of `remap` ((target, dbid, userid, queryid, toplevel, new key) tuples) its new key in
    radar.query and in every table that carries it."""
    if not remap:
        return
    conn.execute(
        sa.text(
            "CREATE TEMP TABLE key_remap (target text, dbid oid, userid oid, queryid bigint, toplevel boolean, "
            "new bigint) ON COMMIT DROP"
        )
    )
    columns = list(zip(*remap, strict=True))
    conn.execute(
        sa.text(
            "INSERT INTO key_remap SELECT * FROM unnest(CAST(:t AS text[]), CAST(:d AS oid[]), "
            "CAST(:u AS oid[]), CAST(:q AS bigint[]), CAST(:l AS boolean[]), CAST(:n AS bigint[]))"
        ),
        dict(zip("tduqln", (list(c) for c in columns), strict=True)),
    )
    match = " AND ".join(f"x.{c} = m.{c}" for c in _STATEMENT.split(", "))
    for table in ("radar.query", *_FOLLOWERS):
        conn.execute(sa.text(f"UPDATE {table} x SET fingerprint = m.new FROM key_remap m WHERE {match}"))
    # compacted days hold the key of each sample (sql/0013)
    conn.execute(
        sa.text(
            "UPDATE radar.pgss_compact x SET fingerprint = array_fill(m.new, ARRAY[cardinality(x.fingerprint)]) "
            f"FROM key_remap m WHERE {match}"
        )
    )
    for table, (unique, keep) in _DEDUPED.items():
        # the key each row will have, then drop all but one row per (query, unique) before updating
        conn.execute(
            sa.text(
                f"DELETE FROM {table} y USING ("
                f"  SELECT x.ctid AS row_id, row_number() OVER (PARTITION BY x.target, x.dbid, x.userid, "
                f"  x.toplevel, coalesce(m.new, x.fingerprint), x.{unique} ORDER BY x.{keep.replace(', ', ', x.')}"
                f"  ) AS rank FROM {table} x LEFT JOIN key_remap m ON {match}) d "
                "WHERE y.ctid = d.row_id AND d.rank > 1"
            )
        )
        conn.execute(sa.text(f"UPDATE {table} x SET fingerprint = m.new FROM key_remap m WHERE {match}"))
