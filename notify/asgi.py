"""The webhook edge as an ASGI layer in front of Django (seed 002, "Exposing webhooks without the
admin API": the routes an outside party calls "authenticate by a provider signature ... rather
than by a person's or a token's credential", so nothing Django's request cycle adds -- sessions,
CSRF, the auth middleware, a thread per request for its signals -- serves them).

`WebhookEdge(app)` answers `POST /webhooks/{source}` itself through `notify.edge.receive` and
hands every other request to `app` unchanged. It is the one path to the webhooks: mounted in
crewlet_site/asgi.py, behind the node's own layer (`engine.node.surface`), which puts the node
in the scope and answers 503 + Retry-After while the node starts or drains.

`respond`, `drain` and `not_found` are the layer's plain ASGI answers, shared with the
`api.public` listener the node builds around it.
"""
from __future__ import annotations

import json
import logging
from typing import Any

from notify import edge
from notify.node import node_in
from notify.sources.base import MAX_BODY_BYTES

PREFIX = "/webhooks/"
# An oversized or unwanted body is read and dropped up to this much before the answer, so the
# sender sees the answer (413, 404, 503); a larger one has its connection closed instead.
DRAIN_LIMIT_BYTES = 2 * MAX_BODY_BYTES

log = logging.getLogger("notify.asgi")


class WebhookEdge:
    """ASGI: webhook deliveries here, everything else to the wrapped application."""

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
        await respond(send, answer)

    async def _answer(self, scope, receive, name: str) -> edge.Answer:
        node = node_in(scope)
        if node is None:
            await drain(receive)
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


async def not_found(scope, receive, send) -> None:
    """The answer to a path nothing serves, the same whatever the path names."""
    await drain(receive)
    await respond(send, edge.Answer(404, {"detail": f"not found: {scope.get('path', '')}"}))


async def drain(receive) -> None:
    """Read a body that is answered without it (up to DRAIN_LIMIT_BYTES; see `_read`)."""
    size = 0
    while True:
        message = await receive()
        size += len(message.get("body", b""))
        if message["type"] != "http.request" or not message.get("more_body") or size > DRAIN_LIMIT_BYTES:
            return


async def respond(send, answer: edge.Answer) -> None:
    body = json.dumps(answer.body).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    headers += [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in answer.headers.items()]
    await send({"type": "http.response.start", "status": answer.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
