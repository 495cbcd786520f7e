-- Deploy events reported by CI, and the verdicts of every analysis of a deploy.
-- depends: 0001_pgss_snapshots

CREATE TABLE radar.deploy_event (
    deploy_id    text        PRIMARY KEY,       -- also the Dagster partition key of the `deploys` partitions
    target       text        NOT NULL,
    deployed_at  timestamptz NOT NULL,
    service      text,
    version      text,
    source       text        NOT NULL,          -- cli, github-actions, gitlab-ci, import
    url          text,
    metadata     jsonb       NOT NULL DEFAULT '{}'::jsonb,
    received_at  timestamptz NOT NULL DEFAULT now()
);

-- The sensor asks for events that became due since its cursor: by arrival or by the end of their window.
CREATE INDEX deploy_event_received_idx ON radar.deploy_event (received_at);
CREATE INDEX deploy_event_deployed_idx ON radar.deploy_event (deployed_at);

-- One row per analysed (deploy, target): when, with which settings and engine, and what it found.
CREATE TABLE radar.analysis (
    deploy_id          text        NOT NULL REFERENCES radar.deploy_event (deploy_id),
    target             text        NOT NULL,
    analysed_at        timestamptz NOT NULL DEFAULT now(),
    settings           jsonb       NOT NULL,
    engine_version     text        NOT NULL,
    window_start       timestamptz NOT NULL,
    window_end         timestamptz NOT NULL,
    queries            integer     NOT NULL,
    detected           integer     NOT NULL,
    no_regression      integer     NOT NULL,
    insufficient_data  integer     NOT NULL,
    run_id             text,
    PRIMARY KEY (deploy_id, target)
);

-- One row per analysed query per deploy. A re-analysis replaces a deploy's rows in one transaction.
CREATE TABLE radar.verdict (
    deploy_id                 text             NOT NULL,
    target                    text             NOT NULL,
    dbid                      oid              NOT NULL,
    userid                    oid              NOT NULL,
    queryid                   bigint           NOT NULL,
    toplevel                  boolean          NOT NULL,
    fingerprint               bigint           NOT NULL,
    verdict                   text             NOT NULL CHECK (verdict IN ('detected', 'no_regression', 'insufficient_data')),
    reason                    text             NOT NULL CHECK (reason IN ('floor_samples', 'floor_calls',
                                  'below_threshold', 'no_change_point', 'outside_tolerance', 'not_significant',
                                  'significant')),
    change_at                 timestamptz,
    mean_before_ms            double precision,
    mean_after_ms             double precision,
    change_factor             double precision,
    t_stat                    double precision,
    dof                       double precision,
    p_value                   double precision,
    confidence                double precision,
    n_before                  integer          NOT NULL,
    n_after                   integer          NOT NULL,
    calls_before              bigint           NOT NULL,
    calls_after               bigint           NOT NULL,
    segment_mean_before_ms    double precision,
    segment_mean_after_ms     double precision,
    rows_per_call_before      double precision,
    rows_per_call_after       double precision,
    blks_read_per_call_before double precision,
    blks_read_per_call_after  double precision,
    cause                     text,            -- detections only: see README, "Causes"
    plan_diff                 jsonb,
    merged_queryids           bigint[]         NOT NULL DEFAULT '{}',
    PRIMARY KEY (deploy_id, target, dbid, userid, queryid, toplevel),
    FOREIGN KEY (deploy_id, target) REFERENCES radar.analysis (deploy_id, target) ON DELETE CASCADE
);

CREATE INDEX verdict_detected_idx ON radar.verdict (deploy_id) WHERE verdict = 'detected';

-- Detected regressions with the query's text and the deploy they are blamed on.
CREATE VIEW radar.regression AS
SELECT
    v.deploy_id, v.target, d.deployed_at, d.service, d.version, d.url,
    v.dbid, v.userid, v.queryid, v.toplevel, v.fingerprint,
    q.query,
    v.change_at, v.change_at - d.deployed_at AS change_after_deploy,
    v.mean_before_ms, v.mean_after_ms, v.change_factor, v.p_value, v.confidence,
    v.calls_before, v.calls_after, v.cause, v.plan_diff
FROM radar.verdict v
JOIN radar.deploy_event d USING (deploy_id)
LEFT JOIN radar.query q
    ON q.target = v.target AND q.dbid = v.dbid AND q.userid = v.userid AND q.queryid = v.queryid
   AND q.toplevel = v.toplevel
WHERE v.verdict = 'detected';
