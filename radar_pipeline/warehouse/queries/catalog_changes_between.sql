SELECT v.kind, v.identity, v.dbid, v.relation, v.name, v.role, v.database, v.value, v.first_seen_at,
v.last_seen_before, p.value AS before FROM radar.catalog_fact v
LEFT JOIN LATERAL (SELECT value FROM radar.catalog_fact o WHERE o.target = v.target AND o.kind = v.kind
AND o.identity = v.identity AND o.first_seen_at < v.first_seen_at ORDER BY o.first_seen_at DESC LIMIT 1) p ON true
WHERE v.target = :t AND v.last_seen_before IS NOT NULL AND v.first_seen_at >= :lo
AND v.last_seen_before < :hi AND NOT EXISTS (SELECT 1 FROM radar.deploy_event e WHERE e.target = v.target
AND e.deployed_at > CAST(:deployed AS timestamptz) AND e.deployed_at <= v.first_seen_at)
ORDER BY v.first_seen_at, v.kind, v.identity
