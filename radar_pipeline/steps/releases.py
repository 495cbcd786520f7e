"""A release's fleet verdict, decided whenever one of its member deploys' analyses is stored (docs/fleets.md).

While some member is not analysed the fleet verdicts are `partial` (verdict `pending`: the combination so far,
shown, never detected or alerted, spending nothing), decided again at each member's analysis. When every member is
analysed they are `final` and spend a look of the release's budget (engine.budget's schedule), on the basis they
rest on: the member deploys and each one's analysed_at, recorded in radar.release_look. A final decision is kept:
deciding again on the same basis decides nothing and returns what is stored (a later look at a member, which replaces
its open statements' rows, changes no basis and is no fleet evidence: the fleet verdict rests on the members' first
looks). Only a new basis spends the next look: a member that joins the release later (a deploy recorded with the
same release id after the release was decided) makes the release partial until it is analysed, and a reanalysis
that has reached every member (each one's analysed_at changed); so the release's false fleet detections stay within
B over all its decisions. Past the schedule's last look a release is still decided and shown, but can no longer detect.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
import pandas as pd
import sqlalchemy as sa

from radar_pipeline.engine.budget import LOOK_SPENDING
from radar_pipeline.engine.releases import MIN_TARGETS, fleet_verdicts
from radar_pipeline.engine.settings import EngineSettings
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
        return self.verdicts[self.verdicts["verdict"] == "detected"]


def decide_release(engine: sa.Engine, release_id: str, settings: EngineSettings) -> ReleaseDecision:
    """Decide the release's fleet verdicts from what is stored and store them (replacing its earlier ones), in one
    transaction under the release's lock; a complete release whose last final decision rests on the same basis is
    not decided again: its stored verdicts are returned (module docstring). A ReleaseError names an unknown release,
    or one deployed to fewer than MIN_TARGETS targets; nothing is stored then."""
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
        evidence = store.member_evidence(conn, found.members)
        rows = _verdicts(found, evidence, look, settings)
        store.write_release_verdicts(conn, release_id, rows)
    return ReleaseDecision(found, FINAL if look is not None else PARTIAL, look, rows)


def _stands(last: store.Look, basis: tuple[tuple[str, datetime], ...]) -> bool:
    """Whether the release's last final decision stands on this basis: the same member deploys, not every one of
    them analysed again since. The nightly reanalysis reaches the members one run at a time: the decision stands until
    it has reached them all, then the next look decides on the new analyses (a look per reanalysis of the release,
    not one per member)."""
    if [d for d, _ in last.basis] != [d for d, _ in basis]:
        return False
    return any(then == now for (_, then), (_, now) in zip(last.basis, basis, strict=True))


def _kept(stored: pd.DataFrame, look: int) -> pd.DataFrame | None:
    """The stored verdicts when they are the final decision of this look, else None (a late member made them
    partial since, and left the release again: decided anew, at the next look)."""
    if stored.empty or ((stored["status"] == FINAL) & (stored["look"] == look)).all():
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
    return ReleaseDecision(found, FINAL, int(stored["look"].iloc[0]), stored)


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
    )
    if out.empty:
        return pd.DataFrame(columns=[c for c in store.STORED if c != "release_id"])
    if look is None:
        out["verdict"] = "pending"
    elif not spends:  # past the schedule's last look: shown, no longer detected
        out["verdict"] = np.where(out["verdict"] == "detected", "inconclusive", out["verdict"])
        out["budget_share"] = 0.0
    example = evidence.sort_values("time_before", ascending=False).drop_duplicates("key").set_index("key")
    picked = example.loc[out["key"]]
    out["fingerprint"] = [k[0] for k in out["key"]]
    out["toplevel"] = [bool(k[1]) for k in out["key"]]
    out["status"] = FINAL if look is not None else PARTIAL
    out["look"] = look
    out["member_targets"] = out["members"]
    out["members"] = len(found.members)
    out["analysed"] = int(found.members["analysed"].sum())
    out["example_deploy_id"] = picked["deploy_id"].to_numpy()
    out["example_target"] = picked["target"].to_numpy()
    out["example_queryid"] = picked["queryid"].to_numpy()
    out["example_dbid"] = picked["dbid"].to_numpy()
    out["example_userid"] = picked["userid"].to_numpy()
    return out[[c for c in store.STORED if c != "release_id"]]


ALERT_TARGET_PREFIX = "release:"  # radar.alert's target for a release's fleet detections


def deliver_fleet_alerts(
    log: logging.Logger, engine: sa.Engine, sender: Any, decision: ReleaseDecision, withhold: str | None = None
) -> dict[str, Any]:
    """Announce the release's final fleet detections in one message, through the outbox (radar.alert): a row per
    detected key under the release's earliest member deploy and the target "release:<id>" (dbid and userid 0, the
    fingerprint as queryid), claimed before sending and settled after, so a detection is sent once whichever member's
    run decides it; rows an earlier attempt may have posted (no answer came) are looked for in the channel first, as
    steps.alert_delivery does. With `withhold` (a reason) the rows are recorded as withheld and nothing is sent."""
    from radar_pipeline.alerts.render import FleetRegression, render_fleet
    from radar_pipeline.steps.alert_delivery import claim_due, send_and_settle

    found = decision.detected if decision.status == FINAL else decision.verdicts.iloc[0:0]
    metadata: dict[str, Any] = {"fleet_detections": len(found), "to_send": 0}
    if found.empty:
        return metadata
    target = ALERT_TARGET_PREFIX + decision.release.release_id
    keys = [(0, 0, int(fp), bool(top)) for fp, top in zip(found["fingerprint"], found["toplevel"], strict=True)]
    claimed_due = claim_due(log, engine, sender, decision.release.anchor, target, keys, withhold, metadata)
    if claimed_due is None:
        return metadata
    todo, claimed, settle = claimed_due
    due = set(todo)
    rows = [r for r, k in zip(found.itertuples(), keys, strict=True) if k in due]
    text, blocks = render_fleet(
        decision.release.release_id,
        [
            FleetRegression(
                query=str(r.query) if isinstance(getattr(r, "query", None), str) else f"fingerprint {r.fingerprint}",
                report=r.report,
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
        settle(todo, "skipped")
        return metadata
    send_and_settle(log, sender, text, blocks, [], claimed, todo, settle)
    return metadata


def with_text(engine: sa.Engine, decision: ReleaseDecision) -> ReleaseDecision:
    """The decision with each verdict's example statement text (query) read from the warehouse."""
    with engine.connect() as conn:
        stored = store.release_verdicts(conn, decision.release.release_id)
    return ReleaseDecision(decision.release, decision.status, decision.look, stored)
