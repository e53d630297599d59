"""The node's phases and its probes (seed 002, "Probes", "While a node is starting",
"During a drain").

The listener binds before the boot, so the probes answer from the first moment:

| phase       | /health                                          | /ready                      | other routes         |
|-------------|--------------------------------------------------|-----------------------------|----------------------|
| recovering  | 503 {"status":"starting","phase":"recovering"}   | 503 reason "starting"       | 503 + Retry-After    |
| preparing   | 200 {"status":"starting","phase":"preparing"}    | 503 reason "starting"       | 503 + Retry-After    |
| serving     | 200 with node id, version, roles, seats, broker  | 200, or 503 with a reason   | served               |
| draining    | 200 (liveness holds through a drain)             | 503 reason "draining"       | new work: 503        |

`ProbeGate` is an ASGI wrapper around the site's application that answers the probes itself
(no Django, no database) and gates every other request on the phase.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Awaitable, Callable

VERSION = "0.1.0"
RETRY_AFTER_SECONDS = 5

RECOVERING, PREPARING, SERVING, DRAINING, STOPPED = "recovering", "preparing", "serving", "draining", "stopped"
_SAFE_METHODS = {"GET", "HEAD", "OPTIONS"}


@dataclass
class NodeState:
    """What the probes read. The node writes it; the gate only reads."""

    node_id: str
    roles: tuple[str, ...]
    phase: str = RECOVERING
    started_at: float = field(default_factory=time.time)
    configured: bool = False          # an active company revision has been applied
    broker_link: str = "down"         # "up" | "down": the queue's connection answers (engine.node.links)
    coordination_link: str = "down"   # "up" | "down": the records' connection answers
    presence_held: bool = False
    seats: tuple[str, ...] = ()
    revision: int | None = None
    public_port: int | None = None
    tool_servers: tuple[dict, ...] = ()   # each MCP tool server's state (seats.tools.servers fills it)

    @property
    def ingress(self) -> bool:
        return "ingress" in self.roles

    def link(self, name: str) -> str:
        """"broker" or "coordination": what the last check of that link found."""
        return self.broker_link if name == "broker" else self.coordination_link

    def set_link(self, name: str, value: str) -> None:
        if name == "broker":
            self.broker_link = value
        else:
            self.coordination_link = value

    def health(self) -> tuple[int, dict]:
        if self.phase == RECOVERING:
            return 503, {"status": "starting", "phase": "recovering"}
        if self.phase == PREPARING:
            return 200, {"status": "starting", "phase": "preparing"}
        return 200, {
            "status": "draining" if self.phase == DRAINING else "ok",
            "node": self.node_id,
            "version": VERSION,
            "roles": list(self.roles),
            "seats": list(self.seats),
            "broker": self.broker_link,
            "coordination": self.coordination_link,
            "revision": self.revision,
            "uptime_seconds": round(time.time() - self.started_at, 1),
            "tool_servers": [{k: s.get(k) for k in ("name", "transport", "state", "reason", "tool_count")}
                             for s in self.tool_servers],
        }

    def ready_reason(self) -> str | None:
        """None when ready; else the reason, in the seed's precedence."""
        if self.phase in (RECOVERING, PREPARING):
            return "starting"
        if self.phase in (DRAINING, STOPPED):
            return "draining"
        if not self.configured:
            return "unconfigured"
        if self.broker_link != "up":
            return "broker_link_down"
        if self.coordination_link != "up":
            return "coordination_link_down"
        if not self.presence_held:
            return "presence_lease_not_held"
        return None

    def ready(self) -> tuple[int, dict]:
        reason = self.ready_reason()
        if reason is None:
            return 200, {"status": "ready", "node": self.node_id}
        return 503, {"status": "not_ready", "reason": reason, "node": self.node_id}


async def _send_json(send, status: int, body: dict, headers: list[tuple[bytes, bytes]] | None = None) -> None:
    payload = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode()), *(headers or [])],
        }
    )
    await send({"type": "http.response.body", "body": payload})


async def _drain_body(receive) -> None:
    while True:
        message = await receive()
        if message["type"] != "http.request" or not message.get("more_body"):
            return


class ProbeGate:
    """ASGI app: /health and /ready from NodeState; other requests gated by phase and roles.

    `is_route(path)` says whether the node will serve a path (so a starting node answers 503
    for those and 404 for the rest, as it will once serving).
    """

    def __init__(self, app: Callable[..., Awaitable[None]], state: NodeState, is_route: Callable[[str], bool]) -> None:
        self.app = app
        self.state = state
        self.is_route = is_route

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "lifespan":
            return await self._lifespan(receive, send)
        path = scope.get("path", "")
        if scope["type"] == "http" and path in ("/health", "/ready", "/health/", "/ready/"):
            await _drain_body(receive)
            status, body = self.state.health() if path.startswith("/health") else self.state.ready()
            return await _send_json(send, status, body)
        if not self.state.ingress:
            return await self._refuse(scope, receive, send, 404, {"detail": "not found: this node serves /health and /ready only (no ingress role)"})
        phase = self.state.phase
        if phase in (RECOVERING, PREPARING):
            if self.is_route(path):
                return await self._refuse(scope, receive, send, 503, {"detail": "starting: the node is not serving yet", "status": "starting"}, retry=True)
            return await self._refuse(scope, receive, send, 404, {"detail": f"not found: {path}"})
        if phase in (DRAINING, STOPPED) and (scope["type"] == "websocket" or scope.get("method", "GET") not in _SAFE_METHODS):
            return await self._refuse(scope, receive, send, 503, {"detail": "draining: this node takes no new work", "status": "draining"}, retry=True)
        return await self.app(scope, receive, send)

    async def _refuse(self, scope, receive, send, status: int, body: dict, retry: bool = False) -> None:
        headers = [(b"retry-after", str(RETRY_AFTER_SECONDS).encode())] if retry else []
        if scope["type"] == "websocket":
            await receive()  # websocket.connect
            await send({"type": "websocket.close", "code": 1013 if retry else 1008})
            return
        await _drain_body(receive)
        await _send_json(send, status, body, headers)

    async def _lifespan(self, receive, send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
