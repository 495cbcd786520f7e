WITH s AS (SELECT captured_at, dealloc, stats_reset FROM radar.pgss_info_snapshot
WHERE target = :t AND captured_at > :lo AND captured_at <= :hi),
edges AS (SELECT captured_at FROM s UNION ALL SELECT coalesce((SELECT max(captured_at)
FROM radar.pgss_info_snapshot WHERE target = :t AND captured_at <= :lo), CAST(:lo AS timestamptz))
UNION ALL
SELECT CAST(:hi AS timestamptz)),
gaps AS (SELECT captured_at - lag(captured_at) OVER (ORDER BY captured_at) AS gap FROM edges)
SELECT (SELECT count(*) FROM s), (SELECT max(gap) FROM gaps),
(SELECT count(DISTINCT stats_reset) FROM s), (SELECT max(dealloc) - min(dealloc) FROM s),
(SELECT min(captured_at) FROM radar.pgss_info_snapshot WHERE target = :t)
