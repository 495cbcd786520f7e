INSERT INTO radar.deploy_look (deploy_id, target, look, basis, status, before_start, after_end, budget,
opened, detected, cleared, run_id) VALUES (:d, :t, :k, :basis, :status, :lo, :hi, :budget, :opened,
:detected, :cleared, :run) ON CONFLICT (deploy_id, target, look) DO UPDATE SET basis = EXCLUDED.basis,
status = EXCLUDED.status, before_start = EXCLUDED.before_start, after_end = EXCLUDED.after_end,
budget = EXCLUDED.budget, opened = EXCLUDED.opened, detected = EXCLUDED.detected,
cleared = EXCLUDED.cleared, ran_at = now(), run_id = EXCLUDED.run_id
