"""A deploy's canary analysis, start to finish (docs/canary.md): resolve its canary role, read the window W after
the deploy, pick the stable role, compare the two arms (engine/canary.py), and replace the stored canary analysis.

Bad input (a deploy without a canary role, a role the target does not have, a role that ran no statements, no other
role running the same statements) stops the analysis with CanaryError, whose message names what is wrong; the
error is stored as the canary analysis (state `error`), so the gate says why it answers without one, and the sensor
does not ask again. What may pass (the watched server unreachable while the warehouse does not know the canary role)
raises CanaryUnavailable instead: nothing is stored, the run fails and is asked for again (warehouse.canary's
RETRY_BASE schedule); record_failure stores the last attempt's failure as the error.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import pandas as pd
import sqlalchemy as sa

from radar_pipeline.engine import ENGINE_VERSION, Verdict
from radar_pipeline.engine.canary import canary_analyse, canary_state
from radar_pipeline.engine.frames import CANARY_STORED
from radar_pipeline.engine.gate import GATE_FACTOR, MAX_OPEN_EXCESS, MAX_TOTAL_EXCESS
from radar_pipeline.steps.deploy_analysis import AnalysisRefused, AnalysisRun, require_closed
from radar_pipeline.warehouse import analysis, deploys
from radar_pipeline.warehouse import canary as stored


class CanaryError(ValueError):
    """The canary analysis cannot be made from what was recorded and scraped; the message names the reason."""


class CanaryUnavailable(RuntimeError):
    """The canary analysis cannot be made now, but may be later (the watched server unreachable); nothing stored."""


@dataclass(frozen=True)
class CanaryResult:
    """A stored canary analysis: its state (pass, fail, inconclusive, or error with `error` saying why), the roles
    compared (role name and userid; the stable role's name None when the target could not be asked), the window,
    and the verdicts (empty on an error)."""

    deploy_id: str
    target: str
    state: str
    error: str | None
    canary_role: str
    canary_userid: int | None
    stable_role: str | None
    stable_userid: int | None
    window: tuple[datetime, datetime]
    verdicts: pd.DataFrame


def analyse_canary(run: AnalysisRun, deploy_id: str) -> CanaryResult:
    """Decide the deploy's canary arm and replace its stored canary analysis, in one transaction.

    Refused (AnalysisRefused, nothing written) when the deploy is unknown or its canary window (W after the deploy,
    plus run.settle) has not passed. CanaryError's cases (module docstring) are stored as an `error` analysis and
    returned with state `error`. CanaryUnavailable (the canary role unresolved while the target is unreachable):
    nothing written, to be tried again.
    """
    settings = run.settings
    with run.warehouse.connect() as conn:
        event = deploys.get(conn, deploy_id)
        if event is None:
            raise AnalysisRefused(f"deploy {deploy_id!r} is not recorded")
        assert event.deployed_at is not None
        start, end = event.deployed_at, event.deployed_at + settings.window
        require_closed(conn, end + run.settle, f"the canary window of deploy {deploy_id!r}")
    role = event.canary_role or ""
    base: dict[str, Any] = {
        "target": event.target,
        "canary_role": role,
        "window_start": start,
        "window_end": end,
        "settings": settings.to_dict(),
        "engine_version": ENGINE_VERSION,
        "run_id": run.run_id,
    }
    try:
        if not role:
            raise CanaryError(f"deploy {deploy_id!r} names no canary role (radar deploy --canary-role ROLE)")
        with run.warehouse.connect() as conn:
            roles = _role_oids(conn, run, event.target, role, deploy_id)
            canary_userid = roles[role]
            window = analysis.read_window(conn, event.target, start, end)
            bars = _excess_bars(conn, deploy_id)
            canary_arm, stable_arm, stable_userid = _arms(window, canary_userid, role, event.target)
            prior = _stable_prior(conn, event.target, start, window, stable_userid)
        names = {oid: name for name, oid in roles.items()}
        verdicts = canary_analyse(canary_arm, stable_arm, pd.Timestamp(start), pd.Timestamp(end), settings, prior)
        verdicts = _with_key_columns(verdicts)
        state = canary_state(verdicts, settings.threshold, *bars)
        counts = verdicts["verdict"].value_counts()
        row: dict[str, Any] = {
            **base,
            "canary_userid": canary_userid,
            "stable_userid": stable_userid,
            "stable_role": names.get(stable_userid),
            "state": state,
            "error": None,
            "statements": len(verdicts),
            **{v.value: int(counts.get(v.value, 0)) for v in Verdict},
        }
    except CanaryError as exc:
        row = {**base, "state": "error", "error": str(exc)}
        verdicts = pd.DataFrame(columns=list(stored.VERDICT_COLUMNS))
    with run.warehouse.begin() as conn:
        stored.replace(conn, deploy_id, row, None if row["state"] == "error" else verdicts)
    return CanaryResult(
        deploy_id=deploy_id,
        target=event.target,
        state=row["state"],
        error=row.get("error"),
        canary_role=role,
        canary_userid=row.get("canary_userid"),
        stable_role=row.get("stable_role"),
        stable_userid=row.get("stable_userid"),
        window=(start, end),
        verdicts=verdicts,
    )


def _role_oids(conn: sa.Connection, run: AnalysisRun, target: str, role: str, deploy_id: str) -> dict[str, int]:
    """The target's roles by name, the canary role among them. The watched server's own pg_roles when the run reaches
    it: a role it does not list is not a role (CanaryError). Else (the run may not reach the target, or the target
    does not answer) the roles the warehouse knows (stored_roles); when those do not name the canary role, nothing
    says it is not one, so CanaryUnavailable: the analysis is tried again."""
    live = run.live(target)
    why = f"target {target!r} is not among the targets this run may reach"
    if live is not None:
        from radar_pipeline.collector import session

        try:
            with session.connect(live) as target_conn:
                rows = target_conn.execute("SELECT rolname, oid::bigint FROM pg_roles").fetchall()
        except session.TargetUnavailable as exc:
            why = str(exc)
        else:
            roles = {str(name): int(oid) for name, oid in rows}
            if role not in roles:
                raise CanaryError(f"canary role {role!r} of deploy {deploy_id!r} is not a role on target {target!r}")
            return roles
    known = stored.stored_roles(conn, target)
    if role not in known:
        raise CanaryUnavailable(
            f"canary role {role!r} of deploy {deploy_id!r} cannot be resolved now: {why}, and the warehouse knows "
            "no role of that name on it (tried again later)"
        )
    return known


def record_failure(run: AnalysisRun, deploy_id: str, message: str) -> None:
    """Store `message` as the deploy's canary analysis (state `error`), replacing none that is stored: the last
    attempt's failure, so the gate answers without the canary arm and says why."""
    with run.warehouse.begin() as conn:
        if stored.analysis_of(conn, deploy_id) is not None:
            return
        event = deploys.get(conn, deploy_id)
        if event is None or event.deployed_at is None:
            return
        window = run.settings.window
        stored.replace(
            conn,
            deploy_id,
            {
                "target": event.target,
                "canary_role": event.canary_role or "",
                "window_start": event.deployed_at,
                "window_end": event.deployed_at + window,
                "settings": run.settings.to_dict(),
                "engine_version": ENGINE_VERSION,
                "run_id": run.run_id,
                "state": "error",
                "error": message,
            },
            None,
        )


def _arms(
    window: analysis.WindowCounters, canary_userid: int, role: str, target: str
) -> tuple[pd.DataFrame, pd.DataFrame, int]:
    """Both arms' counters keyed by the statement key they share (dbid, queryid, toplevel), and the stable role:
    of the other roles that ran the canary's statement keys in the window, the one with the most calls of them."""
    keys = window.keys
    counters = window.counters
    user = keys["userid"].to_numpy()[counters["query_key"].to_numpy()]
    shared = pd.MultiIndex.from_frame(keys[["dbid", "queryid", "toplevel"]])
    key_of = pd.Series(list(shared), index=keys.index)
    canary_rows = counters[user == canary_userid]
    if canary_rows.empty:
        raise CanaryError(f"canary role {role!r} ran no statements on target {target!r} in the canary window")
    canary_keys = set(key_of.loc[pd.unique(canary_rows["query_key"])])
    others = counters[(user != canary_userid) & key_of.loc[counters["query_key"]].isin(canary_keys).to_numpy()]
    if others.empty:
        raise CanaryError(
            f"no role but the canary role {role!r} ran its statements on target {target!r} in the canary window: "
            "there is no stable arm to compare with"
        )
    spans = others.groupby("query_key")["calls"].agg(lambda c: c.max() - c.min())
    by_user = spans.groupby(keys.loc[spans.index, "userid"].to_numpy()).sum()
    stable_userid = int(by_user.idxmax())
    stable_rows = others[keys.loc[others["query_key"], "userid"].to_numpy() == stable_userid]

    def shared_keys(frame: pd.DataFrame) -> pd.DataFrame:
        columns = ["captured_at", "calls", "total_exec_time", "stddev_exec_time"]
        out = frame[[c for c in columns if c in frame]].copy()
        out.insert(0, "query_key", key_of.loc[frame["query_key"]].to_numpy())
        return out

    return shared_keys(canary_rows), shared_keys(stable_rows), stable_userid


def _stable_prior(
    conn: sa.Connection, target: str, start: datetime, window: analysis.WindowCounters, stable_userid: int
) -> pd.DataFrame | None:
    """The noise prior (steps.noise: the days before the window) of the stable role's statements, keyed by the
    statement key both arms share; None when none is stored."""
    from radar_pipeline.steps.noise import prior_for

    keys = window.keys[window.keys["userid"] == stable_userid]
    prior = prior_for(conn, target, start, keys) if not keys.empty else None
    if prior is None or prior.empty:
        return None
    shared = keys.loc[prior["query_key"].to_numpy(), ["dbid", "queryid", "toplevel"]]
    prior = prior.copy()
    prior["query_key"] = list(pd.MultiIndex.from_frame(shared))
    return prior


def _with_key_columns(verdicts: pd.DataFrame) -> pd.DataFrame:
    """The shared key split into dbid, queryid, toplevel (engine.frames.CANARY_STORED)."""
    out = verdicts.copy()
    CANARY_STORED.assign(out, "dbid", [int(k[0]) for k in out["query_key"]])
    CANARY_STORED.assign(out, "queryid", [int(k[1]) for k in out["query_key"]])
    CANARY_STORED.assign(out, "toplevel", [bool(k[2]) for k in out["query_key"]])
    return CANARY_STORED.check(out, "steps.canary")


def _excess_bars(conn: sa.Connection, deploy_id: str) -> tuple[float, float, float]:
    """The gate's bars as radar.deploy_state has them for the deploy (the settings radar.max_open_excess,
    radar.max_total_excess and radar.gate_factor), engine.gate's defaults where it says nothing: the canary arm is held
    to the rule the before/after state is."""
    found = analysis.deploy_states(conn, [deploy_id])
    row = found.iloc[0] if len(found) else pd.Series(dtype=object)

    def bar(name: str, default: float) -> float:
        value = row.get(name)
        return default if value is None or pd.isna(value) else float(value)

    return (
        bar("max_open_excess", MAX_OPEN_EXCESS),
        bar("max_total_excess", MAX_TOTAL_EXCESS),
        bar("gate_factor", GATE_FACTOR),
    )


CANARY_ALERT_PREFIX = "canary:"  # the outbox's target for a canary arm's detections: "canary:<target>"


def deliver_canary_alerts(
    log: Any,
    engine: sa.Engine,
    sender: Any,
    routed: list[Any],
    deploy_id: str,
    max_age: timedelta,
    now: datetime,
    dagster_url: str | None = None,
    to_slack: bool = True,
) -> dict[str, Any]:
    """Announce the canary arm's detections of a canary deploy, once per canary analysis: on Slack in one message
    (alerts.render.render_canary) and on each routed channel taking regressions (PagerDuty, …), through the same
    outbox as every alert (radar.outbox, one detection row per detected statement key and channel under the deploy
    and the target "canary:<target>", so neither the before/after alerts of the same statement nor a run of it again can
    send it twice; claimed before sending, settled after, an earlier attempt that got no answer looked for first).
    When the canary window closed more than `max_age` before `now`, the rows are recorded withheld and nothing is
    sent (alert_delivery.withhold_reason). `dagster_url`: where its run is linked (run_url); `to_slack`: whether
    RADAR_CHANNEL_ROUTES sends Slack regressions. Returns the run's metadata."""
    from radar_pipeline.alerts.render import (
        CANARY_CAUSE,
        AnalysisFacts,
        CanaryArms,
        Regression,
        canary_words,
        render_canary,
    )
    from radar_pipeline.steps import channel_delivery
    from radar_pipeline.steps.alert_delivery import claim_due, run_url, send_message, withhold_reason

    with engine.connect() as conn:
        found = stored.analysis_of(conn, deploy_id)
        event = deploys.get(conn, deploy_id)
        table = stored.verdicts_of(conn, deploy_id) if found is not None else pd.DataFrame()
    metadata: dict[str, Any] = {"canary_detections": 0, "to_send": 0}
    if found is None or event is None or found["state"] == "error":
        metadata["note"] = "no canary analysis stored" if found is None else "the canary analysis stopped on an error"
        return metadata
    detected = table[table["verdict"] == Verdict.DETECTED]
    metadata["canary_detections"] = len(detected)
    if detected.empty:
        return metadata
    withhold = withhold_reason(pd.DataFrame({"window_end": [found["window_end"]]}), max_age, now)
    canary_role = str(found["canary_role"])
    stable_role = found["stable_role"] or f"userid {found['stable_userid']}"
    userid = int(found["canary_userid"] or 0)
    keys = [(int(r.dbid), userid, int(r.queryid), bool(r.toplevel)) for r in detected.itertuples()]
    regressions = {
        k: Regression(
            queryid=int(r.queryid),
            query=r.query or f"queryid {r.queryid}",
            mean_before_ms=float(r.mean_stable_ms),
            mean_after_ms=float(r.mean_canary_ms),
            change_factor=float(r.change_factor),
            confidence=1.0 - float(r.p_family),
            change_at=found["window_start"],
            calls_before=int(r.calls_stable),
            calls_after=int(r.calls_canary),
            cause=CANARY_CAUSE,
            plan_summary=None,
            factor_low=float(r.factor_low),
            factor_high=float(r.factor_high),
            cause_detail=canary_words(canary_role, float(r.change_factor), stable_role),
        )
        for k, r in zip(keys, detected.itertuples(), strict=True)
    }
    facts = AnalysisFacts(
        analysis_id=deploy_id,
        target=CANARY_ALERT_PREFIX + str(found["target"]),  # the outbox's and PagerDuty's: apart from before/after's
        split_at=event.deployed_at or found["window_start"],
        service=event.service,
        version=event.version,
        url=event.url,
        run_url=run_url(found["run_id"], dagster_url),
        # what every channel shows: the real target, both roles, the same minutes
        canary=CanaryArms(str(found["target"]), canary_role, stable_role, (found["window_start"], found["window_end"])),
    )
    claimed_due = (
        claim_due(log, engine, sender, deploy_id, facts.target, keys, withhold, metadata) if to_slack else None
    )
    if claimed_due is not None:
        todo, delivery = claimed_due
        due = set(todo)
        text, blocks = render_canary(facts, [regressions[k] for k in keys if k in due])
        metadata["to_send"] = len(todo)
        metadata["message"] = {"text": text, "blocks": blocks}
        if not sender.configured:
            log.info(f"Slack is not configured; the canary alert would read:\n{text}")
            delivery.settle(delivery.claimed.of(todo), "skipped")
        else:
            send_message(
                delivery, lambda delivery_id: sender.send(text, blocks, delivery_id=delivery_id), todo, metadata
            )
    channels: dict[str, Any] = {}
    failures: list[Exception] = []
    for route in routed:
        if channel_delivery.REGRESSION not in route.outcomes:
            continue
        detections = {k: channel_delivery.Detection(k, regression=r) for k, r in regressions.items()}
        try:
            channels[route.name] = channel_delivery.deliver(log, engine, route.channel, facts, detections, withhold)
        except Exception as exc:  # noqa: BLE001 - one channel's failure must not stop the others: raised after them
            log.error(f"{route.name}: {type(exc).__name__}")
            failures.append(exc)
    if channels:
        metadata["channels"] = channels
    if failures:
        raise failures[0]
    return metadata
