-- Replaced statements and the deploy's own statements (issue 28): a statement the deploy rewrote (the old text stops,
-- the new one starts, on the same relations with a similar parse tree) is `replaced`, both halves, each naming the
-- other (partner_queryid) with the new half's mean per call over the old half's (per_call_factor); the deploy's own
-- utility statements (its DROP INDEX, its migrations' DDL) are `deploy_statement`, the change rather than new load.
-- depends: 0025_plan_rotation

ALTER TABLE radar.statement_change DROP CONSTRAINT statement_change_kind_check;
ALTER TABLE radar.statement_change ADD CONSTRAINT statement_change_kind_check
    CHECK (kind IN ('new', 'stopped', 'surge', 'n_plus_one', 'rows_per_call', 'replaced', 'deploy_statement'));
ALTER TABLE radar.statement_change ADD COLUMN partner_queryid bigint;  -- replaced: the other half
ALTER TABLE radar.statement_change ADD COLUMN per_call_factor double precision;  -- replaced: new mean / old mean
