-- The newer pg_stat_statements counters (issue 28, item 3), stored where the watched server's extension has them and
-- null where it lacks them (never 0): planning (plans, total_plan_time: 0 unless pg_stat_statements.track_planning is
-- on), temp blocks read and temp I/O time, WAL bytes and wal_buffers_full, the JIT's time per phase and functions
-- compiled, and the parallel workers planned and launched (pgss_model.OPTIONAL_COUNTERS gives the extension version
-- of each). radar.pgss_compact gains them as arrays (integer counters delta-encoded, times as stored), so the row type
-- radar.pgss_snapshot that radar.pgss_compact_rows, radar.pgss_samples, radar.pgss_last_sample and the view
-- radar.pgss_sample return gains them at its end; the decoding function and the view are recreated with them.
-- radar.verdict keeps a detection's per-call figures of the counters its cause reads (engine/causes.py), before and
-- after, as it keeps rows and blocks read per call.
-- depends: 0023_catalog_facts

ALTER TABLE radar.pgss_snapshot
    ADD COLUMN plans                      bigint,
    ADD COLUMN total_plan_time            double precision,  -- milliseconds
    ADD COLUMN temp_blks_read             bigint,
    ADD COLUMN temp_blk_read_time         double precision,  -- PostgreSQL 15+
    ADD COLUMN temp_blk_write_time        double precision,  -- PostgreSQL 15+
    ADD COLUMN wal_bytes                  bigint,
    ADD COLUMN wal_buffers_full           bigint,            -- PostgreSQL 18+
    ADD COLUMN jit_functions              bigint,            -- PostgreSQL 15+, as the jit_* times
    ADD COLUMN jit_generation_time        double precision,
    ADD COLUMN jit_inlining_time          double precision,
    ADD COLUMN jit_optimization_time      double precision,
    ADD COLUMN jit_emission_time          double precision,
    ADD COLUMN jit_deform_time            double precision,  -- PostgreSQL 17+
    ADD COLUMN parallel_workers_to_launch bigint,            -- PostgreSQL 18+
    ADD COLUMN parallel_workers_launched  bigint;            -- PostgreSQL 18+

-- Null arrays in the days compacted before this migration. A counter is null in a statement's samples only before its
-- server's extension (or radar) had it, so the delta of its first known value is that value, and a decoded sample is
-- the sum of the known deltas up to it (an extension is never downgraded).
ALTER TABLE radar.pgss_compact
    ADD COLUMN plans                      bigint[],            -- delta-encoded
    ADD COLUMN total_plan_time            double precision[],  -- as stored
    ADD COLUMN temp_blks_read             bigint[],            -- delta-encoded
    ADD COLUMN temp_blk_read_time         double precision[],
    ADD COLUMN temp_blk_write_time        double precision[],
    ADD COLUMN wal_bytes                  bigint[],            -- delta-encoded
    ADD COLUMN wal_buffers_full           bigint[],            -- delta-encoded
    ADD COLUMN jit_functions              bigint[],            -- delta-encoded
    ADD COLUMN jit_generation_time        double precision[],
    ADD COLUMN jit_inlining_time          double precision[],
    ADD COLUMN jit_optimization_time      double precision[],
    ADD COLUMN jit_emission_time          double precision[],
    ADD COLUMN jit_deform_time            double precision[],
    ADD COLUMN parallel_workers_to_launch bigint[],            -- delta-encoded
    ADD COLUMN parallel_workers_launched  bigint[];            -- delta-encoded

-- As the other arrays (sql/0013): kept in the row, compressed with pglz, in the partitions that exist now (the new
-- ones get it from radar.ensure_pgss_compact_partition).
DO $$
DECLARE
    part record;
    col text;
BEGIN
    FOR part IN SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
                WHERE i.inhparent = 'radar.pgss_compact'::regclass
    LOOP
        FOREACH col IN ARRAY ARRAY['plans', 'total_plan_time', 'temp_blks_read', 'temp_blk_read_time',
                                   'temp_blk_write_time', 'wal_bytes', 'wal_buffers_full', 'jit_functions',
                                   'jit_generation_time', 'jit_inlining_time', 'jit_optimization_time',
                                   'jit_emission_time', 'jit_deform_time', 'parallel_workers_to_launch',
                                   'parallel_workers_launched']
        LOOP
            EXECUTE format('ALTER TABLE radar.%I ALTER COLUMN %I SET STORAGE MAIN, ALTER COLUMN %I SET COMPRESSION pglz',
                           part.relname, col, col);
        END LOOP;
    END LOOP;
END;
$$;

-- As sql/0013, with the newer counters after stddev_exec_time (the row type's order). A null element of a
-- delta-encoded counter decodes to null.
CREATE OR REPLACE FUNCTION radar.pgss_compact_rows(
    c radar.pgss_compact, from_at timestamptz DEFAULT '-infinity', to_at timestamptz DEFAULT 'infinity',
    only_last boolean DEFAULT false)
RETURNS SETOF radar.pgss_snapshot
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
WITH bounds AS (  -- microseconds after first_at; elements are > lo and <= hi
    SELECT CASE WHEN isfinite(from_at) THEN CAST(extract(epoch FROM from_at) * 1000000 AS bigint)
                                            - CAST(extract(epoch FROM c.first_at) * 1000000 AS bigint)
                ELSE -1 END AS lo,
           CASE WHEN isfinite(to_at) THEN CAST(extract(epoch FROM to_at) * 1000000 AS bigint)
                                          - CAST(extract(epoch FROM c.first_at) * 1000000 AS bigint)
                ELSE 9223372036854775807 END AS hi
), span AS (  -- width_bucket(x, sorted) is how many elements are <= x
    SELECT CASE WHEN only_last THEN j ELSE i END AS i, j
    FROM (SELECT width_bucket(lo, c.captured_at) + 1 AS i, width_bucket(hi, c.captured_at) AS j FROM bounds) e
    WHERE i <= j
), base AS MATERIALIZED (  -- the delta-encoded counters just before element i, summed once
    SELECT s.i, s.j,
           (SELECT coalesce(sum(x), 0) FROM unnest(c.calls[:s.i - 1]) x) AS calls,
           (SELECT coalesce(sum(x), 0) FROM unnest(c.rows[:s.i - 1]) x) AS rows,
           (SELECT coalesce(sum(x), 0) FROM unnest(c.shared_blks_hit[:s.i - 1]) x) AS shared_blks_hit,
           (SELECT coalesce(sum(x), 0) FROM unnest(c.shared_blks_read[:s.i - 1]) x) AS shared_blks_read,
           (SELECT coalesce(sum(x), 0) FROM unnest(c.temp_blks_written[:s.i - 1]) x) AS temp_blks_written,
           (SELECT coalesce(sum(x), 0) FROM unnest(c.plans[:s.i - 1]) x) AS plans,
           (SELECT coalesce(sum(x), 0) FROM unnest(c.temp_blks_read[:s.i - 1]) x) AS temp_blks_read,
           (SELECT coalesce(sum(x), 0) FROM unnest(c.wal_bytes[:s.i - 1]) x) AS wal_bytes,
           (SELECT coalesce(sum(x), 0) FROM unnest(c.wal_buffers_full[:s.i - 1]) x) AS wal_buffers_full,
           (SELECT coalesce(sum(x), 0) FROM unnest(c.jit_functions[:s.i - 1]) x) AS jit_functions,
           (SELECT coalesce(sum(x), 0) FROM unnest(c.parallel_workers_to_launch[:s.i - 1]) x)
               AS parallel_workers_to_launch,
           (SELECT coalesce(sum(x), 0) FROM unnest(c.parallel_workers_launched[:s.i - 1]) x)
               AS parallel_workers_launched
    FROM span s
)
SELECT c.target, c.first_at + u.captured_at * interval '1 microsecond', c.dbid, c.userid, c.queryid, c.toplevel,
       CAST(b.calls + sum(u.calls) OVER w AS bigint),
       u.total_exec_time,
       CAST(b.rows + sum(u.rows) OVER w AS bigint),
       CAST(b.shared_blks_hit + sum(u.shared_blks_hit) OVER w AS bigint),
       CAST(b.shared_blks_read + sum(u.shared_blks_read) OVER w AS bigint),
       CAST(b.temp_blks_written + sum(u.temp_blks_written) OVER w AS bigint),
       u.shared_blk_read_time,
       u.stats_since,
       u.reset_before,
       u.fingerprint,
       u.stddev_exec_time,
       CASE WHEN u.plans IS NOT NULL THEN CAST(b.plans + sum(u.plans) OVER w AS bigint) END,
       u.total_plan_time,
       CASE WHEN u.temp_blks_read IS NOT NULL THEN CAST(b.temp_blks_read + sum(u.temp_blks_read) OVER w AS bigint) END,
       u.temp_blk_read_time,
       u.temp_blk_write_time,
       CASE WHEN u.wal_bytes IS NOT NULL THEN CAST(b.wal_bytes + sum(u.wal_bytes) OVER w AS bigint) END,
       CASE WHEN u.wal_buffers_full IS NOT NULL
            THEN CAST(b.wal_buffers_full + sum(u.wal_buffers_full) OVER w AS bigint) END,
       CASE WHEN u.jit_functions IS NOT NULL THEN CAST(b.jit_functions + sum(u.jit_functions) OVER w AS bigint) END,
       u.jit_generation_time,
       u.jit_inlining_time,
       u.jit_optimization_time,
       u.jit_emission_time,
       u.jit_deform_time,
       CASE WHEN u.parallel_workers_to_launch IS NOT NULL
            THEN CAST(b.parallel_workers_to_launch + sum(u.parallel_workers_to_launch) OVER w AS bigint) END,
       CASE WHEN u.parallel_workers_launched IS NOT NULL
            THEN CAST(b.parallel_workers_launched + sum(u.parallel_workers_launched) OVER w AS bigint) END
FROM base b
CROSS JOIN LATERAL unnest(c.captured_at[b.i:b.j], c.calls[b.i:b.j], c.total_exec_time[b.i:b.j], c.rows[b.i:b.j],
                          c.shared_blks_hit[b.i:b.j], c.shared_blks_read[b.i:b.j], c.temp_blks_written[b.i:b.j],
                          c.shared_blk_read_time[b.i:b.j], c.stddev_exec_time[b.i:b.j], c.stats_since[b.i:b.j],
                          c.reset_before[b.i:b.j], c.fingerprint[b.i:b.j], c.plans[b.i:b.j],
                          c.total_plan_time[b.i:b.j], c.temp_blks_read[b.i:b.j], c.temp_blk_read_time[b.i:b.j],
                          c.temp_blk_write_time[b.i:b.j], c.wal_bytes[b.i:b.j], c.wal_buffers_full[b.i:b.j],
                          c.jit_functions[b.i:b.j], c.jit_generation_time[b.i:b.j], c.jit_inlining_time[b.i:b.j],
                          c.jit_optimization_time[b.i:b.j], c.jit_emission_time[b.i:b.j],
                          c.jit_deform_time[b.i:b.j], c.parallel_workers_to_launch[b.i:b.j],
                          c.parallel_workers_launched[b.i:b.j]) WITH ORDINALITY
     AS u(captured_at, calls, total_exec_time, rows, shared_blks_hit, shared_blks_read, temp_blks_written,
          shared_blk_read_time, stddev_exec_time, stats_since, reset_before, fingerprint, plans, total_plan_time,
          temp_blks_read, temp_blk_read_time, temp_blk_write_time, wal_bytes, wal_buffers_full, jit_functions,
          jit_generation_time, jit_inlining_time, jit_optimization_time, jit_emission_time, jit_deform_time,
          parallel_workers_to_launch, parallel_workers_launched, k)
WINDOW w AS (ORDER BY u.k ROWS UNBOUNDED PRECEDING)
ORDER BY u.k
$$;

-- The view's `*` was expanded when it was made: made again, it has the new columns at its end.
CREATE OR REPLACE VIEW radar.pgss_sample AS
SELECT * FROM radar.pgss_snapshot
UNION ALL
SELECT r.* FROM radar.pgss_compact c CROSS JOIN LATERAL radar.pgss_compact_rows(c) r;

ALTER TABLE radar.verdict
    ADD COLUMN buffers_per_call_before double precision,
    ADD COLUMN buffers_per_call_after double precision,
    ADD COLUMN plan_ms_per_call_before double precision,
    ADD COLUMN plan_ms_per_call_after double precision,
    ADD COLUMN temp_blks_per_call_before double precision,
    ADD COLUMN temp_blks_per_call_after double precision,
    ADD COLUMN workers_to_launch_per_call_before double precision,
    ADD COLUMN workers_to_launch_per_call_after double precision,
    ADD COLUMN workers_launched_per_call_before double precision,
    ADD COLUMN workers_launched_per_call_after double precision,
    ADD COLUMN jit_ms_per_call_before double precision,
    ADD COLUMN jit_ms_per_call_after double precision,
    ADD COLUMN wal_bytes_per_call_before double precision,
    ADD COLUMN wal_bytes_per_call_after double precision,
    ADD COLUMN wal_buffers_full_per_call_before double precision,
    ADD COLUMN wal_buffers_full_per_call_after double precision;
