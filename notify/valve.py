"""The rate valve, `notification_rate_limit` (seed 000, "Relation to the rate limiter": it
"drops notifications above N per seat per second ... purely a safety valve against
pathological webhook storms and notification loops. Burst handling is coalescing's job").

The count is the fleet's, not a node's: one coordination slot per seat per second (seed 002,
"the rate valve ... in the coordination slot"), counted by compare-and-set and expiring by
itself. 0 turns the valve off and costs nothing. A coordination store that does not answer
leaves the valve open: a safety valve must not become the outage.
"""
from __future__ import annotations

import logging
import time
from typing import Callable

from engine.coord.contract import CoordError, CoordStore, KeyExists, RevisionMismatch

log = logging.getLogger("notify.valve")

RATE_BUCKET = "crewlet_notify_rate"
SLOT_TTL_SECONDS = 2.0  # one second's count, kept a second longer so a late writer still sees it
CAS_ATTEMPTS = 8        # writers racing for one slot retry; past this the valve lets the event through


class RateValve:
    def __init__(self, store: CoordStore, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.clock = clock
        self._provisioned = False

    async def admit(self, handle: str, limit: int) -> bool:
        """Count one notification for `handle` in this second; False once it is over `limit`."""
        if limit <= 0:
            return True
        try:
            if not self._provisioned:
                await self.store.ensure_bucket(RATE_BUCKET)
                self._provisioned = True
            return await self._count(f"{handle}/{int(self.clock())}", limit)
        except CoordError as exc:
            log.warning("rate_valve_unavailable", extra={"seat": handle, "error": str(exc)})
            return True

    async def _count(self, key: str, limit: int) -> bool:
        for _ in range(CAS_ATTEMPTS):
            entry = await self.store.get(RATE_BUCKET, key)
            if entry is None:
                try:
                    await self.store.create(RATE_BUCKET, key, b"1", ttl=SLOT_TTL_SECONDS)
                    return True
                except KeyExists:
                    continue
            seen = int(entry.value or b"0")
            if seen >= limit:
                return False
            try:
                await self.store.update(RATE_BUCKET, key, str(seen + 1).encode(), entry.revision, ttl=SLOT_TTL_SECONDS)
                return True
            except RevisionMismatch:
                continue
        return True
