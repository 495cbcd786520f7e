-- A resolve for a trigger not yet sent (its periodic episode recovered while the trigger still waited for a retry):
-- the resolve names the trigger's radar.alert row (deploy_id, target, channel and these columns) and is claimed only
-- once that trigger is sent, with the trigger's remote id; skipped when the trigger ends unsent.
-- depends: 0020_channels

ALTER TABLE radar.channel_event
    ADD COLUMN dbid oid,
    ADD COLUMN userid oid,
    ADD COLUMN queryid bigint,
    ADD COLUMN toplevel boolean;
