"""Why a delivery addressed to somebody was dropped: the fixed set of phrases (seed 000,
"Distributed Tracing": "its payload cannot be read, its source was disconnected, nothing parses
its source, its parser refuses the payload, no seat matches its recipient, the routing gate
refuses it, or the rate valve is shut ... Its reason is always one of a fixed set of phrases,
so a reader can match it exactly; what the gate said about this particular delivery ... is in
detail, beside it").

A human recipient is the routing gate refusing (seed 000, "Routing": "recorded as an
info-level skip, not an undeliverable warning"): the row carries `level: info` in its payload.
"""
from __future__ import annotations

import uuid
from typing import Any

from events.envelope import Event, new
from events.tracing import TraceContext
from events.types.notification import NotificationSkipped
from notify.errors import NotifyError

PAYLOAD_UNREADABLE = "its payload cannot be read"
SOURCE_DISCONNECTED = "its source was disconnected"
NO_PARSER = "nothing parses its source"
PARSER_REFUSED = "its parser refuses the payload"
NO_SEAT = "no seat matches its recipient"
GATE_REFUSED = "the routing gate refuses it"
RATE_VALVE_SHUT = "the rate valve is shut"

REASONS: frozenset[str] = frozenset(
    {PAYLOAD_UNREADABLE, SOURCE_DISCONNECTED, NO_PARSER, PARSER_REFUSED, NO_SEAT, GATE_REFUSED, RATE_VALVE_SHUT}
)

# A skip's id is derived from what it is about, so a redelivered delivery re-publishing its
# skips writes the same rows (the event store keeps the first write of an id).
_SKIP_NAMESPACE = uuid.UUID("3f1d7c52-0a8e-5b6f-9d41-7e2c8a5b0f13")


class UnknownReason(NotifyError, ValueError):
    """A skip reason outside the fixed set (seed 000, "Distributed Tracing")."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"{reason!r} is not one of the skip reasons in notify.skips.REASONS")


def skip_event(reason: str, detail: str, trace: TraceContext, *, source: str, about: str, event_kind: str = "",
               subject: str = "", sender: str = "", delivery_id: str = "", conversation_identity: str = "",
               recipient: str = "", seat: Any = None, agent_id: str = "", level: str = "warning") -> Event:
    """The notification_skipped event for one dropped delivery (or one dropped recipient of it).

    `about` identifies what was dropped (a delivery id plus a recipient), for the derived id.
    UnknownReason for a reason outside the fixed set: a reader matches these exactly.
    """
    if reason not in REASONS:
        raise UnknownReason(reason)
    data = NotificationSkipped(
        reason=reason, detail=detail, recipient=recipient, event_kind=event_kind, subject=subject, sender=sender,
        delivery_id=delivery_id, conversation_identity=conversation_identity,
        agent_handle=getattr(seat, "handle", "") or "", agent_role=getattr(seat, "role", "") or "", agent_id=agent_id,
    )
    event_id = uuid.uuid5(_SKIP_NAMESPACE, f"{source}\x00{about}\x00{recipient}\x00{reason}")
    return new(data, trace, source=source, payload={"level": level}, id=event_id)
