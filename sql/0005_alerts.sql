-- The Slack outbox: one row per regression per channel, written before anything is sent.
-- depends: 0004_plans

CREATE TABLE radar.alert (
    deploy_id    text        NOT NULL,
    target       text        NOT NULL,
    dbid         oid         NOT NULL,
    userid       oid         NOT NULL,
    queryid      bigint      NOT NULL,
    toplevel     boolean     NOT NULL,
    channel      text        NOT NULL,   -- a channel id or name; "webhook" for an incoming webhook; "-" when none
    status       text        NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'sent', 'failed', 'skipped')),
    attempts     integer     NOT NULL DEFAULT 0,
    last_error   text,
    created_at   timestamptz NOT NULL DEFAULT now(),
    sent_at      timestamptz,
    message_ts   text,                   -- Slack's id of the message that carried it
    PRIMARY KEY (deploy_id, target, dbid, userid, queryid, toplevel, channel)
);

CREATE INDEX alert_pending_idx ON radar.alert (deploy_id) WHERE status = 'pending';
