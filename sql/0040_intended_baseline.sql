-- Intended means a new baseline (issue 41 part 2, docs/labels.md#intended-a-new-baseline): a verdict labelled
-- `intended` begins a new segment of its statement's history bands, closes its periodic episode as intended (later
-- periodic checks no longer answer `already_reported`, and the same step is not reported again), and its alert is
-- resolved (a PagerDuty resolve, the Slack message updated to show the label).
-- depends: 0039_weekly_rhythm

-- Every statement verdict each latest label stands for: a statement's own; a group's members in that analysis (the
-- group was decided together: its members moved as one change); a fleet verdict's statement on each member deploy
-- of the release's latest decision.
CREATE OR REPLACE VIEW radar.label_cover AS
SELECT l.label_id, l.label, l.created_at, l.kind, v.deploy_id, v.target, v.dbid, v.userid, v.queryid, v.toplevel,
       v.fingerprint, v.change_at
FROM radar.latest_label l
JOIN radar.verdict v ON l.kind = 'statement' AND v.deploy_id = l.deploy_id AND v.target = l.target
    AND v.dbid = l.dbid AND v.userid = l.userid AND v.queryid = l.queryid AND v.toplevel = l.toplevel
UNION ALL
SELECT l.label_id, l.label, l.created_at, l.kind, v.deploy_id, v.target, v.dbid, v.userid, v.queryid, v.toplevel,
       v.fingerprint, v.change_at
FROM radar.latest_label l
CROSS JOIN LATERAL (
    SELECT g.* FROM radar.group_verdict g
    WHERE g.deploy_id = l.deploy_id AND g.target = l.target AND g.group_id = l.group_id
    ORDER BY g.look DESC LIMIT 1
) g
CROSS JOIN LATERAL unnest(g.member_dbid, g.member_userid, g.member_queryid, g.member_toplevel)
    AS m(dbid, userid, queryid, toplevel)
JOIN radar.verdict v ON v.deploy_id = g.deploy_id AND v.target = g.target AND v.dbid = m.dbid
    AND v.userid = m.userid AND v.queryid = m.queryid AND v.toplevel = m.toplevel
WHERE l.kind = 'group'
UNION ALL
SELECT l.label_id, l.label, l.created_at, l.kind, v.deploy_id, v.target, v.dbid, v.userid, v.queryid, v.toplevel,
       v.fingerprint, v.change_at
FROM radar.latest_label l
CROSS JOIN LATERAL (
    SELECT k.member_deploys FROM radar.release_look k WHERE k.release_id = l.release_id ORDER BY k.look DESC LIMIT 1
) k
JOIN radar.verdict v ON v.deploy_id = ANY (k.member_deploys) AND v.fingerprint = l.fingerprint
    AND v.toplevel = l.toplevel
WHERE l.kind = 'fleet';

-- The statement verdicts whose standing label (the latest of the labels that cover it) is `intended`, with the
-- change point they mark: a deploy's time (the conbench marker: the deploy's change point), or the change a periodic
-- check located.
CREATE OR REPLACE VIEW radar.intended_verdict AS
SELECT c.label_id, c.created_at AS labelled_at, c.deploy_id, c.target, c.dbid, c.userid, c.queryid, c.toplevel,
       c.fingerprint, coalesce(d.deployed_at, c.change_at) AS change_at
FROM (
    SELECT DISTINCT ON (deploy_id, target, dbid, userid, queryid, toplevel) *
    FROM radar.label_cover
    ORDER BY deploy_id, target, dbid, userid, queryid, toplevel, created_at DESC, label_id DESC
) c
LEFT JOIN radar.deploy_event d ON d.deploy_id = c.deploy_id
WHERE c.label = 'intended';

-- An episode closed by an intended label rather than by a recovery: recovered_at is when it was labelled, and
-- recovered_by stays NULL (no analysis saw it back at its old level).
ALTER TABLE radar.regression_episode ADD COLUMN IF NOT EXISTS intended_label bigint REFERENCES radar.label (label_id);

-- What an intended label did, written in the label's own transaction (steps/labelling.py store_label). A deferred
-- constraint trigger refuses to commit an intended label without it: whatever stores a label must apply it.
CREATE TABLE IF NOT EXISTS radar.label_effect (
    label_id         bigint      PRIMARY KEY REFERENCES radar.label (label_id),
    verdicts         integer     NOT NULL,  -- statement verdicts the label stands for
    history_points   integer     NOT NULL,  -- history points judged again from the labelled deploys on
    episodes_closed  integer     NOT NULL,  -- periodic episodes closed as intended
    resolves         integer     NOT NULL,  -- resolves enqueued on the channels (radar.channel_event)
    message_updates  integer     NOT NULL,  -- Slack messages to update (radar.channel_event, kind message_update)
    applied_at       timestamptz NOT NULL DEFAULT now()
);

CREATE OR REPLACE FUNCTION radar.require_label_effect() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM radar.label_effect WHERE label_id = NEW.label_id) THEN
        RAISE EXCEPTION 'intended label % was stored without its effects (steps.labelling.store_label applies them)',
            NEW.label_id USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NULL;
END
$$;

DROP TRIGGER IF EXISTS intended_label_applied ON radar.label;
CREATE CONSTRAINT TRIGGER intended_label_applied AFTER INSERT ON radar.label
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (NEW.label = 'intended')
    EXECUTE FUNCTION radar.require_label_effect();

-- A Slack message to update (chat.update) with the labels of what it announced: subject is the message's ts,
-- deploy_id the analysis whose alert it was (its retry job delivers it), channel radar.alert's.
ALTER TABLE radar.channel_event DROP CONSTRAINT IF EXISTS channel_event_kind_check;
ALTER TABLE radar.channel_event ADD CONSTRAINT channel_event_kind_check
    CHECK (kind IN ('resolve', 'deploy_mark', 'message_update'));

-- The channel id Slack answered chat.postMessage with: chat.update takes an id, never a channel's name.
ALTER TABLE radar.alert ADD COLUMN IF NOT EXISTS message_channel text;
