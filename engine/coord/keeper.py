"""The lease keeper: the task that renews what a node holds every ttl/3 and says what it lost
(seed 002, "A broker blip is not a node restart": an outage that outlasts the lease TTL hands
this node's seats to a peer, by design; "What changed": admission gated on a fresh renew).

A lease is lost when the store says somebody else holds it (or nobody does), or when its
renews have failed long enough that it is no longer exclusive: the node must stop acting on it
before a peer can claim it, so the keeper reports it at that moment rather than when the TTL
has run out. A lease whose renew merely went unanswered, still inside its exclusive window, is
kept and renewed again next time.

A lease the node must always hold -- its presence lease above all -- is a standing claim
(`hold`): the keeper renews it while it is held and, whenever it is not (missed at boot, taken
by nobody's fault during an event-loop stall, lost while the store was unreachable), tries to
take it again on every step, with a fresh epoch, reporting each new lease to `on_taken`. A
presence lease lost once is therefore not lost until a restart.
"""
from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from engine.coord.leases import Lease, LeaseManager

log = logging.getLogger("coord.keeper")

OnLost = Callable[[Lease], Awaitable[None] | None]
OnTaken = Callable[[Lease], Awaitable[None] | None]


@dataclass
class _Claim:
    """A standing claim: what to take the lease with, and whom to tell."""

    data: dict[str, Any] | None
    ttl: float | None
    on_taken: OnTaken | None


class LeaseKeeper:
    """Renews a set of leases every `interval` (the manager's ttl/3 by default)."""

    def __init__(self, manager: LeaseManager, *, interval: float | None = None,
                 on_lost: OnLost | None = None) -> None:
        self.manager = manager
        self.interval = manager.renew_interval if interval is None else interval
        self._on_lost = on_lost
        self._leases: dict[str, Lease] = {}
        self._claims: dict[str, _Claim] = {}
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

    def hold(self, key: str, *, data: dict[str, Any] | None = None, ttl: float | None = None,
             lease: Lease | None = None, on_taken: OnTaken | None = None) -> None:
        """Keep `key` held for as long as the keeper runs: `lease` (when the caller already
        took it) is renewed like any other, and whenever the key is not held the next step
        takes it again with `data` and `ttl`, reporting the new lease to `on_taken`."""
        self._claims[key] = _Claim(data=data, ttl=ttl, on_taken=on_taken)
        if lease is not None and not lease.lost and not lease.released:
            self.add(lease)

    def let_go(self, key: str) -> None:
        """End the standing claim on `key` (the lease, if held, is still renewed until
        discarded or released: giving it back is the caller's)."""
        self._claims.pop(key, None)

    def held(self, key: str) -> Lease | None:
        """The lease kept under `key`, or None."""
        return self._leases.get(key)

    async def renew_once(self) -> list[Lease]:
        """One step: renew every kept lease at once; return (and report) the ones lost; then
        take back every standing claim not held (`retake_once`)."""
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
        await self.retake_once()
        return lost

    async def retake_once(self) -> list[Lease]:
        """Take every standing claim that is not held now; return (and report) the leases
        taken. A claim a peer holds, or that the store did not answer, waits for the next step."""
        taken = []
        for key, claim in list(self._claims.items()):
            if key in self._leases:
                continue
            try:
                lease = await self.manager.acquire(key, data=claim.data, ttl=claim.ttl)
            except Exception as exc:  # silence, or a refusal: the next step tries again
                log.warning("lease_retake_failed", extra={"key": key, "error": str(exc)})
                continue
            if lease is None:  # held elsewhere: the next step asks again
                continue
            if key not in self._claims:  # let go of while we took it: give it straight back
                with contextlib.suppress(Exception):
                    await self.manager.release(lease)
                continue
            self.add(lease)
            taken.append(lease)
            log.info("lease_retaken", extra={"key": key, "epoch": lease.epoch})
            await self._call(claim.on_taken, lease)
        return taken

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
        await self._call(self._on_lost, lease)

    async def _call(self, callback, lease: Lease) -> None:
        if callback is None:
            return
        try:
            result = callback(lease)
            if inspect.isawaitable(result):
                await result
        except Exception:
            log.exception("lease_callback_failed", extra={"key": lease.key})
