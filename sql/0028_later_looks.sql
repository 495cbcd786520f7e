-- Later looks (issue 29, docs/looks.md): a statement left open by a deploy's first verdict (inconclusive or
-- insufficient_data) is decided again at 2W, 4W and 8W after the deploy, until it is decided, the target's next deploy
-- cuts the after side, or the last look. A look that decides a statement replaces its verdict row, which then says
-- which look found it (look; 0 is the first verdict) and where that look's after side ended (look_end), and keeps the
-- statement's execution time in the first look's window (first_exec_ms), so the deploy's state weighs every statement
-- over the same span. A decided verdict is never changed by a later look. Each look run is recorded in
-- radar.deploy_look (basis: the first verdict it continued, so a re-analysis of the deploy starts its looks afresh;
-- status failed: its latest attempt failed, and it is not asked for again).
-- Columns added with constant defaults or none: no table rewrite. Safe to run again.
-- depends: 0027_release_and_canary

ALTER TABLE radar.verdict ADD COLUMN IF NOT EXISTS look smallint NOT NULL DEFAULT 0;
ALTER TABLE radar.verdict ADD COLUMN IF NOT EXISTS look_end timestamptz;
ALTER TABLE radar.verdict ADD COLUMN IF NOT EXISTS first_exec_ms double precision;

CREATE TABLE IF NOT EXISTS radar.deploy_look (
    deploy_id     text             NOT NULL REFERENCES radar.deploy_event (deploy_id) ON DELETE CASCADE,
    target        text             NOT NULL,
    look          smallint         NOT NULL CHECK (look BETWEEN 1 AND 15),
    basis         timestamptz      NOT NULL,  -- analysed_at of the first verdict this look continued
    status        text             NOT NULL CHECK (status IN ('done', 'cut', 'closed', 'failed')),
    before_start  timestamptz,                -- the look's window (null when not run: cut)
    after_end     timestamptz,
    budget        double precision,           -- the share of the deploy's budget B this look spent
    opened        integer          NOT NULL,  -- statements open before it
    detected      integer          NOT NULL DEFAULT 0,
    cleared       integer          NOT NULL DEFAULT 0,
    ran_at        timestamptz      NOT NULL DEFAULT now(),
    run_id        text,
    PRIMARY KEY (deploy_id, target, look)
);

-- The target's deploys in time: a look's neighbouring deploys, and the next deploy that cuts each due look.
CREATE INDEX IF NOT EXISTS deploy_event_target_idx ON radar.deploy_event (target, deployed_at);

-- The deploy's state as before (sql/0017), now over every look: a statement's verdict row is its latest look's, its
-- execution time the first look's (first_exec_ms where a later look replaced the row). analysed_at is the latest
-- analysis or look that changed a verdict (a code-host status is sent again when it moves); looks_done is the last
-- look run (0: the first verdict only), late_detected the detections a later look found.
CREATE OR REPLACE VIEW radar.deploy_state AS
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
    greatest(a.analysed_at, l.changed_at) AS analysed_at,
    a.engine_version,
    c.detected,
    c.no_regression,
    c.inconclusive,
    c.insufficient_data,
    c.exec_ms,
    c.cleared_ms,
    CASE WHEN c.exec_ms > 0 THEN c.cleared_ms / c.exec_ms END AS cleared_share,
    s.pass_share,
    coalesce(l.looks_done, 0) AS looks_done,
    c.late_detected
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
    SELECT max(k.look) AS looks_done,
           max(k.ran_at) FILTER (WHERE k.detected + k.cleared > 0) AS changed_at
    FROM radar.deploy_look k JOIN radar.analysis x ON x.deploy_id = k.deploy_id AND x.target = k.target
    WHERE k.deploy_id = d.deploy_id AND k.basis = x.analysed_at
) l
CROSS JOIN LATERAL (
    SELECT
        count(*) FILTER (WHERE verdict = 'detected') AS detected,
        count(*) FILTER (WHERE verdict = 'no_regression') AS no_regression,
        count(*) FILTER (WHERE verdict = 'inconclusive') AS inconclusive,
        count(*) FILTER (WHERE verdict = 'insufficient_data') AS insufficient_data,
        coalesce(sum(coalesce(first_exec_ms, calls_after * mean_after_ms))
            FILTER (WHERE coalesce(first_exec_ms, calls_after * mean_after_ms) > 0), 0) AS exec_ms,
        coalesce(sum(coalesce(first_exec_ms, calls_after * mean_after_ms))
            FILTER (WHERE coalesce(first_exec_ms, calls_after * mean_after_ms) > 0 AND verdict = 'no_regression'), 0)
            AS cleared_ms,
        count(*) FILTER (WHERE verdict = 'detected' AND look > 0) AS late_detected
    FROM radar.verdict WHERE deploy_id = d.deploy_id
) c;
