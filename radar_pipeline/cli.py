"""The `radar` command."""

from __future__ import annotations

import math
import os
import re
import shlex
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from radar_pipeline.config import WAREHOUSE_URL_VAR, ConfigError, printable, scrub_secret
from radar_pipeline.terminal import clean, console, fitted_table

if TYPE_CHECKING:
    import pandas as pd
    import sqlalchemy as sa

    from radar_pipeline.config.settings import RadarSettings
    from radar_pipeline.steps import gate as gate_step

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
@click.option("--release", "release_id", help="a release id the deploys of one release to several targets share")
@click.option("--canary-role", help="the database role the canary version connects as (a two-arm test during it)")
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
    release_id: str | None,
    canary_role: str | None,
    warehouse: str | None,
) -> None:
    """Record a deploy (what CI calls after deploying); flags absent are read from the CI's own variables
    (docs/ci.md). In a CI, a missing commit or repository (no status can be sent) or an empty service or version
    is warned about on stderr, the variable named."""
    if ctx.invoked_subcommand is not None:
        return
    from radar_pipeline.ci_env import ci_defaults, ci_warnings
    from radar_pipeline.config.settings import DEPLOY_TARGET_VAR, settings
    from radar_pipeline.warehouse import deploys

    found = ci_defaults(os.environ)  # the CI system's own variables (GITHUB_*, CI_*): not radar's settings
    given = {
        "target": target if target is not None else settings("deploy_target").deploy_target,
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
        raise click.UsageError(f"no target: pass --target or set {DEPLOY_TARGET_VAR}")
    if not fields["deploy_id"]:
        raise click.UsageError("no deploy id: pass --id (outside GitHub Actions and GitLab CI it has no default)")
    try:
        event = deploys.DeployEvent(
            deployed_at=deploys.parse_time(at, "--at") if at is not None else None,
            source=found.get("source", "cli") if deploy_id is None else "cli",
            release_id=release_id,
            canary_role=canary_role,
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
    _verdict_due(warehouse, stored.deploy_id, stored.target)


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
@click.option("--canary", "canary_only", is_flag=True, help="the canary arm's verdicts only (a canary deploy)")
@click.option(
    "--fleet", "fleet_only", is_flag=True, help="the fleet verdicts of the deploy's release only (docs/fleets.md)"
)
@click.option("--warehouse", envvar=WAREHOUSE_URL_VAR, help=WAREHOUSE_HELP)
def verdicts(
    deploy_id: str, show_all: bool, output: str, canary_only: bool, fleet_only: bool, warehouse: str | None
) -> None:
    """Print a deploy's verdicts (or a periodic check's, DEPLOY_ID periodic:<hour>), detections first; for a
    canary deploy, its canary arm's verdicts first (docs/canary.md); for a deploy of a release, its fleet verdicts
    last (docs/fleets.md). --canary and --fleet give those parts alone, as CSV or JSON rows of their own columns
    (the per-target rows' columns stay as they are)."""
    from radar_pipeline.engine.vocabulary import VERDICTS
    from radar_pipeline.warehouse import canary as canary_store
    from radar_pipeline.warehouse import labels
    from radar_pipeline.warehouse.analysis import deploy_states, impact_of, verdicts_of
    from radar_pipeline.warehouse.deploys import PERIODIC_PREFIX
    from radar_pipeline.warehouse.groups import groups_of

    if canary_only and fleet_only:
        raise click.UsageError("--canary and --fleet each give one part: choose one")
    if fleet_only:
        _fleet_only(deploy_id, show_all, output, warehouse)
        return
    try:
        engine = _engine(warehouse)
        with engine.connect() as conn:
            table = verdicts_of(conn, deploy_id)
            summary, changes = impact_of(conn, deploy_id)
            state = deploy_states(conn, [deploy_id])
            decided_groups = groups_of(conn, deploy_id)
            group_labels = labels.group_labels(conn, deploy_id)
            canary = canary_store.analysis_of(conn, deploy_id)
            canary_table = canary_store.verdicts_of(conn, deploy_id)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    except Exception as exc:
        raise click.ClickException(_failure("reading the verdicts failed", exc, warehouse)) from None
    if canary_only:
        if canary is None:
            raise click.ClickException(f"no canary analysis for {clean(deploy_id)!r}: no canary role, or not yet")
        if output != "table":
            click.echo(_for_scripts(canary_table, output), nl=False)
            return
    if canary is not None and output == "table":
        _print_canary(canary, canary_table, show_all)
        if canary_only:
            return
    if table.empty:
        if canary is not None and output == "table":
            click.echo(f"deploy {clean(deploy_id)}: no before/after verdicts yet")
            return
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
        looks = row.get("looks_done")
        looks = int(looks) if looks is not None and looks == looks else 0  # NaN != NaN
        done = f" (after {looks} later look{'s' if looks != 1 else ''})" if looks else ""
        click.echo(f"{what} {clean(deploy_id)}: {row['state']}{done}; {verdict_counts}")
        cleared = _cleared_line(row)
        if cleared:
            click.echo(cleared)
    if what == "deploy":
        _print_impact(summary, changes, show_all)
    _print_groups(decided_groups, show_all, group_labels)
    shown = table if show_all else table.head(40)
    _print_verdicts(shown)
    if len(shown) < len(table):
        click.echo(f"… {len(table) - len(shown)} more (--all)")
    if what == "deploy":
        _print_fleet(engine, deploy_id, show_all, warehouse)


def _fleet_only(deploy_id: str, show_all: bool, output: str, warehouse: str | None) -> None:
    """`radar verdicts --fleet`: the fleet verdicts of the deploy's release alone, one row per statement key, with
    the release's id first (its own columns: radar.release_verdict's and the example member's text, never mixed into
    the per-target rows)."""
    try:
        engine = _engine(warehouse)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    release_id, fleet = _read_fleet(engine, deploy_id, warehouse)
    if fleet is None or fleet.empty:
        if release_id is None and not _deploy_exists(engine, deploy_id, warehouse):
            raise click.ClickException(f"deploy {clean(deploy_id)!r} does not exist (radar deploys lists them)")
        why = "in no release of several targets" if release_id is None else f"release {release_id!r} not decided yet"
        raise click.ClickException(f"no fleet verdicts for {clean(deploy_id)!r}: {clean(why)}")
    if output != "table":
        import pandas as pd

        # a later look's after side in seconds, named so (as change_after_deploy_s): empty for the first looks
        after = [None if not isinstance(v, timedelta) else v.total_seconds() for v in fleet["look_after"]]
        fleet = fleet.drop(columns="look_after").assign(look_after_s=pd.Series(after, index=fleet.index, dtype=float))
        click.echo(_for_scripts(fleet, output), nl=False)
        return
    _show_fleet(str(release_id), fleet, show_all)


def _deploy_exists(engine: sa.Engine, deploy_id: str, warehouse: str | None) -> bool:
    """Whether a deploy of this id is recorded (radar.deploy_event)."""
    import sqlalchemy as sa

    try:
        with engine.connect() as conn:
            found = conn.execute(
                sa.text("SELECT 1 FROM radar.deploy_event WHERE deploy_id = :d LIMIT 1"), {"d": deploy_id}
            ).first()
    except Exception as exc:
        raise click.ClickException(_failure("reading the deploy failed", exc, warehouse)) from None
    return found is not None


def _read_fleet(engine: sa.Engine, deploy_id: str, warehouse: str | None) -> tuple[str | None, pd.DataFrame | None]:
    """The deploy's release id (None: in no release) and its stored fleet verdicts (None or empty: none)."""
    from radar_pipeline.warehouse.releases import release_of_deploy, release_verdicts

    try:
        with engine.connect() as conn:
            release_id = release_of_deploy(conn, deploy_id)
            fleet = release_verdicts(conn, release_id) if release_id is not None else None
    except Exception as exc:
        raise click.ClickException(_failure("reading the release's fleet verdicts failed", exc, warehouse)) from None
    return release_id, fleet


def _print_fleet(engine: sa.Engine, deploy_id: str, show_all: bool, warehouse: str | None) -> None:
    """The fleet verdicts of the deploy's release (docs/fleets.md), when it belongs to one that has been decided."""
    release_id, fleet = _read_fleet(engine, deploy_id, warehouse)
    if fleet is None or fleet.empty:
        return
    _show_fleet(str(release_id), fleet, show_all)


def _show_fleet(release_id: str, fleet: pd.DataFrame, show_all: bool) -> None:
    """The release's fleet verdicts as `radar verdicts` prints them: a line for the release, one per statement key."""
    from radar_pipeline.engine.vocabulary import Verdict

    first = fleet.iloc[0]
    detected = int((fleet["verdict"] == Verdict.DETECTED).sum())
    click.echo(
        f"release {clean(str(release_id))} ({first['status']}, {first['analysed']} of {first['members']} deploys "
        f"analysed): {detected} fleet detection{'s' if detected != 1 else ''} among {len(fleet)} statements on "
        "several targets"
    )
    shown = fleet if show_all else fleet.head(20)
    for r in shown.itertuples():
        text = " ".join(clean(str(r.query)).split()) if isinstance(r.query, str) else f"fingerprint {r.fingerprint}"
        click.echo(
            f"  {r.verdict:<13} {clean(r.report)}  [×{r.factor_low:.2f}, ×{r.factor_high:.2f}]  "
            f"p_family {r.p_family:.4g}  {text[:80]}"
        )
    if len(shown) < len(fleet):
        click.echo(f"  … {len(fleet) - len(shown)} more (--all)")


def _look_cell(look: Any, end: Any, deployed_at: Any) -> str:
    """The look that decided a verdict: "first", or "2 (+2 h)" for a later look that ended 2 h after the deploy."""
    import pandas as pd

    from radar_pipeline.alerts.render import span_words

    if look is None or pd.isna(look) or int(look) == 0:
        return "first"
    if end is None or deployed_at is None or pd.isna(end) or pd.isna(deployed_at):
        return str(int(look))
    return f"{int(look)} (+{span_words(pd.Timedelta(end - deployed_at).to_pytimedelta())})"


def _for_scripts(table: pd.DataFrame, output: str) -> str:
    """Every column of every verdict as CSV or JSON (a list of verdict objects): times in ISO 8601 and the change's
    offset from the deploy in seconds, the plan diff and the merged queryids as JSON (nested in JSON, a JSON text in
    a CSV cell), text from outside on one line without control characters (JSON escapes the rest)."""
    import json

    import pandas as pd

    whole = table.copy()
    if "change_after_deploy" in whole:
        whole = whole.assign(change_after_deploy=whole["change_after_deploy"].dt.total_seconds()).rename(
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


def _print_canary(canary: dict[str, Any], table: pd.DataFrame, show_all: bool) -> None:
    """A canary deploy's canary arm: its roles, state (or the error that stopped it), counts, and its verdicts."""
    stable = canary["stable_role"] or (f"userid {canary['stable_userid']}" if canary["stable_userid"] else "?")
    window = f"{_clock(canary['window_start'])} – {_clock(canary['window_end'])}"
    if canary["state"] == "error":
        click.echo(f"canary role {clean(canary['canary_role'])} ({window}): error: {clean(canary['error'] or '')}")
        return
    from radar_pipeline.engine.vocabulary import VERDICTS

    counts = ", ".join(f"{canary[v]} {v}" for v in VERDICTS)
    click.echo(
        f"canary role {clean(canary['canary_role'])} against stable role {clean(stable)} ({window}): "
        f"{canary['state']}; {counts}"
    )
    shown = table if show_all else table.head(40)
    if shown.empty:
        return

    def factor(row: Any) -> str:
        if row.change_factor != row.change_factor:
            return ""
        interval = "" if row.factor_low != row.factor_low else f" [×{row.factor_low:.2f}, ×{row.factor_high:.2f}]"
        return f"×{row.change_factor:.2f}{interval}"

    rows = [
        [
            str(r.verdict),
            factor(r),
            "" if r.mean_stable_ms != r.mean_stable_ms else f"{r.mean_stable_ms:.3f}",
            "" if r.mean_canary_ms != r.mean_canary_ms else f"{r.mean_canary_ms:.3f}",
            f"{r.calls_stable}/{r.calls_canary}",
            str(r.queryid),
            clean(r.query),
        ]
        for r in shown.itertuples()
    ]
    header = ["verdict", "canary/stable", "stable_ms", "canary_ms", "calls s/c", "queryid", "query"]
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(header)]
    for line in [header, *rows]:
        click.echo("  " + "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(line)).rstrip())
    if len(shown) < len(table):
        click.echo(f"  … {len(table) - len(shown)} more canary verdicts (--all)")


def _script_cell(value: object, nested: bool) -> object:
    """A text cell on one line without control characters; a JSON value (a plan diff, merged queryids) as it is when
    `nested`, else as its JSON text (ASCII: nothing in it can reorder or colour a terminal)."""
    import json

    if isinstance(value, str):
        return clean(value)
    if isinstance(value, dict | list):
        return value if nested else json.dumps(value)
    return value


TIER_WORDS = {"improved": "improved", "probably_slower": "probably slower"}


def _cleared_line(row: pd.Series) -> str:
    """The share of the deploy's execution time after it that cleared statements hold (radar.deploy_state), and the
    rule's margin: the time the open statements may have added beyond θ against its bar (sql/0036), with the tiers
    counted; empty with no analysis yet, or nothing run after the deploy."""
    share = row["cleared_share"]
    if share is None or share != share:
        return ""
    line = f"{share:.1%} of the time after the deploy cleared"
    largest, total = row.get("largest_excess_share"), row.get("open_excess_share")
    if largest is not None and largest == largest and total is not None and total == total:
        bars = f"{row['max_open_excess']:.0%}, {row['max_total_excess']:.0%}"
        line += f"; open adds ≤ {largest:.2%} each, {total:.2%} together (pass: {bars})"
        if int(row.get("bounded_open") or 0):
            line += f"; {int(row['bounded_open'])} open within ×{row['gate_factor']:g}"
    tiers = [
        f"{int(row.get(name) or 0)} {words}"
        for name, words in (("improved", "improved"), ("probably_slower", "probably slower"))
        if int(row.get(name) or 0)
    ]
    return line + (f"\nstatements {', '.join(tiers)}" if tiers else "")


def _change_words(change: Any) -> str:
    """A load change's kind as the changes table shows it: "new (heavy)", "replaced by queryid N (×4.0 per call)",
    "the deploy's own statement"."""
    import pandas as pd

    from radar_pipeline.alerts.render import CHANGE_WORDS, replacement_words

    heavy = " (heavy)" if change.heavy else ""
    partner: Any = getattr(change, "partner_queryid", None)
    if change.kind == "replaced" and not pd.isna(partner):
        factor = getattr(change, "per_call_factor", None)
        return replacement_words(int(partner), factor, started=change.calls_before == 0) + heavy
    if change.kind == "deploy_statement":
        return CHANGE_WORDS["deploy_statement"]
    return f"{change.kind}{heavy}"


def _print_impact(summary: pd.DataFrame, changes: pd.DataFrame, show_all: bool) -> None:
    """The deploy's impact above its verdicts: execution time and calls per minute before → after for the target (and
    each database when there are several), then the statements whose load changed, heaviest first."""
    import pandas as pd

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
        "change": [_change_words(r) for r in shown.itertuples()],
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
    out = console()
    rows = list(zip(*columns.values(), strict=True))
    out.print(fitted_table(list(columns), rows, out.width, flexible="query", droppable=("share ×", "queryid")))
    if len(shown) < len(changes):
        click.echo(f"… {len(changes) - len(shown)} more load changes (--all)")


def _print_groups(groups: pd.DataFrame, show_all: bool, labelled: pd.DataFrame | None = None) -> None:
    """The groups decided together (issue 29), detections first: each one's verdict and sentence ("15 statements
    of this shape slowed as a group, typically ×1.50 (×1.31–×1.72)"), its members' queryids and its latest label
    (`labelled`: warehouse.labels.group_labels) and its id (what `radar label --group` and `radar mute --group`
    name); those without enough members are counted."""
    from radar_pipeline.warehouse.labels import label_words

    said = {
        (r.target, r.group_id): label_words(r.label, r.labelled_by, r.note, r.fixed_by)
        for r in (labelled.itertuples() if labelled is not None else ())
    }
    from radar_pipeline.engine.vocabulary import Verdict

    tested = groups[groups["verdict"] != Verdict.INSUFFICIENT_DATA]
    shown = tested if show_all else tested.head(10)
    for g in shown.itertuples():
        queryids = ", ".join(str(q) for q in list(g.member_queryid)[:8])
        more = f" … {len(g.member_queryid) - 8} more" if len(g.member_queryid) > 8 else ""
        late = f" at later look {int(g.look)}" if getattr(g, "look", 0) else ""  # sql/0034
        tier = getattr(g, "tier", None)  # sql/0036
        tier = f" ({TIER_WORDS.get(tier, tier)})" if isinstance(tier, str) else ""
        words = said.get((g.target, g.group_id))
        label = f"; labelled {clean(words)}" if words else ""
        click.echo(
            f"group {g.verdict}{tier}{late}: {clean(str(g.sentence))} (queryids {queryids}{more}; id "
            f"{clean(str(g.group_id))}){label}"
        )
    if len(shown) < len(tested):
        click.echo(f"… {len(tested) - len(shown)} more groups (--all)")


def _print_verdicts(table: pd.DataFrame) -> None:
    """The verdicts as a table fitted to the terminal: times in ms, factor and its 95% interval, the clearing rule's
    bound, confidence, the history intervals the test used, the change relative to the deploy, the statement's text
    cut to the room left (CSV or JSON give it whole)."""
    import pandas as pd

    from radar_pipeline.pgss_model import shared_queryid_note
    from radar_pipeline.warehouse.labels import label_words

    def fmt(values: pd.Series, pattern: str) -> list[str]:
        return [("" if pd.isna(v) else pattern.format(v)) for v in values]

    columns = {
        **({"target": list(table["target"])} if table["target"].nunique() > 1 else {}),
        "verdict": list(table["verdict"]),
        # beyond the verdict (sql/0036): improved (cleared, clearly faster) or probably slower (open, slower on its
        # own); shown where some statement has one, so a deploy with none keeps the room for its texts
        **(
            {"tier": [TIER_WORDS.get(t, "") if isinstance(t, str) else "" for t in table["tier"]]}
            if table["tier"].notna().any()
            else {}
        ),
        # the latest label (sql/0037), and "muted" for a detection a mute covers; shown where some verdict has one
        **(
            {"label": [_label_cell(r.label, r.mute_reason) for r in table.itertuples()]}
            if table["label"].notna().any() or table["mute_reason"].notna().any()
            else {}
        ),
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
        # The look that decided it (issue 29): first, or a later look with how long after the deploy it ended.
        "look": [
            _look_cell(k, end, at)
            for k, end, at in zip(table["look"], table["look_end"], table["deployed_at"], strict=True)
        ],
        "query": list(table["query"]),
    }
    out = console()
    rows = list(zip(*columns.values(), strict=True))
    out.print(
        fitted_table(
            list(columns),
            rows,
            out.width,
            flexible="query",
            droppable=("history", "bound", "reason", "confidence", "change", "before ms", "look"),
        )
    )
    import textwrap

    def say(text: str) -> None:  # wrapped to the terminal, as the table is fitted to it
        click.echo(textwrap.fill(text, width=max(40, out.width), subsequent_indent="  "))

    for row in table.itertuples():  # below the table: its query column is cut to the room left
        detail = row.cause_detail if isinstance(row.cause_detail, str) else ""
        if detail:
            say(f"cause of queryid {row.queryid}: {clean(detail)}")
        for change in row.named_changes if isinstance(row.named_changes, list) else []:
            if isinstance(change, dict) and change.get("sentence") and change["sentence"] not in detail:
                say(f"also changed, queryid {row.queryid}: {clean(change['sentence'])}")
        if isinstance(row.undo_hint, str) and row.undo_hint:
            say(f"to undo, queryid {row.queryid}: {clean(row.undo_hint)}")
        if isinstance(row.group_regressed, str) and row.group_regressed:
            say(f"queryid {row.queryid} is {clean(row.group_regressed)}")
        if isinstance(row.label, str):
            words = label_words(row.label, row.labelled_by, row.label_note, row.fixed_by)
            say(f"queryid {row.queryid} labelled {clean(words)}")
        if isinstance(row.mute_reason, str):
            say(f"queryid {row.queryid} muted until {_clock(row.mute_ends_at)} (mute {int(row.mute_id)}): "
                f"{clean(row.mute_reason)}")  # fmt: skip
        if isinstance(row.queryid_shared_with, list) and row.queryid_shared_with:
            click.echo(f"caution, queryid {row.queryid}: {clean(shared_queryid_note(row.queryid_shared_with))}")


def _label_cell(label: Any, mute_reason: Any) -> str:
    """A verdict's label cell: its latest label, "muted" when a mute covers it, both, or nothing."""
    cell = [label if isinstance(label, str) else "", "muted" if isinstance(mute_reason, str) else ""]
    return ", ".join(c for c in cell if c)


class Duration(click.ParamType):
    """A duration such as 90s, 10m, 1h or 1h30m (0 allowed), as seconds; anything else, a negative one included,
    is a usage error naming the option."""

    name = "duration"
    PATTERN = re.compile(r"(?:(\d+)h)?(?:(\d+)m)?(?:(\d+(?:\.\d+)?)s)?")

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> float:
        """The duration in seconds."""
        if isinstance(value, int | float):
            return float(value)
        text = str(value).strip().lower()
        found = self.PATTERN.fullmatch(text)
        if text == "0":
            return 0.0
        if not text or found is None or not any(found.groups()):
            past = " (a deadline in the past)" if text.startswith("-") else ""
            self.fail(f"{clean(value)!r} is not a duration such as 90s, 10m, 1h or 1h30m{past}", param, ctx)
        hours, minutes, seconds = (float(g) if g else 0.0 for g in found.groups())
        total = hours * 3600 + minutes * 60 + seconds
        if total > MAX_WAIT_S:
            self.fail(f"{clean(value)!r} is longer than {MAX_WAIT_S // 3600:.0f} hours", param, ctx)
        return total


MAX_WAIT_S = 24 * 3600.0
CONFIG_EXIT, USAGE_EXIT = 5, 2
MIN_POLL_S = 0.1
OVERDUE = timedelta(minutes=2)  # an analysis this late after it was due: the daemon may not be running
GATE_EPILOG = """\b
Exit codes:
  0  pass: nothing detected; no statement left open may be slower
     than x1.4 and have added over 1% of the execution time beyond the
     tolerance at its upper bound; and the other open statements
     together added at most 3% beyond it (radar.gate_factor,
     radar.max_open_excess, radar.max_total_excess; docs/method.md)
  1  fail: a statement is detected slower, or a group of statements
     decided together (radar verdicts names it)
  3  inconclusive: neither (0 with --inconclusive-ok); with --through-looks,
     only once no later look falls due before the deadline
  A probably slower statement is a WARNING line; it never changes the code.
  4  still pending at the deadline (--wait; without it, at once)
  5  warehouse or configuration error (retried until the deadline)
  2  usage: a bad option or DURATION, or a deploy id not recorded

\b
Examples:
  radar gate "gl-$CI_JOB_ID" --wait 45m
  radar gate "gl-$CI_JOB_ID" --wait 2h --through-looks
  radar gate shop-v2 --format json --inconclusive-ok
"""


def _gate_exit(code: int, message: str) -> None:
    """Leave with `code` after one line on stderr."""
    click.echo(f"Error: {message}", err=True)
    sys.exit(code)


def _times(url: str | None) -> RadarSettings:
    """The settings that say the analysis's window and scrape interval: this environment's, over the embedded
    default's compressed times when the embedded default is the warehouse (no URL given)."""
    from radar_pipeline.config.settings import settings

    times = ("window_seconds", "scrape_interval_seconds")
    if url:
        return settings(*times)
    from radar_pipeline.demo.environment import COMPRESSED

    return settings(*times, environ={**COMPRESSED, **os.environ})


def _clock(at: datetime) -> str:
    """A time for a CI log: UTC, to the second."""
    return at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _span(seconds: float) -> str:
    """A span such as 1h05m, 4m12s or 9s."""
    whole = max(0, round(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def _verdict_due(warehouse: str | None, deploy_id: str, target: str) -> None:
    """After `radar deploy`: when the verdict is due (the sensor's rule on the stored time) and the gate to wait for
    it. Only a hint: a failure to read it is one line on stderr, the deploy stays recorded."""
    from radar_pipeline.warehouse import status

    try:
        engine = _engine(warehouse)
        with engine.connect() as conn:
            times = status.deploy_times(conn, deploy_id, _times(warehouse), target)
        engine.dispose()
    except Exception as exc:
        click.echo(_failure("when the verdict is due is unknown", exc, warehouse), err=True)
        return
    if times is None or times.source == "import":
        return
    wait = math.ceil(max(0.0, (times.due_at - times.now).total_seconds()) / 60) + 5  # and the run's few minutes
    click.echo(
        printable(f"verdict due at {_clock(times.due_at)}; `radar gate {shlex.quote(deploy_id)} --wait {wait}m`")
    )


def _gate_text(view: gate_step.GateView, deploy_id: str) -> list[str]:
    """The gate's answer for a person reading a CI log: the state first, then counts, shares and detections."""
    t, s = view.times, view.state
    lines = [f"deploy {clean(deploy_id)}: {s['state']}{_margin_words(view)}"]
    facts = [f"target {clean(t.target)}", f"deployed {_clock(t.deployed_at)}"]
    facts += [f"{name} {clean(value)}" for name, value in (("service", t.service), ("version", t.version)) if value]
    if s.get("analysed_at") is not None:
        facts.append(f"analysed {_clock(s['analysed_at'])}")
    else:
        facts.append(f"window closes {_clock(t.window_closes_at)}, verdict due {_clock(t.due_at)}")
    lines.append("  " + ", ".join(facts))
    if view.canary is not None:
        lines.extend(_gate_canary_lines(view.canary, s))
    if s["state"] == "pending":
        return lines
    from radar_pipeline.engine.vocabulary import VERDICTS, Cause, Verdict  # loaded with the gate's view already
    from radar_pipeline.warehouse.labels import label_words

    lines.append("  verdicts: " + ", ".join(f"{int(s.get(v) or 0)} {v}" for v in VERDICTS))
    if s.get("groups_detected"):
        n = int(s["groups_detected"])
        lines.append(f"  {n} group{'s' if n != 1 else ''} of statements decided together detected (radar verdicts)")
    if view.shares:
        cleared = view.shares.get(Verdict.NO_REGRESSION, 0.0)
        shares = f"{cleared:.1%} cleared, {view.shares.get(Verdict.INCONCLUSIVE, 0.0):.1%} inconclusive"
        rest = [
            f"{view.shares[v]:.1%} {v}" for v in (Verdict.INSUFFICIENT_DATA, Verdict.DETECTED) if view.shares.get(v)
        ]
        lines.append(f"  execution time after the deploy: {', '.join([shares, *rest])}")
    else:
        lines.append("  execution time after the deploy: none (nothing ran in its window)")
    counted = [d for d in view.detections if d.get("mute_id") is None]
    if counted:
        lines.append(f"detections ({len(counted)}):")
    for d in counted:
        at = d["factor_at_change"] if d["factor_at_change"] is not None else d["change_factor"]
        factor = f"×{at:.2f}" if at is not None else "×?"
        interval = f" [×{d['factor_low']:.2f}, ×{d['factor_high']:.2f}]" if d["factor_low"] is not None else ""
        lines.append(
            f"  {factor}{interval} cause {clean(d['cause'] or Cause.UNEXPLAINED)}"
            f"{' (' + clean(d['cause_detail']) + ')' if d.get('cause_detail') else ''}, queryid {d['queryid']}: "
            f"{clean(d['query'])}"
        )
        if d.get("label"):
            words = label_words(d["label"], d["labelled_by"], d["label_note"], d["fixed_by"])
            lines.append(f"    labelled {clean(words)}")
    for m in view.muted:
        what = f"queryid {m['queryid']}" if m["queryid"] is not None else f"group {m['group_id']}"
        text = f": {clean(m['query'])}" if m.get("query") else ""
        lines.append(
            f"ignored (muted): {clean(what)} on {clean(m['target'])}, mute {m['mute_id']} until "
            f"{_clock(m['ends_at'])}: {clean(m['reason'])}{text}"
        )
    lines.extend(_tier_lines(view, deploy_id))
    return lines


def _margin_words(view: gate_step.GateView) -> str:
    """The rule's margins after the state (docs/ci.md): the most one open statement may have added beyond θ, and all
    of them, each against its bar, and the share cleared. Empty while pending, for a failed deploy (its detections
    decide it), where nothing ran after the deploy, and when the canary arm decided (its own shares, not these)."""
    from radar_pipeline.steps.gate import margins

    s = view.state
    m = margins(s)
    decided_by_canary = view.canary is not None and s.get("before_after_state") is not None
    if s["state"] in ("pending", "fail") or decided_by_canary or any(m[k] is None for k in MARGINS):
        return ""
    words = (
        f" (open statements may add {m['largest_excess_share']:.2%} each, pass needs ≤ {m['max_open_excess']:.0%}; "
        f"{m['open_excess_share']:.2%} together, ≤ {m['max_total_excess']:.0%}"
    )
    bounded, factor, most = m["bounded_open"], m["largest_bounded_factor"], m["largest_bounded_excess_share"]
    if bounded and factor is not None and m["gate_factor"] is not None and most is not None:
        words += (
            f"; {bounded} heavier statement{'s' if bounded != 1 else ''} open within ×{m['gate_factor']:g}"
            f" (bound up to ×{factor:.2f}, adding up to {most:.2%}; counted together)"
        )
    if m["cleared_share"] is not None:
        words += f"; {m['cleared_share']:.1%} cleared"
    return words + ")"


MARGINS = ("largest_excess_share", "max_open_excess", "open_excess_share", "max_total_excess")
TIER_TOP = 3  # improved statements the gate's text names, the busiest first


def _tier_lines(view: gate_step.GateView, deploy_id: str) -> list[str]:
    """A WARNING line per probably-slower statement (factor, 95% interval, share of the time, queryid, text) and per
    deploy's probably-slower groups, then the statements faster: warnings only, the exit code stays the state's."""
    from radar_pipeline.alerts.render import cause_words

    tiered = view.tiered
    lines: list[str] = []
    if tiered is None:
        return lines

    def numbers(row: dict[str, Any]) -> str:
        factor = f"×{row['factor']:.2f}" if row.get("factor") is not None else "×?"
        if row.get("factor_low") is not None and row.get("factor_high") is not None:
            factor += f" [×{row['factor_low']:.2f}, ×{row['factor_high']:.2f}]"
        share = "" if row.get("share") is None else f", {row['share']:.1%} of the time after the deploy"
        return f"{factor}{share}, queryid {row['queryid']}"

    for row in tiered.probably_slower:
        cause = cause_words(row.get("cause"), row.get("cause_detail"))
        because = f", cause: {clean(cause)}" if cause else ""
        lines.append(f"WARNING: probably slower {numbers(row)}{because}: {clean(row['query'])}")
    rest = tiered.probably_slower_count - len(tiered.probably_slower)
    if rest > 0:
        lines.append(f"WARNING: {rest} more statements probably slower (radar verdicts {clean(deploy_id)})")
    groups = int(view.state.get("groups_probably_slower") or 0)
    if groups:
        lines.append(
            f"WARNING: {groups} group{'s' if groups != 1 else ''} of statements decided together probably slower "
            f"(radar verdicts {clean(deploy_id)})"
        )
    if tiered.improved_count:
        n = tiered.improved_count
        top = tiered.improved[:TIER_TOP]
        factors = ", ".join(f"×{r['factor']:.2f}" for r in top if r.get("factor") is not None)
        more = " …" if n > len(top) else ""
        lines.append(f"{n} statement{'s' if n != 1 else ''} faster: {factors}{more}")
        lines.extend(f"  {numbers(row)}: {clean(row['query'])}" for row in top)
    return lines


def _gate_canary_lines(canary: dict[str, Any], state: dict[str, Any]) -> list[str]:
    """A canary deploy's canary arm in the gate's answer: what decided, and the before/after state beside it."""
    role = clean(canary["role"])
    before_after = state.get("before_after_state")
    if canary["state"] is None:
        return [f"  canary role {role}: waiting for the canary analysis (canary_sensor, W after the deploy)"]
    if canary["state"] == "error":
        return [
            f"  canary role {role}: not analysed: {clean(canary['error'] or '')}; the gate answers from the "
            "before/after verdict"
        ]
    stable = clean(canary.get("stable_role") or f"userid {canary.get('stable_userid')}")
    counts = ", ".join(f"{n} {v}" for v, n in canary["counts"].items())
    lines = [
        f"  decided by the canary arm: role {role} against stable role {stable}, {canary['state']} ({counts}); "
        f"before/after: {before_after}"
    ]
    for d in canary["detections"]:
        lines.append(
            f"  canary ×{d['change_factor']:.2f} [×{d['factor_low']:.2f}, ×{d['factor_high']:.2f}] "
            f"({d['mean_stable_ms']:.3f} → {d['mean_canary_ms']:.3f} ms), queryid {d['queryid']}: {clean(d['query'])}"
        )
    return lines


def _progress_key(view: gate_step.GateView) -> tuple[Any, ...]:
    """What a pending deploy's progress line says, without its clock: the line is printed again only when this
    changes (the window closed, the analysis started or fell late, the canary arm's turn came, the target's scrapes
    stopped or came back, the times it is due at moved), never on a poll that found nothing new."""
    t = view.times
    canary = view.canary
    if canary is not None and canary["state"] is None and view.state.get("before_after_state") != "pending":
        return ("canary", canary["role"])
    if t.last_scrape is None:
        scrapes = "never"
    elif t.now - t.last_scrape > max(t.window_closes_at - t.deployed_at, OVERDUE):
        scrapes = "stale"
    else:
        scrapes = "fresh"
    if t.now < t.window_closes_at:
        phase = "window open"
    elif view.analysing:
        phase = "analysis running"
    elif t.now - t.due_at > OVERDUE:
        phase = "overdue"
    else:
        phase = "waiting for the analysis"
    return (phase, scrapes, t.window_closes_at, t.due_at)


def _gate_progress(view: gate_step.GateView) -> str:
    """Where a pending deploy stands, for stderr: the time until its window closes, then the wait for the analysis
    (saying so when it is late, or when its target has no scrapes to judge)."""
    t = view.times
    canary = view.canary
    if canary is not None and canary["state"] is None and view.state.get("before_after_state") != "pending":
        return (
            f"pending: the before/after verdict is in; waiting for the canary analysis of role {clean(canary['role'])} "
            "(canary_sensor requests it once the canary window has closed: is the Dagster daemon running?)"
        )
    if t.last_scrape is None:
        warning = (
            f"; target {clean(t.target)} has no snapshots at all: nothing scrapes it (RADAR_TARGETS, the snapshot "
            "schedule), so its analysis will have nothing to judge"
        )
    elif t.now - t.last_scrape > max(t.window_closes_at - t.deployed_at, OVERDUE):
        warning = f"; target {clean(t.target)} was last scraped {_span((t.now - t.last_scrape).total_seconds())} ago"
    else:
        warning = ""
    if t.now < t.window_closes_at:
        return (
            f"pending: the window after the deploy closes in {_span((t.window_closes_at - t.now).total_seconds())} "
            f"(at {_clock(t.window_closes_at)}), its verdict is due at {_clock(t.due_at)}{warning}"
        )
    if view.analysing:
        return f"pending: the window closed; the analysis is running (its verdict follows when it is stored){warning}"
    late = t.now - t.due_at
    if late > OVERDUE:
        return (
            f"pending: waiting for the analysis, {_span(late.total_seconds())} after it was due: is the Dagster "
            f"daemon running (deploy_event_sensor)?{warning}"
        )
    return f"pending: the window closed; waiting for the analysis (due at {_clock(t.due_at)}){warning}"


@main.command(epilog=GATE_EPILOG)
@click.argument("deploy_id")
@click.option(
    "--wait",
    type=Duration(),
    default="0s",
    show_default=True,
    help="keep waiting while the deploy is pending, up to this long (90s, 10m, 1h30m)",
)
@click.option("--poll", type=Duration(), default="5s", show_default=True, help="how often to look while waiting")
@click.option("--format", "output", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--inconclusive-ok", is_flag=True, help="exit 0, not 3, when the deploy is inconclusive")
@click.option(
    "--through-looks",
    is_flag=True,
    help="with --wait, keep waiting while the deploy is inconclusive and its next later look (at 2, 4 and 8 windows "
    "after the deploy) falls due before the deadline: a later look may clear or detect what the first left open",
)
@click.option("--warehouse", envvar=WAREHOUSE_URL_VAR, help=WAREHOUSE_HELP)
def gate(
    deploy_id: str,
    wait: float,
    poll: float,
    output: str,
    inconclusive_ok: bool,
    through_looks: bool,
    warehouse: str | None,
) -> None:
    """Answer for a deploy (what a CI job or a rollout step runs after `radar deploy`): its state (pass, fail,
    inconclusive, pending), counts, the share of its execution time cleared and inconclusive, and each detection
    with its factor, 95% interval and cause. Progress while waiting goes to stderr, the answer to stdout."""
    from sqlalchemy.exc import InterfaceError, OperationalError

    from radar_pipeline.steps import gate as gate_step
    from radar_pipeline.warehouse import status

    deadline = time.monotonic() + wait
    poll = max(poll, MIN_POLL_S)
    try:
        url = _require(warehouse)
        engine = status.polling_engine(url)
        configured = _times(warehouse)
    except ConfigError as exc:
        _gate_exit(CONFIG_EXIT, printable(str(exc)))
    said: tuple[Any, ...] = ()  # what the last progress line said (_progress_key): a line only when it changes
    while True:
        try:
            view = gate_step.read(engine, deploy_id, configured)
        except (OperationalError, InterfaceError) as exc:  # the warehouse is away: again until the deadline
            failure = _failure("the warehouse did not answer", exc, url)
            if time.monotonic() >= deadline:
                _gate_exit(CONFIG_EXIT, failure)
            if said != ("away", failure):
                click.echo(f"{failure}; retrying ({_span(deadline - time.monotonic())} left to wait)", err=True)
                said = ("away", failure)
            time.sleep(max(0.0, min(poll, deadline - time.monotonic())))
            continue
        except ConfigError as exc:
            _gate_exit(CONFIG_EXIT, printable(str(exc)))
        except Exception as exc:  # a warehouse without radar's schema, or refusing us: no use asking again
            _gate_exit(CONFIG_EXIT, _failure("reading the deploy's state failed", exc, url))
        if view is None:
            _gate_exit(
                USAGE_EXIT,
                f"deploy {clean(deploy_id)!r} is not recorded (`radar deploy` records it; `radar deploys` lists the "
                "recent ones)",
            )
        assert view is not None
        state = view.state["state"]
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        if state == "pending":
            key, line = _progress_key(view), _gate_progress(view)
        elif through_looks and _look_before(view, remaining):
            assert view.next_look is not None
            key, line = ("look", view.state.get("looks_done"), *view.next_look), _look_progress(view)
        else:
            break
        if key != said:
            click.echo(f"deploy {clean(deploy_id)}: {line}; {_span(remaining)} left to wait", err=True)
            said = key
        time.sleep(max(0.0, min(poll, remaining)))
    code = gate_step.exit_code(state, inconclusive_ok)
    if output == "json":
        click.echo(gate_step.as_json(view, deploy_id, code))
    else:
        click.echo("\n".join(_gate_text(view, deploy_id)))
    if state == "pending":
        click.echo(f"deploy {clean(deploy_id)}: {_gate_progress(view)}", err=True)
        click.echo(f"Error: deploy {clean(deploy_id)!r} is still pending at the deadline", err=True)
    elif state == "inconclusive" and view.next_look is not None:
        look, due = view.next_look
        wait_for = math.ceil(max(0.0, (due - view.times.now).total_seconds()) / 60) + 5  # and the run's few minutes
        click.echo(
            f"deploy {clean(deploy_id)}: look {look} falls due at {_clock(due)}: "
            f"`radar gate {shlex.quote(deploy_id)} --wait {wait_for}m --through-looks` waits for it",
            err=True,
        )
    sys.exit(code)


def _look_before(view: gate_step.GateView, remaining: float) -> bool:
    """Whether the inconclusive deploy's next later look falls due (by the warehouse's clock) before the deadline:
    one due already, its run not yet stored, is waited for too."""
    if view.next_look is None:
        return False
    return (view.next_look[1] - view.times.now).total_seconds() <= remaining


def _look_progress(view: gate_step.GateView) -> str:
    """Where an inconclusive deploy stands while --through-looks waits for its next later look."""
    assert view.next_look is not None
    look, due = view.next_look
    done = int(view.state.get("looks_done") or 0)
    after = "its first verdict" if done == 0 else f"look {done}"
    wait = (due - view.times.now).total_seconds()
    when = f"falls due in {_span(wait)} (at {_clock(due)})" if wait > 0 else f"fell due at {_clock(due)}, not yet run"
    return f"inconclusive after {after}; look {look} {when}"


@main.group()
def webhook() -> None:
    """The deploy-event receiver: deploys posted by GitHub, GitLab, CI jobs (docs/receiver.md)."""


@webhook.command("serve")
@click.option("--host", default="127.0.0.1", show_default=True, help="address to listen on (0.0.0.0: every one)")
@click.option("--port", default=8080, show_default=True, type=click.IntRange(1, 65535), help="port to listen on")
@click.option("--warehouse", envvar=WAREHOUSE_URL_VAR, help=WAREHOUSE_HELP)
def webhook_serve(host: str, port: int, warehouse: str | None) -> None:
    """Serve POST /v1/deploys/<source> (deploy events, each source authenticated by its secret), GET
    /v1/deploys/<id>/gate (the gate's answer, for a token with the gate scope), /healthz and /readyz. The sources
    and secrets are RADAR_RECEIVER_* settings; it refuses to start when an enabled source has no secret."""
    from radar_pipeline.config.settings import settings
    from radar_pipeline.receiver.app import SERVER, configure, make_app

    try:
        found = settings("receiver").receiver
        receiver = configure(found, _require(warehouse), _configured_targets(), _times(warehouse))
    except ConfigError as exc:
        raise click.ClickException(printable(str(exc))) from None
    import uvicorn

    click.echo(f"receiving deploy events from {', '.join(receiver.sources) or 'CI tokens only'} on {host}:{port}")
    uvicorn.run(
        make_app(receiver),
        host=host,
        port=port,
        workers=None,
        log_level="info",
        **SERVER,
    )


@main.command("deploys")
@click.option("--target", help="only this target's deploys")
@click.option("--limit", type=click.IntRange(1, 10_000), default=20, show_default=True, help="how many, newest first")
@click.option("--format", "output", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.option("--warehouse", envvar=WAREHOUSE_URL_VAR, help=WAREHOUSE_HELP)
def deploys_command(target: str | None, limit: int, output: str, warehouse: str | None) -> None:
    """List recent deploys, newest first, with their state (pass, fail, inconclusive, pending) and verdict counts."""
    from radar_pipeline.engine.vocabulary import VERDICTS
    from radar_pipeline.warehouse import status

    try:
        engine = _engine(warehouse)
        with engine.connect() as conn:
            rows = status.recent_deploys(conn, target, limit)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    except Exception as exc:
        raise click.ClickException(_failure("reading the deploys failed", exc, warehouse)) from None
    if output == "json":
        import json

        fields = [
            "deploy_id", "target", "deployed_at", "state", "analysed_at", "detected", "no_regression",
            "inconclusive", "insufficient_data", "cleared_share", "pass_share", "service", "version", "source",
        ]  # fmt: skip
        click.echo(json.dumps([{k: r[k] for k in fields} for r in rows], indent=1, default=_json_value))
        return
    if not rows:
        click.echo("no deploys recorded" + (f" for target {clean(target)!r}" if target else ""))
        return

    def count(row: dict[str, Any], name: str) -> str:
        return "" if row["state"] == "pending" else str(int(row[name] or 0))

    headers = [
        "deployed at", "deploy", "target", "state", "detected", "cleared", "inconclusive", "insufficient",
        "cleared share", "service", "version",
    ]  # fmt: skip
    cells = [
        [
            _clock(r["deployed_at"]),
            r["deploy_id"],
            r["target"],
            r["state"],
            *(count(r, v) for v in VERDICTS),
            "" if r["cleared_share"] is None else f"{r['cleared_share']:.1%}",
            r["service"] or "",
            r["version"] or "",
        ]
        for r in rows
    ]
    out = console()
    out.print(fitted_table(headers, cells, out.width, flexible="version", droppable=("service", "insufficient")))


def _json_value(value: object) -> object:
    """A value json cannot write itself: times in ISO 8601, the rest as text."""
    return value.isoformat() if isinstance(value, datetime) else str(value)


LABEL_OPTIONS = {  # a LabelError's field, as `radar label` and `radar mute` spell it
    "deploy_id": "DEPLOY_ID",
    "queryid": "QUERYID",
    "label": "--as",
    "fixed_by": "--fixed-by",
    "group": "--group",
    "fleet": "--fleet",
    "by": "--by",
    "note": "--note",
    "target": "--target",
    "statement": "--statement",
    "until": "--until",
    "reason": "--reason",
    "end": "--end",
}


def _label_failure(exc: Exception) -> click.ClickException:
    """A LabelError as the command's error, its field spelled as the option (the message's own words, cleaned)."""
    field = getattr(exc, "field", "")
    text = str(exc).split(": ", 1)[1] if field and str(exc).startswith(f"{field}: ") else str(exc)
    return click.ClickException(clean(f"{LABEL_OPTIONS.get(field, field)}: {text}; nothing stored"))


def _who(by: str | None) -> str:
    """Who labels or mutes: --by, else the login name."""
    import getpass

    return by if by else getpass.getuser()


@main.command("label")
@click.argument("deploy_id")
@click.argument("queryid", required=False, type=int)
@click.option("--group", "group_id", help="label the group decided together of this id (radar verdicts names it)")
@click.option("--fleet", is_flag=True, help="label the fleet verdict of the deploy's release on QUERYID's statement")
@click.option("--as", "label", required=True, help="what the verdict was: intended, false_alarm, fixed, acknowledged")
@click.option("--note", required=True, help="why: a sentence for the next reader")
@click.option("--by", help="who says so (default: the login name)")
@click.option("--fixed-by", help="with --as fixed: the deploy that fixed it")
@click.option("--target", help="the target, when QUERYID or the group has verdicts on several")
@click.option("--dbid", type=int, help="the database's oid, when QUERYID has verdicts in several")
@click.option("--userid", type=int, help="the role's oid, when QUERYID has verdicts for several")
@click.option("--warehouse", envvar=WAREHOUSE_URL_VAR, help=WAREHOUSE_HELP)
def label_command(
    deploy_id: str,
    queryid: int | None,
    group_id: str | None,
    fleet: bool,
    label: str,
    note: str,
    by: str | None,
    fixed_by: str | None,
    target: str | None,
    dbid: int | None,
    userid: int | None,
    warehouse: str | None,
) -> None:
    """Label a verdict: a statement's (DEPLOY_ID QUERYID; a periodic check's episode: periodic:<hour> QUERYID), a
    group's (--group) or a fleet verdict (QUERYID --fleet) as intended, false_alarm, fixed (--fixed-by DEPLOY) or
    acknowledged. Labels are kept, never changed: the latest stands beside the verdict (docs/labels.md). A negative
    QUERYID follows `--`."""
    from radar_pipeline.steps.labelling import store_label
    from radar_pipeline.warehouse import labels

    request = labels.Label(
        label=label,
        labelled_by=_who(by),
        deploy_id=deploy_id,
        queryid=queryid,
        group_id=group_id,
        fleet=fleet,
        target=target,
        dbid=dbid,
        userid=userid,
        note=note,
        fixed_by=fixed_by,
    )
    try:
        with _engine(warehouse).begin() as conn:
            stored = store_label(conn, request).row
            effect = labels.effect_of(conn, int(stored["label_id"]))
    except labels.LabelError as exc:
        raise _label_failure(exc) from None
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    except Exception as exc:
        raise click.ClickException(_failure("storing the label failed", exc, warehouse)) from None
    what = {
        "statement": f"queryid {stored['queryid']} of {stored['deploy_id']} on {stored['target']}",
        "group": f"group {stored['group_id']} of {stored['deploy_id']} on {stored['target']}",
        "fleet": f"the fleet verdict of release {stored['release_id']} on fingerprint {stored['fingerprint']}",
    }[stored["kind"]]
    words = labels.label_words(stored["label"], stored["labelled_by"], stored["note"], stored["fixed_by"])
    click.echo(clean(f"labelled {what}: {words} (label {stored['label_id']})"))
    if effect is not None:
        click.echo(
            f"a new baseline for {effect['verdicts']} verdicts: {effect['history_points']} history points judged "
            f"again, {effect['episodes_closed']} periodic episodes closed; {effect['resolves']} resolves and "
            f"{effect['message_updates']} Slack message updates go out with the alert's next retry run"
        )


def _until(value: str) -> datetime:
    """--until: an ISO 8601 time with a zone, or a span from now such as 90m, 8h, 3d or 2w."""
    from radar_pipeline.warehouse.deploys import DeployError, parse_time

    found = re.fullmatch(r"(\d{1,5})([mhdw])", value.strip().lower())
    if found:
        unit = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}[found.group(2)]
        return datetime.now(UTC) + timedelta(**{unit: int(found.group(1))})
    try:
        return parse_time(value, "--until")
    except DeployError as exc:
        raise click.UsageError(f"{clean(str(exc))}, or a span such as 8h or 3d") from None


@main.command("mute")
@click.option("--target", help="mute this target (with --statement: the statement's target; with --group: only there)")
@click.option("--statement", "queryid", type=int, help="mute this queryid on --target")
@click.option("--group", "group_id", help="mute this group of statements decided together (its id)")
@click.option("--until", help="when the mute ends: 2026-12-24T08:00:00Z, or a span such as 8h or 3d")
@click.option("--reason", help="why: shown wherever a detection it covers is")
@click.option("--by", help="who mutes (default: the login name)")
@click.option("--list", "listing", is_flag=True, help="list the mutes in force (with --all, every one)")
@click.option("--all", "show_all", is_flag=True, help="with --list, the mutes that are over too")
@click.option("--end", "end_id", type=int, help="end this mute now (its id, from --list)")
@click.option("--warehouse", envvar=WAREHOUSE_URL_VAR, help=WAREHOUSE_HELP)
def mute_command(
    target: str | None,
    queryid: int | None,
    group_id: str | None,
    until: str | None,
    reason: str | None,
    by: str | None,
    listing: bool,
    show_all: bool,
    end_id: int | None,
    warehouse: str | None,
) -> None:
    """Mute a target, a statement of a target or a group until a time, with a reason: its detections are still
    stored and shown (as muted), not alerted, and they do not fail the gate, which names what it ignored
    (docs/labels.md). --list shows the mutes, --end ID ends one early."""
    from radar_pipeline.warehouse import labels

    modes = sum((listing, end_id is not None, any(v is not None for v in (target, queryid, group_id, until, reason))))
    if modes != 1:
        raise click.UsageError("mute something (--target, --statement or --group, with --until and --reason), "
                               "or --list, or --end ID")  # fmt: skip
    try:
        engine = _engine(warehouse)
        if listing:
            with engine.connect() as conn:
                found = labels.mutes(conn, include_over=show_all)
            _print_mutes(found)
            return
        with engine.begin() as conn:
            if end_id is not None:
                row = labels.end_mute(conn, end_id, _who(by))
                click.echo(clean(f"mute {end_id} ended at {_clock(row['ends_at'])}"))
                return
            if until is None or reason is None:
                raise click.UsageError("a mute needs --until and --reason")
            if queryid is not None and target is None:
                raise click.UsageError("--statement needs --target: a queryid is a statement of one target")
            row = labels.add_mute(
                conn,
                until=_until(until),
                reason=reason,
                muted_by=_who(by),
                target=target,
                queryid=queryid,
                group_id=group_id,
                configured_targets=tuple(_configured_targets()),
            )
    except labels.LabelError as exc:
        raise _label_failure(exc) from None
    except click.ClickException:
        raise
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    except Exception as exc:
        raise click.ClickException(_failure("the mute failed", exc, warehouse)) from None
    covers = labels.mute_words(row["scope"], row["target"], row["queryid"], row["group_id"])
    click.echo(clean(f"mute {row['mute_id']}: {covers} until {_clock(row['ends_at'])}: {row['reason']}"))


def _print_mutes(found: pd.DataFrame) -> None:
    """The mutes as a table: id, what it covers, from, until (or when it was ended), by, reason."""
    from radar_pipeline.warehouse.labels import mute_words

    if found.empty:
        click.echo("no mute in force")
        return
    rows = []
    for m in found.itertuples():
        ended = f" (ended by {m.ended_by})" if isinstance(m.ended_by, str) else ""
        covers = mute_words(m.scope, m.target, m.queryid, m.group_id)
        rows.append([str(m.mute_id), clean(covers), _clock(m.starts_at), _clock(m.ends_at) + clean(ended),
                     clean(m.muted_by), clean(m.reason)])  # fmt: skip
    out = console()
    headers = ["mute", "covers", "from", "until", "by", "reason"]
    out.print(fitted_table(headers, rows, out.width, flexible="reason"))


@main.command("status")
@click.option("--probe/--no-probe", default=True, show_default=True, help="ask each configured target what it shows")
@click.option("--warehouse", envvar=WAREHOUSE_URL_VAR, help=WAREHOUSE_HELP)
def status_command(probe: bool, warehouse: str | None) -> None:
    """Each target's last scrape and its age, its health (scraped as often as configured, or late) and what radar
    cannot see of it: statements evicted before a scrape, and, asked live for the targets in RADAR_TARGETS, the
    collector's own checks (its role without pg_read_all_stats, pg_stat_statements.track none, compute_query_id off,
    the extension missing or too old, the server unreachable)."""
    from radar_pipeline.config.settings import DEFAULT_SCRAPE_INTERVAL_SECONDS, TARGETS_VAR, settings
    from radar_pipeline.warehouse import status
    from radar_pipeline.warehouse.labels import realised_rate

    try:
        scrape_s = _times(warehouse).scrape_interval_seconds
        configured = settings("targets").target_list()
        engine = _engine(warehouse)
        with engine.connect() as conn:
            stored = status.target_scrapes(conn, STATUS_RECENT)
            rates = realised_rate(conn)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    except Exception as exc:
        raise click.ClickException(_failure("reading the targets' scrapes failed", exc, warehouse)) from None
    expected = scrape_s or DEFAULT_SCRAPE_INTERVAL_SECONDS
    by_name = {r["target"]: r for r in stored}
    names = sorted(set(by_name) | {t.name for t in configured})
    probes = _probe_targets(configured) if probe else {}
    if not names:
        click.echo(f"no target scraped yet, and {TARGETS_VAR} names none here")
        _print_rates(rates)
        return
    headers = ["target", "last scrape", "age", "statements", "health", "cannot see"]
    cells = []
    for name in names:
        row = by_name.get(name)
        blind: list[str] = []
        if row is None:
            last, age, statements = "never", "", ""
            health = "never scraped: is it in the snapshot runs' RADAR_TARGETS, and the schedule on?"
        else:
            seconds = row["age"].total_seconds()
            last, age, statements = _clock(row["last_scrape"]), _span(seconds), str(row["statements"])
            if seconds <= STALE_SCRAPES * expected:
                health = f"ok: {row['scrapes']} scrapes in the last hour"
            else:
                health = (
                    f"late: no scrape for {_span(seconds)}, one expected every {_span(expected)} (are the snapshot "
                    "runs scheduled? a failed one's log says why)"
                )
            if row["statements"] == 0:
                blind.append("the last scrape saw no statement")
            if row["evicted"]:
                blind.append(
                    f"{row['evicted']} statements evicted in the last hour before a scrape saw them (raise "
                    "pg_stat_statements.max)"
                )
        if name in probes:
            blind.append(probes[name])
        elif probe and configured:
            blind.append(f"not in {TARGETS_VAR} here: not asked")
        elif probe:
            blind.append(f"not asked ({TARGETS_VAR} is not set here)")
        cells.append([name, last, age, statements, health, "; ".join(blind)])
    out = console()
    out.print(fitted_table(headers, cells, out.width, flexible="cannot see"))
    _print_rates(rates)


def _print_rates(rates: pd.DataFrame) -> None:
    """The realised false-alert rate (radar.realised_false_alerts, docs/budget.md): per month and target, the deploy
    analyses, detections, those labelled false_alarm and those unlabelled, and false alarms per analysis with its 95%
    interval against the budget; nothing when no deploy was analysed in the months shown."""
    if rates.empty:
        return
    click.echo("\nrealised false alerts per deploy analysis, by labels (docs/budget.md):")

    def against(r: Any) -> str:
        if r.rate_low > r.budget:
            return "over the budget"
        return "within the budget" if r.rate_high <= r.budget else "cannot tell yet"

    rows = [
        [
            r.month.strftime("%Y-%m"),
            clean(r.target),
            str(r.analyses),
            str(r.detections),
            str(r.false_alarm),
            str(r.unlabelled),
            f"{r.rate:.3f} [{r.rate_low:.3f}, {r.rate_high:.3f}]",
            f"{r.budget:g}",
            against(r)
            + (f"; ≤ {r.rate_if_unlabelled_false:.3f} if every unlabelled one is false" if r.unlabelled else ""),
        ]
        for r in rates.itertuples()
    ]
    headers = [
        "month",
        "target",
        "analyses",
        "detections",
        "false_alarm",
        "unlabelled",
        "rate [95%]",
        "budget",
        "reading",
    ]
    out = console()
    out.print(fitted_table(headers, rows, out.width, flexible="reading"))


STATUS_RECENT = timedelta(hours=1)
STALE_SCRAPES = 3  # a target not scraped for this many intervals is late
PROBE_TIMEOUT_S = 10.0


def _probe_targets(targets: list[Any]) -> dict[str, str]:
    """Each target's answer to the collector's own checks (collector.pgss.read_extension), asked now over a bounded,
    read-only session, a few at once: "sees every statement", or why it cannot (no password in it)."""
    from concurrent.futures import ThreadPoolExecutor

    from radar_pipeline.collector import pgss, session

    def one(target: Any) -> str:
        try:
            with session.connect(target, call_timeout=PROBE_TIMEOUT_S) as conn:
                ext = pgss.read_extension(conn, target)
        except session.TargetUnavailable as exc:
            return clean(str(exc))
        except Exception as exc:
            return clean(f"target {target.name!r}: {session.describe(exc, target)}")
        return f"nothing: asked now, it shows every statement (pg_stat_statements {clean(ext.version)})"

    with ThreadPoolExecutor(max_workers=8) as pool:
        return dict(zip((t.name for t in targets), pool.map(one, targets), strict=True))


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
    from radar_pipeline.config.settings import settings

    return [t.name for t in settings("targets").target_list()]


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
