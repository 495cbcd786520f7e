-- Regressions without a deploy: periodic analyses beside deploy analyses, their reporting episodes, and each query's
-- history of post-deploy means with its band.
-- depends: 0005_alerts

-- An analysis is either of a deploy (deploy_id is a radar.deploy_event id) or periodic (deploy_id is
-- 'periodic:<hour partition key>', e.g. 'periodic:2026-11-29-21:00', covering the period that ends with that hour).
-- `trigger` is derived from the id, so the two can never disagree; deploy ids starting 'periodic:' are refused.
ALTER TABLE radar.analysis
    ADD COLUMN trigger text NOT NULL GENERATED ALWAYS AS (
        CASE WHEN deploy_id LIKE 'periodic:%' THEN 'periodic' ELSE 'deploy' END) STORED;
-- The deploy an analysis belongs to must exist; a periodic analysis has none (NULL is not checked by the key).
ALTER TABLE radar.analysis DROP CONSTRAINT analysis_deploy_id_fkey;
ALTER TABLE radar.analysis
    ADD COLUMN deploy_ref text GENERATED ALWAYS AS (
        CASE WHEN deploy_id LIKE 'periodic:%' THEN NULL ELSE deploy_id END) STORED
        REFERENCES radar.deploy_event (deploy_id);

ALTER TABLE radar.verdict
    ADD COLUMN trigger text NOT NULL GENERATED ALWAYS AS (
        CASE WHEN deploy_id LIKE 'periodic:%' THEN 'periodic' ELSE 'deploy' END) STORED;

CREATE INDEX verdict_periodic_detected_idx ON radar.verdict (target, fingerprint, change_at)
    WHERE verdict = 'detected' AND trigger = 'periodic';

-- Every detected regression, blamed on a deploy or found by the periodic check (deploy columns null then).
DROP VIEW radar.regression;
CREATE VIEW radar.regression AS
SELECT
    v.deploy_id, v.target, d.deployed_at, d.service, d.version, d.url,
    v.dbid, v.userid, v.queryid, v.toplevel, v.fingerprint,
    q.query,
    v.change_at, v.change_at - d.deployed_at AS change_after_deploy,
    v.mean_before_ms, v.mean_after_ms, v.change_factor, v.p_value, v.confidence,
    v.calls_before, v.calls_after, v.cause, v.plan_diff,
    v.trigger
FROM radar.verdict v
LEFT JOIN radar.deploy_event d ON d.deploy_id = v.deploy_id
LEFT JOIN radar.query q
    ON q.target = v.target AND q.dbid = v.dbid AND q.userid = v.userid AND q.queryid = v.queryid
   AND q.toplevel = v.toplevel
WHERE v.verdict = 'detected';

-- A query the periodic check reported: reported once, and again only after it recovered (README, "Periodic checks").
CREATE TABLE radar.regression_episode (
    target        text             NOT NULL,
    fingerprint   bigint           NOT NULL,   -- the query, across queryid rotation
    dbid          oid              NOT NULL,   -- the statement it was reported under
    userid        oid              NOT NULL,
    queryid       bigint           NOT NULL,
    toplevel      boolean          NOT NULL,
    opened_by     text             NOT NULL,   -- the periodic analysis that reported it (radar.analysis.deploy_id)
    opened_at     timestamptz      NOT NULL,   -- the end of that analysis's period
    change_at     timestamptz      NOT NULL,
    baseline_ms   double precision NOT NULL,   -- the mean of the segment before the change
    level_ms      double precision NOT NULL,   -- the mean of the segment after it
    recovered_at  timestamptz,                 -- end of the first later period whose mean was back near the baseline
    recovered_by  text,
    recovered_ms  double precision,
    PRIMARY KEY (target, fingerprint, opened_by)
);

-- An episode is open at time T when opened_at < T and it was not recovered by T (recovered_at null or later): so a
-- backfill or a re-run of an older hour sees the episodes as they were then.
CREATE INDEX regression_episode_query_idx ON radar.regression_episode (target, fingerprint, opened_at);

-- One point per query per analysed deploy: the mean over the window after the deploy, the band it was judged
-- against (made from earlier points only), and the running state the next point's band is made from.
CREATE TABLE radar.query_history (
    target          text             NOT NULL,
    fingerprint     bigint           NOT NULL,   -- the query, across queryid rotation
    deploy_id       text             NOT NULL REFERENCES radar.deploy_event (deploy_id) ON DELETE CASCADE,
    deployed_at     timestamptz      NOT NULL,
    dbid            oid              NOT NULL,
    userid          oid              NOT NULL,
    queryid         bigint           NOT NULL,
    toplevel        boolean          NOT NULL,
    mean_ms         double precision NOT NULL,   -- call-weighted mean over the window after the deploy
    calls           bigint           NOT NULL,
    begins_segment  boolean          NOT NULL,   -- the first point, or a regression detected here or since the last
    segment         integer          NOT NULL,   -- 0 for the first segment of the query, then 1, 2, ...
    centre_ms       double precision,            -- band centre: mean of the earlier points of the current segment
    spread_ms       double precision,            -- pooled sd of the earlier points' residuals from their segment means
    band_ms         double precision,            -- the band's half-width: a prediction interval (README)
    z_score         double precision,            -- (mean_ms - centre_ms) / spread_ms
    above_band      boolean          NOT NULL,   -- mean_ms above centre_ms + band_ms
    drift_rise      double precision,            -- the trend's relative rise over the segment's last points
    drift_p         double precision,            -- one-sided Kendall trend test of those points
    drift           boolean          NOT NULL,   -- creeping drift flagged at this point (README, "History bands")
    seg_points      integer          NOT NULL,   -- running state after this point: points in the current segment,
    seg_mean_ms     double precision NOT NULL,   --   their mean,
    points          integer          NOT NULL,   --   points of the query so far,
    segments        integer          NOT NULL,   --   segments so far,
    residual_ss     double precision NOT NULL,   --   and the sum of squared residuals from the segment means
    settings        jsonb            NOT NULL,
    PRIMARY KEY (target, fingerprint, deploy_id)
);

CREATE INDEX query_history_order_idx ON radar.query_history (target, fingerprint, deployed_at);
CREATE INDEX query_history_deploy_idx ON radar.query_history (deploy_id);
