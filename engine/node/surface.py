"""The node's HTTP surface: the site's ASGI application, wrapped for the node that serves it
(seed 002, "Probes", "The listener comes up before the boot does", "Exposing webhooks without
the admin API"; DESIGN.md, "The node is handed down").

From the outside in:
  PublicListener  the api.public socket's surface: webhooks only, the same 404 for the rest;
  ProbeGate       /health and /ready from the node's state; every other request gated by phase;
  HandOver        puts the node in the request's scope under SCOPE_KEY, where the apps read it
                  through their own Protocol of the node (notify.node, seats.node, dashboard.node);
  the site        crewlet_site's ASGI application (Django, the webhook edge, /ws/stream).

`surface(node, application)` builds that; `is_route(path)` says which paths the site serves, so
a starting node answers 503 for those and 404 for the rest, as it will once serving.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from django.urls import Resolver404, resolve

from engine.node.probes import DRAINING, PREPARING, RECOVERING, STOPPED, NodeState, ProbeGate
from notify import edge
from notify.asgi import PREFIX, WebhookEdge, drain, not_found, respond

if TYPE_CHECKING:
    from engine.node.process import Node

# The key the apps read the node under (docs/architecture.md, "The hand-over"); each app's
# node module names the same key, and tests/node/test_surface.py holds them to it.
SCOPE_KEY = "crewlet.node"

ASGIApp = Callable[..., Any]


def node_in(scope: dict[str, Any]) -> "Node | None":
    """The node a request's scope carries (the engine's own routes and admin read it so)."""
    return scope.get(SCOPE_KEY)


class HandOver:
    """ASGI: every request reaches the site with the node in its scope."""

    def __init__(self, app: ASGIApp, node: Any) -> None:
        self.app = app
        self.node = node

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] in ("http", "websocket"):
            scope = {**scope, SCOPE_KEY: self.node}
        return await self.app(scope, receive, send)


class PublicListener:
    """ASGI: what the api.public socket serves, told apart by the local port a request came in on.

    A request that arrived on that port gets the webhook routes, behind the same phase gate,
    and every other path the 404 a path nothing serves gets -- no probe, no hint that an admin
    port exists; every other request goes on to `app` unchanged."""

    def __init__(self, app: ASGIApp, port: int, state: NodeState, webhooks: ASGIApp) -> None:
        self.app = app
        self.port = port
        self.state = state
        self.webhooks = webhooks  # the webhook edge alone, the node handed over to it

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "lifespan" or (scope.get("server") or (None, None))[1] != self.port:
            return await self.app(scope, receive, send)
        if scope["type"] == "websocket":
            await receive()
            await send({"type": "websocket.close", "code": 1008})
            return
        if not scope.get("path", "").startswith(PREFIX) or not self.state.ingress:
            return await not_found(scope, receive, send)
        phase = self.state.phase
        if phase in (RECOVERING, PREPARING, DRAINING, STOPPED):
            await drain(receive)
            why = "starting: the node is not serving yet" if phase in (RECOVERING, PREPARING) else \
                "draining: this node takes no new deliveries"
            return await respond(send, edge.refuse(503, why))
        return await self.webhooks(scope, receive, send)


def surface(node: "Node", application: ASGIApp, public_port: int | None = None) -> ASGIApp:
    """The node's ASGI application around the site's; see the module docstring."""
    site = HandOver(application, node)
    app: ASGIApp = ProbeGate(site, node.state, is_route)
    if public_port is not None:
        app = PublicListener(app, public_port, node.state, HandOver(WebhookEdge(not_found), node))
    return app


def is_route(path: str) -> bool:
    """Whether the node serves `path` once it is serving (a starting node answers 503 for these)."""
    from dashboard.routing import websocket_urlpatterns

    if path.startswith("/ws/"):
        return any(r.pattern.match(path.lstrip("/")) for r in websocket_urlpatterns)
    try:
        resolve(path)
        return True
    except Resolver404:
        return False
