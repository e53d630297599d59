"""The coordination bring-up's budget (seed 002, "A clustered node is given longer to create
them": "the whole coordination bring-up bounded at 2 minutes and 5 minutes respectively";
"A request the broker never answers is asked again, not waited on").

A fresh cluster answers its client port seconds before its metadata group and each new
bucket's stream have a leader; until then a coordination read or write goes unanswered (the
store raises `Unavailable`). Unanswered is not an answer: each boot step that talks to the
coordination store is asked again a second later, inside one budget for the whole bring-up,
so three members started together converge instead of failing with
`coord: crewlet_config: the broker did not answer (TimeoutError)`. A refusal (a bad seal, a
bucket short of replicas) is an answer and fails the boot at once, by name.
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Awaitable, Callable, TypeVar

from engine.coord.contract import Unavailable
from engine.node.errors import BootError

log = logging.getLogger("engine.node")

SOLO_BUDGET_SECONDS = 120.0       # seed 002: 2 minutes for a solo node's coordination bring-up
CLUSTERED_BUDGET_SECONDS = 300.0  # seed 002: 5 minutes on a member with peers
RETRY_SECONDS = 1.0               # silence is asked again a second later

T = TypeVar("T")


class BringUp:
    """One budget shared by every coordination step of a boot; the clock starts at the first."""

    def __init__(self, clustered: bool, budget_seconds: float | None = None) -> None:
        self.budget_seconds = budget_seconds or (CLUSTERED_BUDGET_SECONDS if clustered else SOLO_BUDGET_SECONDS)
        self._deadline: float | None = None

    async def step(self, what: str, run: Callable[[], Awaitable[T]]) -> T:
        """`run()`'s result, asking again while the store does not answer; BootError naming the
        step once the bring-up's budget is spent."""
        if self._deadline is None:
            self._deadline = time.monotonic() + self.budget_seconds
        attempts = 0
        while True:
            attempts += 1
            try:
                return await run()
            except Unavailable as exc:
                if time.monotonic() + RETRY_SECONDS > self._deadline:
                    raise BootError(f"coordination: {what}: {exc}; nothing answered within the bring-up's "
                                    f"{self.budget_seconds:g}s") from None
                log.warning("coord_bring_up_unanswered", extra={"step": what, "attempt": attempts, "error": str(exc)})
                await asyncio.sleep(RETRY_SECONDS)
