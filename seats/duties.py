"""The maintenance duty: removed seats' mailboxes are retired, not kept (seed 000, "A removed seat's
subscriptions are retired, not kept"; "Letting go of a subscription: four verbs, not one").

A company-wide singleton on the duty lease `worker:maintenance`, on a node with the `workers`
role. The coordination store records, per agent handle (bucket `crewlet_seats`, key
`seen:<handle>`), whether the seat is present in the active revision or since when it has been
absent -- a removed handle is gone from the org its names derive from, so the retirement's
clock has to live somewhere, and it lives in the durable records, so neither a restart nor a
new duty holder starts it again. Each sweep:
  1. records the transitions only: a seat newly present, a seat newly absent (its clock starts);
     a seat whose record already says so is not written again, so a company of 10,000 seats
     costs no write a minute (what this holder wrote is remembered until it loses the duty);
  2. lists the seat mailboxes the broker holds (`crewlet.agent.*.inbox` and `.control`), so
     one that escaped that record is still found: a mailbox nobody remembers starts its clock
     when it is found (it may belong to a revision this node has not applied yet);
  3. deletes, with the mail they still hold, the inbox and control subscriptions of every seat
     absent from the active revision for longer than the retirement horizon (24 hours), a few
     at a time, so a reverted company of thousands of seats is cleared in one sweep rather than
     left as thousands of consumers (each of which an orderly broker shutdown also pays for);
  4. sweeps the A2A channels (seed 000, "Ephemeral A2A channels"; `a2a.service.sweep`): closes
     those idle for an hour and deletes the records closed seven days ago.
`delete_subscription` needs no local attachment, so which node ran the seat does not matter.
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from dataclasses import dataclass
from typing import Any, Callable

from django.conf import settings

from engine.coord.contract import CoordError, RevisionMismatch
from engine.queue import topics
from engine.queue.contract import QueueError
from a2a import service as a2a
from seats.dutylease import DutyLease
from seats.node import SeatsNode
from seats.pauses import SEATS_BUCKET

log = logging.getLogger("seats.duties")

SWEEP_SECONDS = 60.0                 # a removed seat waits a day: a sweep a minute is plenty
RETIRE_AFTER_SECONDS = 24 * 3600.0   # seed 000: absent from the active revision for 24 hours
RETIRES_IN_FLIGHT = 8                # overlapping deletes hides round trips; the broker's fsync bounds the rest
DUTY = "maintenance"


def seen_key(handle: str) -> str:
    return f"seen:{handle}"


class MaintenanceDuty:
    """The `workers` role's maintenance duty. Settings: CREWLET_MAINTENANCE_SWEEP_SECONDS,
    CREWLET_SEAT_RETIRE_AFTER_SECONDS, CREWLET_A2A_IDLE_CLOSE_SECONDS and
    CREWLET_A2A_RETAIN_CLOSED_SECONDS (Django settings; the last two are the seed's fixed
    numbers, shortened only by tests), or the keyword arguments."""

    name = "maintenance"

    def __init__(self, node: SeatsNode, *, sweep_seconds: float | None = None, retire_after_seconds: float | None = None,
                 a2a_idle_seconds: float | None = None, a2a_retain_seconds: float | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.node = node
        self.sweep_seconds = float(sweep_seconds or getattr(settings, "CREWLET_MAINTENANCE_SWEEP_SECONDS", SWEEP_SECONDS))
        self.retire_after = float(retire_after_seconds or getattr(settings, "CREWLET_SEAT_RETIRE_AFTER_SECONDS",
                                                                   RETIRE_AFTER_SECONDS))
        self.a2a_idle = float(a2a_idle_seconds or getattr(settings, "CREWLET_A2A_IDLE_CLOSE_SECONDS", a2a.IDLE_CLOSE_SECONDS))
        self.a2a_retain = float(a2a_retain_seconds or getattr(settings, "CREWLET_A2A_RETAIN_CLOSED_SECONDS",
                                                               a2a.RETAIN_CLOSED_SECONDS))
        self.clock = clock
        self.duty = DutyLease(node.leases, DUTY)
        self.swept = a2a.Swept([], [])
        self._known: dict[str, _Seen] = {}  # what the store says, as this holder read or wrote it
        self._acquisitions = 0              # the duty's takings this memory belongs to
        self._task: asyncio.Task | None = None
        self._stopping = asyncio.Event()

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="maintenance-duty")

    async def stop(self, cut: bool) -> None:
        self._stopping.set()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task
        await self.duty.stop(cut)

    @property
    def lease(self) -> Any:
        return self.duty.lease

    async def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                if await self.hold_duty():
                    await self.sweep_once()
                    await self.sweep_channels()
            except (CoordError, QueueError) as exc:  # the store or broker did not answer: the next sweep asks again
                log.warning("maintenance_sweep_unanswered", extra={"error": str(exc)})
            except Exception:
                log.exception("maintenance_sweep_failed")
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), self.sweep_seconds)

    async def hold_duty(self) -> bool:
        """Whether this node runs the duty now: the lease is held and exclusive, or just taken
        (then what this holder remembered of the store is forgotten: another holder may have
        written since)."""
        held = await self.duty.hold()
        if self.duty.acquisitions != self._acquisitions:
            self._acquisitions = self.duty.acquisitions
            self._known.clear()
        return held

    async def sweep_channels(self) -> a2a.Swept:
        """Close the A2A channels idle for an hour, delete those closed seven days ago."""
        swept = await a2a.sweep(self.node, now=self.clock(), idle_seconds=self.a2a_idle, retain_seconds=self.a2a_retain)
        self.swept.closed.extend(swept.closed)
        self.swept.deleted.extend(swept.deleted)
        return swept

    async def sweep_once(self) -> list[str]:
        """One sweep; the handles whose mailboxes it retired."""
        company = self.node.company
        if company is None:
            return []
        coord, queue, now = self.node.coord, self.node.queue, self.clock()
        await coord.ensure_bucket(SEATS_BUCKET)
        active = {seat.handle for seat in company.agent_seats()}
        stored = {k.removeprefix("seen:") for k in await coord.keys(SEATS_BUCKET, prefix="seen:")}
        for handle in set(self._known) - stored:  # gone from the store (retired, or swept): forget it
            del self._known[handle]
        held = {h for kind in ("inbox", "control")
                for topic, _ in await queue.list_subscriptions(topics.agent_pattern(kind))
                if (h := topics.handle_of(topic))}
        for handle in sorted(active | stored | held):
            seen = await self._seen(handle, stored)
            if handle in active:
                if seen is None or seen.absent_since is not None:
                    await self._record(handle, _Seen(None))
            elif seen is None or seen.absent_since is None:
                if seen is None:
                    log.info("seat_mailbox_found", extra={"seat": handle})  # nobody remembers it: its clock starts now
                await self._record(handle, _Seen(now))
        due = sorted(h for h, seen in self._known.items()
                     if h not in active and seen.absent_since is not None and now - seen.absent_since >= self.retire_after)
        gate = asyncio.Semaphore(RETIRES_IN_FLIGHT)

        async def retire(handle: str) -> None:
            async with gate:
                await self.retire(handle, now - self._known[handle].absent_since)
                with contextlib.suppress(RevisionMismatch):  # re-recorded meanwhile: a revision brought it back
                    await coord.delete(SEATS_BUCKET, seen_key(handle), expected_revision=self._known[handle].revision)
                self._known.pop(handle, None)

        await asyncio.gather(*(retire(handle) for handle in due))
        return due

    async def _seen(self, handle: str, stored: set[str]) -> "_Seen | None":
        """What the store records of `handle` (this holder's memory first), or None."""
        if handle in self._known:
            return self._known[handle]
        if handle not in stored:
            return None
        entry = await self.node.coord.get(SEATS_BUCKET, seen_key(handle))
        if entry is None:
            return None
        self._known[handle] = seen = _Seen.decode(entry.value, entry.revision)
        return seen

    async def _record(self, handle: str, seen: "_Seen") -> None:
        seen.revision = await self.node.coord.put(SEATS_BUCKET, seen_key(handle), seen.encode())
        self._known[handle] = seen

    async def retire(self, handle: str, absent_for: float) -> None:
        """Delete the seat's inbox and control subscriptions with the mail they hold."""
        queue = self.node.queue
        for topic, group in ((topics.agent_inbox(handle), topics.inbox_group(handle)),
                             (topics.agent_control(handle), topics.control_group(handle))):
            with contextlib.suppress(Exception):
                dropped = await queue.pending(topic, group)
                log.info("seat_mailbox_retiring", extra={"seat": handle, "topic": topic, "messages": dropped})
            await queue.delete_subscription(topic, group)
        log.warning("seat_mailbox_retired", extra={"seat": handle, "absent_seconds": int(absent_for)})


@dataclass
class _Seen:
    """A handle's record: present (`absent_since` None), or absent since then."""

    absent_since: float | None
    revision: int = 0

    def encode(self) -> bytes:
        return json.dumps({"present": True} if self.absent_since is None else {"absent_since": self.absent_since}).encode()

    @classmethod
    def decode(cls, raw: bytes, revision: int) -> "_Seen":
        try:
            data = json.loads(raw)
        except ValueError:
            data = {}
        if data.get("present"):
            return cls(None, revision)
        since = data.get("absent_since", data.get("last_seen"))  # last_seen: a record from an older build
        try:
            return cls(float(since), revision)
        except (TypeError, ValueError):
            return cls(None, revision)  # unreadable: counted present, so nothing is retired on it
