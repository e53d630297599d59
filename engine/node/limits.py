"""The listener's limits, enforced where bytes arrive: a request's head (its request line and
headers) has a size and a time to arrive in, a body that stops arriving is cut, and the node
holds a bounded number of connections, refusing the next one at once (README, "Security").

Uvicorn's httptools protocol has no limit of its own on a head: httptools hands a header value
over in pieces and the parser keeps joining them, so fifteen clients each sending a 100 MiB
header held the node's one event loop long enough to lose its presence lease. Nor does it
time out a connection that never finishes its head (`timeout_keep_alive` only runs between
requests), or refuse connections before their head is read (`limit_concurrency` answers 503
only once it is). `GuardedHttpToolsProtocol` adds all three in front of the parser:

  head past MAX_HEAD_BYTES         431, connection closed (the parser never sees the excess)
  head not done in HEAD_SECONDS    408, connection closed
  body silent for BODY_IDLE_SECONDS  connection closed (the app's receive() sees a disconnect)
  past MAX_CONNECTIONS open        503 + Retry-After at once, before anything is read

The figures are sized from `benchmarks/surface.py` (README, "Security").
"""
from __future__ import annotations

import json
import logging
import resource

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

log = logging.getLogger("engine.node.limits")

# 64 KiB: four times what Node.js and nginx's large buffers allow a head, twelve times h11's
# default; every vendor's webhook head is under 4 KiB. Parsed in at most one read of the socket.
MAX_HEAD_BYTES = 64 * 1024
# 10 s for a whole head: a client on a slow link sends one in well under a second; a
# slow-loris one that trickles a byte a second is cut long before it holds a slot for ever.
HEAD_SECONDS = 10.0
# 15 s without a byte of a body the app is waiting for: a stalled upload gives its slot back.
BODY_IDLE_SECONDS = 15.0
# Uvicorn's own default: an idle keep-alive connection is closed after this.
KEEP_ALIVE_SECONDS = 5.0
# 2,048 open connections (HTTP and WebSocket): each idle one costs the loop nothing but a file
# descriptor and about 40 KB; the bound keeps descriptors for the store, the broker and the
# logs (FD_RESERVE) whatever the process's limit, and is lowered to fit a smaller one.
MAX_CONNECTIONS = 2048
FD_RESERVE = 256
RETRY_AFTER_SECONDS = 5

_STATUS = {408: b"Request Timeout", 431: b"Request Header Fields Too Large", 503: b"Service Unavailable"}


def connection_limit(wanted: int = MAX_CONNECTIONS) -> int:
    """MAX_CONNECTIONS, lowered to leave FD_RESERVE descriptors under the process's soft limit."""
    try:
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (OSError, ValueError):  # pragma: no cover - every Linux answers
        return wanted
    if soft == resource.RLIM_INFINITY:
        return wanted
    return max(16, min(wanted, soft - FD_RESERVE))


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    """Uvicorn's httptools protocol with the head, body and connection limits above.

    Class attributes, so the server sets them once (`engine.server`) and a test of a rule can
    shorten its timing on a subclass."""

    max_head_bytes = MAX_HEAD_BYTES
    head_seconds = HEAD_SECONDS
    body_idle_seconds = BODY_IDLE_SECONDS
    max_connections = MAX_CONNECTIONS

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._head_bytes = 0
        self._head_done = False
        self._head_timer = None
        self._body_timer = None
        self._body_seen = 0.0

    # -- the connection -----------------------------------------------------------------
    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        if len(self.connections) > self.max_connections:
            log.warning("connection_refused", extra={"why": "max_connections", "limit": self.max_connections})
            self._answer(503, f"connections: this node holds its maximum of {self.max_connections} open "
                              "connections; retry shortly", retry=True)
            return
        self._arm_head_timer()

    def connection_lost(self, exc) -> None:
        self._cancel_timers()
        super().connection_lost(exc)

    # -- bytes --------------------------------------------------------------------------
    def data_received(self, data: bytes) -> None:
        while data:
            if self._head_done:
                self._body_seen = self.loop.time()
                super().data_received(data)
                return
            if self._head_timer is None:
                self._arm_head_timer()
            room = self.max_head_bytes - self._head_bytes
            piece, data = data[:room], data[room:]
            self._head_bytes += len(piece)
            super().data_received(piece)
            if self.transport.is_closing() or self.transport.get_protocol() is not self:
                return  # answered (400), or upgraded to a WebSocket
            if not self._head_done and self._head_bytes >= self.max_head_bytes:
                log.info("request_refused", extra={"status": 431, "why": "head_too_large", "limit": self.max_head_bytes})
                self._answer(431, f"headers: a request line and its headers are at most {self.max_head_bytes} bytes")
                return

    # -- the parser's callbacks ---------------------------------------------------------
    def on_headers_complete(self) -> None:
        self._head_done = True
        self._cancel(self._head_timer)
        self._head_timer = None
        super().on_headers_complete()
        if self.cycle is not None and not self.transport.is_closing():
            self._body_seen = self.loop.time()
            self._body_timer = self.loop.call_later(self.body_idle_seconds, self._body_idle)

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._cancel(self._body_timer)
        self._body_timer = None
        self._head_done = False  # the next request on this connection has a head of its own
        self._head_bytes = 0

    # -- timers -------------------------------------------------------------------------
    def _arm_head_timer(self) -> None:
        self._cancel(self._head_timer)
        self._head_timer = self.loop.call_later(self.head_seconds, self._head_late)

    def _head_late(self) -> None:
        self._head_timer = None
        if self._head_done or self.transport.is_closing():
            return
        if self._head_bytes == 0 and self.cycle is not None:
            # Idle between requests: the keep-alive timer's business, not a late head.
            self.transport.close()
            return
        log.info("request_refused", extra={"status": 408, "why": "head_timeout", "seconds": self.head_seconds})
        self._answer(408, f"headers: not complete within {self.head_seconds:g} s")

    def _body_idle(self) -> None:
        self._body_timer = None
        cycle = self.cycle
        if cycle is None or cycle.response_complete or not cycle.more_body or self.transport.is_closing():
            return
        silent = self.loop.time() - self._body_seen
        if silent < self.body_idle_seconds:
            self._body_timer = self.loop.call_later(self.body_idle_seconds - silent, self._body_idle)
            return
        log.info("request_refused", extra={"why": "body_idle", "seconds": self.body_idle_seconds})
        self.transport.close()

    def _cancel_timers(self) -> None:
        for timer in (self._head_timer, self._body_timer):
            self._cancel(timer)
        self._head_timer = self._body_timer = None

    @staticmethod
    def _cancel(timer) -> None:
        if timer is not None:
            timer.cancel()

    def _answer(self, status: int, detail: str, retry: bool = False) -> None:
        """Write a JSON refusal straight to the socket and close it (no request cycle runs)."""
        self._cancel_timers()
        body = json.dumps({"detail": detail}).encode()
        head = [b"HTTP/1.1 %d %s" % (status, _STATUS[status]), b"content-type: application/json",
                b"content-length: %d" % len(body), b"connection: close"]
        if retry:
            head.append(b"retry-after: %d" % RETRY_AFTER_SECONDS)
        self.transport.write(b"\r\n".join(head) + b"\r\n\r\n" + body)
        self.transport.close()
