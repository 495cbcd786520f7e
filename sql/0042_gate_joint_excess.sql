-- The gate's rule, third form (issue 38; docs/method.md, "The gate's rule"): an open statement holds the deploy alone
-- only when it may have added more than radar.max_open_excess of the time beyond θ AND its bound reaches beyond
-- radar.gate_factor (×1.4); every other open statement is summed jointly, not bound by bound: Σ T·(1 − (1 + θ)/f) at
-- their deploy estimates f (each at least 1), plus z (96%) times that sum's standard error over those not bounded
-- within the gate factor (estimates independent), plus the excess of those without an estimate, at most
-- radar.max_total_excess. Shares are (T · part) / ΣT, as engine.gate.deploy_state computes them: the same rule for
-- frames, held to this view by test_gate_rule. Columns are 0037's, with the gate factor, the open statements bounded
-- within it, the largest of their bounds and of their excesses added at the end. Safe to run again.
-- depends: 0041_auto_explain_plans

CREATE OR REPLACE VIEW radar.deploy_state AS
SELECT
    d.deploy_id,
    d.target,
    d.deployed_at,
    d.service,
    d.version,
    CASE
        WHEN a.analyses = 0 THEN 'pending'
        WHEN c.detected > c.muted OR g.groups_detected > g.groups_muted THEN 'fail'
        WHEN NOT a.before_clearing AND c.exec_ms > 0 AND c.holding = 0
            AND c.open_excess_ms / nullif(c.exec_ms, 0) <= s.max_total_excess THEN 'pass'
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
    g.groups_probably_slower,
    c.muted AS muted_detected,
    g.groups_muted,
    s.gate_factor,
    c.bounded_open,
    c.largest_bounded_factor,
    CASE WHEN c.exec_ms > 0 THEN c.largest_bounded_excess_ms / c.exec_ms END AS largest_bounded_excess_share
FROM radar.deploy_event d
CROSS JOIN (
    SELECT coalesce(CAST(nullif(current_setting('radar.pass_share', true), '') AS double precision), 0.9) AS pass_share,
           coalesce(CAST(nullif(current_setting('radar.max_open_excess', true), '') AS double precision), 0.01)
               AS max_open_excess,
           coalesce(CAST(nullif(current_setting('radar.max_total_excess', true), '') AS double precision), 0.03)
               AS max_total_excess,
           coalesce(CAST(nullif(current_setting('radar.gate_factor', true), '') AS double precision), 1.4)
               AS gate_factor,
           1.7506860712521692 AS gate_z
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
        greatest(0.0, coalesce(sum(t.ms * (1 - (1 + t.theta) / t.factor)) FILTER (WHERE t.member AND t.estimated), 0)
                      + s.gate_z * sqrt(coalesce(sum((t.ms * (1 + t.theta) * t.log_se / t.factor) ^ 2)
                                                 FILTER (WHERE t.member AND t.estimated AND NOT t.within), 0)))
            + coalesce(sum(t.excess) FILTER (WHERE t.member AND NOT t.estimated), 0) AS open_excess_ms,
        coalesce(max(t.excess) FILTER (WHERE NOT t.within), 0) AS largest_excess_ms,
        count(*) FILTER (WHERE t.over AND NOT t.within) AS holding,
        count(*) FILTER (WHERE t.within) AS bounded_open,
        max(v.factor_bound) FILTER (WHERE t.within) AS largest_bounded_factor,
        coalesce(max(t.excess) FILTER (WHERE t.within), 0) AS largest_bounded_excess_ms,
        count(*) FILTER (WHERE verdict = 'detected' AND look > 0) AS late_detected,
        count(*) FILTER (WHERE tier = 'improved') AS improved,
        count(*) FILTER (WHERE tier = 'probably_slower') AS probably_slower,
        count(*) FILTER (WHERE verdict = 'detected' AND EXISTS (
            SELECT 1 FROM radar.muted_verdict m WHERE m.deploy_id = v.deploy_id AND m.target = v.target
            AND m.dbid = v.dbid AND m.userid = v.userid AND m.queryid = v.queryid AND m.toplevel = v.toplevel
        )) AS muted
    FROM (
        SELECT v.*, m.ms, m.is_open, sum(m.ms) OVER () AS deploy_ms,
               coalesce((SELECT CAST(x.settings ->> 'threshold' AS double precision) FROM radar.analysis x
                         WHERE x.deploy_id = v.deploy_id AND x.target = v.target), 0.2) AS theta
        FROM radar.verdict v
        CROSS JOIN LATERAL (
            SELECT CASE WHEN w.ms > 0 THEN w.ms ELSE 0 END AS ms,
                   coalesce(v.verdict IN ('inconclusive', 'insufficient_data') AND v.calls_before > 0, false) AS is_open
            FROM (SELECT coalesce(v.first_exec_ms, v.calls_after * v.mean_after_ms) AS ms) w
        ) m
        WHERE v.deploy_id = d.deploy_id
    ) v
    CROSS JOIN LATERAL (
        SELECT v.ms, v.theta, v.is_open,
               CASE WHEN v.ms > 0 AND v.is_open
                    THEN v.ms * CASE WHEN v.factor_bound > 0 AND v.factor_bound < CAST('Infinity' AS double precision)
                                     THEN greatest(0.0, 1 - (1 + v.theta) / v.factor_bound) ELSE 1 END
                    ELSE 0 END AS excess,
               v.deploy_log_factor BETWEEN -50 AND 50 AND v.deploy_log_se BETWEEN 0 AND 50 AS estimated,
               greatest(1.0, exp(CASE WHEN v.deploy_log_factor BETWEEN -50 AND 50 THEN v.deploy_log_factor ELSE 0 END))
                   AS factor,
               v.deploy_log_se AS log_se
    ) e
    CROSS JOIN LATERAL (
        SELECT CASE WHEN v.deploy_ms > 0 THEN e.excess / v.deploy_ms ELSE 0 END > s.max_open_excess AS over,
               coalesce(v.factor_bound > 0 AND v.factor_bound <= s.gate_factor, false) AS bounded
    ) o
    CROSS JOIN LATERAL (
        SELECT e.ms, e.theta, e.excess, e.factor, e.log_se, coalesce(e.estimated, false) AS estimated,
               o.over, o.over AND o.bounded AS within,
               e.is_open AND NOT (o.over AND NOT o.bounded) AS member
    ) t
) c
CROSS JOIN LATERAL (
    SELECT count(*) FILTER (WHERE verdict = 'detected') AS groups_detected,
           count(*) FILTER (WHERE latest AND tier = 'probably_slower') AS groups_probably_slower,
           count(*) FILTER (WHERE verdict = 'detected' AND EXISTS (
               SELECT 1 FROM radar.muted_group m WHERE m.deploy_id = d.deploy_id AND m.target = gv.target
               AND m.group_id = gv.group_id AND m.look = gv.look
           )) AS groups_muted
    FROM (
        SELECT target, group_id, look, verdict, tier,
               look = max(look) OVER (PARTITION BY target, group_id) AS latest
        FROM radar.group_verdict WHERE deploy_id = d.deploy_id
    ) gv
) g;
