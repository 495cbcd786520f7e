-- Plans for every active statement (issue 28, item 5): each plan capture's outcome per target, so an analysis can say
-- in words why a statement has no plan from before a change (no plan source on the server and why, the capture
-- failed, the statement first ran after the last capture, or the rotation had not reached it yet). One row per
-- capture run, kept PLAN_RUN_DAYS (warehouse/plans.py); when each statement was last planned is radar.plan_check's
-- checked_at (0004), and the statements that could not be planned radar.plan_skip's.
-- depends: 0024_newer_counters

CREATE TABLE radar.plan_capture_run (
    target              text        NOT NULL,
    captured_at         timestamptz NOT NULL,   -- the watched server's clock, as radar.plan_snapshot's and radar.plan_skip's
    source              text,                   -- pg_store_plans or generic_plan; null: no plans (see reason)
    reason              text,                   -- why the better source, or any, was not used; or why the run failed
    server_version_num  integer,                -- null when the run failed before reaching the server
    busiest             integer     NOT NULL DEFAULT 0,  -- statements tried: the busiest since the last run,
    new                 integer     NOT NULL DEFAULT 0,  -- first seen since the last run,
    rotation            integer     NOT NULL DEFAULT 0,  -- and the least recently planned of the rest
    stored              integer     NOT NULL DEFAULT 0,  -- plans stored (a shape not stored before)
    skipped             integer     NOT NULL DEFAULT 0,  -- statements that could not be planned
    out_of_time         integer     NOT NULL DEFAULT 0,  -- not tried: the run's time ran out
    held_back           integer     NOT NULL DEFAULT 0,  -- not tried: to leave pg_stat_statements room (each
    held_back_reason    text,                   -- EXPLAIN is an entry of its own), and why (its entries, its max)
    warehouse_at        timestamptz,            -- the warehouse's clock beside captured_at: a run that fails before
                                                -- reaching the server is stamped at its clock estimated from this
    PRIMARY KEY (target, captured_at)
);
