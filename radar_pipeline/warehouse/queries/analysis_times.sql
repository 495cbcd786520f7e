SELECT (SELECT CAST(settings ->> 'window' AS double precision) FROM radar.analysis
WHERE target = :t AND deploy_id NOT LIKE :periodic AND settings ? 'window'
ORDER BY analysed_at DESC LIMIT 1),
(SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY gap) FROM (SELECT extract(epoch FROM
captured_at - lag(captured_at) OVER (ORDER BY captured_at)) AS gap FROM (SELECT captured_at
FROM radar.pgss_info_snapshot WHERE target = :t ORDER BY captured_at DESC LIMIT :n) latest) gaps
WHERE gap > 0)
