"""The one way to get the coordination stores (seed 002, "Replica count": "A fleet needs shared
coordination ... The slot governs the leases only -- the fleet's shared records are on the KV
regardless, because they have to survive a restart as much as a peer, and the KV lives on the
stream's own broker whichever value the slot holds"; DESIGN.md, "The store").

A node gets two stores from `open_coordination`:
- `records`: pauses, budget counters, the activation pointer and its generation, each node's
  apply status, the completion ledger, dedupe, the seats' retirement stamps, fencing epochs
  (and every shared record a later feature adds). Always NATS KV on the stream's own broker,
  the embedded one of a single node included, so what an operator decided survives a restart
  and a SIGKILL. Only without a broker (the in-memory queue twin, in tests) is it the
  in-process twin.
- `leases`: where seat, presence and duty leases live, the one thing `coordination.type`
  chooses. `local` is a per-process twin (a restarted node finds no stale lease of its own to
  wait out); `embedded-kv` is the same KV the records use.

Callers get `CoordStore`s and cannot tell which backend runs. The node config is read
defensively (attributes or mapping keys), so this works with the decoded Tier A document and
with a plain dict alike.
"""
from __future__ import annotations

import time
from typing import Any, Awaitable, Callable, NamedTuple

from engine.coord.contract import CoordError, CoordStore
from engine.coord.leases import LEASE_TTL_SECONDS
from engine.queue.dial import Dial

COORDINATION_TYPES = ("local", "embedded-kv")


class Coordination(NamedTuple):
    """A node's two stores; they are one object when the leases ride the KV too."""

    records: CoordStore
    leases: CoordStore

    async def close(self) -> None:
        """Close both (once each)."""
        await self.leases.close()
        if self.records is not self.leases:
            await self.records.close()


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


def stream_clustered(node_config: Any) -> bool:
    """Whether the stream's broker has peers (a `stream.cluster`, or an external server): its
    creates get a member's longer budgets (seed 002, "A clustered node is given longer")."""
    stream = _field(node_config, "stream")
    return _field(stream, "type") == "nats" or _field(stream, "cluster") is not None


def stream_replicas(node_config: Any) -> int:
    """`stream.replicas`: one count covers the streams and the coordination buckets."""
    return int(_field(_field(node_config, "stream"), "replicas") or 1)


async def open_coordination(node_config: Any, *, dial: Dial | None = None,
                            clock: Callable[[], float] = time.time, node_id: str | None = None,
                            on_closed: Callable[[str], Awaitable[None] | None] | None = None) -> Coordination:
    """The node's records store and lease store (see the module docstring).

    `dial` is how the node's queue dials the stream's own broker -- the same URL list, token,
    credentials file and TLS, and the same reconnect bound (seed 002, "one connection, one
    fate"); None only beside the in-memory queue twin. `on_closed(reason)` hears when that
    connection is closed for good."""
    kind = coordination_type(node_config)
    if kind not in COORDINATION_TYPES:
        raise CoordError(f"coordination.type: {kind!r} is not one of {', '.join(COORDINATION_TYPES)}")
    if dial is None:
        if kind == "embedded-kv":
            raise CoordError("coordination.type: embedded-kv rides the stream's own broker; "
                             "open it with the broker's dial (the stream is not up yet?)")
        from engine.coord.local import LocalCoord

        twin = LocalCoord(clock=clock)
        return Coordination(records=twin, leases=twin)
    from engine.coord.natskv import NatsKVCoord

    node_id = node_id or _field(_field(node_config, "node"), "id") or "node"
    records = await NatsKVCoord.connect(dial, name=f"crewlet-coord-{node_id}",
                                        replicas=stream_replicas(node_config), clustered=stream_clustered(node_config),
                                        on_closed=on_closed)
    if kind == "embedded-kv":
        return Coordination(records=records, leases=records)
    from engine.coord.local import LocalCoord

    return Coordination(records=records, leases=LocalCoord(clock=clock))
