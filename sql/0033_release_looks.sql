-- Fleet decisions at later looks (issue 29, docs/fleets.md): a final release's keys still open at the fleet level
-- (inconclusive) are decided again at 2W, 4W and 8W, on each member's evidence over that look's spans, at the look's
-- share of the release's budget B. Each key keeps its share of the release's family (family_weight, fixed at the
-- decision that formed the family: never handed on from decided keys); look_after is the after side the key's
-- verdict rests on (the longest member's; NULL: the members' first looks). radar.release_look records what each look
-- was: kind (basis: a decision on the members' first looks; timed: a later look on their counters), status (done;
-- failed: its latest attempt failed, it is not asked for again and its share is left unspent), how many keys were
-- open and decided, and the run. Columns added without defaults, or with constant ones: no table rewrite. Safe to
-- run again.
-- depends: 0032_group_state

ALTER TABLE radar.release_verdict ADD COLUMN IF NOT EXISTS family_weight double precision;
ALTER TABLE radar.release_verdict ADD COLUMN IF NOT EXISTS look_after interval;

ALTER TABLE radar.release_look ADD COLUMN IF NOT EXISTS kind text NOT NULL DEFAULT 'basis';  -- basis, timed
ALTER TABLE radar.release_look ADD COLUMN IF NOT EXISTS status text NOT NULL DEFAULT 'done';  -- done, failed
ALTER TABLE radar.release_look ADD COLUMN IF NOT EXISTS opened integer;
ALTER TABLE radar.release_look ADD COLUMN IF NOT EXISTS detected integer;
ALTER TABLE radar.release_look ADD COLUMN IF NOT EXISTS cleared integer;
ALTER TABLE radar.release_look ADD COLUMN IF NOT EXISTS after_span interval;
ALTER TABLE radar.release_look ADD COLUMN IF NOT EXISTS run_id text;

-- The sensor reads the final releases decided recently.
CREATE INDEX IF NOT EXISTS release_look_decided_idx ON radar.release_look (decided_at);
