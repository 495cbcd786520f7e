-- Compact history (issue 17, part 3): day partitions of radar.pgss_snapshot that have ended are rewritten, by the
-- scheduled asset `pgss_compaction`, as one row per statement per day holding that day's samples as arrays, in
-- radar.pgss_compact (also partitioned by UTC day). Every reader reads both forms through radar.pgss_sample (the view
-- of every stored sample, raw-shaped), radar.pgss_samples (one target, a time range) and radar.pgss_last_sample (a
-- statement's last sample at or before a time), so an interval reads the same before and after compaction.
-- depends: 0012_per_target_indexes

-- One row per statement per UTC day that was compacted. Sample i of the row is element i of every array, in time
-- order. Integer counters are delta-encoded (element 1 holds the day's first value, element i > 1 the change since
-- element i − 1), so that most of their bytes are zeros and compress; scrape times are microseconds since the row's
-- first, sorted, so a read finds the elements of a time range by binary search (width_bucket); the floating-point
-- counters are kept as stored (a delta of doubles would not add back to the same value), and so are stats_since,
-- reset_before and the statement key (constant arrays compress to almost nothing). Arrays are compressed in the row (pglz, STORAGE
-- MAIN, toast_tuple_target 128 on each partition), and a day of a busy statement moves to the TOAST table, compressed.
CREATE TABLE radar.pgss_compact (
    target               text               NOT NULL,
    dbid                 oid                NOT NULL,
    userid               oid                NOT NULL,
    queryid              bigint             NOT NULL,
    toplevel             boolean            NOT NULL,
    day                  date               NOT NULL,  -- the UTC day of every sample in the row
    first_at             timestamptz        NOT NULL,  -- the first and last sample's captured_at, so a read skips
    last_at              timestamptz        NOT NULL,  -- rows outside its range without opening the arrays
    captured_at          bigint[]           NOT NULL,  -- microseconds after first_at (element 1 is 0)
    calls                bigint[]           NOT NULL,  -- delta-encoded
    total_exec_time      double precision[] NOT NULL,  -- as stored
    rows                 bigint[]           NOT NULL,  -- delta-encoded
    shared_blks_hit      bigint[]           NOT NULL,  -- delta-encoded
    shared_blks_read     bigint[]           NOT NULL,  -- delta-encoded
    temp_blks_written    bigint[]           NOT NULL,  -- delta-encoded
    shared_blk_read_time double precision[] NOT NULL,  -- as stored
    stddev_exec_time     double precision[] NOT NULL,  -- as stored (null elements: rows stored before 0007)
    stats_since          timestamptz[]      NOT NULL,  -- as stored (null elements before PostgreSQL 17)
    reset_before         boolean[]          NOT NULL,
    fingerprint          bigint[]           NOT NULL,  -- the statement key of each sample
    PRIMARY KEY (target, dbid, userid, queryid, toplevel, day)
) PARTITION BY RANGE (day);

COMMENT ON TABLE radar.pgss_compact IS
    'Compacted radar.pgss_snapshot: one row per statement per UTC day, its samples as arrays; read through radar.pgss_sample.';

-- The samples of one compact row with captured_at in (from_at, to_at] (only the last of them when only_last) as
-- radar.pgss_snapshot rows, in time order. Unnesting arrays into rows is the work, so the range's elements are found
-- by binary search in the times, the delta-encoded counters before the first of them are only summed, and only the
-- elements in range become rows.
CREATE FUNCTION radar.pgss_compact_rows(
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
           (SELECT coalesce(sum(x), 0) FROM unnest(c.temp_blks_written[:s.i - 1]) x) AS temp_blks_written
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
       u.stddev_exec_time
FROM base b
CROSS JOIN LATERAL unnest(c.captured_at[b.i:b.j], c.calls[b.i:b.j], c.total_exec_time[b.i:b.j], c.rows[b.i:b.j],
                          c.shared_blks_hit[b.i:b.j], c.shared_blks_read[b.i:b.j], c.temp_blks_written[b.i:b.j],
                          c.shared_blk_read_time[b.i:b.j], c.stddev_exec_time[b.i:b.j], c.stats_since[b.i:b.j],
                          c.reset_before[b.i:b.j], c.fingerprint[b.i:b.j]) WITH ORDINALITY
     AS u(captured_at, calls, total_exec_time, rows, shared_blks_hit, shared_blks_read, temp_blks_written,
          shared_blk_read_time, stddev_exec_time, stats_since, reset_before, fingerprint, k)
WINDOW w AS (ORDER BY u.k ROWS UNBOUNDED PRECEDING)
ORDER BY u.k
$$;

-- Every stored sample, raw or compacted, as radar.pgss_snapshot rows: for whole-history questions (a WHERE on
-- captured_at cannot skip compacted days here; radar.pgss_samples can).
CREATE VIEW radar.pgss_sample AS
SELECT * FROM radar.pgss_snapshot
UNION ALL
SELECT r.* FROM radar.pgss_compact c CROSS JOIN LATERAL radar.pgss_compact_rows(c) r;

COMMENT ON VIEW radar.pgss_sample IS
    'Every stored pg_stat_statements sample, raw (radar.pgss_snapshot) or compacted (radar.pgss_compact), one row each.';

-- One target's samples with captured_at in (from_at, to_at], from both forms (compacted days are opened only where
-- their rows overlap the range).
CREATE FUNCTION radar.pgss_samples(target_name text, from_at timestamptz, to_at timestamptz)
RETURNS SETOF radar.pgss_snapshot
LANGUAGE sql STABLE AS $$
SELECT s.* FROM radar.pgss_snapshot s
WHERE s.target = target_name AND s.captured_at > from_at AND s.captured_at <= to_at
UNION ALL
SELECT r.* FROM radar.pgss_compact c CROSS JOIN LATERAL radar.pgss_compact_rows(c, from_at, to_at) r
WHERE c.target = target_name
  AND c.day >= CAST(from_at AT TIME ZONE 'UTC' AS date) AND c.day <= CAST(to_at AT TIME ZONE 'UTC' AS date)
  AND c.last_at > from_at AND c.first_at <= to_at
$$;

-- A statement's last sample with captured_at in (after_at, at_at], from either form (at most one row). Its compacted
-- samples there are in the latest of its day rows that begins at or before at_at.
CREATE FUNCTION radar.pgss_last_sample(
    target_name text, s_dbid oid, s_userid oid, s_queryid bigint, s_toplevel boolean,
    after_at timestamptz, at_at timestamptz)
RETURNS SETOF radar.pgss_snapshot
LANGUAGE sql STABLE AS $$
SELECT * FROM (
    (SELECT s.* FROM radar.pgss_snapshot s
     WHERE s.target = target_name AND s.dbid = s_dbid AND s.userid = s_userid AND s.queryid = s_queryid
       AND s.toplevel = s_toplevel AND s.captured_at > after_at AND s.captured_at <= at_at
     ORDER BY s.captured_at DESC LIMIT 1)
    UNION ALL
    (SELECT r.* FROM (
         SELECT c.* FROM radar.pgss_compact c
         WHERE c.target = target_name AND c.dbid = s_dbid AND c.userid = s_userid AND c.queryid = s_queryid
           AND c.toplevel = s_toplevel AND c.day <= CAST(at_at AT TIME ZONE 'UTC' AS date)
           AND c.day >= CAST(after_at AT TIME ZONE 'UTC' AS date) AND c.first_at <= at_at
         ORDER BY c.day DESC LIMIT 1) c
     CROSS JOIN LATERAL radar.pgss_compact_rows(c, after_at, at_at, only_last => true) r)
) x
ORDER BY x.captured_at DESC LIMIT 1
$$;

-- Day partitions of radar.pgss_compact, created by compaction. Arrays stay in the row, compressed, as soon as a row
-- exceeds 128 bytes. pglz, not lz4, whatever default_toast_compression says: on benchmarks/compaction_bench.py's day
-- it stored 37 bytes a sample against lz4's 43 (PostgreSQL 15 built with lz4).
CREATE FUNCTION radar.ensure_pgss_compact_partition(d date)
RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    part text := 'pgss_compact_p' || to_char(d, 'YYYYMMDD');
    col text;
BEGIN
    IF to_regclass('radar.' || part) IS NULL THEN
        EXECUTE format('CREATE TABLE radar.%I PARTITION OF radar.pgss_compact FOR VALUES FROM (%L) TO (%L) '
                       'WITH (toast_tuple_target = 128)', part, d, d + 1);
        FOR col IN
            SELECT a.attname FROM pg_attribute a
            WHERE a.attrelid = 'radar.pgss_compact'::regclass AND a.attnum > 0 AND NOT a.attisdropped
              AND a.attndims > 0
        LOOP
            EXECUTE format('ALTER TABLE radar.%I ALTER COLUMN %I SET STORAGE MAIN, ALTER COLUMN %I SET COMPRESSION pglz',
                           part, col, col);
        END LOOP;
    END IF;
    RETURN part;
END;
$$;

-- Retention drops compacted days with the raw ones: whole day partitions of either table that end on or before the
-- cutoff; returns the names dropped.
CREATE OR REPLACE FUNCTION radar.drop_pgss_snapshot_partitions_before(cutoff date)
RETURNS SETOF text
LANGUAGE plpgsql AS $$
DECLARE
    part record;
BEGIN
    FOR part IN
        SELECT c.relname
        FROM pg_inherits i
        JOIN pg_class c ON c.oid = i.inhrelid
        JOIN pg_class p ON p.oid = i.inhparent
        JOIN pg_namespace n ON n.oid = p.relnamespace
        WHERE n.nspname = 'radar'
          AND ((p.relname = 'pgss_snapshot' AND c.relname ~ '^pgss_snapshot_p[0-9]{8}$')
               OR (p.relname = 'pgss_compact' AND c.relname ~ '^pgss_compact_p[0-9]{8}$'))
          AND to_date(right(c.relname, 8), 'YYYYMMDD') < cutoff
        ORDER BY right(c.relname, 8), c.relname
    LOOP
        EXECUTE format('DROP TABLE radar.%I', part.relname);
        RETURN NEXT part.relname;
    END LOOP;
END;
$$;

-- The interval function and view read both forms; columns and rules unchanged (sql/0001, sql/0010).
CREATE OR REPLACE FUNCTION radar.pgss_intervals(target_name text, from_at timestamptz, to_at timestamptz)
RETURNS TABLE (
    target text, dbid oid, userid oid, queryid bigint, toplevel boolean, fingerprint bigint,
    interval_start timestamptz, interval_end timestamptz, calls bigint, total_exec_time double precision,
    mean_exec_time_ms double precision, rows bigint, shared_blks_hit bigint, shared_blks_read bigint,
    temp_blks_written bigint
)
LANGUAGE sql STABLE AS $$
WITH inside AS (
    SELECT s.* FROM radar.pgss_samples(target_name, from_at, to_at) s
), earlier AS (
    SELECT e.* FROM (SELECT DISTINCT i.dbid, i.userid, i.queryid, i.toplevel FROM inside i) k
    CROSS JOIN LATERAL radar.pgss_last_sample(target_name, k.dbid, k.userid, k.queryid, k.toplevel,
                                              '-infinity', from_at) e
), paired AS (
    SELECT
        s.target, s.dbid, s.userid, s.queryid, s.toplevel, s.fingerprint,
        s.captured_at AS interval_end,
        lag(s.captured_at) OVER w AS prev_stored_at,
        s.calls - lag(s.calls) OVER w AS calls,
        s.total_exec_time - lag(s.total_exec_time) OVER w AS total_exec_time,
        s.rows - lag(s.rows) OVER w AS rows,
        s.shared_blks_hit - lag(s.shared_blks_hit) OVER w AS shared_blks_hit,
        s.shared_blks_read - lag(s.shared_blks_read) OVER w AS shared_blks_read,
        s.temp_blks_written - lag(s.temp_blks_written) OVER w AS temp_blks_written,
        s.stats_since IS DISTINCT FROM lag(s.stats_since) OVER w AS stats_since_changed,
        s.reset_before
    FROM (SELECT * FROM inside UNION ALL SELECT * FROM earlier) s
    WINDOW w AS (PARTITION BY s.dbid, s.userid, s.queryid, s.toplevel ORDER BY s.captured_at)
)
SELECT
    p.target, p.dbid, p.userid, p.queryid, p.toplevel, p.fingerprint,
    scrape.prev_scrape_at, p.interval_end, p.calls, p.total_exec_time, p.total_exec_time / p.calls,
    p.rows, p.shared_blks_hit, p.shared_blks_read, p.temp_blks_written
FROM paired p
CROSS JOIN LATERAL (
    SELECT max(i.captured_at) AS prev_scrape_at
    FROM radar.pgss_info_snapshot i
    WHERE i.target = p.target AND i.captured_at < p.interval_end AND i.captured_at >= p.prev_stored_at
) scrape
WHERE p.prev_stored_at IS NOT NULL
  AND p.interval_end > from_at
  AND p.calls > 0
  AND p.total_exec_time >= 0
  AND NOT p.stats_since_changed
  AND NOT p.reset_before
$$;

-- The view: every target's intervals over all time, from the function (nothing is stored before -infinity, so each
-- statement's first stored row starts no interval, as before).
CREATE OR REPLACE VIEW radar.pgss_interval AS
SELECT i.*
FROM (SELECT DISTINCT target FROM radar.pgss_info_snapshot) t
CROSS JOIN LATERAL radar.pgss_intervals(t.target, '-infinity', 'infinity') i;

