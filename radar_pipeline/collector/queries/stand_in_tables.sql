SELECT /* radar_pipeline collector */ n.nspname, c.relname
FROM (SELECT to_regclass(CASE WHEN %(schema)s::text IS NULL THEN quote_ident(%(table)s)
                         ELSE quote_ident(%(schema)s) || '.' || quote_ident(%(table)s) END) AS oid) r
JOIN pg_class own ON own.oid = r.oid
JOIN pg_class c ON c.oid <> own.oid AND c.relkind IN ('r', 'p', 'v', 'm', 'f') AND NOT c.relispartition
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\_toast%%'
  AND n.nspname NOT LIKE 'pg\_temp\_%%'
  AND (%(aliased)s OR c.relname = own.relname)
  AND NOT EXISTS (
      SELECT 1 FROM pg_attribute a
      WHERE a.attrelid = own.oid AND a.attnum > 0 AND NOT a.attisdropped
        AND (%(star)s OR a.attname = ANY(%(columns)s))
        AND NOT EXISTS (
            SELECT 1 FROM pg_attribute b
            WHERE b.attrelid = c.oid AND b.attname = a.attname AND b.attnum = a.attnum
              AND b.atttypid = a.atttypid AND NOT b.attisdropped))
  AND NOT EXISTS (SELECT 1 FROM pg_depend e WHERE e.classid = 'pg_class'::regclass AND e.objid = c.oid
                  AND e.deptype = 'e')
  AND has_table_privilege(c.oid, 'SELECT')
ORDER BY n.nspname, c.relname
LIMIT %(limit)s
