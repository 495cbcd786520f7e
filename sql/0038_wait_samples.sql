-- What the watched statements waited on (issue 39, "waits named"; collector/waits.py): one sample of
-- pg_stat_activity per scrape, its active sessions grouped by statement and wait. wait_capture has a row per sample
-- taken (with no session active too: the denominator a statement's share of samples is counted against), and
-- wait_sample a row per statement and wait in it: wait_event_type / wait_event NULL while running; for a
-- heavyweight lock, the statement the first blocking session runs or last ran. Retention drops both with the
-- snapshots' days (steps/retention.py).
-- depends: 0036_gate_tiers

CREATE TABLE radar.wait_capture (
    target      text        NOT NULL,
    captured_at timestamptz NOT NULL,
    PRIMARY KEY (target, captured_at)
);

CREATE TABLE radar.wait_sample (
    target          text        NOT NULL,
    captured_at     timestamptz NOT NULL,
    dbid            oid         NOT NULL,
    userid          oid         NOT NULL,
    queryid         bigint      NOT NULL,
    wait_event_type text,
    wait_event      text,
    blocker_queryid bigint,
    blocker_userid  oid,
    sessions        integer     NOT NULL CHECK (sessions > 0),
    FOREIGN KEY (target, captured_at) REFERENCES radar.wait_capture (target, captured_at) ON DELETE CASCADE
);
CREATE INDEX wait_sample_statement ON radar.wait_sample (target, dbid, userid, queryid, captured_at);
