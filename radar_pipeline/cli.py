"""The `radar` command."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import click

from radar_pipeline.config import WAREHOUSE_URL_VAR, ConfigError, printable, scrub_secret
from radar_pipeline.terminal import clean, fitted_table

if TYPE_CHECKING:
    import pandas as pd

STARTED = "radar.started"  # ctx.meta key: when the command started, by time.monotonic()
WAREHOUSE_HELP = f"warehouse URL (default: ${WAREHOUSE_URL_VAR}, else the embedded default's under $RADAR_HOME)"


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.pass_context
def main(ctx: click.Context) -> None:
    """radar_pipeline: find the PostgreSQL queries a deploy made slower."""
    # Before any heavy import or the warehouse's answer: `radar deploy` records this as the deploy's time (by the
    # warehouse's clock, less the time spent since: the runner's wall clock may be off).
    ctx.meta[STARTED] = time.monotonic()


@main.command()
def demo() -> None:
    """The whole product on an embedded PostgreSQL: a workload, a deploy that drops an index, the regression found."""
    from radar_pipeline.demo.run import main as run_demo

    sys.exit(run_demo())


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="address the UI listens on")
@click.option("--port", default=3000, show_default=True, help="port the UI listens on")
def dev(host: str, port: int) -> None:
    """The Dagster UI on the embedded default (what `radar demo` left) or on the configured databases."""
    from radar_pipeline.demo.dev import main as run_dev

    try:
        status = run_dev(host, port)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    sys.exit(status)


@main.group()
def db() -> None:
    """The warehouse schema."""


@db.command("upgrade")
@click.option("--warehouse", "url", envvar=WAREHOUSE_URL_VAR, help=WAREHOUSE_HELP)
def db_upgrade(url: str | None) -> None:
    """Apply the sql/ migrations not yet applied to the warehouse, then bring stored statement keys and texts to
    the current version (texts redacted as the collector now stores them)."""
    from radar_pipeline.steps.statement_keys import redact_texts, rekey
    from radar_pipeline.warehouse import migrations

    try:
        url = _require(url)
        applied = migrations.upgrade(url)
        engine = _engine(url)
        rekeyed = rekey(engine)
        redacted = redact_texts(engine)
        engine.dispose()
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    except Exception as exc:  # a connection failure must not print the password
        raise click.ClickException(_failure(f"migrating {url or 'the warehouse'} failed", exc, url)) from None
    if applied:
        click.echo(f"applied {len(applied)} migration(s): {', '.join(applied)}")
    else:
        click.echo("the warehouse schema is up to date")
    if rekeyed:
        click.echo(f"{rekeyed} statement key(s) recomputed from their text")
    if redacted:
        click.echo(f"{redacted} statement text(s) redacted (literals of utility statements, such as passwords)")


@main.group(invoke_without_command=True)
@click.option("--target", help="the watched target the deploy went to (default: $RADAR_DEPLOY_TARGET)")
@click.option("--id", "deploy_id", help="a unique id for this deploy (default: from GitHub Actions or GitLab CI)")
@click.option("--at", "at", help="when it happened, ISO 8601 with a time zone (default: when this command started)")
@click.option("--service", help="the service deployed (default: the repository)")
@click.option("--version", "version", help="the version deployed (default: the commit)")
@click.option("--url", help="a link to the deploy (default: the CI run)")
@click.option("--commit", "commit_sha", help="the full commit SHA deployed, for its status (default: the CI's)")
@click.option("--repository", help="GitHub owner/name or GitLab project path, for the status (default: the CI's)")
@click.option("--code-host", type=click.Choice(["github", "gitlab"]), help="where the repository is (default: the CI)")
@click.option("--api-url", help="the code host's API (default: GITHUB_API_URL or CI_API_V4_URL)")
@click.option("--run-url", help="the CI run that deployed (default: the CI's)")
@click.option("--github-deployment", "github_deployment_id", type=click.IntRange(min=1), help="a GitHub deployment id")
@click.option("--warehouse", envvar=WAREHOUSE_URL_VAR, help=WAREHOUSE_HELP)
@click.pass_context
def deploy(
    ctx: click.Context,
    target: str | None,
    deploy_id: str | None,
    at: str | None,
    service: str | None,
    version: str | None,
    url: str | None,
    commit_sha: str | None,
    repository: str | None,
    code_host: str | None,
    api_url: str | None,
    run_url: str | None,
    github_deployment_id: int | None,
    warehouse: str | None,
) -> None:
    """Record a deploy (what CI calls after deploying); flags absent are read from the CI's own variables (README,
    "CI variables"). In a CI, a missing commit or repository (no status can be sent) or an empty service or version
    is warned about on stderr, the variable named."""
    if ctx.invoked_subcommand is not None:
        return
    from radar_pipeline.ci_env import TARGET_VAR, ci_defaults, ci_warnings
    from radar_pipeline.warehouse import deploys

    found = ci_defaults(os.environ)
    given = {
        "target": target,
        "deploy_id": deploy_id,
        "service": service,
        "version": version,
        "url": url,
        "commit_sha": commit_sha,
        "repository": repository,
        "code_host": code_host,
        "api_url": api_url,
        "run_url": run_url,
        "github_deployment_id": github_deployment_id,
    }
    fields = {k: v if v is not None else found.get(k) for k, v in given.items()}
    if fields["github_deployment_id"] is not None:
        fields["github_deployment_id"] = int(fields["github_deployment_id"])
    for line in ci_warnings(os.environ, fields):
        click.echo(printable(line), err=True)
    if not fields["target"]:
        raise click.UsageError(f"no target: pass --target or set {TARGET_VAR}")
    if not fields["deploy_id"]:
        raise click.UsageError("no deploy id: pass --id (outside GitHub Actions and GitLab CI it has no default)")
    try:
        event = deploys.DeployEvent(
            deployed_at=deploys.parse_time(at, "--at") if at is not None else None,
            source=found.get("source", "cli") if deploy_id is None else "cli",
            **fields,  # type: ignore[arg-type]
        )
        recorded = deploys.record(_engine(warehouse), event, _configured_targets(), started=ctx.meta.get(STARTED))
    except (deploys.DeployError, ConfigError) as exc:
        raise click.ClickException(printable(str(exc))) from None
    except Exception as exc:  # the warehouse is down, or refused us: one line, not a traceback
        raise click.ClickException(_failure("recording the deploy failed", exc, warehouse)) from None
    stored = recorded.event
    state = "recorded" if recorded.inserted else "already recorded, unchanged"
    click.echo(printable(f"deploy {stored.deploy_id} to {stored.target} at {stored.deployed_at}: {state}"))


@deploy.command("import")
@click.argument("csv_file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--warehouse", envvar=WAREHOUSE_URL_VAR, help=WAREHOUSE_HELP)
def deploy_import(csv_file: Path, warehouse: str | None) -> None:
    """Load historical deploys from a CSV file (deploy_id,target,deployed_at[,service,version,url]) for backfills."""
    from radar_pipeline.warehouse import deploys

    try:
        recorded = deploys.import_csv(_engine(warehouse), csv_file, _configured_targets())
    except (deploys.DeployError, ConfigError) as exc:
        raise click.ClickException(printable(str(exc))) from None
    except Exception as exc:
        raise click.ClickException(_failure("importing the deploys failed", exc, warehouse)) from None
    new = sum(r.inserted for r in recorded)
    click.echo(f"{len(recorded)} deploys read: {new} recorded, {len(recorded) - new} already recorded")


@main.command()
@click.argument("deploy_id")
@click.option("--all", "show_all", is_flag=True, help="every query, not only the first 40 rows")
@click.option(
    "--format",
    "output",
    type=click.Choice(["table", "csv", "json"]),
    default="table",
    show_default=True,
    help="a table fitted to the terminal, or every column of every verdict for scripts",
)
@click.option("--warehouse", envvar=WAREHOUSE_URL_VAR, help=WAREHOUSE_HELP)
def verdicts(deploy_id: str, show_all: bool, output: str, warehouse: str | None) -> None:
    """Print a deploy's verdicts (or a periodic check's, DEPLOY_ID periodic:<hour>), detections first."""
    from radar_pipeline.engine.vocabulary import VERDICTS
    from radar_pipeline.warehouse.analysis import deploy_states, impact_of, verdicts_of
    from radar_pipeline.warehouse.deploys import PERIODIC_PREFIX

    try:
        engine = _engine(warehouse)
        with engine.connect() as conn:
            table = verdicts_of(conn, deploy_id)
            summary, changes = impact_of(conn, deploy_id)
            state = deploy_states(conn, [deploy_id])
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    except Exception as exc:
        raise click.ClickException(_failure("reading the verdicts failed", exc, warehouse)) from None
    if table.empty:
        raise click.ClickException(f"no verdicts for {clean(deploy_id)!r}: not recorded, or not analysed yet")
    if output != "table":
        click.echo(_for_scripts(table, output), nl=False)
        return
    counts = table["verdict"].value_counts()
    what = "periodic check" if deploy_id.startswith(PERIODIC_PREFIX) else "deploy"
    verdict_counts = ", ".join(f"{counts.get(v, 0)} {v}" for v in VERDICTS)
    if state.empty:
        click.echo(f"{what} {clean(deploy_id)}: {verdict_counts}")
    else:
        row = state.iloc[0]
        click.echo(f"{what} {clean(deploy_id)}: {row['state']}; {verdict_counts}")
        cleared = _cleared_line(row)
        if cleared:
            click.echo(cleared)
    if what == "deploy":
        _print_impact(summary, changes, show_all)
    shown = table if show_all else table.head(40)
    _print_verdicts(shown)
    if len(shown) < len(table):
        click.echo(f"… {len(table) - len(shown)} more (--all)")


def _for_scripts(table: pd.DataFrame, output: str) -> str:
    """Every column of every verdict as CSV or JSON (a list of verdict objects): times in ISO 8601 and the change's
    offset from the deploy in seconds, the plan diff and the merged queryids as JSON (nested in JSON, a JSON text in
    a CSV cell), text from outside on one line without control characters (JSON escapes the rest)."""
    import json

    import pandas as pd

    whole = table.assign(change_after_deploy=table["change_after_deploy"].dt.total_seconds()).rename(
        columns={"change_after_deploy": "change_after_deploy_s"}
    )
    for name in whole.columns:
        column = whole[name]
        if isinstance(column.dtype, pd.DatetimeTZDtype):
            whole[name] = [None if pd.isna(t) else t.isoformat() for t in column]
        elif pd.api.types.is_object_dtype(column) or pd.api.types.is_string_dtype(column):
            whole[name] = [_script_cell(v, nested=output == "json") for v in column]
    if output == "csv":
        return whole.to_csv(index=False)
    return json.dumps(json.loads(whole.to_json(orient="records")), indent=1) + "\n"


def _script_cell(value: object, nested: bool) -> object:
    """A text cell on one line without control characters; a JSON value (a plan diff, merged queryids) as it is when
    `nested`, else as its JSON text (ASCII: nothing in it can reorder or colour a terminal)."""
    import json

    if isinstance(value, str):
        return clean(value)
    if isinstance(value, dict | list):
        return value if nested else json.dumps(value)
    return value


def _cleared_line(row: pd.Series) -> str:
    """The share of the deploy's execution time after it that cleared statements hold (radar.deploy_state), against
    the share a pass needs; empty with no analysis yet, or nothing run after the deploy."""
    share = row["cleared_share"]
    if share is None or share != share:
        return ""
    return f"{share:.1%} of the execution time after the deploy is cleared (a pass needs {row['pass_share']:.0%})"


def _print_impact(summary: pd.DataFrame, changes: pd.DataFrame, show_all: bool) -> None:
    """The deploy's impact above its verdicts: execution time and calls per minute before → after for the target (and
    each database when there are several), then the statements whose load changed, heaviest first."""
    import pandas as pd
    from rich.console import Console

    from radar_pipeline.alerts.render import NO_DATA_BEFORE

    def ratio(before: float, after: float) -> str:
        return f" (×{after / before:.2f})" if before > 0 else ""

    several = summary["target"].nunique() > 1 or len(summary) > 2
    for r in summary.itertuples():
        if int(r.dbid) != -1 and not several:
            continue
        where = "database time" if int(r.dbid) == -1 else f"  database {int(r.dbid)}"
        prefix = f"{clean(str(r.target))}: " if summary["target"].nunique() > 1 else ""
        if not r.statements_before:  # nothing stored before the deploy: not a load of 0
            click.echo(
                f"{prefix}{where}: {NO_DATA_BEFORE}; after it {r.exec_ms_per_min_after:,.1f} ms per minute, calls "
                f"{r.calls_per_min_after:,.1f} per minute, statements {r.statements_after}"
            )
            continue
        click.echo(
            f"{prefix}{where}: {r.exec_ms_per_min_before:,.1f} → {r.exec_ms_per_min_after:,.1f} ms per minute"
            f"{ratio(r.exec_ms_per_min_before, r.exec_ms_per_min_after)}; calls {r.calls_per_min_before:,.1f} → "
            f"{r.calls_per_min_after:,.1f} per minute; statements {r.statements_before} → {r.statements_after}"
        )
    if changes.empty:
        return
    shown = changes if show_all else changes.head(20)

    def fmt(values: pd.Series, pattern: str) -> list[str]:
        return [("" if pd.isna(v) else pattern.format(v)) for v in values]

    columns = {
        "change": [f"{k}{' (heavy)' if h else ''}" for k, h in zip(shown["kind"], shown["heavy"], strict=True)],
        "calls/min": [
            f"{b:,.1f} → {a:,.1f}"
            for b, a in zip(shown["calls_per_min_before"], shown["calls_per_min_after"], strict=True)
        ],
        "exec ms/min": [
            f"{b:,.1f} → {a:,.1f}"
            for b, a in zip(shown["exec_ms_per_min_before"], shown["exec_ms_per_min_after"], strict=True)
        ],
        "mean after ms": fmt(shown["mean_after_ms"], "{:.3f}"),
        "rows/call": [
            "" if pd.isna(a) else (f"{a:.1f}" if pd.isna(b) else f"{b:.1f} → {a:.1f}")
            for b, a in zip(shown["rows_per_call_before"], shown["rows_per_call_after"], strict=True)
        ],
        "share ×": fmt(shown["share_ratio"], "{:.2f}"),
        "queryid": [str(q) for q in shown["queryid"]],
        "query": [clean(q) for q in shown["query"]],
    }
    console = Console(highlight=False)
    rows = list(zip(*columns.values(), strict=True))
    console.print(fitted_table(list(columns), rows, console.width, flexible="query", droppable=("share ×", "queryid")))
    if len(shown) < len(changes):
        click.echo(f"… {len(changes) - len(shown)} more load changes (--all)")


def _print_verdicts(table: pd.DataFrame) -> None:
    """The verdicts as a table fitted to the terminal: times in ms, factor and its 95% interval, the clearing rule's
    bound, confidence, the history intervals the test used, the change relative to the deploy, the statement's text
    cut to the room left (CSV or JSON give it whole)."""
    import pandas as pd
    from rich.console import Console

    from radar_pipeline.pgss_model import shared_queryid_note

    def fmt(values: pd.Series, pattern: str) -> list[str]:
        return [("" if pd.isna(v) else pattern.format(v)) for v in values]

    columns = {
        **({"target": list(table["target"])} if table["target"].nunique() > 1 else {}),
        "verdict": list(table["verdict"]),
        "reason": list(table["reason"]),
        "cause": list(table["cause"].fillna("")),
        "before ms": fmt(table["mean_before_ms"], "{:.3f}"),
        "after ms": fmt(table["mean_after_ms"], "{:.3f}"),
        "factor": fmt(table["change_factor"], "×{:.2f}"),
        # The slowdown where the change was located, with its 95% interval (the window factor above dilutes a change
        # that began late in the window, as a periodic check's may).
        "at the change [95%]": [
            "" if pd.isna(lo) else (f"×{at:.2f} " if not pd.isna(at) else "") + f"[×{lo:.2f}, ×{hi:.2f}]"
            for at, lo, hi in zip(table["factor_at_change"], table["factor_low"], table["factor_high"], strict=True)
        ],
        # The clearing rule's bound (95% one-sided): within 1 + θ at every split where the change could begin, or not.
        "bound": fmt(table["factor_bound"], "≤×{:.2f}"),
        "confidence": fmt(table["confidence"], "{:.4f}"),
        # The intervals of its own history the test combined with the window; "unused": the window alone.
        "history": ["" if pd.isna(n) else (f"{n:,.0f}" if n > 0 else "unused") for n in table["history_intervals"]],
        "change": fmt(pd.to_timedelta(table["change_after_deploy"]).dt.total_seconds(), "{:+.0f}s"),
        "query": list(table["query"]),
    }
    console = Console(highlight=False)
    rows = list(zip(*columns.values(), strict=True))
    console.print(
        fitted_table(
            list(columns),
            rows,
            console.width,
            flexible="query",
            droppable=("history", "bound", "reason", "confidence", "change", "before ms"),
        )
    )
    for row in table.itertuples():  # below the table: its query column is cut to the room left
        if isinstance(row.queryid_shared_with, list) and row.queryid_shared_with:
            click.echo(f"caution, queryid {row.queryid}: {clean(shared_queryid_note(row.queryid_shared_with))}")


def _failure(what: str, exc: BaseException, url: str | None) -> str:
    """One line for an unexpected failure: what failed and the driver's first line, without the password."""
    cause = getattr(exc, "orig", None) or exc
    first = next((line.strip() for line in str(cause).splitlines() if line.strip()), type(cause).__name__)
    return printable(scrub_secret(f"{what}: {type(cause).__name__}: {first}", url or ""))


def _engine(url: str | None):  # type: ignore[no-untyped-def]
    from radar_pipeline.warehouse.database import make_engine

    return make_engine(_require(url))


def _configured_targets() -> list[str]:
    """Target names from RADAR_TARGETS when it is set (a deploy may name them before their first snapshot)."""
    from radar_pipeline.config import TARGETS_VAR, parse_targets

    value = os.environ.get(TARGETS_VAR)
    return [t.name for t in parse_targets(value)] if value else []


def _require(url: str | None) -> str:
    """The warehouse URL given, else the embedded default's (what `radar demo` left under RADAR_HOME)."""
    if url:
        return url
    from radar_pipeline.demo.environment import existing_warehouse

    embedded = existing_warehouse(lambda message: click.echo(message, err=True))
    if embedded is None:
        raise ConfigError(
            f"{WAREHOUSE_URL_VAR} is not set: set it or pass --warehouse (or run `radar demo` first, and the embedded "
            "warehouse it leaves is used)"
        )
    return embedded


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
