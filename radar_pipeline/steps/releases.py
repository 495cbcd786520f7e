"""A release's fleet verdict, decided again whenever one of its member deploys' analyses is stored (docs/fleets.md).

Each decision reads what is stored (the members' verdicts with their evidence at the deploy), so it is idempotent:
run twice on the same analyses it stores the same rows. While some member is not analysed the fleet verdicts are
`partial` (verdict `pending`: the combination so far, shown, never detected or alerted, spending nothing). When every
member is analysed they are `final` and spend a look of the release's budget (engine.budget's schedule): the first
final decision look 0; a member that joins the release later (a deploy recorded with the same release id after the
release was decided) makes the release partial again until it is analysed, and the next final decision spends the
next look, so the release's false fleet detections stay within B over all its decisions. Past the schedule's last
look a release is still decided and shown, but can no longer detect.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
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
    transaction under the release's lock. A ReleaseError names an unknown release, or one deployed to fewer than
    MIN_TARGETS targets; nothing is stored then."""
    with engine.begin() as conn:
        store.lock(conn, release_id)
        found = store.release(conn, release_id)
        if len(found.members) < MIN_TARGETS:
            raise ReleaseError(
                f"release {release_id!r} was deployed to {len(found.members)} target only "
                f"({', '.join(found.targets)}): a fleet verdict needs {MIN_TARGETS} or more"
            )
        evidence = store.member_evidence(conn, found.members)
        look = store.record_look(conn, release_id, list(found.members["deploy_id"])) if found.complete else None
        rows = _verdicts(found, evidence, look, settings)
        store.write_release_verdicts(conn, release_id, rows)
    return ReleaseDecision(found, FINAL if look is not None else PARTIAL, look, rows)


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
    from radar_pipeline.alerts.slack import DeliveryError
    from radar_pipeline.steps.alert_delivery import LEASE, NO_CHANNEL, _already_posted, retry_wait
    from radar_pipeline.warehouse import alerts as outbox

    found = decision.detected if decision.status == FINAL else decision.verdicts.iloc[0:0]
    metadata: dict[str, Any] = {"fleet_detections": len(found), "to_send": 0}
    if found.empty:
        return metadata
    channel = sender.channel or NO_CHANNEL
    anchor = decision.release.anchor
    target = ALERT_TARGET_PREFIX + decision.release.release_id
    keys = [(0, 0, int(fp), bool(top)) for fp, top in zip(found["fingerprint"], found["toplevel"], strict=True)]
    with engine.begin() as conn:
        outbox.lock(conn, anchor)
        if withhold is not None:
            outbox.enqueue(conn, anchor, target, keys, channel, status="withheld", note=withhold)
            metadata["withheld"] = withhold
            return metadata
        outbox.enqueue(conn, anchor, target, keys, channel)
        claimed = outbox.claim(conn, anchor, target, channel, LEASE)
    if not claimed.keys:
        return metadata

    def settle(settled: list[Any], status: str, **kwargs: Any) -> None:
        with engine.begin() as conn:
            outbox.settle(conn, anchor, target, channel, settled, claimed.delivery_id, status, **kwargs)

    todo = claimed.keys
    if claimed.earlier and sender.configured:  # an earlier attempt may have posted them: look in the channel first
        remaining = _already_posted(log, sender, claimed, settle, metadata)
        if remaining is None:
            return metadata
        todo = remaining
    if not todo:
        return metadata
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
    try:
        delivered = sender.send(text, blocks, [], delivery_id=claimed.delivery_id)
    except DeliveryError as exc:
        log.error(f"Slack: {exc}")
        if exc.retryable:
            settle(todo, "pending", error=str(exc), unknown=exc.unknown, wait=retry_wait(claimed.attempt, exc))
        else:
            settle(todo, "failed", error=str(exc))
    else:
        settle(todo, "sent", ts=delivered.ts)
    return metadata


def with_text(engine: sa.Engine, decision: ReleaseDecision) -> ReleaseDecision:
    """The decision with each verdict's example statement text (query) read from the warehouse."""
    with engine.connect() as conn:
        stored = store.release_verdicts(conn, decision.release.release_id)
    return ReleaseDecision(decision.release, decision.status, decision.look, stored)
