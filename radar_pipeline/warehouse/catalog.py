"""Catalog and settings facts in the warehouse (sql/0023): only what changed is stored, and the changes of a window are
read back as named changes (radar_pipeline/named_changes.py) with a statement to undo them where one can be derived.

Each successful catalog read is a capture (radar.catalog_capture). A version of an object or setting is stored when it
first differs from the last stored one (radar.catalog_fact; its disappearance is a version with no value), with the
capture before it, the last that still showed the old state: the change happened between the two.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa

from radar_pipeline.config.queries import sql_text
from radar_pipeline.engine.vocabulary import ChangeKind
from radar_pipeline.named_changes import NamedChange

INVALID = " [invalid]"
DISABLED = " [disabled]"
_PLAIN_IDENT = re.compile(r"^[a-z_][a-z0-9_$]*$")
_CREATE_INDEX = re.compile(r"^(CREATE (?:UNIQUE )?INDEX) ")
REDACTED = "<redacted>"  # collector/fingerprint.redact's mark


def _lock(conn: sa.Connection, target: str) -> None:
    conn.execute(sa.text("SELECT pg_advisory_xact_lock(hashtextextended('radar.catalog:' || :t, 0))"), {"t": target})


def due(conn: sa.Connection, target: str, interval: timedelta) -> bool:
    """Whether the target's catalog is to be read at this scrape: never captured, its last capture `interval` old or
    more (less a tenth: it is stamped late in its scrape, and the next scrape's check must not find it a little
    short), or a deploy recorded for the target since (so the capture after a deploy is the next scrape's). Both times
    by the warehouse's clock."""
    return bool(
        conn.execute(
            sa.text(
                "SELECT coalesce(max(c.recorded_at) <= now() - :i * 0.9 OR EXISTS (SELECT 1 FROM radar.deploy_event d "
                "WHERE d.target = :t AND d.received_at > max(c.recorded_at)), true) "
                "FROM radar.catalog_capture c WHERE c.target = :t"
            ),
            {"t": target, "i": interval},
        ).scalar_one()
    )


def kinds_to_read(
    conn: sa.Connection, target: str, dbid: int, digests: Mapping[str, str], server: str = ""
) -> list[str]:
    """The kinds whose digest differs from the last stored one (or of another database or server, or never
    stored)."""
    stored = {
        r.kind: (r.dbid, r.server, r.digest)
        for r in conn.execute(
            sa.text("SELECT kind, dbid, server, digest FROM radar.catalog_digest WHERE target = :t"), {"t": target}
        )
    }
    return [k for k, d in digests.items() if stored.get(k) != (dbid, server, d)]


def write_capture(
    conn: sa.Connection,
    target: str,
    captured_at: datetime,
    dbid: int,
    digests: Mapping[str, str],
    kinds_read: Sequence[str],
    facts: Sequence[Mapping[str, Any]],
    server: str = "",
) -> int:
    """Store one capture (at `captured_at` by the watched server's clock, of database `dbid` on the server
    identified by `server`; `facts` every fact of the kinds read, as collector/catalog.py's CatalogFact fields), in
    the caller's transaction, under the target's lock: the versions of the kinds read that differ from the last
    stored ones (a disappearance too), and the new digests. Returns the versions written; a capture not newer than
    the target's last one writes nothing (0).

    A new baseline, naming nothing (versions with no capture before them): every kind last stored of another database
    or server (a target re-pointed), and the statistics of a capture in which every table that had them lost them at
    once (a stats reset, a crash or a failover seen where no other signal is readable)."""
    _lock(conn, target)
    at = captured_at
    last = conn.execute(
        sa.text("SELECT max(captured_at) FROM radar.catalog_capture WHERE target = :t"), {"t": target}
    ).scalar_one()
    if last is not None and last >= at:
        return 0
    conn.execute(
        sa.text(
            "INSERT INTO radar.catalog_capture (target, captured_at, dbid, server, kinds_read) "
            "VALUES (:t, :at, :d, :s, :k)"
        ),
        {"t": target, "at": at, "d": dbid, "s": server, "k": list(kinds_read)},
    )
    if not kinds_read:  # the usual capture: nothing changed
        return 0
    known = {
        r[0]
        for r in conn.execute(
            sa.text(
                "SELECT kind FROM radar.catalog_digest WHERE target = :t AND kind = ANY(:k) AND dbid = :d "
                "AND server = :s"
            ),
            {"t": target, "k": list(kinds_read), "d": dbid, "s": server},
        )
    }
    current = {
        (r.kind, r.identity): r.value
        for r in conn.execute(
            sa.text(
                "SELECT DISTINCT ON (kind, identity) kind, identity, value FROM radar.catalog_fact "
                "WHERE target = :t AND kind = ANY(:k) ORDER BY kind, identity, first_seen_at DESC"
            ),
            {"t": target, "k": list(kinds_read)},
        )
        if r.value is not None
    }
    seen = {(f["kind"], f["identity"]) for f in facts}
    analysed = [key for key, value in current.items() if key[0] == "statistics" and value == "analysed"]
    lost = [f for f in facts if f["kind"] == "statistics" and f["value"] != "analysed"]
    if len(analysed) > 1 and {(f["kind"], f["identity"]) for f in lost} >= set(analysed):
        known.discard("statistics")
    params = [
        {**f, "t": target, "at": at, "before": last if f["kind"] in known else None}
        for f in facts
        if current.get((f["kind"], f["identity"])) != f["value"]
    ]
    gone = [
        {"kind": kind, "identity": identity, "before": last if kind in known else None}
        for (kind, identity) in current
        if (kind, identity) not in seen
    ]
    if params:
        conn.execute(
            sa.text(
                "INSERT INTO radar.catalog_fact (target, kind, identity, dbid, roleid, relation, name, role, database, "
                "value, first_seen_at, last_seen_before) VALUES (:t, :kind, :identity, :dbid, :roleid, :relation, "
                ":name, :role, :database, :value, :at, :before)"
            ),
            params,
        )
    if gone:
        # the disappearance keeps the object's description from its last version
        conn.execute(
            sql_text("warehouse.insert_catalog_facts"),
            [{"t": target, "at": at, **g} for g in gone],
        )
    conn.execute(
        sa.text(
            "INSERT INTO radar.catalog_digest (target, kind, dbid, server, digest) "
            "VALUES (:t, :kind, :d, :s, :digest) ON CONFLICT (target, kind) DO UPDATE SET dbid = excluded.dbid, "
            "server = excluded.server, digest = excluded.digest"
        ),
        [{"t": target, "kind": k, "d": dbid, "s": server, "digest": digests[k]} for k in kinds_read],
    )
    return len(params) + len(gone)


def changes_between(
    conn: sa.Connection, target: str, lo: datetime, hi: datetime, deployed_at: datetime | None = None
) -> list[NamedChange]:
    """The named changes of the target whose bracket (last capture showing the old state → first showing the new)
    overlaps [lo, hi], oldest first, each with the statement undoing it where one can be derived. Versions of the
    target's first capture are its state then, not changes; versions that change nothing a plan depends on (a table
    created, an invalid index dropped) are left out.
    deployed_at: the deploy the span is analysed for; a change first seen only after a later deploy of the target
    (its migration, made seconds after this window closed and before its analysis ran) is that deploy's, never this
    one's."""
    rows = conn.execute(
        sql_text("warehouse.catalog_changes_between"),
        {"t": target, "lo": lo, "hi": hi, "deployed": deployed_at},
    ).all()
    changes = [c for c in map(_named, rows) if c is not None]
    # an index dropped while one of the same definition under another name was added (a swap, as after a rebuild
    # with CREATE INDEX CONCURRENTLY) left the table as it was: neither is a change
    added = {_unnamed(c) for c in changes if c.kind == ChangeKind.INDEX_ADDED}
    dropped = {_unnamed(c) for c in changes if c.kind == ChangeKind.INDEX_DROPPED}
    swapped = added & dropped
    return [
        c
        for c in changes
        if c.kind not in (ChangeKind.INDEX_ADDED, ChangeKind.INDEX_DROPPED) or _unnamed(c) not in swapped
    ]


def _unnamed(change: NamedChange) -> str:
    """An index's definition without its name."""
    definition = (change.after if change.kind == ChangeKind.INDEX_ADDED else change.before) or ""
    return definition.replace(f" {ident(change.name)} ON ", " ON ", 1)


def setting_roles(conn: sa.Connection, target: str) -> dict[str, int]:
    """The oid of each role a stored setting was set for, by name (to match a statement's userid)."""
    return {
        r[0]: int(r[1])
        for r in conn.execute(
            sa.text(
                "SELECT DISTINCT role, roleid FROM radar.catalog_fact WHERE target = :t AND kind = 'role_setting' "
                "AND roleid IS NOT NULL"
            ),
            {"t": target},
        )
    }


def search_paths(conn: sa.Connection, target: str) -> list[tuple[int | None, str | None, str]]:
    """The current search_path settings stored for the target: (dbid or None, role or None, value), a database's or
    a role's and the server's."""
    return [
        (None if r.dbid is None else int(r.dbid), r.role, r.value)
        for r in conn.execute(
            sa.text(
                "SELECT DISTINCT ON (kind, identity) dbid, role, value FROM radar.catalog_fact WHERE target = :t "
                "AND kind IN ('role_setting', 'setting') AND lower(name) = 'search_path' "
                "ORDER BY kind, identity, first_seen_at DESC"
            ),
            {"t": target},
        )
        if r.value is not None
    ]


def table_schemas(conn: sa.Connection, target: str) -> dict[tuple[int | None, str], set[str]]:
    """The schemas each table name was seen in, per database, over the target's stored facts: an unqualified name
    found in one schema alone can only mean that schema's table."""
    out: dict[tuple[int | None, str], set[str]] = {}
    for dbid, relation in conn.execute(
        sa.text("SELECT DISTINCT dbid, relation FROM radar.catalog_fact WHERE target = :t AND kind = 'table'"),
        {"t": target},
    ):
        schema, _, table = (relation or "").replace('"', "").rpartition(".")
        out.setdefault((None if dbid is None else int(dbid), table), set()).add(schema)
    return out


def delete_before(conn: sa.Connection, cutoff_at: datetime) -> None:
    """Retention, in the caller's transaction: captures before the cutoff (each target keeps its last), and versions
    superseded before it (an object's current version, and any version a later change still needs, is kept)."""
    conn.execute(
        sa.text(
            "DELETE FROM radar.catalog_capture c WHERE c.captured_at < :c AND c.captured_at < "
            "(SELECT max(captured_at) FROM radar.catalog_capture l WHERE l.target = c.target)"
        ),
        {"c": cutoff_at},
    )
    conn.execute(
        sa.text(
            "DELETE FROM radar.catalog_fact v WHERE v.first_seen_at < :c AND (v.value IS NULL OR EXISTS ("
            "SELECT 1 FROM radar.catalog_fact w WHERE w.target = v.target AND w.kind = v.kind "
            "AND w.identity = v.identity AND w.first_seen_at > v.first_seen_at AND w.first_seen_at < :c))"
        ),
        {"c": cutoff_at},
    )


def _named(r: sa.Row) -> NamedChange | None:
    """The named change one stored version makes, or None when it changes nothing a plan depends on."""
    before, after = r.before, r.value
    kind, undo = _kind_and_undo(r, before, after)
    if kind is None:
        return None
    if undo is not None and REDACTED in undo:  # made of a definition whose literals were redacted: it would not undo
        undo = None
    return NamedChange(
        kind=kind,
        name=r.name,
        relation=r.relation,
        dbid=None if r.dbid is None else int(r.dbid),
        role=r.role,
        database=r.database if r.kind == "role_setting" else None,
        last_seen_before=r.last_seen_before.astimezone(UTC),  # the sentence says UTC, whatever the session's zone
        first_seen_after=r.first_seen_at.astimezone(UTC),
        before=before,
        after=after,
        undo=undo,
    )


def _kind_and_undo(r: sa.Row, before: str | None, after: str | None) -> tuple[ChangeKind | None, str | None]:
    rel, name = r.relation, r.name
    if r.kind == "index":
        qualified = f"{rel.rsplit('.', 1)[0]}.{ident(name)}" if rel and "." in rel else ident(name)
        if after is None:
            if before is None or before.endswith(INVALID):
                return None, None
            return ChangeKind.INDEX_DROPPED, f"{concurrently(before)};"
        if after.endswith(INVALID):
            if before is None:
                return ChangeKind.INDEX_INVALID, f"DROP INDEX CONCURRENTLY {qualified};"
            if not before.endswith(INVALID):
                return ChangeKind.INDEX_INVALID, f"REINDEX INDEX CONCURRENTLY {qualified};"
            return None, None
        if before is None or before.endswith(INVALID):
            return ChangeKind.INDEX_ADDED, f"DROP INDEX CONCURRENTLY {qualified};"
        return ChangeKind.INDEX_CHANGED, f"DROP INDEX CONCURRENTLY {qualified}; {concurrently(before)};"
    if r.kind == "constraint":
        if after is None:
            return ChangeKind.CONSTRAINT_DROPPED, f"ALTER TABLE {rel} ADD CONSTRAINT {ident(name)} {before};"
        drop = f"ALTER TABLE {rel} DROP CONSTRAINT {ident(name)};"
        if before is None:
            return ChangeKind.CONSTRAINT_ADDED, drop
        return ChangeKind.CONSTRAINT_ADDED, f"{drop} ALTER TABLE {rel} ADD CONSTRAINT {ident(name)} {before};"
    if r.kind == "trigger":
        if after is None:
            return ChangeKind.TRIGGER_DROPPED, f"{(before or '').removesuffix(DISABLED)};"
        drop = f"DROP TRIGGER {ident(name)} ON {rel};"
        if before is None:
            return ChangeKind.TRIGGER_ADDED, drop
        if before.removesuffix(DISABLED) == after.removesuffix(DISABLED):
            state = "DISABLE" if before.endswith(DISABLED) else "ENABLE"
            return ChangeKind.TRIGGER_CHANGED, f"ALTER TABLE {rel} {state} TRIGGER {ident(name)};"
        return ChangeKind.TRIGGER_CHANGED, f"{drop} {before.removesuffix(DISABLED)};"
    if r.kind == "column":
        if after is None:
            return ChangeKind.COLUMN_DROPPED, None
        if before is None:
            return ChangeKind.COLUMN_ADDED, None
        return ChangeKind.COLUMN_TYPE_CHANGED, f"ALTER TABLE {rel} ALTER COLUMN {ident(name)} TYPE {before};"
    if r.kind == "table":
        return (ChangeKind.TABLE_REWRITTEN, None) if before is not None and after is not None else (None, None)
    if r.kind == "statistics":
        if before == "analysed" and after == "not analysed":
            return ChangeKind.STATISTICS_RESET, f"ANALYZE {rel};"
        return None, None
    if r.kind == "analyze":
        # an ANALYZE or autoanalyze since the last capture (its time later); a reset forgets the times: nothing named
        if before is None or after is None or after == "never" or (before != "never" and after <= before):
            return None, None
        return ChangeKind.STATISTICS_CHANGED, f"ANALYZE {rel};"
    if r.kind == "staleness":
        if before == "fresh" and after == "stale":
            return (
                ChangeKind.STATISTICS_STALE,
                f"ANALYZE {rel}; ALTER TABLE {rel} SET (autovacuum_analyze_scale_factor = 0.02);",
            )
        return None, None
    if r.kind == "ext_statistics":
        if after is None:
            return ChangeKind.EXTENDED_STATISTICS_DROPPED, f"{before};"
        if before is None:
            schema = r.identity.rsplit(".", 1)[0]
            return ChangeKind.EXTENDED_STATISTICS_ADDED, f"DROP STATISTICS {schema}.{ident(name)};"
        return ChangeKind.EXTENDED_STATISTICS_ADDED, None
    if r.kind == "role_setting":
        if r.role and r.database:
            head = f"ALTER ROLE {ident(r.role)} IN DATABASE {ident(r.database)}"
        elif r.role:
            head = f"ALTER ROLE {ident(r.role)}"
        elif r.database:
            head = f"ALTER DATABASE {ident(r.database)}"
        else:
            head = "ALTER ROLE ALL"
        value = f"SET {name} = {literal(before)}" if before is not None else f"RESET {name}"
        return ChangeKind.SETTING_CHANGED, f"{head} {value};"
    if r.kind == "setting":
        value = f"SET {name} = {literal(before)}" if before is not None else f"RESET {name}"
        return ChangeKind.SETTING_CHANGED, f"ALTER SYSTEM {value}; SELECT pg_reload_conf();"
    return None, None


def concurrently(definition: str) -> str:
    """An index's definition (pg_get_indexdef) built without blocking the table's writes."""
    return _CREATE_INDEX.sub(r"\1 CONCURRENTLY ", definition, count=1)


def ident(name: str) -> str:
    """An SQL identifier, quoted when PostgreSQL would not read it back as written."""
    return name if _PLAIN_IDENT.match(name) else '"' + name.replace('"', '""') + '"'


def literal(value: str) -> str:
    """An SQL string literal."""
    return "'" + value.replace("'", "''") + "'"
