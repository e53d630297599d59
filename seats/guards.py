"""The guards a turn runs under (seed 000, "Event Types": `turn.guard_breach`, "runtime invariant
fired (stall, max_iter, depth_cap, scheduled_timeout). A failed turn: the seat's last_error,
never a stop").

- `depth_cap`: the trigger's delegation depth (the envelope's; a merged trigger carries its
  deepest constituent's, so batching cannot launder it) above `turns.depth_cap`. Checked before
  the first round: no model is called.
- `max_iter`: a turn that would open more model rounds than the seat's `max_iter` (else
  `turns.max_iter`). Checked before each round.
- `stall`: the same tool called with the same arguments `turns.stall_repeats` times in one turn.
  Checked when the calls are asked for, before the repeat runs.
- `scheduled_timeout`: a scheduled task's turn (task_assigned naming its schedule) running past
  `turns.scheduled_timeout_seconds` of wall time. Checked before each round, and bounding each
  model call and each round of tools by what is left.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Callable, Sequence

from engine.config.company import Company, Seat
from events.envelope import Event
from seats.providers.base import ToolCall


@dataclass(frozen=True)
class Breach:
    """A guard that fired: which, its limit, the round it fired in, and what happened."""

    guard: str
    limit: int
    iteration: int
    detail: str


def is_scheduled(trigger: Event) -> bool:
    """Whether the trigger is a scheduled task (the scheduler names its schedule on it)."""
    return trigger.type == "task_assigned" and bool(trigger.get("schedule"))


class Guards:
    """The guards of one turn, from the company, the seat and the trigger."""

    def __init__(self, company: Company, seat: Seat, trigger: Event, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.max_iter = company.max_iter_for(seat)
        self.stall_repeats = company.turns.stall_repeats
        self.depth_cap = company.turns.depth_cap
        self.depth = trigger.delegation_depth
        self.timeout = company.turns.scheduled_timeout_seconds if is_scheduled(trigger) else None
        self.deadline = clock() + self.timeout if self.timeout is not None else None
        self._seen: dict[str, int] = {}

    def at_start(self) -> Breach | None:
        if self.depth > self.depth_cap:
            return Breach("depth_cap", self.depth_cap, 0,
                          f"woken at delegation depth {self.depth}, past the cap of {self.depth_cap}")
        return None

    def before_round(self, number: int) -> Breach | None:
        if number > self.max_iter:
            return Breach("max_iter", self.max_iter, number - 1,
                          f"the model was still calling tools after {self.max_iter} rounds")
        return self.out_of_time(number - 1)

    def out_of_time(self, number: int) -> Breach | None:
        left = self.remaining()
        if left is not None and left <= 0:
            return Breach("scheduled_timeout", self.timeout or 0, number,
                          f"a scheduled task's turn ran past {self.timeout} s")
        return None

    def remaining(self) -> float | None:
        """Seconds left before the scheduled timeout; None when the turn has none."""
        return None if self.deadline is None else self.deadline - self.clock()

    def on_calls(self, number: int, calls: Sequence[ToolCall]) -> Breach | None:
        """Count the calls asked for; a breach when one is the stall_repeats-th of its kind."""
        for call in calls:
            key = call.name + "\0" + json.dumps(call.arguments, sort_keys=True, default=str)
            self._seen[key] = self._seen.get(key, 0) + 1
            if self._seen[key] >= self.stall_repeats:
                return Breach("stall", self.stall_repeats, number,
                              f"{call.name} was called {self.stall_repeats} times with the same arguments")
        return None
