-- Indexes the hot reads need (issue 17, part 4); benchmarks/hot_paths_bench.py shows each with EXPLAIN.
-- depends: 0011_deploy_impact

-- A target's rows of a time range (the analysis window, radar.pgss_intervals): the primary key starts with target but
-- puts the statement before captured_at, and the BRIN on captured_at finds every target's rows of the range.
CREATE INDEX pgss_snapshot_target_time_idx ON radar.pgss_snapshot (target, captured_at);

-- A statement's verdicts, whatever the analysis: retention keeps a statement in radar.query while a verdict shows it,
-- and the primary key starts with deploy_id (each look went through every analysis's part of it).
CREATE INDEX verdict_statement_idx ON radar.verdict (target, dbid, userid, queryid, toplevel);
