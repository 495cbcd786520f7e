-- Interval means of one target's statements for a time range, reading only that range (and each statement's last
-- row before it): the radar.pgss_interval view computes lag() over every stored row before any filter can apply.
-- Intervals are those whose end falls in (from_at, to_at]; columns and rules as radar.pgss_interval's.
CREATE FUNCTION radar.pgss_intervals(target_name text, from_at timestamptz, to_at timestamptz)
RETURNS TABLE (
    target text, dbid oid, userid oid, queryid bigint, toplevel boolean, fingerprint bigint,
    interval_start timestamptz, interval_end timestamptz, calls bigint, total_exec_time double precision,
    mean_exec_time_ms double precision, rows bigint, shared_blks_hit bigint, shared_blks_read bigint,
    temp_blks_written bigint
)
LANGUAGE sql STABLE AS $$
WITH inside AS (
    SELECT s.* FROM radar.pgss_snapshot s
    WHERE s.target = target_name AND s.captured_at > from_at AND s.captured_at <= to_at
), earlier AS (
    SELECT e.* FROM (SELECT DISTINCT i.dbid, i.userid, i.queryid, i.toplevel FROM inside i) k
    CROSS JOIN LATERAL (
        SELECT s.* FROM radar.pgss_snapshot s
        WHERE s.target = target_name AND s.dbid = k.dbid AND s.userid = k.userid AND s.queryid = k.queryid
          AND s.toplevel = k.toplevel AND s.captured_at <= from_at
        ORDER BY s.captured_at DESC LIMIT 1
    ) e
), paired AS (
    SELECT
        s.target, s.dbid, s.userid, s.queryid, s.toplevel, s.fingerprint,
        s.captured_at AS interval_end,
        lag(s.captured_at) OVER w AS prev_stored_at,
        s.calls - lag(s.calls) OVER w AS calls,
        s.total_exec_time - lag(s.total_exec_time) OVER w AS total_exec_time,
        s.rows - lag(s.rows) OVER w AS rows,
        s.shared_blks_hit - lag(s.shared_blks_hit) OVER w AS shared_blks_hit,
        s.shared_blks_read - lag(s.shared_blks_read) OVER w AS shared_blks_read,
        s.temp_blks_written - lag(s.temp_blks_written) OVER w AS temp_blks_written,
        s.stats_since IS DISTINCT FROM lag(s.stats_since) OVER w AS stats_since_changed,
        s.reset_before
    FROM (SELECT * FROM inside UNION ALL SELECT * FROM earlier) s
    WINDOW w AS (PARTITION BY s.dbid, s.userid, s.queryid, s.toplevel ORDER BY s.captured_at)
)
SELECT
    p.target, p.dbid, p.userid, p.queryid, p.toplevel, p.fingerprint,
    scrape.prev_scrape_at, p.interval_end, p.calls, p.total_exec_time, p.total_exec_time / p.calls,
    p.rows, p.shared_blks_hit, p.shared_blks_read, p.temp_blks_written
FROM paired p
CROSS JOIN LATERAL (
    SELECT max(i.captured_at) AS prev_scrape_at
    FROM radar.pgss_info_snapshot i
    WHERE i.target = p.target AND i.captured_at < p.interval_end AND i.captured_at >= p.prev_stored_at
) scrape
WHERE p.prev_stored_at IS NOT NULL
  AND p.interval_end > from_at
  AND p.calls > 0
  AND p.total_exec_time >= 0
  AND NOT p.stats_since_changed
  AND NOT p.reset_before
$$;

COMMENT ON FUNCTION radar.pgss_intervals(text, timestamptz, timestamptz) IS
    'Interval means of one target ending in (from_at, to_at], reading only that range: radar.pgss_interval, bounded.';
