INSERT INTO radar.query (target, dbid, userid, queryid, toplevel, fingerprint, query, first_seen,
last_seen, last_calls, last_total_exec_time, last_stats_since)
SELECT %(target)s, dbid, userid, queryid, toplevel, fingerprint, query, %(at)s, %(at)s, calls,
total_exec_time, nullif(stats_since, '-infinity') FROM radar_snapshot_stage WHERE is_new
