SELECT to_date(right(c.relname, 8), 'YYYYMMDD') AS day, c.relname FROM pg_inherits i
JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = 'radar.pgss_snapshot'::regclass
AND c.relname ~ '^pgss_snapshot_p[0-9]{8}$'
AND to_date(right(c.relname, 8), 'YYYYMMDD') < CAST((now() - :grace) AT TIME ZONE 'UTC' AS date)
ORDER BY 1
