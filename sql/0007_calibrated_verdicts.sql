-- Verdicts a team can trust (engine 2): the per-call spread pg_stat_statements reports, kept with every snapshot, and
-- what a calibrated verdict adds: a confidence interval for the slowdown factor, the family-adjusted p-value, the
-- statement's share of the analysis' false-alert budget, the serial correlation the test used, and the `drift`
-- reason. Existing columns keep their names; p_value, t_stat, dof and confidence change meaning with engine 2 (README,
-- "Reading a verdict"); radar.analysis.engine_version says which engine wrote a row.
-- depends: 0006_history_and_periodic

-- Population standard deviation of the calls' execution times since the entry began (ms, cumulative like the other
-- counters); null in rows stored before this migration.
ALTER TABLE radar.pgss_snapshot ADD COLUMN stddev_exec_time double precision;

ALTER TABLE radar.verdict
    ADD COLUMN factor_low         double precision,  -- 95% interval of the slowdown factor at the tested split
    ADD COLUMN factor_high        double precision,
    ADD COLUMN p_family           double precision,  -- p_value over the statement's budget weight (≤ budget: detected)
    ADD COLUMN budget_share       double precision,  -- the statement's share of the false-alert budget
    ADD COLUMN serial_correlation double precision;  -- AR(1) coefficient of the interval residuals the test used

ALTER TABLE radar.verdict DROP CONSTRAINT verdict_reason_check;
ALTER TABLE radar.verdict ADD CONSTRAINT verdict_reason_check CHECK (reason IN ('floor_samples', 'floor_calls',
    'below_threshold', 'no_change_point', 'outside_tolerance', 'not_significant', 'significant', 'drift'));

-- The same columns as before, in the same order, with the interval and the family-adjusted p-value appended.
DROP VIEW radar.regression;
CREATE VIEW radar.regression AS
SELECT
    v.deploy_id, v.target, d.deployed_at, d.service, d.version, d.url,
    v.dbid, v.userid, v.queryid, v.toplevel, v.fingerprint,
    q.query,
    v.change_at, v.change_at - d.deployed_at AS change_after_deploy,
    v.mean_before_ms, v.mean_after_ms, v.change_factor, v.p_value, v.confidence,
    v.calls_before, v.calls_after, v.cause, v.plan_diff,
    v.trigger,
    v.factor_low, v.factor_high, v.p_family
FROM radar.verdict v
LEFT JOIN radar.deploy_event d ON d.deploy_id = v.deploy_id
LEFT JOIN radar.query q
    ON q.target = v.target AND q.dbid = v.dbid AND q.userid = v.userid AND q.queryid = v.queryid
   AND q.toplevel = v.toplevel
WHERE v.verdict = 'detected';
