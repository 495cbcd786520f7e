"""What people say of verdicts (sql/0037, docs/labels.md): labels, append-only in radar.label, the latest one
standing beside the verdict; mutes of a target, a statement or a group until a time (radar.mute, radar.mute_end); and
the realised false-alert rate (radar.realised_false_alerts). A label or a mute never rewrites a verdict.

Every write checks its input first and raises LabelError naming the field that is wrong, in the caller's transaction:
nothing is stored on an error."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pandas as pd
import sqlalchemy as sa

from radar_pipeline.config.queries import sql_text
from radar_pipeline.pgss_model import KEY, Key, statement_key

LABELS = ("intended", "false_alarm", "fixed", "acknowledged")
SOURCES = ("cli", "receiver", "slack", "code_host")
MAX_NOTE = 2000
MAX_SHORT = 200  # who, an idempotency key, a group id: one line each

# A statement verdict (alias v) with its latest label (alias l) and the mute covering it when detected (alias mu).
VERDICT_LABEL_JOIN = (
    "LEFT JOIN radar.latest_label l ON l.kind = 'statement' AND l.deploy_id = v.deploy_id AND l.target = v.target "
    "AND l.dbid = v.dbid AND l.userid = v.userid AND l.queryid = v.queryid AND l.toplevel = v.toplevel "
    "LEFT JOIN radar.muted_verdict mu ON mu.deploy_id = v.deploy_id AND mu.target = v.target AND mu.dbid = v.dbid "
    "AND mu.userid = v.userid AND mu.queryid = v.queryid AND mu.toplevel = v.toplevel"
)
VERDICT_LABEL_COLUMNS = (
    "l.label, l.labelled_by, l.note AS label_note, l.fixed_by, l.created_at AS labelled_at, l.source AS label_source, "
    "mu.mute_id, mu.reason AS mute_reason, mu.ends_at AS mute_ends_at"
)


class LabelError(ValueError):
    """Bad input for a label or a mute: `field` names what is wrong (the CLI's option, the receiver's JSON key)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


class LabelConflict(LabelError):
    """An idempotency key used before for another label."""


@dataclass(frozen=True)
class Label:
    """A label to store. The subject is a statement (deploy_id and queryid; target, dbid, userid, toplevel narrow it
    when the queryid has several verdicts in the analysis), a group (deploy_id and group_id), or the fleet verdict
    of the deploy's release on that statement (deploy_id, queryid and fleet)."""

    label: str
    labelled_by: str
    deploy_id: str
    queryid: int | None = None
    group_id: str | None = None
    fleet: bool = False
    target: str | None = None
    dbid: int | None = None
    userid: int | None = None
    toplevel: bool | None = None
    note: str = ""
    fixed_by: str | None = None
    source: str = "cli"
    idempotency_key: str | None = None


@dataclass(frozen=True)
class Stored:
    """A label as stored: its row (radar.label's columns), and whether this call inserted it (False: the same
    idempotency key landed before)."""

    row: dict[str, Any]
    inserted: bool


def add(conn: sa.Connection, label: Label) -> Stored:
    """Store `label` once (an idempotency key seen before returns that row, or LabelConflict when it labelled
    something else), after checking every field against the warehouse (LabelError naming the field)."""
    _check_text(label)
    subject = _subject(conn, label)
    if label.fixed_by is not None and not _deploy_exists(conn, label.fixed_by):
        raise LabelError("fixed_by", f"deploy {label.fixed_by!r} is not recorded")
    values = {
        **subject,
        "label": label.label,
        "fixed_by": label.fixed_by,
        "labelled_by": label.labelled_by,
        "note": label.note,
        "source": label.source,
        "idempotency_key": label.idempotency_key,
    }
    if label.idempotency_key is not None:
        conn.execute(
            sa.text("SELECT pg_advisory_xact_lock(hashtextextended('radar.label:' || :k, 0))"),
            {"k": label.idempotency_key},
        )
        before = _by_key(conn, label.idempotency_key)
        if before is not None:
            return Stored(_same_or_conflict(before, values), inserted=False)
    columns = ", ".join(values)
    row = (
        conn.execute(
            sa.text(f"INSERT INTO radar.label ({columns}) VALUES ({', '.join(':' + c for c in values)}) RETURNING *"),
            values,
        )
        .mappings()
        .one()
    )
    return Stored(dict(row), inserted=True)


def _check_text(label: Label) -> None:
    """The fields that need no warehouse to be judged."""
    if label.label not in LABELS:
        raise LabelError("label", f"{label.label!r} is not a label: one of {', '.join(LABELS)}")
    if label.label == "fixed" and not label.fixed_by:
        raise LabelError("fixed_by", "a `fixed` label names the deploy that fixed it")
    if label.label != "fixed" and label.fixed_by is not None:
        raise LabelError("fixed_by", f"only a `fixed` label names the deploy that fixed it, not {label.label!r}")
    if label.source not in SOURCES:
        raise LabelError("source", f"{label.source!r} is not one of {', '.join(SOURCES)}")
    if sum((label.queryid is not None and not label.fleet, label.group_id is not None, label.fleet)) != 1:
        raise LabelError("queryid", "name one thing to label: a queryid, a group, or a queryid's fleet verdict")
    if label.fleet and label.queryid is None:
        raise LabelError("queryid", "a fleet verdict is named by the queryid of one of its statements")
    one_line(label.labelled_by, "by", MAX_SHORT)
    if label.idempotency_key is not None:
        one_line(label.idempotency_key, "idempotency_key", MAX_SHORT)
    if len(label.note) > MAX_NOTE or "\x00" in label.note:
        raise LabelError("note", f"at most {MAX_NOTE} characters, without NUL")


def one_line(value: str, field: str, limit: int) -> str:
    """`value` when it is 1 to `limit` printable characters on one line, else LabelError naming `field`."""
    if not value or len(value) > limit or not value.isprintable():
        raise LabelError(field, f"give 1 to {limit} printable characters on one line")
    return value


def _deploy_exists(conn: sa.Connection, deploy_id: str) -> bool:
    """A recorded deploy, or an analysis by this id (a periodic check's)."""
    return (
        conn.execute(
            sa.text(
                "SELECT EXISTS (SELECT 1 FROM radar.deploy_event WHERE deploy_id = :d) "
                "OR EXISTS (SELECT 1 FROM radar.analysis WHERE deploy_id = :d)"
            ),
            {"d": deploy_id},
        ).scalar_one()
        is True
    )


def _subject(conn: sa.Connection, label: Label) -> dict[str, Any]:
    """radar.label's subject columns for what `label` names, found among the analysis's verdicts."""
    if not _deploy_exists(conn, label.deploy_id):
        raise LabelError("deploy_id", f"deploy {label.deploy_id!r} is not recorded (radar deploys lists them)")
    if label.group_id is not None:
        one_line(label.group_id, "group", MAX_SHORT)
        targets = [
            r[0]
            for r in conn.execute(
                sa.text(
                    "SELECT DISTINCT target FROM radar.group_verdict WHERE deploy_id = :d AND group_id = :g "
                    "AND (CAST(:t AS text) IS NULL OR target = :t) ORDER BY target"
                ),
                {"d": label.deploy_id, "g": label.group_id, "t": label.target},
            )
        ]
        if len(targets) != 1:
            why = "is not among its groups (radar verdicts lists them)" if not targets else "is a group of several "
            why += "" if not targets else f"targets ({', '.join(targets)}): give the target"
            raise LabelError("group", f"group {label.group_id!r} of deploy {label.deploy_id!r} {why}")
        return {"kind": "group", "deploy_id": label.deploy_id, "target": targets[0], "group_id": label.group_id}
    rows = conn.execute(
        sql_text("warehouse.verdicts_of_statement"),
        {
            "d": label.deploy_id,
            "q": label.queryid,
            "t": label.target,
            "dbid": label.dbid,
            "userid": label.userid,
            "top": label.toplevel,
        },
    ).fetchall()
    if not rows:
        raise LabelError("queryid", f"queryid {label.queryid} has no verdict in deploy {label.deploy_id!r}")
    if len(rows) > 1:
        found = "; ".join(f"target {r.target} dbid {r.dbid} userid {r.userid} toplevel {r.toplevel}" for r in rows)
        raise LabelError("queryid", f"queryid {label.queryid} has {len(rows)} verdicts there ({found}): narrow it")
    row = rows[0]
    if label.fleet:
        return _fleet_subject(conn, label, int(row.fingerprint), bool(row.toplevel))
    return {
        "kind": "statement",
        "deploy_id": label.deploy_id,
        "target": row.target,
        **{k: getattr(row, k) for k in KEY},
    }


def _fleet_subject(conn: sa.Connection, label: Label, fingerprint: int, toplevel: bool) -> dict[str, Any]:
    """The fleet verdict of the deploy's release on the statement's query (radar.release_verdict)."""
    from radar_pipeline.warehouse.releases import release_of_deploy

    release_id = release_of_deploy(conn, label.deploy_id)
    found = (
        release_id is not None
        and conn.execute(
            sa.text(
                "SELECT EXISTS (SELECT 1 FROM radar.release_verdict WHERE release_id = :r AND fingerprint = :f "
                "AND toplevel = :top)"
            ),
            {"r": release_id, "f": fingerprint, "top": toplevel},
        ).scalar_one()
    )
    if not found:
        raise LabelError(
            "fleet", f"queryid {label.queryid} has no fleet verdict in deploy {label.deploy_id!r}'s release"
        )
    return {"kind": "fleet", "release_id": release_id, "fingerprint": fingerprint, "toplevel": toplevel}


def _by_key(conn: sa.Connection, key: str) -> dict[str, Any] | None:
    found = conn.execute(sa.text("SELECT * FROM radar.label WHERE idempotency_key = :k"), {"k": key}).mappings().first()
    return dict(found) if found is not None else None


def _same_or_conflict(before: dict[str, Any], values: dict[str, Any]) -> dict[str, Any]:
    """The row an idempotency key stored, when this request says the same; else LabelConflict."""
    differing = [k for k in ("kind", "deploy_id", "target", "queryid", "group_id", "release_id", "label")
                 if k in values and before.get(k) != values[k]]  # fmt: skip
    if differing:
        raise LabelConflict("idempotency_key", f"used before for another label ({', '.join(differing)} differ)")
    return before


def intended_verdicts(conn: sa.Connection, label_id: int) -> pd.DataFrame:
    """The statement verdicts an intended label stands for (radar.intended_verdict: its statement, its group's
    members, its fleet verdict's statement on each member deploy) where it is their standing label: deploy_id,
    target, KEY, fingerprint and the change point it marks (change_at)."""
    return pd.read_sql(
        sa.text(
            f"SELECT deploy_id, target, {', '.join(KEY)}, fingerprint, change_at FROM radar.intended_verdict "
            f"WHERE label_id = :l ORDER BY deploy_id, target, {', '.join(KEY)}"
        ),
        conn,
        params={"l": label_id},
    )


def replaces_intended(conn: sa.Connection, label_id: int) -> bool:
    """Whether this label may end a segment an intended label began: its subject was labelled intended before, or
    another subject's latest label that covers one of its verdicts (a group's, a fleet's, a statement's) is."""
    return bool(
        conn.execute(
            sql_text("warehouse.replaces_intended"),
            {"l": label_id},
        ).scalar_one()
    )


def record_effect(conn: sa.Connection, label_id: int, effect: dict[str, int]) -> None:
    """Record what applying a label did (radar.label_effect), in the label's transaction: an intended label cannot
    commit without it (sql/0040's deferred constraint trigger)."""
    conn.execute(
        sa.text(
            "INSERT INTO radar.label_effect (label_id, verdicts, history_points, episodes_closed, resolves, "
            "message_updates) VALUES (:l, :verdicts, :history_points, :episodes_closed, :resolves, :message_updates)"
        ),
        {"l": label_id, **effect},
    )


def effect_of(conn: sa.Connection, label_id: int) -> dict[str, Any] | None:
    """What applying a label did (its radar.label_effect row), or None (a label that is not intended)."""
    found = conn.execute(sa.text("SELECT * FROM radar.label_effect WHERE label_id = :l"), {"l": label_id})
    row = found.mappings().first()
    return dict(row) if row is not None else None


def standing_labels(conn: sa.Connection, analysis_id: str) -> dict[tuple[str, Key], str]:
    """The standing label of each of the analysis's labelled statement verdicts (the latest of the labels that
    cover it: its own, its group's, its fleet verdict's; for a periodic check's, else the label that closed its
    episode as intended), in words (label_words), by (target, statement key)."""
    rows = conn.execute(
        sql_text("warehouse.standing_labels"),
        {"d": analysis_id},
    ).fetchall()
    found: dict[tuple[str, Key], str] = {}
    for r in reversed(rows):  # a verdict's own standing label before its episode's
        found[(r.target, statement_key([getattr(r, k) for k in KEY]))] = label_words(
            r.label, r.labelled_by, r.note, r.fixed_by
        )
    return found


def group_labels(conn: sa.Connection, deploy_id: str) -> pd.DataFrame:
    """The latest label of each of the analysis's groups: target, group_id, label, labelled_by, note."""
    return pd.read_sql(
        sa.text(
            "SELECT target, group_id, label, labelled_by, note, fixed_by, created_at FROM radar.latest_label "
            "WHERE kind = 'group' AND deploy_id = :d"
        ),
        conn,
        params={"d": deploy_id},
    )


def muted_of(conn: sa.Connection, deploy_id: str) -> pd.DataFrame:
    """The analysis's muted detections, statements then groups: target, queryid (a statement's) or group_id (a
    group's), the mute's id, scope, reason and end."""
    return pd.read_sql(
        sql_text("warehouse.muted_statements"),
        conn,
        params={"d": deploy_id},
    )


def label_words(label: Any, by: Any, note: Any = None, fixed_by: Any = None) -> str:
    """A latest label in words, for a table cell or a line: "false_alarm by ana: noise", "fixed in shop-v3 by
    bo"; empty for none. The caller escapes it for where it is shown."""
    if not isinstance(label, str) or not label:
        return ""
    fixed = f" in {fixed_by}" if isinstance(fixed_by, str) and fixed_by else ""
    words = f"{label}{fixed} by {by}"
    return f"{words}: {note}" if isinstance(note, str) and note else words


# Mutes.


def add_mute(
    conn: sa.Connection,
    *,
    until: datetime,
    reason: str,
    muted_by: str,
    target: str | None = None,
    queryid: int | None = None,
    group_id: str | None = None,
    configured_targets: tuple[str, ...] = (),
) -> dict[str, Any]:
    """Mute a target, a statement of a target (target and queryid) or a group (group_id, of one target or of any)
    from now until `until`; returns the stored row (radar.mute_state). LabelError names the field that is wrong: an
    end not in the future, an empty reason, a target radar knows nothing of, a statement or a group never seen."""
    from radar_pipeline.warehouse.deploys import known_targets

    if len(reason.strip()) == 0 or len(reason) > MAX_NOTE or "\x00" in reason:
        raise LabelError("reason", f"say why, in 1 to {MAX_NOTE} characters")
    one_line(muted_by, "by", MAX_SHORT)
    if group_id is None and target is None:
        raise LabelError("target", "name a target (with --statement, the statement's), or a group")
    if group_id is not None and queryid is not None:
        raise LabelError("group", "a mute names a target, a statement or a group: not a group and a statement")
    now = conn.execute(sa.text("SELECT now()")).scalar_one()
    if until <= now:
        raise LabelError(
            "until", f"{until.isoformat()} is not in the future (the warehouse's clock: {now.isoformat()})"
        )
    if target is not None:
        known = known_targets(conn, configured_targets) | {
            r[0] for r in conn.execute(sa.text("SELECT DISTINCT target FROM radar.deploy_event"))
        }
        if target not in known:
            raise LabelError("target", f"{target!r} is not a target radar knows (no snapshot or deploy of it)")
    if (
        queryid is not None
        and not conn.execute(
            sa.text("SELECT EXISTS (SELECT 1 FROM radar.query WHERE target = :t AND queryid = :q)"),
            {"t": target, "q": queryid},
        ).scalar_one()
    ):
        raise LabelError("statement", f"queryid {queryid} was never seen on target {target!r}")
    if group_id is not None:
        one_line(group_id, "group", MAX_SHORT)
        if not conn.execute(
            sa.text(
                "SELECT EXISTS (SELECT 1 FROM radar.group_verdict WHERE group_id = :g "
                "AND (CAST(:t AS text) IS NULL OR target = :t))"
            ),
            {"g": group_id, "t": target},
        ).scalar_one():
            raise LabelError(
                "group", f"group {group_id!r} was never decided{'' if target is None else ' on ' + target}"
            )
    scope = "group" if group_id is not None else "statement" if queryid is not None else "target"
    mute_id = conn.execute(
        sa.text(
            "INSERT INTO radar.mute (scope, target, queryid, group_id, until, reason, muted_by) "
            "VALUES (:s, :t, :q, :g, :u, :r, :b) RETURNING mute_id"
        ),
        {"s": scope, "t": target, "q": queryid, "g": group_id, "u": until, "r": reason, "b": muted_by},
    ).scalar_one()
    return _mute(conn, int(mute_id))


def end_mute(conn: sa.Connection, mute_id: int, ended_by: str) -> dict[str, Any]:
    """End a mute now, before its `until`; returns it as it then stands. LabelError when there is no such mute, or it
    is over already."""
    one_line(ended_by, "by", MAX_SHORT)
    conn.execute(sa.text("SELECT 1 FROM radar.mute WHERE mute_id = :m FOR UPDATE"), {"m": mute_id})
    found = _mute(conn, mute_id)
    if not found:
        raise LabelError("end", f"there is no mute {mute_id} (radar mute --list)")
    if found["ends_at"] <= conn.execute(sa.text("SELECT now()")).scalar_one():
        raise LabelError("end", f"mute {mute_id} is over already (it ended {found['ends_at'].isoformat()})")
    conn.execute(
        sa.text("INSERT INTO radar.mute_end (mute_id, ended_by) VALUES (:m, :b)"), {"m": mute_id, "b": ended_by}
    )
    return _mute(conn, mute_id)


def _mute(conn: sa.Connection, mute_id: int) -> dict[str, Any]:
    found = (
        conn.execute(sa.text("SELECT * FROM radar.mute_state WHERE mute_id = :m"), {"m": mute_id}).mappings().first()
    )
    return dict(found) if found is not None else {}


def mutes(conn: sa.Connection, include_over: bool = False) -> pd.DataFrame:
    """The mutes in force now (with `include_over`, every one), those ending first first."""
    return pd.read_sql(
        sa.text("SELECT * FROM radar.mute_state WHERE :all OR ends_at > now() ORDER BY ends_at, mute_id"),
        conn,
        params={"all": include_over},
    )


def mute_words(scope: Any, target: Any, queryid: Any, group_id: Any) -> str:
    """What a mute covers, in words: "target main", "queryid 42 on main", "group shape:… (any target)"."""
    if scope == "group":
        return f"group {group_id} ({'any target' if not isinstance(target, str) else 'on ' + target})"
    if scope == "statement":
        return f"queryid {int(queryid)} on {target}"
    return f"target {target}"


# The realised false-alert rate.


def realised_rate(conn: sa.Connection, months: int = 6) -> pd.DataFrame:
    """radar.realised_false_alerts for the last `months` months (UTC), newest first, target by target."""
    return pd.read_sql(
        sa.text(
            "SELECT * FROM radar.realised_false_alerts "
            "WHERE month >= CAST(date_trunc('month', now() AT TIME ZONE 'UTC') AS date) - make_interval(months => :n) "
            "ORDER BY month DESC, target"
        ),
        conn,
        params={"n": max(0, months - 1)},
    )
