SELECT /* radar_pipeline collector */ n.nspname, e.extversion, current_setting('server_version_num')::int,
current_user, pg_has_role(current_user, 'pg_read_all_stats', 'USAGE'),
current_setting('pg_stat_statements.track', true),
(SELECT source FROM pg_settings WHERE name = 'pg_stat_statements.track'),
current_setting('compute_query_id', true), (SELECT source FROM pg_settings WHERE name = 'compute_query_id'),
(SELECT query_id IS NOT NULL FROM pg_stat_activity WHERE pid = pg_backend_pid())
FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'pg_stat_statements'
