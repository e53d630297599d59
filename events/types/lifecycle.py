"""The `lifecycle` category: the org coming and going, the config changes, and the runtime
writes an operator goes looking for after the fact (seed 000, "Event Types").

The runtime audit (operator_acted, backup_requested) is published with source "operator";
its actor is the token's own name (`token_name`: a field cannot be called `actor`, which is
the method) and `actor_seat` the person the token is bound to. One per call, whatever
became of it, never the arguments. The event store promotes actor_seat, tool and dir to tags.
"""
from __future__ import annotations

from datetime import datetime

from events.envelope import EventData, register
from events.types.shapes import SeatEvent, because, count, duration, person


@register("org_started")
class OrgStarted(EventData):
    """The company came up on this node."""

    company: str = ""
    revision: str = ""
    seat_count: int = 0

    def summary(self, event) -> str:
        name = self.company or "the company"
        rev = f", revision {self.revision}" if self.revision else ""
        return f"{name} started ({count(self.seat_count, 'seat')}{rev})"


@register("org_stopped")
class OrgStopped(EventData):
    """The company stopped on this node."""

    company: str = ""
    reason: str = ""

    def summary(self, event) -> str:
        return f"{self.company or 'the company'} stopped{because(self.reason)}"


@register("config_revision_activated")
class ConfigRevisionActivated(EventData):
    """A new revision of the company document is the one to serve."""

    revision: str = ""
    digest: str = ""
    previous_revision: str = ""
    activated_by: str = ""
    activated_by_seat: str = ""
    note: str = ""

    def summary(self, event) -> str:
        who = person(self.activated_by_seat, self.activated_by)
        was = f" (was {self.previous_revision})" if self.previous_revision else ""
        return f"{who} activated revision {self.revision or '?'}{was}"

    def actor(self, event) -> str:
        return person(self.activated_by_seat, self.activated_by, event.source, default="system")


@register("config_revision_applied")
class ConfigRevisionApplied(EventData):
    """One node's outcome of applying a revision, and how far it got (`reached`, the last step done)."""

    revision: str = ""
    digest: str = ""
    applied: bool = False
    reached: str = ""
    error: str = ""
    detail: str = ""
    duration_ms: int = 0

    def summary(self, event) -> str:
        where = f" on {event.node}" if event.node else ""
        if self.applied:
            return f"revision {self.revision or '?'} applied{where} in {duration(self.duration_ms)}"
        got = f" (reached {self.reached})" if self.reached else ""
        return f"revision {self.revision or '?'} not applied{where}{got}{because(self.error or self.detail)}"


class OperatorAudit(EventData):
    """The runtime audit's common fields: which token, bound to which person."""

    token_name: str = ""
    actor_seat: str = ""

    def actor(self, event) -> str:
        return person(self.token_name, self.actor_seat, event.source, default="system")

    @property
    def who(self) -> str:
        if self.actor_seat and self.token_name and self.actor_seat != self.token_name:
            return f"{self.actor_seat} ({self.token_name})"
        return person(self.actor_seat, self.token_name, default="an operator")


@register("operator_acted")
class OperatorActed(OperatorAudit):
    """An operator tool call that is not a proven read, from the dashboard (/operator/act) or a
    person's assistant (/operator/mcp): tool, transport, request id, outcome, position or refusal."""

    tool: str = ""
    transport: str = ""
    request_id: str = ""
    outcome: str = ""
    position: str = ""
    refusal: str = ""

    def summary(self, event) -> str:
        via = f" via {self.transport}" if self.transport else ""
        result = self.outcome or ("refused" if self.refusal else "")
        tail = f": {result}" if result else ""
        if self.refusal:
            tail += f" ({self.refusal})"
        return f"{self.who} ran {self.tool or 'an operator tool'}{via}{tail}"


@register("backup_requested")
class BackupRequested(OperatorAudit):
    """A POST /backup that began copying: into which dir, whether it finished, how many streams.
    Which node's disk holds it is the envelope's `node`."""

    dir: str = ""
    finished: bool = False
    streams: int = 0
    error: str = ""

    def summary(self, event) -> str:
        state = "finished" if self.finished else "did not finish"
        where = f" to {self.dir}" if self.dir else ""
        return f"{self.who} backed up {count(self.streams, 'stream')}{where}: {state}{because(self.error)}"


@register("seat_paused")
class SeatPaused(SeatEvent):
    """A person paused a seat. Published once per change by the caller whose compare-and-set won,
    and again when a pause is amended to stop the running turn."""

    paused_by: str = ""
    paused_by_seat: str = ""
    reason: str = ""
    stop_running: bool = False
    paused_at: datetime | None = None

    def summary(self, event) -> str:
        stop = " and stopped its running turn" if self.stop_running else ""
        return f"{person(self.paused_by_seat, self.paused_by)} paused {self.seat}{stop}{because(self.reason)}"

    def actor(self, event) -> str:
        return person(self.paused_by_seat, self.paused_by, event.source, default="system")


@register("seat_resumed")
class SeatResumed(SeatEvent):
    """The pause was lifted; names the pause it ended."""

    resumed_by: str = ""
    resumed_by_seat: str = ""
    paused_by: str = ""
    paused_at: datetime | None = None

    def summary(self, event) -> str:
        ended = f" (paused by {self.paused_by})" if self.paused_by else ""
        return f"{person(self.resumed_by_seat, self.resumed_by)} resumed {self.seat}{ended}"

    def actor(self, event) -> str:
        return person(self.resumed_by_seat, self.resumed_by, event.source, default="system")
