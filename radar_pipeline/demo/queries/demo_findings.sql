SELECT v.verdict, v.reason, v.cause, v.mean_before_ms, v.mean_after_ms, v.change_factor,
v.confidence, left(regexp_replace(q.query, '\s+', ' ', 'g'), 200) AS query
FROM radar.verdict v JOIN radar.query q ON q.target = v.target AND q.dbid = v.dbid
AND q.userid = v.userid AND q.queryid = v.queryid AND q.toplevel = v.toplevel
WHERE v.deploy_id = :d AND v.dbid = :shop AND v.n_before + v.n_after > 0
ORDER BY v.verdict = 'detected' DESC, v.change_factor DESC
