-- The webhook receiver (`radar webhook serve`): the id each sender gives a delivery (GitHub's X-GitHub-Delivery,
-- GitLab's X-Gitlab-Event-UUID, ...), stored in the transaction that records its deploy, so a delivery seen before is
-- refused as a replay and a delivery that failed (nothing stored) can be sent again. Sources without a delivery id
-- rely on the deploy id's idempotence: the same event again changes nothing, a different one is refused.
-- depends: 0018_code_host_statuses

CREATE TABLE radar.webhook_delivery (
    source       text        NOT NULL,  -- the receiver's source: github, gitlab, ...
    delivery_id  text        NOT NULL CHECK (length(delivery_id) BETWEEN 1 AND 200),
    deploy_id    text        NOT NULL REFERENCES radar.deploy_event (deploy_id) ON DELETE CASCADE,
    received_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (source, delivery_id)
);

CREATE INDEX webhook_delivery_deploy_idx ON radar.webhook_delivery (deploy_id);
