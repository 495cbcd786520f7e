WITH /* radar_pipeline collector */ g AS (
SELECT a.datid, a.usesysid, a.query_id, a.wait_event_type, a.wait_event, b.query_id AS blocker_query_id,
       b.usesysid AS blocker_usesysid, count(*) AS sessions
  FROM (SELECT datid, usesysid, query_id, wait_event_type, wait_event,
               CASE WHEN wait_event_type = 'Lock' THEN (pg_blocking_pids(pid))[1] END AS blocker
          FROM pg_stat_activity
         WHERE state = 'active' AND backend_type = 'client backend' AND query_id IS NOT NULL AND query_id <> 0
           AND pid <> pg_backend_pid() AND usename IS DISTINCT FROM current_user) a
  LEFT JOIN pg_stat_activity b ON b.pid = a.blocker
 GROUP BY 1, 2, 3, 4, 5, 6, 7)
SELECT statement_timestamp(), g.* FROM (SELECT) one LEFT JOIN g ON true
