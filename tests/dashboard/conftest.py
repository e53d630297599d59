"""The dashboard's fixtures: a real LiveProjection on the in-memory queue twin (a real
implementation of the EventQueue contract, certified by tests/queue), with a parsed company,
and helpers that build events the way the engine does."""
from __future__ import annotations

import uuid
from datetime import datetime, timezone
from dataclasses import dataclass
from typing import Any

import pytest

from engine.config import parse_company
from engine.coord.leases import LeaseManager
from engine.coord.local import LocalCoord
from engine.queue import topics
from events.envelope import Event, format_timestamp
from events.tracing import new_span_id, new_trace_id

COMPANY = """
name: nimbus
org:
  seats:
    - {handle: maya, kind: human, role: founder}
    - {handle: alice, kind: agent, role: engineer, reports_to: maya}
    - {handle: bob, kind: agent, role: engineer, reports_to: maya}
"""


@pytest.fixture
def company():
    return parse_company(COMPANY)


def make_event(event_type: str, company=None, seat: str | None = None, *, at: datetime | None = None,
               trace_id: str = "", span_id: str = "", parent_span_id: str = "", node: str = "", **fields) -> Event:
    """An event as it travels: wire form through `Event.from_wire`, seat fields filled from the company."""
    if seat is not None and company is not None:
        fields = {"agent_id": str(company.agent_id_for(seat)), "agent_handle": seat, **fields}
    wire = {
        "id": str(uuid.uuid4()), "type": event_type, "timestamp": format_timestamp(at or datetime.now(timezone.utc)),
        "source": "engine", "payload": {}, "trace_id": trace_id or new_trace_id(), "span_id": span_id or new_span_id(),
        "parent_span_id": parent_span_id, **({"node": node} if node else {}), **fields,
    }
    return Event.from_wire(wire)


@dataclass
class TwinNode:
    """A `dashboard.node.DashboardNode` on the memory twins (the engine's Node is one in a process)."""

    queue: Any
    company: Any
    coord: Any = None
    node_id: str = "node-1"
    revision: int | None = 1
    writer: Any = None
    projection: Any = None
    seat_runtime: Any = None
    stopping: bool = False
    max_concurrent: int = 8
    sweep_seconds: float = 5.0
    env: Any = None

    def __post_init__(self) -> None:
        from dashboard.reads import run_read
        from events.fleet import FleetReads
        from seats.budgets import Budgets
        from seats.pauses import PauseBook

        self.history = FleetReads(node_id=self.node_id, run_read=run_read)  # this store alone: no peers
        self.coord = self.coord or LocalCoord()
        self.leases = LeaseManager(self.coord, self.node_id, ttl=30)
        self.pauses = PauseBook(self.coord)
        self.budgets = Budgets(self.coord)


@pytest.fixture
async def twin(company):
    """A DashboardNode on a MemoryBroker client, and a started LiveProjection on it."""
    from dashboard.projection import LiveProjection
    from engine.queue.memory import MemoryBroker

    broker = MemoryBroker()
    queue = broker.client("node-1")
    node = TwinNode(queue=queue, company=company)
    projection = LiveProjection(node)
    await projection.start()
    node.projection = projection

    async def publish(event: Event) -> Event:
        return await queue.publish(topics.event_subject(event.type), event)

    node.publish = publish
    try:
        yield node
    finally:
        await projection.stop(False)
        await queue.close()
