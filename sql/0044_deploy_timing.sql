-- The times deploy_event_sensor waits by (issue 40, "settings every client must agree on"): the analysis window after
-- a deploy and the settle after it (one scrape interval), as the daemon running the sensor is configured. The sensor
-- records them on each tick where they changed; `radar deploy` and `radar gate` read them to say when a verdict is
-- due, whatever their own environment says, for a target's first deploy too. One row.
-- depends: 0043_one_outbox

CREATE TABLE radar.deploy_timing (
    only_row        boolean          PRIMARY KEY DEFAULT true CHECK (only_row),
    window_seconds  double precision NOT NULL CHECK (window_seconds > 0),
    settle_seconds  double precision NOT NULL CHECK (settle_seconds >= 0),
    updated_at      timestamptz      NOT NULL DEFAULT now()
);
