"""Deliveries to the code host of a deploy's commit: its state as a commit status (and as a GitHub deployment's
status when it came from one), and, when something regressed, one comment on each pull or merge request that merged
the commit, edited in place on re-analysis. Through the outbox (radar.outbox, channel code_host), with every
destination's rules: rows committed before anything is sent, no transaction held while the host is called, retried
with backoff by radar_reconciler, withheld when too old, and a comment whose posting may have happened looked for
(by its hidden marker) before it is posted again."""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

import pandas as pd
import sqlalchemy as sa

from radar_pipeline.alerts.code_hosts import HostClient, HostError
from radar_pipeline.config import printable
from radar_pipeline.config.settings import variable
from radar_pipeline.engine import VERDICTS, Verdict
from radar_pipeline.steps.alert_delivery import run_url, withhold_reason
from radar_pipeline.steps.delivery import Delivery, Sent, retry_wait
from radar_pipeline.warehouse import alerts as alert_store
from radar_pipeline.warehouse import deploys, outbox
from radar_pipeline.warehouse.analysis import deploy_states
from radar_pipeline.warehouse.outbox import Row
from radar_pipeline.warehouse.status import Times

MAX_DESCRIPTION = 140  # GitHub's limit on a status's description
MAX_COMMENT = 65_536  # GitHub's limit on a comment's body
MAX_SHOWN = 10  # detections a comment shows in full
MAX_STATEMENT = 1_000  # characters of a statement's text a comment shows


@dataclass(frozen=True)
class Deploy:
    """What a delivery needs of the deploy: its event, its state row (radar.deploy_state), its detections
    (warehouse.alerts.detections) and its analysis's window end and run."""

    event: deploys.DeployEvent
    state: pd.Series
    found: pd.DataFrame
    window_end: datetime
    run_id: str | None
    dagster_url: str | None = None  # where its run is linked (run_url)


def deliver(
    log: logging.Logger,
    engine: sa.Engine,
    hosts: dict[str, HostClient],
    deploy_id: str,
    max_age: timedelta,
    now: datetime,
    times: Times,
    reanalysis: bool = False,
    dagster_url: str | None = None,
) -> dict[str, Any]:
    """Send what is due of the deploy's code-host deliveries, and record every outcome; returns what the run's
    metadata shows (never a token). A deploy without a commit and repository, one whose host has no token here
    (`hosts` holds the configured ones), and one not analysed yet get nothing. Withheld instead of sent: in the nightly
    reanalysis, or when the analysed window closed more than `max_age` ago. `times`: the configured analysis times,
    by which a canary deploy's verdict falls due where the warehouse has not recorded them; `dagster_url`: where the
    analysis run is linked (run_url)."""
    with engine.connect() as conn:
        deploy = _read(conn, deploy_id, times)
    if isinstance(deploy, str):
        return {"note": deploy}
    deploy = replace(deploy, dagster_url=dagster_url)
    event = deploy.event
    client = hosts.get(str(event.code_host))
    if client is None:
        return {"note": f"{variable(str(event.code_host) + '.token')} is not set: no status for {event.code_host}"}
    state = str(deploy.state["state"])
    kinds = ["commit_status"]
    if event.code_host == "github" and event.github_deployment_id:
        kinds.append("deployment_status")
    if state == "fail":
        kinds.append("review_comment")
    reason = withhold_reason(pd.DataFrame({"window_end": [deploy.window_end]}), max_age, now, reanalysis)
    with engine.begin() as conn:
        outbox.lock(conn, deploy_id)
        outbox.enqueue_code_host(conn, deploy_id, kinds, state, deploy.state["analysed_at"], withhold=reason)
        if reason and not reanalysis:
            outbox.withhold_waiting(conn, deploy_id, reason, outbox.CODE_HOST_KINDS)
        claimed = outbox.Claim("", []) if reason else outbox.claim(conn, deploy_id, outbox.CODE_HOST_KINDS)
    mismatch = _api_mismatch(event, client)

    def send(batch: list[Row]) -> Sent:
        (row,) = batch
        try:
            if mismatch:
                outcome = Sent(status="failed", error=mismatch)
            elif row.kind == "review_comment":
                outcome = _comment(client, deploy, row)
            else:
                _status(client, deploy, row)
                outcome = Sent()
        except HostError as exc:  # an earlier attempt's doubt stays until looked into
            raise HostError(str(exc), exc.retryable, exc.unknown or row.unknown, exc.retry_after, exc.status) from exc
        if outcome.error:
            log.error(f"{client.name} {row.kind.replace('_', ' ')}: {outcome.error}")
        return outcome

    Delivery(log, engine, client.name, claimed).send([[r] for r in claimed.rows], send)
    with engine.connect() as conn:
        stored = outbox.code_host_rows(conn, deploy_id)
    metadata: dict[str, Any] = {
        "state": state,
        "code_host": client.name,
        "repository": printable(str(event.repository)),
        "commit": str(event.commit_sha),
        "deliveries": {kind: row["status"] for kind, row in stored.items()},
    }
    if reason:
        metadata["withheld"] = reason
    return metadata


def _read(conn: sa.Connection, deploy_id: str, times: Times) -> Deploy | str:
    """The deploy as a delivery needs it, or why it gets none."""
    event = deploys.get(conn, deploy_id)
    if event is None:
        return f"deploy {deploy_id!r} is not recorded"
    if not (event.commit_sha and event.repository and event.code_host):
        return (
            "no commit and repository recorded with the deploy: no commit status (radar deploy --commit --repository)"
        )
    state = deploy_states(conn, [deploy_id])
    if not state.empty:
        canary = _canary(conn, event, state.iloc[0], times)
        if canary is not None:
            return canary if isinstance(canary, str) else Deploy(event, *canary)
    if state.empty or state.iloc[0]["state"] == "pending":
        return "the deploy is not analysed yet"
    analysis = conn.execute(
        sa.text(
            # a later look that decided a verdict (sql/0028) makes the deploy's news as recent as its window
            "SELECT greatest(max(window_end), (SELECT max(look_end) FROM radar.verdict WHERE deploy_id = :d)), "
            "(array_agg(run_id ORDER BY analysed_at DESC))[1] FROM radar.analysis "
            "WHERE deploy_id = :d"
        ),
        {"d": deploy_id},
    ).one()
    return Deploy(event, state.iloc[0], alert_store.detections(conn, deploy_id), analysis[0], analysis[1])


def _canary(
    conn: sa.Connection, event: deploys.DeployEvent, row: pd.Series, times: Times
) -> tuple[pd.Series, pd.DataFrame, datetime, str | None] | str | None:
    """A canary deploy's state as `radar gate` gives it (warehouse.status.canary_gate: the canary arm decides once
    stored), with its canary detections, window end and run; why it gets nothing yet (pending); None when the canary
    arm does not decide (no canary role, or its analysis stopped on an error: radar.deploy_state's state stands)."""
    from radar_pipeline.warehouse import canary as canary_store
    from radar_pipeline.warehouse.status import canary_delay, canary_gate

    if event.canary_role is None:
        return None
    deploy_id = event.deploy_id
    state = row.to_dict()
    delay = canary_delay(conn, event.target, times)  # as the daemon's canary_sensor waits
    canary = canary_gate(conn, deploy_id, state, delay)
    if canary is None or canary["state"] == "error":
        return None
    if state["state"] == "pending":
        return "the deploy's canary analysis is not stored yet"
    stored = canary_store.analysis_of(conn, deploy_id)
    assert stored is not None
    stable = stored["stable_role"] or f"userid {stored['stable_userid']}"
    state.update(
        analysed_at=stored["analysed_at"],
        cleared_share=None,  # before/after's share: not what decided
        decided_by=f"canary role {stored['canary_role']} against stable role {stable}: "
        + ", ".join(f"{stored[v]} {v}" for v in (Verdict.DETECTED, Verdict.NO_REGRESSION, Verdict.INCONCLUSIVE)),
        **{v: stored[v] for v in VERDICTS if v in stored},
    )
    found = pd.DataFrame(
        [{**d, "target": stored["target"], "cause": "canary"} for d in canary["detections"]],
        columns=["queryid", "change_factor", "factor_low", "factor_high", "target", "cause", "query"],
    )
    return pd.Series(state), found, stored["window_end"], stored["run_id"]


def _api_mismatch(event: deploys.DeployEvent, client: HostClient) -> str | None:
    """Why the deploy's host is not the one radar sends its token to: a deploy record must not be able to send the
    token elsewhere."""
    if event.api_url and event.api_url.rstrip("/") != client.api_url:
        return (
            f"the deploy's code host API is {printable(event.api_url)!r}, but radar sends its {client.name} token only "
            f"to {client.api_url!r} ({variable(client.kind + '.api_url')}): not sent"
        )
    return None


def _status(client: HostClient, deploy: Deploy, row: Row) -> None:
    event = deploy.event
    text = description(row.state, deploy.state, deploy.found)
    link = run_url(deploy.run_id, deploy.dagster_url)
    if row.kind == "deployment_status":
        assert event.github_deployment_id is not None
        client.set_deployment_status(str(event.repository), event.github_deployment_id, row.state, text, link)
    else:
        client.set_status(str(event.repository), str(event.commit_sha), row.state, text, link)


def _comment(client: HostClient, deploy: Deploy, row: Row) -> Sent:
    """Comment on (or edit our comment on) each request that merged the commit; the outcome, with the comment ids
    known so far even when one request failed."""
    event = deploy.event
    repository, sha = str(event.repository), str(event.commit_sha)
    marker = comment_marker(event.deploy_id)
    body = comment_body(deploy, row.state, marker)
    ids = dict(row.remote_ids)
    doubt = row.unknown  # an earlier attempt may have posted comments it could not record
    if row.state != "fail" and not ids and not doubt:
        return Sent(status="skipped", error=f"the deploy is {row.state} and no comment was posted: none to edit")
    reviews = client.reviews(repository, sha)
    if not reviews:
        return Sent(status="skipped", error=f"no pull or merge request merged commit {sha[:12]}: no comment")
    try:
        for review in reviews:
            key = str(review.number)
            if key in ids:
                try:
                    client.edit_comment(repository, review, ids[key], body)
                    continue
                except HostError as exc:
                    if exc.status != 404:  # else our comment was deleted: post another
                        raise
                    del ids[key]
            found = client.find_comment(repository, review, marker) if doubt else None
            if found is not None:
                client.edit_comment(repository, review, found, body)
                ids[key] = found
            elif row.state == "fail":  # a comment is started only for a regression; else only ours is edited
                ids[key] = client.post_comment(repository, review, body)
    except HostError as exc:
        return Sent(
            status="pending" if exc.retryable else "failed",
            error=str(exc),
            unknown=exc.unknown or (doubt and any(str(r.number) not in ids for r in reviews)),
            wait=retry_wait(row.attempt, exc),
            remote_ids=ids,
        )
    if not ids:
        return Sent(
            status="skipped",
            error=f"the deploy is {row.state} and no earlier comment was found: none to edit",
            unknown=False,
            remote_ids=ids,
        )
    return Sent(remote_ids=ids)


def comment_marker(deploy_id: str) -> str:
    """The hidden line that finds our comment again (deploy ids hold no > or space: see deploys.DEPLOY_ID)."""
    return f"<!-- radar:deploy={deploy_id} -->"


def description(state: str, row: pd.Series, found: pd.DataFrame) -> str:
    """The status's one line (at most MAX_DESCRIPTION characters): the state and what decided it."""
    decided_by = row.get("decided_by")
    if isinstance(decided_by, str):  # a canary deploy: its canary arm decided
        text = f"{state}: {decided_by}"
    elif state == "fail":
        worst = found["change_factor"].max() if len(found) else float("nan")
        what = f"{len(found)} statement{'s' if len(found) != 1 else ''} slower"
        text = f"fail: {what}" + (f", up to ×{worst:.2f}" if pd.notna(worst) else "")
    else:
        share = row.get("cleared_share")
        cleared = "no execution time to clear" if pd.isna(share) else f"{share:.0%} of execution time cleared"
        largest, bar = row.get("largest_excess_share"), row.get("max_open_excess")
        margin = "" if pd.isna(largest) or pd.isna(bar) else f"; open may add ≤ {largest:.1%} each (pass: {bar:.0%})"
        text = f"{state}: {cleared}{margin}"
    if not isinstance(decided_by, str):  # the before/after verdicts' tiers (sql/0036): a canary's arm has none
        text += tier_words(row)
    text = printable(" ".join(text.split()))
    return text if len(text) <= MAX_DESCRIPTION else text[: MAX_DESCRIPTION - 1] + "…"


def tier_words(row: pd.Series) -> str:
    """The deploy's statements probably slower (a warning: not proven, the state stands) and improved, in words for
    the status line ("; 1 probably slower, 3 faster"); empty when there are none."""

    def count(name: str) -> int:
        value = row.get(name)
        return 0 if value is None or pd.isna(value) else int(value)

    slower = count("probably_slower") + count("groups_probably_slower")
    parts = [f"{slower} probably slower"] if slower else []
    if count("improved"):
        parts.append(f"{count('improved')} faster")
    return f"; {', '.join(parts)}" if parts else ""


def comment_body(deploy: Deploy, state: str, marker: str) -> str:
    """The comment's Markdown (GitHub and GitLab): the marker, the state with a summary paragraph, each detection
    (factor, interval, cause, statement in a code block), and the link to the run; at most MAX_COMMENT characters.
    Text from outside sits in code spans or blocks, so it can neither mention anyone nor make a link."""
    event, found = deploy.event, deploy.found
    lines = [marker, f"### radar: deploy {_code(event.deploy_id)} to {_code(event.target)}: **{state}**", ""]
    row = deploy.state
    share = row.get("cleared_share")
    counts = ", ".join(f"{int(row[v])} {v}" for v in VERDICTS if v in row)
    summary = f"Commit {_code(str(event.commit_sha)[:12])}: {counts}"
    if isinstance(row.get("decided_by"), str):
        summary += f" (decided by {_code(row['decided_by'])})"
    if pd.notna(share):
        summary += f"; {share:.0%} of the execution time after the deploy is cleared"
    if state == "fail":
        summary += ". These statements got slower after the deploy:"
    elif state == "pass":
        summary += ". This analysis clears the deploy (an earlier analysis found a regression)."
    else:
        summary += f". The deploy is {state} now (an earlier analysis found a regression)."
    lines += [summary, ""]
    if state == "fail":
        for r in found.head(MAX_SHOWN).itertuples():
            interval = ""
            if pd.notna(getattr(r, "factor_low", None)) and pd.notna(getattr(r, "factor_high", None)):
                interval = f" (95% interval ×{r.factor_low:.2f} to ×{r.factor_high:.2f})"
            lines.append(
                f"- **×{r.change_factor:.2f}**{interval}, cause {_code(str(r.cause))}, queryid {int(r.queryid)} on "
                f"{_code(str(r.target))}"
            )
            lines += _block(str(r.query or f"queryid {r.queryid}"))
        if len(found) > MAX_SHOWN:
            lines.append(f"- and {len(found) - MAX_SHOWN} more: `radar verdicts {event.deploy_id}`")
    link = run_url(deploy.run_id, deploy.dagster_url)
    if link:
        lines += ["", f"[The analysis run in Dagster]({link.replace(')', '%29')})"]
    body = printable("\n".join(lines))
    return body if len(body) <= MAX_COMMENT else body[: MAX_COMMENT - 1] + "…"


def _code(text: str) -> str:
    """`text` as an inline code span (its backticks cannot end it)."""
    text = " ".join(printable(text).split())
    fence = "`" * (_longest_run(text) + 1)
    return f"{fence} {text} {fence}"


def _block(text: str) -> list[str]:
    """`text` as a fenced code block, cut to MAX_STATEMENT characters, indented under its list item."""
    text = printable(text)
    if len(text) > MAX_STATEMENT:
        text = text[: MAX_STATEMENT - 1] + "…"
    fence = "`" * max(3, _longest_run(text) + 1)
    return ["", f"  {fence}sql", *(f"  {line}" for line in text.splitlines()), f"  {fence}", ""]


def _longest_run(text: str) -> int:
    longest = run = 0
    for char in text:
        run = run + 1 if char == "`" else 0
        longest = max(longest, run)
    return longest
