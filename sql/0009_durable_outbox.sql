-- The durable outbox: each attempt claims its rows in a transaction of its own before anything is sent, under a
-- delivery id the Slack message carries in its metadata; the outcome is marked in a second transaction. A row left
-- `sending` past its lease, or `pending` with outcome_unknown, may have been posted: the next attempt looks for its
-- delivery id in the channel first (token mode). `withheld`: recorded and deliberately not sent (too old, or found
-- by the nightly reanalysis).
-- depends: 0006_history_and_periodic

ALTER TABLE radar.alert DROP CONSTRAINT alert_status_check;
ALTER TABLE radar.alert ADD CONSTRAINT alert_status_check
    CHECK (status IN ('pending', 'sending', 'sent', 'failed', 'skipped', 'withheld'));

ALTER TABLE radar.alert
    ADD COLUMN delivery_id      uuid,                           -- the attempt that last claimed the row
    ADD COLUMN claimed_at       timestamptz,                    -- when that attempt claimed it
    ADD COLUMN outcome_unknown  boolean NOT NULL DEFAULT false, -- that attempt may have posted the message
    ADD COLUMN next_attempt_at  timestamptz;                    -- backoff: no attempt before this

DROP INDEX radar.alert_pending_idx;
CREATE INDEX alert_waiting_idx ON radar.alert (created_at) WHERE status IN ('pending', 'sending');
