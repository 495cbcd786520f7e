UPDATE radar.regression_episode e SET recovered_at = :end, recovered_by = :id,
recovered_ms = v.mean_after_ms
FROM radar.verdict v WHERE v.deploy_id = :id AND v.target = e.target AND v.fingerprint = e.fingerprint
AND v.dbid = e.dbid AND v.userid = e.userid AND v.toplevel = e.toplevel
AND e.target = :t AND e.opened_at < :end AND e.recovered_at IS NULL AND v.calls_after >= :min_calls
AND v.mean_after_ms <= e.baseline_ms * (1 + :theta)
RETURNING e.fingerprint, e.queryid, e.baseline_ms, e.recovered_ms
