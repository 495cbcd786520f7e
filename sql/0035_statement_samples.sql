-- One statement's samples over a span, from either form (issue 29, cost): what radar.pgss_samples returns of one
-- statement, found through the statement's primary-key entries instead of every sample of the span. A read of a few
-- statements' samples (a detection's cause counters, an alert's chart) then reads their rows alone: through
-- pgss_samples it read every statement's rows of the span and kept theirs. Declared STRICT, so the planner calls it
-- once per statement (a strict SQL function is never inlined) instead of flattening it into a join of every sample
-- of the span with the keys; its arguments are never null. Safe to run again.
-- depends: 0034_group_looks

CREATE OR REPLACE FUNCTION radar.pgss_statement_samples(
    target_name text, s_dbid oid, s_userid oid, s_queryid bigint, s_toplevel boolean,
    from_at timestamptz, to_at timestamptz)
RETURNS SETOF radar.pgss_snapshot
LANGUAGE sql STABLE STRICT ROWS 120 AS $$
SELECT s.* FROM radar.pgss_snapshot s
WHERE s.target = target_name AND s.dbid = s_dbid AND s.userid = s_userid AND s.queryid = s_queryid
  AND s.toplevel = s_toplevel AND s.captured_at > from_at AND s.captured_at <= to_at
UNION ALL
SELECT r.* FROM radar.pgss_compact c CROSS JOIN LATERAL radar.pgss_compact_rows(c, from_at, to_at) r
WHERE c.target = target_name AND c.dbid = s_dbid AND c.userid = s_userid AND c.queryid = s_queryid
  AND c.toplevel = s_toplevel
  AND c.day >= CAST(from_at AT TIME ZONE 'UTC' AS date) AND c.day <= CAST(to_at AT TIME ZONE 'UTC' AS date)
  AND c.last_at > from_at AND c.first_at <= to_at
$$;
