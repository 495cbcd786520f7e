INSERT INTO radar.analysis (deploy_id, target, analysed_at, settings, engine_version, window_start,
window_end, queries, detected, no_regression, inconclusive, insufficient_data, run_id) VALUES
(:deploy_id, :target, now(), CAST(:settings AS jsonb), :engine_version, :lo, :hi, :queries, :detected,
:no_regression, :inconclusive, :insufficient, :run_id) ON CONFLICT (deploy_id, target) DO UPDATE SET
analysed_at = now(), settings = EXCLUDED.settings, engine_version = EXCLUDED.engine_version,
window_start = EXCLUDED.window_start, window_end = EXCLUDED.window_end, queries = EXCLUDED.queries,
detected = EXCLUDED.detected, no_regression = EXCLUDED.no_regression,
inconclusive = EXCLUDED.inconclusive, insufficient_data = EXCLUDED.insufficient_data,
run_id = EXCLUDED.run_id
