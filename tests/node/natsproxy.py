"""A TCP proxy in front of a NATS server that reads what clients send, for process tests that need
a node to die at an exact point of the wire: between its last write and the acknowledgement
that would have settled a message.

Everything passes through both ways untouched, except this: once `hold_ack(durable)` is armed,
the first acknowledgement of a message of that JetStream consumer (a publish to the message's
`$JS.ACK...` reply subject, carrying no body or `+ACK`; in-progress `+WPI`, `-NAK` and `+TERM`
pass) is kept back, and the connection that sent it is cut off from the server from that
byte on -- as if the node had died the instant before the ack left it. `acks_held` then says
so, and a test SIGKILLs the node knowing exactly what the broker has and has not been told.

The proxy binds 127.0.0.1 port 0 itself and reports the port it got (no port race).
"""
from __future__ import annotations

import asyncio
import threading

from tests.node.harness import eventually

ACK_BODIES = (b"", b"+ACK")


class NatsProxy:
    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.port = 0
        self.held: list[str] = []            # the ack subjects kept back
        self._durable: str | None = None
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, name="nats-proxy", daemon=True)

    def start(self) -> "NatsProxy":
        self._thread.start()
        eventually(self._ready.is_set, 30, "the NATS proxy to listen")
        return self

    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def hold_ack(self, durable: str) -> None:
        """Keep back the next final acknowledgement on the consumer `durable`."""
        with self._lock:
            self._durable = durable

    def acks_held(self) -> list[str]:
        with self._lock:
            return list(self.held)

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    # -- the proxy's own loop ------------------------------------------------------------------
    def _run(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._loop.run_until_complete(self._serve())

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        server = await asyncio.start_server(self._connection, "127.0.0.1", 0)
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        async with server:
            await self._stop.wait()

    async def _connection(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        try:
            server_reader, server_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        except OSError:
            client_writer.close()
            return
        down = asyncio.create_task(_pipe(server_reader, client_writer))
        try:
            await self._client_to_server(client_reader, server_writer)
        finally:
            down.cancel()
            for writer in (server_writer, client_writer):
                writer.close()

    async def _client_to_server(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Forward the client's protocol operation by operation, keeping back an armed ack."""
        while True:
            try:
                line = await reader.readuntil(b"\r\n")
            except (asyncio.IncompleteReadError, ConnectionError):
                return
            op = line.split(b" ", 1)[0].upper()
            body = b""
            if op in (b"PUB", b"HPUB"):
                fields = line[:-2].split(b" ")
                total = int(fields[-1])
                try:
                    body = await reader.readexactly(total + 2)
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                headers = int(fields[-2]) if op == b"HPUB" else 0
                if self._keep_back(fields[1].decode(), body[headers:total]):
                    # Cut off: nothing this connection sends from here reaches the server.
                    while await reader.read(65536):
                        pass
                    return
            writer.write(line + body)
            await writer.drain()

    def _keep_back(self, subject: str, payload: bytes) -> bool:
        with self._lock:
            durable = self._durable
            if durable is None or not subject.startswith("$JS.ACK.") or payload not in ACK_BODIES:
                return False
            if durable not in subject.split("."):
                return False
            self._durable = None
            self.held.append(subject)
            return True


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while chunk := await reader.read(65536):
            writer.write(chunk)
            await writer.drain()
    except (ConnectionError, asyncio.CancelledError):
        pass
