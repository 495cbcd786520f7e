"""The catalog and settings facts of a watched database that change plans: indexes, constraints, triggers, column
types, table rewrites, whether a table has statistics, when it was last analysed and whether its statistics are
stale, extended statistics, per-database and per-role settings, and the server's settings changed from their
defaults.

Read in the collector's read-only session, cheaply: one statement computes a digest of each kind on the
server (the count and the sum of its rows' 64-bit hashes: no sort, no string built, taken over catalog columns
rather than the definitions in words) and only the kinds whose digest differs from the last stored one are read row
by row. Numbers that move with the workload (reltuples, n_mod_since_analyze, sizes) are never part of a fact, so
they do not make every scrape a change (staleness is their state: STALE_FACTOR): a table's statistics are a state
(`analysed` / `not analysed`: on PostgreSQL 14 and later whether pg_class.reltuples is known, which a rewrite or a
TRUNCATE forgets and pg_stat_reset(), a crash or a failover do not; before 14 whether the stats system knows an
ANALYZE) and a rewrite is its new relfilenode. Definitions holding a string literal (a webhook trigger's arguments
carry its token, a partial index its value) are stored with their literals redacted (collector/fingerprint.redact).
Everything read is in catalogs and views any role may read (pg_settings hides superuser-only settings from a role
without pg_read_all_settings, none of which change plans).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import psycopg

from radar_pipeline.collector.fingerprint import redact
from radar_pipeline.collector.pgss import COLLECTOR_MARK
from radar_pipeline.collector.plan_settings import PLAN_SETTING_PREFIXES, PLAN_SETTINGS
from radar_pipeline.collector.session import TargetUnavailable, describe
from radar_pipeline.config import Target

KINDS = (
    "index",
    "constraint",
    "trigger",
    "column",
    "table",
    "statistics",
    "analyze",
    "staleness",
    "ext_statistics",
    "role_setting",
    "setting",
)
# The SQL condition affects_plans is, over a setting's name ({name}); starts_with, not LIKE: no % in a query psycopg
# gives parameters to.
_SETTINGS_FILTER = (
    "({name} = ANY(ARRAY["
    + ", ".join(f"'{n}'" for n in sorted(PLAN_SETTINGS))
    + "]) OR "
    + " OR ".join(f"starts_with({{name}}, '{p}')" for p in PLAN_SETTING_PREFIXES)
    + ")"
)
EMPTY_DIGEST = "empty"  # a kind with no rows (the server gives no row to aggregate)

# A table's statistics are stale when it has had more than STALE_FACTOR times the modifications since its last analyze
# that make autovacuum analyze it (threshold + scale factor × reltuples, the table's own storage parameters first):
# a bulk load that outran autovacuum, or a table autovacuum never analyses. A number that moves with the workload is
# stored only as this state, so it changes when the line is crossed, not at every scrape.
STALE_FACTOR = 2
_AUTOVACUUM = (
    "coalesce((SELECT option_value FROM pg_options_to_table(t.reloptions) WHERE option_name = '{name}')::float8, "
    "current_setting('{name}')::float8)"
)
_STALE = (
    f"{STALE_FACTOR} * ({_AUTOVACUUM.format(name='autovacuum_analyze_threshold')} + "
    f"{_AUTOVACUUM.format(name='autovacuum_analyze_scale_factor')} * greatest(t.reltuples, 0))"
)
# Schemas of the database's own objects: not the system's, not TOAST, not other sessions' temporary ones.
_USER = "{ns}.nspname NOT IN ('pg_catalog', 'information_schema') AND {ns}.nspname !~ '^pg_(toast|temp_)'"
_REL = "quote_ident(tn.nspname) || '.' || quote_ident(t.relname)"
# The columns of every kind: kind, identity (unique within the kind), dbid, roleid, relation, name, role, database,
# value (the definition, type, state or setting).
_FACTS = f"""
SELECT 'index' AS kind, {_REL} || '.' || quote_ident(c.relname) AS identity, db.oid AS dbid, NULL::oid AS roleid,
       {_REL} AS relation, c.relname::text AS name, NULL::text AS role, NULL::text AS database,
       {{index_value}} AS value
  FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_class t ON t.oid = i.indrelid
  JOIN pg_namespace tn ON tn.oid = t.relnamespace, db
 WHERE {_USER.format(ns="tn")}
UNION ALL
SELECT 'constraint', {_REL} || '.' || quote_ident(co.conname), db.oid, NULL, {_REL}, co.conname::text, NULL, NULL,
       {{constraint_value}}
  FROM pg_constraint co JOIN pg_class t ON t.oid = co.conrelid JOIN pg_namespace tn ON tn.oid = t.relnamespace, db
 WHERE {_USER.format(ns="tn")}
UNION ALL
SELECT 'trigger', {_REL} || '.' || quote_ident(tg.tgname), db.oid, NULL, {_REL}, tg.tgname::text, NULL, NULL,
       {{trigger_value}}
  FROM pg_trigger tg JOIN pg_class t ON t.oid = tg.tgrelid JOIN pg_namespace tn ON tn.oid = t.relnamespace, db
 WHERE NOT tg.tgisinternal AND {_USER.format(ns="tn")}
UNION ALL
SELECT 'column', {_REL} || '.' || quote_ident(a.attname), db.oid, NULL, {_REL}, a.attname::text, NULL, NULL,
       {{column_value}}
  FROM pg_attribute a JOIN pg_class t ON t.oid = a.attrelid JOIN pg_namespace tn ON tn.oid = t.relnamespace, db
 WHERE a.attnum > 0 AND NOT a.attisdropped AND t.relkind IN ('r', 'p') AND {_USER.format(ns="tn")}
UNION ALL
SELECT 'table', {_REL}, db.oid, NULL, {_REL}, {_REL}, NULL, NULL, t.relfilenode::text
  FROM pg_class t JOIN pg_namespace tn ON tn.oid = t.relnamespace, db
 WHERE t.relkind IN ('r', 'm') AND {_USER.format(ns="tn")}
UNION ALL
SELECT 'statistics', {_REL}, db.oid, NULL, {_REL}, {_REL}, NULL, NULL,
       CASE WHEN CASE WHEN current_setting('server_version_num')::int >= 140000 THEN t.reltuples >= 0
                      ELSE pg_stat_get_last_analyze_time(t.oid) IS NOT NULL
                        OR pg_stat_get_last_autoanalyze_time(t.oid) IS NOT NULL END
            THEN 'analysed' ELSE 'not analysed' END
  FROM pg_class t JOIN pg_namespace tn ON tn.oid = t.relnamespace, db
 WHERE t.relkind IN ('r', 'm', 'p') AND {_USER.format(ns="tn")}
UNION ALL
SELECT 'analyze', {_REL}, db.oid, NULL, {_REL}, {_REL}, NULL, NULL,
       CASE WHEN a.at IS NULL THEN 'never'
            ELSE a.how || ' at ' || to_char(a.at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') END
  FROM pg_class t JOIN pg_namespace tn ON tn.oid = t.relnamespace, db,
       LATERAL (SELECT CASE WHEN pg_stat_get_last_autoanalyze_time(t.oid)
                                 > coalesce(pg_stat_get_last_analyze_time(t.oid), '-infinity')
                            THEN 'autoanalyze' ELSE 'ANALYZE' END AS how,
                       greatest(pg_stat_get_last_analyze_time(t.oid), pg_stat_get_last_autoanalyze_time(t.oid)) AS at) a
 WHERE t.relkind IN ('r', 'm', 'p') AND {_USER.format(ns="tn")}
UNION ALL
SELECT 'staleness', {_REL}, db.oid, NULL, {_REL}, {_REL}, NULL, NULL,
       CASE WHEN pg_stat_get_mod_since_analyze(t.oid) > {_STALE} THEN 'stale' ELSE 'fresh' END
  FROM pg_class t JOIN pg_namespace tn ON tn.oid = t.relnamespace, db
 WHERE t.relkind IN ('r', 'm') AND {_USER.format(ns="tn")}
UNION ALL
SELECT 'ext_statistics', quote_ident(sn.nspname) || '.' || quote_ident(se.stxname), db.oid, NULL, {_REL},
       se.stxname::text, NULL, NULL, pg_get_statisticsobjdef(se.oid)
  FROM pg_statistic_ext se JOIN pg_namespace sn ON sn.oid = se.stxnamespace JOIN pg_class t ON t.oid = se.stxrelid
  JOIN pg_namespace tn ON tn.oid = t.relnamespace, db
 WHERE {_USER.format(ns="sn")}
UNION ALL
SELECT 'role_setting',
       coalesce(d.datname::text, '*') || '/' || coalesce(r.rolname::text, '*') || '/' || split_part(cfg, '=', 1),
       nullif(s.setdatabase, 0), nullif(s.setrole, 0), NULL, split_part(cfg, '=', 1), r.rolname::text,
       d.datname::text, substr(cfg, strpos(cfg, '=') + 1)
  FROM pg_db_role_setting s LEFT JOIN pg_database d ON d.oid = s.setdatabase
  LEFT JOIN pg_roles r ON r.oid = s.setrole, unnest(s.setconfig) cfg
 WHERE {_SETTINGS_FILTER.format(name="lower(split_part(cfg, '=', 1))")}
UNION ALL
SELECT 'setting', name, NULL, NULL, NULL, name, NULL, NULL,
       CASE WHEN unit ~ '^[0-9]' THEN (setting::numeric * pg_size_bytes(unit) / 1024)::bigint || 'kB'
            ELSE setting || coalesce(unit, '') END
  FROM pg_settings
 WHERE source NOT IN ('default', 'override', 'client', 'session', 'database', 'user', 'database user', 'interactive')
   AND {_SETTINGS_FILTER.format(name="name")}
"""
# An index's, a constraint's and a trigger's definition in words costs a relation cache entry each in a new session
# (the collector's is new at every scrape), and format_type a lookup per column: the digests are taken over the
# catalog columns the words are made of (a trigger's arguments only hashed, never leaving the server).
_DEFINITIONS = {
    "index_value": "pg_get_indexdef(i.indexrelid) "
    "|| CASE WHEN NOT (i.indisvalid AND i.indisready) THEN ' [invalid]' ELSE '' END",
    "constraint_value": "pg_get_constraintdef(co.oid)",
    "trigger_value": "pg_get_triggerdef(tg.oid) || CASE WHEN tg.tgenabled = 'D' THEN ' [disabled]' ELSE '' END",
    "column_value": "format_type(a.atttypid, a.atttypmod)",
}
_CATALOG_COLUMNS = {
    "index_value": "concat_ws(' ', c.relam, i.indisunique, i.indkey, i.indclass, i.indcollation, i.indoption, "
    "i.indexprs, i.indpred, i.indisvalid AND i.indisready)",
    "constraint_value": "concat_ws(' ', co.contype, co.conkey, co.confrelid, co.confkey, co.conbin, co.convalidated, "
    "co.condeferrable, co.condeferred, co.confupdtype, co.confdeltype, co.confmatchtype, co.conexclop)",
    "trigger_value": "concat_ws(' ', tg.tgfoid, tg.tgtype, tg.tgenabled = 'D', tg.tgattr, tg.tgargs, tg.tgqual, "
    "tg.tgdeferrable, tg.tginitdeferred, tg.tgoldtable, tg.tgnewtable)",
    "column_value": "a.atttypid || ':' || a.atttypmod",
}
# The mark after WITH: pg_stat_statements keeps a statement's text from its first token, so a leading comment is lost.
_WITH = (
    "WITH " + COLLECTOR_MARK + " db AS (SELECT oid FROM pg_database WHERE datname = current_database()), f AS ({facts})"
)
# The digest of a kind: its rows' count and the sum of their 64-bit hashes, order-independent (no sort, no string
# aggregated); a change of one row changes the sum but for a 2^-64 chance.
DIGESTS_SQL = (
    f"{_WITH.format(facts=_FACTS.format(**_CATALOG_COLUMNS))} "
    "SELECT statement_timestamp(), (SELECT oid FROM db), kind, count(*) || ':' || "
    "sum(hashtextextended(identity || '|' || coalesce(relation, '') || '|' || coalesce(value, ''), 0)::numeric) "
    "FROM f GROUP BY kind"
)
# The server's identity, with the database's: the system identifier where the role may read it (pg_read_all_stats
# alone may, by default), else the database's name and oid alone (an address or a version would change at a failover
# or a minor upgrade, and start anew for nothing). A target re-pointed at another server or database starts anew.
_HEAD_SQL = (
    f"SELECT {COLLECTOR_MARK} statement_timestamp(), d.oid, has_function_privilege('pg_control_system()', 'EXECUTE'), "
    "concat_ws('/', d.datname, d.oid) FROM pg_database d WHERE d.datname = current_database()"
)
_SYSTEM_SQL = f"SELECT {COLLECTOR_MARK} system_identifier::text FROM pg_control_system()"
FACTS_SQL = (
    f"{_WITH.format(facts=_FACTS.format(**_DEFINITIONS))} "
    "SELECT kind, identity, dbid, roleid, relation, name, role, database, value "
    "FROM f WHERE kind = ANY(%(kinds)s)"
)


@dataclass(frozen=True)
class CatalogFact:
    """One object's or setting's state: `identity` is unique within its kind (schema-qualified, quoted as needed);
    `dbid`/`roleid` the database and role a setting applies to (None: all), or for catalog objects the connected
    database; `relation` the table it belongs to; `value` its definition, type, state or setting."""

    kind: str
    identity: str
    dbid: int | None
    roleid: int | None
    relation: str | None
    name: str
    role: str | None
    database: str | None
    value: str | None


@dataclass(frozen=True)
class Digests:
    """One reading of the digests: when (the server's clock), of which database on which server (`server`: its
    identity, see _HEAD_SQL), and one digest per kind."""

    captured_at: datetime
    dbid: int
    digests: dict[str, str]
    server: str = ""


def read_digests(conn: psycopg.Connection, target: Target) -> Digests:
    """The digest of each kind of fact, computed on the server in one statement (EMPTY_DIGEST for a kind with none),
    and the server's identity."""
    try:
        head = conn.execute(_HEAD_SQL).fetchone()
        assert head is not None
        server = str(head[3])
        if head[2]:
            system = conn.execute(_SYSTEM_SQL).fetchone()
            assert system is not None
            server = f"{system[0]}/{head[1]}"
        rows = conn.execute(DIGESTS_SQL).fetchall()
    except psycopg.Error as exc:
        raise _failed(exc, target) from None
    found = {str(r[2]): str(r[3]) for r in rows if r[2] is not None}
    return Digests(
        captured_at=rows[0][0] if rows else head[0],
        dbid=int(head[1]),
        digests={k: found.get(k, EMPTY_DIGEST) for k in KINDS},
        server=server,
    )


def _failed(exc: psycopg.Error, target: Target) -> TargetUnavailable:
    return TargetUnavailable(f"target {target.name!r}: reading the catalog failed: {describe(exc, target)}")


def read_facts(conn: psycopg.Connection, target: Target, kinds: list[str]) -> list[CatalogFact]:
    """Every fact of the given kinds."""
    if not kinds:
        return []
    try:
        rows = conn.execute(FACTS_SQL, {"kinds": list(kinds)}).fetchall()
    except psycopg.Error as exc:
        raise _failed(exc, target) from None
    return [
        CatalogFact(
            kind=r[0],
            identity=r[1],
            dbid=None if r[2] is None else int(r[2]),
            roleid=None if r[3] is None else int(r[3]),
            relation=r[4],
            name=r[5],
            role=r[6],
            database=r[7],
            value=redact(r[8]) if r[0] in _DEFINED and r[8] and "'" in r[8] else r[8],
        )
        for r in rows
    ]


_DEFINED = frozenset({"index", "constraint", "trigger", "ext_statistics"})  # kinds whose value is a definition
