-- The gate's tiers and its new rule (issue 38, engine 2.7; docs/ci.md, README "Reading a verdict").
--
-- tier: what a verdict says beyond its word (engine.vocabulary.Tier): `improved`, a cleared statement whose upper
-- bound lies below 1 / (1 + θ) (clearly faster); `probably_slower`, an inconclusive statement whose own 95% interval
-- lies above 1 + θ (slower on its own evidence, not proven within the family's budget). NULL: neither, and every row
-- stored before this migration. radar.group_verdict carries the same word for a group's joint verdict (NULL where
-- the engine gave its groups none).
--
-- radar.deploy_state: a deploy fails when something is detected (a statement, a group). Otherwise each statement
-- neither cleared nor detected that ran before the deploy may have added, beyond the tolerance, T · (1 − (1 + θ) /
-- factor_bound)⁺ of the execution time after the deploy, its excess (all of T where it has no bound; a new statement is
-- new load, the impact's, not a slowdown), θ the analysis' threshold; the deploy passes when no statement's excess
-- exceeds max_open_excess of the time and theirs together do not exceed max_total_excess (docs/method.md, "The gate's
-- rule"). engine.gate.deploy_state is the same rule on a frame (a test holds the two to one answer). The bars are
-- 0.01 and 0.03 unless the session or the database sets radar.max_open_excess or radar.max_total_excess (the defaults
-- are engine.gate's MAX_OPEN_EXCESS and MAX_TOTAL_EXCESS). radar.pass_share (engine 2.6's rule: the share cleared) no
-- longer decides; cleared_share and pass_share are still given. The view reads radar.verdict, whose rows a later look
-- replaces, so the rule follows every look. Columns only added at the end:
--   largest_open_share    the largest share of the time one statement left open holds (0 when none is);
--   largest_excess_share  the largest excess of one statement, as a share of the time: the rule's first margin,
--   max_open_excess       against this bar;
--   open_excess_share     the open statements' excesses together: the second margin,
--   max_total_excess      against this bar;
--   improved             statements marked improved;
--   probably_slower      statements marked probably_slower;
--   groups_probably_slower  groups whose latest verdict (a group is tested again at later looks, sql/0034) is marked
--                        probably_slower: counted apart from the statements, as groups_detected is (a group's
--                        members are statements counted already).
-- Tiers never change the state: improved statements are cleared, probably slower ones are inconclusive.
-- Columns added with no default: no table rewrite. Safe to run again.
-- depends: 0035_statement_samples

ALTER TABLE radar.verdict ADD COLUMN IF NOT EXISTS tier text
    CHECK (tier IN ('improved', 'probably_slower'));
ALTER TABLE radar.group_verdict ADD COLUMN IF NOT EXISTS tier text
    CHECK (tier IN ('improved', 'probably_slower'));

CREATE OR REPLACE VIEW radar.deploy_state AS
SELECT
    d.deploy_id,
    d.target,
    d.deployed_at,
    d.service,
    d.version,
    CASE
        WHEN a.analyses = 0 THEN 'pending'
        WHEN c.detected > 0 OR g.groups_detected > 0 THEN 'fail'
        WHEN NOT a.before_clearing AND c.exec_ms > 0 AND c.largest_excess_ms <= s.max_open_excess * c.exec_ms
            AND c.open_excess_ms <= s.max_total_excess * c.exec_ms THEN 'pass'
        ELSE 'inconclusive'
    END AS state,
    greatest(a.analysed_at, l.changed_at) AS analysed_at,
    a.engine_version,
    c.detected,
    c.no_regression,
    c.inconclusive,
    c.insufficient_data,
    c.exec_ms,
    c.cleared_ms,
    CASE WHEN c.exec_ms > 0 THEN c.cleared_ms / c.exec_ms END AS cleared_share,
    s.pass_share,
    coalesce(l.looks_done, 0) AS looks_done,
    c.late_detected,
    g.groups_detected,
    CASE WHEN c.exec_ms > 0 THEN c.largest_open_ms / c.exec_ms END AS largest_open_share,
    CASE WHEN c.exec_ms > 0 THEN c.largest_excess_ms / c.exec_ms END AS largest_excess_share,
    s.max_open_excess,
    CASE WHEN c.exec_ms > 0 THEN c.open_excess_ms / c.exec_ms END AS open_excess_share,
    s.max_total_excess,
    c.improved,
    c.probably_slower,
    g.groups_probably_slower
FROM radar.deploy_event d
CROSS JOIN (
    SELECT coalesce(CAST(nullif(current_setting('radar.pass_share', true), '') AS double precision), 0.9) AS pass_share,
           coalesce(CAST(nullif(current_setting('radar.max_open_excess', true), '') AS double precision), 0.01)
               AS max_open_excess,
           coalesce(CAST(nullif(current_setting('radar.max_total_excess', true), '') AS double precision), 0.03)
               AS max_total_excess
) s
CROSS JOIN LATERAL (
    SELECT count(*) AS analyses, max(analysed_at) AS analysed_at, min(engine_version) AS engine_version,
           coalesce(bool_or(inconclusive IS NULL), false) AS before_clearing
    FROM radar.analysis WHERE deploy_id = d.deploy_id
) a
CROSS JOIN LATERAL (
    SELECT max(k.look) FILTER (WHERE k.status <> 'failed') AS looks_done,
           max(k.ran_at) FILTER (WHERE k.detected + k.cleared > 0) AS changed_at
    FROM radar.deploy_look k JOIN radar.analysis x ON x.deploy_id = k.deploy_id AND x.target = k.target
    WHERE k.deploy_id = d.deploy_id AND k.basis = x.analysed_at
) l
CROSS JOIN LATERAL (
    SELECT
        count(*) FILTER (WHERE verdict = 'detected') AS detected,
        count(*) FILTER (WHERE verdict = 'no_regression') AS no_regression,
        count(*) FILTER (WHERE verdict = 'inconclusive') AS inconclusive,
        count(*) FILTER (WHERE verdict = 'insufficient_data') AS insufficient_data,
        coalesce(sum(t.ms) FILTER (WHERE t.ms > 0), 0) AS exec_ms,
        coalesce(sum(t.ms) FILTER (WHERE t.ms > 0 AND verdict = 'no_regression'), 0) AS cleared_ms,
        coalesce(max(t.ms) FILTER (WHERE t.ms > 0 AND verdict IN ('inconclusive', 'insufficient_data')), 0)
            AS largest_open_ms,
        coalesce(sum(t.excess), 0) AS open_excess_ms,
        coalesce(max(t.excess), 0) AS largest_excess_ms,
        count(*) FILTER (WHERE verdict = 'detected' AND look > 0) AS late_detected,
        count(*) FILTER (WHERE tier = 'improved') AS improved,
        count(*) FILTER (WHERE tier = 'probably_slower') AS probably_slower
    FROM radar.verdict v
    CROSS JOIN LATERAL (
        SELECT coalesce(v.first_exec_ms, v.calls_after * v.mean_after_ms) AS ms,
               coalesce((SELECT CAST(x.settings ->> 'threshold' AS double precision) FROM radar.analysis x
                         WHERE x.deploy_id = v.deploy_id AND x.target = v.target), 0.2) AS theta
    ) w
    CROSS JOIN LATERAL (
        SELECT w.ms,
               CASE WHEN w.ms > 0 AND v.verdict IN ('inconclusive', 'insufficient_data') AND v.calls_before > 0
                    THEN w.ms * CASE WHEN v.factor_bound > 0
                                     THEN greatest(0.0, 1 - (1 + w.theta) / v.factor_bound) ELSE 1 END
                    ELSE 0 END AS excess
    ) t
    WHERE v.deploy_id = d.deploy_id
) c
CROSS JOIN LATERAL (
    SELECT count(*) FILTER (WHERE verdict = 'detected') AS groups_detected,
           count(*) FILTER (WHERE latest AND tier = 'probably_slower') AS groups_probably_slower
    FROM (
        SELECT verdict, tier,
               look = max(look) OVER (PARTITION BY target, group_id) AS latest
        FROM radar.group_verdict WHERE deploy_id = d.deploy_id
    ) gv
) g;
