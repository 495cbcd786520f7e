-- What a verdict's noise estimate rests on (engine 2.4): the intervals of the statement's own history that the test
-- at the tested split combined with its window, 0 where it used the window alone (no history, too little, or a window
-- that conflicts with it), null where no split was tested and in rows stored before this migration (README, "Reading
-- a verdict"). radar.regression shows it after its existing columns.
-- depends: 0014_statement_noise

ALTER TABLE radar.verdict ADD COLUMN history_intervals double precision;  -- a count, stored as the engine gives it

-- The same columns as before, in the same order, with history_intervals appended (so the view is replaced in place).
CREATE OR REPLACE VIEW radar.regression AS
SELECT
    v.deploy_id, v.target, d.deployed_at, d.service, d.version, d.url,
    v.dbid, v.userid, v.queryid, v.toplevel, v.fingerprint,
    q.query,
    v.change_at, v.change_at - d.deployed_at AS change_after_deploy,
    v.mean_before_ms, v.mean_after_ms, v.change_factor, v.p_value, v.confidence,
    v.calls_before, v.calls_after, v.cause, v.plan_diff,
    v.trigger,
    v.factor_low, v.factor_high, v.p_family,
    v.history_intervals
FROM radar.verdict v
LEFT JOIN radar.deploy_event d ON d.deploy_id = v.deploy_id
LEFT JOIN radar.query q
    ON q.target = v.target AND q.dbid = v.dbid AND q.userid = v.userid AND q.queryid = v.queryid
   AND q.toplevel = v.toplevel
WHERE v.verdict = 'detected';
