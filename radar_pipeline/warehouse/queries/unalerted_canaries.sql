SELECT c.deploy_id FROM radar.canary_analysis c
WHERE c.state <> 'error' AND c.detected > 0 AND c.window_end > now() - :age
AND c.analysed_at <= now() - :grace AND NOT EXISTS (SELECT 1 FROM radar.alert a
WHERE a.deploy_id = c.deploy_id AND a.target = :prefix || c.target)
ORDER BY c.analysed_at, c.deploy_id LIMIT :n
