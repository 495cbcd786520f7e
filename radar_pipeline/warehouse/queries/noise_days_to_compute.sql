SELECT s.target, s.day FROM (SELECT DISTINCT target, CAST(captured_at AT TIME ZONE 'UTC' AS date) AS day
FROM radar.pgss_info_snapshot WHERE captured_at >= :lo AND captured_at < :hi) s
WHERE NOT EXISTS (SELECT 1 FROM radar.statement_noise_day d WHERE d.target = s.target AND d.day = s.day)
ORDER BY s.day, s.target
