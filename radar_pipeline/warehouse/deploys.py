"""Deploy events: validated, stored once (idempotent on the id), and handed to the sensor when their window closes."""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa

DEPLOY_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@+=-]{0,127}$")
MAX_FUTURE = timedelta(minutes=5)
FIELDS = ("deploy_id", "target", "deployed_at", "service", "version", "source", "url", "metadata")
CSV_COLUMNS = ("deploy_id", "target", "deployed_at", "service", "version", "url")
MAX_TEXT = 1000
PERIODIC_PREFIX = "periodic:"  # ids of periodic analyses in radar.analysis (see sql/0006)
FIRST_LOOK = timedelta(days=1)  # how far back a sensor with no cursor yet looks for deploys to analyse


class DeployError(ValueError):
    """A deploy event that cannot be stored; the message names the field. Nothing was written."""


@dataclass(frozen=True)
class DeployEvent:
    """One deploy as CI reports it. deployed_at None means "now, by the warehouse's clock"."""

    deploy_id: str
    target: str
    deployed_at: datetime | None = None
    service: str | None = None
    version: str | None = None
    source: str = "cli"
    url: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.deploy_id, str) or not DEPLOY_ID.match(self.deploy_id) or "..." in self.deploy_id:
            raise DeployError(
                f"deploy id {self.deploy_id!r} is not usable: 1-128 letters, digits or . _ : @ + = -, starting with a "
                "letter or digit, without '...' (it becomes a Dagster partition key)"
            )
        if self.deploy_id.startswith(PERIODIC_PREFIX):
            raise DeployError(
                f"deploy id {self.deploy_id!r} starts with {PERIODIC_PREFIX!r}, which names periodic analyses: "
                "choose another id"
            )
        if not self.target:
            raise DeployError("target is empty")
        if self.deployed_at is not None and (
            not isinstance(self.deployed_at, datetime) or self.deployed_at.utcoffset() is None
        ):
            raise DeployError(f"deployed_at {self.deployed_at!r} has no time zone: give one, e.g. 2026-11-29T12:00:00Z")
        for name in ("service", "version", "url", "source"):
            value = getattr(self, name)
            if value is not None and len(value) > MAX_TEXT:
                raise DeployError(f"{name} is longer than {MAX_TEXT} characters")
        if self.url is not None and not re.match(r"^https?://\S+$", self.url):
            raise DeployError(f"url {self.url!r} is not an http(s) URL")


@dataclass(frozen=True)
class Recorded:
    """What storing an event did: inserted, or found the identical event already there."""

    event: DeployEvent
    inserted: bool


def parse_time(value: str, name: str = "deployed_at") -> datetime:
    """An ISO 8601 timestamp with a time zone (a trailing Z is UTC)."""
    try:
        parsed = datetime.fromisoformat(value.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise DeployError(f"{name} {value!r} is not an ISO 8601 timestamp (e.g. 2026-11-29T12:00:00Z)") from None
    if parsed.utcoffset() is None:
        raise DeployError(f"{name} {value!r} has no time zone: add Z or an offset such as +02:00")
    return parsed


def known_targets(conn: sa.Connection, configured: Iterable[str] = ()) -> set[str]:
    """Targets a deploy may name: those configured here, and those the warehouse has snapshots of."""
    stored = {r[0] for r in conn.execute(sa.text("SELECT DISTINCT target FROM radar.pgss_info_snapshot"))}
    return stored | set(configured)


def record(engine: sa.Engine, event: DeployEvent, configured_targets: Iterable[str] = ()) -> Recorded:
    """Store one deploy event; the same event again changes nothing, a conflicting one is refused (DeployError)."""
    with engine.begin() as conn:
        return _record(conn, event, known_targets(conn, configured_targets))


def import_csv(engine: sa.Engine, path: Path, configured_targets: Iterable[str] = ()) -> list[Recorded]:
    """Load historical deploys from a CSV file (header: deploy_id,target,deployed_at[,service,version,url]).

    Every row is checked before anything is written, and all rows are stored in one transaction: a bad row names its
    line and field, and leaves the warehouse as it was.
    """
    events = list(read_csv(path))
    seen: dict[str, int] = {}
    with engine.begin() as conn:
        targets = known_targets(conn, configured_targets)
        recorded = []
        for line, event in events:
            if event.deploy_id in seen:
                first = seen[event.deploy_id]
                raise DeployError(f"{path}, line {line}: deploy id {event.deploy_id!r} repeats line {first}")
            seen[event.deploy_id] = line
            try:
                recorded.append(_record(conn, event, targets))
            except DeployError as exc:
                raise DeployError(f"{path}, line {line}: {exc}") from None
    return recorded


def read_csv(path: Path) -> Iterable[tuple[int, DeployEvent]]:
    """(line number, event) for every row of a deploy CSV, validated field by field."""
    try:
        handle = open(path, newline="", encoding="utf-8")  # noqa: SIM115 - closed below
    except OSError as exc:
        raise DeployError(f"cannot read {path}: {exc.strerror}") from None
    with handle:
        reader = csv.DictReader(handle)
        header = [h.strip() for h in reader.fieldnames or []]
        missing = [c for c in CSV_COLUMNS[:3] if c not in header]
        unknown = [c for c in header if c not in CSV_COLUMNS]
        if missing or unknown:
            raise DeployError(
                f"{path}: the header must hold {', '.join(CSV_COLUMNS[:3])} and may hold {', '.join(CSV_COLUMNS[3:])}"
                + (f"; missing {', '.join(missing)}" if missing else "")
                + (f"; unknown {', '.join(unknown)}" if unknown else "")
            )
        rows = []
        for row in reader:
            values = {k.strip(): (v.strip() if isinstance(v, str) else v) for k, v in row.items() if k}
            line = reader.line_num
            try:
                if not values.get("deployed_at"):
                    raise DeployError("deployed_at is empty: historical deploys need their time")
                rows.append(
                    (
                        line,
                        DeployEvent(
                            deploy_id=values.get("deploy_id") or "",
                            target=values.get("target") or "",
                            deployed_at=parse_time(values["deployed_at"]),
                            service=values.get("service") or None,
                            version=values.get("version") or None,
                            url=values.get("url") or None,
                            source="import",
                        ),
                    )
                )
            except DeployError as exc:
                raise DeployError(f"{path}, line {line}: {exc}") from None
    return rows


def get(conn: sa.Connection, deploy_id: str) -> DeployEvent | None:
    """The stored event with this id, or None."""
    row = conn.execute(
        sa.text(f"SELECT {', '.join(FIELDS)} FROM radar.deploy_event WHERE deploy_id = :id"), {"id": deploy_id}
    ).fetchone()
    return DeployEvent(**row._mapping) if row is not None else None


@dataclass(frozen=True)
class DueEvent:
    """A deploy whose analysis window has closed, with the time it became ready for the sensor."""

    deploy_id: str
    target: str
    deployed_at: datetime
    ready_at: datetime


READY_AT = "greatest(received_at, deployed_at + :delay)"


def due_events(
    conn: sa.Connection, after: tuple[datetime, str] | None, delay: timedelta, limit: int = 200
) -> list[DueEvent]:
    """Events whose window closed (deployed_at + delay ≤ the warehouse's now) and that come after `after`, a keyset
    position (ready_at, deploy_id), in that order: at most `limit`, so any burst is drained page by page.

    An event is ready at max(received_at, deployed_at + delay): when its window closed, or when it arrived if it
    arrived late. The first part of the condition uses the indexes on received_at and deployed_at, so one evaluation
    is one cheap query. Imported historical deploys are left to backfills, and with no position yet (`after` None)
    only events ready in the last FIRST_LOOK are returned, so switching the sensor on does not flood the run queue
    with old deploys. An event whose inserting transaction committed after the position passed its ready_at is not
    returned: the reconciler requests it (see unanalysed_events).
    """
    at, after_id = after if after is not None else (_now(conn) - FIRST_LOOK, "")
    rows = conn.execute(
        sa.text(
            f"SELECT deploy_id, target, deployed_at, {READY_AT} AS ready_at "
            "FROM radar.deploy_event "
            "WHERE deployed_at <= now() - :delay "
            "AND source <> 'import' "
            "AND (received_at >= :after OR deployed_at >= CAST(:after AS timestamptz) - :delay) "
            f"AND ({READY_AT}, deploy_id) > (CAST(:after AS timestamptz), CAST(:after_id AS text)) "
            "ORDER BY ready_at, deploy_id LIMIT :limit"
        ),
        {"delay": delay, "after": at, "after_id": after_id, "limit": limit},
    ).fetchall()
    return [DueEvent(*r) for r in rows]


def deploy_times(conn: sa.Connection, target: str, lo: datetime, hi: datetime) -> list[datetime]:
    """When the target's recorded deploys in [lo, hi] happened."""
    rows = conn.execute(
        sa.text(
            "SELECT deployed_at FROM radar.deploy_event WHERE target = :t AND deployed_at BETWEEN :lo AND :hi "
            "ORDER BY deployed_at"
        ),
        {"t": target, "lo": lo, "hi": hi},
    )
    return [r[0] for r in rows]


def _now(conn: sa.Connection) -> datetime:
    return conn.execute(sa.text("SELECT now()")).scalar_one()


def _record(conn: sa.Connection, event: DeployEvent, targets: set[str]) -> Recorded:
    if event.target not in targets:
        known = ", ".join(sorted(targets)) or "none yet: snapshot a target first, or set RADAR_TARGETS"
        raise DeployError(f"target {event.target!r} is not known (known targets: {known})")
    now = _now(conn)
    deployed_at = event.deployed_at or now
    if deployed_at > now + MAX_FUTURE:
        raise DeployError(
            f"deployed_at {deployed_at.isoformat()} is more than {int(MAX_FUTURE.total_seconds() // 60)} minutes "
            f"ahead of the warehouse's clock ({now.isoformat()})"
        )
    params = {**asdict(event), "deployed_at": deployed_at, "metadata": json.dumps(event.metadata, sort_keys=True)}
    inserted = conn.execute(
        sa.text(
            "INSERT INTO radar.deploy_event (deploy_id, target, deployed_at, service, version, source, url, metadata) "
            "VALUES (:deploy_id, :target, :deployed_at, :service, :version, :source, :url, CAST(:metadata AS jsonb)) "
            "ON CONFLICT (deploy_id) DO NOTHING RETURNING deploy_id"
        ),
        params,
    ).fetchone()
    stored = get(conn, event.deploy_id)
    assert stored is not None
    if inserted is not None:
        return Recorded(stored, inserted=True)
    differs = [
        name
        for name in ("target", "deployed_at", "service", "version", "url")
        if (event.deployed_at is not None or name != "deployed_at") and getattr(event, name) != getattr(stored, name)
    ]
    if differs:
        detail = "; ".join(f"{n}: stored {getattr(stored, n)!r}, given {getattr(event, n)!r}" for n in differs)
        raise DeployError(
            f"deploy {event.deploy_id!r} is already recorded with other values ({detail}); nothing changed"
        )
    return Recorded(stored, inserted=False)
