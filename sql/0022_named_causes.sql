-- Causes that name the change (issue 28): each verdict says its cause in words (cause_detail: the named change, the
-- counters' figures, or the statement a collateral slowdown is due to), lists the catalog and setting changes found
-- on its relations, database or role around the deploy (named_changes: a JSON array, one object per change, kind,
-- name, relation, dbid, role, the captures it happened between, before/after, undo, sentence), and how to undo the
-- first of them where that can be derived (undo_hint). New cause words (README, "Reading a verdict"); collateral
-- replaces the `contention: <queryid> <text>` of earlier rows, which keep it. radar.regression shows the three after
-- its existing columns.
-- depends: 0021_channel_resolve_waits

ALTER TABLE radar.verdict ADD COLUMN cause_detail text;
ALTER TABLE radar.verdict ADD COLUMN named_changes jsonb;
ALTER TABLE radar.verdict ADD COLUMN undo_hint text;

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
    v.queryid_shared_with,
    v.cause_detail, v.named_changes, v.undo_hint
FROM radar.verdict v
LEFT JOIN radar.deploy_event d ON d.deploy_id = v.deploy_id
LEFT JOIN radar.query q
    ON q.target = v.target AND q.dbid = v.dbid AND q.userid = v.userid AND q.queryid = v.queryid
   AND q.toplevel = v.toplevel
WHERE v.verdict = 'detected';
