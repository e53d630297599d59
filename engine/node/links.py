"""Watching the node's two broker connections (seed 002, "Probes": a node's /ready is 503
"while its broker link is down"; "The coordination KV rides this same connection on purpose":
both connections are watched).

A connection the client still calls open can stop answering -- a member SIGKILLed under it,
a partition, a broker stalled -- and the client only learns it after its ping interval. So the
node asks a bounded question on each, every `interval`: the queue a consumer's info (the
inbound work queue, which every node ensures), the coordination store a leader read of the
activation pointer. A question unanswered within `timeout` marks that link down, and /ready
says which (`broker_link_down`, `coordination_link_down`) until one is answered again.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Awaitable

from engine.coord.contract import CoordStore, Unavailable
from engine.node.probes import NodeState
from engine.queue import topics
from engine.queue.contract import EventQueue
from engine.revisions import ACTIVATION_BUCKET, POINTER_KEY

log = logging.getLogger("engine.node")

INTERVAL_SECONDS = 2.0  # a lease renews every 15 s; a probe period is 5 s: a link is re-read well inside both
TIMEOUT_SECONDS = 2.0   # seed 002: each attempt gets 2 s; a node waiting longer is not renewing


class LinkWatch:
    """One task asking both connections a bounded question every `interval`."""

    def __init__(self, state: NodeState, queue: EventQueue, coord: CoordStore, *,
                 interval: float = INTERVAL_SECONDS, timeout: float = TIMEOUT_SECONDS) -> None:
        self.state = state
        self.queue = queue
        self.coord = coord
        self.interval = interval
        self.timeout = timeout
        self._task: asyncio.Task | None = None

    async def check_once(self) -> tuple[bool, bool]:
        """Ask both at once; (queue answered, coordination answered), written to the state."""
        queue_up, coord_up = await asyncio.gather(
            self._answers(self.queue.pending(topics.NOTIFICATIONS_INBOUND, topics.NOTIFICATIONS_GROUP)),
            self._answers(self.coord.get(ACTIVATION_BUCKET, POINTER_KEY)))
        self._set("broker_link", queue_up)
        self._set("coord_link", coord_up)
        return queue_up, coord_up

    async def _answers(self, question: Awaitable) -> bool:
        """Whether anybody answered: a refusal ("no such bucket") is an answer, silence is not."""
        try:
            await asyncio.wait_for(question, self.timeout)
        except (TimeoutError, Unavailable):
            return False
        except Exception:
            return True
        return True

    def _set(self, link: str, up: bool) -> None:
        now = "up" if up else "down"
        if getattr(self.state, link) != now:
            setattr(self.state, link, now)
            (log.info if up else log.warning)(f"{link}_{now}", extra={"link": link})

    async def run(self, stopping: asyncio.Event) -> None:
        while not stopping.is_set():
            await self.check_once()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stopping.wait(), self.interval)
