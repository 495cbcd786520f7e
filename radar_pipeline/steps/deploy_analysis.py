"""One deploy's analysis, start to finish: read its window from the warehouse, decide, write the verdicts.

Plain Python, so the Dagster asset, the benchmarks and the tests run the same code.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from radar_pipeline.steps.decide import AnalysisRun, WindowVerdicts, decide_span, write_window
from radar_pipeline.steps.look_spans import look_span
from radar_pipeline.warehouse import analysis, deploys

# The longest span a run of several deploys reads at once for their overlapping windows: 2 hours of 5,000
# statements scraped every minute are 600,000 samples, 54 MB in memory and about 90 MB more while the COPY is read.
SHARED_SPAN = timedelta(hours=2)
# The most samples a shared read may hold, counting every statement of the target's catalogue at every scrape
# (analysis.ReadCosts): scraped each minute, 1,000 statements 16 hours, 5,000 three. On compacted days, where any
# window's read opens each statement's whole day, deploys of the same days share a read up to this even when their
# windows do not overlap. A million samples are 82 MB in memory, and 234 MB while the COPY's stream is parsed.
SHARED_SAMPLES = 1_000_000


class AnalysisRefused(RuntimeError):
    """The deploy cannot be analysed now (unknown id, or its window has not closed); nothing was written."""


def require_closed(conn: sa.Connection, closes_at: datetime, what: str) -> None:
    """Refuse (AnalysisRefused) while `closes_at` is still ahead by the warehouse's clock: an analysis before then
    would see only part of its window."""
    now = conn.execute(sa.text("SELECT now()")).scalar_one()
    if now < closes_at:
        raise AnalysisRefused(
            f"{what} closes at {closes_at.isoformat()}; it is {now.isoformat()} now, and an analysis before then "
            "would see only part of the window"
        )


@dataclass
class DeployAnalysis(WindowVerdicts):
    """What a deploy's analysis found and how long each part took, and the deploy's state as it was stored (its row
    of radar.deploy_state: state, the verdict counts, the share of its execution time cleared)."""

    event: deploys.DeployEvent
    state: dict[str, Any]


def analyse_deploy(run: AnalysisRun, deploy_id: str) -> DeployAnalysis:
    """Analyse one recorded deploy and replace its verdicts, in one transaction.

    Refused (AnalysisRefused) when the id is unknown or when the window after the deploy, plus `run.settle` (one
    scrape interval, so the last scrape of the window is stored), has not passed by the warehouse's clock, unless the
    window has closed and a scrape of its target captured at or after the close is stored: an early analysis would
    see half a window. Plans of detections: see `steps.decide.decide_span`, with the deploy's target in
    `run.live_targets`.
    """
    with run.warehouse.connect() as conn:
        event = _closed_event(conn, run, deploy_id, deploys.get(conn, deploy_id))
    return _analyse_event(run, event)


def analyse_deploys(run: AnalysisRun, deploy_ids: Sequence[str]) -> Iterator[tuple[str, DeployAnalysis | Exception]]:
    """Analyse several recorded deploys, each as `analyse_deploy` does and in a transaction of its own, yielding each
    deploy id with its analysis, or with the exception that stopped it (the others go on), as each one is stored.

    Refused deploys come first, then the others by target and time. Deploys of a target whose windows overlap (a
    backfill over deploys close together), or lie in the same compacted days, share one read of their common span
    (shared_spans), and each window is cut from it: the read is most of an analysis's cost, and overlapping windows
    would read the same rows again and again, as windows on a compacted day would open the same day rows. Each
    deploy's verdicts are the same as `analyse_deploy`'s.
    """
    ready: list[deploys.DeployEvent] = []
    refused: list[tuple[str, Exception]] = []
    window = run.settings.window
    try:
        with run.warehouse.connect() as conn:
            stored = deploys.get_many(conn, list(deploy_ids))
            for deploy_id in deploy_ids:
                try:
                    ready.append(_closed_event(conn, run, deploy_id, stored.get(deploy_id)))
                except AnalysisRefused as exc:
                    refused.append((deploy_id, exc))
    except Exception as exc:  # the warehouse failed before any deploy could be looked at: each one fails with it
        yield from ((deploy_id, exc) for deploy_id in deploy_ids)
        return
    yield from refused
    reach: dict[str, tuple[datetime, datetime]] = {}
    for event in ready:
        lo, hi = reach.get(event.target, (_deployed_at(event), _deployed_at(event)))
        reach[event.target] = (min(lo, _deployed_at(event)), max(hi, _deployed_at(event)))
    try:
        with run.warehouse.connect() as conn:
            costs = analysis.read_costs(conn, {t: (lo - window, hi + window) for t, (lo, hi) in reach.items()})
    except Exception:  # only an optimisation: without them, deploys share reads of overlapping windows alone
        costs = {}
    spans = shared_spans(ready, window, costs)
    for group in spans:
        samples, read_s = None, 0.0
        if len(group) > 1:
            lo, hi = _deployed_at(group[0]) - window, _deployed_at(group[-1]) + window
            started = time.perf_counter()
            try:
                with run.warehouse.connect() as conn:
                    samples = analysis.read_samples(conn, group[0].target, lo, hi)
            except Exception as exc:  # the span's deploys fail with it; other spans go on
                yield from ((event.deploy_id, exc) for event in group)
                continue
            read_s = time.perf_counter() - started
        for event in group:
            try:
                result = _analyse_event(run, event, samples)
            except Exception as exc:  # one deploy's failure leaves the others to run
                yield event.deploy_id, exc
                continue
            result.seconds.read += read_s  # the span's read is counted with the first deploy that used it
            read_s = 0.0
            yield event.deploy_id, result


def shared_spans(
    events: Sequence[deploys.DeployEvent], window: timedelta, costs: Mapping[str, analysis.ReadCosts] | None = None
) -> list[list[deploys.DeployEvent]]:
    """The events grouped by target and time into reads of their windows' common span (first window's start to the
    last one's end): deploys whose windows overlap in a chain, over a span at most SHARED_SPAN long; and, where the
    target's `costs` say the span lies in compacted days, deploys of those days whatever the gaps between windows;
    with `costs`, no span holds more than SHARED_SAMPLES samples. A group may be one event."""
    groups: list[list[deploys.DeployEvent]] = []
    for event in sorted(events, key=lambda e: (e.target, _deployed_at(e))):
        group = groups[-1] if groups else None
        if group is not None and group[-1].target == event.target:
            start, end = _deployed_at(group[0]) - window, _deployed_at(event) + window
            cost = (costs or {}).get(event.target)
            fits = cost is None or cost.samples(end - start) <= SHARED_SAMPLES
            overlapping = _deployed_at(event) - window < _deployed_at(group[-1]) + window and end - start <= SHARED_SPAN
            compacted = cost is not None and cost.compacted(start, end)
            if fits and (overlapping or compacted):
                group.append(event)
                continue
        groups.append([event])
    return groups


def _deployed_at(event: deploys.DeployEvent) -> datetime:
    assert event.deployed_at is not None, "only stored events, which have a time, are analysed"
    return event.deployed_at


def _closed_event(
    conn: sa.Connection, run: AnalysisRun, deploy_id: str, event: deploys.DeployEvent | None
) -> deploys.DeployEvent:
    """The stored event of the deploy, once its window has closed (see analyse_deploy), else AnalysisRefused."""
    if event is None or event.deployed_at is None:
        raise AnalysisRefused(f"deploy {deploy_id!r} is not recorded in radar.deploy_event")
    try:
        window = run.settings.window
        closes_at, _ = event.deployed_at + window + run.settle, event.deployed_at - window
    except OverflowError:
        raise AnalysisRefused(
            f"deploy {deploy_id!r} at {event.deployed_at.isoformat()} is too far in the past to analyse: its "
            "window reaches before the year 1"
        ) from None
    try:
        require_closed(conn, closes_at, f"the window after deploy {deploy_id!r}")
    except AnalysisRefused:
        if not deploys.window_scraped(conn, deploy_id, run.settings.window):  # else its last scrape is stored already
            raise
    return event


def _analyse_event(
    run: AnalysisRun, event: deploys.DeployEvent, samples: analysis.StoredSamples | None = None
) -> DeployAnalysis:
    """Decide the deploy's window (cut from `samples` when given) and replace its verdicts, in one transaction."""
    # The first look spends only its share of the deploy's budget and clears at its share of the looks' error: the
    # later looks spend the rest (steps/looks.py).
    first = look_span(run.settings, 0, _deployed_at(event))
    assert first is not None, "a first look is never cut"
    decided = decide_span(run, event.deploy_id, event.target, _deployed_at(event), first, samples)
    with run.warehouse.begin() as conn:
        write_window(conn, run, event.deploy_id, event.target, decided)
        state = analysis.deploy_states(conn, [event.deploy_id]).iloc[0].to_dict()
        started = time.perf_counter()
    decided.seconds.write += time.perf_counter() - started  # the commit
    return DeployAnalysis(**vars(decided), event=event, state=state)
