-- From PostgreSQL 18, statements that differ only in the tables behind the same alias share one queryid (README,
-- "Plans and plan diffs"): a detection's row names the other tables PostgreSQL gives its queryid to, as the
-- analysis found them on the watched server; empty where there are none, null where it was not or could not be
-- checked (the target not configured or unreachable, rows stored before this migration). Such a detection gets no
-- plan diff. radar.regression shows it after its existing columns.
-- depends: 0015_verdict_history

ALTER TABLE radar.verdict ADD COLUMN queryid_shared_with text[];

-- The same columns as before, in the same order, with queryid_shared_with appended (the view replaced in place).
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
    v.history_intervals,
    v.queryid_shared_with
FROM radar.verdict v
LEFT JOIN radar.deploy_event d ON d.deploy_id = v.deploy_id
LEFT JOIN radar.query q
    ON q.target = v.target AND q.dbid = v.dbid AND q.userid = v.userid AND q.queryid = v.queryid
   AND q.toplevel = v.toplevel
WHERE v.verdict = 'detected';
