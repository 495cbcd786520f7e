-- Statement keys that keep relation names (issue 14): the `fingerprint` columns now hold radar's own statement key
-- (collector/fingerprint.py), not libpg_query's fingerprint. The stored keys are recomputed from radar.query's text by
-- `radar db upgrade` (steps/statement_keys.py), which sets key_version to 2 when done.
-- History and episodes are per (target, dbid, userid, toplevel, fingerprint): statements of different databases,
-- users or nesting levels are never one query.

CREATE TABLE radar.key_version (
    only_row  boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    version   integer NOT NULL
);
INSERT INTO radar.key_version (version) VALUES (1);

ALTER TABLE radar.query_history DROP CONSTRAINT query_history_pkey;
ALTER TABLE radar.query_history ADD PRIMARY KEY (target, dbid, userid, toplevel, fingerprint, deploy_id);
ALTER TABLE radar.regression_episode DROP CONSTRAINT regression_episode_pkey;
ALTER TABLE radar.regression_episode ADD PRIMARY KEY (target, dbid, userid, toplevel, fingerprint, opened_by);
