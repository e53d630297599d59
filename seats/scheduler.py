"""The scheduler duty: schedules fire on the company's clock, once per due time, fleet-wide
(seed 000, "Routing", producer 2; seed 002, "Roles": the `workers` role runs "the scheduler
tick", a singleton duty on its lease `worker:scheduler`).

Each tick, on the node holding the duty, for each schedule of the node's CURRENT company (a
revision that adds, removes or changes one applies from the next tick, and the node's
`on_company` wakes the loop at once):
  1. nothing is read while the schedule's next due time is still ahead (it is kept per
     schedule after its record was read);
  2. otherwise its record is read (`seats.schedules`). None yet, or a changed cron or company
     clock: the record is a baseline at now, and nothing fires for the time before it;
  3. a record left `publishing` (a holder died between claim and publish) is published again
     with its own ids, then marked `published`;
  4. due times in (the record's due, now]: the LATEST is claimed by compare-and-set, with the
     number before it as `missed` -- after downtime a schedule fires once, never once per
     missed time -- then published through `publish_fire`, then marked `published`.
A record written under a larger fencing epoch than this node's means a peer holds the duty:
this node lets go at once. A claim lost to a compare-and-set is left to its winner.

Timings: the tick (1 s unless CREWLET_SCHEDULER_TICK_SECONDS or `tick_seconds` says; a due time
is fired within a tick of arriving, and the loop sleeps no longer than until the next due time)
and the clock (`clock`, seconds since the epoch) are settings, so tests step over days.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Callable

from django.conf import settings

from engine.config import Company
from engine.config.company import Schedule
from engine.config.cron import due_between, next_fires
from engine.coord.contract import CoordError, KeyExists, RevisionMismatch
from engine.queue.contract import QueueError
from seats.dutylease import DutyLease
from seats.errors import SeatsError
from seats.node import SeatsNode
from seats.schedules import BASELINE, PUBLISHING, FireBook, FireRecord, definition_of, publish_fire

log = logging.getLogger("seats.scheduler")

DUTY = "scheduler"
TICK_SECONDS = 1.0       # the finest schedule is a second's; a due time fires within one tick
MISSED_COUNT_CAP = 100_000  # a week at one fire a second is counted, not walked past that


@dataclass(frozen=True)
class Fired:
    """One fire the duty published: the schedule, its due time, the missed count, the task event."""

    schedule: str
    due: datetime
    missed: int
    task_event_id: str
    again: bool = False  # a claim a previous holder left unpublished, published now


class SchedulerDuty:
    """The `workers` role's scheduler (see the module docstring)."""

    name = "scheduler"

    def __init__(self, node: SeatsNode, *, tick_seconds: float | None = None, clock: Callable[[], float] = time.time) -> None:
        self.node = node
        self.tick_seconds = float(tick_seconds or getattr(settings, "CREWLET_SCHEDULER_TICK_SECONDS", TICK_SECONDS))
        self.clock = clock
        self.book = FireBook(node.coord)
        self.duty = DutyLease(node.leases, DUTY)
        self.fired: list[Fired] = []
        self._next: dict[tuple[str, str], datetime | None] = {}  # (name, definition) -> next due time
        self._seen_acquisition = 0
        self._pruned_for: Company | None = None
        self._wake = asyncio.Event()
        self._stopping = asyncio.Event()
        self._task: asyncio.Task | None = None

    # -- the node's hooks ------------------------------------------------------------------
    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="scheduler-duty")

    async def stop(self, cut: bool) -> None:
        self._stopping.set()
        self._wake.set()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task
        await self.duty.stop(cut)

    async def on_company(self, company: Company) -> None:
        """A revision applied: forget the due times kept, prune removed schedules, tick now."""
        self._next.clear()
        self._wake.set()

    # -- the loop ----------------------------------------------------------------------------
    async def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                if await self.duty.hold():
                    await self.tick_once()
            except (CoordError, QueueError) as exc:  # the store or broker did not answer: the next tick asks again
                log.warning("scheduler_tick_unanswered", extra={"error": str(exc)})
            except Exception:
                log.exception("scheduler_tick_failed")
            self._wake.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self._sleep_seconds())

    def _sleep_seconds(self) -> float:
        """Until the next due time this node knows of, at most a tick (it also re-asks the lease)."""
        ahead = [d for d in self._next.values() if d is not None]
        if not ahead or self.duty.lease is None:
            return self.tick_seconds
        wait = (min(ahead) - self._now()).total_seconds()
        return min(self.tick_seconds, max(0.01, wait))

    def _now(self) -> datetime:
        return datetime.fromtimestamp(self.clock(), timezone.utc)

    async def tick_once(self) -> list[Fired]:
        """One tick on the duty's holder: every schedule that is due fires; what fired."""
        company = self.node.company
        if company is None or not self.duty.exclusive():
            return []
        if self.duty.acquisitions != self._seen_acquisition:  # (re)taken: a peer may have fired meanwhile
            self._seen_acquisition = self.duty.acquisitions
            self._next.clear()
        if self._pruned_for is not company:
            pruned = await self.book.prune({s.name for s in company.schedules})
            if pruned:
                log.info("schedule_records_pruned", extra={"schedules": ",".join(pruned)})
            self._pruned_for = company
        now = self._now()
        fired = []
        for schedule in company.schedules:
            key = (schedule.name, definition_of(schedule, company))
            if key in self._next and (self._next[key] is None or now < self._next[key]):
                continue
            try:
                done, self._next[key] = await self._step(schedule, company, now)
            except (CoordError, QueueError) as exc:  # read again next tick
                self._next.pop(key, None)
                log.warning("schedule_step_unanswered", extra={"schedule": schedule.name, "error": str(exc)})
                continue
            if done is not None:
                fired.append(done)
            if not self.duty.exclusive():
                break
        self.fired.extend(fired)
        return fired

    async def _step(self, schedule: Schedule, company: Company, now: datetime) -> tuple[Fired | None, datetime | None]:
        """Fire `schedule` if it is due; what fired and its next due time after that."""
        definition = definition_of(schedule, company)
        entry, record = await self.book.read(schedule.name)
        expected = entry.revision if entry is not None else None
        if record is not None and record.epoch > self.duty.epoch:
            self.duty.let_go(f"schedule {schedule.name} was written under epoch {record.epoch}")
            return None, None
        if record is None or record.definition != definition:
            base = FireRecord(state=BASELINE, due=now, definition=definition, epoch=self.duty.epoch, node=self.node.node_id)
            if await self._write(schedule.name, expected, base) is not None:
                log.info("schedule_counting", extra={"schedule": schedule.name, "cron": schedule.cron, "since": now.isoformat()})
            return None, _next_after(schedule, company, now)
        if record.state == PUBLISHING:
            done = await self._publish(schedule.name, expected, record, company, again=True)
            return done, _next_after(schedule, company, record.due)
        latest, count = due_between(schedule.cron, company.tz, record.due, now, cap=MISSED_COUNT_CAP)
        if latest is None:
            return None, _next_after(schedule, company, record.due)
        claim = record.claim(schedule, company, latest, count - 1, epoch=self.duty.epoch, node=self.node.node_id)
        revision = await self._write(schedule.name, expected, claim)
        if revision is None:
            return None, None  # a peer wrote it: read again next tick
        done = await self._publish(schedule.name, revision, claim, company, again=False)
        return done, _next_after(schedule, company, latest)

    async def _publish(self, name: str, revision: int | None, claim: FireRecord, company: Company, *, again: bool) -> Fired | None:
        """Publish a claimed fire and mark it published; None when this node may no longer act
        (the claim stays `publishing` for whoever holds the duty next)."""
        if not self.duty.exclusive():
            return None
        schedule = next((s for s in company.schedules if s.name == name), None)
        try:
            await publish_fire(self.node.queue, company, schedule=name, seat=claim.seat, task=claim.task,
                               cron=schedule.cron if schedule is not None else "", due=claim.due, missed=claim.missed,
                               ids={"task_event_id": claim.task_event_id, "fired_event_id": claim.fired_event_id,
                                    "task_id": claim.task_id})
        except SeatsError as exc:  # the seat cannot take a task any more: this due time is given up, named
            log.error("schedule_fire_refused", extra={"schedule": name, "due": claim.due.isoformat(), "error": str(exc)})
        await self._write(name, revision, claim.published())
        log.info("schedule_fired", extra={"schedule": name, "due": claim.due.isoformat(), "missed": claim.missed,
                                          "seat": claim.seat, "again": again, "epoch": claim.epoch})
        return Fired(name, claim.due, claim.missed, claim.task_event_id, again)

    async def _write(self, name: str, expected: int | None, record: FireRecord) -> int | None:
        """Compare-and-set the record; its new revision, or None when a peer wrote it first."""
        try:
            return await self.book.write(name, expected, record)
        except (RevisionMismatch, KeyExists):
            log.info("schedule_claim_lost", extra={"schedule": name, "due": record.due.isoformat()})
            return None


def _next_after(schedule: Schedule, company: Company, after: datetime) -> datetime | None:
    following = next_fires(schedule.cron, company.tz, after, 1)
    return following[0] if following else None
