"""Holds on a seat's inbox, and the budget park built on one (seed 000, "Busy agents queue; held
agents wait on the broker": held, the consumer fetches nothing, so the mail waits on the broker
with its order and its delivery count intact; seed 002, "Token Budgets": "A seat out of room
waits; its mail is not lost").

The names are this node's, on its own client: `no_provider` while the company configures no
model provider, `paused` while a person paused the seat, `budget` while a capped window refuses
it, `draining` while the node lets go of it. A delivery that reached the seat anyway was
deferred, which quiesces the attachment; lifting the last hold undoes that.

The park: a seat whose window is full is held under `budget` and judged again when the window
that refuses it turns over (the one that ends last, where several refuse) or when a revision
applies -- the one that raised the ceiling releases it at once. `seat_budget_parked` and
`seat_budget_park_released` are logged, with the window and when it resets.
"""
from __future__ import annotations

import asyncio
import logging
from datetime import datetime, timezone
from typing import Any, Callable

from seats.budgets import next_reset

log = logging.getLogger("seats.holds")

HOLD_NO_PROVIDER = "no_provider"
HOLD_PAUSED = "paused"
HOLD_BUDGET = "budget"
HOLD_DRAINING = "draining"
HOLDS = (HOLD_NO_PROVIDER, HOLD_PAUSED, HOLD_BUDGET, HOLD_DRAINING)
RECHECK_SECONDS = 5.0  # a park whose check the store did not answer is asked again this much later


class InboxHolds:
    """The named holds this node keeps on one seat's inbox. `may_fetch()` says whether the seat
    may take mail again once none is left (False once the host is stopping or not exclusive)."""

    def __init__(self, queue: Any, inbox: str, group: str, may_fetch: Callable[[], bool],
                 later: Callable[[], None] = lambda: None) -> None:
        self.queue, self.inbox, self.group = queue, inbox, group
        self.may_fetch = may_fetch
        self.later = later  # asked to undo the quiesce once the seat may fetch, when the last lift finds it may not

    @property
    def names(self) -> frozenset[str]:
        return self.queue.holds(self.inbox, self.group)

    async def take(self, name: str) -> None:
        if name not in self.names:
            await self.queue.hold(self.inbox, self.group, name)

    async def lift(self, name: str) -> None:
        """Lift a hold; with none left, undo the quiesce a deferral left behind."""
        if name not in self.names:
            return
        await self.queue.release(self.inbox, self.group, name)
        if self.names or not self.queue.is_attached(self.inbox, self.group):
            return
        if self.may_fetch():
            await self.queue.unquiesce(self.inbox, self.group)
        else:
            self.later()

    async def lift_all(self) -> None:
        """Every hold this process took: a later host of the seat takes its own."""
        for name in HOLDS:
            await self.queue.release(self.inbox, self.group, name)


class BudgetPark:
    """One seat's budget park: `refusal` is the Refusal holding it, None when not parked."""

    def __init__(self, handle: str, holds: InboxHolds, budgets: Any, company: Callable[[], Any]) -> None:
        self.handle = handle
        self.holds = holds
        self.budgets = budgets
        self.company = company
        self.refusal: Any = None
        self._timer: asyncio.Task | None = None

    async def park(self, refusal: Any) -> None:
        """Hold the inbox until the refusing window turns over or a revision raises its ceiling."""
        self.refusal = refusal
        await self.holds.take(HOLD_BUDGET)
        resets_at = resets_at_of(refusal)
        log.info("seat_budget_parked", extra={"seat": self.handle, "scope": getattr(refusal, "scope", ""),
                                              "window": getattr(refusal, "window", ""),
                                              "resets_at": resets_at.isoformat() if resets_at else ""})
        self._cancel_timer()
        if resets_at is not None:
            delay = max((resets_at - datetime.now(timezone.utc)).total_seconds(), 0.0)
            self._timer = asyncio.create_task(self._wake(delay), name=f"budget-park:{self.handle}")

    async def reconsider(self, company: Any) -> bool:
        """Ask the budget again; release the park when nothing refuses. True when released."""
        if self.refusal is None:
            return False
        seat = company.seat_by_handle(self.handle) if company is not None else None
        refusal = await self.budgets.check(company, seat) if self.budgets is not None and seat is not None else None
        if refusal is not None:
            await self.park(refusal)  # still refused: wait for the window that ends last
            return False
        self.refusal = None
        self._cancel_timer()
        await self.holds.lift(HOLD_BUDGET)
        log.info("seat_budget_park_released", extra={"seat": self.handle})
        return True

    def stop(self) -> None:
        self._cancel_timer()

    def describe(self) -> dict | None:
        refusal = self.refusal
        if refusal is None:
            return None
        resets_at = resets_at_of(refusal)
        return {"scope": getattr(refusal, "scope", ""), "period": getattr(refusal, "period", ""),
                "window": getattr(refusal, "window", ""), "spend": getattr(refusal, "spend", 0),
                "ceiling": getattr(refusal, "ceiling", 0), "resets_at": resets_at.isoformat() if resets_at else None}

    async def _wake(self, delay: float) -> None:
        await asyncio.sleep(delay)
        self._timer = None
        try:
            await self.reconsider(self.company())
        except Exception as exc:  # the store did not answer: ask again shortly
            log.warning("seat_budget_park_check_failed", extra={"seat": self.handle, "error": str(exc)})
            self._timer = asyncio.create_task(self._wake(RECHECK_SECONDS), name=f"budget-park:{self.handle}")

    def _cancel_timer(self) -> None:
        if self._timer is not None and self._timer is not asyncio.current_task():
            self._timer.cancel()
        self._timer = None


def resets_at_of(refusal: Any) -> datetime | None:
    """When the refusing window turns over, None for a refusal that names none."""
    try:
        return next_reset(refusal)
    except Exception:
        return None
