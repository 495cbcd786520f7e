SELECT t.target, l.captured_at AS last_scrape, now() - l.captured_at AS age, l.statements,
l.server_version_num, l.pgss_version, r.scrapes, r.evicted
FROM (SELECT DISTINCT target FROM radar.pgss_info_snapshot) t
CROSS JOIN LATERAL (SELECT * FROM radar.pgss_info_snapshot s WHERE s.target = t.target
ORDER BY captured_at DESC LIMIT 1) l
CROSS JOIN LATERAL (SELECT count(*) AS scrapes, max(dealloc) - min(dealloc) AS evicted
FROM radar.pgss_info_snapshot s WHERE s.target = t.target AND s.captured_at > now() - :within) r
ORDER BY t.target
