SELECT * FROM (SELECT * FROM radar.query_history WHERE target = :t AND dbid = :dbid AND userid = :userid
AND toplevel = :toplevel AND fingerprint = :f
AND (deployed_at, deploy_id) <= (:at, :d) ORDER BY deployed_at DESC, deploy_id DESC LIMIT :n) h
ORDER BY deployed_at, deploy_id
