"""The `task` category: work reaching a seat (seed 000, "Event Types").

Including a detached coding run (the execution of one) and a schedule firing (which creates
one). There is no task lifecycle here: work's own record is the tracker's history.
"""
from __future__ import annotations

from datetime import datetime

from events.envelope import register
from events.types.shapes import SeatEvent, because, count, duration, person, possessive


@register("task_assigned")
class TaskAssigned(SeatEvent):
    """Published to the seat's inbox by the scheduler or an operator. A scheduled task names its
    `schedule` and the due time it was fired for (`scheduled_for`); the turn's scheduled_timeout
    guard reads them."""

    task_id: str = ""
    task: str = ""
    assigned_by: str = ""
    assigned_by_seat: str = ""
    schedule: str = ""
    scheduled_for: datetime | None = None

    def summary(self, event) -> str:
        who = person(self.assigned_by_seat, self.assigned_by)
        return f"{who} assigned {self.agent_handle or self.agent_id or 'a seat'}: {self.task[:120]}"


class SandboxRunEvent(SeatEvent):
    """A detached coding run, named by its run id, the task it executes and the turn that launched it."""

    run_id: str = ""
    task_id: str = ""
    turn_id: str = ""
    work_key: str = ""

    @property
    def run(self) -> str:
        return f"{possessive(self.seat)} coding run{' ' + self.run_id if self.run_id else ''}"


@register("sandbox_run_started")
class SandboxRunStarted(SandboxRunEvent):
    """A seat launched a coding run; the seat's inbox is held from here until the run settles or parks."""

    repo: str = ""
    branch: str = ""
    brief: str = ""
    resumed: bool = False

    def summary(self, event) -> str:
        verb = "resumed" if self.resumed else "started"
        where = f" on {self.repo}" if self.repo else ""
        return f"{self.seat} {verb} coding run{' ' + self.run_id if self.run_id else ''}{where}"


@register("sandbox_clarification_requested")
class SandboxClarificationRequested(SandboxRunEvent):
    """A run parked on a question for a person; the seat's inbox is released so the answer can reach it."""

    question: str = ""
    asked_of: str = ""

    def summary(self, event) -> str:
        whom = f" {self.asked_of}" if self.asked_of else ""
        return f"{self.run} asked{whom}{because(self.question)}"


@register("sandbox_run_completed")
class SandboxRunCompleted(SandboxRunEvent):
    """A run settled with a result."""

    outcome: str = ""
    result: str = ""
    url: str = ""
    duration_ms: int = 0
    tokens_in: int = 0
    tokens_out: int = 0

    def summary(self, event) -> str:
        return f"{self.run} completed in {duration(self.duration_ms)}{because(self.outcome)}"


@register("sandbox_run_failed")
class SandboxRunFailed(SandboxRunEvent):
    """A run lost, once: its id and instant are the ending recorded on the run's row, so a node
    finishing an ending another decided repeats the same event (the store keys on it)."""

    error: str = ""
    error_kind: str = ""
    reason: str = ""
    duration_ms: int = 0

    def summary(self, event) -> str:
        return f"{self.run} failed{because(self.error or self.reason or self.error_kind)}"


@register("sandbox_run_answered")
class SandboxRunAnswered(SandboxRunEvent):
    """What an answer to a parked run's question became: resumed, not_awaiting, gone or declined,
    by which route (chat or operator) and from whom."""

    outcome: str = ""
    route: str = ""
    answered_by: str = ""
    answered_by_seat: str = ""

    def summary(self, event) -> str:
        who = person(self.answered_by_seat, self.answered_by)
        by = f" by {self.route}" if self.route else ""
        return f"{who} answered {self.run}{by}{because(self.outcome)}"

    def actor(self, event) -> str:
        return person(self.answered_by_seat, self.answered_by, event.source, default="system")


@register("scheduled_task_fired")
class ScheduledTaskFired(SeatEvent):
    """A schedule fired and created a task for a seat: for the due time `scheduled_for` on the
    company's clock (`timezone`), with `missed` the due times before it that passed while no
    node could fire them (fired once, never one task each). `manual` marks a fire an operator
    asked for (`fired_by`), which no due time stands behind."""

    schedule: str = ""
    cron: str = ""
    timezone: str = ""
    task_id: str = ""
    task: str = ""
    scheduled_for: datetime | None = None
    missed: int = 0
    manual: bool = False
    fired_by: str = ""

    def summary(self, event) -> str:
        name = f"schedule {self.schedule}" if self.schedule else "a schedule"
        how = f" (by {self.fired_by})" if self.manual else (f" ({count(self.missed, 'missed fire')} before it)" if self.missed else "")
        return f"{name} fired for {self.seat}{how}{because(self.task)}"

    def actor(self, event) -> str:
        return self.fired_by if self.manual and self.fired_by else "scheduler"
