"""A release's fleet verdict, decided whenever one of its member deploys' analyses is stored (docs/fleets.md).

While some member is not analysed the fleet verdicts are `partial` (verdict `pending`: the combination so far,
shown, never detected or alerted, spending nothing), decided again at each member's analysis. When every member is
analysed they are `final` and spend a look of the release's budget (engine.budget's schedule), on the basis they
rest on: the member deploys and each one's analysed_at, recorded in radar.release_look. A final decision is kept:
deciding again on the same basis decides nothing and returns what is stored (a later look at a member, which replaces
its open statements' rows, changes no basis and is no fleet evidence: the fleet verdict rests on the members' first
looks). A new basis spends the next look: a member that joins the release later (a deploy recorded with the same
release id after the release was decided) makes the release partial until it is analysed, and a reanalysis that has
reached every member (each one's analysed_at changed).

Later looks (run_release_look, requested by the release_look_sensor when due_release_looks finds them due): at look k
(engine.budget.LOOK_SPANS[k] · W after the deploys), the keys still open at the fleet level (final, inconclusive) are
decided again on each member's evidence over its own look-k spans (look_spans.look_span: its previous and next
deploys cut them; look_spans.look_evidence reads its counters, its own verdicts decided or not), at look_budget(B, k)
· the key's share of the family, the share fixed when the family was formed (never handed on from a decided key). A
decided fleet key (detected, no_regression) is kept. Every look number is spent once (radar.release_look's key), by a
new basis or a timed look, whichever comes first; Σ_k look_budget(B, k) = B, so the release's false fleet detections
stay within B over all its decisions (docs/fleets.md). Past the schedule's last look a release is still decided and
shown, but can no longer detect.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pandas as pd
import sqlalchemy as sa

from radar_pipeline.engine.budget import LOOK_SPANS, LOOK_SPENDING, clear_dilution
from radar_pipeline.engine.frames import FLEET_EVIDENCE, RELEASE_STORED
from radar_pipeline.engine.releases import MIN_TARGETS, fleet_verdicts
from radar_pipeline.engine.settings import EngineSettings
from radar_pipeline.engine.vocabulary import Verdict
from radar_pipeline.pgss_model import KEY
from radar_pipeline.steps.look_spans import look_evidence, look_span
from radar_pipeline.warehouse import releases as store
from radar_pipeline.warehouse.releases import Release, ReleaseError

PARTIAL, FINAL = "partial", "final"


@dataclass(frozen=True)
class ReleaseDecision:
    """One decision of a release: the release, partial or final, the look it spent (None while partial) and its
    fleet verdicts as stored (warehouse.releases.STORED)."""

    release: Release
    status: str
    look: int | None
    verdicts: pd.DataFrame

    @property
    def detected(self) -> pd.DataFrame:
        """The fleet detections."""
        return self.verdicts[self.verdicts["verdict"] == Verdict.DETECTED]


def decide_release(engine: sa.Engine, release_id: str, settings: EngineSettings) -> ReleaseDecision:
    """Decide the release's fleet verdicts from what is stored and store them (replacing its earlier ones), in one
    transaction under the release's lock; a complete release whose last final decision rests on the same basis is
    not decided again: its stored verdicts are returned (module docstring). A ReleaseError names an unknown release,
    or one deployed to fewer than MIN_TARGETS targets; nothing is stored then. The member statements whose first
    look's row a member's own later look replaced are read from their counters first, outside the transaction
    (_replaced_evidence); skipped when the last decision stands, and read after all when it no longer does under the
    lock (the decision is then made again)."""
    replaced = _replaced_evidence(engine, release_id, settings, skip_standing=True)
    try:
        return _decide(engine, release_id, settings, replaced)
    except _EvidenceSkipped:
        return _decide(engine, release_id, settings, _replaced_evidence(engine, release_id, settings))


class _EvidenceSkipped(Exception):
    """The replaced statements' evidence was not read (the decision stood), and it no longer stands."""


def _decide(
    engine: sa.Engine, release_id: str, settings: EngineSettings, replaced: pd.DataFrame | None
) -> ReleaseDecision:
    """decide_release's transaction, with the replaced statements' evidence (None: not read)."""
    with engine.begin() as conn:
        store.lock(conn, release_id)
        found = store.release(conn, release_id)
        if len(found.members) < MIN_TARGETS:
            raise ReleaseError(
                f"release {release_id!r} was deployed to {len(found.members)} target only "
                f"({', '.join(found.targets)}): a fleet verdict needs {MIN_TARGETS} or more"
            )
        look = None
        if found.complete:
            basis = store.basis_of(found.members)
            last = store.last_look(conn, release_id)
            if last is not None and _stands(last, basis):
                kept = _kept(store.release_verdicts(conn, release_id), last.look)
                if kept is not None:
                    return ReleaseDecision(found, FINAL, last.look, kept)
            look = store.record_look(conn, release_id, basis)
        if replaced is None:
            raise _EvidenceSkipped  # the look recorded is rolled back with the transaction
        evidence = _first_looks(store.member_evidence(conn, found.members), replaced, found.members)
        rows = _verdicts(found, evidence, look, settings)
        store.write_release_verdicts(conn, release_id, rows)
    return ReleaseDecision(found, FINAL if look is not None else PARTIAL, look, rows)


def _replaced_evidence(
    engine: sa.Engine, release_id: str, settings: EngineSettings, skip_standing: bool = False
) -> pd.DataFrame | None:
    """The first-look evidence of the member statements whose first look's verdict row a member's own later look
    replaced (warehouse.releases.replaced_statements), read again from the member's counters over its look-0 spans
    (member_spans at look 0, look_spans.look_evidence): a member's later look that ran before the release's first
    final decision (a late member, a staggered rollout) must not thin the release's evidence to the statements it
    left open. Columns as warehouse.releases.member_evidence; empty when no member had a later look; None, with
    `skip_standing`, when the release's last decision stands (it is kept: nothing read)."""
    with engine.connect() as conn:
        try:
            found = store.release(conn, release_id)
        except ReleaseError:
            return pd.DataFrame()
        if skip_standing and found.complete:
            last = store.last_look(conn, release_id)
            if last is not None and _stands(last, store.basis_of(found.members)):
                return None
        analysed = found.members[found.members["analysed"]]
        statements = {
            str(m.deploy_id): store.replaced_statements(conn, str(m.deploy_id), str(m.target))
            for m in analysed.itertuples()
        }
        touched = analysed[[not statements[str(d)].empty for d in analysed["deploy_id"]]]
        spans = member_spans(settings, 0, touched, neighbours(conn, touched)) if len(touched) else {}
        conn.rollback()
    parts = []
    for m in touched.itertuples():
        at = pd.Timestamp(m.deployed_at).to_pydatetime()
        only = statements[str(m.deploy_id)]
        got = look_evidence(engine, settings, str(m.target), at, spans[str(m.deploy_id)], only)
        got = got[np.isfinite(got["deploy_log_se"].astype(float))]
        if got.empty:
            continue
        parts.append(
            pd.DataFrame(
                {
                    "deploy_id": str(m.deploy_id),
                    "target": str(m.target),
                    "fingerprint": got["fingerprint"].to_numpy(dtype=np.int64),
                    "toplevel": got["toplevel"].to_numpy(dtype=bool),
                    "dbid": got["dbid"].to_numpy(dtype=np.int64),
                    "userid": got["userid"].to_numpy(dtype=np.int64),
                    "queryid": got["queryid"].to_numpy(dtype=np.int64),
                    "log_factor": got["deploy_log_factor"].to_numpy(dtype=np.float64),
                    "se": got["deploy_log_se"].to_numpy(dtype=np.float64),
                    "time_before": got["time_before"].to_numpy(dtype=np.float64),
                    "busy": (got["calls_before"] + got["calls_after"]).to_numpy(dtype=np.float64),
                }
            )
        )
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def _first_looks(stored: pd.DataFrame, replaced: pd.DataFrame, members: pd.DataFrame) -> pd.DataFrame:
    """The members' first-look evidence: their stored look-0 rows and the replaced statements' evidence read again
    (of deploys still members), the busiest statement per member and key."""
    if replaced.empty:
        return stored
    current = set(zip(members["deploy_id"].astype(str), members["target"].astype(str), strict=True))
    replaced = replaced[[(d, t) in current for d, t in zip(replaced["deploy_id"], replaced["target"], strict=True)]]
    whole = pd.concat([stored, replaced], ignore_index=True) if len(stored) else replaced
    whole = whole.sort_values("busy", ascending=False, kind="stable")
    whole = whole.drop_duplicates(["deploy_id", "target", "fingerprint", "toplevel"])
    return whole.sort_values(["deploy_id", "target", "fingerprint", "toplevel"], kind="stable").reset_index(drop=True)


def _stands(last: store.Look, basis: tuple[tuple[str, datetime], ...]) -> bool:
    """Whether the release's last final decision stands on this basis: the same member deploys, not every one of
    them analysed again since. The nightly reanalysis reaches the members one run at a time: the decision stands until
    it has reached them all, then the next look decides on the new analyses (a look per reanalysis of the release,
    not one per member)."""
    if [d for d, _ in last.basis] != [d for d, _ in basis]:
        return False
    return any(then == now for (_, then), (_, now) in zip(last.basis, basis, strict=True))


def _kept(stored: pd.DataFrame, look: int) -> pd.DataFrame | None:
    """The stored verdicts when they are final decisions up to this look (a later look re-decides only the open
    keys: each row says the look that last decided it), else None (a late member made them partial since, and left
    the release again: decided anew, at the next look)."""
    if stored.empty or ((stored["status"] == FINAL) & (stored["look"] <= look)).all():
        return stored
    return None


def stored_decision_of(engine: sa.Engine, deploy_id: str) -> ReleaseDecision | str:
    """The stored decision of the release the deploy belongs to, deciding nothing (for a retry of its alerts), or
    why there is none, in words."""
    with engine.connect() as conn:
        release_id = store.release_of_deploy(conn, deploy_id)
        if release_id is None:
            return f"deploy {deploy_id} is not part of a release (no release id, no other target's deploy inferred)"
        try:
            found = store.release(conn, release_id)
        except ReleaseError as exc:
            return str(exc)
        stored = store.release_verdicts(conn, release_id)
    if stored.empty or not (stored["status"] == FINAL).all():
        return ReleaseDecision(found, PARTIAL, None, stored)
    return ReleaseDecision(found, FINAL, int(stored["look"].max()), stored)


def decide_release_of(engine: sa.Engine, deploy_id: str, settings: EngineSettings) -> ReleaseDecision | str:
    """The decision of the release the deploy belongs to, or why there is none (no release, or a release of one
    target), in words."""
    with engine.connect() as conn:
        release_id = store.release_of_deploy(conn, deploy_id)
    if release_id is None:
        return f"deploy {deploy_id} is not part of a release (no release id, no other target's deploy inferred)"
    try:
        return decide_release(engine, release_id, settings)
    except ReleaseError as exc:
        return str(exc)


def _verdicts(found: Release, evidence: pd.DataFrame, look: int | None, settings: EngineSettings) -> pd.DataFrame:
    """The fleet verdicts as stored: the engine's combination, the status, and an example statement per key."""
    evidence = evidence.assign(key=list(zip(evidence["fingerprint"], evidence["toplevel"], strict=True)))
    spends = look is not None and look < len(LOOK_SPENDING)
    out = fleet_verdicts(
        evidence,
        settings.threshold,
        settings.false_alert_budget,
        look=look if spends and look is not None else 0,
        time_weight=settings.budget_time_weight,
        clear_level=settings.clear_level,
        fleet_size=len(found.members),
        dilution=clear_dilution(settings.tolerance, settings.window),
    )
    written = [c for c in store.STORED if c != "release_id"]
    if out.empty:
        return pd.DataFrame(columns=written)
    if look is None:
        RELEASE_STORED.assign(out, "verdict", "pending")
    elif not spends:  # past the schedule's last look: shown, no longer detected
        detected = out["verdict"] == Verdict.DETECTED
        RELEASE_STORED.assign(out, "verdict", np.where(detected, Verdict.INCONCLUSIVE.value, out["verdict"]))
        RELEASE_STORED.assign(out, "budget_share", 0.0)
    example = evidence.sort_values("time_before", ascending=False).drop_duplicates("key").set_index("key")
    picked = example.loc[out["key"]]
    RELEASE_STORED.assign(out, "fingerprint", [k[0] for k in out["key"]])
    RELEASE_STORED.assign(out, "toplevel", [bool(k[1]) for k in out["key"]])
    RELEASE_STORED.assign(out, "status", FINAL if look is not None else PARTIAL)
    RELEASE_STORED.assign(out, "look", look)
    RELEASE_STORED.assign(out, "look_after", None)  # the members' first looks
    RELEASE_STORED.assign(out, "member_targets", out["members"])
    RELEASE_STORED.assign(out, "members", len(found.members))
    RELEASE_STORED.assign(out, "analysed", int(found.members["analysed"].sum()))
    for column in ("deploy_id", "target", "queryid", "dbid", "userid"):
        RELEASE_STORED.assign(out, f"example_{column}", picked[column].to_numpy())
    return RELEASE_STORED.check(out, "steps.releases")[written]


ALERT_TARGET_PREFIX = "release:"  # the outbox's target for a release's fleet detections


def deliver_fleet_alerts(
    log: logging.Logger, engine: sa.Engine, sender: Any, decision: ReleaseDecision, withhold: str | None = None
) -> dict[str, Any]:
    """Announce the release's final fleet detections in one message, through the outbox (radar.outbox): a detection row
    per detected key under the release's earliest member deploy and the target "release:<id>" (dbid and userid 0, the
    fingerprint as queryid), claimed before sending and settled after, so a detection is sent once whichever member's
    run decides it; rows an earlier attempt may have posted (no answer came) are looked for in the channel first, as
    steps.alert_delivery does. With `withhold` (a reason) the rows are recorded as withheld and nothing is sent."""
    from radar_pipeline.alerts.render import FleetRegression, render_fleet
    from radar_pipeline.steps.alert_delivery import claim_due, send_message

    found = decision.detected if decision.status == FINAL else decision.verdicts.iloc[0:0]
    metadata: dict[str, Any] = {"fleet_detections": len(found), "to_send": 0}
    if found.empty:
        return metadata
    target = ALERT_TARGET_PREFIX + decision.release.release_id
    keys = [(0, 0, int(fp), bool(top)) for fp, top in zip(found["fingerprint"], found["toplevel"], strict=True)]
    claimed_due = claim_due(log, engine, sender, decision.release.anchor, target, keys, withhold, metadata)
    if claimed_due is None:
        return metadata
    todo, delivery = claimed_due
    due = set(todo)
    rows = [r for r, k in zip(found.itertuples(), keys, strict=True) if k in due]
    text, blocks = render_fleet(
        decision.release.release_id,
        [
            FleetRegression(
                query=str(r.query) if isinstance(getattr(r, "query", None), str) else f"fingerprint {r.fingerprint}",
                report=_found_when(r),
                factor=r.factor,
                factor_low=r.factor_low,
                factor_high=r.factor_high,
                p_family=r.p_family,
                targets=r.targets,
            )
            for r in rows
        ],
    )
    metadata["to_send"] = len(rows)
    metadata["message"] = {"text": text, "blocks": blocks}
    todo = [k for k in keys if k in due]
    if not sender.configured:
        log.info(f"Slack is not configured; the fleet alert would read:\n{text}")
        delivery.settle(delivery.claimed.of(todo), "skipped")
        return metadata
    send_message(delivery, lambda delivery_id: sender.send(text, blocks, delivery_id=delivery_id), todo, metadata)
    return metadata


def fleet_withhold_reason(
    decision: ReleaseDecision, window: timedelta, max_age: timedelta, now: datetime, reanalysis: str | None = None
) -> str | None:
    """Why the decision's fleet alerts are recorded but not sent, or None to send them: `reanalysis` (the reason,
    when the run continues the nightly reanalysis), or, as every other alert (steps.alert_delivery.withhold_reason),
    evidence whose window closed more than `max_age` ago: the last member's deploy plus W (the members' first looks)
    or plus the latest later look's after side among the detections."""
    from radar_pipeline.steps.alert_delivery import withhold_reason

    if reanalysis is not None:
        return reanalysis
    if decision.release.members.empty:
        return None
    after = window
    for value in decision.detected.get("look_after", pd.Series(dtype=object)):
        if isinstance(value, timedelta) and value > after:
            after = value
    closed = pd.Timestamp(decision.release.members["deployed_at"].max()).to_pydatetime() + after
    return withhold_reason(pd.DataFrame({"window_end": [closed]}), max_age, now)


def _found_when(row: Any) -> str:
    """The fleet report, and for a detection a later look made, when: "…, found 2 h after the release"."""
    from radar_pipeline.alerts.render import span_words

    after = getattr(row, "look_after", None)
    if after is None or after is pd.NaT or not isinstance(after, timedelta):
        return str(row.report)
    return f"{row.report}, found {span_words(after)} after the release (look {int(row.look)})"


def alert_release(
    log: logging.Logger,
    engine: sa.Engine,
    sender: Any,
    decision: ReleaseDecision,
    window: timedelta,
    max_age: timedelta,
    reanalysis: str | None = None,
) -> tuple[ReleaseDecision, dict[str, Any]]:
    """The decision with its statements' texts (with_text) and its fleet detections delivered (deliver_fleet_alerts),
    or recorded withheld (fleet_withhold_reason: `reanalysis`, the reason when the run continues the nightly
    reanalysis, or evidence older than `max_age`): what a release's decision and its later looks both send."""
    decision = with_text(engine, decision)
    withhold = fleet_withhold_reason(decision, window, max_age, datetime.now(UTC), reanalysis)
    return decision, deliver_fleet_alerts(log, engine, sender, decision, withhold=withhold)


def with_text(engine: sa.Engine, decision: ReleaseDecision) -> ReleaseDecision:
    """The decision with each verdict's example statement text (query) read from the warehouse."""
    with engine.connect() as conn:
        stored = store.release_verdicts(conn, decision.release.release_id)
    return ReleaseDecision(decision.release, decision.status, decision.look, stored)


# --- later looks at a release -------------------------------------------------------------------------------------

LAST_LOOK = len(LOOK_SPANS) - 1
# Looks are news (as a deploy's, warehouse.looks.HORIZON): a release look that fell due more than this long ago is
# not run (a backfill over old releases starts none).
HORIZON = timedelta(days=1)
OPEN_AT_FLEET = Verdict.INCONCLUSIVE.value  # a final fleet verdict neither detected nor cleared
CANDIDATES = 1000  # releases with a key open read per evaluation at most, the longest decided first


class ReleaseLookRefused(RuntimeError):
    """A later look at a release cannot run now (named in the message); nothing was written."""


@dataclass(frozen=True)
class ReleaseLookResult:
    """A later look at a release: the decision after it, how many keys were open, the rows it re-decided (detected
    or no_regression), the longest member's after side, and each member's spans (by deploy id)."""

    decision: ReleaseDecision
    look: int
    opened: int
    decided: pd.DataFrame
    after: timedelta
    spans: dict[str, Any]


def neighbours(conn: sa.Connection, members: pd.DataFrame) -> dict[str, tuple[datetime | None, datetime | None]]:
    """Each member deploy's previous and next deploy on its target (by deploy id; None where there is none)."""
    from radar_pipeline.warehouse.looks import neighbour_deploys

    return {
        str(m.deploy_id): neighbour_deploys(conn, str(m.target), pd.Timestamp(m.deployed_at).to_pydatetime())
        for m in members.itertuples()
    }


def member_spans(
    settings: EngineSettings,
    look: int,
    members: pd.DataFrame,
    around: dict[str, tuple[datetime | None, datetime | None]],
) -> dict[str, Any]:
    """Each member deploy's spans at look `look` (look_spans.look_span, by deploy id), with its neighbouring deploys
    (`around`, from neighbours): its previous deploy limits the before side, its next deploy cuts the after side. A
    member cut before this look keeps its cut span (all the after side it will ever have: its evidence there is still
    evidence of the release)."""
    spans: dict[str, Any] = {}
    for m in members.itertuples():
        previous, following = around[str(m.deploy_id)]
        at = pd.Timestamp(m.deployed_at).to_pydatetime()
        span = look_span(settings, look, at, previous, following, previous_after=timedelta(0))
        assert span is not None  # with previous_after 0 a span is never refused
        spans[str(m.deploy_id)] = span
    return spans


def look_due_at(members: pd.DataFrame, spans: dict[str, Any], settle: timedelta) -> datetime:
    """When a release's look is due: every member past its look's after side (its own, cut by its next deploy),
    plus one scrape interval."""
    ends = [pd.Timestamp(m.deployed_at).to_pydatetime() + spans[str(m.deploy_id)].after for m in members.itertuples()]
    return max(ends) + settle


def due_release_looks(
    conn: sa.Connection, settings: EngineSettings, settle: timedelta, now: datetime | None = None, limit: int = 100
) -> list[store.DueReleaseLook]:
    """The later looks of releases due now (by the warehouse's clock): of each final release with a key open at the
    fleet level, whose last decision's basis stands, the latest look not yet taken (done or failed) whose members
    are all past its after side plus `settle` (a look overtaken by a later one that is due is skipped: its share is
    left unspent). A look due more than HORIZON ago is not run. Each says how long it has waited (since it fell due,
    or since the decision it continues, when later): its sensor numbers its attempts by it
    (warehouse.looks.look_attempt)."""
    clock = now or conn.execute(sa.text("SELECT now()")).scalar_one()
    since = clock - HORIZON - settings.window * LOOK_SPANS[-1]
    due: list[store.DueReleaseLook] = []
    for c in store.candidate_releases(conn, since, CANDIDATES).itertuples():
        if len(due) >= limit:
            break
        try:
            found = store.release(conn, str(c.release_id))
        except ReleaseError:
            continue
        last = store.Look(int(c.look), tuple(zip(c.member_deploys, c.member_analysed_at or [], strict=False)))
        if not found.complete or not _stands(last, store.basis_of(found.members)):
            continue  # release_verdicts decides it anew when its members' analyses are stored
        around = neighbours(conn, found.members)
        for look in range(LAST_LOOK, int(c.looks_taken), -1):
            at = look_due_at(found.members, member_spans(settings, look, found.members, around), settle)
            if at <= clock:
                if at > clock - HORIZON:
                    runs = store.analysis_runs(conn, [str(d) for d in found.members["deploy_id"]])
                    since = max([at, *(a for _, a in last.basis if a is not None)])  # a release decided late
                    due.append(store.DueReleaseLook(str(c.release_id), look, last.basis, at, runs, clock - since))
                break
    return due


def run_release_look(
    engine: sa.Engine,
    settings: EngineSettings,
    release_id: str,
    look: int,
    settle: timedelta,
    run_id: str | None = None,
    now: datetime | None = None,
) -> ReleaseLookResult:
    """Run timed look `look` (1 … LAST_LOOK) of a final release and store it in one transaction under the release's
    lock: its open keys decided again on the members' evidence over their look spans, at the look's budget with
    each key's share of the family; decided keys kept; the look recorded in radar.release_look (kind timed).
    Refused (ReleaseLookRefused, nothing written) when the release has no final decision, its members changed since
    (release_verdicts decides it anew), the look is out of range or already taken, or not due by the warehouse's
    clock; checked again under the lock before writing."""
    if not 1 <= look <= LAST_LOOK:
        raise ReleaseLookRefused(f"look must lie in 1..{LAST_LOOK}, not {look}")
    with engine.connect() as conn:
        found, last = _lookable(conn, release_id, look)
        spans = member_spans(settings, look, found.members, neighbours(conn, found.members))
        clock = now or conn.execute(sa.text("SELECT now()")).scalar_one()
        due = look_due_at(found.members, spans, settle)
        if clock < due:
            raise ReleaseLookRefused(
                f"look {look} of release {release_id!r} is due at {due.isoformat()} (every member past its look's "
                f"after side); it is {clock.isoformat()} now"
            )
        stored = store.release_verdicts(conn, release_id)
        still = stored[
            (stored["status"] == FINAL) & (stored["verdict"] == OPEN_AT_FLEET) & (stored["family_weight"] > 0)
        ]
        keys = [(int(f), bool(t)) for f, t in zip(still["fingerprint"], still["toplevel"], strict=True)]
        statements = {
            str(m.deploy_id): store.member_statements(conn, str(m.deploy_id), str(m.target), keys)
            for m in found.members.itertuples()
        }
        conn.rollback()
    after = max(span.after for span in spans.values())
    out = pd.DataFrame()
    if keys:
        evidence = _look_evidence(engine, settings, found.members, spans, statements)
        shares = pd.Series(still["family_weight"].to_numpy(dtype=np.float64), index=pd.Index(keys, tupleize_cols=False))
        out = fleet_verdicts(
            evidence,
            settings.threshold,
            settings.false_alert_budget,
            look=look,
            time_weight=settings.budget_time_weight,
            clear_level=settings.clear_level,
            fleet_size=len(found.members),
            shares=shares,
            dilution=clear_dilution(settings.tolerance, min(span.after for span in spans.values())),
        )
    rows = _merged(stored, out, look, after)
    decided = rows[(rows["look"] == look) & (rows["verdict"] != OPEN_AT_FLEET)] if len(out) else rows.iloc[0:0]
    with engine.begin() as conn:
        store.lock(conn, release_id)
        again, last_again = _lookable(conn, release_id, look)
        if last_again != last or store.basis_of(again.members) != store.basis_of(found.members):
            raise ReleaseLookRefused(
                f"release {release_id!r} was decided again while its look {look} ran: nothing written"
            )
        store.record_look(
            conn,
            release_id,
            last.basis or store.basis_of(found.members),
            look,
            store.TIMED,
            {
                "opened": len(keys),
                "detected": int((decided["verdict"] == Verdict.DETECTED).sum()),
                "cleared": int((decided["verdict"] == Verdict.NO_REGRESSION).sum()),
                "after_span": after,
                "run_id": run_id,
            },
        )
        store.write_release_verdicts(conn, release_id, rows[[c for c in store.STORED if c != "release_id"]])
    decision = ReleaseDecision(found, FINAL, look, rows)
    return ReleaseLookResult(decision, look, len(keys), decided, after, spans)


def stored_release_look(engine: sa.Engine, release_id: str, look: int) -> ReleaseLookResult | None:
    """Timed look `look` of the release as stored, when it is the release's last look done (a retry of a run that
    stored the look and then failed, delivering its alerts): the decision, the rows it decided, its after side;
    else None. Decides nothing."""
    with engine.connect() as conn:
        row = conn.execute(
            sa.text(
                "SELECT look, kind, opened, after_span FROM radar.release_look WHERE release_id = :r "
                "AND status = 'done' ORDER BY look DESC LIMIT 1"
            ),
            {"r": release_id},
        ).first()
        if row is None or int(row.look) != look or row.kind != store.TIMED:
            return None
        found = store.release(conn, release_id)
        rows = store.release_verdicts(conn, release_id)
    decided = rows[(rows["look"] == look) & (rows["verdict"] != OPEN_AT_FLEET)]
    decision = ReleaseDecision(found, FINAL, look, rows)
    return ReleaseLookResult(decision, look, int(row.opened or 0), decided, row.after_span or timedelta(0), {})


def record_failed_release_look(engine: sa.Engine, release_id: str, look: int, run_id: str | None, log: Any) -> None:
    """Record that timed look `look` of the release failed (warehouse.releases.record_failed): it is due no more and
    its share of B is left unspent; a retry that succeeds records it done. When even that cannot be written, `log`
    says so and the caller's error stands."""
    try:
        with engine.begin() as conn:
            store.lock(conn, release_id)
            last = store.last_look(conn, release_id)
            if last is None:
                return
            store.record_failed(conn, release_id, look, last.basis, run_id)
    except Exception as exc:  # noqa: BLE001 - the look's own error is the one to raise
        log.warning(f"look {look} of release {release_id!r} failed and could not be recorded so: {exc}")


def _lookable(conn: sa.Connection, release_id: str, look: int) -> tuple[Release, store.Look]:
    """The release and its last final decision, when timed look `look` may run on them (else refused)."""
    try:
        found = store.release(conn, release_id)
    except ReleaseError as exc:
        raise ReleaseLookRefused(str(exc)) from None
    last = store.last_look(conn, release_id)
    if last is None or not found.complete:
        raise ReleaseLookRefused(f"release {release_id!r} has no final decision yet: its later looks wait for it")
    if not _stands(last, store.basis_of(found.members)):
        raise ReleaseLookRefused(
            f"release {release_id!r}'s members changed since its last decision (a late member, a reanalysis): "
            "release_verdicts decides it anew, at its next look"
        )
    taken = store.looks_taken(conn, release_id, retrying=look)  # a retry of a failed attempt may take it
    if taken >= look:
        raise ReleaseLookRefused(f"release {release_id!r} has taken look {taken} already: look {look} is past")
    return found, last


def _look_evidence(
    engine: sa.Engine,
    settings: EngineSettings,
    members: pd.DataFrame,
    spans: dict[str, Any],
    statements: dict[str, pd.DataFrame],
) -> pd.DataFrame:
    """The fleet evidence at a look (engine.frames.FLEET_EVIDENCE, key = (fingerprint, toplevel)): per member
    and key, the busiest of its statements with that key over the member's look spans (look_spans.look_evidence),
    where decidable."""
    parts = []
    for m in members.itertuples():
        only = statements[str(m.deploy_id)]
        if only.empty:
            continue
        at = pd.Timestamp(m.deployed_at).to_pydatetime()
        got = look_evidence(engine, settings, str(m.target), at, spans[str(m.deploy_id)], only[list(KEY)])
        got = got[got["decidable"].astype(bool) & np.isfinite(got["deploy_log_se"].astype(float))]
        if got.empty:
            continue
        got = got.assign(busy=got["calls_before"] + got["calls_after"]).sort_values("busy", ascending=False)
        got = got.assign(key=list(zip(got["fingerprint"].astype(np.int64), got["toplevel"].astype(bool), strict=True)))
        got = got.drop_duplicates("key")
        parts.append(
            pd.DataFrame(
                {
                    "key": got["key"].to_numpy(),
                    "target": str(m.target),
                    "log_factor": got["deploy_log_factor"].to_numpy(dtype=np.float64),
                    "se": got["deploy_log_se"].to_numpy(dtype=np.float64),
                    "time_before": got["time_before"].to_numpy(dtype=np.float64),
                }
            )
        )
    if not parts:
        return pd.DataFrame(columns=FLEET_EVIDENCE.names)
    return pd.concat(parts, ignore_index=True)


# What a later look replaces in a re-decided key's row: its combination, verdict and the look; its example statement
# and the release's counts stay.
RECOMBINED = [
    "targets",
    "factor",
    "factor_low",
    "factor_high",
    "p_value",
    "p_family",
    "budget_share",
    "verdict",
    "consistent",
    "heterogeneity_p",
    "i_squared",
    "tau2",
    "targets_agreeing",
    "only_on",
    "report",
]


def _merged(stored: pd.DataFrame, out: pd.DataFrame, look: int, after: timedelta) -> pd.DataFrame:
    """The stored rows with the keys a later look re-decided replaced (RECOMBINED, member_targets, look, look_after):
    every other row as it was."""
    rows = stored.copy()
    rows["look_after"] = rows["look_after"].astype(object).where(rows["look_after"].notna(), None)
    if out.empty:
        return rows
    keys = zip(rows["fingerprint"].astype(np.int64), rows["toplevel"].astype(bool), strict=True)
    at = {(int(f), bool(t)): i for i, (f, t) in enumerate(keys)}
    index = [rows.index[at[(int(k[0]), bool(k[1]))]] for k in out["key"]]
    for column in RECOMBINED:
        rows[column] = rows[column].astype(object)
        rows.loc[index, column] = pd.Series(list(out[column]), index=index, dtype=object)
    rows.loc[index, "member_targets"] = pd.Series(list(out["members"]), index=index, dtype=object)
    rows.loc[index, "look"] = look
    rows.loc[index, "look_after"] = pd.Series([after] * len(index), index=index, dtype=object)
    return rows
