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
"""
from __future__ import annotations

import json
from typing import Any

from engine import runtime
from notify import edge
from notify.sources.base import MAX_BODY_BYTES

PREFIX = "/webhooks/"


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
        answer = await self._answer(scope, receive, name.rstrip("/"))
        body = json.dumps(answer.body).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        headers += [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in answer.headers.items()]
        await send({"type": "http.response.start", "status": answer.status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

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
        body = await _read(receive, MAX_BODY_BYTES) if length <= MAX_BODY_BYTES else None
        server = scope.get("server") or (None, None)
        return await edge.receive(node, name, headers, body, content_length=length, listener_port=server[1])


async def _read(receive, limit: int) -> bytes | None:
    """The request body, or None once it passes `limit` (the rest is not kept)."""
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return b"".join(chunks)
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body"):
            return b"".join(chunks)
