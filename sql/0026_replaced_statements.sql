-- Replaced statements and the deploy's own statements (issue 28): a statement the deploy rewrote (the old text stops,
-- the new one starts, on the same relations with a similar parse tree) is `replaced`, both halves, each naming the
-- other (partner_queryid) with the new half's mean per call over the old half's (per_call_factor); the deploy's own
-- DDL (its DROP INDEX, its migrations) is `deploy_statement`, the change rather than new load. A stopped statement's
-- onset_at is its last interval with calls at or before the split.
-- The widened CHECK is added NOT VALID (a brief ACCESS EXCLUSIVE lock, no scan) and validated in a transaction of its
-- own (SHARE UPDATE EXCLUSIVE: the analyses keep writing while the table is scanned), so this migration runs outside
-- a transaction, each statement safe to run again after a failure.
-- transactional: false
-- depends: 0025_plan_rotation

ALTER TABLE radar.statement_change DROP CONSTRAINT IF EXISTS statement_change_kind_check;
ALTER TABLE radar.statement_change ADD CONSTRAINT statement_change_kind_check
    CHECK (kind IN ('new', 'stopped', 'surge', 'n_plus_one', 'rows_per_call', 'replaced', 'deploy_statement'))
    NOT VALID;
ALTER TABLE radar.statement_change VALIDATE CONSTRAINT statement_change_kind_check;
ALTER TABLE radar.statement_change ADD COLUMN IF NOT EXISTS partner_queryid bigint;  -- replaced: the other half
ALTER TABLE radar.statement_change ADD COLUMN IF NOT EXISTS per_call_factor double precision;  -- replaced: new / old mean
