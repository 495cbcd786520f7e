"""radar_reconciler without a person: it sends pending alerts, analyses deploys whose analysis was never requested,
adds partitions for imported deploys without runs, gives up after bounded retries, and shows what waits in its tick
and in the nothing_waiting check; a failed analysis is retried by Dagster (deploy_verdicts_job's RetryPolicy and run
retries). Run requests are executed as the daemon would, through the job they name.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import dagster as dg
import sqlalchemy as sa
import yaml

from radar_pipeline.defs.alerts.regression_alerts import regression_alerts
from radar_pipeline.defs.bands.query_history import query_history
from radar_pipeline.defs.deploys.deploy_verdicts import (
    ANALYSIS_RETRY,
    ANALYSIS_RUN_RETRIES,
    RANGE_END,
    RANGE_START,
    deploy_verdicts,
    deploy_verdicts_job,
)
from radar_pipeline.defs.reconcile.reconciler import (
    BACKLOG_CHECK,
    alert_retry_job,
    nothing_waiting,
    radar_reconciler,
)
from radar_pipeline.defs.resources import (
    AnalysisResource,
    ChannelsResource,
    ReconcilerResource,
    SlackResource,
    TargetsResource,
    WarehouseResource,
)
from radar_pipeline.steps.reconcile import PastRun, analysis_retry
from radar_pipeline.warehouse import deploys

from . import fake_slack
from .test_alerts import _outbox, analysed  # noqa: F401 - the fixture is used by name
from .test_outbox import POST, _backoff_passes

ANALYSIS = AnalysisResource(window_seconds=200, scrape_interval_seconds=10, tolerance_floor_seconds=10)
NOW = ReconcilerResource(backoff_seconds=0, grace_seconds=0)  # retries are due at once: time is not waited on


def _bot(slack: fake_slack.FakeSlack, **kwargs: object) -> SlackResource:
    return SlackResource(token="xoxb-test-token", channel="C0RADAR", base_url=slack.api_url, **kwargs)  # type: ignore[arg-type]


def _resources(warehouse_url: str, slack: SlackResource, reconciler: ReconcilerResource = NOW) -> dict:
    return {
        "warehouse": WarehouseResource(url=warehouse_url),
        "analysis": ANALYSIS,
        "slack": slack,
        "channels": ChannelsResource(),
        "targets": TargetsResource(spec="main=postgresql://nobody@127.0.0.1:1/none"),
        "reconciler": reconciler,
    }


def _defs(resources: dict) -> dg.Definitions:
    return dg.Definitions(
        assets=[deploy_verdicts, regression_alerts, query_history],
        asset_checks=[nothing_waiting],
        jobs=[deploy_verdicts_job, alert_retry_job],
        sensors=[radar_reconciler],
        resources=resources,
    )


def _quick(resources: dict) -> dg.Definitions:
    """deploy_verdicts_job as it runs, its step retries without their waits (ANALYSIS_RETRY's)."""
    job = dg.define_asset_job(
        deploy_verdicts_job.name,
        selection=dg.AssetSelection.assets("deploy_verdicts").downstream(depth=1),
        executor_def=dg.in_process_executor,
        op_retry_policy=dg.RetryPolicy(max_retries=ANALYSIS_RETRY.max_retries),
    )
    return dg.Definitions(assets=[deploy_verdicts, regression_alerts, query_history], jobs=[job], resources=resources)


def _retries(result: dg.ExecuteInProcessResult) -> int:
    return sum(1 for e in result.all_events if e.event_type == dg.DagsterEventType.STEP_UP_FOR_RETRY)


def _tick(instance: dg.DagsterInstance, resources: dict, cursor: str | None = None) -> dg.SensorResult:
    context = dg.build_sensor_context(instance=instance, cursor=cursor, resources=resources)
    return radar_reconciler(context)


def _execute(instance: dg.DagsterInstance, defs: dg.Definitions, request: dg.RunRequest) -> dg.ExecuteInProcessResult:
    """Launch a run request as the daemon would: its job, partition and tags (run_key included)."""
    job = defs.resolve_job_def(request.job_name or "")
    tags = {**request.tags, "dagster/run_key": request.run_key or ""}
    return job.execute_in_process(
        instance=instance, partition_key=request.partition_key, tags=tags, raise_on_error=False
    )


def _forget_analysis(warehouse) -> None:
    """The deploy as if its analysis had never been written."""
    with warehouse.begin() as conn:
        for table in ("radar.verdict", "radar.analysis"):
            conn.execute(sa.text(f"DELETE FROM {table} WHERE deploy_id = 'd-7'"))


def _analysed(warehouse) -> bool:
    with warehouse.connect() as conn:
        return conn.execute(sa.text("SELECT count(*) FROM radar.analysis WHERE deploy_id = 'd-7'")).scalar_one() == 1


def _check(result: dg.SensorResult) -> dg.AssetCheckEvaluation:
    (evaluation,) = [e for e in result.asset_events if isinstance(e, dg.AssetCheckEvaluation)]
    assert evaluation.check_name == BACKLOG_CHECK
    return evaluation


def test_slack_500_429_then_timeout_then_accept_one_message_sent_by_the_reconciler(analysed, warehouse_url, slack):  # noqa: F811
    resources = _resources(warehouse_url, _bot(slack, timeout_seconds=1))
    defs = _defs(resources)
    # One attempt: a 500 and a 429 (retried inside it), then a request that gets no answer in time.
    slack.fail_next(POST, (500, {}), (429, {"Retry-After": "1"}))
    slack.lose_next(POST, 3.0)
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("deploys", ["d-7"])
        first = _execute(instance, defs, dg.RunRequest(job_name="alert_retry_job", partition_key="d-7"))
        assert first.success
        assert [r[2] for r in _outbox(analysed)] == ["pending"] and not slack.messages()

        waiting = _tick(instance, resources)  # inside the backoff: nothing requested, the check says it waits
        assert not waiting.run_requests and _check(waiting).metadata["alerts_backing_off"].value == 1

        _backoff_passes(analysed)
        tick = _tick(instance, resources, waiting.cursor)
        (request,) = tick.run_requests
        assert (request.job_name, request.partition_key, request.run_key) == (
            "alert_retry_job",
            "d-7",
            "alerts:d-7:1:reconcile-1",
        )
        assert not _check(tick).passed
        assert _execute(instance, defs, request).success

        after = _tick(instance, resources, tick.cursor)
        assert not after.run_requests and _check(after).passed
    assert len(slack.calls_to(POST)) == 4  # 500, 429, lost, accepted
    assert len(slack.messages()) == 1  # lost: nothing; duplicated: nothing
    assert [r[2] for r in _outbox(analysed)] == ["sent"]


def test_a_transient_warehouse_error_is_retried_in_the_run(analysed, warehouse_url, slack):  # noqa: F811
    _forget_analysis(analysed)
    resources = _resources(warehouse_url, _bot(slack))
    with analysed.begin() as conn:  # the warehouse fails the analysis's first write (a sequence is not rolled back)
        conn.execute(
            sa.text(
                "CREATE SEQUENCE radar.fail_once; "
                "CREATE FUNCTION radar.fail_once() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                "IF nextval('radar.fail_once') = 1 THEN RAISE EXCEPTION 'the warehouse went away'; END IF; "
                "RETURN NEW; END $$; "
                "CREATE TRIGGER fail_once BEFORE INSERT ON radar.verdict FOR EACH STATEMENT "
                "EXECUTE FUNCTION radar.fail_once()"
            )
        )
    try:
        with dg.instance_for_test() as instance:
            instance.add_dynamic_partitions("deploys", ["d-7"])
            request = dg.RunRequest(job_name="deploy_verdicts_job", partition_key="d-7")
            result = _execute(instance, _quick(resources), request)
            assert result.success and _retries(result) == 1 and _analysed(analysed)
            tick = _tick(instance, resources)
            assert not tick.run_requests and _check(tick).passed
    finally:
        with analysed.begin() as conn:
            conn.execute(sa.text("DROP TRIGGER fail_once ON radar.verdict; DROP FUNCTION radar.fail_once()"))
            conn.execute(sa.text("DROP SEQUENCE radar.fail_once"))
    assert len(slack.messages()) == 1  # the analysis alerted, once


def test_a_deploy_whose_runs_fail_gets_bounded_runs_then_waits_for_a_person(analysed, warehouse_url, slack):  # noqa: F811
    """A lasting failure: each run retries its step (ANALYSIS_RETRY) and fails; the reconciler requests another run
    after its backoff, at most max_analysis_runs in all, then stops, and nothing_waiting says the deploy waits."""
    _forget_analysis(analysed)
    reconciler = ReconcilerResource(backoff_seconds=0, grace_seconds=0, max_analysis_runs=2)
    resources = _resources(warehouse_url, _bot(slack), reconciler)
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("deploys", ["d-7"])
        with analysed.begin() as conn:  # a lasting failure
            conn.execute(sa.text("ALTER TABLE radar.verdict RENAME TO verdict_away"))
        try:
            keys, retries = [], []
            for _ in range(4):
                tick = _tick(instance, resources)
                for request in tick.run_requests:
                    keys.append(request.run_key)
                    result = _execute(instance, _quick(resources), request)
                    assert not result.success
                    retries.append(_retries(result))
        finally:
            with analysed.begin() as conn:
                conn.execute(sa.text("ALTER TABLE radar.verdict_away RENAME TO verdict"))
    assert keys == ["d-7:reconcile-1", "d-7:reconcile-2"]
    assert retries == [ANALYSIS_RETRY.max_retries] * 2
    assert not _check(tick).passed and _check(tick).metadata["deploys_without_analysis"].value == 1


def test_analysis_retries_are_dagster_s_within_a_run_and_the_reconciler_s_between_runs(analysed, warehouse_url, slack):  # noqa: F811, E501
    """deploy_verdicts_job retries a failed step with backoff for about a minute (the run holds its slot of the
    analysis pool meanwhile, so no longer) and a crashed run (dagster.yaml and the Helm values enable run retries
    for crashes only); a refusal is not retried; longer outages are the reconciler's (its default: 4 runs, 5 min
    doubling)."""
    assert deploy_verdicts_job.op_retry_policy == ANALYSIS_RETRY
    assert ANALYSIS_RETRY.backoff == dg.Backoff.EXPONENTIAL
    assert sum(ANALYSIS_RETRY.calculate_delay(n) for n in range(1, ANALYSIS_RETRY.max_retries + 1)) <= 90
    assert ReconcilerResource().max_analysis_runs == 4 and ReconcilerResource().backoff_seconds == 300
    assert deploy_verdicts_job.tags["dagster/max_retries"] == str(ANALYSIS_RUN_RETRIES)
    root = Path(__file__).resolve().parents[1]
    local = yaml.safe_load((root / "dagster.yaml").read_text())["run_retries"]
    assert local == {"enabled": True, "max_retries": 0, "retry_on_asset_or_op_failure": False}
    helm = yaml.safe_load((root / "deploy" / "helm" / "values.yaml").read_text())["dagsterDaemon"]["runRetries"]
    assert helm == {"enabled": True, "maxRetries": 0, "retryOnAssetOrOpFailure": False}
    defs = _defs(_resources(warehouse_url, _bot(slack)))
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("deploys", ["nowhere"])
        result = _execute(instance, defs, dg.RunRequest(job_name="deploy_verdicts_job", partition_key="nowhere"))
        assert not result.success and _retries(result) == 0  # refused at once: no wait


def test_a_deploy_inside_a_backfill_run_in_flight_is_not_requested_again(analysed, warehouse_url, slack):  # noqa: F811
    """A backfill's run over several deploys carries the range, not the partition tag: while it is queued or running,
    the deploys inside it are not requested again; once it ended without analysing them, they are."""
    _forget_analysis(analysed)
    resources = _resources(warehouse_url, _bot(slack))
    defs = _defs(resources)
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("deploys", ["d-6", "d-7", "d-8"])
        backfill = instance.create_run_for_job(
            defs.resolve_job_def("deploy_verdicts_job"),
            status=dg.DagsterRunStatus.STARTED,
            tags={RANGE_START: "d-6", RANGE_END: "d-8"},
        )
        assert not _tick(instance, resources).run_requests
        instance.report_run_failed(backfill)
        (request,) = _tick(instance, resources).run_requests
        assert (request.partition_key, request.run_key) == ("d-7", "d-7:reconcile-1")


def test_imported_deploys_get_partitions_without_runs_and_a_missed_one_is_requested(warehouse, warehouse_url, tmp_path):
    with warehouse.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO radar.pgss_info_snapshot VALUES ('main', now() - interval '1 hour', 0, NULL, 180000, "
                "'1.12', 0, 0)"
            )
        )
    history = tmp_path / "history.csv"
    history.write_text(
        "deploy_id,target,deployed_at\nold-1,main,2026-10-01T10:00:00Z\nold-2,main,2026-10-02T10:00:00Z\n"
    )
    deploys.import_csv(warehouse, history)
    # A reported deploy the sensor never requested (its transaction committed after the cursor passed it).
    deploys.record(warehouse, deploys.DeployEvent("missed", "main", datetime.now(UTC) - timedelta(hours=1)))
    resources = _resources(warehouse_url, SlackResource())
    with dg.instance_for_test() as instance:
        tick = _tick(instance, resources)
        assert [(r.run_key, r.partition_key) for r in tick.run_requests] == [("missed:reconcile-1", "missed")]
        assert sorted(tick.dynamic_partitions_requests[0].partition_keys) == ["missed", "old-1", "old-2"]
        instance.add_dynamic_partitions("deploys", ["missed", "old-1", "old-2"])
        # The daemon dedupes run keys; with the partitions added, nothing new is asked for imported deploys.
        again = _tick(instance, resources, tick.cursor)
        assert not again.dynamic_partitions_requests
        assert [r.run_key for r in again.run_requests] == ["missed:reconcile-1"]


def test_the_check_runs_on_its_own(analysed, warehouse_url, slack):  # noqa: F811
    slack.fail_next(POST, (400, {}))  # a final refusal: failed for good
    defs = _defs(_resources(warehouse_url, _bot(slack)))
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("deploys", ["d-7"])
        _execute(instance, defs, dg.RunRequest(job_name="alert_retry_job", partition_key="d-7"))
        result = dg.materialize(
            [regression_alerts, nothing_waiting],
            selection=dg.AssetSelection.checks(nothing_waiting),
            resources=_resources(warehouse_url, _bot(slack)),
            instance=instance,
        )
    (evaluation,) = result.get_asset_check_evaluations()
    assert not evaluation.passed and evaluation.metadata["alerts_failed"].value == 1


def test_the_retry_policy():
    at = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
    backoff = timedelta(minutes=5)
    assert analysis_retry("d", [], at, 4, backoff).run_key == "d:reconcile-1"
    assert not analysis_retry("d", [PastRun(True, None)], at, 4, backoff).request
    two = [PastRun(False, at), PastRun(False, at - timedelta(hours=1))]
    assert not analysis_retry("d", two, at + timedelta(minutes=9), 4, backoff).request  # 5 min × 2
    assert analysis_retry("d", two, at + timedelta(minutes=10), 4, backoff).run_key == "d:reconcile-3"
    assert "gave up" in analysis_retry("d", two * 2, at + timedelta(days=1), 4, backoff).reason


def test_an_alert_run_that_fails_before_claiming_is_followed_by_another(analysed, warehouse_url, slack):  # noqa: F811
    resources = _resources(warehouse_url, _bot(slack))
    defs = _defs(resources)
    slack.fail_next(POST, (500, {}), (500, {}), (500, {}))  # one attempt that leaves the rows pending
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("deploys", ["d-7"])
        assert _execute(instance, defs, dg.RunRequest(job_name="alert_retry_job", partition_key="d-7")).success
        _backoff_passes(analysed)
        (request,) = _tick(instance, resources).run_requests
        with analysed.begin() as conn:  # the warehouse fails the retry run before it claims anything
            conn.execute(sa.text("ALTER TABLE radar.outbox RENAME TO outbox_away"))
        try:
            assert not _execute(instance, defs, request).success
        finally:
            with analysed.begin() as conn:
                conn.execute(sa.text("ALTER TABLE radar.outbox_away RENAME TO outbox"))
        (again,) = _tick(instance, resources).run_requests  # not deduplicated away: a new run key
        assert again.run_key == request.run_key.replace("reconcile-1", "reconcile-2")
        assert _execute(instance, defs, again).success
    assert len(slack.messages()) == 1 and [r[2] for r in _outbox(analysed)] == ["sent"]


def test_an_old_resolve_is_never_withheld_and_still_retried(warehouse):
    """A resolve still pending after the alert age limit is neither withheld nor left behind (MAX_ATTEMPTS bounds
    it); a deploy mark that old is withheld."""
    from radar_pipeline.warehouse import reconcile as store

    with warehouse.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO radar.channel_event (channel, kind, subject, deploy_id, target, created_at) VALUES "
                "('pagerduty', 'resolve', 'radar-old', 'd-old', 'main', now() - interval '3 days'), "
                "('pagerduty', 'deploy_mark', 'd-old', 'd-old', 'main', now() - interval '3 days')"
            )
        )
        assert store.withhold_old(conn, timedelta(days=1)) == 1
        rows = conn.execute(sa.text("SELECT kind, status FROM radar.channel_event ORDER BY kind")).fetchall()
        assert [tuple(r) for r in rows] == [("deploy_mark", "withheld"), ("resolve", "pending")]
        waiting = store.waiting_alerts(conn, timedelta(days=1), timedelta(minutes=15))
        assert [(w.analysis_id, w.rows) for w in waiting] == [("d-old", 1)]
        backlog = store.backlog(
            conn, timedelta(days=1), timedelta(minutes=15), timedelta(0), timedelta(0), timedelta(1)
        )
        assert backlog.alerts_due == 1
        conn.execute(sa.text("UPDATE radar.channel_event SET attempts = 8 WHERE kind = 'resolve'"))
        assert not store.waiting_alerts(conn, timedelta(days=1), timedelta(minutes=15))
