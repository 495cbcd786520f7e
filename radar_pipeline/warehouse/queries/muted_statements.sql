SELECT m.target, m.queryid, NULL AS group_id, m.mute_id, m.scope, m.reason, m.ends_at,
regexp_replace(coalesce(q.query, ''), '\s+', ' ', 'g') AS query
FROM radar.muted_verdict m LEFT JOIN radar.query q ON q.target = m.target AND q.dbid = m.dbid
AND q.userid = m.userid AND q.queryid = m.queryid AND q.toplevel = m.toplevel WHERE m.deploy_id = :d
UNION ALL SELECT target, NULL, group_id, mute_id, scope, reason, ends_at, NULL FROM radar.muted_group
WHERE deploy_id = :d ORDER BY 4, 1, 2, 3
