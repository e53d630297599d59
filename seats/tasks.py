"""A task for a seat, as the scheduler and an operator both publish it (seed 000, "Routing": the
scheduler "resolves a firing schedule's target seat and publishes task_assigned to that inbox").

`build_task` is the one definition of that event; `POST /seats/{handle}/tasks` (and the Seat
page's "give a task" box, through the same function) publishes what it builds, and `manage.py
crewlet_task` goes through that route, so they cannot disagree. The task goes to the seat's
inbox, and the same event -- one id -- is recorded on `crewlet.events.task_assigned`, so every
node's activity feed shows it the moment it is assigned (the store keeps one row: a second
write of one event changes nothing).
A human seat has no inbox and no turn to wake (seed 000, "A seat's mailbox exists before the
seat is running"): it is refused by name, as an unknown seat is.
"""
from __future__ import annotations

import logging
import uuid
from datetime import datetime

from engine.queue import topics
from events.envelope import Event, new
from events.tracing import TraceContext, trace_of
from events.types.task import TaskAssigned
from seats.errors import SeatRefused

log = logging.getLogger("seats.tasks")

MAX_TASK_CHARS = 20_000  # a task is a prompt, re-sent on every round of its turn


class TaskRefused(SeatRefused):
    """The task cannot be published; `status` is the HTTP answer (404 unknown, 422 otherwise)."""


def build_task(company, handle: str, text: str, assigned_by: str, *, assigned_by_seat: str = "", schedule: str = "",
               scheduled_for: datetime | None = None, event_id: uuid.UUID | None = None, task_id: str = "",
               trace: TraceContext | None = None) -> Event:
    """The `task_assigned` event for `handle`, ready for its inbox. TaskRefused naming the handle
    for a seat the company does not have (404) or a human seat (422), and naming `text` when
    it is empty or too long. The scheduler passes `schedule`, the due time, and ids derived
    from both, so a fire it publishes again after a crash is the same event (seats.schedules)."""
    seat = company.seat_by_handle(handle) if company is not None else None
    if seat is None:
        raise TaskRefused(404, f"handle: {handle!r} is no seat of the company")
    if not seat.is_agent:
        raise TaskRefused(422, f"handle: {handle!r} is a human seat; a task reaches agent seats only")
    text = (text or "").strip()
    if not text:
        raise TaskRefused(422, "text: a task needs some text")
    if len(text) > MAX_TASK_CHARS:
        raise TaskRefused(422, f"text: a task is at most {MAX_TASK_CHARS} characters")
    data = TaskAssigned(
        agent_id=str(company.agent_id_for(handle)),
        agent_handle=handle,
        agent_role=seat.role or "",
        task_id=task_id or str(uuid.uuid4()),
        task=text,
        assigned_by=assigned_by,
        assigned_by_seat=assigned_by_seat,
        schedule=schedule,
        scheduled_for=scheduled_for,
    )
    envelope = {"id": event_id} if event_id is not None else {}
    return new(data, trace or trace_of(), source="operator" if not schedule else "scheduler", **envelope)


async def publish_task(queue, company, handle: str, text: str, assigned_by: str, assigned_by_seat: str = "") -> Event:
    """Build the task, publish it to the seat's inbox, then record it on the event stream; the
    stamped event the inbox took. The record is best effort: the task is assigned once the
    inbox has it."""
    event = build_task(company, handle, text, assigned_by, assigned_by_seat=assigned_by_seat)
    taken = await queue.publish(topics.agent_inbox(handle), event)
    try:
        await queue.publish(topics.event_subject(taken.type), taken)
    except Exception as exc:
        log.warning("task_record_failed", extra={"seat": handle, "event_id": str(taken.id), "error": str(exc)})
    return taken
