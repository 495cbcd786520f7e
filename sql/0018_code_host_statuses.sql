-- Code hosts: what a commit status, a deployment status and a pull/merge request comment need, recorded with the
-- deploy (from the CI's variables or `radar deploy` flags; none of them: the deploy simply gets no status), and the
-- outbox of those deliveries.
-- depends: 0017_cleared_verdicts

ALTER TABLE radar.deploy_event
    ADD COLUMN commit_sha           text,     -- the full SHA deployed
    ADD COLUMN repository           text,     -- GitHub owner/name; GitLab project path or numeric id
    ADD COLUMN code_host            text CHECK (code_host IN ('github', 'gitlab')),
    ADD COLUMN api_url              text,     -- the code host's API as the CI named it (GitHub Enterprise, self-hosted GitLab)
    ADD COLUMN run_url              text,     -- the CI run or job that deployed
    ADD COLUMN github_deployment_id bigint;   -- when the deploy came from a GitHub deployment

-- One row per deploy per kind of delivery, written before anything is sent, with Slack's outbox rules (sql/0009): an
-- attempt claims its row (`sending`, a new delivery_id) in a transaction of its own, sends, and records the outcome in
-- a second one; a row whose attempt may have posted (outcome_unknown, or left `sending` past its lease) is looked for
-- on the host before a comment is posted again. A re-analysis that changes the deploy's state or analysis time makes
-- the row pending again: the status is sent anew, the comment edited in place (remote_ids keeps each comment's id).
CREATE TABLE radar.code_host_delivery (
    deploy_id        text        NOT NULL REFERENCES radar.deploy_event (deploy_id) ON DELETE CASCADE,
    kind             text        NOT NULL CHECK (kind IN ('commit_status', 'deployment_status', 'review_comment')),
    state            text        NOT NULL,  -- the deploy state it carries: pass, fail, inconclusive
    analysed_at      timestamptz NOT NULL,  -- of the analysis it reports
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
    remote_ids       jsonb       NOT NULL DEFAULT '{}'::jsonb,  -- comments: pull/merge request number → comment id
    PRIMARY KEY (deploy_id, kind)
);

CREATE INDEX code_host_delivery_waiting_idx ON radar.code_host_delivery (created_at)
    WHERE status IN ('pending', 'sending');
