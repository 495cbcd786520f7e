"""The seam between the receiver and its sources. A source module has:

    NAME: str  # the path segment it is posted to: /v1/deploys/<NAME>
    ID_PREFIXES: tuple[str, ...]  # how its deploy ids start: the receiver refuses them from any other source
    def authenticate(headers: Mapping[str, str], body: bytes, secret: str) -> None: ...  # raises Refused (401)
    def parse(headers: Mapping[str, str], body: bytes, params: Mapping[str, str]) -> Parsed: ...  # raises Refused

`headers` have lower-case names; `params` are the URL's query parameters (for example the target a Flux provider's
address names). Both functions are pure: no I/O. Secrets are compared in constant time (hmac.compare_digest) and never
appear in a Refused reason."""

from __future__ import annotations

from dataclasses import dataclass

from radar_pipeline.warehouse.deploys import DeployEvent


class Refused(Exception):
    """The request is refused with this HTTP status and a one-line reason (naming the field that is wrong; never a
    secret); nothing is stored."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


@dataclass(frozen=True)
class Parsed:
    """What a source made of a request: the deploy event, or None with the reason it is not one (an event type or a
    state that is not a finished deploy: answered 202 and not stored); and the sender's id of this delivery, when it
    gives one (X-GitHub-Delivery, ...), for refusing replays."""

    event: DeployEvent | None
    delivery_id: str | None = None
    ignored: str | None = None  # why event is None
