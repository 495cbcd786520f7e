-- Window reads (one target, a time range) must not scan a whole day partition. Snapshots arrive in time order, so a
-- BRIN index on captured_at narrows a range to its blocks for a few kilobytes per partition.
-- depends: 0002_deploys_and_verdicts

CREATE INDEX pgss_snapshot_captured_brin ON radar.pgss_snapshot USING brin (captured_at) WITH (pages_per_range = 16);
