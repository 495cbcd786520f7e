"""Stored statement keys brought to the current key (sql/0008): every statement of radar.query gets the key of its
text, and every table that carries a statement's key follows, in one transaction."""

from __future__ import annotations

import sqlalchemy as sa

from radar_pipeline.collector.fingerprint import fingerprint
from radar_pipeline.warehouse import history, snapshots
from radar_pipeline.warehouse.snapshots import MAX_QUERY_TEXT

KEY_VERSION = 2
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
        # Every target's snapshot and history writers wait until the keys are rewritten: a scrape that read the old
        # keys before this transaction would otherwise write them back after it.
        for (target,) in conn.execute(sa.text("SELECT DISTINCT target FROM radar.query ORDER BY target")):
            snapshots.lock_target(conn, target)
            history.lock_target(conn, target)
        rows = conn.execute(sa.text(f"SELECT {_STATEMENT}, fingerprint, query FROM radar.query")).fetchall()
        remap = [
            (*r[:5], new)
            for r in rows
            if len(r.query) < MAX_QUERY_TEXT and (new := fingerprint(r.query)) != r.fingerprint
        ]
        conn.execute(
            sa.text(
                "CREATE TEMP TABLE key_remap (target text, dbid oid, userid oid, queryid bigint, toplevel boolean, "
                "new bigint) ON COMMIT DROP"
            )
        )
        if remap:
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
        conn.execute(sa.text("UPDATE radar.key_version SET version = :v"), {"v": KEY_VERSION})
    return len(remap)
