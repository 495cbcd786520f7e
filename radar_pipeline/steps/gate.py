"""The gate's read and decision, shared by `radar gate` and the webhook receiver's gate over HTTP: one look at a
deploy (its times, its radar.deploy_state row, and once decided its execution-time shares and detections), the exit
code its state maps to, and the answer for scripts."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from radar_pipeline.config.settings import RadarSettings

# `radar gate`'s exit codes by state; the receiver's gate answers carry the same under exit_code. A tier never changes
# them: a deploy that passes with probably-slower statements exits 0 and warns of each (docs/ci.md).
EXIT = {"pass": 0, "fail": 1, "inconclusive": 3, "pending": 4}
TIERED_SHOWN = 10  # statements of each tier the gate's answer lists (the busiest first); the rest are counted


def exit_code(state: str, inconclusive_ok: bool = False) -> int:
    """The gate's code for a deploy state: 0 pass, 1 fail, 3 inconclusive (0 when that is accepted), 4 pending."""
    return 0 if state == "inconclusive" and inconclusive_ok else EXIT[state]


@dataclass
class GateView:
    """What the gate read of a deploy: its times, its radar.deploy_state row and, once decided, the share of its
    execution time each verdict holds and its detections."""

    times: Any  # warehouse.status.DeployTimes
    state: dict[str, Any]
    shares: dict[str, float]
    detections: list[dict[str, Any]]
    # A canary deploy's canary arm (status.canary_gate): its role, analysis state or error, and detections; None for
    # a deploy that names no canary role. When it decides, state["state"] is the canary's and
    # state["before_after_state"] radar.deploy_state's.
    canary: dict[str, Any] | None = None
    # Once decided, its statements marked improved and probably slower (warehouse.status.Tiered); None while pending.
    tiered: Any = None
    # While inconclusive, the later look to come and when it falls due (warehouse.looks.next_look): it may clear
    # (pass) or detect (fail) what the earlier looks left open; None when none is to come.
    next_look: tuple[int, datetime] | None = None
    # While pending: whether its analysis is running (warehouse.deploys.analysis_running).
    analysing: bool = False
    # Once decided, its muted detections (warehouse.labels.muted_of, sql/0037): statements and groups a mute covers,
    # which do not fail the deploy; each with the mute's id, scope, reason and end.
    muted: list[dict[str, Any]] = field(default_factory=list)


def read(engine: Any, deploy_id: str, configured: RadarSettings) -> GateView | None:
    """One look at the deploy (None: not recorded), in one connection and one snapshot: its times and state, and
    once it is no longer pending, the shares of its execution time and its detections (and while inconclusive, its
    next later look)."""
    from radar_pipeline.engine import Verdict
    from radar_pipeline.warehouse import deploys, labels, looks, status
    from radar_pipeline.warehouse.analysis import deploy_states, verdicts_of

    # One snapshot for every query: a look stored between two of them must not leave the state of before it beside
    # the looks of after it (an inconclusive deploy with no look to come).
    with engine.connect().execution_options(isolation_level="REPEATABLE READ") as conn:
        times = status.deploy_times(conn, deploy_id, configured)
        if times is None:
            return None
        found = deploy_states(conn, [deploy_id])
        state = {k: plain(v) for k, v in found.iloc[0].items()}
        canary = status.canary_gate(conn, deploy_id, state, status.canary_delay(conn, times.target, configured))
        if state["state"] == "pending":
            return GateView(times, state, {}, [], canary, analysing=deploys.analysis_running(conn, deploy_id))
        shares = status.execution_shares(conn, deploy_id)
        tiered = status.tiered_statements(conn, deploy_id, TIERED_SHOWN)
        table = verdicts_of(conn, deploy_id)
        muted = [{k: plain(v) for k, v in row.items()} for row in labels.muted_of(conn, deploy_id).to_dict("records")]
        upcoming = None
        if state["state"] == "inconclusive":
            window, scrape = status.analysis_times(conn, times.target, configured)
            upcoming = looks.next_look(conn, deploy_id, window, scrape)
    detected = table[table["verdict"] == Verdict.DETECTED]
    columns = [
        "target", "queryid", "dbid", "userid", "toplevel", "change_factor", "factor_at_change", "factor_low",
        "factor_high", "cause", "cause_detail", "mean_before_ms", "mean_after_ms", "confidence", "change_after_deploy",
        "query", "label", "labelled_by", "label_note", "fixed_by", "mute_id", "mute_reason", "mute_ends_at",
    ]  # fmt: skip
    detections = []
    for row in detected[columns].to_dict("records"):
        cells = {k: plain(v) for k, v in row.items()}
        change = cells.pop("change_after_deploy")
        cells["change_after_deploy_s"] = None if change is None else round(change.total_seconds())
        detections.append(cells)
    return GateView(times, state, shares, detections, canary, tiered, upcoming, muted=muted)


def margins(state: dict[str, Any]) -> dict[str, float | int | None]:
    """The rule's margins from a radar.deploy_state row (sql/0042): the most one open statement not bounded within
    gate_factor may have added beyond θ (largest_excess_share) against max_open_excess, and what every open statement
    that does not hold the deploy alone added together, jointly (open_excess_share), against max_total_excess; the open
    statements whose excess is over the bar but whose bound lies within gate_factor (bounded_open, an int), the
    largest of their bounds (largest_bounded_factor) and of their excesses (largest_bounded_excess_share); with the
    cleared share and the largest share one open statement holds (None before an analysis, or where nothing ran after
    the deploy)."""

    def number(name: str) -> float | None:
        value = plain(state.get(name))
        return None if value is None else float(value)

    names = ["largest_excess_share", "max_open_excess", "open_excess_share", "max_total_excess", "cleared_share"]
    names += ["largest_open_share", "gate_factor", "largest_bounded_factor", "largest_bounded_excess_share"]
    found: dict[str, float | int | None] = {name: number(name) for name in names}
    bounded = number("bounded_open")
    found["bounded_open"] = None if bounded is None else int(bounded)
    return found


def tiered_cells(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Tiered statements (warehouse.status.tiered_statements) as plain JSON-ready objects."""
    return [{k: plain(v) for k, v in row.items()} for row in rows]


def plain(value: object) -> Any:
    """A cell of a pandas frame as a plain Python value: None for a missing one, numbers and times unwrapped."""
    import pandas as pd

    if isinstance(value, str | list | dict) or value is None:
        return value
    if pd.isna(value):  # type: ignore[call-overload]
        return None
    if isinstance(value, pd.Timestamp):
        return value.to_pydatetime()
    if isinstance(value, timedelta):
        return pd.Timedelta(value).to_pytimedelta()
    return value.item() if hasattr(value, "item") else value


def answer(view: GateView, deploy_id: str, code: int) -> dict[str, Any]:
    """The gate's answer for a script, as a JSON object (`radar gate --format json`, the receiver's gate)."""
    from radar_pipeline.engine.vocabulary import VERDICTS, Verdict  # loaded with the gate's view already

    t, s = view.times, view.state

    def iso(at: datetime | None) -> str | None:
        return at.isoformat() if at is not None else None

    counts = {v.value: int(s.get(v) or 0) for v in VERDICTS}
    answer = {
        "deploy_id": deploy_id,
        "state": s["state"],
        "exit_code": code,
        "counts": counts,
        "shares": {
            "cleared": view.shares.get(Verdict.NO_REGRESSION) if view.shares else s.get("cleared_share"),
            "inconclusive": view.shares.get(Verdict.INCONCLUSIVE, 0.0) if view.shares else None,
            "insufficient_data": view.shares.get(Verdict.INSUFFICIENT_DATA, 0.0) if view.shares else None,
            "detected": view.shares.get(Verdict.DETECTED, 0.0) if view.shares else None,
        },
        "pass_share": s.get("pass_share"),
        # the rule's margins (docs/ci.md): largest_excess_share ≤ max_open_excess and open_excess_share ≤
        # max_total_excess pass; bounded_open statements lie within gate_factor
        "margins": margins(s),
        "analysed_at": iso(s.get("analysed_at")),
        "engine_version": s.get("engine_version"),
        "deploy": {
            "target": t.target,
            "deployed_at": iso(t.deployed_at),
            "service": t.service,
            "version": t.version,
            "url": t.url,
            "source": t.source,
            "window_closes_at": iso(t.window_closes_at),
            "verdict_due_at": iso(t.due_at),
            "analysis_running": view.analysing,  # while pending: its analysis has started
        },
        # each with its latest label (label … fixed_by: null for none) and, when muted, its mute (mute_id …
        # mute_ends_at): a muted detection does not fail the deploy; `muted` lists them, groups included
        "detections": view.detections,
        "muted": view.muted,
        # statements cleared and clearly faster, and open ones slower on their own evidence (warnings: the exit code
        # stays the state's), the busiest first, at most TIERED_SHOWN each; counts hold them all
        "improved": tiered_cells(view.tiered.improved) if view.tiered is not None else [],
        "probably_slower": tiered_cells(view.tiered.probably_slower) if view.tiered is not None else [],
        "tier_counts": {
            "improved": view.tiered.improved_count if view.tiered is not None else 0,
            "probably_slower": view.tiered.probably_slower_count if view.tiered is not None else 0,
            "groups_probably_slower": int(s.get("groups_probably_slower") or 0),
        },
        "looks_done": int(s.get("looks_done") or 0),
        # an inconclusive deploy's next later look, which may still decide it (`radar gate --through-looks`)
        "next_look": (
            {"look": view.next_look[0], "due_at": iso(view.next_look[1])} if view.next_look is not None else None
        ),
    }
    if view.canary is not None:
        answer["canary"] = view.canary
        answer["before_after_state"] = s.get("before_after_state")
    return answer


def as_json(view: GateView, deploy_id: str, code: int) -> str:
    """answer() as JSON text (ASCII: nothing in it can move a terminal's cursor)."""
    return json.dumps(answer(view, deploy_id, code), indent=1, default=str)
