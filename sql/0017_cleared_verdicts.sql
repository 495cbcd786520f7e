-- Three answers per statement, one per deploy (engine 2.5; README, "Reading a verdict"). `no_regression` now means
-- cleared: the slowdown's one-sided upper bound at clear_level (95%) lies within the tolerance at every split where the
-- change could begin, and factor_bound is that bound; `inconclusive` is neither detected nor cleared. A deploy's state
-- is in radar.deploy_state, for `radar gate` and anyone with SQL.
-- depends: 0016_shared_queryid

ALTER TABLE radar.verdict DROP CONSTRAINT verdict_verdict_check;
ALTER TABLE radar.verdict ADD CONSTRAINT verdict_verdict_check
    CHECK (verdict IN ('detected', 'no_regression', 'inconclusive', 'insufficient_data'));
ALTER TABLE radar.verdict DROP CONSTRAINT verdict_reason_check;
ALTER TABLE radar.verdict ADD CONSTRAINT verdict_reason_check CHECK (reason IN ('floor_samples', 'floor_calls',
    'below_threshold', 'no_change_point', 'outside_tolerance', 'not_significant', 'significant', 'drift',
    'interval_spans_threshold', 'interval_too_wide', 'history_conflict'));

-- The upper bound of the slowdown factor the clearing rule compared with its tolerance (null for detections, for
-- insufficient_data and in rows stored before this migration).
ALTER TABLE radar.verdict ADD COLUMN factor_bound double precision;

-- How many statements were inconclusive. Null in analyses stored before this migration: their engine's
-- no_regression did not mean cleared (it covered "too little data to say" too), so they never make a deploy pass.
ALTER TABLE radar.analysis ADD COLUMN inconclusive integer;

-- Each recorded deploy's state:
--   pending       no analysis yet (its window is still open, or it waits for its run);
--   fail          something was detected;
--   pass          nothing detected, and the cleared statements hold at least pass_share of the execution time after
--                 the deploy in its window;
--   inconclusive  otherwise (including an analysis stored before engine 2.5, and a window where nothing ran).
-- The execution time is the after side's (calls_after × mean_after_ms, summed over the deploy's statements): a
-- statement the deploy stopped has no after to judge and nothing to gate, while one it added (insufficient_data, no
-- before) is exactly what cannot be cleared. pass_share is 0.9 unless the session or the database sets
-- radar.pass_share (SET radar.pass_share = '0.95', or ALTER DATABASE ... SET radar.pass_share = '0.95');
-- cleared_share is there for anyone comparing with a share of their own.
-- Each deploy's analyses and verdicts are read through their primary keys (deploy_id first), whatever the query asks.
CREATE VIEW radar.deploy_state AS
SELECT
    d.deploy_id,
    d.target,
    d.deployed_at,
    d.service,
    d.version,
    CASE
        WHEN a.analyses = 0 THEN 'pending'
        WHEN c.detected > 0 THEN 'fail'
        WHEN NOT a.before_clearing AND c.exec_ms > 0 AND c.cleared_ms >= s.pass_share * c.exec_ms THEN 'pass'
        ELSE 'inconclusive'
    END AS state,
    a.analysed_at,
    a.engine_version,
    c.detected,
    c.no_regression,
    c.inconclusive,
    c.insufficient_data,
    c.exec_ms,
    c.cleared_ms,
    CASE WHEN c.exec_ms > 0 THEN c.cleared_ms / c.exec_ms END AS cleared_share,
    s.pass_share
FROM radar.deploy_event d
CROSS JOIN (
    SELECT coalesce(CAST(nullif(current_setting('radar.pass_share', true), '') AS double precision), 0.9) AS pass_share
) s
CROSS JOIN LATERAL (
    SELECT count(*) AS analyses, max(analysed_at) AS analysed_at, min(engine_version) AS engine_version,
           coalesce(bool_or(inconclusive IS NULL), false) AS before_clearing
    FROM radar.analysis WHERE deploy_id = d.deploy_id
) a
CROSS JOIN LATERAL (
    SELECT
        count(*) FILTER (WHERE verdict = 'detected') AS detected,
        count(*) FILTER (WHERE verdict = 'no_regression') AS no_regression,
        count(*) FILTER (WHERE verdict = 'inconclusive') AS inconclusive,
        count(*) FILTER (WHERE verdict = 'insufficient_data') AS insufficient_data,
        coalesce(sum(calls_after * mean_after_ms) FILTER (WHERE calls_after > 0), 0) AS exec_ms,
        coalesce(sum(calls_after * mean_after_ms) FILTER (WHERE calls_after > 0 AND verdict = 'no_regression'), 0)
            AS cleared_ms
    FROM radar.verdict WHERE deploy_id = d.deploy_id
) c;
