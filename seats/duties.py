"""The maintenance duty: removed seats' mailboxes are retired, not kept (seed 000, "A removed seat's
subscriptions are retired, not kept"; "Letting go of a subscription: four verbs, not one").

A company-wide singleton on the duty lease `worker:maintenance`, on a node with the `workers`
role. Each sweep:
  1. records every agent seat of the active revision in the coordination store (bucket
     `crewlet_seats`, key `seen:<handle>`) with a last-seen stamp -- a removed handle is gone
     from the org its names derive from, so the retirement's clock has to live somewhere;
  2. lists the seat mailboxes the broker holds (`crewlet.agent.*.inbox` and `.control`), so
     one that escaped that record is still found: a mailbox nobody remembers starts its clock
     when it is found (it may belong to a revision this node has not applied yet);
  3. deletes, with the mail they still hold, the inbox and control subscriptions of every seat
     absent from the active revision for longer than the retirement horizon (24 hours);
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
from typing import Any, Callable

from django.conf import settings

from a2a import service as a2a
from engine.coord.contract import RevisionMismatch
from engine.queue import topics
from seats.dutylease import DutyLease
from seats.node import SeatsNode
from seats.pauses import SEATS_BUCKET

log = logging.getLogger("seats.duties")

SWEEP_SECONDS = 60.0                 # a removed seat waits a day: a sweep a minute is plenty
RETIRE_AFTER_SECONDS = 24 * 3600.0   # seed 000: absent from the active revision for 24 hours
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
        self.retired: list[str] = []
        self.swept = a2a.Swept([], [])
        self._task: asyncio.Task | None = None
        self._stopping = asyncio.Event()

    @property
    def lease(self) -> Any:
        return self.duty.lease

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="maintenance-duty")

    async def stop(self, cut: bool) -> None:
        self._stopping.set()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task
        await self.duty.stop(cut)

    async def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                if await self.hold_duty():
                    await self.sweep_once()
                    await self.sweep_channels()
            except Exception:
                log.exception("maintenance_sweep_failed")
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), self.sweep_seconds)

    async def hold_duty(self) -> bool:
        """Whether this node runs the duty now: the lease is held and exclusive, or just taken."""
        return await self.duty.hold()

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
        for handle in active:
            await coord.put(SEATS_BUCKET, seen_key(handle), _stamp(now))
        remembered = {k.removeprefix("seen:") for k in await coord.keys(SEATS_BUCKET, prefix="seen:")}
        held = {h for kind in ("inbox", "control")
                for topic, _ in await queue.list_subscriptions(topics.agent_pattern(kind))
                if (h := topics.handle_of(topic))}
        for handle in sorted(held - active - remembered):  # nobody remembers it: its clock starts now
            log.info("seat_mailbox_found", extra={"seat": handle})
            await coord.put(SEATS_BUCKET, seen_key(handle), _stamp(now))
        retired = []
        for handle in sorted(remembered - active):
            entry = await coord.get(SEATS_BUCKET, seen_key(handle))
            last_seen = _last_seen(entry)
            if last_seen is None or now - last_seen < self.retire_after:
                continue
            await self.retire(handle, now - last_seen)
            with contextlib.suppress(RevisionMismatch):  # re-stamped meanwhile: a revision brought it back
                await coord.delete(SEATS_BUCKET, seen_key(handle), expected_revision=entry.revision)
            retired.append(handle)
        self.retired.extend(retired)
        return retired

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


def _stamp(now: float) -> bytes:
    return json.dumps({"last_seen": now}).encode()


def _last_seen(entry: Any) -> float | None:
    if entry is None:
        return None
    try:
        return float(json.loads(entry.value)["last_seen"])
    except (ValueError, KeyError, TypeError):
        return None
