"""What the seat-host tests share: both queue backends, a `seats.node.SeatsNode` carrying the
queue, the coordination twin and the company, a turn engine whose every turn the test scripts,
and a record of the events the host published. Fixtures are imported by the test modules."""
from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Callable

import pytest
import yaml

from engine.config.company import Company, parse_company
from engine.coord.leases import LeaseManager
from engine.coord.local import LocalCoord
from engine.queue import topics
from events.envelope import Event, new
from events.tracing import trace_of
from events.types.notification import ExternalNotification
from seats.budgets import Budgets
from seats.pauses import PauseBook
from seats.runtime import SeatRuntime
from seats.turn import TurnResult
from tests.queue.waiting import eventually
from tests.queue.conftest import backend  # noqa: F401  (the queue suite's fixture: both backends)

EPOCH = datetime(2025, 1, 1, tzinfo=timezone.utc)
SCRIPTED = {"name": "local", "kind": "scripted", "reply": "ok"}


def company(*, providers: bool = True, alice_budget: dict | None = None, window: int = 0, max_batch: int = 20,
            agents: tuple[str, ...] = ("alice", "bob", "carol"), name: str = "nimbus",
            roleless: tuple[str, ...] = ()) -> Company:
    """A company with one human (maya) and agent seats (engineers, but those `roleless` names,
    which have no role); knobs and budgets as asked."""
    seats: list[dict] = [{"handle": "maya", "kind": "human", "role": "founder"}]
    for handle in agents:
        seat: dict = {"handle": handle, "kind": "agent"} if handle in roleless else {"handle": handle, "kind": "agent", "role": "engineer"}
        if handle == "alice" and alice_budget:
            seat["token_budget"] = alice_budget
        seats.append(seat)
    doc = {"name": name, "org": {"seats": seats}, "notification_coalesce_window_seconds": window,
           "notification_coalesce_max_batch": max_batch, "providers": {"llm": [SCRIPTED] if providers else []}}
    return parse_company(yaml.safe_dump(doc), env={})


def mail(label: str, *, key: str | None = None, at: float | None = None, handle: str = "alice") -> Event:
    """An inbound notification for `handle` whose body is `label`; `key` its partition key."""
    payload = {"partition_key": key} if key else {}
    stamp = {} if at is None else {"timestamp": EPOCH + timedelta(seconds=at)}
    return new(ExternalNotification(agent_handle=handle, body=label, sender="dana", conversation_identity=key or ""),
               trace_of(), source="slack", payload=payload, **stamp)


def labels(events: list[Event]) -> list[str]:
    return [str(e.get("body")) for e in events]


@dataclass
class FakeNode:
    """A `seats.node.SeatsNode` over the twins (the engine's Node is one in a process)."""

    queue: Any
    coord: Any
    company: Company | None
    node_id: str = "node-a"
    max_concurrent: int = 8
    sweep_seconds: float = 0.2
    stopping: bool = False
    seat_runtime: Any = None
    leases: Any = None
    horizon_hours: float = 720.0   # what the node's history services read (engine.node.services)
    store_reads: Any = None
    store_writes: Any = None

    def __post_init__(self) -> None:
        self.leases = self.leases or LeaseManager(self.coord, self.node_id, ttl=30)
        self.pauses = PauseBook(self.coord)
        self.budgets = Budgets(self.coord)

    async def ensure_mailboxes(self) -> None:
        for seat in self.company.agent_seats():
            await self.queue.ensure_subscription(topics.agent_inbox(seat.handle), topics.inbox_group(seat.handle))
            await self.queue.ensure_subscription(topics.agent_control(seat.handle), topics.control_group(seat.handle))

    async def apply(self, company: Company) -> None:
        """What the node does with a new revision: mailboxes first, then the seat hosts."""
        self.company = company
        await self.ensure_mailboxes()
        if self.seat_runtime is not None:
            await self.seat_runtime.on_company(company)


class ScriptedTurns:
    """A turn engine the test drives. `decide(request)` returns an outcome (default completed),
    a TurnResult, or raises; `gate`, when set, holds every turn until it opens; a turn of a seat
    paused with stop_running ends `stopped` while it waits."""

    def __init__(self, decide: Callable[[Any], Any] | None = None) -> None:
        self.decide = decide or (lambda request: "completed")
        self.requests: list[Any] = []
        self.outcomes: list[str] = []
        self.gate: asyncio.Event | None = None
        self.running = 0
        self.most_at_once = 0

    def hold(self) -> asyncio.Event:
        self.gate = asyncio.Event()
        return self.gate

    def turns_of(self, handle: str = "alice") -> list[list[str]]:
        """Each turn's constituents' labels, in the order the turns began."""
        return [labels(r.constituents) for r in self.requests if r.seat.handle == handle]

    async def run(self, request) -> TurnResult:
        self.requests.append(request)
        self.running += 1
        self.most_at_once = max(self.most_at_once, self.running)
        try:
            outcome = "completed"
            if self.gate is not None:
                while not self.gate.is_set():
                    if request.stop_requested():
                        outcome = "stopped"
                        break
                    await asyncio.sleep(0.01)
            if outcome == "completed":
                decided = self.decide(request)
                if isinstance(decided, TurnResult):
                    self.outcomes.append(decided.outcome)
                    return decided
                outcome = decided or "completed"
            self.outcomes.append(outcome)
            return TurnResult(outcome=outcome, turn_id=request.turn_id, rounds=1, tokens_in=1, tokens_out=1,
                              duration_ms=1, error="" if outcome == "completed" else f"scripted {outcome}")
        finally:
            self.running -= 1


class Published:
    """Every event a client published on crewlet.events.*, by type."""

    def __init__(self, queue) -> None:
        self.events: list[Event] = []
        queue.add_publish_listener(self._heard)

    def _heard(self, topic: str, event: Event) -> None:
        if topics.event_type_of(topic):
            self.events.append(event)

    def of(self, event_type: str) -> list[Event]:
        return [e for e in self.events if e.type == event_type]


@dataclass
class Rig:
    """One node's seat runtime on a backend, with the things a case inspects."""

    backend: Any
    node: FakeNode
    runtime: SeatRuntime
    turns: ScriptedTurns
    published: Published

    @property
    def queue(self):
        return self.node.queue

    async def publish(self, *events: Event, handle: str = "alice") -> None:
        for event in events:
            await self.queue.publish(topics.agent_inbox(handle), event)

    async def pending(self, handle: str = "alice") -> int:
        return await self.queue.pending(topics.agent_inbox(handle), topics.inbox_group(handle))

    def host(self, handle: str = "alice"):
        return self.runtime.hosts[handle]


async def make_rig(backend, *, node_id: str = "node-a", the_company: Company | None = None, max_concurrent: int = 8,
                   decide=None, coord=None, turns: ScriptedTurns | None = None) -> Rig:
    """A runtime on a new client of `backend`; nothing is hosted until `runtime.on_seat_acquired`."""
    queue = await backend.client(node_id)
    node = FakeNode(queue=queue, coord=coord or LocalCoord(), company=the_company or company(),
                    node_id=node_id, max_concurrent=max_concurrent)
    await node.ensure_mailboxes()
    turns = turns or ScriptedTurns(decide)
    runtime = SeatRuntime(node, turns=turns, poll_seconds=0.2)
    node.seat_runtime = runtime
    published = Published(queue)
    await runtime.start()
    return Rig(backend, node, runtime, turns, published)


@pytest.fixture
async def rig(backend):
    made = await make_rig(backend)
    try:
        yield made
    finally:
        await made.runtime.stop(cut=True)


async def first_of_two_conversations_running(rig: Rig) -> asyncio.Event:
    """Two conversations on alice's inbox, hosted only once both wait, so one drain holds both:
    the first conversation's turn is running (held until the returned gate opens) and the
    second waits behind it in the host's hands."""
    gate = rig.turns.hold()
    await rig.publish(mail("first", key="slack:C1:1", at=0), mail("second", key="slack:C2:1", at=1))
    await rig.runtime.on_seat_acquired("alice", None)
    await eventually(lambda: rig.turns.running == 1, message="the first conversation's turn")
    assert rig.turns.turns_of() == [["first"]]
    return gate

