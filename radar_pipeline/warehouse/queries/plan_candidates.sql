WITH moved AS (
    SELECT dbid, userid, queryid, toplevel, max(total_exec_time) AS last, min(total_exec_time) AS first, count(*) AS n
    -- from the last scrape at or before `since` on: the growth since then counts whole
    FROM radar.pgss_samples(:t, coalesce((SELECT max(captured_at) FROM radar.pgss_info_snapshot
                                          WHERE target = :t AND captured_at <= :since), :since)
                                - interval '1 microsecond', 'infinity') WHERE dbid = :dbid
    GROUP BY dbid, userid, queryid, toplevel
), eligible AS (
    -- a statement first seen since `since` spent all its time since
    SELECT q.dbid, q.userid, q.queryid, q.toplevel, q.query,
           coalesce(m.last - CASE WHEN q.first_seen > :since THEN 0 ELSE m.first END, 0) AS spent,
           coalesce(m.n, 0) AS n, c.checked_at IS NULL AND s.skipped_at IS NULL AND q.first_seen > :since
           AS new, greatest(c.checked_at, s.skipped_at) AS looked
    FROM radar.query q
    LEFT JOIN moved m
           ON m.dbid = q.dbid AND m.userid = q.userid AND m.queryid = q.queryid AND m.toplevel = q.toplevel
    LEFT JOIN radar.plan_check c ON c.target = q.target
           AND c.dbid = q.dbid AND c.userid = q.userid AND c.queryid = q.queryid AND c.toplevel = q.toplevel
    LEFT JOIN radar.plan_skip s ON s.target = q.target
           AND s.dbid = q.dbid AND s.userid = q.userid AND s.queryid = q.queryid AND s.toplevel = q.toplevel
    WHERE q.target = :t AND q.dbid = :dbid AND (m.n IS NOT NULL OR q.last_seen >= :active)
      AND (s.skipped_at IS NULL OR s.skipped_at < :now - :retry)
), busiest AS (
    SELECT * FROM eligible WHERE spent > 0 ORDER BY spent DESC, n DESC, queryid LIMIT :n
)
SELECT dbid, userid, queryid, toplevel, query, CAST(:busiest AS text) FROM busiest
UNION ALL
(SELECT dbid, userid, queryid, toplevel, query,
        CASE WHEN new THEN CAST(:new AS text) ELSE CAST(:rotation_reason AS text) END
 FROM eligible q
 WHERE NOT EXISTS (SELECT 1 FROM busiest b
                   WHERE b.dbid = q.dbid AND b.userid = q.userid AND b.queryid = q.queryid AND b.toplevel = q.toplevel)
   AND (looked IS NULL OR looked < :replan)
 ORDER BY new DESC, looked NULLS FIRST, spent DESC, queryid LIMIT :rotation)
