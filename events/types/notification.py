"""The `notification` category: what arrived from outside, and what the engine decided about it
(seed 000, "Event Types", "Inbox Batching" and "Distributed Tracing").

Two keys, never confused. A notification's conversation identity rides its own field,
`conversation_identity` (the durable thread: what a turn's events are later tagged with as
`conversation_key`); its partition key rides the envelope's free-form payload map as
`payload["partition_key"]`. The only typed `partition_key` is on notifications_coalesced,
which names the batch that merged and which the event store promotes to a tag of that name.
"""
from __future__ import annotations

from typing import Any

from events.envelope import EventData, register
from events.types.shapes import SeatEvent, TurnEvent, because, clip, count


class DeliveryFields(EventData):
    """What a delivery is about, as a person would name it: `github comment on nimbus/api#12`."""

    event_kind: str = ""
    subject: str = ""
    sender: str = ""
    delivery_id: str = ""
    conversation_identity: str = ""

    def described(self, event) -> str:
        what = " ".join(p for p in ((event.source or "").strip(), self.event_kind.replace("_", " ")) if p)
        what = what or "notification"
        return f"{what} on {self.subject}" if self.subject else what


@register("external_notification")
class ExternalNotification(DeliveryFields, SeatEvent):
    """Inbound from a third-party app webhook or chat socket, on the recipient seat's inbox.

    A digest trigger (notifications_coalesced) is one of these carrying every constituent in
    `messages` (sender, salient body, metadata, recon flag).
    """

    body: str = ""
    salient_body: str = ""
    url: str = ""
    metadata: dict[str, Any] = {}
    messages: list[dict[str, Any]] = []
    recon: bool = False
    direct: bool = False
    trigger_position: str = ""

    def summary(self, event) -> str:
        sender = f" from {self.sender}" if self.sender else ""
        text = self.salient_body or self.body
        return f"{self.described(event)}{sender} for {self.seat}{because(text)}"


@register("notification_skipped")
class NotificationSkipped(DeliveryFields, SeatEvent):
    """A delivery addressed to somebody was dropped. `reason` is one of notify's fixed phrases, so a
    reader can match it exactly; `detail` is what the gate said about this delivery.

    `agent_*` name the seat when one was resolved; `recipient` is whom the delivery named.
    """

    recipient: str = ""
    reason: str = ""
    detail: str = ""

    def summary(self, event) -> str:
        return f"{self.described(event)} skipped: {self.reason or 'no reason given'}"


@register("notifications_coalesced")
class NotificationsCoalesced(SeatEvent):
    """N events of one partition merged into one digest trigger. Names the PARTITION (partition_key),
    never spelled conversation_key, which is the conversation identity everywhere else."""

    partition_key: str = ""
    turn_id: str = ""
    constituents: int = 0
    event_ids: list[str] = []
    senders: list[str] = []
    deduplicated: int = 0
    superseded: int = 0

    def summary(self, event) -> str:
        on = f" on {self.partition_key}" if self.partition_key else ""
        return f"{count(self.constituents, 'message')}{on} merged into one trigger for {self.seat}"


@register("turn_trigger_skipped")
class TurnTriggerSkipped(TurnEvent):
    """A redelivery the completion ledger had already worked (emitted so it is not invisible), or a
    trigger whose turn was abandoned rather than redelivered, with the reason."""

    trigger_id: str = ""
    trigger_type: str = ""
    reason: str = ""
    detail: str = ""
    abandoned: bool = False
    worked_by_turn_id: str = ""

    def summary(self, event) -> str:
        what = clip(self.trigger_type.replace("_", " "), 60) or "trigger"
        verb = "abandoned" if self.abandoned else "skipped"
        return f"{self.seat} {verb} a {what}{because(self.reason or self.detail)}"
