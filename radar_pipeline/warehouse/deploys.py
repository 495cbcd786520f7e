"""Deploy events: validated, stored once (idempotent on the id), and handed to the sensor when their window closes."""

from __future__ import annotations

import csv
import json
import re
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa

DEPLOY_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@+=-]{0,127}")  # used with fullmatch: `$` would allow a final \n
URL = re.compile(r"https?://[^\s\x00-\x1f\x7f]+")
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
MAX_FUTURE = timedelta(minutes=5)
EARLIEST = datetime(2000, 1, 1, tzinfo=UTC)  # no deploy predates this; a year-1 or 1900 time is a typo
BATCH = 5000  # rows per statement of an import
# What a commit status needs (sql/0018), recorded with the deploy.
STATUS_FIELDS = ("commit_sha", "repository", "code_host", "api_url", "run_url", "github_deployment_id")
# A release shared by several targets' deploys (a fleet), and the canary version's database role (sql/0027).
ARM_FIELDS = ("release_id", "canary_role")
FIELDS = (
    "deploy_id", "target", "deployed_at", "service", "version", "source", "url", "metadata", *STATUS_FIELDS, *ARM_FIELDS
)  # fmt: skip
RELEASE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@+=/-]{0,127}")  # used with fullmatch
ROLE_BYTES = 63  # PostgreSQL's NAMEDATALEN - 1: a longer role name cannot exist
COMMIT_SHA = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")  # SHA-1 or SHA-256, full: a status names the exact commit
REPOSITORY = {
    "github": re.compile(r"[A-Za-z0-9_.-]{1,100}/[A-Za-z0-9_.-]{1,100}"),  # owner/name
    "gitlab": re.compile(r"[0-9]{1,20}|[A-Za-z0-9_.-]{1,255}(/[A-Za-z0-9_.-]{1,255}){1,20}"),  # project id or path
}
CODE_HOSTS = tuple(REPOSITORY)
CSV_COLUMNS = ("deploy_id", "target", "deployed_at", "service", "version", "url")
MAX_TEXT = 1000
PERIODIC_PREFIX = "periodic:"  # ids of periodic analyses in radar.analysis (see sql/0006)
INFERRED_PREFIX = "inferred:"  # ids of inferred releases (warehouse.releases): never a recorded release id
# A GitLab job reported twice: by its CI step (`radar deploy`, or the documented curl) and by GitLab's deployment
# webhook, both as gl-<job id> (see same_job).
GITLAB_JOB = re.compile(r"gl-[0-9]{1,20}")
GITLAB_WEBHOOK = "webhook-gitlab"
FIRST_LOOK = timedelta(days=1)  # how far back a sensor with no cursor yet looks for deploys to analyse


class DeployError(ValueError):
    """A deploy event that cannot be stored; the message names the field. Nothing was written."""


class DeployConflict(DeployError):
    """The deploy id is already recorded with other values (the receiver answers it 409, naming only `fields`: the
    message holds the stored values, which its callers may not read)."""

    def __init__(self, message: str, deploy_id: str, fields: list[str]) -> None:
        super().__init__(message)
        self.deploy_id = deploy_id
        self.fields = fields


class UnknownTarget(DeployError):
    """The event names a target radar does not know (the message lists the known ones, for the CLI's user)."""

    def __init__(self, message: str, target: str) -> None:
        super().__init__(message)
        self.target = target


@dataclass(frozen=True)
class DeployEvent:
    """One deploy as CI reports it. deployed_at None means "when it was reported" (see record)."""

    deploy_id: str
    target: str
    deployed_at: datetime | None = None
    service: str | None = None
    version: str | None = None
    source: str = "cli"
    url: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    commit_sha: str | None = None
    repository: str | None = None
    code_host: str | None = None  # github or gitlab
    api_url: str | None = None
    run_url: str | None = None
    github_deployment_id: int | None = None
    release_id: str | None = None
    canary_role: str | None = None

    @classmethod
    def stored(cls, row: Any) -> DeployEvent:
        """An event as the warehouse holds it, taken as it is: rows stored under older, looser rules are read back
        (and analysed) rather than refused."""
        event = object.__new__(cls)
        for name in FIELDS:
            object.__setattr__(event, name, row[name])
        return event

    def __post_init__(self) -> None:
        if not isinstance(self.deploy_id, str) or not DEPLOY_ID.fullmatch(self.deploy_id) or "..." in self.deploy_id:
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
        if CONTROL.search(self.target):
            raise DeployError(f"target {self.target!r} holds control characters")
        if self.deployed_at is not None and (
            not isinstance(self.deployed_at, datetime) or self.deployed_at.utcoffset() is None
        ):
            raise DeployError(f"deployed_at {self.deployed_at!r} has no time zone: give one, e.g. 2026-11-29T12:00:00Z")
        if self.deployed_at is not None and _before_earliest(self.deployed_at):
            raise DeployError(
                f"deployed_at {self.deployed_at.isoformat()} is before {EARLIEST.date().isoformat()}: a typo?"
            )
        for name in ("service", "version", "url", "source"):
            value = getattr(self, name)
            if value is not None and len(value) > MAX_TEXT:
                raise DeployError(f"{name} is longer than {MAX_TEXT} characters")
            if value is not None and CONTROL.search(value):
                raise DeployError(f"{name} {value!r} holds control characters (a newline, an escape sequence)")
        if self.url is not None and not URL.fullmatch(self.url):
            raise DeployError(f"url {self.url!r} is not an http(s) URL")
        self._check_status_fields()
        if self.release_id is not None and not RELEASE_ID.fullmatch(self.release_id):
            raise DeployError(
                f"release {self.release_id!r} is not usable: 1-128 letters, digits or . _ : @ + = / -, starting with a "
                "letter or digit"
            )
        if self.release_id is not None and self.release_id.startswith(INFERRED_PREFIX):
            raise DeployError(
                f"release {self.release_id!r} is not usable: {INFERRED_PREFIX!r} names inferred releases (deploys of "
                "the same service and version without a release id)"
            )
        role = self.canary_role
        if role is not None and (not role or len(role.encode()) > ROLE_BYTES or CONTROL.search(role)):
            raise DeployError(
                f"canary role {role!r} is not a PostgreSQL role name (1-{ROLE_BYTES} bytes, no control characters)"
            )

    def _check_status_fields(self) -> None:
        """The facts a commit status needs: each well formed, and together or not at all (commit, repository and
        code host: a deploy without them gets no status)."""
        if self.code_host is not None and self.code_host not in CODE_HOSTS:
            raise DeployError(f"code host {self.code_host!r} is not one of {', '.join(CODE_HOSTS)}")
        if self.commit_sha is not None and not COMMIT_SHA.fullmatch(self.commit_sha):
            raise DeployError(
                f"commit {self.commit_sha!r} is not a full commit SHA (40 or 64 lowercase hex digits): a status "
                "names the exact commit"
            )
        if (self.commit_sha or self.repository) and self.code_host is None:
            raise DeployError("a commit or repository needs its code host (--code-host github or gitlab)")
        if self.repository is not None and not REPOSITORY[self.code_host or "github"].fullmatch(self.repository):
            shape = "owner/name" if self.code_host == "github" else "a project path (group/name) or numeric id"
            raise DeployError(f"repository {self.repository!r} is not {shape}")
        for name in ("api_url", "run_url"):
            value = getattr(self, name)
            if value is not None and (len(value) > MAX_TEXT or not URL.fullmatch(value)):
                raise DeployError(f"{name} {value!r} is not an http(s) URL")
        if self.api_url is not None and "@" in self.api_url:
            raise DeployError("api_url must not hold @ (a user name or password)")
        deployment = self.github_deployment_id
        if deployment is not None and (
            not isinstance(deployment, int) or isinstance(deployment, bool) or deployment <= 0
        ):
            raise DeployError(f"GitHub deployment id {deployment!r} is not a positive number")
        if deployment is not None and self.code_host != "github":
            raise DeployError("a GitHub deployment id needs --code-host github")


@dataclass(frozen=True)
class Recorded:
    """What storing an event did: inserted, or found the identical event already there."""

    event: DeployEvent
    inserted: bool


def parse_time(value: str, name: str = "deployed_at") -> datetime:
    """An ISO 8601 timestamp with a time zone (a trailing Z is UTC), not before 2000 (DeployError otherwise)."""
    if not value.strip():
        raise DeployError(f"{name} is empty: give a time such as 2026-11-29T12:00:00Z, or leave it out for now")
    try:
        parsed = datetime.fromisoformat(value.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise DeployError(f"{name} {value!r} is not an ISO 8601 timestamp (e.g. 2026-11-29T12:00:00Z)") from None
    if parsed.utcoffset() is None:
        raise DeployError(f"{name} {value!r} has no time zone: add Z or an offset such as +02:00")
    try:
        in_utc = parsed.astimezone(UTC)  # 0001-01-01T00:00+14:00 is before year 1 in UTC: OverflowError
    except (OverflowError, ValueError):
        raise DeployError(f"{name} {value!r} is out of range") from None
    if in_utc < EARLIEST:
        raise DeployError(f"{name} {value!r} is before {EARLIEST.date().isoformat()}: a typo?")
    return parsed


def known_targets(conn: sa.Connection, configured: Iterable[str] = ()) -> set[str]:
    """Targets a deploy may name: those configured here, and those the warehouse has snapshots of."""
    stored = {r[0] for r in conn.execute(sa.text("SELECT DISTINCT target FROM radar.pgss_info_snapshot"))}
    return stored | set(configured)


def record(
    engine: sa.Engine, event: DeployEvent, configured_targets: Iterable[str] = (), started: float | None = None
) -> Recorded:
    """Store one deploy event; the same event again changes nothing, a conflicting one is refused (DeployError).

    An event without its time is recorded when the command reporting it began, `started` (its time.monotonic()):
    the warehouse's clock less the time the command spent before reaching it (which can take a while on a busy
    machine), not the runner's wall clock, which may be minutes off. Without `started`, at the warehouse's clock.
    """
    with engine.begin() as conn:
        return record_in(conn, event, configured_targets, started)


def record_in(
    conn: sa.Connection, event: DeployEvent, configured_targets: Iterable[str] = (), started: float | None = None
) -> Recorded:
    """record() in the caller's transaction (the webhook receiver stores the delivery's id in the same one). The
    event's target is looked up by its key; every known target is read only to name them when it is not known."""
    configured = set(configured_targets)
    known = (
        event.target in configured
        or conn.execute(
            sa.text("SELECT EXISTS (SELECT 1 FROM radar.pgss_info_snapshot WHERE target = :t)"), {"t": event.target}
        ).scalar_one()
    )
    return _record(conn, event, configured | {event.target} if known else known_targets(conn, configured), started)


def import_csv(engine: sa.Engine, path: Path, configured_targets: Iterable[str] = ()) -> list[Recorded]:
    """Load historical deploys from a CSV file (header: deploy_id,target,deployed_at[,service,version,url]).

    Every row is checked before anything is written (syntax, repeated ids, known targets, the future limit, conflicts
    with stored events), then the new rows are stored in one transaction, a few thousand per statement: a bad row
    names its line and field, and leaves the warehouse as it was.
    """
    events = read_csv(path)
    seen: dict[str, int] = {}
    for line, event in events:
        first = seen.get(event.deploy_id)
        if first is not None:
            raise DeployError(f"{path}, line {line}: deploy id {event.deploy_id!r} repeats line {first}")
        seen[event.deploy_id] = line
    with engine.begin() as conn:
        # Concurrent writers of deploy events wait for this import; readers (the sensor) do not.
        conn.execute(sa.text("LOCK TABLE radar.deploy_event IN SHARE ROW EXCLUSIVE MODE"))
        targets = known_targets(conn, configured_targets)
        now = _now(conn)
        stored = get_many(conn, [e.deploy_id for _, e in events])
        recorded: list[Recorded] = []
        new: list[DeployEvent] = []
        for line, event in events:
            try:
                _check(event, targets, now)
                if event.deploy_id in stored:
                    recorded.append(_same_or_refuse(event, stored[event.deploy_id]))
                else:
                    new.append(event)
                    recorded.append(Recorded(event, inserted=True))
            except DeployError as exc:
                raise DeployError(f"{path}, line {line}: {exc}") from None
        for i in range(0, len(new), BATCH):
            _insert_many(conn, new[i : i + BATCH])
    return recorded


def read_csv(path: Path) -> list[tuple[int, DeployEvent]]:
    """(line number, event) for every row of a deploy CSV, validated field by field (UTF-8, a BOM allowed)."""
    try:
        handle = open(path, newline="", encoding="utf-8-sig")  # noqa: SIM115 - closed below
    except OSError as exc:
        raise DeployError(f"cannot read {path}: {exc.strerror}") from None
    rows: list[tuple[int, DeployEvent]] = []
    with handle:
        reader = csv.DictReader(handle)
        try:
            header = [h.strip() for h in reader.fieldnames or []]
            twice = sorted({h for h in header if header.count(h) > 1})
            if twice:  # DictReader would keep the last one's value
                raise DeployError(
                    f"{path}: the header names {', '.join(map(repr, twice))} twice: name each column once"
                )
            missing = [c for c in CSV_COLUMNS[:3] if c not in header]
            unknown = [c for c in header if c not in CSV_COLUMNS]
            if missing or unknown:
                raise DeployError(
                    f"{path}: the header must hold {', '.join(CSV_COLUMNS[:3])} and may hold "
                    f"{', '.join(CSV_COLUMNS[3:])}"
                    + (f"; missing {', '.join(missing)}" if missing else "")
                    + (f"; unknown {', '.join(map(repr, unknown))}" if unknown else "")
                )
            for row in reader:
                line = reader.line_num
                try:
                    rows.append((line, _event_of(row)))
                except DeployError as exc:
                    raise DeployError(f"{path}, line {line}: {exc}") from None
        except UnicodeDecodeError as exc:
            raise DeployError(
                f"{path} is not UTF-8 (byte 0x{exc.object[exc.start]:02x} near line {reader.line_num + 1}): "
                "save it as UTF-8 (CSV UTF-8 in Excel)"
            ) from None
        except csv.Error as exc:
            raise DeployError(f"{path}, line {reader.line_num}: not valid CSV ({exc})") from None
    return rows


def _event_of(row: dict[str | None, Any]) -> DeployEvent:
    surplus = row.get(None)
    if surplus:
        raise DeployError(f"{len(surplus)} more field(s) than the header names")
    values = {k.strip(): (v.strip() if isinstance(v, str) else v) for k, v in row.items() if k}
    if not values.get("deployed_at"):
        raise DeployError("deployed_at is empty: historical deploys need their time")
    return DeployEvent(
        deploy_id=values.get("deploy_id") or "",
        target=values.get("target") or "",
        deployed_at=parse_time(values["deployed_at"]),
        service=values.get("service") or None,
        version=values.get("version") or None,
        url=values.get("url") or None,
        source="import",
    )


def get_many(conn: sa.Connection, ids: list[str]) -> dict[str, DeployEvent]:
    """The stored events among these ids, by id."""
    found: dict[str, DeployEvent] = {}
    for i in range(0, len(ids), BATCH):
        rows = conn.execute(
            sa.text(f"SELECT {', '.join(FIELDS)} FROM radar.deploy_event WHERE deploy_id = ANY(:ids)"),
            {"ids": ids[i : i + BATCH]},
        )
        found.update({r.deploy_id: DeployEvent.stored(r._mapping) for r in rows})
    return found


def _insert_many(conn: sa.Connection, events: list[DeployEvent]) -> None:
    """One INSERT of many events from arrays (unnest), each column one parameter."""
    columns = ("deploy_id", "target", "deployed_at", "service", "version", "source", "url")
    types = ("text", "text", "timestamptz", "text", "text", "text", "text")
    conn.execute(
        sa.text(
            f"INSERT INTO radar.deploy_event ({', '.join(columns)}) "
            f"SELECT * FROM unnest({', '.join(f'CAST(:{c} AS {t}[])' for c, t in zip(columns, types, strict=True))})"
        ),
        {c: [getattr(e, c) for e in events] for c in columns},
    )


def get(conn: sa.Connection, deploy_id: str) -> DeployEvent | None:
    """The stored event with this id, or None."""
    row = conn.execute(
        sa.text(f"SELECT {', '.join(FIELDS)} FROM radar.deploy_event WHERE deploy_id = :id"), {"id": deploy_id}
    ).fetchone()
    return DeployEvent.stored(row._mapping) if row is not None else None


@dataclass(frozen=True)
class DueEvent:
    """A deploy whose analysis window has closed, with the time it became ready for the sensor."""

    deploy_id: str
    target: str
    deployed_at: datetime
    ready_at: datetime


READY_AT = "greatest(received_at, deployed_at + :delay)"


def record_timing(conn: sa.Connection, window: timedelta, settle: timedelta) -> None:
    """Record the window and settle deploy_event_sensor waits by (radar.deploy_timing), where they changed: what
    `radar deploy` and `radar gate` say a verdict is due by."""
    conn.execute(
        sa.text(
            "INSERT INTO radar.deploy_timing (window_seconds, settle_seconds) VALUES (:w, :s) "
            "ON CONFLICT (only_row) DO UPDATE SET window_seconds = EXCLUDED.window_seconds, "
            "settle_seconds = EXCLUDED.settle_seconds, updated_at = now() "
            "WHERE (radar.deploy_timing.window_seconds, radar.deploy_timing.settle_seconds) "
            "IS DISTINCT FROM (EXCLUDED.window_seconds, EXCLUDED.settle_seconds)"
        ),
        {"w": window.total_seconds(), "s": settle.total_seconds()},
    )


def recorded_timing(conn: sa.Connection) -> tuple[timedelta, timedelta] | None:
    """The window and settle deploy_event_sensor last recorded, or None (no sensor has run on this warehouse)."""
    row = conn.execute(sa.text("SELECT window_seconds, settle_seconds FROM radar.deploy_timing")).one_or_none()
    return None if row is None else (timedelta(seconds=row[0]), timedelta(seconds=row[1]))


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


# A target's window is complete once a scrape of it captured at or after the window's close is stored: its scrapes
# are written one at a time under the target's lock, each in one transaction, so every earlier scrape is stored too.
SCRAPED_PAST = (
    "EXISTS (SELECT 1 FROM radar.pgss_info_snapshot s WHERE s.target = e.target "
    "AND s.captured_at >= e.deployed_at + :window)"
)


def scraped_events(conn: sa.Connection, window: timedelta, delay: timedelta, limit: int = 200) -> list[DueEvent]:
    """Events whose window has closed but whose settle (`delay` = window + one scrape interval) has not passed, that
    have no analysis yet and whose window is complete (a scrape of their target captured at or after the close is
    stored): ready before their keyset position comes, at most `limit`, oldest first. Imported deploys are left out,
    as in due_events. Their ready_at is the keyset's, so the sensor's cursor never moves for them."""
    rows = conn.execute(
        sa.text(
            f"SELECT e.deploy_id, e.target, e.deployed_at, {READY_AT} AS ready_at FROM radar.deploy_event e "
            "WHERE e.deployed_at <= now() - :window AND e.deployed_at > now() - :delay AND e.source <> 'import' "
            "AND NOT EXISTS (SELECT 1 FROM radar.analysis a WHERE a.deploy_id = e.deploy_id) "
            f"AND {SCRAPED_PAST} ORDER BY e.deployed_at, e.deploy_id LIMIT :limit"
        ),
        {"window": window, "delay": delay, "limit": limit},
    ).fetchall()
    return [DueEvent(*r) for r in rows]


def window_scraped(conn: sa.Connection, deploy_id: str, window: timedelta) -> bool:
    """Whether the deploy's window has closed by the warehouse's clock and a scrape of its target captured at or after
    the close is stored (so every scrape of the window is)."""
    return bool(
        conn.execute(
            sa.text(
                "SELECT e.deployed_at + :window <= now() AND "
                f"{SCRAPED_PAST} FROM radar.deploy_event e WHERE e.deploy_id = :id"
            ),
            {"window": window, "id": deploy_id},
        ).scalar()
    )


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


def _began(conn: sa.Connection, started: float) -> datetime:
    """When something that began at time.monotonic() `started` began, by the warehouse's clock."""
    clock = conn.execute(sa.text("SELECT clock_timestamp()")).scalar_one()
    return clock - timedelta(seconds=max(0.0, time.monotonic() - started))  # read after the answer: never later


def _before_earliest(at: datetime) -> bool:
    try:
        return at < EARLIEST
    except OverflowError:  # an offset that takes it before year 1
        return True


def _check(event: DeployEvent, targets: set[str], now: datetime) -> None:
    """The checks that need the warehouse: a known target, not too far ahead of its clock."""
    if event.target not in targets:
        known = ", ".join(sorted(targets)) or "none yet: snapshot a target first, or set RADAR_TARGETS"
        raise UnknownTarget(f"target {event.target!r} is not known (known targets: {known})", event.target)
    deployed_at = event.deployed_at or now
    if deployed_at > now + MAX_FUTURE:
        raise DeployError(
            f"deployed_at {deployed_at.isoformat()} is more than {int(MAX_FUTURE.total_seconds() // 60)} minutes "
            f"ahead of the warehouse's clock ({now.isoformat()})"
        )


def differing(event: DeployEvent, stored: DeployEvent) -> list[str]:
    """The fields in which `event` does not say what `stored` says. deployed_at None agrees with any time, and so
    does any time when both are the same GitLab job's reports (same_job)."""
    timed = event.deployed_at is not None and not same_job(event, stored)
    return [
        name
        for name in ("target", "deployed_at", "service", "version", "url", *STATUS_FIELDS, *ARM_FIELDS)
        if (timed or name != "deployed_at") and getattr(event, name) != getattr(stored, name)
    ]


def same_job(event: DeployEvent, stored: DeployEvent) -> bool:
    """Whether the two are one GitLab job's two reports: its CI step's and its deployment webhook's (gl-<job id>).

    They differ in time by design: the CI step is recorded when `radar deploy` (or the curl) ran, just after the
    rollout, and the webhook at status_changed_at, when the whole job ended (later, at second precision). The first
    recorded time stands: in one job that is the CI step's, the nearer to when the new code went live, and it may
    already have placed the deploy's analysis window (a stored deploy is never moved). Every other fact must agree.
    """
    return (
        event.deploy_id == stored.deploy_id
        and GITLAB_JOB.fullmatch(event.deploy_id) is not None
        and (event.source == GITLAB_WEBHOOK) != (stored.source == GITLAB_WEBHOOK)
    )


def _same_or_refuse(event: DeployEvent, stored: DeployEvent) -> Recorded:
    """The stored event when `event` says the same (see differing), else DeployConflict."""
    differs = differing(event, stored)
    if differs:
        detail = "; ".join(f"{n}: stored {getattr(stored, n)!r}, given {getattr(event, n)!r}" for n in differs)
        raise DeployConflict(
            f"deploy {event.deploy_id!r} is already recorded with other values ({detail}); nothing changed",
            event.deploy_id,
            differs,
        )
    return Recorded(stored, inserted=False)


def _record(conn: sa.Connection, event: DeployEvent, targets: set[str], started: float | None = None) -> Recorded:
    now = _now(conn)
    _check(event, targets, now)
    deployed_at = event.deployed_at or (_began(conn, started) if started is not None else now)
    params = {**asdict(event), "deployed_at": deployed_at, "metadata": json.dumps(event.metadata, sort_keys=True)}
    inserted = conn.execute(
        sa.text(
            "INSERT INTO radar.deploy_event (deploy_id, target, deployed_at, service, version, source, url, metadata, "
            f"{', '.join((*STATUS_FIELDS, *ARM_FIELDS))}) "
            "VALUES (:deploy_id, :target, :deployed_at, :service, :version, :source, :url, CAST(:metadata AS jsonb), "
            f"{', '.join(':' + f for f in (*STATUS_FIELDS, *ARM_FIELDS))}) "
            "ON CONFLICT (deploy_id) DO NOTHING RETURNING deploy_id"
        ),
        params,
    ).fetchone()
    stored = get(conn, event.deploy_id)
    assert stored is not None
    if inserted is not None:
        return Recorded(stored, inserted=True)
    return _same_or_refuse(event, stored)


# The advisory lock a running analysis of a deploy holds on the warehouse, for its whole run: a sign any client may
# read in pg_locks (the gate's "analysis running"), gone with the run's session, so a crashed run leaves no mark.
_ANALYSIS_KEY = "hashtextextended('radar.analysis:' || :d, 0)"


@contextmanager
def analysing(engine: sa.Engine, deploy_id: str) -> Iterator[None]:
    """While the block runs, the warehouse shows the deploy's analysis as running (analysis_running), from a session
    of its own. Only a sign: when the mark cannot be set (the warehouse refused a connection) the analysis runs
    unmarked, and its own errors are its own."""
    try:
        conn = engine.connect()
    except sa.exc.SQLAlchemyError:
        yield
        return
    try:
        conn.execute(sa.text(f"SELECT pg_advisory_lock_shared({_ANALYSIS_KEY})"), {"d": deploy_id})
        conn.commit()
        yield
    finally:
        try:  # a pooled connection keeps its session's locks: released here, or the connection is not reused
            conn.execute(sa.text(f"SELECT pg_advisory_unlock_shared({_ANALYSIS_KEY})"), {"d": deploy_id})
            conn.commit()
        except sa.exc.SQLAlchemyError:
            conn.invalidate()
        conn.close()


def analysis_running(conn: sa.Connection, deploy_id: str) -> bool:
    """Whether an analysis of the deploy is running (analysing's mark held by a live session)."""
    return bool(
        conn.execute(
            sa.text(
                "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 1 "
                "AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
                f"AND ((classid::bigint << 32) | objid::bigint) = {_ANALYSIS_KEY})"
            ),
            {"d": deploy_id},
        ).scalar_one()
    )
