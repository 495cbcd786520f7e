-- Statements decided together at later looks (issue 29, groups, docs/groups.md): a group left undecided by the
-- deploy's first verdict (inconclusive or insufficient_data) is tested again at each later look (2W, 4W, 8W) on its
-- members' evidence over that look's spans, with the groups' share of that look's budget, until it is decided. Each
-- look's verdict of a group is a row of its own: look (0 is the first verdict's) and look_end (where that look's after
-- side ended; NULL for the first verdict's rows), so radar.group_verdict holds a row per group per look it was
-- tested at. A group detected at a later look fails the deploy as one detected at the first (0032's groups_detected
-- counts its single detected row: a detected group is never tested again).
-- Columns added with a constant default or none: no table rewrite. The primary key gains the look; the table holds a
-- row per group per analysis, so rebuilding its index is brief. Safe to run again.
-- depends: 0033_release_looks

ALTER TABLE radar.group_verdict ADD COLUMN IF NOT EXISTS look smallint NOT NULL DEFAULT 0;
ALTER TABLE radar.group_verdict ADD COLUMN IF NOT EXISTS look_end timestamptz;

DO $$
BEGIN
    IF NOT EXISTS (
        SELECT 1 FROM pg_constraint
        WHERE conrelid = 'radar.group_verdict'::regclass AND contype = 'p' AND cardinality(conkey) = 4
    ) THEN
        ALTER TABLE radar.group_verdict DROP CONSTRAINT IF EXISTS group_verdict_pkey;
        ALTER TABLE radar.group_verdict ADD CONSTRAINT group_verdict_pkey
            PRIMARY KEY (deploy_id, target, group_id, look);
    END IF;
END
$$;
