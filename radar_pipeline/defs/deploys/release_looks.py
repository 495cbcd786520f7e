"""Later looks at a release in Dagster (docs/fleets.md): release_look_sensor requests each timed look of a final
release once when it is due (every member past the look's after side plus one scrape interval), and
release_looks_job runs it: the release's keys still open at the fleet level decided again on the members' counters
over their look spans, and the fleet detections it makes alerted once through the outbox."""

from typing import Any

import dagster as dg
from pydantic import Field

from radar_pipeline.defs.deploys.deploy_looks import _in_flight, _reanalysis_runs
from radar_pipeline.defs.deploys.deploy_verdicts import ANALYSIS_POOL, ANALYSIS_RETRY, REANALYSIS_TAG
from radar_pipeline.defs.metadata import rounded, table
from radar_pipeline.defs.resources import AnalysisResource, SlackResource, WarehouseResource
from radar_pipeline.engine.vocabulary import Verdict

RELEASE_TAG = "radar/release"  # on a release look's runs: the release
LOOK_TAG = "radar/release-look"  # … and the look's number
ATTEMPT_TAG = "radar/release-look-attempt"  # … and the attempt (warehouse.looks.look_attempt)
SENSOR_INTERVAL_S = 30  # a look is due hours after the release: every 30 s is plenty
SENSOR_PAGE = 50  # release looks requested per evaluation at most; the rest on the next ticks
DECIDED_COLUMNS = [
    ("fingerprint", "int"),
    ("verdict", "string"),
    ("report", "string"),
    ("factor", "float"),
    ("p_family", "float"),
]


class ReleaseLookConfig(dg.Config):
    """Which release, and which of its later looks (1 … the last; look 0 is its first final decision)."""

    release_id: str = Field(description="the release (radar deploy --release, or inferred:<first deploy id>)")
    look: int = Field(description="the look's number: 1, 2 or 3 (after 2W, 4W and 8W by default)")


@dg.op(
    description="One later look at a release: its keys still open at the fleet level decided again over the "
    "members' look spans (radar.release_verdict, radar.release_look); new fleet detections alerted once.",
    pool=ANALYSIS_POOL,
)
def release_look(
    context: dg.OpExecutionContext,
    config: ReleaseLookConfig,
    warehouse: WarehouseResource,
    analysis: AnalysisResource,
    slack: SlackResource,
) -> dg.Output[None]:
    """Run the look (steps/releases.run_release_look) and deliver the release's fleet detections not yet sent; a
    failure is recorded (the look is due no more) before it is raised, so the op's retries may still succeed. A retry
    of an attempt that stored the look and then failed (delivering) delivers what the look stored."""
    from radar_pipeline.steps.releases import (
        ReleaseLookRefused,
        alert_release,
        record_failed_release_look,
        run_release_look,
        stored_release_look,
    )

    engine = warehouse.engine()
    try:
        result = run_release_look(
            engine, analysis.settings(), config.release_id, config.look, analysis.settle, context.run.run_id
        )
    except ReleaseLookRefused as exc:
        stored = stored_release_look(engine, config.release_id, config.look)
        if stored is None:
            raise dg.Failure(description=str(exc), allow_retries=False) from None
        context.log.info(f"look {config.look} of release {config.release_id} is stored: delivering its detections")
        result = stored
    except Exception:
        record_failed_release_look(engine, config.release_id, config.look, context.run.run_id, context.log)
        raise
    reanalysis = context.run.tags.get(REANALYSIS_TAG) == "true"
    decision, sent = alert_release(
        context.log,
        engine,
        slack.sender(),
        result.decision,
        analysis.settings().window,
        slack.alert_max_age,
        "found by a later look continuing the nightly reanalysis, which never posts" if reanalysis else None,
    )
    decided = result.decided
    for r in decided[decided["verdict"] == Verdict.DETECTED].itertuples():
        context.log.info(f"release {config.release_id} look {result.look}: fleet detection: {r.report}")
    metadata: dict[str, Any] = {
        "release": config.release_id,
        "look": result.look,
        "after_hours": rounded(result.after.total_seconds() / 3600, 3),
        "open_before": result.opened,
        "detected": int((decided["verdict"] == Verdict.DETECTED).sum()),
        "cleared": int((decided["verdict"] == Verdict.NO_REGRESSION).sum()),
        "cut_members": sum(bool(s.cut) for s in result.spans.values()),
        "to_send": int(sent.get("to_send", 0)),
        "withheld": str(sent.get("withheld", "")),  # why, when the alerts were recorded and not sent
        "decided": table(
            DECIDED_COLUMNS,
            [
                {
                    "fingerprint": int(r.fingerprint),
                    "verdict": str(r.verdict),
                    "report": str(r.report),
                    "factor": rounded(float(r.factor), 3),
                    "p_family": rounded(float(r.p_family), 6),
                }
                for r in decided.head(25).itertuples()
            ],
        ),
    }
    return dg.Output(None, metadata=metadata)


@dg.job(
    description="One later look at a release, and its new fleet alerts (requested by release_look_sensor).",
    op_retry_policy=ANALYSIS_RETRY,
)
def release_looks_job() -> None:
    """One op: release_look."""
    release_look()


@dg.sensor(
    job=release_looks_job,
    minimum_interval_seconds=SENSOR_INTERVAL_S,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Requests each later look of a final release once, when it is due (every member deploy + the look's "
    "span, cut by its next deploy, + one scrape interval), while a key is open at the fleet level.",
)
def release_look_sensor(
    context: dg.SensorEvaluationContext, warehouse: WarehouseResource, analysis: AnalysisResource
) -> dg.SensorResult | dg.SkipReason:
    """The release looks due now (steps.releases.due_release_looks), one run each. The run key names the release,
    the look, the decision it continues (its members' latest analysis) and the attempt (warehouse.looks.look_attempt:
    0 when due, 1 five minutes later, …, LOOK_ATTEMPTS at most), so each attempt is requested once; a look that
    failed is recorded so and not asked for again, one whose run ended without recording it (terminated, killed) is
    asked for at the next attempt unless a run of it is still queued or running, and a release decided anew (a late
    member, a reanalysis) gets its looks from its new decision on. The looks of a release every member of which the
    nightly reanalysis analysed last carry its tag (REANALYSIS_TAG): their fleet alerts are recorded, never posted, as
    the deploys' looks' are."""
    from radar_pipeline.steps.releases import due_release_looks
    from radar_pipeline.warehouse.looks import look_attempt

    with warehouse.engine().connect() as conn:
        due = due_release_looks(conn, analysis.settings(), analysis.settle, limit=SENSOR_PAGE)
    running = _in_flight(context.instance, release_looks_job.name, LOOK_TAG)
    attempts = {(d.release_id, d.look): look_attempt(d.waited) for d in due}
    due = [
        d for d in due if attempts[(d.release_id, d.look)] is not None and (d.release_id, str(d.look)) not in running
    ]
    if not due:
        return dg.SkipReason("no release look is due")
    context.log.info(f"requesting {len(due)} release looks: " + ", ".join(f"{d.release_id} look {d.look}" for d in due))
    reanalysed = _reanalysis_runs(context.instance, {r for d in due for r in d.run_ids})
    return dg.SensorResult(
        run_requests=[
            dg.RunRequest(
                run_key=f"release-look:{d.release_id}:{d.look}:{_stamp(d.basis)}:{attempts[(d.release_id, d.look)]}",
                run_config={"ops": {"release_look": {"config": {"release_id": d.release_id, "look": d.look}}}},
                tags={
                    RELEASE_TAG: d.release_id,
                    LOOK_TAG: str(d.look),
                    ATTEMPT_TAG: str(attempts[(d.release_id, d.look)]),
                    **({REANALYSIS_TAG: "true"} if d.run_ids and set(d.run_ids) <= reanalysed else {}),
                },
            )
            for d in due
        ]
    )


def _stamp(basis: Any) -> str:
    """The decision a look continues, in a run key: its members' latest analysis time."""
    stamps = [a for _, a in basis if a is not None]
    return f"{max(stamps).timestamp():.6f}" if stamps else "-"
