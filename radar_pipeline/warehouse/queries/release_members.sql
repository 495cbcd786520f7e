SELECT DISTINCT ON (e.target) e.deploy_id, e.target, e.deployed_at, e.service, e.version,
(a.deploy_id IS NOT NULL) AS analysed, a.analysed_at FROM radar.deploy_event e
LEFT JOIN radar.analysis a ON a.deploy_id = e.deploy_id AND a.target = e.target
WHERE e.deploy_id = ANY(:ids) ORDER BY e.target, e.deployed_at DESC, e.deploy_id DESC
