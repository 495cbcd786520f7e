SELECT target, dbid, userid, queryid, toplevel, fingerprint FROM radar.verdict WHERE deploy_id = :d
AND queryid = :q AND (CAST(:t AS text) IS NULL OR target = :t)
AND (CAST(:dbid AS oid) IS NULL OR dbid = :dbid) AND (CAST(:userid AS oid) IS NULL OR userid = :userid)
AND (CAST(:top AS boolean) IS NULL OR toplevel = :top) ORDER BY target, dbid, userid, toplevel
