"""Types that are published but not stored (seed 002, "What gets stored": the exclusions table).

The inbox wakes whose content is already a row elsewhere (raw_webhook, a2a_request,
a2a_message, sandbox_answer_given, reflection_due), the live-only per-round signal
(agent_turn_progress), a nudge between nodes (tool_skill_page_changed), the custody carrier
(custody_batch) and the periodic budget snapshot (budget_meters). Each is excluded in
`events.categories.EXCLUSIONS` with its cause and reason; placement's two are in `placement`.
"""
from __future__ import annotations

from datetime import datetime
from typing import Any

from events.envelope import EventData, register
from events.types.shapes import SeatEvent, TurnEvent, because, count, possessive, size


@register("agent_turn_progress")
class AgentTurnProgress(TurnEvent):
    """A live-only signal as each LLM round opens, answers and runs its tools; carries turn_id, phase
    and iteration so live consumers can place an in-flight round inside its turn and phase."""

    phase: str = ""
    iteration: int = 0
    round: int = 0
    stage: str = ""
    tool: str = ""
    tokens_in: int = 0
    tokens_out: int = 0
    detail: str = ""

    def summary(self, event) -> str:
        where = f"{self.phase or 'phase'} round {self.round}"
        what = f" ran {self.tool}" if self.tool else (f" {self.stage}" if self.stage else "")
        return f"{possessive(self.seat)} {where}{what}"


@register("raw_webhook")
class RawWebhook(EventData):
    """The wake an inbound edge publishes for the transports to route; the delivery itself is
    already a row as inbound_delivery."""

    integration: str = ""
    route: str = ""
    event_kind: str = ""
    delivery_id: str = ""
    content_type: str = ""
    headers: dict[str, Any] = {}
    raw_body: str = ""

    def summary(self, event) -> str:
        what = " ".join(p for p in (self.integration, self.event_kind.replace("_", " ")) if p) or "webhook"
        return f"{what} received ({size(len(self.raw_body.encode()))})"


class A2AWake(SeatEvent):
    """A hop of an A2A exchange on a seat's inbox (`agent_*` name the seat it wakes)."""

    channel_id: str = ""
    requester: str = ""
    responder: str = ""
    body: str = ""


@register("a2a_request")
class A2ARequest(A2AWake):
    """The ask, on the target seat's inbox; already a row as a2a_channel_opened and a2a_message_sent."""

    turn_id: str = ""

    def summary(self, event) -> str:
        return f"{self.requester or 'a colleague'} asks {self.responder or self.seat}{because(self.body)}"


@register("a2a_message")
class A2AMessage(A2AWake):
    """The answer, on the requester's inbox; already a row as a2a_message_sent."""

    def summary(self, event) -> str:
        return f"{self.responder or 'a colleague'} answers {self.requester or self.seat}{because(self.body)}"


@register("sandbox_answer_given")
class SandboxAnswerGiven(SeatEvent):
    """An answer by the operator route to a parked run's question, on the seat's inbox; never a turn."""

    run_id: str = ""
    request_id: str = ""
    answer: str = ""
    answered_by: str = ""
    answered_by_seat: str = ""

    def summary(self, event) -> str:
        who = self.answered_by_seat or self.answered_by or "someone"
        run = " ".join(p for p in ("coding run", self.run_id) if p)
        return f"{who} answered {possessive(self.seat)} {run}{because(self.answer)}"

    def actor(self, event) -> str:
        return self.answered_by_seat or self.answered_by or event.source or "system"


@register("tool_skill_page_changed")
class ToolSkillPageChanged(EventData):
    """A nudge between nodes that one tool-skill page moved, so every node's registry re-reads it."""

    page_id: str = ""
    container: str = ""
    backend: str = ""
    revision: str = ""

    def summary(self, event) -> str:
        return f"tool-skill page {self.page_id or '?'} changed"


@register("reflection_due")
class ReflectionDue(TurnEvent):
    """The wake that puts a finished turn in front of post-turn reflection on the seat's holder."""

    def summary(self, event) -> str:
        return f"{possessive(self.seat)} turn is due for reflection"


@register("custody_batch")
class CustodyBatch(EventData):
    """A carrier: a node without the data role publishes its events in batches (at most 256 events
    or 1 MiB) and one data node writes each event inside as the row it is."""

    batch_id: str = ""
    events: list[dict[str, Any]] = []
    total_bytes: int = 0

    def summary(self, event) -> str:
        return f"custody batch of {count(len(self.events), 'event')} ({size(self.total_bytes)})"

    def actor(self, event) -> str:
        return event.source or "system"


@register("budget_meters")
class BudgetMeters(EventData):
    """A snapshot of the shared token counters: every capped calendar window with its engine-computed
    state ({scope, agent_handle, period, window, spend, ceiling, state, resets_at, refused_at}),
    on a 15-second tick and at once when a window first refuses (`reason` tick | refusal)."""

    windows: list[dict[str, Any]] = []
    reason: str = ""
    taken_at: datetime | None = None

    def summary(self, event) -> str:
        refusing = sum(1 for w in self.windows if w.get("state") == "refusing")
        tail = f", {refusing} refusing" if refusing else ""
        return f"budget meters: {count(len(self.windows), 'window')}{tail}"

    def actor(self, event) -> str:
        return "system"
