"""The lease keeper: the task that renews what a node holds every ttl/3 and says what it lost
(seed 002, "A broker blip is not a node restart": an outage that outlasts the lease TTL hands
this node's seats to a peer, by design; "What changed": admission gated on a fresh renew).

A lease is lost when the store says somebody else holds it (or nobody does), or when its
renews have failed long enough that it is no longer exclusive: the node must stop acting on it
before a peer can claim it, so the keeper reports it at that moment rather than when the TTL
has run out. A lease whose renew merely went unanswered, still inside its exclusive window, is
kept and renewed again next time.
"""
from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from typing import Awaitable, Callable

from engine.coord.leases import Lease, LeaseManager

log = logging.getLogger("coord.keeper")

OnLost = Callable[[Lease], Awaitable[None] | None]


class LeaseKeeper:
    """Renews a set of leases every `interval` (the manager's ttl/3 by default)."""

    def __init__(self, manager: LeaseManager, *, interval: float | None = None,
                 on_lost: OnLost | None = None) -> None:
        self.manager = manager
        self.interval = manager.renew_interval if interval is None else interval
        self._on_lost = on_lost
        self._leases: dict[str, Lease] = {}
        self._stopping = asyncio.Event()
        self._task: asyncio.Task | None = None

    @property
    def leases(self) -> list[Lease]:
        """The leases being kept, in the order they were added."""
        return list(self._leases.values())

    def add(self, lease: Lease) -> None:
        """Keep renewing `lease` (replacing any lease kept under the same key)."""
        self._leases[lease.key] = lease

    def discard(self, lease: Lease) -> None:
        """Stop renewing `lease` (a release is the caller's)."""
        if self._leases.get(lease.key) is lease:
            del self._leases[lease.key]

    async def renew_once(self) -> list[Lease]:
        """One step: renew every kept lease at once; return (and report) the ones lost."""
        kept = list(self._leases.values())
        results = await asyncio.gather(*(self.manager.renew(lease) for lease in kept),
                                       return_exceptions=True)
        for lease, result in zip(kept, results, strict=True):
            if isinstance(result, Exception):  # not a refusal, not silence: keep, and say so
                log.error("lease_renew_failed", extra={"key": lease.key, "error": str(result)})
        now = self.manager.clock()
        lost = [lease for lease in kept if lease.lost or not lease.is_exclusive(now)]
        for lease in lost:
            self.discard(lease)
            log.warning("lease_lost", extra={"key": lease.key, "epoch": lease.epoch,
                                             "taken": lease.lost})
            await self._report(lease)
        return lost

    def start(self) -> None:
        """Run the loop as a task on the current event loop."""
        if self._task is None or self._task.done():
            self._stopping.clear()
            self._task = asyncio.create_task(self._run(), name="lease-keeper")

    async def stop(self) -> None:
        """Stop the loop after the step in flight; the leases are left as they are."""
        self._stopping.set()
        if self._task is not None:
            await self._task
            self._task = None

    async def _run(self) -> None:
        while not self._stopping.is_set():
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), self.interval)
            if self._stopping.is_set():
                return
            try:
                await self.renew_once()
            except Exception:  # a step that failed must not end the keeping
                log.exception("lease_keeper_step_failed")

    async def _report(self, lease: Lease) -> None:
        if self._on_lost is None:
            return
        try:
            result = self._on_lost(lease)
            if inspect.isawaitable(result):
                await result
        except Exception:
            log.exception("lease_lost_callback_failed", extra={"key": lease.key})
