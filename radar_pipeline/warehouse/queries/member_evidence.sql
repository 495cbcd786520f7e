SELECT DISTINCT ON (v.deploy_id, v.target, v.fingerprint, v.toplevel) v.deploy_id, v.target,
v.fingerprint, v.toplevel, CAST(v.dbid AS bigint) AS dbid, CAST(v.userid AS bigint) AS userid,
v.queryid, v.deploy_log_factor AS log_factor, v.deploy_log_se AS se,
coalesce(v.mean_before_ms * v.calls_before, 0) AS time_before, v.calls_before + v.calls_after AS busy
FROM radar.verdict v JOIN unnest(CAST(:d AS text[]), CAST(:t AS text[])) AS m(deploy_id, target)
ON v.deploy_id = m.deploy_id AND v.target = m.target
WHERE v.look = 0 AND v.deploy_log_se IS NOT NULL AND v.deploy_log_se = v.deploy_log_se
ORDER BY v.deploy_id, v.target, v.fingerprint, v.toplevel, v.calls_before + v.calls_after DESC,
v.queryid
