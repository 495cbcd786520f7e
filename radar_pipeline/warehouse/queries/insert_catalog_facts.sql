INSERT INTO radar.catalog_fact (target, kind, identity, dbid, roleid, relation, name, role, database,
value, first_seen_at, last_seen_before)
SELECT DISTINCT ON (kind, identity) target, kind, identity, dbid, roleid, relation, name, role,
database, NULL, :at, :before FROM radar.catalog_fact
WHERE target = :t AND kind = :kind AND identity = :identity
ORDER BY kind, identity, first_seen_at DESC
