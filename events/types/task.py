"""The `task` category: work reaching a seat (seed 000, "Event Types")."""
from __future__ import annotations

from events.envelope import EventData, register


@register("task_assigned")
class TaskAssigned(EventData):
    """Published to the seat's inbox by the scheduler or an operator."""

    agent_id: str = ""
    agent_handle: str = ""
    agent_role: str = ""
    task: str = ""
    assigned_by: str = ""
    schedule: str = ""

    def summary(self, event) -> str:
        who = self.assigned_by or "someone"
        return f"{who} assigned {self.agent_handle or self.agent_id or 'a seat'}: {self.task[:120]}"
