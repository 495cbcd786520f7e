-- One outbox for every destination (issue 40): the rows of radar.alert (a detection per statement per channel),
-- radar.channel_event (resolves, deploy marks, Slack message updates) and radar.code_host_delivery (commit and
-- deployment statuses, review comments) move into radar.outbox, claimed and settled by one set of rules
-- (warehouse/outbox.py): written before anything is sent; an attempt claims its rows (`sending`, a new delivery_id) in
-- a transaction of its own and records the outcome in a second one; a row whose attempt may have delivered it
-- (outcome_unknown, or left `sending` past its lease) is looked for on the destination, where it can tell, before it
-- is sent again. The three old names stay for one release as views over it (updatable: a SELECT, UPDATE or DELETE
-- written against them still works).
-- depends: 0042_gate_joint_excess

CREATE TABLE radar.outbox (
    id               bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind             text        NOT NULL DEFAULT 'detection' CHECK (kind IN (
                         'detection', 'resolve', 'deploy_mark', 'message_update',
                         'commit_status', 'deployment_status', 'review_comment')),
    channel          text        NOT NULL,  -- a Slack channel, "pagerduty", "teams", "grafana", "webhook:<name>",
                                            -- "code_host"; "-" when Slack had none
    analysis_id      text        NOT NULL,  -- the analysis (a deploy's, a periodic hour's) whose run delivers the row
    target           text,                  -- none for a code host's row (it speaks for the whole deploy)
    dbid             oid,                   -- the statement: a detection's, or the trigger a waiting resolve names
    userid           oid,
    queryid          bigint,
    toplevel         boolean,
    subject          text,                  -- resolve: the remote id to close; deploy_mark and code host rows: the
                                            -- deploy; message_update: the Slack message's ts
    state            text,                  -- code host rows: the deploy state carried (pass, fail, inconclusive)
    analysed_at      timestamptz,           -- code host rows: of the analysis it reports
    status           text        NOT NULL DEFAULT 'pending'
        CHECK (status IN ('pending', 'sending', 'sent', 'failed', 'skipped', 'withheld')),
    attempts         integer     NOT NULL DEFAULT 0,
    last_error       text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    sent_at          timestamptz,
    delivery_id      uuid,                  -- the attempt that last claimed the row
    claimed_at       timestamptz,
    outcome_unknown  boolean     NOT NULL DEFAULT false,  -- an attempt may have delivered it
    next_attempt_at  timestamptz,           -- backoff: no attempt before this
    remote_id        text,                  -- the destination's id: a PagerDuty dedup_key, a Grafana annotation id
    remote_ids       jsonb       NOT NULL DEFAULT '{}'::jsonb,  -- review comments: request number → comment id
    message_ts       text,                  -- Slack: the message that carried the detection
    message_channel  text,                  -- Slack: the channel id chat.postMessage answered with
    CHECK (kind <> 'detection' OR (target IS NOT NULL AND queryid IS NOT NULL AND dbid IS NOT NULL
        AND userid IS NOT NULL AND toplevel IS NOT NULL)),
    CHECK (kind = 'detection' OR subject IS NOT NULL)
);

-- A detection once per statement per channel per analysis; every other row once per (channel, kind, subject).
CREATE UNIQUE INDEX outbox_detection_key ON radar.outbox (analysis_id, target, dbid, userid, queryid, toplevel, channel)
    WHERE kind = 'detection';
CREATE UNIQUE INDEX outbox_subject_key ON radar.outbox (channel, kind, subject);
CREATE INDEX outbox_waiting_idx ON radar.outbox (created_at) WHERE status IN ('pending', 'sending');
CREATE INDEX outbox_analysis_idx ON radar.outbox (analysis_id);

INSERT INTO radar.outbox (kind, channel, analysis_id, target, dbid, userid, queryid, toplevel, status, attempts,
    last_error, created_at, sent_at, delivery_id, claimed_at, outcome_unknown, next_attempt_at, remote_id,
    message_ts, message_channel)
SELECT 'detection', channel, deploy_id, target, dbid, userid, queryid, toplevel, status, attempts, last_error,
    created_at, sent_at, delivery_id, claimed_at, outcome_unknown, next_attempt_at, remote_id, message_ts,
    message_channel
FROM radar.alert ORDER BY created_at;

INSERT INTO radar.outbox (kind, channel, analysis_id, target, dbid, userid, queryid, toplevel, subject, status,
    attempts, last_error, created_at, sent_at, delivery_id, claimed_at, outcome_unknown, next_attempt_at, remote_id)
SELECT kind, channel, deploy_id, target, dbid, userid, queryid, toplevel, subject, status, attempts, last_error,
    created_at, sent_at, delivery_id, claimed_at, outcome_unknown, next_attempt_at, remote_id
FROM radar.channel_event ORDER BY created_at;

INSERT INTO radar.outbox (kind, channel, analysis_id, subject, state, analysed_at, status, attempts, last_error,
    created_at, sent_at, delivery_id, claimed_at, outcome_unknown, next_attempt_at, remote_ids)
SELECT kind, 'code_host', deploy_id, deploy_id, state, analysed_at, status, attempts, last_error, created_at, sent_at,
    delivery_id, claimed_at, outcome_unknown, next_attempt_at, remote_ids
FROM radar.code_host_delivery ORDER BY created_at;

DROP TABLE radar.alert;
DROP TABLE radar.channel_event;
DROP TABLE radar.code_host_delivery;

-- The old names, for one release (deprecated: read radar.outbox).
CREATE VIEW radar.alert AS
SELECT analysis_id AS deploy_id, target, dbid, userid, queryid, toplevel, channel, status, attempts, last_error,
    created_at, sent_at, message_ts, delivery_id, claimed_at, outcome_unknown, next_attempt_at, remote_id,
    message_channel
FROM radar.outbox WHERE kind = 'detection';

CREATE VIEW radar.channel_event AS
SELECT channel, kind, subject, analysis_id AS deploy_id, target, status, attempts, last_error, created_at, sent_at,
    delivery_id, claimed_at, outcome_unknown, next_attempt_at, remote_id, dbid, userid, queryid, toplevel
FROM radar.outbox WHERE kind IN ('resolve', 'deploy_mark', 'message_update');

CREATE VIEW radar.code_host_delivery AS
SELECT analysis_id AS deploy_id, kind, state, analysed_at, status, attempts, last_error, created_at, sent_at,
    delivery_id, claimed_at, outcome_unknown, next_attempt_at, remote_ids
FROM radar.outbox WHERE channel = 'code_host';

COMMENT ON VIEW radar.alert IS 'Deprecated (one release): radar.outbox rows of kind detection';
COMMENT ON VIEW radar.channel_event IS 'Deprecated (one release): radar.outbox rows of kind resolve, deploy_mark, message_update';
COMMENT ON VIEW radar.code_host_delivery IS 'Deprecated (one release): radar.outbox rows of channel code_host';
