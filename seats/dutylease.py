"""Holding a company-wide singleton duty (seed 002, "Roles": the `workers` role "runs the
company-wide singleton duties -- the scheduler tick, the maintenance sweep, ..."; "Each lease is
claimed per tick: a node that stops gracefully gives its duties back as it exits, and one that
dies mid-duty hands them back by lapsing").

A duty is the lease `worker:<duty>` with its fencing epoch (engine.coord.leases): `hold()` is
asked on every tick, takes the lease when nobody holds it, and keeps it renewed with a
LeaseKeeper; the keeper reports a lease that stopped being exclusive, and the duty stops acting
on it at that moment, before a peer can claim it.
"""
from __future__ import annotations

import contextlib
import logging

from engine.coord.keeper import LeaseKeeper
from engine.coord.leases import Lease, LeaseManager, duty_key

log = logging.getLogger("seats.duties")


class DutyLease:
    """One node's hold on one singleton duty."""

    def __init__(self, leases: LeaseManager, duty: str) -> None:
        self.leases = leases
        self.duty = duty
        self.lease: Lease | None = None
        self.acquisitions = 0  # how many times this node took the duty (a new one: re-read the state)
        self._keeper: LeaseKeeper | None = None

    @property
    def epoch(self) -> int:
        """The fencing epoch this node holds the duty under; 0 when it does not."""
        return self.lease.epoch if self.lease is not None else 0

    def exclusive(self) -> bool:
        """Whether this node may act on the duty now."""
        return self.lease is not None and self.lease.is_exclusive(self.leases.clock())

    async def hold(self) -> bool:
        """Whether this node runs the duty now: the lease is held and exclusive, or just taken."""
        if self.exclusive():
            return True
        self.lease = await self.leases.acquire(duty_key(self.duty))
        if self.lease is None:
            return False
        self.acquisitions += 1
        log.info("duty_acquired", extra={"duty": self.duty, "epoch": self.lease.epoch})
        if self._keeper is None:
            self._keeper = LeaseKeeper(self.leases, on_lost=self._lost)
            self._keeper.start()
        self._keeper.add(self.lease)
        return True

    def let_go(self, why: str) -> None:
        """Stop acting on the duty at once (a record fenced by a later epoch says a peer has it)."""
        if self.lease is not None:
            log.warning("duty_fenced", extra={"duty": self.duty, "epoch": self.lease.epoch, "why": why})
            if self._keeper is not None:
                self._keeper.discard(self.lease)
            self.lease = None

    async def _lost(self, lease: Lease) -> None:
        if lease is self.lease:
            log.warning("duty_lost", extra={"duty": self.duty})
            self.lease = None

    async def stop(self, cut: bool) -> None:
        """Stop renewing; give the lease back unless the drain is cut (then it lapses)."""
        if self._keeper is not None:
            await self._keeper.stop()
        if self.lease is not None and not cut:
            with contextlib.suppress(Exception):
                await self.leases.release(self.lease)
        self.lease = None
