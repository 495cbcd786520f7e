-- A deploy's release and canary role (issue 29). release_id: the deploys of one release to several targets (shards,
-- tenants, regions) share it, and are also decided jointly per statement key (a fleet verdict). canary_role: the
-- database role the canary version connects as; its statements are compared with the stable role's over the same
-- minutes (a concurrent two-arm test), the verdict during the canary.
-- depends: 0026_replaced_statements

ALTER TABLE radar.deploy_event ADD COLUMN IF NOT EXISTS release_id text
    CHECK (release_id IS NULL OR (length(release_id) BETWEEN 1 AND 128));
ALTER TABLE radar.deploy_event ADD COLUMN IF NOT EXISTS canary_role text
    CHECK (canary_role IS NULL OR (octet_length(canary_role) BETWEEN 1 AND 63));
CREATE INDEX IF NOT EXISTS deploy_event_release_idx ON radar.deploy_event (release_id, deployed_at)
    WHERE release_id IS NOT NULL;
