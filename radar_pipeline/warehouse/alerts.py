"""What an analysis announces, read for the alerts: its detections (a group by its heaviest member), its probably
slower statements, its load changes and its load; the outbox (warehouse.outbox) records their delivery."""

from __future__ import annotations

from datetime import datetime

import pandas as pd
import sqlalchemy as sa

from radar_pipeline.engine import Tier, Verdict
from radar_pipeline.warehouse.analysis import VERDICT_QUERY_JOIN, exact_partners, partner_text

# Per detected group of the analysis, its tested member with the most execution time after the deploy over the
# first look's window (calls × mean; ties to the lowest queryid), and per such statement the sentences of the groups
# it stands for (a statement may be the heaviest of several). The first look's figure, which a later look never
# changes (warehouse.looks.replace_open keeps it as first_exec_ms when it rewrites a row with its longer after side):
# ranked by the current row, a later look would hand the group to another member and alert it again.
GROUP_REPRESENTATIVES = (
    "member AS ("
    "  SELECT g.target, g.group_id, g.sentence, g.look, g.look_end, m.dbid, m.userid, m.queryid, m.toplevel "
    "  FROM radar.group_verdict g "
    "  CROSS JOIN LATERAL unnest(g.member_dbid, g.member_userid, g.member_queryid, g.member_toplevel) "
    "    AS m (dbid, userid, queryid, toplevel) "
    f"  WHERE g.deploy_id = :d AND g.verdict = '{Verdict.DETECTED}' AND NOT EXISTS ("
    "    SELECT 1 FROM radar.muted_group mg WHERE mg.deploy_id = g.deploy_id AND mg.target = g.target "
    "    AND mg.group_id = g.group_id AND mg.look = g.look)), "
    "heaviest AS ("
    "  SELECT DISTINCT ON (m.target, m.group_id) m.* FROM member m JOIN radar.verdict w ON w.deploy_id = :d "
    "  AND w.target = m.target AND w.dbid = m.dbid AND w.userid = m.userid AND w.queryid = m.queryid "
    "  AND w.toplevel = m.toplevel "
    "  ORDER BY m.target, m.group_id, "
    "  coalesce(w.first_exec_ms, CASE WHEN w.calls_after > 0 THEN w.calls_after * w.mean_after_ms ELSE 0 END) "
    "  DESC NULLS LAST, m.queryid), "
    "representative AS ("
    "  SELECT target, dbid, userid, queryid, toplevel, string_agg(sentence, '; ' ORDER BY group_id) AS represents, "
    "  max(look) AS group_look, max(look_end) AS group_look_end "
    "  FROM heaviest GROUP BY target, dbid, userid, queryid, toplevel)"
)


def detections(conn: sa.Connection, analysis_id: str) -> pd.DataFrame:
    """The analysis's detected regressions to alert, with their text, the deploy's facts (none for a periodic
    analysis) and the analysis that found them: the statements detected, and one row per detected group — its tested
    member with the most execution time after the deploy (GROUP_REPRESENTATIVES), `represents` holding the groups it
    stands for and its group_regressed saying so. A group's test controls the false detections of groups, not of
    its members: a false group detection is one alert, as the budget counts it, and its other members — which may
    not have slowed beyond 1 + θ — keep their own verdicts and their mark (steps/groups.py) without an alert each.
    Of a periodic analysis, only those it reported (it opened their episode: see warehouse.episodes). Muted
    detections (sql/0037: radar.muted_verdict, radar.muted_group) are left out: this is the one place every channel,
    the code hosts' comments included, takes what to alert from, so a muted detection is stored and never alerted."""
    found = pd.read_sql(
        sa.text(
            f"WITH {GROUP_REPRESENTATIVES} "
            "SELECT v.*, r.represents, r.group_look, r.group_look_end, q.query, d.deployed_at, d.service, d.version, "
            "d.url, a.run_id, a.settings, "
            # a later look's detection (a statement's, sql/0028; a group's, sql/0034): its news is as old as that
            # look's window
            "a.window_start, greatest(a.window_end, v.look_end, r.group_look_end) AS window_end "
            "FROM radar.verdict v LEFT JOIN radar.deploy_event d USING (deploy_id) "
            "JOIN radar.analysis a ON a.deploy_id = v.deploy_id AND a.target = v.target "
            "LEFT JOIN representative r ON r.target = v.target AND r.dbid = v.dbid AND r.userid = v.userid "
            "AND r.queryid = v.queryid AND r.toplevel = v.toplevel "
            f"{VERDICT_QUERY_JOIN} "
            f"WHERE v.deploy_id = :d AND ((v.verdict = '{Verdict.DETECTED}' AND NOT EXISTS ("
            "  SELECT 1 FROM radar.muted_verdict mu WHERE mu.deploy_id = v.deploy_id AND mu.target = v.target "
            "  AND mu.dbid = v.dbid AND mu.userid = v.userid AND mu.queryid = v.queryid AND mu.toplevel = v.toplevel)) "
            "OR r.represents IS NOT NULL) "
            "AND (v.trigger = 'deploy' OR EXISTS ("
            "  SELECT 1 FROM radar.regression_episode e WHERE e.opened_by = v.deploy_id AND e.target = v.target "
            "  AND e.dbid = v.dbid AND e.userid = v.userid AND e.toplevel = v.toplevel "
            "  AND e.fingerprint = v.fingerprint)) "
            f"ORDER BY v.target, v.verdict = '{Verdict.DETECTED}' DESC, v.confidence DESC NULLS LAST, "
            "v.change_factor DESC"
        ),
        conn,
        params={"d": analysis_id},
    )
    return found.pipe(_group_members_placed).pipe(_group_alert_words)


def probably_slower(conn: sa.Connection, analysis_id: str) -> pd.DataFrame:
    """The deploy's statements marked probably slower (sql/0036: open, slower than 1 + θ on their own evidence, not
    proven within the family's budget), the busiest after the deploy first, with the deploy's facts and the
    analysis's as alerts.detections gives them: announced once, like a load change, so a deploy whose only news they
    are is still said (the gate warns, it does not block). A release's member has none: the release's fleet verdict,
    which combines its members' evidence, speaks for them (release_verdicts)."""
    return pd.read_sql(
        sa.text(
            "SELECT v.*, q.query, d.deployed_at, d.service, d.version, d.url, a.run_id, a.settings, a.window_start, "
            "greatest(a.window_end, v.look_end) AS window_end "
            "FROM radar.verdict v JOIN radar.deploy_event d USING (deploy_id) "
            "JOIN radar.analysis a ON a.deploy_id = v.deploy_id AND a.target = v.target "
            f"{VERDICT_QUERY_JOIN} "
            f"WHERE v.deploy_id = :d AND v.trigger = 'deploy' AND v.tier = '{Tier.PROBABLY_SLOWER}' "
            "AND d.release_id IS NULL "
            "ORDER BY v.target, v.calls_after * v.mean_after_ms DESC NULLS LAST, v.queryid"
        ),
        conn,
        params={"d": analysis_id},
    )


def _group_alert_words(found: pd.DataFrame) -> pd.DataFrame:
    """A group's alert says it is the group's, not its member's: the representative's group_regressed (shown as the
    message's "Group" field) names the group it stands for and the member's own verdict."""
    if found.empty:
        return found
    stands = found["represents"].notna()
    if stands.any():
        words = (
            "alerted for its group, as the member with the most execution time after the deploy (its own verdict: "
            + found["verdict"].astype(str)
            + "); the group regressed: "
            + found["represents"].astype(str)
        )
        found["group_regressed"] = found["group_regressed"].astype(object).where(~stands, words)
        # A group a later look found (sql/0034) is news of that look: "found 2 h after deploy X (later look 2)".
        late = stands & (found["verdict"] != Verdict.DETECTED) & (found["group_look"].fillna(0) > 0)
        found["look"] = found["look"].where(~late, found["group_look"])
        found["look_end"] = found["look_end"].where(~late, found["group_look_end"])
    return found


def _group_members_placed(found: pd.DataFrame) -> pd.DataFrame:
    """A detected group's representative its own test left without a split is shown changing at the deploy (for a
    periodic analysis, the split between its periods), its segments the window's sides."""
    if found.empty:
        return found
    placed = found["change_at"].isna()
    if placed.any():
        middle = found["window_start"] + (found["window_end"] - found["window_start"]) / 2
        at = found["deployed_at"].where(found["deployed_at"].notna(), middle)
        found["change_at"] = found["change_at"].where(~placed, at)
        for side in ("before", "after"):
            segment = f"segment_mean_{side}_ms"
            found[segment] = found[segment].where(found[segment].notna(), found[f"mean_{side}_ms"])
    return found


# A rewrite is announced by its heavy half (the statement that started and added new_statement_share of the time).
ANNOUNCED = "(c.kind IN ('surge', 'n_plus_one') OR (c.kind IN ('new', 'replaced') AND c.heavy))"


def load_changes(conn: sa.Connection, analysis_id: str) -> pd.DataFrame:
    """The analysis's load changes announced like regressions (radar.statement_change: call surges, N+1 surges, new
    heavy statements and heavier rewrites), heaviest first, with their text, their first plan stored since the window
    began (root node), their share of the target's execution time after the split, the deploy's facts and the
    analysis's."""
    return pd.read_sql(
        sa.text(
            f"SELECT c.*, {partner_text('c')}, q.query, d.deployed_at, d.service, d.version, d.url, a.run_id, "
            "a.settings, a.window_start, a.window_end, "
            "c.exec_ms_per_min_after / nullif(i.exec_ms_per_min_after, 0) AS share_of_time_after, "
            "(SELECT p.root_node FROM radar.plan_snapshot p WHERE p.target = c.target AND p.dbid = c.dbid "
            " AND p.userid = c.userid AND p.queryid = c.queryid AND p.toplevel = c.toplevel "
            " AND p.captured_at >= a.window_start ORDER BY p.captured_at LIMIT 1) AS first_plan "
            "FROM radar.statement_change c LEFT JOIN radar.deploy_event d USING (deploy_id) "
            "JOIN radar.analysis a ON a.deploy_id = c.deploy_id AND a.target = c.target "
            "LEFT JOIN radar.deploy_impact i ON i.deploy_id = c.deploy_id AND i.target = c.target AND i.dbid = -1 "
            "LEFT JOIN radar.query q ON q.target = c.target AND q.dbid = c.dbid AND q.userid = c.userid "
            "AND q.queryid = c.queryid AND q.toplevel = c.toplevel "
            f"WHERE c.deploy_id = :d AND {ANNOUNCED} "
            "ORDER BY c.target, c.exec_ms_per_min_after - c.exec_ms_per_min_before DESC"
        ),
        conn,
        params={"d": analysis_id},
    ).pipe(exact_partners)


def load_summary(conn: sa.Connection, analysis_id: str, target: str) -> tuple[float | None, float] | None:
    """The target's execution time per minute before and after the split (radar.deploy_impact), when stored; None
    before it when no statement had calls there (no data before the split, not a load of 0)."""
    row = conn.execute(
        sa.text(
            "SELECT exec_ms_per_min_before, exec_ms_per_min_after, statements_before FROM radar.deploy_impact "
            "WHERE deploy_id = :d AND target = :t AND dbid = -1"
        ),
        {"d": analysis_id, "t": target},
    ).one_or_none()
    return None if row is None else (float(row[0]) if row[2] else None, float(row[1]))


def analysis_window_end(conn: sa.Connection, analysis_id: str) -> datetime | None:
    """When the analysis's window closed (the latest of its targets', or of a later look that decided a verdict: sql/
    0028), or None when it has no analysis yet."""
    return conn.execute(
        sa.text(
            "SELECT greatest(max(window_end), (SELECT max(look_end) FROM radar.verdict WHERE deploy_id = :d)) "
            "FROM radar.analysis WHERE deploy_id = :d"
        ),
        {"d": analysis_id},
    ).scalar_one()
