"""Watching the node's two links (seed 002: "the coordination KV ... holds a second connection
to it beside the queue's, and both are watched"; "Probes": /ready is 503 while the broker link
is down).

A client's own view of its connection trails the truth: a server that stopped answering
(a stalled or SIGSTOPped process, a partition) leaves the socket open, and the client notices
only when its keep-alive pings go unanswered, minutes later. So the node asks: every
`every` seconds, one round trip on each link (a PING its server must answer within `timeout`).
A link that does not answer reads "down" on the probes -- /ready 503 with reason
`broker_link_down` or `coordination_link_down` -- and "up" again at the first answer. A link
closed for good is the queue's and the store's own business: they stop the node.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Awaitable, Callable

from engine.node.probes import NodeState

log = logging.getLogger("engine.node.links")

EVERY_SECONDS = 5.0    # how often each link is asked: /ready follows a stalled broker within ~7 s
TIMEOUT_SECONDS = 2.0  # seed 002: the NATS client's two-second budget for an answer

Ping = Callable[[float], Awaitable[bool]]


class LinkWatch:
    """One task asking each link in turn; it writes the answers to the node's state."""

    def __init__(self, state: NodeState, *, broker: Ping, coordination: Ping, every: float = EVERY_SECONDS,
                 timeout: float = TIMEOUT_SECONDS) -> None:
        self.state = state
        self.pings = {"broker": broker, "coordination": coordination}
        self.every = every
        self.timeout = timeout
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="link-watch")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task

    async def check_once(self) -> dict[str, str]:
        """Ask both links once (at the same time); write and return what each said."""
        answers = await asyncio.gather(*(ping(self.timeout) for ping in self.pings.values()), return_exceptions=True)
        seen = {}
        for name, answer in zip(self.pings, answers, strict=True):
            link = "up" if answer is True else "down"
            before = self.state.link(name)
            if link != before:
                (log.info if link == "up" else log.warning)(f"{name}_link_{link}", extra={"was": before})
            self.state.set_link(name, link)
            seen[name] = link
        return seen

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.every)
            await self.check_once()
