SELECT /* radar_pipeline collector */ current_user, rolsuper, (
SELECT string_agg(DISTINCT p.proname, ', ' ORDER BY p.proname) FROM pg_proc p
WHERE p.proname = ANY(%s) AND has_function_privilege(p.oid, 'EXECUTE'))
FROM pg_roles WHERE rolname = current_user
