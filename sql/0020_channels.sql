-- The channels beyond Slack (PagerDuty, Microsoft Teams, Grafana, generic webhooks) through the durable outbox
-- (sql/0009's rules: an attempt claims its rows in a transaction of its own, sends, and records the outcome in a
-- second one; a row whose attempt may have delivered is looked for on the channel, where it can tell, before it is
-- sent again). A detection's row stays in radar.alert (channel "pagerduty", "teams", "grafana", "webhook:<name>")
-- and keeps the channel's own id of what it made; resolves (a PagerDuty incident closed when its statement recovers)
-- and deploy marks (a PagerDuty change event, a Grafana deploy annotation) are rows of radar.channel_event.
-- depends: 0019_webhook_receiver

ALTER TABLE radar.alert ADD COLUMN remote_id text;  -- the channel's id: a PagerDuty dedup_key, a Grafana annotation id

CREATE TABLE radar.channel_event (
    channel          text        NOT NULL,  -- as radar.alert's: "pagerduty", "grafana", ...
    kind             text        NOT NULL CHECK (kind IN ('resolve', 'deploy_mark')),
    subject          text        NOT NULL,  -- resolve: the remote id to close (a dedup_key); deploy_mark: the deploy id
    deploy_id        text        NOT NULL,  -- the analysis that asked for it (the one that saw the recovery), or the deploy
    target           text        NOT NULL,
    status           text        NOT NULL DEFAULT 'pending'
        CHECK (status IN ('pending', 'sending', 'sent', 'failed', 'skipped', 'withheld')),
    attempts         integer     NOT NULL DEFAULT 0,
    last_error       text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    sent_at          timestamptz,
    delivery_id      uuid,
    claimed_at       timestamptz,
    outcome_unknown  boolean     NOT NULL DEFAULT false,
    next_attempt_at  timestamptz,
    remote_id        text,                  -- what the channel made of it (a Grafana annotation id)
    PRIMARY KEY (channel, kind, subject)
);

CREATE INDEX channel_event_waiting_idx ON radar.channel_event (created_at) WHERE status IN ('pending', 'sending');
CREATE INDEX channel_event_analysis_idx ON radar.channel_event (deploy_id);
