"""Placement: a seat acquired or released by this node (seed 000, "Event Types").

Not stored (cause `placement`, seed 002 "What gets stored"): placement moves seats on every
rebalance, so these are live-only; they drive the live projection. Which node is the
envelope's `node`, the one that published them.
"""
from __future__ import annotations

from events.envelope import register
from events.types.shapes import SeatEvent, because


@register("agent_spawned")
class AgentSpawned(SeatEvent):
    """This node acquired the seat (under fencing `epoch`) and attached its mailbox."""

    epoch: int = 0
    reason: str = ""

    def summary(self, event) -> str:
        where = f" on {event.node}" if event.node else ""
        return f"{self.seat} started{where}{because(self.reason)}"


@register("agent_terminated")
class AgentTerminated(SeatEvent):
    """This node released the seat; whether it still runs anywhere is the seat leases' to say."""

    epoch: int = 0
    reason: str = ""

    def summary(self, event) -> str:
        where = f" on {event.node}" if event.node else ""
        return f"{self.seat} released{where}{because(self.reason)}"
