-- The canary arm (issue 29): a deploy that names a canary role (radar.deploy_event.canary_role) is decided, W after
-- the deploy, by comparing the canary role's statements with the same statement keys of the stable role over the same
-- minutes (docs/canary.md). One row per canary analysis (its roles, window, state, or the error that stopped it) and
-- one per statement key it decided. A re-analysis replaces both in one transaction.
-- depends: 0029_release_verdicts

CREATE TABLE IF NOT EXISTS radar.canary_analysis (
    deploy_id       text        PRIMARY KEY REFERENCES radar.deploy_event (deploy_id) ON DELETE CASCADE,
    target          text        NOT NULL,
    canary_role     text        NOT NULL,
    canary_userid   oid,
    stable_role     text,
    stable_userid   oid,
    window_start    timestamptz NOT NULL,
    window_end      timestamptz NOT NULL,
    analysed_at     timestamptz NOT NULL DEFAULT now(),
    settings        jsonb       NOT NULL,
    engine_version  text        NOT NULL,
    state           text        NOT NULL CHECK (state IN ('pass', 'fail', 'inconclusive', 'error')),
    error           text,
    statements      integer     NOT NULL DEFAULT 0,
    detected        integer     NOT NULL DEFAULT 0,
    no_regression   integer     NOT NULL DEFAULT 0,
    inconclusive    integer     NOT NULL DEFAULT 0,
    insufficient_data integer   NOT NULL DEFAULT 0,
    run_id          text
);

CREATE TABLE IF NOT EXISTS radar.canary_verdict (
    deploy_id           text             NOT NULL REFERENCES radar.canary_analysis (deploy_id) ON DELETE CASCADE,
    dbid                oid              NOT NULL,
    queryid             bigint           NOT NULL,
    toplevel            boolean          NOT NULL,
    verdict             text             NOT NULL
        CHECK (verdict IN ('detected', 'no_regression', 'inconclusive', 'insufficient_data')),
    reason              text             NOT NULL,
    change_factor       double precision,
    factor_low          double precision,
    factor_high         double precision,
    factor_bound        double precision,
    p_value             double precision,
    p_family            double precision,
    budget_share        double precision,
    mean_canary_ms      double precision,
    mean_stable_ms      double precision,
    calls_canary        bigint           NOT NULL,
    calls_stable        bigint           NOT NULL,
    intervals           integer          NOT NULL,
    serial_correlation  double precision,
    PRIMARY KEY (deploy_id, dbid, queryid, toplevel)
);

-- canary_sensor's query (warehouse.canary.due_canaries) reads only the deploys that name a canary role.
CREATE INDEX IF NOT EXISTS deploy_event_canary_idx ON radar.deploy_event (deployed_at) WHERE canary_role IS NOT NULL;
