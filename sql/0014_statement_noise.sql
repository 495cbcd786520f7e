-- Each statement's noise per ended UTC day (engine/noise.py): the additive sums its serial correlation and relative
-- dispersion are estimated from. The deploy analysis and the periodic check add up the days before their window
-- with one indexed read (warehouse/noise.py) instead of reading those days' samples, and give the estimates to the
-- engine (README, "Reading a verdict"). Written by the nightly pgss_compaction run, before it compacts, for every
-- ended day of the retention that has none yet; dropped with the day by retention.
-- depends: 0013_compact_history

CREATE TABLE radar.statement_noise (
    target              text             NOT NULL,
    day                 date             NOT NULL,  -- the UTC day whose intervals (by their end) the sums cover
    dbid                oid              NOT NULL,
    userid              oid              NOT NULL,
    queryid             bigint           NOT NULL,
    toplevel            boolean          NOT NULL,
    intervals           integer          NOT NULL,  -- intervals with calls in the blocks used (N)
    blocks              integer          NOT NULL,  -- 30-minute blocks with at least 3 of them (B)
    calls               double precision NOT NULL,  -- their calls
    calls_per_interval  double precision NOT NULL,  -- Σ over blocks of calls / intervals
    sum_squares         double precision NOT NULL,  -- Σ r², r the relative residual about the block's pooled mean
    sum_lag             double precision NOT NULL,  -- Σ r_i r_i+1 within blocks
    sum_lag2            double precision NOT NULL,  -- Σ r_i r_i+2 within blocks
    PRIMARY KEY (target, day, dbid, userid, queryid, toplevel)
);

-- The days done per target (a day may hold no statement with a usable block, and is not read again).
CREATE TABLE radar.statement_noise_day (
    target       text        NOT NULL,
    day          date        NOT NULL,
    statements   integer     NOT NULL,  -- rows written to radar.statement_noise
    samples      bigint      NOT NULL,  -- stored samples read
    computed_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (target, day)
);
