INSERT INTO radar.regression_episode (target, fingerprint, dbid, userid, queryid, toplevel, opened_by,
opened_at, change_at, baseline_ms, level_ms) VALUES (:t, :fingerprint, :dbid, :userid, :queryid,
:toplevel, :id, :end, :change_at, :baseline, :level)
ON CONFLICT (target, dbid, userid, toplevel, fingerprint, opened_by) DO UPDATE SET
queryid = EXCLUDED.queryid,
change_at = EXCLUDED.change_at, baseline_ms = EXCLUDED.baseline_ms, level_ms = EXCLUDED.level_ms
