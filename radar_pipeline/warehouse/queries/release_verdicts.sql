SELECT r.*, q.query FROM radar.release_verdict r LEFT JOIN radar.query q ON q.target = r.example_target
AND q.dbid = r.example_dbid AND q.userid = r.example_userid AND q.queryid = r.example_queryid
AND q.toplevel = r.toplevel WHERE r.release_id = :r
ORDER BY r.verdict = 'detected' DESC, r.p_family, r.fingerprint, r.toplevel
