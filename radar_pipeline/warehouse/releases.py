"""Releases in the warehouse: which deploys make one (explicit or inferred), their stored evidence, the looks at a
complete release, the later looks that are due, and the fleet verdicts (radar.release_verdict, radar.release_look;
sql/0029, sql/0033, docs/fleets.md).

A release is the deploys that share radar.deploy_event.release_id (`radar deploy --release`). Deploys without one
that name the same service and version are inferred to be one release when they begin within INFER_SPAN of the
first of them: in deploy time order, a deploy more than INFER_SPAN after the current group's first starts a new
group. An explicit release id always wins: a deploy that carries one is never part of an inferred release. An
inferred release is named INFERRED_PREFIX + the deploy id of its first deploy.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

import pandas as pd
import sqlalchemy as sa

from radar_pipeline.config.queries import sql_text
from radar_pipeline.engine.frames import RELEASE_STORED

# defined beside the deploy event, which refuses it as a recorded release id
from radar_pipeline.warehouse.deploys import INFERRED_PREFIX as INFERRED_PREFIX

INFER_SPAN = timedelta(hours=1)
EVENT_COLUMNS = "deploy_id, target, deployed_at, service, version, release_id"


class ReleaseError(ValueError):
    """A release that cannot be decided jointly: unknown, or deployed to fewer than two targets."""


@dataclass(frozen=True)
class Release:
    """A release: its id, whether the id was recorded (not inferred), and its member deploys (deploy_id, target,
    deployed_at, service, version, analysed, analysed_at), one per target: a target deployed twice in the release
    counts by its latest deploy."""

    release_id: str
    explicit: bool
    members: pd.DataFrame
    first_anchor: str | None = None  # the earliest member of its first final decision (filed_anchor), once it has one

    @property
    def targets(self) -> list[str]:
        """The release's targets, sorted."""
        return sorted(self.members["target"])

    @property
    def complete(self) -> bool:
        """Whether every member deploy has been analysed."""
        return bool(self.members["analysed"].all())

    @property
    def anchor(self) -> str:
        """The member deploy the release's alerts are filed under in radar.outbox: the earliest member of its first
        final decision, which no later member or redeploy moves (a fleet detection is alerted once, whatever members
        come later); before it has one, its earliest member deploy."""
        if self.first_anchor is not None:
            return self.first_anchor
        first = self.members.sort_values(["deployed_at", "deploy_id"]).iloc[0]
        return str(first["deploy_id"])


def release_of_deploy(conn: sa.Connection, deploy_id: str) -> str | None:
    """The release a deploy belongs to: its recorded release id, or the inferred one (module docstring); None when
    it has neither, or its inferred group holds it alone."""
    row = conn.execute(
        sa.text(f"SELECT {EVENT_COLUMNS} FROM radar.deploy_event WHERE deploy_id = :d"), {"d": deploy_id}
    ).first()
    if row is None:
        return None
    if row.release_id is not None:
        return str(row.release_id)
    if row.service is None or row.version is None:
        return None
    for group in _inferred_groups(conn, row.service, row.version):
        if deploy_id in group:
            return INFERRED_PREFIX + group[0] if len(group) > 1 else None
    return None


def _inferred_groups(conn: sa.Connection, service: str, version: str) -> list[list[str]]:
    """The deploys without a release id of this service and version, in deploy time order, cut into groups that
    each begin within INFER_SPAN of their first deploy."""
    rows = conn.execute(
        sa.text(
            "SELECT deploy_id, deployed_at FROM radar.deploy_event WHERE release_id IS NULL AND service = :s "
            "AND version = :v ORDER BY deployed_at, deploy_id"
        ),
        {"s": service, "v": version},
    ).fetchall()
    groups: list[list[str]] = []
    start: datetime | None = None
    for r in rows:
        if start is None or r.deployed_at - start > INFER_SPAN:
            groups.append([])
            start = r.deployed_at
        groups[-1].append(str(r.deploy_id))
    return groups


def release(conn: sa.Connection, release_id: str) -> Release:
    """The release's member deploys (one per target, the latest) and whether each has been analysed; a
    ReleaseError naming the id when no deploy makes it."""
    explicit = not release_id.startswith(INFERRED_PREFIX)
    if explicit:
        ids = [
            str(r[0])
            for r in conn.execute(
                sa.text("SELECT deploy_id FROM radar.deploy_event WHERE release_id = :r"), {"r": release_id}
            )
        ]
    else:
        first = release_id.removeprefix(INFERRED_PREFIX)
        ids = []
        row = conn.execute(
            sa.text("SELECT service, version, release_id FROM radar.deploy_event WHERE deploy_id = :d"), {"d": first}
        ).first()
        if row is not None and row.release_id is None and row.service is not None and row.version is not None:
            ids = next((g for g in _inferred_groups(conn, row.service, row.version) if g[0] == first), [])
    if not ids:
        raise ReleaseError(
            f"unknown release {release_id!r}: no deploy carries it (radar deploy --release), and no inferred "
            f"release ({INFERRED_PREFIX}<first deploy id>) of that name exists"
        )
    members = pd.read_sql(
        sql_text("warehouse.release_members"),
        conn,
        params={"ids": ids},
    )
    return Release(release_id, explicit, members, filed_anchor(conn, release_id))


def filed_anchor(conn: sa.Connection, release_id: str) -> str | None:
    """The earliest (by deployed_at, deploy_id) member deploy of the release's first final decision
    (radar.release_look's lowest look done: a row never rewritten once done),
    or None when it has none (or its deploys are gone)."""
    found = conn.execute(
        sa.text(
            "SELECT e.deploy_id FROM (SELECT member_deploys FROM radar.release_look WHERE release_id = :r "
            "AND status = 'done' ORDER BY look LIMIT 1) l CROSS JOIN unnest(l.member_deploys) AS m(deploy_id) "
            "JOIN radar.deploy_event e ON e.deploy_id = m.deploy_id ORDER BY e.deployed_at, e.deploy_id LIMIT 1"
        ),
        {"r": release_id},
    ).scalar_one_or_none()
    return None if found is None else str(found)


def member_evidence(conn: sa.Connection, members: pd.DataFrame) -> pd.DataFrame:
    """The stored evidence of the analysed member deploys' first looks: per deploy and statement key (fingerprint,
    toplevel), the busiest of its statements with that key (most calls over both sides; dbid and userid differ
    between servers): deploy_id, target, fingerprint, toplevel, dbid, userid, queryid, log_factor, se, time_before
    (ms), busy (calls over both sides). Only the first looks' rows (radar.verdict.look = 0): a statement whose row a
    member's own later look replaced is read again from its counters over its first look's spans
    (steps.releases.decide_release, with replaced_statements), so the fleet verdict rests on every member's first
    look (docs/fleets.md)."""
    analysed = members[members["analysed"]]
    if analysed.empty:
        return pd.DataFrame(
            columns=[
                "deploy_id",
                "target",
                "fingerprint",
                "toplevel",
                "dbid",
                "userid",
                "queryid",
                "log_factor",
                "se",
                "time_before",
                "busy",
            ]
        )
    return pd.read_sql(
        sql_text("warehouse.member_evidence"),
        conn,
        params={"d": list(analysed["deploy_id"]), "t": list(analysed["target"])},
    )


def replaced_statements(conn: sa.Connection, deploy_id: str, target: str) -> pd.DataFrame:
    """The member deploy's statements (KEY columns: dbid, userid, queryid, toplevel) whose first look's verdict row a
    later look of its own replaced (radar.verdict.look > 0)."""
    return pd.read_sql(
        sa.text(
            "SELECT CAST(dbid AS bigint) AS dbid, CAST(userid AS bigint) AS userid, queryid, toplevel "
            "FROM radar.verdict WHERE deploy_id = :d AND target = :t AND look > 0"
        ),
        conn,
        params={"d": deploy_id, "t": target},
    )


def lock(conn: sa.Connection, release_id: str) -> None:
    """Serialise the decisions of one release for this transaction (its members' runs may finish together)."""
    conn.execute(
        sa.text("SELECT pg_advisory_xact_lock(hashtextextended('radar.release:' || :r, 0))"), {"r": release_id}
    )


@dataclass(frozen=True)
class Look:
    """A final decision of a release: its look, the basis it rested on (the member deploys, sorted, and each one's
    analysed_at) and its kind (BASIS: on the members' first looks; TIMED: a later look on their counters)."""

    look: int
    basis: tuple[tuple[str, datetime], ...]
    kind: str = "basis"


BASIS, TIMED = "basis", "timed"


def basis_of(members: pd.DataFrame) -> tuple[tuple[str, datetime], ...]:
    """A complete release's basis: its member deploys, sorted, with each one's analysed_at."""
    pairs = zip(members["deploy_id"], members["analysed_at"], strict=True)
    return tuple(sorted((str(d), pd.Timestamp(a).to_pydatetime()) for d, a in pairs))


def last_look(conn: sa.Connection, release_id: str) -> Look | None:
    """The release's latest final decision (a look done, not one that failed), or None when it has had none."""
    row = conn.execute(
        sa.text(
            "SELECT look, member_deploys, member_analysed_at, kind FROM radar.release_look WHERE release_id = :r "
            "AND status = 'done' ORDER BY look DESC LIMIT 1"
        ),
        {"r": release_id},
    ).first()
    if row is None:
        return None
    stamps = row.member_analysed_at or []  # none stored by the migration's first text: never equal to a basis
    return Look(int(row.look), tuple(zip(row.member_deploys, stamps, strict=False)) if stamps else (), row.kind)


def looks_taken(conn: sa.Connection, release_id: str, retrying: int | None = None) -> int:
    """The release's highest look recorded, done or failed (-1: none): a look's number, and with it its share of B,
    is never spent twice. `retrying`: a look whose failed attempt does not count (its retry may take it)."""
    found = conn.execute(
        sa.text(
            "SELECT max(look) FROM radar.release_look WHERE release_id = :r "
            "AND NOT (look = :retry AND status = 'failed')"
        ),
        {"r": release_id, "retry": -1 if retrying is None else retrying},
    ).scalar_one()
    return -1 if found is None else int(found)


def record_look(
    conn: sa.Connection,
    release_id: str,
    basis: tuple[tuple[str, datetime], ...],
    look: int | None = None,
    kind: str = BASIS,
    counts: dict[str, object] | None = None,
) -> int:
    """Record a final decision of the release on this basis, in the caller's transaction, and return its look: the
    next number after every look recorded (look 0 for its first) unless `look` is given (a timed look, which may
    replace only a failed attempt at that look). counts: opened, detected, cleared, after_span, run_id."""
    look = looks_taken(conn, release_id) + 1 if look is None else look
    extra = {"opened": None, "detected": None, "cleared": None, "after_span": None, "run_id": None, **(counts or {})}
    written = conn.execute(
        sql_text("warehouse.record_release_look"),
        {"r": release_id, "l": look, "m": [d for d, _ in basis], "a": [a for _, a in basis], "kind": kind, **extra},
    )
    if not written.rowcount:
        raise ReleaseError(f"release {release_id!r} already spent look {look}")
    return look


def record_failed(
    conn: sa.Connection, release_id: str, look: int, basis: tuple[tuple[str, datetime], ...], run_id: str | None
) -> bool:
    """Record that timed look `look` of the release failed (after its retries), so it is due no more: its share of B
    is left unspent. A look already done is left as it is. Whether a row was written."""
    written = conn.execute(
        sa.text(
            "INSERT INTO radar.release_look (release_id, look, member_deploys, member_analysed_at, kind, status, "
            "run_id) VALUES (:r, :l, :m, :a, 'timed', 'failed', :run) ON CONFLICT (release_id, look) DO UPDATE SET "
            "run_id = EXCLUDED.run_id, decided_at = now() WHERE radar.release_look.status = 'failed'"
        ),
        {"r": release_id, "l": look, "m": [d for d, _ in basis], "a": [a for _, a in basis], "run": run_id},
    )
    return bool(written.rowcount)


def analysis_runs(conn: sa.Connection, deploy_ids: list[str]) -> tuple[str, ...]:
    """The runs that made these deploys' current analyses (radar.analysis.run_id; those not recorded left out)."""
    rows = conn.execute(
        sa.text("SELECT run_id FROM radar.analysis WHERE deploy_id = ANY(:d) AND run_id IS NOT NULL"),
        {"d": deploy_ids},
    )
    return tuple(sorted({str(r[0]) for r in rows}))


def member_statements(conn: sa.Connection, deploy_id: str, target: str, keys: list[tuple[int, bool]]) -> pd.DataFrame:
    """The member deploy's statements (KEY columns: dbid, userid, queryid, toplevel) whose statement key
    (fingerprint, toplevel) is among `keys`, from its verdict rows (whatever their look)."""
    return pd.read_sql(
        sa.text(
            "SELECT DISTINCT CAST(v.dbid AS bigint) AS dbid, CAST(v.userid AS bigint) AS userid, v.queryid, "
            "v.toplevel FROM radar.verdict v JOIN unnest(CAST(:f AS bigint[]), CAST(:l AS boolean[])) AS k(fp, top) "
            "ON v.fingerprint = k.fp AND v.toplevel = k.top WHERE v.deploy_id = :d AND v.target = :t"
        ),
        conn,
        params={"d": deploy_id, "t": target, "f": [int(f) for f, _ in keys], "l": [bool(t) for _, t in keys]},
    )


@dataclass(frozen=True)
class DueReleaseLook:
    """A timed look of a release to run: the release, the look, the basis it continues (its last final decision's
    member analyses: the run key names it), when it fell due, and the runs of the members' current analyses."""

    release_id: str
    look: int
    basis: tuple[tuple[str, datetime], ...]
    due_at: datetime
    run_ids: tuple[str, ...] = ()  # the runs that made the members' current analyses (where recorded)
    waited: timedelta = timedelta(0)  # since it fell due, or since the decision it continues when later


def candidate_releases(conn: sa.Connection, since: datetime, limit: int) -> pd.DataFrame:
    """The releases whose last look (done or failed) is before the schedule's last, last decided at or after
    `since`, with a key still open at the fleet level (a final verdict, inconclusive, with a share of the family):
    release_id, looks_taken, the last done look and its basis; the longest decided first (the likeliest due)."""
    from radar_pipeline.engine.budget import LOOK_SPANS

    return pd.read_sql(
        sql_text("warehouse.candidate_releases"),
        conn,
        params={"last": len(LOOK_SPANS) - 1, "since": since, "limit": limit},
    )


# radar.release_verdict's columns: the release's, then a stored fleet verdict's (engine.frames.RELEASE_STORED) but
# the key, which is stored split (fingerprint, toplevel).
STORED = ["release_id", *(c for c in RELEASE_STORED.names if c != "key")]


def write_release_verdicts(conn: sa.Connection, release_id: str, rows: pd.DataFrame) -> None:
    """Replace the release's fleet verdicts with `rows` (STORED columns but release_id), in the caller's
    transaction."""
    conn.execute(sa.text("DELETE FROM radar.release_verdict WHERE release_id = :r"), {"r": release_id})
    if rows.empty:
        return
    columns = [c for c in STORED if c != "release_id"]
    records = [
        {"release_id": release_id, **{c: _plain(v) for c, v in zip(columns, r, strict=True)}}
        for r in rows[columns].itertuples(index=False, name=None)
    ]
    conn.execute(
        sa.text(
            f"INSERT INTO radar.release_verdict ({', '.join(STORED)}) VALUES ({', '.join(':' + c for c in STORED)})"
        ),
        records,
    )


def _plain(value: object) -> object:
    """A numpy scalar as the driver takes it (a missing interval as NULL)."""
    if value is pd.NaT:
        return None
    item = getattr(value, "item", None)
    return item() if callable(item) and not isinstance(value, list | str) else value


def release_verdicts(conn: sa.Connection, release_id: str) -> pd.DataFrame:
    """The release's stored fleet verdicts, detections first, with an example member's statement text (query)."""
    return pd.read_sql(
        sql_text("warehouse.release_verdicts"),
        conn,
        params={"r": release_id},
    )
