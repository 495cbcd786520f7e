SELECT /* radar_pipeline collector */ current_setting('pg_stat_statements.max', true),
current_setting('pg_stat_statements.track_utility', true),
current_setting('pg_stat_statements.track', true),
(SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
WHERE e.extname = 'pg_stat_statements')
