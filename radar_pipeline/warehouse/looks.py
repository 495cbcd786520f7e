"""Reads and writes of a deploy's later looks (sql/0028, steps/looks.py): the statements still open, the looks run
(radar.deploy_look), the verdict rows a look replaces, and the looks that are due."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from radar_pipeline.config.queries import sql_text
from radar_pipeline.engine.budget import LOOK_SPANS
from radar_pipeline.pgss_model import KEY, statement_keys
from radar_pipeline.warehouse.analysis import VERDICT_COLUMNS
from radar_pipeline.warehouse.database import KEYS, copy_frame, key_params

if TYPE_CHECKING:
    import pandas as pd

OPEN_SQL = "('inconclusive', 'insufficient_data')"
# Looks are news: a deploy whose last look fell due more than this long ago (one analysed late, a backfill over old
# deploys) gets none, so a backfill of a thousand deploys does not start a thousand looks.
HORIZON = timedelta(days=1)
# A look's run that ends without recording the look (terminated, killed for memory, its process lost: no failure
# handler ran) leaves the look due; its sensor asks for it again under the next attempt's run key (Dagster skips a
# run key it has seen). Attempt k is asked for from RETRY_BASE · (2^k − 1) after the look fell due (0, 5, 15, 35 min)
# and there are LOOK_ATTEMPTS of them at most: a look that crashes every time is then asked for no more (its share of
# the budget is left unspent; the next look, when due, overtakes it).
RETRY_BASE = timedelta(minutes=5)
LOOK_ATTEMPTS = 4


def look_attempt(waited: timedelta) -> int | None:
    """The attempt of a look that fell due `waited` ago (RETRY_BASE's schedule), or None past the last one."""
    k = 0
    while RETRY_BASE * (2 ** (k + 1) - 1) <= waited:
        k += 1
    return k if k < LOOK_ATTEMPTS else None


# The window W an analysis (alias a) used: its stored settings' (seconds), else the :window given.
WINDOW = "coalesce(CAST(a.settings ->> 'window' AS double precision) * interval '1 second', :window)"
# The first engine whose first verdict spends only the first look's budget (look_budget(B, 0)): an earlier one spent
# the whole B at look 0, and a later look would spend more than B.
FIRST_LOOK_ENGINE = (2, 6)
# The engine's (major, minor) an analysis (alias a) was made with; NULL where its version does not read as one.
ENGINE_RELEASE = "CAST(string_to_array(substring(a.engine_version FROM '^[0-9]+[.][0-9]+'), '.') AS int[])"
# The first look is the deploy's analysis (radar.analysis); its verdict rows carry look 0.
LOOK_COLUMNS = [*VERDICT_COLUMNS, "look", "look_end", "first_exec_ms"]
# A group of the deploy (alias f) still undecided (sql/0034: steps/groups.later_look tests it again at each look).
GROUP_OPEN = (
    "EXISTS (SELECT 1 FROM radar.group_verdict g WHERE g.deploy_id = f.deploy_id AND g.target = f.target "
    "GROUP BY g.group_id HAVING NOT bool_or(g.verdict IN ('detected', 'no_regression')))"
)


def first_analysis(conn: sa.Connection, deploy_id: str) -> tuple[datetime, dict[str, Any], str] | None:
    """When the deploy's first verdict was stored (its radar.analysis row), the engine settings and the engine
    version it used, or None before it."""
    row = conn.execute(
        sa.text(
            "SELECT analysed_at, settings, engine_version FROM radar.analysis WHERE deploy_id = :d "
            "ORDER BY analysed_at DESC"
        ),
        {"d": deploy_id},
    ).first()
    return None if row is None else (row[0], dict(row[1]), str(row[2]))


def spends_first_look_only(engine_version: str) -> bool:
    """Whether a first verdict by this engine spent only the first look's budget (FIRST_LOOK_ENGINE or later), so
    later looks may spend the rest: as ENGINE_RELEASE reads it in SQL."""
    found = re.match(r"([0-9]+)[.]([0-9]+)", engine_version)
    return found is not None and (int(found[1]), int(found[2])) >= FIRST_LOOK_ENGINE


def neighbour_deploys(conn: sa.Connection, target: str, at: datetime) -> tuple[datetime | None, datetime | None]:
    """The target's deploys just before and just after `at` (None where there is none)."""
    row = conn.execute(
        sa.text(
            "SELECT (SELECT max(deployed_at) FROM radar.deploy_event WHERE target = :t AND deployed_at < :at), "
            "(SELECT min(deployed_at) FROM radar.deploy_event WHERE target = :t AND deployed_at > :at)"
        ),
        {"t": target, "at": at},
    ).one()
    return row[0], row[1]


def open_verdicts(conn: sa.Connection, deploy_id: str) -> pd.DataFrame:
    """The deploy's statements still open (inconclusive or insufficient_data): target, KEY and verdict."""
    import pandas as pd

    return pd.read_sql(
        sa.text(
            f"SELECT target, {', '.join(KEY)}, verdict FROM radar.verdict "
            f"WHERE deploy_id = :d AND verdict IN {OPEN_SQL} ORDER BY {', '.join(KEY)}"
        ),
        conn,
        params={"d": deploy_id},
    )


def lock(conn: sa.Connection, deploy_id: str) -> None:
    """Serialise the deploy's looks for this transaction."""
    conn.execute(sa.text("SELECT pg_advisory_xact_lock(hashtextextended('radar.look:' || :d, 0))"), {"d": deploy_id})


def basis_holds(conn: sa.Connection, deploy_id: str, basis: datetime) -> bool:
    """Whether the deploy's first verdict is still the one stored at `basis`, held so for this transaction: its
    radar.analysis row is locked FOR SHARE, so a re-analysis (which updates that row before it replaces the verdict
    rows) waits for the caller's commit, and one that committed first is seen."""
    stored = conn.execute(
        sa.text("SELECT analysed_at FROM radar.analysis WHERE deploy_id = :d ORDER BY analysed_at DESC FOR SHARE"),
        {"d": deploy_id},
    ).first()
    return stored is not None and stored[0] == basis


def replace_open(
    conn: sa.Connection, deploy_id: str, target: str, decided: pd.DataFrame, look: int, look_end: datetime
) -> pd.DataFrame:
    """Replace the verdict rows of the statements `decided` (ANALYSED_VERDICTS rows) decides, in the caller's
    transaction, where the stored row is still open: a decided verdict is never changed. Each new row says its look
    and look_end and keeps the first look's execution time after the deploy (first_exec_ms). Returns the rows
    written."""
    if decided.empty:
        return decided
    removed = conn.execute(
        sa.text(
            "DELETE FROM radar.verdict v USING "
            f"{KEYS} AS k(dbid, userid, queryid, toplevel) "
            "WHERE v.deploy_id = :d AND v.target = :t AND v.dbid = k.dbid AND v.userid = k.userid "
            f"AND v.queryid = k.queryid AND v.toplevel = k.toplevel AND v.verdict IN {OPEN_SQL} "
            "RETURNING v.dbid, v.userid, v.queryid, v.toplevel, coalesce(v.first_exec_ms, "
            "CASE WHEN v.calls_after > 0 THEN v.calls_after * v.mean_after_ms ELSE 0 END), v.group_regressed"
        ),
        {"d": deploy_id, "t": target, **key_params(statement_keys(decided))},
    ).fetchall()
    first = {(int(r[0]), int(r[1]), int(r[2]), bool(r[3])): r[4] for r in removed}
    marked = {(int(r[0]), int(r[1]), int(r[2]), bool(r[3])): r[5] for r in removed}
    keys = statement_keys(decided)
    kept = decided[[k in first for k in keys]].copy()
    kept["deploy_id"], kept["target"] = deploy_id, target
    kept["look"] = look
    kept["look_end"] = look_end
    kept["first_exec_ms"] = [first[k] for k in keys if k in first]
    # A member's mark of a group that regressed stays with the statement when a look replaces its row (a later
    # look's own group detections are marked after, steps/groups.LaterGroups.store).
    kept["group_regressed"] = [marked[k] for k in keys if k in first]
    if len(kept):
        copy_frame(conn, "radar.verdict", LOOK_COLUMNS, kept)
    return kept


def record_look(
    conn: sa.Connection,
    deploy_id: str,
    target: str,
    look: int,
    status: str,
    span: Any,
    basis: datetime,
    opened: int,
    written: pd.DataFrame,
    run_id: str | None,
) -> None:
    """Record (or record again) look `look` of the deploy on the target: its status, window, budget and counts."""
    from radar_pipeline.engine import Verdict

    at = conn.execute(sa.text("SELECT deployed_at FROM radar.deploy_event WHERE deploy_id = :d"), {"d": deploy_id})
    deployed_at = at.scalar_one()
    verdicts = written["verdict"] if len(written) else None
    conn.execute(
        sql_text("warehouse.record_deploy_look"),
        {
            "d": deploy_id,
            "t": target,
            "k": look,
            "basis": basis,
            "status": status,
            "lo": deployed_at - span.before if span is not None else None,
            "hi": deployed_at + span.after if span is not None else None,
            "budget": span.budget if span is not None else None,
            "opened": opened,
            "detected": int((verdicts == Verdict.DETECTED).sum()) if verdicts is not None else 0,
            "cleared": int((verdicts == Verdict.NO_REGRESSION).sum()) if verdicts is not None else 0,
            "run": run_id,
        },
    )


def looks_of(conn: sa.Connection, deploy_id: str) -> pd.DataFrame:
    """The deploy's looks run on its current first verdict, in order."""
    import pandas as pd

    return pd.read_sql(
        sql_text("warehouse.looks_of"),
        conn,
        params={"d": deploy_id},
    )


@dataclass(frozen=True)
class DueLook:
    """A look to run: the deploy, its target, the look, the first verdict it continues (its analysed_at) and the run
    that made that verdict (None where not recorded); `rerun` when the deploy had looks on an earlier first verdict,
    which a re-analysis replaced."""

    deploy_id: str
    target: str
    look: int
    basis: datetime
    rerun: bool = False
    run_id: str | None = None
    waited: timedelta = timedelta(0)  # since it fell due (or its first verdict was stored, when later): look_attempt


def due_looks(conn: sa.Connection, window: timedelta, settle: timedelta, limit: int = 200) -> list[DueLook]:
    """The looks due now by the warehouse's clock: of each analysed deploy with a statement or a group (GROUP_OPEN)
    still open whose first verdict spent only the first look's budget (engine FIRST_LOOK_ENGINE or later), a look
    not yet run (nor failed) on its current first verdict whose after side (LOOK_SPANS[k] · W) plus `settle` has
    passed, or which the target's next deploy has cut (the look then runs on the after side up to that deploy, or
    records that it saw nothing new).

    Which look: the latest due. A look overtaken by a later one that is due (the sensor was stopped, a run lost) is
    skipped: its share of the budget is left unspent, which keeps the guarantee. A deploy whose last look ran, with
    nothing open, or whose last look fell due more than HORIZON ago, has none, unless a re-analysis less than HORIZON
    ago replaced a first verdict that had looks (and with it what those looks decided): its looks run again, in order
    from look 1 (each spends its own share, as the first time; a detection look 1 made is not left to look 3 alone),
    so the deploy's state does not lose a late detection; their alerts, too old, are withheld.

    In what order: the live deploys' looks first, the latest due first (a look whose run was lost must not hold back
    the ones that came due after it), then the re-runs. W is the window the first verdict used (its stored settings;
    `window` where they lack one). Only deploys deployed or analysed recently are read, and their looks probed."""
    rows = conn.execute(
        sa.text(
            f"WITH {_look_candidates('')}, "
            "chosen AS (SELECT DISTINCT ON (deploy_id, target) * FROM candidates WHERE due_at <= now() "
            "  ORDER BY deploy_id, target, CASE WHEN rerun THEN look ELSE -look END) "
            "SELECT deploy_id, target, look, analysed_at, rerun, run_id, now() - greatest(due_at, analysed_at) "
            "FROM chosen "
            "ORDER BY rerun, due_at DESC, deploy_id LIMIT :limit"
        ),
        {**_candidate_params(window, settle), "limit": limit},
    )
    return [DueLook(r[0], r[1], int(r[2]), r[3], bool(r[4]), r[5], r[6]) for r in rows]


def _look_candidates(deploy_filter: str) -> str:
    """The CTEs (ending in `candidates`) of the looks still to run of the recently analysed deploys with something
    open (due_looks' rule; `deploy_filter`, e.g. "AND a.deploy_id = :d", narrows them): per deploy and target, each
    look after the last one run on its current first verdict, with when it falls due (due_at)."""
    spans = ", ".join(str(s) for s in LOOK_SPANS)
    return (
        f"recent AS (SELECT a.deploy_id, a.target, a.analysed_at, a.run_id, d.deployed_at, {WINDOW} AS w "
        "  FROM radar.analysis a JOIN radar.deploy_event d ON d.deploy_id = a.deploy_id "
        f"  WHERE (d.deployed_at > now() - :horizon - {WINDOW} * :last_span OR a.analysed_at > now() - :horizon) "
        f"  AND {ENGINE_RELEASE} >= CAST(:engine AS int[]) {deploy_filter}), "
        "flagged AS (SELECT r.*, r.analysed_at > now() - :horizon AND EXISTS (SELECT 1 FROM radar.deploy_look o "
        "    WHERE o.deploy_id = r.deploy_id AND o.target = r.target AND o.basis < r.analysed_at) AS rerun "
        "  FROM recent r), "
        "analysed AS (SELECT f.*, "
        "  coalesce((SELECT max(k.look) FROM radar.deploy_look k WHERE k.deploy_id = f.deploy_id "
        "    AND k.target = f.target AND k.basis = f.analysed_at), 0) AS done, "
        "  (SELECT min(e.deployed_at) FROM radar.deploy_event e WHERE e.target = f.target "
        "    AND e.deployed_at > f.deployed_at) AS next_at "
        "  FROM flagged f WHERE (f.deployed_at > now() - :horizon - f.w * :last_span OR f.rerun) "
        "  AND (EXISTS (SELECT 1 FROM radar.verdict v WHERE v.deploy_id = f.deploy_id AND v.target = f.target "
        f"    AND v.verdict IN {OPEN_SQL}) OR {GROUP_OPEN})), "
        "candidates AS (SELECT x.deploy_id, x.target, x.analysed_at, x.run_id, x.rerun, n.look, "
        f"  least(x.deployed_at + x.w * (CAST(ARRAY[{spans}] AS int[]))[n.look + 1] + :settle, "
        "    x.next_at + :settle) AS due_at "
        f"  FROM analysed x CROSS JOIN generate_series(1, {len(LOOK_SPANS) - 1}) n(look) WHERE n.look > x.done)"
    )


def _candidate_params(window: timedelta, settle: timedelta) -> dict[str, Any]:
    return {
        "window": window,
        "settle": settle,
        "horizon": HORIZON,
        "last_span": LOOK_SPANS[-1],
        "engine": list(FIRST_LOOK_ENGINE),
    }


def next_look(conn: sa.Connection, deploy_id: str, window: timedelta, settle: timedelta) -> tuple[int, datetime] | None:
    """The deploy's next later look and when it falls due (due_looks' rule: the sensor requests it then), or None
    when none is to come: nothing is open, its last look has run, or it is too old for more."""
    row = conn.execute(
        sa.text(
            f"WITH {_look_candidates('AND a.deploy_id = :d')} "
            "SELECT look, due_at FROM candidates ORDER BY due_at, look LIMIT 1"
        ),
        {**_candidate_params(window, settle), "d": deploy_id},
    ).first()
    return (int(row[0]), row[1]) if row is not None else None


def record_failed(conn: sa.Connection, deploy_id: str, look: int, run_id: str | None) -> bool:
    """Record look `look` of the deploy's current first verdict as failed (after its retries), so it is due no
    more: its share of the budget is left unspent. A look already recorded on that verdict is left as it is. Whether
    a row was written."""
    written = conn.execute(
        sa.text(
            "INSERT INTO radar.deploy_look (deploy_id, target, look, basis, status, opened, run_id) "
            "SELECT a.deploy_id, a.target, :k, a.analysed_at, 'failed', (SELECT count(*) FROM radar.verdict v "
            f"  WHERE v.deploy_id = a.deploy_id AND v.target = a.target AND v.verdict IN {OPEN_SQL}), :run "
            "FROM radar.analysis a WHERE a.deploy_id = :d "
            "ON CONFLICT (deploy_id, target, look) DO UPDATE SET basis = EXCLUDED.basis, status = 'failed', "
            "before_start = NULL, after_end = NULL, budget = NULL, opened = EXCLUDED.opened, detected = 0, "
            "cleared = 0, ran_at = now(), run_id = EXCLUDED.run_id "
            "WHERE radar.deploy_look.basis <> EXCLUDED.basis OR radar.deploy_look.status = 'failed'"
        ),
        {"d": deploy_id, "k": look, "run": run_id},
    )
    return bool(written.rowcount)


def last_after(conn: sa.Connection, deploy_id: str, target: str, basis: datetime) -> datetime | None:
    """Where the after side of the deploy's last look run on this first verdict ended (None: only the first)."""
    return conn.execute(
        sa.text(
            "SELECT after_end FROM radar.deploy_look WHERE deploy_id = :d AND target = :t AND basis = :b "
            "AND status = 'done' ORDER BY look DESC LIMIT 1"
        ),
        {"d": deploy_id, "t": target, "b": basis},
    ).scalar_one_or_none()
