"""Leases and fencing epochs on the coordination store (seed 002, "The account needs more
than publish and subscribe": the lease store holds "the seat and presence leases, the duty
leases and the fencing epochs"; "Replica count"; "A broker blip is not a node restart";
"What changed": admission "gated on a renew fresh enough to prove exclusivity").

Three kinds of lease share one bucket, `crewlet_leases`:
- seat leases, `seat:<handle>`: the node holding one runs that seat;
- presence leases, `node:<node_id>`: a node is in the fleet while it holds its own, and the
  value carries its roles and labels (the roster every fleet-wide read asks);
- duty leases, `worker:<duty>`: a company-wide singleton duty runs on one node.

Each acquisition takes a fencing epoch from `crewlet_epochs`: a counter per lease key,
compare-and-set incremented on every new acquisition, kept in its own bucket so it outlives
the lease's expiry. A later holder always has a larger epoch than every earlier one, so work
fenced on an epoch can tell a stale holder from the current one. The epochs may live in a
store of their own (`epochs=`): the node keeps them with its durable records, so a node whose
leases are in a per-process twin (`coordination.type: local`) still never hands out an epoch
it handed out before a restart.

Expiry is in the lease's value (`expires_at` = the holder's clock at its last renew + TTL),
decided by whoever reads it, and a peer claims an expired lease by compare-and-set on the
expired entry's revision, so two claimers cannot both win. The holder counts from the moment
it SENT its last successful renew, and stops acting `safety_margin` before the TTL runs out
(`Lease.is_exclusive`): the node that loses a lease stops before a peer can take it, with the
margin covering clock skew between them. The entry also carries a store lifetime of twice the
TTL, so the lease of a node that vanished is cleared by the store, not by a sweep.
"""
from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from engine.coord.contract import (
    CoordError,
    CoordStore,
    Entry,
    KeyExists,
    RevisionMismatch,
    Unavailable,
)

log = logging.getLogger("coord.leases")

LEASES_BUCKET = "crewlet_leases"
EPOCHS_BUCKET = "crewlet_epochs"
LEASE_TTL_SECONDS = 45.0  # seed 002: coordination.lease_ttl_seconds, 45 unless it says otherwise
RENEW_FRACTION = 1 / 3    # renewed every ttl/3 (15 s): two renews can fail before exclusivity goes
MARGIN_FRACTION = 1 / 3   # exclusive while the last renew is younger than ttl - ttl/3
STORE_LIFETIME_FACTOR = 2  # the entry itself outlives its lease, so an expired one is claimed by CAS
EPOCH_ATTEMPTS = 16

Clock = Callable[[], float]


class EpochContention(CoordError):
    """An epoch increment lost every compare-and-set race it ran."""


def seat_key(handle: str) -> str:
    """The lease key of a seat."""
    return f"seat:{handle}"


def presence_key(node_id: str) -> str:
    """The lease key of a node's presence."""
    return f"node:{node_id}"


def duty_key(duty: str) -> str:
    """The lease key of a singleton duty."""
    return f"worker:{duty}"


@dataclass(frozen=True)
class LeaseRecord:
    """A lease as any node reads it from the store."""

    key: str
    holder: str
    epoch: int
    acquired_at: float
    renewed_at: float
    expires_at: float
    data: dict[str, Any]
    revision: int

    def expired(self, now: float) -> bool:
        """Whether a peer may claim it at `now`."""
        return now >= self.expires_at


@dataclass(eq=False)
class Lease:
    """A lease this node holds. Mutated by renew and release; read anywhere."""

    key: str
    holder: str
    epoch: int
    ttl: float
    safety_margin: float
    acquired_at: float
    last_renewed: float  # when the last successful renew was SENT (the conservative end)
    revision: int
    data: dict[str, Any] = field(default_factory=dict)
    lost: bool = False      # the store said somebody else holds it, or nobody does
    released: bool = False

    @property
    def expires_at(self) -> float:
        """When a peer may claim it, by the holder's clock."""
        return self.last_renewed + self.ttl

    def is_exclusive(self, now: float) -> bool:
        """Whether this node may still act on the lease at `now`: held, and renewed recently
        enough that no peer can have claimed it yet (ttl - safety_margin ago at most)."""
        if self.lost or self.released:
            return False
        return now - self.last_renewed < self.ttl - self.safety_margin


class LeaseManager:
    """One node's view of the lease store: acquire, renew, release, and read who holds what."""

    def __init__(self, store: CoordStore, node_id: str, ttl: float = LEASE_TTL_SECONDS,
                 clock: Clock = time.time, *, safety_margin: float | None = None,
                 epochs: CoordStore | None = None) -> None:
        if ttl <= 0:
            raise CoordError(f"coordination.lease_ttl_seconds: {ttl!r} must be positive")
        if safety_margin is not None and not 0 <= safety_margin < ttl:
            raise CoordError(f"lease safety margin {safety_margin!r}: must be at least 0 and below "
                             f"the TTL ({ttl})")
        self.store = store
        self.epochs = store if epochs is None else epochs
        self.node_id = node_id
        self.ttl = float(ttl)
        self.clock = clock
        self._margin = safety_margin
        self._provisioned = False

    @property
    def renew_interval(self) -> float:
        """How often a keeper renews: ttl/3."""
        return self.ttl * RENEW_FRACTION

    def margin_for(self, ttl: float) -> float:
        """The safety margin of a lease with this TTL: the setting, else ttl/3."""
        return self._margin if self._margin is not None else ttl * MARGIN_FRACTION

    async def provision(self) -> None:
        """Create the lease and epoch buckets if missing (neither ages: the store lifetime is
        per entry, and epochs are for ever)."""
        await self.store.ensure_bucket(LEASES_BUCKET)
        await self.epochs.ensure_bucket(EPOCHS_BUCKET)
        self._provisioned = True

    async def acquire(self, key: str, *, data: dict[str, Any] | None = None,
                      ttl: float | None = None) -> Lease | None:
        """Take the lease if nobody else holds it unexpired: return it with a fresh, larger
        epoch, or None when a live holder (or a peer racing for it) has it. A node taking
        back its own unexpired lease (a restart) takes a new epoch like anyone else."""
        await self._ready()
        ttl = self.ttl if ttl is None else float(ttl)
        margin = self.margin_for(ttl)
        if not 0 <= margin < ttl:
            raise CoordError(f"{key}: a lease TTL of {ttl} leaves no room for a {margin} s margin")
        now = self.clock()
        entry = await self.store.get(LEASES_BUCKET, key)
        if entry is not None:
            current = _decode(entry)
            if current.holder != self.node_id and not current.expired(now):
                return None
        epoch = await self._next_epoch(key)
        value = _encode(self.node_id, epoch, now, now, ttl, data or {})
        try:
            if entry is None:
                revision = await self.store.create(LEASES_BUCKET, key, value, ttl=_lifetime(ttl))
            else:
                revision = await self.store.update(LEASES_BUCKET, key, value, entry.revision,
                                                   ttl=_lifetime(ttl))
        except (KeyExists, RevisionMismatch):
            return None  # a peer claimed it between the read and the write; our epoch is spent
        log.debug("lease_acquired", extra={"key": key, "epoch": epoch})
        return Lease(key=key, holder=self.node_id, epoch=epoch, ttl=ttl, safety_margin=margin,
                     acquired_at=now, last_renewed=now, revision=revision, data=dict(data or {}))

    async def renew(self, lease: Lease) -> bool:
        """Extend the lease by its TTL from now. False when it was not renewed: `lease.lost`
        says the store gave it to somebody else (or nobody); otherwise the store did not answer
        and the next renew may still land, exclusivity permitting."""
        if lease.lost or lease.released:
            return False
        now = self.clock()
        value = _encode(self.node_id, lease.epoch, lease.acquired_at, now, lease.ttl, lease.data)
        try:
            try:
                revision = await self.store.update(LEASES_BUCKET, lease.key, value, lease.revision,
                                                   ttl=_lifetime(lease.ttl))
            except RevisionMismatch:
                # A renew whose answer was lost may have landed: the entry is still ours if it
                # names this node and this epoch, and then it is renewed from there.
                entry = await self.store.get(LEASES_BUCKET, lease.key)
                if entry is None or not _is_ours(_decode(entry), self.node_id, lease.epoch):
                    lease.lost = True
                    return False
                revision = await self.store.update(LEASES_BUCKET, lease.key, value, entry.revision,
                                                   ttl=_lifetime(lease.ttl))
        except RevisionMismatch:
            lease.lost = True
            return False
        except Unavailable as err:
            log.warning("lease_renew_unanswered", extra={"key": lease.key, "error": str(err)})
            return False
        lease.revision, lease.last_renewed = revision, now
        return True

    async def release(self, lease: Lease) -> bool:
        """Give the lease back; True when the store entry was ours and is gone. Raises
        Unavailable when the store did not answer (the lease then lapses at its TTL)."""
        if lease.lost or lease.released:
            return False
        try:
            await self.store.delete(LEASES_BUCKET, lease.key, expected_revision=lease.revision)
        except RevisionMismatch:
            lease.lost = True
            return False
        lease.released = True
        return True

    async def holder(self, key: str) -> LeaseRecord | None:
        """Who holds the lease now, or None when nobody does (absent or expired)."""
        await self._ready()
        entry = await self.store.get(LEASES_BUCKET, key)
        if entry is None:
            return None
        record = _decode(entry)
        return None if record.expired(self.clock()) else record

    async def list(self, prefix: str) -> list[LeaseRecord]:
        """The unexpired leases whose keys start with `prefix` (`node:` is the roster)."""
        await self._ready()
        now, out = self.clock(), []
        for key in await self.store.keys(LEASES_BUCKET, prefix=prefix):
            entry = await self.store.get(LEASES_BUCKET, key)
            if entry is not None and not (record := _decode(entry)).expired(now):
                out.append(record)
        return out

    async def epoch(self, key: str) -> int:
        """The key's latest epoch: 0 if it was never acquired."""
        await self._ready()
        entry = await self.epochs.get(EPOCHS_BUCKET, key)
        return 0 if entry is None else int(entry.value)

    async def acquire_presence(self, roles: list[str], labels: list[str] | dict | None = None) -> Lease | None:
        """Take this node's presence lease, its roles and labels in the value."""
        return await self.acquire(presence_key(self.node_id),
                                  data={"roles": list(roles), "labels": labels or []})

    async def _ready(self) -> None:
        if not self._provisioned:
            await self.provision()

    async def _next_epoch(self, key: str) -> int:
        """Compare-and-set the key's epoch one higher and return it."""
        for _ in range(EPOCH_ATTEMPTS):
            entry = await self.epochs.get(EPOCHS_BUCKET, key)
            try:
                if entry is None:
                    await self.epochs.create(EPOCHS_BUCKET, key, b"1")
                    return 1
                epoch = int(entry.value) + 1
                await self.epochs.update(EPOCHS_BUCKET, key, str(epoch).encode(), entry.revision)
                return epoch
            except (KeyExists, RevisionMismatch):
                continue  # a peer took an epoch of this key first; read the new one
        raise EpochContention(f"epoch of {key}: lost {EPOCH_ATTEMPTS} compare-and-set races")


def _lifetime(ttl: float) -> float:
    return ttl * STORE_LIFETIME_FACTOR


def _encode(holder: str, epoch: int, acquired_at: float, renewed_at: float, ttl: float,
            data: dict[str, Any]) -> bytes:
    return json.dumps({"holder": holder, "epoch": epoch, "acquired_at": acquired_at,
                       "renewed_at": renewed_at, "expires_at": renewed_at + ttl, "ttl": ttl,
                       "data": data}, sort_keys=True).encode()


def _decode(entry: Entry) -> LeaseRecord:
    raw = json.loads(entry.value)
    return LeaseRecord(key=entry.key, holder=raw["holder"], epoch=int(raw["epoch"]),
                       acquired_at=raw["acquired_at"], renewed_at=raw["renewed_at"],
                       expires_at=raw["expires_at"], data=raw.get("data") or {},
                       revision=entry.revision)


def _is_ours(record: LeaseRecord, node_id: str, epoch: int) -> bool:
    return record.holder == node_id and record.epoch == epoch
