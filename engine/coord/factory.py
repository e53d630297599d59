"""The one way to get a coordination store (seed 002, "Replica count": "A fleet needs shared
coordination"; "The coordination KV is not a second address: it lives on the stream's own
broker"; DESIGN.md, "Configuration").

`coordination.type: local` is the in-process twin; `embedded-kv` is NATS KV on the stream's
own broker, dialled at the URL and token the node's stream connection uses (an embedded
broker's per-boot token never leaves the process, so the caller hands it over). Callers get a
`CoordStore` and cannot tell which one runs.

The node config is read defensively (attributes or mapping keys), so this works with the
decoded Tier A document and with a plain dict alike.
"""
from __future__ import annotations

import time
from typing import Any

from engine.coord.contract import CoordError, CoordStore
from engine.coord.leases import LEASE_TTL_SECONDS

COORDINATION_TYPES = ("local", "embedded-kv")


def _field(obj: Any, name: str, default: Any = None) -> Any:
    if obj is None:
        return default
    if isinstance(obj, dict):
        return obj.get(name, default)
    return getattr(obj, name, default)


def coordination_type(node_config: Any) -> str:
    """`coordination.type`, "local" when unset."""
    return _field(_field(node_config, "coordination"), "type") or "local"


def lease_ttl_seconds(node_config: Any) -> float:
    """`coordination.lease_ttl_seconds`, 45 when unset."""
    ttl = _field(_field(node_config, "coordination"), "lease_ttl_seconds")
    return float(ttl) if ttl else LEASE_TTL_SECONDS


def stream_replicas(node_config: Any) -> int:
    """`stream.replicas`: one count covers the streams and the coordination buckets."""
    return int(_field(_field(node_config, "stream"), "replicas") or 1)


async def open_coord(node_config: Any, *, url: str | None = None, token: str | None = None,
                     clock=time.time, node_id: str | None = None) -> CoordStore:
    """The coordination store `coordination.type` names. `embedded-kv` needs `url` (and the
    broker's `token`, if it has one): the stream's own broker."""
    kind = coordination_type(node_config)
    if kind == "local":
        from engine.coord.local import LocalCoord

        return LocalCoord(clock=clock)
    if kind == "embedded-kv":
        if not url:
            raise CoordError("coordination.type: embedded-kv rides the stream's own broker; "
                             "open it with the broker's client URL (the stream is not up yet?)")
        from engine.coord.natskv import NatsKVCoord

        node_id = node_id or _field(_field(node_config, "node"), "id") or "node"
        return await NatsKVCoord.connect(url, token, name=f"crewlet-coord-{node_id}",
                                         replicas=stream_replicas(node_config))
    raise CoordError(f"coordination.type: {kind!r} is not one of {', '.join(COORDINATION_TYPES)}")
