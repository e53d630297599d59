"""The webhook edge as an ASGI layer in front of Django (seed 002, "Exposing webhooks without the
admin API": the routes an outside party calls "authenticate by a provider signature ... rather
than by a person's or a token's credential", so nothing Django's request cycle adds -- sessions,
CSRF, the auth middleware, a thread per request for its signals -- serves them).

`WebhookEdge(app)` answers `POST /webhooks/{source}` itself through `notify.edge.receive` and
hands every other request to `app` unchanged. The ninja route in `notify.api` answers the same
path the same way when the layer is not mounted, so the surface is one whatever the wiring:

    # crewlet_site/asgi.py
    application = ProtocolTypeRouter({"http": WebhookEdge(django_app), ...})

The probe gate stays outermost, so a starting or draining node still answers 503 + Retry-After.

`PublicListener(app, port, state)` is the `api.public` socket's surface (seed 002, "Exposing
webhooks without the admin API"): a request that arrived on that port gets the webhook routes,
behind the same phase gate, and every other path the 404 a path nothing serves gets -- no
probe, no hint that an admin port exists; every other request goes on to `app` unchanged.
"""
from __future__ import annotations

import json
import logging
from typing import Any

from engine import runtime
from engine.probes import DRAINING, PREPARING, RECOVERING, STOPPED
from notify import edge
from notify.sources.base import MAX_BODY_BYTES

PREFIX = "/webhooks/"
# An oversized or unwanted body is read and dropped up to this much before the answer, so the
# sender sees the answer (413, 404, 503); a larger one has its connection closed instead.
DRAIN_LIMIT_BYTES = 2 * MAX_BODY_BYTES

log = logging.getLogger("notify.asgi")


class WebhookEdge:
    """ASGI: webhook deliveries here, everything else to the wrapped application."""

    is_webhook_edge = True

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        name = path[len(PREFIX):] if path.startswith(PREFIX) else ""
        if not name or "/" in name.rstrip("/") or scope.get("method") != "POST":
            return await self.app(scope, receive, send)
        try:
            answer = await self._answer(scope, receive, name.rstrip("/"))
        except Exception:  # a bug answers 500 and is logged; it never takes the node down
            log.exception("webhook_unhandled_error", extra={"path": scope.get("path", "")})
            answer = edge.Answer(500, {"detail": "internal error; the node logged it"})
        await _respond(send, answer)

    async def _answer(self, scope, receive, name: str) -> edge.Answer:
        node = runtime.current()
        if node is None:
            return edge.refuse(503, "starting: this process runs no node yet; retry")
        headers: dict[str, str] = {}
        for raw_name, raw_value in scope.get("headers", []):
            key, value = raw_name.decode("latin-1").lower(), raw_value.decode("latin-1")
            headers[key] = f"{headers[key]}, {value}" if key in headers else value
        try:
            length = int(headers.get("content-length") or 0)
        except ValueError:
            length = 0
        body = await _read(receive, MAX_BODY_BYTES) if length <= DRAIN_LIMIT_BYTES else None
        server = scope.get("server") or (None, None)
        return await edge.receive(node, name, headers, body, content_length=length, listener_port=server[1])


async def _read(receive, limit: int) -> bytes | None:
    """The request body, or None once it passes `limit`. An oversized body is still read (and
    not kept) up to DRAIN_LIMIT_BYTES, so its sender is reading when the 413 comes rather than
    writing into a closed connection; past that the server closes it."""
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return b"".join(chunks) if size <= limit else None
        chunk = message.get("body", b"")
        size += len(chunk)
        if size <= limit:
            chunks.append(chunk)
        else:
            chunks.clear()
        if not message.get("more_body") or size > DRAIN_LIMIT_BYTES:
            return b"".join(chunks) if size <= limit else None


class PublicListener:
    """ASGI: what the api.public socket serves, told apart by the local port a request came in on."""

    def __init__(self, app: Any, port: int, state: Any) -> None:
        self.app = app
        self.port = port
        self.state = state
        self.edge = WebhookEdge(_not_found)

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "lifespan" or (scope.get("server") or (None, None))[1] != self.port:
            return await self.app(scope, receive, send)
        if scope["type"] == "websocket":
            await receive()
            await send({"type": "websocket.close", "code": 1008})
            return
        if not scope.get("path", "").startswith(PREFIX) or not self.state.ingress:
            return await _not_found(scope, receive, send)
        phase = self.state.phase
        if phase in (RECOVERING, PREPARING, DRAINING, STOPPED):
            await _drain(receive)
            why = "starting: the node is not serving yet" if phase in (RECOVERING, PREPARING) else \
                "draining: this node takes no new deliveries"
            return await _respond(send, edge.refuse(503, why))
        return await self.edge(scope, receive, send)


async def _not_found(scope, receive, send) -> None:
    """The answer to a path nothing serves, the same whatever the path names."""
    await _drain(receive)
    await _respond(send, edge.Answer(404, {"detail": f"not found: {scope.get('path', '')}"}))


async def _drain(receive) -> None:
    """Read a body that is answered without it (up to DRAIN_LIMIT_BYTES; see `_read`)."""
    size = 0
    while True:
        message = await receive()
        size += len(message.get("body", b""))
        if message["type"] != "http.request" or not message.get("more_body") or size > DRAIN_LIMIT_BYTES:
            return


async def _respond(send, answer: edge.Answer) -> None:
    body = json.dumps(answer.body).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    headers += [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in answer.headers.items()]
    await send({"type": "http.response.start", "status": answer.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
