SELECT v.*, coalesce(q.query, '') AS query FROM radar.canary_verdict v
JOIN radar.canary_analysis a USING (deploy_id)
LEFT JOIN radar.query q ON q.target = a.target AND q.dbid = v.dbid AND q.userid = a.canary_userid
AND q.queryid = v.queryid AND q.toplevel = v.toplevel
WHERE v.deploy_id = :d ORDER BY (v.verdict = 'detected') DESC,
coalesce(v.calls_canary * v.mean_canary_ms, 0) DESC, v.queryid
