-- Real plans from auto_explain (issue 39, "real plans"; collector/auto_explain.py): a plan capture reads the plans
-- auto_explain logged to a target's jsonlog (RADAR_AUTO_EXPLAIN_LOGS) and stores them as source 'auto_explain',
-- preferred to EXPLAIN (GENERIC_PLAN) for the statements it logged. The widened CHECK is added NOT VALID (a brief
-- lock, no scan) and then validated. Safe to run again.
-- depends: 0040_intended_baseline

ALTER TABLE radar.plan_snapshot DROP CONSTRAINT IF EXISTS plan_snapshot_source_check;
ALTER TABLE radar.plan_snapshot ADD CONSTRAINT plan_snapshot_source_check
    CHECK (source IN ('pg_store_plans', 'generic_plan', 'auto_explain')) NOT VALID;
ALTER TABLE radar.plan_snapshot VALIDATE CONSTRAINT plan_snapshot_source_check;
