"""The `webhook` category: inbound_delivery (seed 000, "Event Types"; seed 002, "What gets stored").

One delivery presented to one seat, counted once across the fleet, from a webhook route or a
Mattermost socket. The ONE type whose rows do not carry its name: each row is filed under
the delivery's own label (`webhook:<event>`, `forge:<event>`, `socket:posted`) with the
provider's exact bytes as its payload, because that is what an operator matches against
their provider's console. Published rather than written, so a stateless node's socket
reaches a data node through custody.
"""
from __future__ import annotations

from typing import Any

from events.envelope import register
from events.types.shapes import SeatEvent, size

# The transports a delivery arrives by, which prefix its label.
TRANSPORTS: tuple[str, ...] = ("webhook", "forge", "socket")


def delivery_label(transport: str, event_kind: str) -> str:
    """`webhook:issue_comment`, `forge:push`, `socket:posted`: the label a delivery's row is filed under."""
    return f"{transport}:{event_kind}"


@register("inbound_delivery")
class InboundDelivery(SeatEvent):
    """One delivery presented to one seat. `raw_body` is the provider's exact bytes, as text."""

    label: str = ""
    transport: str = ""
    integration: str = ""
    event_kind: str = ""
    delivery_id: str = ""
    route: str = ""
    content_type: str = ""
    headers: dict[str, Any] = {}
    raw_body: str = ""

    def row_label(self) -> str:
        """The label this delivery's row is filed under: `label`, else built from transport and
        event kind, else the type name (a delivery that names neither is still a row)."""
        if self.label:
            return self.label
        if self.transport and self.event_kind:
            return delivery_label(self.transport, self.event_kind)
        return self.TYPE

    def summary(self, event) -> str:
        what = self.row_label()
        via = f" from {self.integration}" if self.integration else ""
        return f"{what}{via} delivered to {self.seat} ({size(len(self.raw_body.encode()))})"
