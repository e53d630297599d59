"""The `a2a` category: one ask, one answer, then closed (seed 000, "Ephemeral A2A channels").

Rows are keyed on `channel_id`. The seat an event is about (`agent_*`) is the one that acted:
the asker on open, the sender on a message, the answering seat on a close (empty on the
sweep's close). The ask and the answer also travel as inbox wakes (a2a_request,
a2a_message, in `wakes`), which are not stored.
"""
from __future__ import annotations

from datetime import datetime

from events.envelope import register
from events.types.shapes import SeatEvent, because, count, duration


class ChannelEvent(SeatEvent):
    """An event on one A2A channel between a requester and a responder."""

    channel_id: str = ""
    requester: str = ""
    responder: str = ""
    turn_id: str = ""


@register("a2a_channel_opened")
class A2AChannelOpened(ChannelEvent):
    """A seat opened a channel with the a2a_ask tool; the brief travels on the target's wake."""

    brief: str = ""

    def summary(self, event) -> str:
        asker = self.requester or self.seat
        return f"{asker} asked {self.responder or 'a colleague'}{because(self.brief)}"


@register("a2a_message_sent")
class A2AMessageSent(ChannelEvent):
    """One message on a channel: the ask (`kind` "ask") or the answer ("answer")."""

    kind: str = ""
    sender: str = ""
    recipient: str = ""
    body: str = ""

    def summary(self, event) -> str:
        sender = self.sender or self.seat
        verb = "answered" if self.kind == "answer" else "wrote to"
        return f"{sender} {verb} {self.recipient or 'a colleague'}{because(self.body)}"


@register("a2a_channel_closed")
class A2AChannelClosed(ChannelEvent):
    """A channel closed, by the answering turn (closed_by, turn_id, work_key name it) or by the
    maintenance sweep after an hour idle (they are empty). `duration_ms` is closed_at - opened_at
    from the record itself, never the difference of two nodes' clocks."""

    closed_by: str = ""
    work_key: str = ""
    reason: str = ""
    message_count: int = 0
    duration_ms: int = 0
    opened_at: datetime | None = None
    closed_at: datetime | None = None

    def summary(self, event) -> str:
        pair = " and ".join(p for p in (self.requester, self.responder) if p) or "two seats"
        figures = f"after {count(self.message_count, 'message')} ({duration(self.duration_ms)} open)"
        if self.closed_by:
            other = self.requester if self.closed_by != self.requester else self.responder
            return f"{self.closed_by} closed A2A channel with {other or 'a colleague'} {figures}"
        return f"system closed A2A channel between {pair} {figures}"

    def actor(self, event) -> str:
        return self.closed_by or "system"
