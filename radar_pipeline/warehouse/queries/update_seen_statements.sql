UPDATE radar.query q SET last_seen = %(at)s, last_calls = s.calls,
last_total_exec_time = s.total_exec_time, last_stats_since = nullif(s.stats_since, '-infinity'),
missing_since = NULL, query = coalesce(s.query, q.query), fingerprint = s.fingerprint
FROM radar_snapshot_stage s WHERE NOT s.is_new AND q.target = %(target)s AND q.dbid = s.dbid
AND q.userid = s.userid AND q.queryid = s.queryid AND q.toplevel = s.toplevel
