WITH h AS (SELECT s.*, floor(date_part('epoch', s.hour - :oldest) / 3600)::int AS at_h
FROM radar.statement_hour s WHERE s.target = :t AND s.hour >= :oldest AND s.hour < :newest
AND (s.dbid, s.userid, s.queryid, s.toplevel) IN (SELECT * FROM unnest(CAST(:db AS oid[]),
CAST(:u AS oid[]), CAST(:q AS bigint[]), CAST(:l AS boolean[]))))
SELECT dbid, userid, queryid, toplevel, CAST(:weeks - floor(at_h / 168) AS integer) AS week,
sum(calls) AS calls, sum(time_ms) AS time_ms,
coalesce(sum(calls) FILTER (WHERE mod(at_h, 168) >= CAST(:half_week AS integer)
  AND mod(at_h, 168) < CAST(:half_week AS integer) + :n), 0) AS span_calls,
coalesce(sum(time_ms) FILTER (WHERE mod(at_h, 168) >= CAST(:half_week AS integer)
  AND mod(at_h, 168) < CAST(:half_week AS integer) + :n), 0) AS span_time_ms,
count(*) FILTER (WHERE mod(at_h, 168) >= CAST(:half_week AS integer)
  AND mod(at_h, 168) < CAST(:half_week AS integer) + :n AND calls >= :min_calls) AS span_hours
FROM h GROUP BY dbid, userid, queryid, toplevel, week
