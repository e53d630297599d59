"""`/ws/stream`: one WebSocket per dashboard tab (seed 000, "Broadcast Streams": "each connected
tab is one ephemeral consumer", fanned out by the in-process stream; seed 002, "Querying
events": the Event log reads over "the same /ws/stream query channel the REST routes use").

Frames the server sends, each a JSON object with a `type` (a message carries one frame, or,
when several waited for the socket, a JSON array of them in order):
  snapshot  the live projection as of the moment this socket attached (seats, the activity
            feed, the day's turns and tokens, and what the projection does not know);
  event     one event as it happened (`fed`: whether it belongs in the activity feed), with
            the seat rows and totals it changed;
  seats     seat rows that changed without an event (the seat leases, a new revision);
  gap       {missed: n}: this socket fell behind and n frames were dropped for it
            (`where: "projection"` when the node's own subscription lost them);
  answer / error   {id, query, result} or {id, query, status, detail} for a query;
  closing   the node is draining; reconnect (to another node).

A query is `{"id": .., "query": "events_page"|"event"|"trace"|"seat"|"seats"|"budgets",
"args": {..}}`, answered by the function its REST route calls (dashboard.reads), at most
MAX_IN_FLIGHT at once per socket: a fifth waits for a slot.

Who may connect: a signed-in Django user (the session cookie, same-origin only), or a
bearer token from `api.auth.tokens` with the read or admin grant, offered as the two
subprotocols `crewlet.bearer, <token>` or as `?token=` for scripts. Anyone else is refused
before the handshake completes.
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import Any
from urllib.parse import parse_qs, urlsplit

from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings

from dashboard import reads
from dashboard.errors import QueryFailed
from dashboard.node import node_in
from dashboard.outbox import OUTBOX_SIZE, Outbox, encode
from engine.config.tokens import READ_GRANTS, grants_of, match_token

log = logging.getLogger("dashboard.stream")

MAX_IN_FLIGHT = 4       # the bound: a tab's queries never crowd out another tab's
MAX_WAITING = 32        # queued behind those four; more is a client that never reads answers
BEARER_PROTOCOL = "crewlet.bearer"


def _header(scope: dict, name: bytes) -> str:
    for key, value in scope.get("headers") or ():
        if key.lower() == name:
            return value.decode("latin-1")
    return ""


def same_origin(scope: dict) -> bool:
    """A browser's socket carries its page's Origin: a session is honoured only from this site,
    so another site's page cannot ride a signed-in operator's cookie. No Origin: not a browser."""
    origin = _header(scope, b"origin")
    if not origin:
        return True
    return urlsplit(origin).netloc.lower() == _header(scope, b"host").lower()


def _tokens() -> list:
    """The API tokens of this process's Tier A file (`api.auth.tokens`), as the REST routes use."""
    config = settings.NODE.config
    return list(config.api.auth.tokens) if config is not None else []


def authenticate(scope: dict) -> tuple[str | None, str | None]:
    """(who, the subprotocol to accept) for a socket's scope; (None, None) when refused."""
    offered = list(scope.get("subprotocols") or ())
    token, protocol = None, None
    if BEARER_PROTOCOL in offered:
        rest = [p for p in offered if p != BEARER_PROTOCOL]
        token, protocol = (rest[0] if rest else ""), BEARER_PROTOCOL
    if token is None:
        query = parse_qs((scope.get("query_string") or b"").decode("latin-1"))
        token = (query.get("token") or [None])[0]
    if token is not None:
        entry = match_token(_tokens(), token)
        if entry is None or not grants_of(entry) & READ_GRANTS:
            return None, None
        return f"token:{entry.id}", protocol
    user = scope.get("user")
    if user is not None and getattr(user, "is_authenticated", False) and same_origin(scope):
        return f"user:{user.get_username()}", None
    return None, None


class StreamConsumer(AsyncJsonWebsocketConsumer):
    """One tab: the projection's snapshot, then its live frames, and answers to its queries."""

    outbox_size = OUTBOX_SIZE

    def __init__(self, *args: Any, outbox_size: int | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if outbox_size is not None:  # `StreamConsumer.as_asgi(outbox_size=...)`
            self.outbox_size = outbox_size

    async def connect(self) -> None:
        self.actor, protocol = authenticate(self.scope)
        self.outbox: Outbox | None = None
        self.pump: asyncio.Task | None = None
        self.queries: set[asyncio.Task] = set()
        self.slots = asyncio.Semaphore(MAX_IN_FLIGHT)
        self.in_flight = 0
        if self.actor is None:
            log.info("stream_refused", extra={"path": self.scope.get("path", "")})
            await self.close()  # before accept: the handshake is refused (403)
            return
        await self.accept(subprotocol=protocol)
        self.node = node_in(self.scope)
        source = self.node.projection if self.node is not None else None
        if source is None:
            await self.send_json({"type": "unavailable", "detail": "this node runs no live projection (no ingress role, or not serving yet)"})
            await self.close(code=1013)
            return
        self.source = source
        self.outbox = Outbox(self.outbox_size)
        snapshot = source.attach(self.outbox)  # attached and read in one step: no event between
        await self.send(text_data=snapshot)
        self.pump = asyncio.create_task(self._pump(), name="ws-stream-pump")

    async def _pump(self) -> None:
        try:
            while True:
                await self.send(text_data=await self.outbox.next_message())
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the socket went away under a send
            log.debug("stream_send_failed", extra={"error": str(exc)})

    async def disconnect(self, code: int) -> None:
        if self.outbox is not None:
            self.source.detach(self.outbox)
        tasks = [t for t in (self.pump, *self.queries) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task

    # -- queries --------------------------------------------------------------------------
    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None, **kwargs: Any) -> None:
        try:
            content = json.loads(text_data or (bytes_data or b"").decode("utf-8", "replace"))
        except ValueError:
            await self.send_json({"type": "error", "id": None, "status": 400, "detail": "frame: expected a JSON object"})
            return
        except RecursionError:  # nested past the JSON reader's bound: answered, the socket kept
            log.info("stream_frame_refused", extra={"why": "too deep"})
            await self.send_json({"type": "error", "id": None, "status": 400,
                                  "detail": "frame: nested too deep; a query is a flat JSON object"})
            return
        await self.receive_json(content)

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        if not isinstance(content, dict) or not isinstance(content.get("query"), str):
            ident = content.get("id") if isinstance(content, dict) else None
            await self.send_json({"type": "error", "id": ident, "status": 400, "detail": "query: expected {\"id\", \"query\", \"args\"}"})
            return
        ident, name = content.get("id"), content["query"]
        if len(self.queries) >= MAX_IN_FLIGHT + MAX_WAITING:
            await self._error(ident, name, 429, f"query: {len(self.queries)} queries are outstanding on this socket; wait for their answers")
            return
        task = asyncio.create_task(self._answer(ident, name, content.get("args")), name=f"ws-query:{name}")
        self.queries.add(task)
        task.add_done_callback(self.queries.discard)

    async def _answer(self, ident: Any, name: str, args: Any) -> None:
        async with self.slots:  # at most MAX_IN_FLIGHT run; the rest wait here, in order
            self.in_flight += 1
            try:
                result = await reads.answer(name, args, self.node)
            except QueryFailed as exc:
                await self._error(ident, name, exc.status, exc.detail)
                return
            finally:
                self.in_flight -= 1
        await self._send_quietly(encode({"type": "answer", "id": ident, "query": name, "result": result}))

    async def _error(self, ident: Any, name: str, status: int, detail: str) -> None:
        log.info("stream_query_refused", extra={"query": name, "status": status})
        await self._send_quietly(encode({"type": "error", "id": ident, "query": name, "status": status, "detail": detail}))

    async def _send_quietly(self, text: str) -> None:
        """An answer for a tab that went away while its query ran (a page left mid-read) has
        nobody to reach: dropped, as the pump drops a frame, never a traceback in the log."""
        try:
            await self.send(text_data=text)
        except Exception as exc:
            log.debug("stream_send_failed", extra={"error": str(exc)})
