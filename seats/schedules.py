"""A schedule's fire and its record (seed 000, "Routing", producer 2: the scheduler "resolves a
firing schedule's target seat and publishes task_assigned to that inbox (and records
scheduled_task_fired on crewlet.events.*)"; seed 002: "claimed scheduled fires" are among the
fleet's shared records on the coordination store).

One record per schedule, `fired:<name>` in the bucket `crewlet_schedules`, says which due time
was fired last and whether its publish is done:

    baseline    the schedule was first seen (or its cron or the company's clock changed) at
                `due`; nothing fired: due times before a schedule existed are not owed
    publishing  `due` is claimed, by compare-and-set, under the scheduler's fencing epoch,
                with the ids, seat and text its events will carry; the publish may not be done
    published   the task and its scheduled_task_fired are on the broker

A claim is written before the publish and `published` after it, so the publish is done only
once the record says so: a holder that dies in between leaves `publishing`, and whoever holds
the duty next publishes the SAME events again (ids derived from the company, the schedule and
the due time), which the broker's duplicate window, the seat's same-id dedupe and its
completion ledger each collapse to one task. Two holders cannot both claim one due time: the
claim is a compare-and-set on the revision they read, and a holder whose epoch is below the
record's stops.

`publish_fire` is the one path a fire takes -- the duty's and `POST /schedules/{name}/fire`'s
(`manage.py crewlet_schedule fire NAME`); an operator's fire is recorded beside, under
`manual:<name>`, and moves no due time. `describe` is what `GET /schedules` and the Company
page show.
"""
from __future__ import annotations

import json
import uuid
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timezone
from typing import Any

from engine.config import Company
from engine.config.company import Schedule
from engine.config.cron import next_fires
from engine.coord.contract import BucketNotFound, CoordStore, Entry
from engine.queue import topics
from engine.queue.contract import EventQueue
from events import tracing
from events.envelope import Event, new
from events.types.task import ScheduledTaskFired
from seats.tasks import build_task

SCHEDULES_BUCKET = "crewlet_schedules"
BASELINE, PUBLISHING, PUBLISHED = "baseline", "publishing", "published"
# The namespace a fire's ids are derived in: uuid5(FIRE_NAMESPACE, "<company>/<schedule>/<due>/<what>").
# Fixed for ever: a fire published again after a crash must carry the ids the first attempt did.
FIRE_NAMESPACE = uuid.UUID("0b4f7f52-2d1e-5c0e-9a53-6f1d3e8c7a21")


def definition_of(schedule: Schedule, company: Company) -> str:
    """What the due times follow: the cron and the company's clock. A change re-baselines."""
    return f"{' '.join(schedule.cron.split())}|{company.timezone}"


@dataclass(frozen=True)
class FireRecord:
    """A schedule's record as the store holds it (see the module docstring)."""

    state: str
    due: datetime
    definition: str
    epoch: int = 0
    node: str = ""
    missed: int = 0
    seat: str = ""
    task: str = ""
    task_event_id: str = ""
    fired_event_id: str = ""
    task_id: str = ""

    def encode(self) -> bytes:
        raw = asdict(self)
        raw["due"] = self.due.astimezone(timezone.utc).isoformat()
        return json.dumps(raw, sort_keys=True).encode()

    @classmethod
    def decode(cls, value: bytes) -> "FireRecord | None":
        """The record, or None for a value this build cannot read (it is re-baselined)."""
        try:
            raw = json.loads(value)
            raw["due"] = datetime.fromisoformat(raw["due"])
            return cls(**{k: raw[k] for k in cls.__dataclass_fields__ if k in raw})
        except (ValueError, KeyError, TypeError):
            return None

    def claim(self, schedule: Schedule, company: Company, due: datetime, missed: int, *, epoch: int, node: str) -> "FireRecord":
        """The claim of `due`, with the ids and content its publish (and any retry) carries."""
        ids = fire_ids(company.name, schedule.name, due)
        return FireRecord(state=PUBLISHING, due=due, definition=self.definition, epoch=epoch, node=node, missed=missed,
                          seat=schedule.seat, task=schedule.task, **ids)

    def published(self) -> "FireRecord":
        return replace(self, state=PUBLISHED)


def fire_ids(company: str, schedule: str, due: datetime) -> dict[str, str]:
    """The ids one due time's fire carries, the same on every attempt and every node."""
    stem = f"{company}/{schedule}/{due.astimezone(timezone.utc).isoformat()}"
    return {what: str(uuid.uuid5(FIRE_NAMESPACE, f"{stem}/{what}")) for what in ("task_event_id", "fired_event_id", "task_id")}


class FireBook:
    """The schedules' records on the coordination store."""

    def __init__(self, store: CoordStore) -> None:
        self.store = store
        self._provisioned = False

    async def provision(self) -> None:
        """The bucket, if missing; it does not age (a record lives as long as its schedule)."""
        await self.store.ensure_bucket(SCHEDULES_BUCKET)
        self._provisioned = True

    async def read(self, name: str) -> tuple[Entry | None, FireRecord | None]:
        """The schedule's entry (for a compare-and-set) and its record."""
        entry = await self._call(self.store.get, SCHEDULES_BUCKET, fired_key(name))
        return entry, (FireRecord.decode(entry.value) if entry is not None else None)

    async def write(self, name: str, expected: int | None, record: FireRecord) -> int:
        """Compare-and-set the record over revision `expected` (None: create it); the new
        revision. KeyExists or RevisionMismatch when somebody wrote it since it was read."""
        if expected is None:
            return await self._call(self.store.create, SCHEDULES_BUCKET, fired_key(name), record.encode())
        return await self._call(self.store.update, SCHEDULES_BUCKET, fired_key(name), record.encode(), expected)

    async def record_manual(self, name: str, fired_by: str, at: datetime, event_id: str) -> None:
        value = json.dumps({"fired_by": fired_by, "at": at.isoformat(), "event_id": event_id}).encode()
        await self._call(self.store.put, SCHEDULES_BUCKET, manual_key(name), value)

    async def manual(self, name: str) -> dict[str, Any] | None:
        entry = await self._call(self.store.get, SCHEDULES_BUCKET, manual_key(name))
        try:
            return json.loads(entry.value) if entry is not None else None
        except ValueError:
            return None

    async def prune(self, keep: set[str]) -> list[str]:
        """Delete the records of schedules the company no longer has; the names deleted. A
        schedule added again later starts from a new baseline instead of owing its absence."""
        gone = []
        for key in await self._call(self.store.keys, SCHEDULES_BUCKET):
            name = key.partition(":")[2]
            if name not in keep:
                await self.store.delete(SCHEDULES_BUCKET, key)
                gone.append(name)
        return sorted(set(gone))

    async def _call(self, verb, *args):
        if not self._provisioned:
            await self.provision()
        try:
            return await verb(*args)
        except BucketNotFound:  # removed under us: provision again, once
            await self.provision()
            return await verb(*args)


def fired_key(name: str) -> str:
    return f"fired:{name}"


def manual_key(name: str) -> str:
    return f"manual:{name}"


async def publish_fire(queue: EventQueue, company: Company, *, schedule: str, seat: str, task: str, cron: str,
                       due: datetime, missed: int = 0, ids: dict[str, str] | None = None, manual: bool = False,
                       fired_by: str = "") -> Event:
    """Publish one fire: `task_assigned` to the seat's inbox (built by the one `build_task`), then
    `scheduled_task_fired`, both under a `schedule.fire` span. With `ids` the events carry them
    and a second publish inside the broker's window stores nothing; without, they are new.
    TaskRefused when the seat cannot take a task (the revision made it human, or removed it)."""
    ids = ids or {"task_event_id": str(uuid.uuid4()), "fired_event_id": str(uuid.uuid4()), "task_id": str(uuid.uuid4())}
    with tracing.span("schedule.fire", schedule=schedule, seat=seat) as trace:
        event = build_task(company, seat, task, fired_by if manual else f"schedule:{schedule}", schedule=schedule,
                           scheduled_for=due, event_id=uuid.UUID(ids["task_event_id"]), task_id=ids["task_id"],
                           trace=trace)
        await queue.publish(topics.agent_inbox(seat), event, dedupe_id=str(event.id))
        fired = new(ScheduledTaskFired(agent_id=event.get("agent_id"), agent_handle=seat, agent_role=event.get("agent_role"),
                                       schedule=schedule, cron=cron, timezone=company.timezone, task_id=ids["task_id"],
                                       task=event.get("task"), scheduled_for=due, missed=missed, manual=manual,
                                       fired_by=fired_by),
                    trace, source="scheduler", id=uuid.UUID(ids["fired_event_id"]))
        await queue.publish(topics.event_subject(fired.type), fired, dedupe_id=str(fired.id))
    return event


async def describe(book: FireBook, company: Company, now: datetime, holder: Any) -> list[dict[str, Any]]:
    """Every schedule of the company as GET /schedules shows it: its next three fires on the
    company's clock, its last fire (the due time, whether its publish is done, how many were
    missed before it), an operator's last fire, and who holds the duty (`holder`: a LeaseRecord)."""
    out = []
    for schedule in company.schedules:
        _, record = await book.read(schedule.name)
        current = record is not None and record.definition == definition_of(schedule, company)
        last = None
        if current and record.state != BASELINE:
            last = {"due": record.due.isoformat(), "state": record.state, "missed": record.missed,
                    "node": record.node, "epoch": record.epoch}
        out.append({
            "name": schedule.name, "seat": schedule.seat, "cron": schedule.cron, "task": schedule.task,
            "timezone": company.timezone,
            "next_fires": [d.isoformat() for d in next_fires(schedule.cron, company.tz, now, 3)],
            "last_fire": last,
            "counting_since": record.due.isoformat() if current and record.state == BASELINE else None,
            "last_manual_fire": await book.manual(schedule.name),
            "holder": {"node": holder.holder, "epoch": holder.epoch} if holder is not None else None,
        })
    return out
