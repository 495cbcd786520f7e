SELECT deploy_id, target, least(floor(ln(CAST(extract(epoch FROM now() - due_at) AS double precision)
/ :base + 1) / ln(2)), :last) AS attempt
FROM (SELECT e.deploy_id, e.target, e.deployed_at,
greatest(e.received_at, e.deployed_at + :delay) AS due_at
FROM radar.deploy_event e WHERE e.canary_role IS NOT NULL
AND NOT EXISTS (SELECT 1 FROM radar.canary_analysis c WHERE c.deploy_id = e.deploy_id)) d
WHERE due_at <= now() AND due_at > now() - :horizon
ORDER BY attempt, deployed_at, deploy_id LIMIT :n
