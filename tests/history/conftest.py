"""The fleet's history on real parts: several simulated nodes, each with its own SQLite store
(the suite's `default`, `peer1` and `peer2` databases), on one broker -- the memory twin or a
real nats-server -- and one coordination store (the twin, or NATS KV on that server)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, AsyncIterator

import pytest

from engine.coord.local import LocalCoord
from engine.history.eventfan import HistoryAnswerer, QueueTransport
from engine.history.reads import StoreThreads
from events.fleet import FleetReads
from tests.queue.conftest import FAST, JetStreamBackend, MemoryBackend

STORES = ["default", "peer1", "peer2"]
fleet_db = pytest.mark.django_db(transaction=True, databases=STORES)


class Fleet:
    """Clients and coordination stores on one broker; `node(id, using)` is one more node."""

    def __init__(self, backend) -> None:
        self.backend = backend
        self.coord_twin = LocalCoord() if backend.name == "memory" else None
        self.coords: list[Any] = []
        self.threads: list[StoreThreads] = []
        self.answerers: list[HistoryAnswerer] = []

    async def queue(self, node_id: str):
        return await self.backend.client(node_id)

    async def coord(self, node_id: str):
        if self.coord_twin is not None:
            return self.coord_twin
        from engine.coord.natskv import NatsKVCoord

        broker = self.backend.broker
        store = await NatsKVCoord.connect(broker.client_url, broker.token, name=f"coord-{node_id}")
        self.coords.append(store)
        return store

    def store_threads(self, name: str) -> StoreThreads:
        threads = StoreThreads(2, name)
        self.threads.append(threads)
        return threads

    async def answering(self, node_id: str, using: str, *, budget: int | None = None, queue=None) -> "Node":
        """A node that answers history questions from its store `using`."""
        queue = queue or await self.queue(node_id)
        kwargs = {"budget": budget} if budget is not None else {}
        answerer = HistoryAnswerer(queue=queue, node_id=node_id, horizon_hours=720, run_read=self.store_threads(node_id),
                                   using=using, **kwargs)
        await answerer.start()
        self.answerers.append(answerer)
        return Node(node_id, using, queue)

    async def asker(self, node_id: str, using: str, roster: list[str], **kwargs) -> FleetReads:
        """A node reading the fleet: its own store `using`, every node in `roster` over the queue."""
        queue = await self.queue(node_id)

        async def live() -> list[str]:
            return list(roster)

        return FleetReads(node_id=node_id, transport=QueueTransport(queue), roster=live, run_read=self.store_threads(node_id),
                          using=using, **kwargs)

    async def close(self) -> None:
        for answerer in self.answerers:
            await answerer.stop(False)
        for store in self.coords:
            await store.close()
        for threads in self.threads:
            threads.close()


@dataclass
class Node:
    node_id: str
    using: str
    queue: Any
    extra: dict = field(default_factory=dict)


@pytest.fixture(params=["memory", "jetstream"])
async def fleet(request, tmp_path) -> AsyncIterator[Fleet]:
    if request.param == "memory":
        backend = MemoryBackend(FAST)
    else:
        backend = JetStreamBackend(FAST, tmp_path / "stream")
        await backend.start()
    made = Fleet(backend)
    try:
        yield made
    finally:
        await made.close()
        await backend.close()
