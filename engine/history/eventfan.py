"""The node's side of the fleet's history reads (seed 000, "Reading the fleet's history": "The
question travels, not the data ... over the broker's ephemeral request/reply -- no stream, no
consumer, no stored record ... The roster is the fleet's live node leases").

- `QueueTransport`: a question to one node, on `crewlet.eventfan.{node}` over the queue's
  request/reply; the queue's NoResponders and RequestTimeout become the coverage's reasons.
- `presence_roster`: the live nodes, read from the presence leases (kept a second, so a busy
  screen does not read the lease store once per page).
- `HistoryAnswerer`: this node's answers, every question read on the store's threads
  (events.questions does the reading, the version check and the cut).
- `fleet_history`: the node's `FleetReads`, wired from those.
"""
from __future__ import annotations

import logging
import time
from typing import Callable

from django.db import DEFAULT_DB_ALIAS

from engine.coord.leases import LeaseManager, presence_key
from engine.queue import topics
from engine.queue.contract import EventQueue, NoResponders, QueueError, ReplySubscription, RequestTimeout
from events.questions import REPLY_BUDGET_BYTES, answer_bytes
from events.fleet import FLEET_READ_SECONDS, AskFailed, FleetReads, ReadRunner, Roster

log = logging.getLogger("engine.history")

ROSTER_SECONDS = 1.0  # the roster is read again after a second: a node's presence changes in lease TTLs


class QueueTransport:
    """Questions to other nodes over the queue's request/reply."""

    def __init__(self, queue: EventQueue, budget: float = FLEET_READ_SECONDS) -> None:
        self.queue = queue
        self.budget = budget  # what a timeout is named against: the asker's whole budget, not what was left of it

    async def ask(self, node_id: str, question: bytes, timeout: float) -> bytes:
        subject = topics.eventfan_subject(node_id)
        try:
            return await self.queue.request(subject, question, timeout=timeout)
        except NoResponders:
            raise AskFailed("no_responders", "the node does not listen for history questions (stopping, or not "
                                             "serving yet)") from None
        except RequestTimeout:
            raise AskFailed("timeout", f"no answer inside the {self.budget:g} s fleet read budget") from None
        except QueueError as exc:
            raise AskFailed("unreachable", str(exc)) from None


def presence_roster(leases: LeaseManager, *, clock: Callable[[], float] = time.monotonic,
                    max_age: float = ROSTER_SECONDS) -> Roster:
    """The live nodes' ids, as their presence leases say, read again after `max_age` seconds."""
    cached: dict[str, object] = {"at": None, "ids": []}

    async def live() -> list[str]:
        now = clock()
        if cached["at"] is None or now - cached["at"] >= max_age:
            records = await leases.list(presence_key(""))
            cached["ids"], cached["at"] = sorted({r.holder for r in records}), now
        return list(cached["ids"])

    return live


class HistoryAnswerer:
    """This node's answers to the fleet's history questions (every node runs one)."""

    name = "history_answers"

    def __init__(self, *, queue: EventQueue, node_id: str, horizon_hours: float, run_read: ReadRunner,
                 budget: int = REPLY_BUDGET_BYTES, using: str = DEFAULT_DB_ALIAS) -> None:
        self.queue = queue
        self.using = using
        self.node_id = node_id
        self.horizon_hours = horizon_hours
        self.run_read = run_read
        self.budget = budget
        self._reply: ReplySubscription | None = None

    async def start(self) -> None:
        self._reply = await self.queue.reply(topics.eventfan_subject(self.node_id), self.answer)

    async def answer(self, raw: bytes) -> bytes:
        return await self.run_read(answer_bytes, raw, node_id=self.node_id, horizon_hours=self.horizon_hours,
                                   budget=self.budget, using=self.using)

    async def stop(self, cut: bool) -> None:
        if self._reply is not None:
            try:
                await self._reply.close()
            except Exception as exc:
                log.debug("history_answers_close_failed", extra={"error": str(exc)})
            self._reply = None


def fleet_history(*, queue: EventQueue, leases: LeaseManager, node_id: str, horizon_hours: float,
                  run_read: ReadRunner) -> FleetReads:
    """The node's fleet reads: its own store, and every live peer over the queue."""
    return FleetReads(node_id=node_id, horizon_hours=horizon_hours, transport=QueueTransport(queue),
                      roster=presence_roster(leases), run_read=run_read)
