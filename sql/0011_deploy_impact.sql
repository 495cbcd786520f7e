-- What else a deploy changed (engine/impact.py), replaced with its analysis in the same transaction.

-- Load per minute of window either side of the split, for the whole target (dbid = -1) and per database.
CREATE TABLE radar.deploy_impact (
    deploy_id              text             NOT NULL,
    target                 text             NOT NULL,
    dbid                   bigint           NOT NULL,  -- -1: the whole target
    calls_per_min_before   double precision NOT NULL,
    calls_per_min_after    double precision NOT NULL,
    exec_ms_per_min_before double precision NOT NULL,  -- execution time (ms) per minute of window
    exec_ms_per_min_after  double precision NOT NULL,
    statements_before      integer          NOT NULL,  -- statements with calls on that side
    statements_after       integer          NOT NULL,
    PRIMARY KEY (deploy_id, target, dbid),
    FOREIGN KEY (deploy_id, target) REFERENCES radar.analysis (deploy_id, target) ON DELETE CASCADE
);

-- Statements whose load changed at the split: new, stopped, a call surge (n_plus_one when its latency did not
-- change), or a rows-per-call change. Only those rows; every statement's latency verdict is in radar.verdict.
CREATE TABLE radar.statement_change (
    deploy_id              text             NOT NULL,
    target                 text             NOT NULL,
    dbid                   oid              NOT NULL,
    userid                 oid              NOT NULL,
    queryid                bigint           NOT NULL,
    toplevel               boolean          NOT NULL,
    kind                   text             NOT NULL
        CHECK (kind IN ('new', 'stopped', 'surge', 'n_plus_one', 'rows_per_call')),
    heavy                  boolean          NOT NULL,  -- adds at least new_statement_share of the target's time
    calls_before           bigint           NOT NULL,
    calls_after            bigint           NOT NULL,
    calls_per_min_before   double precision NOT NULL,
    calls_per_min_after    double precision NOT NULL,
    exec_ms_per_min_before double precision NOT NULL,
    exec_ms_per_min_after  double precision NOT NULL,
    mean_before_ms         double precision,
    mean_after_ms          double precision,
    rows_per_call_before   double precision,
    rows_per_call_after    double precision,
    share_ratio            double precision,  -- (its share of the target's calls after) / (before)
    dispersion             double precision,  -- φ of its calls relative to the target's throughput
    p_value                double precision,  -- the surge test's one-sided p (H0: share ratio ≤ surge_ratio)
    p_family               double precision,  -- adjusted for the family (a surge when ≤ false_alert_budget)
    onset_at               timestamptz,       -- new: its first interval after the split; surge: the split
    PRIMARY KEY (deploy_id, target, dbid, userid, queryid, toplevel),
    FOREIGN KEY (deploy_id, target) REFERENCES radar.analysis (deploy_id, target) ON DELETE CASCADE
);
