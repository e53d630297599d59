"""Seat placement: which node runs which agent seat (seed 000, "Routing"; seed 002, "Replica
count"; issue: "A node with the seats role claims seat leases for agent seats up to its fair
share ... a few per sweep, honouring a seat's placement").

One sweep step (`sweep_once`) reads the roster (live presence leases carrying the `seats`
role), computes this node's fair share -- ceil(agent seats / live seats nodes) -- claims free
seats it may run, a few per sweep, and releases seats above its share so a new node gets
work. A seat whose placement no live node matches is reported as `seats_unplaceable`; its
mail waits on its mailbox, which exists whoever runs the seat.
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Awaitable, Callable

from engine.coord.leases import Lease, LeaseManager, LeaseRecord, presence_key, seat_key

log = logging.getLogger("seats.placement")

SEATS_PER_SWEEP = 4  # a few per sweep: a node joining a busy fleet takes work gradually

OnAcquire = Callable[[str, Lease], Awaitable[None]]
OnRelease = Callable[[str, Lease, str], Awaitable[None]]


@dataclass(frozen=True)
class NodeProfile:
    node_id: str
    roles: tuple[str, ...]
    labels: tuple[str, ...]


def may_run(seat, node: NodeProfile) -> bool:
    """Whether `node` satisfies the seat's placement (pinned node, and every label)."""
    placement = getattr(seat, "placement", None)
    if placement is None:
        return True
    if placement.node and placement.node != node.node_id:
        return False
    return set(placement.labels or ()) <= set(node.labels)


def profile_of(record: LeaseRecord) -> NodeProfile:
    data = record.data or {}
    labels = data.get("labels") or []
    if isinstance(labels, dict):
        labels = [f"{k}={v}" for k, v in labels.items()]
    return NodeProfile(record.holder, tuple(data.get("roles") or ()), tuple(labels))


class SeatPlacement:
    """This node's side of placement. `held` maps a handle to the lease this node holds."""

    def __init__(self, leases: LeaseManager, me: NodeProfile, seats: Callable[[], list], on_acquire: OnAcquire,
                 on_release: OnRelease, per_sweep: int = SEATS_PER_SWEEP) -> None:
        self.leases = leases
        self.me = me
        self.seats = seats
        self.on_acquire = on_acquire
        self.on_release = on_release
        self.per_sweep = per_sweep
        self.held: dict[str, Lease] = {}
        self.unplaceable: tuple[str, ...] = ()

    async def roster(self) -> list[NodeProfile]:
        """Live nodes with the seats role (this one always counts while it sweeps)."""
        nodes = [profile_of(r) for r in await self.leases.list(presence_key(""))]
        nodes = [n for n in nodes if "seats" in n.roles]
        if self.me.node_id not in {n.node_id for n in nodes}:
            nodes.append(self.me)
        return nodes

    async def sweep_once(self) -> bool:
        """One step; True when it acquired or released a seat."""
        agent_seats = list(self.seats())
        by_handle = {s.handle: s for s in agent_seats}
        changed = False
        for handle in [h for h in self.held if h not in by_handle]:  # a seat the revision removed
            await self._release(handle, "removed from the company")
            changed = True
        nodes = await self.roster()
        share = math.ceil(len(agent_seats) / max(len(nodes), 1)) if agent_seats else 0
        unplaceable = sorted(s.handle for s in agent_seats if not any(may_run(s, n) for n in nodes))
        if unplaceable != list(self.unplaceable):
            if unplaceable:
                log.warning("seats_unplaceable", extra={"seats": ",".join(unplaceable)})
            self.unplaceable = tuple(unplaceable)
        # Release what this node may no longer run, then what is above its share.
        for handle in [h for h in self.held if not may_run(by_handle[h], self.me)]:
            await self._release(handle, "placement no longer matches this node")
            changed = True
        while len(self.held) > share:
            handle = sorted(self.held)[-1]
            await self._release(handle, "above this node's fair share")
            changed = True
        claimed = 0
        for seat in agent_seats:
            if len(self.held) >= share or claimed >= self.per_sweep:
                break
            if seat.handle in self.held or not may_run(seat, self.me):
                continue
            lease = await self.leases.acquire(seat_key(seat.handle), data={"node": self.me.node_id})
            if lease is None:
                continue
            self.held[seat.handle] = lease
            claimed += 1
            changed = True
            await self.on_acquire(seat.handle, lease)
        return changed

    async def lost(self, lease: Lease) -> None:
        """The keeper lost `lease`: stop acting on the seat at once."""
        for handle, held in list(self.held.items()):
            if held is lease:
                del self.held[handle]
                await self.on_release(handle, lease, "lease lost")

    async def release_all(self, reason: str) -> None:
        for handle in list(self.held):
            await self._release(handle, reason)

    async def _release(self, handle: str, reason: str) -> None:
        lease = self.held.pop(handle)
        await self.on_release(handle, lease, reason)
        try:
            await self.leases.release(lease)
        except Exception as exc:  # the lease lapses at its TTL when the store does not answer
            log.warning("seat_release_unanswered", extra={"seat": handle, "error": str(exc)})
