-- Weekly rhythms (issue 41, part 5; engine/rhythm.py, docs/method.md "Weekly rhythms"): each statement's calls and
-- time per UTC hour, stored each night with the day's noise sums (steps/noise.py) and read by the periodic check for
-- the hours its window covers, one to four weeks earlier, so that an hour is compared with its own usual level. Kept
-- longer than the snapshots (retention keeps RHYTHM_DAYS at least: four weeks and the one being checked).
-- verdict.expected_factor: the rise a statement's weekly rhythm alone explains (NaN or NULL: decided without one);
-- its raw means moved by change_factor × expected_factor.
-- Added with no default: no table rewrite. Safe to run again.
-- depends: 0038_wait_samples

CREATE TABLE IF NOT EXISTS radar.statement_hour (
    target   text             NOT NULL,
    hour     timestamptz      NOT NULL,  -- the hour's start; an interval counts in the hour its end falls in
    dbid     oid              NOT NULL,
    userid   oid              NOT NULL,
    queryid  bigint           NOT NULL,
    toplevel boolean          NOT NULL,
    calls    double precision NOT NULL,
    time_ms  double precision NOT NULL,
    PRIMARY KEY (target, hour, dbid, userid, queryid, toplevel)
);

COMMENT ON TABLE radar.statement_hour IS
    'Each statement''s calls and execution time per UTC hour, for the periodic check''s weekly rhythm (engine/rhythm.py).';

ALTER TABLE radar.verdict ADD COLUMN IF NOT EXISTS expected_factor double precision;

-- A history point's usual level (steps/history.py): its statement's mean in the hours of the deploy's window after,
-- relative to its mean over each of those weeks, the median of up to four earlier weeks (NULL: fewer than two). The
-- bands judge mean_ms / usual_level, so a deploy at the Monday peak and one on Sunday night compare like with like;
-- centre_ms, band_ms and seg_mean_ms are in those units.
ALTER TABLE radar.query_history ADD COLUMN IF NOT EXISTS usual_level double precision;
