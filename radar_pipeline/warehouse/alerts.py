"""The alert outbox (radar.alert): a row per regression per channel, written before anything is sent."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

import pandas as pd
import sqlalchemy as sa

from radar_pipeline.engine import Tier, Verdict
from radar_pipeline.pgss_model import KEY, Key, statement_key
from radar_pipeline.warehouse.analysis import VERDICT_QUERY_JOIN, exact_partners, partner_text

MAX_ATTEMPTS = 8  # a retryable failure keeps an alert pending until it has been tried this many times
LEASE = timedelta(minutes=15)  # a row `sending` longer than this was left by a run that stopped mid-send
# How an attempt's outcome is recorded on a row it claimed, in radar.alert and radar.channel_event alike (parameters
# :status, :unknown, :wait, :max, and :earlier/:since: the earlier attempt's delivery id and time to give back).
SETTLED = (
    "sent_at = CASE WHEN :status = 'sent' THEN now() ELSE sent_at END, "
    "delivery_id = coalesce(CAST(:earlier AS uuid), delivery_id), "
    "claimed_at = CASE WHEN :earlier IS NULL THEN claimed_at ELSE :since END, "
    "outcome_unknown = CASE WHEN :status = 'pending' THEN :unknown OR :earlier IS NOT NULL ELSE false END, "
    "next_attempt_at = CASE WHEN :status = 'pending' THEN now() + CAST(:wait AS interval) END, "
    "status = CASE WHEN :status = 'pending' AND attempts >= :max THEN 'failed' ELSE :status END"
)


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
    analysis's as outbox.detections gives them: announced once, like a load change, so a deploy whose only news they
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


# The radar.alert rows (alias a) of what an intended label (:label) closes: the verdicts it stands for
# (radar.intended_verdict) and the periodic episodes it closed (their opening analysis's rows).
LABELLED_ALERTS = (
    "(SELECT a.* FROM radar.alert a JOIN ("
    "  SELECT deploy_id, target, dbid, userid, queryid, toplevel FROM radar.intended_verdict WHERE label_id = :label "
    "  UNION SELECT opened_by, target, dbid, userid, queryid, toplevel FROM radar.regression_episode "
    "  WHERE intended_label = :label"
    ") s USING (deploy_id, target, dbid, userid, queryid, toplevel))"
)
INTENDED_UNSENT = "labelled intended before it was sent: not sent"


def skip_labelled(conn: sa.Connection, label_id: int) -> int:
    """Skip the alerts of what an intended label closes that are still waiting for their first or next attempt (it
    is no news: the team said they meant it); returns how many. One an earlier attempt may have delivered keeps its
    remote id, so what it may have opened is still resolved."""
    return conn.execute(
        sa.text(
            f"UPDATE radar.alert x SET status = 'skipped', last_error = :why, next_attempt_at = NULL "
            f"FROM {LABELLED_ALERTS} a WHERE x.deploy_id = a.deploy_id AND x.target = a.target "
            "AND x.channel = a.channel AND x.dbid = a.dbid AND x.userid = a.userid AND x.queryid = a.queryid "
            "AND x.toplevel = a.toplevel AND x.status = 'pending'"
        ),
        {"label": label_id, "why": INTENDED_UNSENT},
    ).rowcount


def message_keys(conn: sa.Connection, analysis_id: str, channel: str, ts: str) -> tuple[str | None, list[Key]]:
    """The channel id a Slack message went to (None when not recorded: the channel as configured is used) and the
    statement keys it carried, from the analysis's radar.alert rows with that message ts."""
    rows = conn.execute(
        sa.text(
            f"SELECT message_channel, {', '.join(KEY)} FROM radar.alert WHERE deploy_id = :d AND channel = :c "
            "AND message_ts = :ts ORDER BY target, dbid, userid, queryid, toplevel"
        ),
        {"d": analysis_id, "c": channel, "ts": ts},
    ).fetchall()
    ids = [r.message_channel for r in rows if r.message_channel]
    return (ids[0] if ids else None), [statement_key([getattr(r, k) for k in KEY]) for r in rows]


def lock(conn: sa.Connection, analysis_id: str) -> None:
    """Serialise claiming the analysis's alerts for this transaction (held for a claim only, never while sending)."""
    conn.execute(sa.text("SELECT pg_advisory_xact_lock(hashtextextended('radar.alert:' || :d, 0))"), {"d": analysis_id})


def enqueue(
    conn: sa.Connection,
    analysis_id: str,
    target: str,
    keys: list[Key],
    channel: str,
    status: str = "pending",
    note: str | None = None,
) -> None:
    """Add a row for each regression not yet in the outbox for this channel: pending, or withheld with a note."""
    if not keys:
        return
    conn.execute(
        sa.text(
            "INSERT INTO radar.alert (deploy_id, target, dbid, userid, queryid, toplevel, channel, status, last_error) "
            "VALUES (:d, :t, :dbid, :userid, :queryid, :toplevel, :c, :s, :n) ON CONFLICT DO NOTHING"
        ),
        [
            {"d": analysis_id, "t": target, **dict(zip(KEY, k, strict=True)), "c": channel, "s": status, "n": note}
            for k in keys
        ],
    )


@dataclass(frozen=True)
class Claim:
    """The rows one attempt took: their keys, its delivery id, and the earlier attempts that may have posted them
    (delivery id → when claimed), to look for before sending again."""

    keys: list[Key]
    delivery_id: str
    attempt: int  # the highest attempt number among the rows, this one included
    earlier: dict[Key, str]  # rows whose earlier attempt may have posted them → that attempt's delivery id
    since: datetime | None  # when the oldest of those earlier attempts began


def claim(conn: sa.Connection, analysis_id: str, target: str, channel: str, lease: timedelta) -> Claim:
    """Take the analysis's rows that are due on this channel: pending past their backoff, or left `sending` longer
    than `lease` (a run that stopped mid-send). They become `sending` under a new delivery id, one more attempt
    each. The caller commits this before sending anything, under `lock`."""
    delivery_id = str(uuid.uuid4())
    conn.execute(
        sa.text(
            "UPDATE radar.alert SET status = 'failed', last_error = 'stopped while sending, out of attempts: it may "
            "have been posted' WHERE deploy_id = :d AND target = :t AND channel = :c AND status = 'sending' "
            "AND claimed_at < now() - :lease AND attempts >= :max"
        ),
        {"d": analysis_id, "t": target, "c": channel, "lease": lease, "max": MAX_ATTEMPTS},
    )
    rows = conn.execute(
        sa.text(
            f"WITH due AS (SELECT {', '.join(KEY)}, delivery_id, claimed_at, "
            "  (status = 'sending' OR outcome_unknown) AS unknown FROM radar.alert "
            "  WHERE deploy_id = :d AND target = :t AND channel = :c AND attempts < :max AND ("
            "    (status = 'pending' AND coalesce(next_attempt_at, '-infinity') <= now()) "
            "    OR (status = 'sending' AND claimed_at < now() - :lease)) FOR UPDATE) "
            "UPDATE radar.alert a SET status = 'sending', claimed_at = now(), attempts = a.attempts + 1, "
            "  delivery_id = CAST(:id AS uuid), outcome_unknown = due.unknown "
            "FROM due WHERE a.deploy_id = :d AND a.target = :t AND a.channel = :c "
            + " ".join(f"AND a.{k} = due.{k}" for k in KEY)
            + f" RETURNING {', '.join('a.' + k for k in KEY)}, a.attempts, due.delivery_id, due.claimed_at, due.unknown"
        ),
        {"d": analysis_id, "t": target, "c": channel, "lease": lease, "id": delivery_id, "max": MAX_ATTEMPTS},
    ).fetchall()
    uncertain = [r for r in rows if r.unknown and r.delivery_id is not None and r.claimed_at is not None]
    return Claim(
        keys=[statement_key(r) for r in rows],
        delivery_id=delivery_id,
        attempt=max((int(r.attempts) for r in rows), default=0),
        earlier={statement_key(r): str(r.delivery_id) for r in uncertain},
        since=min((r.claimed_at for r in uncertain), default=None),
    )


def settle(
    conn: sa.Connection,
    analysis_id: str,
    target: str,
    channel: str,
    keys: list[Key],
    delivery_id: str,
    status: str,
    ts: str | None = None,
    error: str | None = None,
    unknown: bool = False,
    wait: timedelta | None = None,
    earlier: Claim | None = None,
    remote_id: str | None = None,
    message_channel: str | None = None,
) -> None:
    """Record how an attempt on these claimed rows ended: sent (with Slack's message ts and the channel id it went to,
    or another channel's
    `remote_id`), skipped, withheld, failed, or pending again (retryable: no new attempt before `wait` has passed;
    `unknown`: it may have been posted). A retryable failure after MAX_ATTEMPTS attempts is final (failed). Only rows
    still claimed by `delivery_id` are touched: an attempt that overran its lease cannot overwrite what a newer
    attempt recorded. With `earlier` (this attempt's claim, when it sent nothing), the rows an earlier attempt may
    have posted get that attempt's delivery id and time back, so the next attempt still looks for its message, and
    the others lose the remote id recorded before sending (expect_remote: nothing of theirs can be on the channel)."""
    if not keys:
        return
    restore = earlier.earlier if earlier is not None else {}
    conn.execute(
        sa.text(
            "UPDATE radar.alert SET last_error = :error, message_ts = coalesce(:ts, message_ts), "
            "message_channel = coalesce(:message_channel, message_channel), "
            "remote_id = CASE WHEN :clear THEN NULL ELSE coalesce(:remote, remote_id) END, "
            f"{SETTLED} "
            "WHERE deploy_id = :d AND target = :t AND channel = :c AND dbid = :dbid AND userid = :userid "
            "AND queryid = :queryid AND toplevel = :toplevel AND delivery_id = CAST(:claim AS uuid)"
        ),
        [
            {
                "d": analysis_id,
                "t": target,
                "c": channel,
                **dict(zip(KEY, k, strict=True)),
                "claim": delivery_id,
                "status": status,
                "ts": ts,
                "message_channel": message_channel,
                "remote": remote_id,
                "error": error,
                "unknown": unknown,
                "wait": wait or timedelta(0),
                "max": MAX_ATTEMPTS,
                "earlier": restore.get(k),
                "since": earlier.since if earlier is not None else None,
                "clear": earlier is not None and k not in restore,
            }
            for k in keys
        ],
    )


def expect_remote(
    conn: sa.Connection, analysis_id: str, target: str, channel: str, delivery_id: str, remote: dict[Key, str]
) -> None:
    """Record, on rows claimed by `delivery_id` before they are sent, the remote id their request will have (a
    PagerDuty dedup_key): from then on what they may have made on the channel can be closed (a resolve), whatever
    the row's end; settle clears it when an attempt surely made nothing."""
    if not remote:
        return
    conn.execute(
        sa.text(
            "UPDATE radar.alert SET remote_id = :r WHERE deploy_id = :d AND target = :t AND channel = :c "
            "AND dbid = :dbid AND userid = :userid AND queryid = :queryid AND toplevel = :toplevel "
            "AND delivery_id = CAST(:claim AS uuid)"
        ),
        [
            {
                "d": analysis_id,
                "t": target,
                "c": channel,
                **dict(zip(KEY, k, strict=True)),
                "claim": delivery_id,
                "r": r,
            }
            for k, r in remote.items()
        ],
    )


def withhold_waiting(conn: sa.Connection, analysis_id: str, note: str) -> int:
    """Withhold the analysis's alerts still waiting to be sent (too old to be news); returns how many."""
    return conn.execute(
        sa.text(
            "UPDATE radar.alert SET status = 'withheld', last_error = :n, outcome_unknown = false "
            "WHERE deploy_id = :d AND status = 'pending'"
        ),
        {"d": analysis_id, "n": note},
    ).rowcount


def statuses(conn: sa.Connection, analysis_id: str) -> dict[str, int]:
    """How many of the analysis's alerts are in each status."""
    rows = conn.execute(
        sa.text("SELECT status, count(*) FROM radar.alert WHERE deploy_id = :d GROUP BY status"), {"d": analysis_id}
    )
    return {r[0]: int(r[1]) for r in rows}
