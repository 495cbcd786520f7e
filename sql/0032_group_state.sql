-- A detected group fails its deploy (issue 29): statements decided together (0031) whose joint test found them slower
-- beyond θ are a detection within the budget like any other, so radar.deploy_state says `fail` for them, and counts
-- them (`groups_detected`), which `radar gate` and the code-host statuses read. Columns only added at the end. A
-- failed look (0028's status `failed`) is not counted among the looks done.
-- depends: 0031_statement_groups

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
        WHEN NOT a.before_clearing AND c.exec_ms > 0 AND c.cleared_ms >= s.pass_share * c.exec_ms THEN 'pass'
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
    g.groups_detected
FROM radar.deploy_event d
CROSS JOIN (
    SELECT coalesce(CAST(nullif(current_setting('radar.pass_share', true), '') AS double precision), 0.9) AS pass_share
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
        coalesce(sum(coalesce(first_exec_ms, calls_after * mean_after_ms))
            FILTER (WHERE coalesce(first_exec_ms, calls_after * mean_after_ms) > 0), 0) AS exec_ms,
        coalesce(sum(coalesce(first_exec_ms, calls_after * mean_after_ms))
            FILTER (WHERE coalesce(first_exec_ms, calls_after * mean_after_ms) > 0 AND verdict = 'no_regression'), 0)
            AS cleared_ms,
        count(*) FILTER (WHERE verdict = 'detected' AND look > 0) AS late_detected
    FROM radar.verdict WHERE deploy_id = d.deploy_id
) c
CROSS JOIN LATERAL (
    SELECT count(*) FILTER (WHERE verdict = 'detected') AS groups_detected
    FROM radar.group_verdict WHERE deploy_id = d.deploy_id
) g;
