-- Statements decided together (issue 29, groups): statements that share a shape, a role or a change named at the
-- deploy are also tested jointly ("this group slowed"), each group's verdict stored per analysis and replaced with
-- it in the same transaction; each member's verdict says when it belongs to a group that regressed.
-- depends: 0030_canary_verdicts

-- What a group's joint test combines of each statement is 0029's deploy_log_factor, deploy_log_se and deploy_dof.
-- The group that regressed a statement belongs to, in words: a nullable column without a default, added without
-- rewriting the table.
ALTER TABLE radar.verdict ADD COLUMN IF NOT EXISTS group_regressed text;

-- One row per group of an analysis (a deploy's, or a periodic check's): its kind and key, what it is in words, its
-- members (statement keys as parallel arrays), and its joint verdict.
CREATE TABLE IF NOT EXISTS radar.group_verdict (
    deploy_id      text             NOT NULL,
    target         text             NOT NULL,
    group_id       text             NOT NULL,
    kind           text             NOT NULL CHECK (kind IN ('shape', 'role', 'change')),
    label          text             NOT NULL,
    verdict        text             NOT NULL
                                    CHECK (verdict IN ('detected', 'no_regression', 'inconclusive', 'insufficient_data')),
    members        integer          NOT NULL,   -- the members the joint test combined (with an estimate at the deploy)
    members_above  integer          NOT NULL,   -- of them, those whose own estimate lies beyond 1 + θ
    statements     integer          NOT NULL,   -- the group's statements in the window
    factor         double precision,            -- the members' typical factor (random effects) and its 95% interval
    factor_low     double precision,
    factor_high    double precision,
    factor_bound   double precision,            -- its one-sided upper bound at the clearing level
    factor_but_one double precision,            -- the typical factor without the member most beyond 1 + θ
    tau            double precision,            -- the spread between members (log scale)
    z_stat         double precision,            -- Stouffer's Z of the members' one-sided statistics
    p_value        double precision,
    p_family       double precision,
    budget_share   double precision,            -- the group's share of the analysis's false-alert budget
    sentence       text,                        -- "15 statements of this shape slowed as a group, typically ×1.5 (×1.3–×1.7)"
    member_dbid    oid[]            NOT NULL,
    member_userid  oid[]            NOT NULL,
    member_queryid bigint[]         NOT NULL,
    member_toplevel boolean[]       NOT NULL,
    PRIMARY KEY (deploy_id, target, group_id),
    FOREIGN KEY (deploy_id, target) REFERENCES radar.analysis (deploy_id, target) ON DELETE CASCADE
);
