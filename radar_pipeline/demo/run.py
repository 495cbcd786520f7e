"""`radar demo`: the whole product on the embedded default, start to finish, in about a minute and a half.

An embedded PostgreSQL 18 serves a small shop under a steady workload. radar snapshots pg_stat_statements every two
seconds through Dagster, captures plans, and a deploy is recorded the way CI records one (`radar deploy`). The deploy
drops the index one query uses. When the window after it has closed, deploy_event_sensor requests the analysis, and
deploy_verdicts, regression_alerts and query_history run through Dagster; the demo prints what they found.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from radar_pipeline.config.queries import sql_text
from radar_pipeline.demo import environment, workload
from radar_pipeline.terminal import clean, fitted_table

if TYPE_CHECKING:
    from radar_pipeline.config.settings import RadarSettings

console = Console()
if not console.is_terminal:  # a log or a pipe: wide enough for the verdict table
    console = Console(width=120)
DEPLOY_ID = "shop-v2"
QUIET = {"loggers": {"console": {"config": {"log_level": "ERROR"}}}}  # the run logs stay in Dagster, not the terminal


def main() -> int:
    """Run the demo; 0 when the regression was found (other statements flagged by a change of the machine's load
    are reported, not counted as a failure)."""
    started = time.monotonic()
    embedded = environment.start(fresh=True)
    try:
        os.environ.update(embedded.environment())
        return _run(embedded, started)
    finally:
        embedded.stop()


def _run(embedded: environment.Embedded, started: float) -> int:
    # Imported here: the definitions read the environment the embedded default has just set.
    import dagster as dg

    from radar_pipeline import definitions
    from radar_pipeline.config.settings import settings
    from radar_pipeline.warehouse import migrations

    configured = settings()  # the embedded default's settings, which main has just put in the environment
    assert configured.warehouse_url is not None
    warehouse = configured.warehouse_url.get_secret_value()
    app_dsn = embedded.server.dsn(environment.APP_DB)
    repo = definitions.defs().get_repository_def()
    instance = dg.DagsterInstance.get()

    with Progress(
        SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(), console=console
    ) as progress:
        step = progress.add_task("Embedded PostgreSQL 18 started; creating the warehouse and the shop", total=None)
        migrations.upgrade(warehouse)
        workload.create(app_dsn)
        progress.update(step, description="Warehouse migrated, shop created (20,000 customers, 100,000 orders)")
        progress.update(step, total=1, completed=1)
        _deploy_under_load(dg, repo, instance, configured, app_dsn, progress)
        checks = _analyse_deploys(dg, repo, instance, progress)
    table, queries, regression, alert = _findings(warehouse, app_dsn)
    return _report(embedded, table, queries, regression, alert, checks, time.monotonic() - started)


def _deploy_under_load(dg, repo, instance, configured: RadarSettings, app_dsn: str, progress: Progress) -> None:  # type: ignore[no-untyped-def]
    """Run the shop's workload with snapshots for a window, record the deploy as CI would and make its change, then
    keep going until the window after it has closed and its last scrape is stored."""
    assert configured.window_seconds is not None and configured.scrape_interval_seconds is not None
    window, scrape = configured.window_seconds, configured.scrape_interval_seconds
    with workload.Workload(app_dsn) as load:
        before = progress.add_task(f"Workload and snapshots every {scrape:.0f} s, before the deploy", total=window + 4)
        _snapshots(dg, repo, instance, window + 4, scrape, progress, before, plans_at=window / 2)
        # CI records the deploy while the snapshots go on: a pause here would be a gap in the window's scrapes.
        recording = _record_deploy(datetime.now(UTC))
        _run_sql(app_dsn, workload.DEPLOY_CHANGE)
        after = progress.add_task("Workload and snapshots after the deploy", total=window + 2 * scrape + 1)
        _snapshots(dg, repo, instance, window + 2 * scrape + 1, scrape, progress, after)
    out, err = recording.communicate()
    if recording.returncode != 0:
        raise RuntimeError(f"radar deploy failed: {err.strip()}")
    progress.console.print(f"[bold]CI:[/bold] radar deploy → {out.strip()}; the deploy ran {workload.DEPLOY_CHANGE}")
    if load.errors:
        progress.console.print(f"[yellow]workload errors: {load.errors[:3]}[/yellow]")


def _record_deploy(at: datetime) -> subprocess.Popen:
    """Start `radar deploy`, exactly as a CI step runs it, for a deploy at `at`."""
    return subprocess.Popen(
        [
            str(Path(sys.executable).parent / "radar"),
            "deploy",
            "--target",
            environment.TARGET,
            "--id",
            DEPLOY_ID,
            "--at",
            at.isoformat(),
            "--service",
            "shop",
            "--version",
            "v2",
            "--url",
            "https://ci.example/shop/v2",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=os.environ.copy(),
    )


def _analyse_deploys(dg, repo, instance, progress: Progress) -> list:  # type: ignore[no-untyped-def]
    """Evaluate deploy_event_sensor and run what it requests (deploy_verdicts, regression_alerts, query_history);
    returns the asset checks' evaluations."""
    checks = []
    sensing = progress.add_task("deploy_event_sensor evaluating", total=None)
    requests = _sense(dg, repo, instance)
    progress.update(sensing, description=f"deploy_event_sensor requested {len(requests)} run(s)", total=1, completed=1)
    analysing = progress.add_task("deploy_verdicts, regression_alerts, query_history running in Dagster", total=None)
    job = repo.get_job("deploy_verdicts_job")
    for request in requests:
        result = job.execute_in_process(
            instance=instance,
            partition_key=request.partition_key,
            # The tags a sensor's run carries: the daemon of `radar dev` then knows this deploy was handled.
            tags={**request.tags, "dagster/sensor_name": "deploy_event_sensor", "dagster/run_key": request.run_key},
            run_config=QUIET,
            raise_on_error=False,
        )
        if not result.success:
            raise RuntimeError(f"the analysis run {result.run_id} failed: see `radar dev`")
        checks += result.get_asset_check_evaluations()
    progress.update(
        analysing, description="deploy_verdicts, regression_alerts and query_history done", total=1, completed=1
    )
    return checks


def _findings(warehouse_url: str, app_dsn: str) -> tuple:
    """What the demo shows, read back from the warehouse: the shop's verdicts, how many queries were analysed, the
    regressions with their causes and plan diffs, and the alert statuses."""
    import pandas as pd
    import sqlalchemy as sa

    with sa.create_engine(warehouse_url).connect() as conn:
        shop_oid = _one(app_dsn, "SELECT oid FROM pg_database WHERE datname = current_database()")
        table = pd.read_sql(
            sql_text("demo.demo_findings"),
            conn,
            params={"d": DEPLOY_ID, "shop": shop_oid},
        )
        analysed = conn.execute(sa.text("SELECT queries FROM radar.analysis WHERE deploy_id = :d"), {"d": DEPLOY_ID})
        queries = analysed.scalar_one()
        regression = conn.execute(
            sa.text(
                "SELECT query, cause, plan_diff->>'summary', change_factor, mean_before_ms, mean_after_ms "
                "FROM radar.regression WHERE deploy_id = :d AND dbid = :shop ORDER BY change_factor DESC"
            ),
            {"d": DEPLOY_ID, "shop": shop_oid},
        ).fetchall()
        alert = conn.execute(
            sa.text(
                "SELECT a.status, left(regexp_replace(q.query, '\\s+', ' ', 'g'), 200) FROM radar.outbox a "
                "LEFT JOIN radar.query q ON q.target = a.target AND q.dbid = a.dbid AND q.userid = a.userid "
                "AND q.queryid = a.queryid AND q.toplevel = a.toplevel "
                "WHERE a.kind = 'detection' AND a.analysis_id = :d ORDER BY a.status"
            ),
            {"d": DEPLOY_ID},
        ).fetchall()
    return table, queries, regression, alert


def _snapshots(dg, repo, instance, seconds, scrape, progress, task, plans_at: float | None = None) -> None:  # type: ignore[no-untyped-def]
    """Materialise pgss_snapshots every `scrape` seconds for `seconds` (and plan_snapshots once, at `plans_at`)."""
    snapshot_job = repo.get_job("pgss_snapshot_job")
    plan_job = repo.get_job("plan_snapshot_job")
    start = time.monotonic()
    planned = plans_at is None
    wanted, taken = int(seconds / scrape), 0
    # As many scrapes as the time asks for, even when a loaded machine makes each slower (up to three times as long).
    while (elapsed := time.monotonic() - start) < seconds or (taken < wanted and elapsed < 3 * seconds):
        taken += 1
        tick = time.monotonic()
        if not snapshot_job.execute_in_process(instance=instance, run_config=QUIET, raise_on_error=False).success:
            raise RuntimeError("a pgss_snapshots run failed: see `radar dev`")
        if not planned and plans_at is not None and elapsed >= plans_at:
            plan_job.execute_in_process(instance=instance, run_config=QUIET, raise_on_error=False)
            planned = True
        progress.update(task, completed=min(seconds, time.monotonic() - start))
        time.sleep(max(0.0, scrape - (time.monotonic() - tick)))
    progress.update(task, completed=seconds)


def _sense(dg, repo, instance) -> list:  # type: ignore[no-untyped-def]
    """Evaluate deploy_event_sensor as the daemon would, and apply its partition requests."""
    from radar_pipeline.defs.deploys.deploy_verdicts import deploy_event_sensor

    resources = {k: v for k, v in repo.get_top_level_resources().items() if k in ("warehouse", "analysis")}
    with dg.build_sensor_context(instance=instance, resources=resources) as context:
        result = deploy_event_sensor(context)
    if not isinstance(result, dg.SensorResult):
        return []
    for request in result.dynamic_partitions_requests or []:
        instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))
    return list(result.run_requests or [])


def _one(dsn: str, query: str) -> object:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(query).fetchone()  # type: ignore[arg-type]
    return row[0] if row else None


def _run_sql(dsn: str, statement: str) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(statement)  # type: ignore[arg-type]


def _report(embedded, table, queries, regression, alert, checks, seconds: float) -> int:  # type: ignore[no-untyped-def]
    """Print what the demo found and what to do next; 0 when the regression was found and the controls were not."""
    from radar_pipeline.engine.vocabulary import Verdict

    console.rule(f"[bold]Verdicts of deploy {DEPLOY_ID}[/bold]")
    rows = [
        (
            r.verdict,
            r.reason,
            r.cause if isinstance(r.cause, str) else "",
            _fmt(r.mean_before_ms, "{:.3f}"),
            _fmt(r.mean_after_ms, "{:.3f}"),
            _fmt(r.change_factor, "×{:.1f}"),
            _fmt(r.confidence, "{:.4f}"),
            r.query,
        )
        for r in table.itertuples()
    ]
    headers = ("verdict", "reason", "cause", "before ms", "after ms", "factor", "confidence", "query")
    shown = fitted_table(headers, rows, console.width, flexible="query", droppable=("reason", "confidence"))
    console.print(shown)
    console.print(f"({len(table)} of the {queries} statements analysed had calls in the window)")
    found = [r for r in regression if r[0] and workload.REGRESSED.split(" WHERE")[0] in r[0]]
    console.rule("[bold]The regression[/bold]")
    for query, cause, plan, factor, before, after in regression:
        console.print(
            f"{escape(query or '')}\n  {before:.3f} → {after:.3f} ms (×{factor:.1f}), cause: [bold]{cause}[/bold]"
        )
        console.print(f"  plan: {escape(clean(plan))}")
    charts = sorted((embedded.charts / DEPLOY_ID).glob("*.png")) if (embedded.charts / DEPLOY_ID).exists() else []
    for chart in charts:
        console.print(f"  chart: {chart}")
    console.print(
        f"  alert: {', '.join(f'{n} {s}' for s, n in Counter(s for s, _ in alert).items()) or 'none'} "
        "(no Slack configured: the message is in the regression_alerts run log)"
    )
    for check in checks:
        if check.passed:
            console.print(f"  check {check.check_name}: passed")
        else:
            facts = ", ".join(f"{k} {v.value}" for k, v in check.metadata.items())
            console.print(
                f"  [yellow]check {check.check_name}: failed ({escape(facts)})[/yellow]: the machine was too busy to "
                "scrape on time; the verdicts stand, with less data behind them"
            )
    # Every other statement the deploy's alert names (detected, probably slower, a load change) or found detected.
    named = [q for _, q in alert] + [r.query for r in table.itertuples() if r.verdict == Verdict.DETECTED]
    regressed = workload.REGRESSED.split(" WHERE")[0]
    flagged = list(dict.fromkeys(clean(q) or "(no text stored)" for q in named if regressed not in (q or "")))
    if flagged:
        # Not a failure of the demo: the workload shares this machine, and when its load changes at the deploy the
        # engine rightly sees other queries change too.
        others = escape("; ".join(flagged)[:200])
        console.print(
            f"[yellow]also flagged: {len(flagged)} other statement(s) of the shop ({others}): "
            "the machine's load changed during the demo[/yellow]"
        )
    radar = _radar_command()
    console.rule("[bold]Next[/bold]")
    console.print(f"  {radar} verdicts {DEPLOY_ID}        every statement's verdict, from the warehouse the demo left")
    console.print(f"  {radar} gate {DEPLOY_ID}            the deploy's state as CI gets it (exit 1: fail; see --help)")
    console.print(f"  {radar} dev                    the Dagster UI at http://127.0.0.1:3000 (Ctrl-C stops it)")
    console.print(f"  {environment.psql_command(embedded)}   the warehouse (schema radar) while radar dev runs")
    console.print(f"(the demo took {seconds:.0f} s; everything it made is under {embedded.home})")
    return 0 if found else 1


def _radar_command() -> str:
    """How to run radar from here: `radar` when it is on PATH, else its path (relative when below this folder)."""
    script = Path(sys.executable).parent / "radar"
    on_path = shutil.which("radar")
    if on_path and Path(on_path).resolve() == script.resolve():
        return "radar"
    try:
        return str(script.relative_to(Path.cwd()))
    except ValueError:
        return str(script)


def _fmt(value: float, pattern: str) -> str:
    return "" if value is None or value != value else pattern.format(value)
