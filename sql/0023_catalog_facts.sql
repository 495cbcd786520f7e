-- Catalog and settings facts of each target around its deploys (issue 28): only what changed is stored. One row per
-- version of an object or setting (value NULL: it disappeared), first seen at a capture, with the capture before it
-- (last_seen_before: the last one that still showed the old state), so each change is bracketed. Every successful
-- read of the catalog is a capture (at most one per RADAR_CATALOG_INTERVAL, and the scrape after a deploy); the last
-- digest of each kind tells the collector which kinds to read again, and a target now on another server or database
-- starts a new baseline.
-- depends: 0022_named_causes

CREATE TABLE radar.catalog_fact (
    target text NOT NULL,
    kind text NOT NULL,          -- index, constraint, trigger, column, table, statistics, ext_statistics,
                                 -- role_setting, setting (collector/catalog.py)
    identity text NOT NULL,      -- unique within the target and kind (schema-qualified; a setting's database/role/name)
    dbid bigint,                 -- the database (catalog objects: the target's; settings: the one it is set for, NULL all)
    roleid bigint,               -- the role a setting is set for (NULL: every role)
    relation text,               -- the table it belongs to
    name text NOT NULL,
    role text,
    database text,
    value text,                  -- definition, type, state or setting; NULL: gone
    first_seen_at timestamptz NOT NULL,
    last_seen_before timestamptz, -- NULL: the target's first capture (its state then, not a change)
    PRIMARY KEY (target, kind, identity, first_seen_at)
);
CREATE INDEX catalog_fact_seen ON radar.catalog_fact (target, first_seen_at);

CREATE TABLE radar.catalog_capture (
    target text NOT NULL,
    captured_at timestamptz NOT NULL,
    dbid bigint NOT NULL,
    server text NOT NULL,        -- the server's identity (its system identifier where readable) and the database's
    kinds_read text[] NOT NULL,  -- the kinds whose digest had changed, read row by row
    recorded_at timestamptz NOT NULL DEFAULT now(), -- the warehouse's clock: the catalog is read at an interval
    PRIMARY KEY (target, captured_at)
);

CREATE TABLE radar.catalog_digest (
    target text NOT NULL,
    kind text NOT NULL,
    dbid bigint NOT NULL,
    server text NOT NULL,
    digest text NOT NULL,
    PRIMARY KEY (target, kind)
);
