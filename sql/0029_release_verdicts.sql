-- Fleet verdicts (issue 29, docs/fleets.md): a release deployed to several targets is also decided jointly per
-- statement key (the parser fingerprint and nesting level, the same statement on every server).
-- radar.verdict gains each statement's evidence at the deploy's own split: the log factor, its standard error and
-- degrees of freedom (nullable columns without a default: a catalogue change, no rewrite of the table).
-- radar.release_verdict holds one row per release and key; radar.release_look one row per final decision of the
-- release (its look, which engine.budget's schedule charges) and the basis it rested on: the member deploys and each
-- one's analysed_at. A final decision is kept while its basis holds; only a changed basis spends the next look.
-- depends: 0028_later_looks

ALTER TABLE radar.verdict ADD COLUMN IF NOT EXISTS deploy_log_factor double precision;
ALTER TABLE radar.verdict ADD COLUMN IF NOT EXISTS deploy_log_se double precision;
ALTER TABLE radar.verdict ADD COLUMN IF NOT EXISTS deploy_dof double precision;

CREATE TABLE IF NOT EXISTS radar.release_look (
    release_id      text        NOT NULL,
    look            integer     NOT NULL CHECK (look >= 0),
    member_deploys  text[]      NOT NULL,   -- the deploys the look decided, sorted
    member_analysed_at timestamptz[] NOT NULL,  -- each one's radar.analysis.analysed_at then (in that order)
    decided_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (release_id, look)
);
-- a database that ran this migration before the basis was stored: its looks have none, and the next decision of
-- such a release spends the next look
ALTER TABLE radar.release_look ADD COLUMN IF NOT EXISTS member_analysed_at timestamptz[];

CREATE TABLE IF NOT EXISTS radar.release_verdict (
    release_id        text             NOT NULL,
    fingerprint       bigint           NOT NULL,
    toplevel          boolean          NOT NULL,
    status            text             NOT NULL CHECK (status IN ('partial', 'final')),
    look              integer,                  -- the look a final verdict spent (NULL while partial)
    verdict           text             NOT NULL
        CHECK (verdict IN ('detected', 'no_regression', 'inconclusive', 'pending')),
    factor            double precision NOT NULL,
    factor_low        double precision NOT NULL,
    factor_high       double precision NOT NULL,
    p_value           double precision NOT NULL,
    p_family          double precision NOT NULL,
    budget_share      double precision NOT NULL,
    heterogeneity_p   double precision NOT NULL,
    i_squared         double precision NOT NULL,
    tau2              double precision NOT NULL,
    targets           integer          NOT NULL,  -- targets with evidence on the key
    targets_agreeing  integer          NOT NULL,  -- of them, those whose own 95% interval holds the fleet factor
    consistent        boolean          NOT NULL,
    only_on           text[]           NOT NULL,  -- the targets slower than the rest, when they differ
    report            text             NOT NULL,  -- "×1.40 on 8 of 8 targets", "only on shard-3 ×1.95 (…)"
    member_targets    text[]           NOT NULL,  -- the targets whose evidence was combined
    members           integer          NOT NULL,  -- the release's deploys …
    analysed          integer          NOT NULL,  -- … and how many of them were analysed
    example_deploy_id text             NOT NULL,  -- a member deploy holding the statement (its text, in radar.query)
    example_target    text             NOT NULL,
    example_queryid   bigint           NOT NULL,
    example_dbid      oid              NOT NULL,
    example_userid    oid              NOT NULL,
    decided_at        timestamptz      NOT NULL DEFAULT now(),
    PRIMARY KEY (release_id, fingerprint, toplevel)
);
