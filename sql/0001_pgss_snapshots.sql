-- The warehouse schema for pg_stat_statements snapshots.
--
-- Raw counters are the truth: they are stored cumulative, as the server reports them, and deltas are derived when
-- reading. A statement whose counters did not move since its last stored row gets no new row, so an absent row means
-- "no calls in that span": at every scrape between two stored rows the statement's counters equalled the earlier row.

CREATE SCHEMA IF NOT EXISTS radar;

-- One row per statement per scrape in which its counters moved (or it was first seen, or came back after a reset).
CREATE TABLE radar.pgss_snapshot (
    target              text             NOT NULL,
    captured_at         timestamptz      NOT NULL,  -- the watched server's clock, read in the scrape's transaction
    dbid                oid              NOT NULL,
    userid              oid              NOT NULL,
    queryid             bigint           NOT NULL,
    toplevel            boolean          NOT NULL,  -- always true before PostgreSQL 14, which has no toplevel column
    calls               bigint           NOT NULL,
    total_exec_time     double precision NOT NULL,  -- milliseconds
    rows                bigint           NOT NULL,
    shared_blks_hit     bigint           NOT NULL,
    shared_blks_read    bigint           NOT NULL,
    temp_blks_written   bigint           NOT NULL,
    shared_blk_read_time double precision NOT NULL, -- blk_read_time before PostgreSQL 17
    stats_since         timestamptz,                -- PostgreSQL 17+, else null
    -- The collector saw this statement's counters restart since its previous stored row although the numbers may
    -- not show it: the statement vanished from the view (evicted or reset) or the server's stats_reset moved.
    reset_before        boolean          NOT NULL DEFAULT false,
    fingerprint         bigint           NOT NULL,
    PRIMARY KEY (target, dbid, userid, queryid, toplevel, captured_at)
) PARTITION BY RANGE (captured_at);

COMMENT ON TABLE radar.pgss_snapshot IS
    'Cumulative pg_stat_statements counters per statement per scrape; no row when the counters did not move.';

-- One row per target per successful scrape: the server-wide facts, and the list of scrape times readers use to place
-- an interval (the calls of a stored row happened after the previous scrape of its target).
CREATE TABLE radar.pgss_info_snapshot (
    target              text        NOT NULL,
    captured_at         timestamptz NOT NULL,
    dealloc             bigint,                 -- pg_stat_statements_info, PostgreSQL 14+
    stats_reset         timestamptz,            -- pg_stat_statements_info, PostgreSQL 14+
    server_version_num  integer     NOT NULL,
    pgss_version        text        NOT NULL,
    statements          integer     NOT NULL,   -- statements the view held (after leaving out the collector's own)
    stored_rows         integer     NOT NULL,   -- rows written to radar.pgss_snapshot by this scrape
    PRIMARY KEY (target, captured_at)
);

-- One row per statement ever seen: its identity, fingerprint, text and the last counters stored for it.
CREATE TABLE radar.query (
    target              text        NOT NULL,
    dbid                oid         NOT NULL,
    userid              oid         NOT NULL,
    queryid             bigint      NOT NULL,
    toplevel            boolean     NOT NULL,
    fingerprint         bigint      NOT NULL,
    query               text        NOT NULL,   -- normalised text, cut to a bounded length
    first_seen          timestamptz NOT NULL,
    last_seen           timestamptz NOT NULL,   -- the last scrape whose row for it was stored
    last_calls          bigint      NOT NULL,
    last_total_exec_time double precision NOT NULL,
    last_stats_since    timestamptz,
    missing_since       timestamptz,            -- first scrape that did not list it (evicted or reset); null if listed
    PRIMARY KEY (target, dbid, userid, queryid, toplevel)
);

CREATE INDEX query_fingerprint_idx ON radar.query (target, fingerprint);

-- Statements the collector recognised as its own (reading pg_stat_statements or a plan source, EXPLAIN): keys only,
-- so their texts are not fetched again and they are never snapshotted or analysed.
CREATE TABLE radar.ignored_statement (
    target              text        NOT NULL,
    dbid                oid         NOT NULL,
    userid              oid         NOT NULL,
    queryid             bigint      NOT NULL,
    toplevel            boolean     NOT NULL,
    reason              text        NOT NULL,
    PRIMARY KEY (target, dbid, userid, queryid, toplevel)
);

-- Day partitions of radar.pgss_snapshot, created ahead by the write path and the retention job.
CREATE FUNCTION radar.ensure_pgss_snapshot_partitions(first_day date, days integer)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    d date;
    created integer := 0;
    part text;
BEGIN
    FOR i IN 0 .. days - 1 LOOP
        d := first_day + i;
        part := 'pgss_snapshot_p' || to_char(d, 'YYYYMMDD');
        IF to_regclass('radar.' || part) IS NULL THEN
            EXECUTE format(
                'CREATE TABLE IF NOT EXISTS radar.%I PARTITION OF radar.pgss_snapshot FOR VALUES FROM (%L) TO (%L)',
                part, d::timestamp AT TIME ZONE 'UTC', (d + 1)::timestamp AT TIME ZONE 'UTC');
            created := created + 1;
        END IF;
    END LOOP;
    RETURN created;
END;
$$;

-- Retention: drop whole day partitions that end on or before the cutoff; returns the names dropped.
CREATE FUNCTION radar.drop_pgss_snapshot_partitions_before(cutoff date)
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
        WHERE n.nspname = 'radar' AND p.relname = 'pgss_snapshot'
          AND c.relname ~ '^pgss_snapshot_p[0-9]{8}$'
          AND to_date(substr(c.relname, 16), 'YYYYMMDD') < cutoff
        ORDER BY c.relname
    LOOP
        EXECUTE format('DROP TABLE radar.%I', part.relname);
        RETURN NEXT part.relname;
    END LOOP;
END;
$$;

-- Interval means per statement. Each stored row closes an interval that began at its target's previous scrape (the
-- counters were unchanged at every scrape since the statement's previous stored row) and whose deltas are taken
-- against that previous stored row. An interval across a reset is excluded: calls that went down, a changed
-- stats_since, or the collector's reset_before flag.
CREATE VIEW radar.pgss_interval AS
WITH paired AS (
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
    FROM radar.pgss_snapshot s
    WINDOW w AS (PARTITION BY s.target, s.dbid, s.userid, s.queryid, s.toplevel ORDER BY s.captured_at)
)
SELECT
    p.target, p.dbid, p.userid, p.queryid, p.toplevel, p.fingerprint,
    scrape.prev_scrape_at AS interval_start,
    p.interval_end,
    p.calls,
    p.total_exec_time,
    p.total_exec_time / p.calls AS mean_exec_time_ms,
    p.rows,
    p.shared_blks_hit,
    p.shared_blks_read,
    p.temp_blks_written
FROM paired p
CROSS JOIN LATERAL (
    SELECT max(i.captured_at) AS prev_scrape_at
    FROM radar.pgss_info_snapshot i
    WHERE i.target = p.target AND i.captured_at < p.interval_end AND i.captured_at >= p.prev_stored_at
) scrape
WHERE p.prev_stored_at IS NOT NULL
  AND p.calls > 0
  AND p.total_exec_time >= 0
  AND NOT p.stats_since_changed
  AND NOT p.reset_before;

COMMENT ON VIEW radar.pgss_interval IS
    'Per-statement interval means (Δtotal_exec_time/Δcalls) between stored snapshots; intervals across resets excluded.';
