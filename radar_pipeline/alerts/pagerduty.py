"""PagerDuty through its Events API v2: a trigger per detection (one incident per statement, deploy and target, by a
stable dedup_key), a resolve when that statement recovers, and each deploy as a change event.

Written on httpx, not on the `pagerduty` package (7.2.0): its EventsApiV2Client refuses a base URL that is not
https:// (no loopback stand-in without TLS), retries a 429 inside the call without limit and without reading
Retry-After (a run would sleep where the outbox should wait between runs), resends a request that timed out up to
three times inside the call (a change event, which PagerDuty does not deduplicate, would be sent again unseen), and
its change-event helper fails on a timestamp bug. The requests below are the documented ones; every answer is judged:
202 delivered, PagerDuty's 400 final, 429 waits (Retry-After), anything else (5xx, a proxy's page, a cut body, a
timeout, a reset) may have been taken and is retried, which PagerDuty's dedup_key makes harmless for triggers and
resolves.

Severity, from the regression's size (the slowdown factor, its 95% interval's lower end when known) and the test's
confidence: critical at ×3 or more with confidence ≥ 0.99; error at ×2 or more with confidence ≥ 0.95; warning for
any other regression. A load change (a new heavy statement, a call surge) is a warning when it holds at least half of
the target's execution time after the split, else info.
"""

from __future__ import annotations

import hashlib
import json
import time
from datetime import UTC, datetime
from typing import Any

import httpx

from radar_pipeline.alerts.channel import ChannelError, Delivered, DeployNotice, Detection, retry_after
from radar_pipeline.alerts.render import AnalysisFacts, LoadChange, Regression, canary_words, shown_target
from radar_pipeline.config import printable
from radar_pipeline.config.masking import quoted
from radar_pipeline.pgss_model import Key

DEFAULT_URL = "https://events.pagerduty.com"
MAX_SUMMARY = 1024  # PagerDuty's limit on payload.summary
MAX_STATEMENT = 1000  # characters of a statement's text in custom_details
MAX_ANSWER = 64 * 1024  # bytes of an answer read; PagerDuty's are a few hundred
SHOWN = 160  # characters of an odd answer quoted in an error
NO_RETRY_AFTER = 60.0  # seconds waited after a 429 without a readable Retry-After (PagerDuty gives none)
SEVERITIES = ("critical", "error", "warning", "info")


def dedup_key(target: str, key: Key, analysis_id: str) -> str:
    """The incident's key: the same for the same statement, target and deploy (or periodic check), whatever attempt
    sends it; a hash, so neither length nor characters of the names matter (PagerDuty allows 255)."""
    raw = json.dumps([target, [int(key[0]), int(key[1]), int(key[2]), bool(key[3])], analysis_id])
    return "radar-" + hashlib.sha256(raw.encode()).hexdigest()


def severity(regression: Regression | None = None, change: LoadChange | None = None) -> str:
    """PagerDuty's severity of a detection (the module's docstring gives the mapping)."""
    if regression is not None:
        size = regression.factor_low if regression.factor_low is not None else regression.change_factor
        if size >= 3 and regression.confidence >= 0.99:
            return "critical"
        if size >= 2 and regression.confidence >= 0.95:
            return "error"
        return "warning"
    if change is not None and change.share_of_time_after >= 0.5:
        return "warning"
    return "info"


def _cut(text: str, limit: int) -> str:
    text = printable(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _links(*pairs: tuple[str | None, str]) -> list[dict[str, str]]:
    return [{"href": url, "text": text} for url, text in pairs if url and url.startswith(("https://", "http://"))]


def _where(facts: AnalysisFacts) -> str:
    if facts.period:
        return f"in the periodic check {facts.analysis_id}"
    what = " ".join(p for p in (facts.service, facts.version) if p) or facts.analysis_id
    return f"after deploy {what}"


def trigger_event(facts: AnalysisFacts, detection: Detection) -> dict[str, Any]:
    """The trigger for one detection (without the routing key)."""
    regression, change = detection.regression, detection.change
    dbid, userid, queryid, toplevel = detection.key
    target = shown_target(facts)  # a canary's facts.target is the outbox's canary:<target> (the dedup_key's)
    details: dict[str, Any] = {
        "target": target,
        "analysis": facts.analysis_id,
        "service": facts.service,
        "version": facts.version,
        "queryid": str(queryid),
        "dbid": int(dbid),
        "userid": int(userid),
        "toplevel": bool(toplevel),
        "dagster_run": facts.run_url,
    }
    where = _where(facts)
    if regression is not None and facts.canary is not None:  # the canary arm's: against the stable role
        arms = facts.canary
        words = canary_words(arms.canary_role, regression.change_factor, arms.stable_role)
        what = f"queryid {queryid} slower in the canary arm ({words})"
        where = f"in canary deploy {' '.join(p for p in (facts.service, facts.version) if p) or facts.analysis_id}"
        statement, at = regression.query, arms.window[0]
        details.update(
            canary_role=printable(arms.canary_role),
            stable_role=printable(arms.stable_role),
            window=[t.astimezone(UTC).isoformat() for t in arms.window],
            mean_canary_ms=round(regression.mean_after_ms, 3),
            mean_stable_ms=round(regression.mean_before_ms, 3),
            calls_canary=regression.calls_after,
            calls_stable=regression.calls_before,
            change_factor=round(regression.change_factor, 3),
            factor_interval=[regression.factor_low, regression.factor_high],
            confidence=round(regression.confidence, 4),
            cause=regression.cause,
        )
        kind = "canary"
    elif regression is not None:
        what = f"queryid {queryid} ×{regression.change_factor:.2f} slower"
        statement, at = regression.query, regression.change_at
        details.update(
            mean_before_ms=round(regression.mean_before_ms, 3),
            mean_after_ms=round(regression.mean_after_ms, 3),
            change_factor=round(regression.change_factor, 3),
            factor_interval=[regression.factor_low, regression.factor_high],
            confidence=round(regression.confidence, 4),
            calls_before=regression.calls_before,
            calls_after=regression.calls_after,
            cause=regression.cause,
            cause_detail=regression.cause_detail,
            named_changes=regression.named_changes,
            undo_hint=regression.undo_hint,
            plan=regression.plan_summary,
        )
        kind = "regression"
    elif change is not None:
        what = f"queryid {queryid}: {change.kind} ({change.share_of_time_after:.0%} of the time after)"
        statement, at = change.query, facts.split_at
        details.update(
            change=change.kind,
            calls_per_min=[round(change.calls_per_min_before, 3), round(change.calls_per_min_after, 3)],
            exec_ms_per_min=[round(change.exec_ms_per_min_before, 3), round(change.exec_ms_per_min_after, 3)],
            share_of_time_after=round(change.share_of_time_after, 4),
            plan=change.plan_summary,
        )
        kind = "load_change"
    else:
        raise ValueError("a detection needs a regression or a load change")
    details["statement"] = _cut(statement, MAX_STATEMENT)
    summary = f"radar: {what} {where} on {target}: {' '.join(statement.split())}"
    return {
        "event_action": "trigger",
        "dedup_key": dedup_key(facts.target, detection.key, facts.analysis_id),
        "payload": {
            "summary": _cut(summary, MAX_SUMMARY),
            "source": _cut(target, 255),
            "severity": severity(regression, change),
            "timestamp": at.astimezone(UTC).isoformat(),
            "component": "postgresql",
            "group": _cut(facts.service or target, 255),
            "class": kind,
            "custom_details": {k: v for k, v in details.items() if v is not None},
        },
        "client": "radar",
        **({"client_url": facts.run_url} if facts.run_url else {}),
        "links": _links((facts.run_url, "Analysis run in Dagster"), (facts.url, f"Deploy {facts.analysis_id}")),
    }


def change_event(notice: DeployNotice, delivery_id: str) -> dict[str, Any]:
    """The change event of a deploy (without the routing key)."""
    what = " ".join(p for p in (notice.service, notice.version) if p)
    summary = f"Deploy {notice.deploy_id}{f' ({what})' if what else ''} on {notice.target}"
    details = {
        "deploy_id": notice.deploy_id,
        "target": notice.target,
        "service": notice.service,
        "version": notice.version,
        "commit": notice.commit_sha,
        "repository": notice.repository,
        "radar_delivery": delivery_id,
    }
    return {
        "payload": {
            "summary": _cut(summary, MAX_SUMMARY),
            "source": _cut(notice.target, 255),
            "timestamp": notice.deployed_at.astimezone(UTC).isoformat(),
            "custom_details": {k: v for k, v in details.items() if v is not None},
        },
        "links": _links((notice.url, "Deploy"), (notice.run_url, "CI run")),
    }


class PagerDutyChannel:
    """PagerDuty's Events API v2 under one routing key (an integration of one service): a Channel (triggers), a
    DeployMarker (change events) and a resolver. It cannot tell whether an earlier attempt was delivered (the Events
    API has no read), so a doubtful attempt is sent again: for a trigger or a resolve that is the same dedup_key, one
    incident; for a change event it may show twice."""

    name = "pagerduty"
    per_detection = True
    can_check = False

    def __init__(self, routing_key: str, url: str = DEFAULT_URL, timeout: float = 10.0) -> None:
        self._key = routing_key
        self.url = url.rstrip("/")
        self.timeout = timeout
        self._http = httpx.Client(timeout=httpx.Timeout(timeout), follow_redirects=False)

    def close(self) -> None:
        """Close the connections."""
        self._http.close()

    def notify(self, facts: AnalysisFacts, detections: list[Detection], delivery_id: str) -> Delivered:
        """Trigger an incident for the one detection; its remote id is the dedup_key."""
        (detection,) = detections
        event = trigger_event(facts, detection)
        answer = self._post("/v2/enqueue", event, "trigger")
        return Delivered(remote_id=str(answer.get("dedup_key") or event["dedup_key"]))

    def remote_id_of(self, facts: AnalysisFacts, detection: Detection) -> str:
        """The dedup_key a trigger for this detection has, known before it is sent (recorded with its first attempt,
        so an incident an attempt may have opened is resolved even if the trigger never ends sent)."""
        return dedup_key(facts.target, detection.key, facts.analysis_id)

    def find_delivered(self, facts: AnalysisFacts, earlier: dict[Key, str], since: datetime) -> dict[Key, Delivered]:
        """Never called (can_check is False): the Events API cannot be read."""
        return {}

    def resolve(self, remote_id: str, delivery_id: str) -> Delivered:
        """Resolve the incident of this dedup_key (PagerDuty accepts a resolve for one already closed)."""
        self._post("/v2/enqueue", {"event_action": "resolve", "dedup_key": remote_id}, "resolve")
        return Delivered(remote_id=remote_id)

    def mark_deploy(self, notice: DeployNotice, delivery_id: str) -> Delivered:
        """Send the deploy as a change event."""
        self._post("/v2/change/enqueue", change_event(notice, delivery_id), "change event")
        return Delivered()

    def find_marked(self, notice: DeployNotice, delivery_id: str, since: datetime) -> Delivered | None:
        """Never called (can_check is False)."""
        return None

    def _post(self, path: str, event: dict[str, Any], what: str) -> dict[str, Any]:
        """One request; PagerDuty's JSON answer to a 202, else a ChannelError without the routing key."""
        body = {"routing_key": self._key, **event}
        try:
            status, headers, raw = self._send(self.url + path, body)
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:  # nothing went out
            raise ChannelError(f"PagerDuty could not be reached ({what}): {self._first_line(exc)}", True) from None
        except httpx.HTTPError as exc:  # out, and no whole answer: a timeout, a reset, a cut body
            raise ChannelError(
                f"no answer from PagerDuty ({what}; it may have been taken): {self._first_line(exc)}",
                True,
                unknown=True,
            ) from None
        try:
            data = json.loads(raw)
        except ValueError:
            data = None
        ours = isinstance(data, dict) and isinstance(data.get("status"), str)
        if status == 202 and ours and data.get("status") == "success":  # type: ignore[union-attr]
            return data  # type: ignore[return-value]
        if status == 429:
            wait = retry_after(headers.get("retry-after"), NO_RETRY_AFTER)
            raise ChannelError(f"PagerDuty throttled the {what} (HTTP 429, wait {wait:g} s)", True, retry_after=wait)
        if ours and 400 <= status < 500:
            errors = data.get("errors") if isinstance(data, dict) else None
            detail = "; ".join(str(e) for e in errors) if isinstance(errors, list) else ""
            message = str(data.get("message") or data.get("status"))  # type: ignore[union-attr]
            raise ChannelError(
                f"PagerDuty refused the {what} (HTTP {status}): {self._quote(f'{message} {detail}')}", False
            )
        page = self._quote(raw.decode("utf-8", "replace"))
        raise ChannelError(
            f"an answer that is not PagerDuty's to the {what} (HTTP {status}: {page}); it may have been taken",
            True,
            unknown=True,
            retry_after=retry_after(headers["retry-after"], NO_RETRY_AFTER) if "retry-after" in headers else None,
        )

    def _send(self, url: str, body: dict[str, Any]) -> tuple[int, httpx.Headers, bytes]:
        """The answer's status, headers and body, read within the time bound (each wait, and the whole body)."""
        deadline = time.monotonic() + 2 * self.timeout
        with self._http.stream("POST", url, json=body) as response:
            data = bytearray()
            for chunk in response.iter_bytes():
                data += chunk
                if len(data) > MAX_ANSWER or time.monotonic() > deadline:
                    raise httpx.ReadError("an answer too long or too slow, not read whole")
            return response.status_code, response.headers, bytes(data)

    def _first_line(self, exc: Exception) -> str:
        text = str(exc).splitlines()[0] if str(exc) else ""
        return self._quote(f"{type(exc).__name__}: {text}" if text else type(exc).__name__)

    def _quote(self, text: str) -> str:
        return quoted(text, [self._key], SHOWN)
