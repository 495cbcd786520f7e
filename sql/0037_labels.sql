-- People close the loop (issue 41, docs/labels.md): labels on verdicts, mutes, and the realised false-alert rate.
--
-- radar.label: what a person said of a verdict, append-only (a trigger refuses UPDATE and DELETE; a newer label is a
-- new row, the latest one stands). A label never rewrites a verdict: radar.verdict, radar.group_verdict and
-- radar.release_verdict are untouched, and a re-analysis that replaces a deploy's verdicts keeps its labels. What is
-- labelled (kind):
--   statement  a statement's verdict in an analysis: deploy_id (a deploy, or a periodic check's `periodic:<hour>`,
--              which is how a periodic episode is labelled: by the analysis that opened it, its opened_by) and the
--              statement key (target, dbid, userid, queryid, toplevel);
--   group      a group decided together (sql/0031): deploy_id, target, group_id;
--   fleet      a fleet verdict of a release (sql/0029): release_id, fingerprint, toplevel.
-- label in intended, false_alarm, fixed (fixed_by: the deploy that fixed it, required, and only then), acknowledged;
-- labelled_by, note; source: where it came from (cli, receiver, slack, code_host); idempotency_key: a retried request
-- carrying the same key lands once (unique; NULL for none).
--
-- radar.mute: a target, a statement of a target, or a group (of one target or of any) muted from starts_at until
-- `until`, with a reason; radar.mute_end ends one early (one row per mute, append-only too). A detection is muted when a
-- mute that matches it was in force at some moment between the deploy (a periodic check: its window's start) and the
-- end of the window that found it (a later look's: that look's); radar.covering_mute says which. Muted detections are
-- stored and shown as such; they are not alerted (warehouse.alerts.detections) and do not fail radar.deploy_state
-- (muted_detected and groups_muted count them, added at the end of the view).
--
-- radar.realised_false_alerts: per month (UTC, of the deploy) and target, the deploy analyses, their detections
-- (statements and groups), those whose latest label is false_alarm, the unlabelled, and the realised false-alert rate
-- per analysis with its exact (Garwood) 95% Poisson interval, against the analyses' false-alert budget (settings'
-- false_alert_budget, 0.1 where an older analysis stored none). docs/budget.md says how to read it.
-- depends: 0036_gate_tiers

CREATE OR REPLACE FUNCTION radar.refuse_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'radar.% is append-only: its rows are never updated or deleted', TG_TABLE_NAME
        USING ERRCODE = 'restrict_violation';
END
$$;

CREATE TABLE IF NOT EXISTS radar.label (
    label_id        bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind            text        NOT NULL CHECK (kind IN ('statement', 'group', 'fleet')),
    deploy_id       text,
    target          text,
    dbid            oid,
    userid          oid,
    queryid         bigint,
    toplevel        boolean,
    group_id        text,
    release_id      text,
    fingerprint     bigint,
    label           text        NOT NULL CHECK (label IN ('intended', 'false_alarm', 'fixed', 'acknowledged')),
    fixed_by        text        REFERENCES radar.deploy_event (deploy_id),
    labelled_by     text        NOT NULL,
    note            text        NOT NULL DEFAULT '',
    source          text        NOT NULL CHECK (source IN ('cli', 'receiver', 'slack', 'code_host')),
    idempotency_key text        UNIQUE,
    created_at      timestamptz NOT NULL DEFAULT now(),
    CHECK ((label = 'fixed') = (fixed_by IS NOT NULL)),
    CHECK (CASE kind
        WHEN 'statement' THEN num_nulls(deploy_id, target, dbid, userid, queryid, toplevel) = 0
            AND num_nonnulls(group_id, release_id, fingerprint) = 0
        WHEN 'group' THEN num_nulls(deploy_id, target, group_id) = 0
            AND num_nonnulls(dbid, userid, queryid, toplevel, release_id, fingerprint) = 0
        WHEN 'fleet' THEN num_nulls(release_id, fingerprint, toplevel) = 0
            AND num_nonnulls(deploy_id, target, dbid, userid, queryid, group_id) = 0
    END)
);
CREATE INDEX IF NOT EXISTS label_subject_idx ON radar.label (deploy_id, target, queryid);
CREATE INDEX IF NOT EXISTS label_release_idx ON radar.label (release_id) WHERE release_id IS NOT NULL;

DROP TRIGGER IF EXISTS label_append_only ON radar.label;
CREATE TRIGGER label_append_only BEFORE UPDATE OR DELETE ON radar.label
    FOR EACH ROW EXECUTE FUNCTION radar.refuse_change();

-- The latest label of everything labelled (DISTINCT ON takes NULLs as equal: one row per subject).
CREATE OR REPLACE VIEW radar.latest_label AS
SELECT DISTINCT ON (kind, deploy_id, target, dbid, userid, queryid, toplevel, group_id, release_id, fingerprint) *
FROM radar.label
ORDER BY kind, deploy_id, target, dbid, userid, queryid, toplevel, group_id, release_id, fingerprint,
         created_at DESC, label_id DESC;

-- Each statement verdict with its latest label (NULLs: none).
CREATE OR REPLACE VIEW radar.verdict_label AS
SELECT v.deploy_id, v.target, v.dbid, v.userid, v.queryid, v.toplevel, v.verdict,
       l.label, l.fixed_by, l.labelled_by, l.note, l.source, l.created_at AS labelled_at
FROM radar.verdict v
LEFT JOIN radar.latest_label l ON l.kind = 'statement' AND l.deploy_id = v.deploy_id AND l.target = v.target
    AND l.dbid = v.dbid AND l.userid = v.userid AND l.queryid = v.queryid AND l.toplevel = v.toplevel;

CREATE TABLE IF NOT EXISTS radar.mute (
    mute_id    bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    scope      text        NOT NULL CHECK (scope IN ('target', 'statement', 'group')),
    target     text,
    queryid    bigint,
    group_id   text,
    starts_at  timestamptz NOT NULL DEFAULT now(),
    until      timestamptz NOT NULL,
    reason     text        NOT NULL CHECK (reason <> ''),
    muted_by   text        NOT NULL,
    CHECK (until > starts_at),
    CHECK (CASE scope
        WHEN 'target' THEN target IS NOT NULL AND num_nonnulls(queryid, group_id) = 0
        WHEN 'statement' THEN num_nulls(target, queryid) = 0 AND group_id IS NULL
        WHEN 'group' THEN group_id IS NOT NULL AND queryid IS NULL
    END)
);

CREATE TABLE IF NOT EXISTS radar.mute_end (
    mute_id   bigint      PRIMARY KEY REFERENCES radar.mute (mute_id),
    ended_at  timestamptz NOT NULL DEFAULT now(),
    ended_by  text        NOT NULL
);

DROP TRIGGER IF EXISTS mute_append_only ON radar.mute;
CREATE TRIGGER mute_append_only BEFORE UPDATE OR DELETE ON radar.mute
    FOR EACH ROW EXECUTE FUNCTION radar.refuse_change();
DROP TRIGGER IF EXISTS mute_end_append_only ON radar.mute_end;
CREATE TRIGGER mute_end_append_only BEFORE UPDATE OR DELETE ON radar.mute_end
    FOR EACH ROW EXECUTE FUNCTION radar.refuse_change();

-- Each mute with when it ends: its `until`, or earlier when it was ended early.
CREATE OR REPLACE VIEW radar.mute_state AS
SELECT m.mute_id, m.scope, m.target, m.queryid, m.group_id, m.starts_at, m.until, m.reason, m.muted_by,
       e.ended_at, e.ended_by, least(m.until, e.ended_at) AS ends_at
FROM radar.mute m LEFT JOIN radar.mute_end e USING (mute_id);

-- The mute (the one lasting longest) matching a detection on `target` (a statement's queryid, or a group's id: NULL
-- for the other) that was in force at some moment of [from_at, to_at].
CREATE OR REPLACE FUNCTION radar.covering_mute(
    target text, queryid bigint, group_id text, from_at timestamptz, to_at timestamptz
) RETURNS SETOF radar.mute_state
LANGUAGE sql STABLE AS $$
    SELECT m.* FROM radar.mute_state m
    WHERE m.starts_at <= to_at AND m.ends_at > from_at
      AND ((m.scope = 'target' AND m.target = covering_mute.target)
        OR (m.scope = 'statement' AND m.target = covering_mute.target AND m.queryid = covering_mute.queryid)
        OR (m.scope = 'group' AND m.group_id = covering_mute.group_id
            AND (m.target IS NULL OR m.target = covering_mute.target)))
    ORDER BY m.ends_at DESC, m.mute_id
    LIMIT 1
$$;

-- The detected statements (a deploy's or a periodic check's) a mute covers, with the mute.
CREATE OR REPLACE VIEW radar.muted_verdict AS
SELECT v.deploy_id, v.target, v.dbid, v.userid, v.queryid, v.toplevel,
       m.mute_id, m.scope, m.reason, m.ends_at, m.muted_by
FROM radar.verdict v
JOIN radar.analysis a ON a.deploy_id = v.deploy_id AND a.target = v.target
LEFT JOIN radar.deploy_event d ON d.deploy_id = v.deploy_id
CROSS JOIN LATERAL radar.covering_mute(v.target, v.queryid, NULL, coalesce(d.deployed_at, a.window_start),
                                       greatest(a.window_end, v.look_end)) m
WHERE v.verdict = 'detected';

-- The detected groups a mute covers, with the mute.
CREATE OR REPLACE VIEW radar.muted_group AS
SELECT g.deploy_id, g.target, g.group_id, g.look, m.mute_id, m.scope, m.reason, m.ends_at, m.muted_by
FROM radar.group_verdict g
JOIN radar.analysis a ON a.deploy_id = g.deploy_id AND a.target = g.target
LEFT JOIN radar.deploy_event d ON d.deploy_id = g.deploy_id
CROSS JOIN LATERAL radar.covering_mute(g.target, NULL, g.group_id, coalesce(d.deployed_at, a.window_start),
                                       greatest(a.window_end, g.look_end)) m
WHERE g.verdict = 'detected';

-- 0036's view, with muted detections (statements and groups) no longer failing the deploy, counted at the end.
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
    g.groups_probably_slower,
    c.muted AS muted_detected,
    g.groups_muted
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
        count(*) FILTER (WHERE tier = 'probably_slower') AS probably_slower,
        count(*) FILTER (WHERE verdict = 'detected' AND EXISTS (
            SELECT 1 FROM radar.muted_verdict m WHERE m.deploy_id = v.deploy_id AND m.target = v.target
            AND m.dbid = v.dbid AND m.userid = v.userid AND m.queryid = v.queryid AND m.toplevel = v.toplevel
        )) AS muted
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

-- The mean μ of a Poisson count X at which P(X ≤ k) = p (P falls as μ grows), by bisection; the terms are summed in
-- log space, those below e^-700 left out (exp would underflow, and they cannot move the sum).
CREATE OR REPLACE FUNCTION radar.poisson_mean_at(k bigint, p double precision) RETURNS double precision
LANGUAGE plpgsql IMMUTABLE STRICT AS $$
DECLARE
    lo double precision := 0;
    hi double precision := k + 10 + 10 * sqrt(k + 1);
    mid double precision;
    log_term double precision;
    cdf double precision;
BEGIN
    FOR step IN 1..80 LOOP
        mid := (lo + hi) / 2;
        log_term := -mid;
        cdf := CASE WHEN log_term > -700 THEN exp(log_term) ELSE 0 END;
        FOR i IN 1..k LOOP
            log_term := log_term + ln(mid) - ln(i);
            IF log_term > -700 THEN
                cdf := cdf + exp(log_term);
            END IF;
        END LOOP;
        IF cdf > p THEN lo := mid; ELSE hi := mid; END IF;
    END LOOP;
    RETURN (lo + hi) / 2;
END
$$;

CREATE OR REPLACE VIEW radar.realised_false_alerts AS
WITH analysed AS (
    SELECT a.deploy_id, a.target, CAST(date_trunc('month', d.deployed_at AT TIME ZONE 'UTC') AS date) AS month,
           coalesce(CAST(a.settings ->> 'false_alert_budget' AS double precision), 0.1) AS budget
    FROM radar.analysis a JOIN radar.deploy_event d ON d.deploy_id = a.deploy_id
),
detection AS (
    SELECT v.deploy_id, v.target, l.label
    FROM radar.verdict v
    LEFT JOIN radar.latest_label l ON l.kind = 'statement' AND l.deploy_id = v.deploy_id AND l.target = v.target
        AND l.dbid = v.dbid AND l.userid = v.userid AND l.queryid = v.queryid AND l.toplevel = v.toplevel
    WHERE v.verdict = 'detected'
    UNION ALL
    SELECT g.deploy_id, g.target, l.label
    FROM (SELECT DISTINCT deploy_id, target, group_id FROM radar.group_verdict WHERE verdict = 'detected') g
    LEFT JOIN radar.latest_label l ON l.kind = 'group' AND l.deploy_id = g.deploy_id AND l.target = g.target
        AND l.group_id = g.group_id
),
counted AS (
    SELECT n.month, n.target, count(*) AS analyses, sum(n.budget) AS expected_false, avg(n.budget) AS budget,
           CAST(coalesce(sum(x.detections), 0) AS bigint) AS detections,
           CAST(coalesce(sum(x.false_alarm), 0) AS bigint) AS false_alarm,
           CAST(coalesce(sum(x.unlabelled), 0) AS bigint) AS unlabelled
    FROM analysed n
    LEFT JOIN (
        SELECT deploy_id, target, count(*) AS detections,
               count(*) FILTER (WHERE label = 'false_alarm') AS false_alarm,
               count(*) FILTER (WHERE label IS NULL) AS unlabelled
        FROM detection GROUP BY deploy_id, target
    ) x ON x.deploy_id = n.deploy_id AND x.target = n.target
    GROUP BY n.month, n.target
)
SELECT month, target, analyses, detections, false_alarm, detections - false_alarm - unlabelled AS labelled_real,
       unlabelled, budget, expected_false,
       CAST(false_alarm AS double precision) / analyses AS rate,
       CASE WHEN false_alarm = 0 THEN 0.0 ELSE radar.poisson_mean_at(false_alarm - 1, 0.975) / analyses END AS rate_low,
       radar.poisson_mean_at(false_alarm, 0.025) / analyses AS rate_high,
       CAST(false_alarm + unlabelled AS double precision) / analyses AS rate_if_unlabelled_false
FROM counted;
