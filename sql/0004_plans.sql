-- Plans of the statements that matter, stored only when their shape changes, and the statements that cannot be planned.
-- depends: 0003_snapshot_time_index

CREATE TABLE radar.plan_snapshot (
    target       text             NOT NULL,
    dbid         oid              NOT NULL,
    userid       oid              NOT NULL,
    queryid      bigint           NOT NULL,
    toplevel     boolean          NOT NULL,
    captured_at  timestamptz      NOT NULL,   -- the watched server's clock
    source       text             NOT NULL CHECK (source IN ('pg_store_plans', 'generic_plan')),
    plan_hash    text             NOT NULL,   -- node types, relations, indexes and join structure; no costs or rows
    root_node    text             NOT NULL,   -- e.g. "Index Scan using orders_customer_idx on orders"
    total_cost   double precision,
    plan         jsonb            NOT NULL,   -- the plan tree as EXPLAIN (FORMAT JSON) gives it
    PRIMARY KEY (target, dbid, userid, queryid, toplevel, captured_at)
);

-- Statements whose plan could not be had (utility statements, texts that fail to plan, another database): not tried
-- again every cycle, only after a day.
CREATE TABLE radar.plan_skip (
    target       text        NOT NULL,
    dbid         oid         NOT NULL,
    userid       oid         NOT NULL,
    queryid      bigint      NOT NULL,
    toplevel     boolean     NOT NULL,
    reason       text        NOT NULL,
    skipped_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (target, dbid, userid, queryid, toplevel)
);

-- When each statement's plan was last looked at, and its shape then (a plan is stored only when its shape changes, so
-- this tells "unchanged since" from "not looked at since").
CREATE TABLE radar.plan_check (
    target       text        NOT NULL,
    dbid         oid         NOT NULL,
    userid       oid         NOT NULL,
    queryid      bigint      NOT NULL,
    toplevel     boolean     NOT NULL,
    checked_at   timestamptz NOT NULL,
    plan_hash    text        NOT NULL,
    PRIMARY KEY (target, dbid, userid, queryid, toplevel)
);
