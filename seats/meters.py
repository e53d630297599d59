"""The budget meters (seed 000, "Event Types": budget_meters -- "a snapshot of the fleet's
shared token counters, every capped calendar window with its engine-computed state, published
by every node on a fixed tick and at once when a window first turns work away on it, which the
next report supersedes; the live projection reads it"; seed 002, the exclusions table: "a
15-second tick").

Every node runs one `BudgetMetersPublisher` (engine.node.services, every role). It reads the
counters from the coordination store (`Budgets.meter_windows`), so any node's report is the
fleet's, and publishes `budget_meters` (reason `tick`, or `refusal`) on the events stream. The
store keeps none of them (a periodic snapshot, excluded by the category map); the dashboard's
projection applies the newest.

- The tick publishes only when the company caps some window: with no ceiling anywhere there is
  nothing to meter, and a report every 15 s saying so would be noise on the stream.
- A refusal on this node (`Budgets.check` or `charge` turning work away) publishes at once the
  first time its window refuses; the window counts as refusing until a report finds it open
  again (rolled over, or its ceiling raised), after which its next refusal is a first again.
- A store or broker that does not answer costs one report (logged); the next tick tries again.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import datetime, timezone


from engine.queue import topics
from events.envelope import Event, new
from events.tracing import trace_of
from events.types.wakes import BudgetMeters
from seats.budgets import Refusal
from seats.node import SeatsNode

log = logging.getLogger("seats.meters")

TICK_SECONDS = 15.0  # seed 002: "published by every node on a 15-second tick"

WindowKey = tuple[str, str, str, str]  # scope, agent handle, period, window label


class BudgetMetersPublisher:
    """The node service that publishes budget_meters."""

    name = "budget_meters"

    def __init__(self, node: SeatsNode, *, tick_seconds: float = TICK_SECONDS) -> None:
        self.node = node
        self.budgets = node.budgets  # the counters the node's seat hosts charge, so their refusals reach here
        self.tick_seconds = tick_seconds
        self.published = 0
        self._refusing: set[WindowKey] = set()
        self._refused = asyncio.Event()
        self._task: asyncio.Task | None = None

    async def start(self) -> None:
        self.budgets.add_refusal_listener(self._on_refusal)
        self._task = asyncio.create_task(self._run(), name="budget-meters")

    async def stop(self, cut: bool) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def _on_refusal(self, refusal: Refusal) -> None:
        key = (refusal.scope, refusal.handle, refusal.period, refusal.window)
        if key not in self._refusing:
            self._refusing.add(key)
            self._refused.set()

    async def _run(self) -> None:
        reason = "tick"
        while True:
            await self.publish(reason)
            try:
                await asyncio.wait_for(self._refused.wait(), self.tick_seconds)
            except TimeoutError:
                reason = "tick"
            else:
                self._refused.clear()
                reason = "refusal"

    async def publish(self, reason: str) -> Event | None:
        """One report; the event published, or None when there was nothing to meter or it failed."""
        company = self.node.company
        if company is None:
            return None
        try:
            windows = await self.budgets.meter_windows(company)
            if not windows:
                return None
            self._refusing = {k for k in self._refusing if any(
                (w["scope"], w["agent_handle"], w["period"], w["window"]) == k and w["state"] == "refusing"
                for w in windows)}
            event = new(BudgetMeters(windows=windows, reason=reason, taken_at=datetime.now(timezone.utc)), trace_of(),
                        source=self.node.node_id or "engine")
            await self.node.queue.publish(topics.event_subject(event.type), event)
        except Exception as exc:  # an outage costs this report, never the node
            log.warning("budget_meters_unpublished", extra={"reason": reason, "error": str(exc)})
            return None
        self.published += 1
        return event
