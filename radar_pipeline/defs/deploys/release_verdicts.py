"""Fleets in Dagster: release_verdicts, the fleet verdict of the release a deploy belongs to, decided after each
member deploy's analysis (docs/fleets.md); alert_retry_job's run of it only delivers the stored detections."""

from typing import Any

import dagster as dg

from radar_pipeline.defs.deploys.deploy_verdicts import REANALYSIS_TAG, deploy_verdicts, deploys_partitions
from radar_pipeline.defs.metadata import ID, OWNERS, table
from radar_pipeline.defs.resources import AnalysisResource, SlackResource, WarehouseResource
from radar_pipeline.defs.retry_jobs import RETRIED_BY, alert_retry_job
from radar_pipeline.engine.vocabulary import Verdict

FLEET_ROWS_SHOWN = 25
FLEET_COLUMNS = [
    ("fingerprint", ID),
    ("verdict", "string"),
    ("report", "string"),
    ("factor", "float"),
    ("factor_low", "float"),
    ("factor_high", "float"),
    ("p_family", "float"),
    ("i_squared", "float"),
]


@dg.asset(
    partitions_def=deploys_partitions,
    deps=[deploy_verdicts],  # in deploy_verdicts_job (its downstream), so it runs after each member's analysis
    group_name="analysis",
    kinds={"python", "postgres"},
    owners=OWNERS,
    tags={RETRIED_BY: alert_retry_job.name},  # its fleet alerts' rows wait under the release's first deploy
    description="The fleet verdict of the deploy's release: each statement key seen on several of its targets, "
    "decided jointly (radar.release_verdict); fleet detections alerted through the outbox (radar.outbox).",
)
def release_verdicts(
    context: dg.AssetExecutionContext,
    warehouse: WarehouseResource,
    analysis: AnalysisResource,
    slack: SlackResource,
) -> dg.MaterializeResult:
    """Decide the release of this deploy from what its members' analyses stored (partial until every member is
    analysed, then final, and kept while its basis holds), and announce its final fleet detections once; in
    alert_retry_job's run, only deliver what is stored. A deploy in no release, or in a release of one target, is
    reported as such."""
    from radar_pipeline.steps.releases import (
        ReleaseDecision,
        alert_release,
        decide_release_of,
        stored_decision_of,
    )

    engine = warehouse.engine()
    if context.run.job_name == alert_retry_job.name:  # a retry of a failed send decides nothing
        decision = stored_decision_of(engine, context.partition_key)
    else:
        decision = decide_release_of(engine, context.partition_key, analysis.settings())
    if not isinstance(decision, ReleaseDecision):
        return dg.MaterializeResult(metadata={"note": decision})
    reanalysis = context.run.tags.get(REANALYSIS_TAG) == "true"
    decision, sent = alert_release(
        context.log,
        engine,
        slack.sender(),
        decision,
        analysis.settings().window,
        slack.alert_max_age,
        "found by the nightly reanalysis, which never posts" if reanalysis else None,
    )
    verdicts = decision.verdicts
    metadata: dict[str, Any] = {
        "release": decision.release.release_id,
        "status": decision.status,
        "look": decision.look if decision.look is not None else -1,
        "members_analysed": f"{int(decision.release.members['analysed'].sum())} of {len(decision.release.members)}",
        "keys": len(verdicts),
        "fleet_detections": int((verdicts["verdict"] == Verdict.DETECTED).sum()),
        **{k: v for k, v in sent.items() if k in ("to_send", "withheld")},
    }
    shown = verdicts.head(FLEET_ROWS_SHOWN)
    metadata["fleet_verdicts"] = table(
        FLEET_COLUMNS,
        [
            {
                "fingerprint": int(r.fingerprint),
                "verdict": r.verdict,
                "report": r.report,
                "factor": float(r.factor),
                "factor_low": float(r.factor_low),
                "factor_high": float(r.factor_high),
                "p_family": float(r.p_family),
                "i_squared": float(r.i_squared),
            }
            for r in shown.itertuples()
        ],
    )
    for r in decision.detected.itertuples():
        context.log.info(f"fleet detection in release {decision.release.release_id}: {r.report}")
    return dg.MaterializeResult(metadata=metadata)
