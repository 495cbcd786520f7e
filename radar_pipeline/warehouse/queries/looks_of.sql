SELECT k.target, k.look, k.status, k.before_start, k.after_end, k.budget, k.opened, k.detected,
k.cleared, k.ran_at, k.run_id FROM radar.deploy_look k JOIN radar.analysis a
ON a.deploy_id = k.deploy_id AND a.target = k.target AND a.analysed_at = k.basis
WHERE k.deploy_id = :d ORDER BY k.target, k.look
