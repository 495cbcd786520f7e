"""Grafana annotations through Grafana's HTTP API (httpx): one for each detection and one for each deploy, so they
appear on the team's dashboards beside the graphs they explain.

Each annotation carries the tags `radar`, `kind:<regression|new|surge|n_plus_one|replaced|canary|deploy>`,
`target:<target>`, `service:<service>` (when known), `deploy:<deploy id>` (`check:<id>` for a periodic check), and one
tag that names its outbox delivery (`radar-delivery:<delivery id>/<statement>`; a deploy's: `radar-delivery:<delivery
id>`), so an attempt whose answer was lost is found again (GET /api/annotations with both tags): exactly once. A
detection is placed where its change began (`change_at`; a load change at the deploy), a canary arm's detection as a
region over the minutes both arms were read in (its text names both roles: docs/canary.md), a deploy at its time. With
a dashboard UID (and a panel id) set, the annotations are that dashboard's (panel's); without, they are the
organisation's, shown on any dashboard whose annotation query asks for the tag `radar`.

The token is a service account's (role Editor, or the permission annotations:create and annotations:read), sent only
to the configured URL: redirects are not followed, and no error text shows it.

Why httpx and not grafana-client (5.1.4): its timeout and a loopback URL work, but it turns a refused connection and
a connection lost after the request went out into the same exception (status 0), which the outbox must tell apart
(sent again at once, or looked for first); it drops a 429's Retry-After; it lets an HTML page on a 200 through as an
unwrapped JSONDecodeError; its find_annotations puts tags in the query string unencoded (a tag with & or # breaks
it); and it would bring niquests and urllib3-future with it, for two requests httpx (already a dependency) makes."""

from __future__ import annotations

import hashlib
import html
from datetime import UTC, datetime, timedelta
from typing import Any

from radar_pipeline.alerts.channel import ChannelError, Delivered, DeployNotice, Detection
from radar_pipeline.alerts.outlet_http import DEFAULT_TIMEOUT, NOT_JSON, Answer, Http
from radar_pipeline.alerts.render import (
    CHANGE_WORDS,
    AnalysisFacts,
    Regression,
    canary_window_words,
    canary_words,
    cause_line,
    shown_target,
)
from radar_pipeline.config import printable
from radar_pipeline.config.masking import mask_query
from radar_pipeline.pgss_model import Key

MAX_TAG = 100  # characters of a tag Grafana stores (its tag table's key and value); a longer one is cut and hashed
MAX_QUERY = 300  # characters of a statement's text in an annotation
MAX_FIELD = 200  # characters of any other outside text (a target, a service, a version)
LOOKBACK = timedelta(days=2)  # before a detection's analysis split, where its annotation may have been placed
DELIVERY_TAG = "radar-delivery"


class GrafanaChannel:
    """Annotations on Grafana for each detection (a Channel, per detection) and each deploy (a DeployMarker)."""

    name = "grafana"
    per_detection = True
    can_check = True

    def __init__(
        self,
        url: str,
        token: str,
        timeout: float = DEFAULT_TIMEOUT,
        dashboard_uid: str | None = None,
        panel_id: int | None = None,
    ) -> None:
        if not url.startswith(("https://", "http://")):
            raise ValueError(f"the Grafana URL must be http(s): {mask_query(url)}")
        if panel_id is not None and not dashboard_uid:
            raise ValueError("a Grafana panel id needs its dashboard's UID")
        self._api = url.rstrip("/") + "/api/annotations"
        self._headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
        self._http = Http("Grafana", (token,), timeout)
        self._place = {k: v for k, v in (("dashboardUID", dashboard_uid), ("panelId", panel_id)) if v is not None}

    def __repr__(self) -> str:
        return f"GrafanaChannel({mask_query(self._api)!r})"

    def notify(self, facts: AnalysisFacts, detections: list[Detection], delivery_id: str) -> Delivered:
        """Add the annotation of one detection; raises ChannelError (its text without the token)."""
        if len(detections) != 1:
            raise ChannelError(f"Grafana takes one detection a request, not {len(detections)}", False)
        (found,) = detections
        moment = found.regression.change_at if found.regression is not None else facts.split_at
        kind = "regression" if found.regression is not None else found.change.kind if found.change else "detection"
        end = None
        if facts.canary is not None:  # a region over the minutes both arms were read in
            kind, (moment, end) = "canary", facts.canary.window
        tags = [*_common(shown_target(facts), facts.service), _tag("kind", kind), _analysis_tag(facts)]
        tags.append(_tag(DELIVERY_TAG, f"{delivery_id}/{_statement(found.key)}"))
        return self._add(moment, tags, detection_text(facts, found), end)

    def find_delivered(self, facts: AnalysisFacts, earlier: dict[Key, str], since: datetime) -> dict[Key, Delivered]:
        """Of these earlier attempts, the annotations Grafana holds (found by their delivery tag; placed at their
        change's time, from LOOKBACK before the analysis's split up to now)."""
        start = min(facts.split_at, since) - LOOKBACK
        end = max(datetime.now(UTC), since) + timedelta(days=1)
        found: dict[Key, Delivered] = {}
        for key, delivery_id in earlier.items():
            annotation = self._find(_tag(DELIVERY_TAG, f"{delivery_id}/{_statement(key)}"), start, end)
            if annotation is not None:
                found[key] = annotation
        return found

    def mark_deploy(self, notice: DeployNotice, delivery_id: str) -> Delivered:
        """Add the deploy's annotation at its time; raises ChannelError."""
        tags = [*_common(notice.target, notice.service), _tag("kind", "deploy"), _tag("deploy", notice.deploy_id)]
        tags.append(_tag(DELIVERY_TAG, delivery_id))
        return self._add(notice.deployed_at, tags, deploy_text(notice))

    def find_marked(self, notice: DeployNotice, delivery_id: str, since: datetime) -> Delivered | None:
        """The deploy's annotation an earlier attempt added, or None."""
        return self._find(_tag(DELIVERY_TAG, delivery_id), notice.deployed_at, notice.deployed_at)

    def _add(self, moment: datetime, tags: list[str], text: str, end: datetime | None = None) -> Delivered:
        body = {"time": _ms(moment), "tags": tags, "text": text, **self._place}
        if end is not None:
            body["timeEnd"] = _ms(end)
        answer = self._http.request("POST", self._api, json_body=body, headers=self._headers)
        data = self._judge(answer)
        number = data.get("id") if isinstance(data, dict) else None
        if not isinstance(number, int) or isinstance(number, bool):
            raise self._http.not_the_api(answer)
        return Delivered(str(number))

    def _find(self, delivery_tag: str, start: datetime, end: datetime) -> Delivered | None:
        params = [("tags", "radar"), ("tags", delivery_tag), ("matchAny", "false"), ("type", "annotation")]
        params += [("from", str(_ms(start))), ("to", str(_ms(end))), ("limit", "10")]
        answer = self._http.request("GET", self._api, params=params, headers=self._headers)
        data = self._judge(answer)
        if not isinstance(data, list):
            raise self._http.not_the_api(answer)
        for item in data:  # a Grafana that ignored the tags would list others: only this delivery's counts
            if isinstance(item, dict) and delivery_tag in (item.get("tags") or []) and isinstance(item.get("id"), int):
                return Delivered(str(item["id"]))
        return None

    def _judge(self, answer: Answer) -> Any:
        """The JSON of a 200, else the ChannelError the answer makes."""
        data = answer.json()
        if answer.status == 200 and not answer.html:
            if data is not None and not isinstance(data, str) and data is not NOT_JSON:
                return data
            raise self._http.not_the_api(answer)
        message = data.get("message") if isinstance(data, dict) else None
        what = self._http.quote(message if isinstance(message, str) else answer.text)
        reason = {401: "the token was refused", 403: "the token may not add or read annotations"}.get(answer.status)
        raise self._http.refused(answer, f"{reason}: {what}" if reason else what)


def detection_text(facts: AnalysisFacts, found: Detection) -> str:
    """The annotation's text (HTML, as Grafana shows it, sanitised): what changed, the statement, the numbers, links."""
    where = _where(facts)
    lines: list[str] = []
    if facts.canary is not None and found.regression is not None:
        lines += _canary_lines(facts, found.regression)
    elif found.regression is not None:
        r = found.regression
        lines.append(f"<b>radar: ×{r.change_factor:.2f} slower</b> on {where}")
        lines.append(f"<code>{_text(r.query, MAX_QUERY)}</code>")
        lines.append(
            f"Mean {r.mean_before_ms:.3f} → {r.mean_after_ms:.3f} ms, confidence {r.confidence:.4f}, "
            f"cause {_text(cause_line(r), MAX_FIELD)}, queryid {r.queryid}"
        )
    elif found.change is not None:
        c = found.change
        lines.append(f"<b>radar: {_text(CHANGE_WORDS.get(c.kind, c.kind), MAX_FIELD)}</b> on {where}")
        lines.append(f"<code>{_text(c.query, MAX_QUERY)}</code>")
        lines.append(
            f"Calls per minute {c.calls_per_min_before:,.1f} → {c.calls_per_min_after:,.1f}, "
            f"{c.share_of_time_after:.0%} of the database time after the deploy, queryid {c.queryid}"
        )
    lines.append(_links((facts.url, "deploy"), (facts.run_url, "analysis run in Dagster")))
    return "<br>\n".join(line for line in lines if line)


def _canary_lines(facts: AnalysisFacts, r: Regression) -> list[str]:
    """A canary arm's detection: the canary role against the stable role over the same minutes, both arms' means and
    calls (the stable arm's are the regression's "before", the canary's its "after"), escaped."""
    assert facts.canary is not None
    arms = facts.canary
    words = canary_words(arms.canary_role, r.change_factor, arms.stable_role)
    what = " ".join(p for p in (facts.service, facts.version) if p)
    named = f" ({_text(what, MAX_FIELD)})" if what else ""
    interval = ""
    if r.factor_low is not None and r.factor_high is not None and r.factor_low == r.factor_low:  # not NaN
        interval = f", 95% interval ×{r.factor_low:.2f}–×{r.factor_high:.2f}"
    return [
        f"<b>radar: slower in the canary arm, {_text(words, 2 * MAX_FIELD)}</b> on {_text(arms.target, MAX_FIELD)}, "
        f"canary deploy {_text(facts.analysis_id, MAX_FIELD)}{named}",
        f"<code>{_text(r.query, MAX_QUERY)}</code>",
        f"Mean {r.mean_before_ms:.3f} ms stable, {r.mean_after_ms:.3f} ms canary (×{r.change_factor:.2f}{interval}); "
        f"calls {r.calls_before:,} stable, {r.calls_after:,} canary; confidence {r.confidence:.4f}; "
        f"queryid {r.queryid}",
        f"Same minutes: {_text(canary_window_words(arms), MAX_FIELD)}",
    ]


def deploy_text(notice: DeployNotice) -> str:
    """A deploy's annotation text (HTML): its id, service, version, commit, and links to it and its CI run."""
    what = " ".join(_text(p, MAX_FIELD) for p in (notice.service, notice.version) if p)
    lines = [
        f"<b>Deploy {_text(notice.deploy_id, MAX_FIELD)}</b>{f' ({what})' if what else ''} on "
        f"{_text(notice.target, MAX_FIELD)}"
    ]
    if notice.commit_sha:
        repository = f" in {_text(notice.repository, MAX_FIELD)}" if notice.repository else ""
        lines.append(f"commit {_text(notice.commit_sha, 64)}{repository}")
    lines.append(_links((notice.url, "deploy"), (notice.run_url, "CI run")))
    return "<br>\n".join(line for line in lines if line)


def _where(facts: AnalysisFacts) -> str:
    target = _text(facts.target, MAX_FIELD)
    if facts.period:
        return f"{target} with no deploy behind it (periodic check {_text(facts.analysis_id, MAX_FIELD)})"
    what = " ".join(p for p in (facts.service, facts.version) if p)
    named = f" ({_text(what, MAX_FIELD)})" if what else ""
    return f"{target} after deploy {_text(facts.analysis_id, MAX_FIELD)}{named}"


def _links(*links: tuple[str | None, str]) -> str:
    shown = [
        f'<a href="{html.escape(printable(url), quote=True)}">{label}</a>'
        for url, label in links
        if url and url.startswith(("https://", "http://"))
    ]
    return " · ".join(shown)


def _text(value: str, limit: int) -> str:
    """Outside text for the annotation's HTML: one line, cut to `limit` characters, escaped."""
    one_line = " ".join(printable(value).split())
    if len(one_line) > limit:
        one_line = one_line[: limit - 1] + "…"
    return html.escape(one_line, quote=True)


def _common(target: str, service: str | None) -> list[str]:
    return ["radar", _tag("target", target), *([_tag("service", service)] if service else [])]


def _analysis_tag(facts: AnalysisFacts) -> str:
    return _tag("check" if facts.period else "deploy", facts.analysis_id)


def _statement(key: Key) -> str:
    dbid, userid, queryid, toplevel = key
    return f"{dbid}.{userid}.{queryid}.{'t' if toplevel else 'f'}"


def _tag(name: str, value: str) -> str:
    """`name:value` as a Grafana tag: printable, one line, at most MAX_TAG characters (a longer value is cut and ends
    with a hash of the whole, so two long values stay two tags)."""
    text = f"{name}:{' '.join(printable(value).split())}"
    if len(text) <= MAX_TAG:
        return text
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    return f"{text[: MAX_TAG - 17]}~{digest}"


def _ms(moment: datetime) -> int:
    """Epoch milliseconds (a naive time is taken as UTC)."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)
