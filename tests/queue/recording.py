"""What the conformance cases publish and how they watch handlers: labelled probe events and
recorders that keep every delivery, with gates a case can hold a handler on."""
from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone
from typing import Callable

from engine.queue import topics
from engine.queue.contract import Batch, Delivery, Outcome
from events.envelope import Event

PROBE = "conformance_probe"  # a type no build registers: it travels as an unknown type
EPOCH = datetime(2025, 1, 1, tzinfo=timezone.utc)

# Seed 000: the deliveries a message gets before the dead letter, written out rather than read
# from the constant, so a case fails when the product's budget changes.
BUDGET = 25

INBOX = topics.agent_inbox("ada")
GROUP = topics.inbox_group("ada")


def probe(label: str, *, key: str | None = None, at: float | None = None, **payload) -> Event:
    """A probe event named `label`; `key` is its partition key, `at` seconds after EPOCH its timestamp."""
    body = {"label": label, **payload}
    if key is not None:
        body["partition_key"] = key
    envelope = {} if at is None else {"timestamp": EPOCH + timedelta(seconds=at)}
    return Event(type=PROBE, payload=body, **envelope)


def label(event: Event) -> str:
    return event.payload.get("label", "?")


class Recorder:
    """A subscribe handler that records every delivery and answers with `decide(delivery)`."""

    def __init__(self, decide: Callable[[Delivery], Outcome | None] | None = None) -> None:
        self.decide = decide or (lambda d: None)
        self.deliveries: list[Delivery] = []
        self.gate: asyncio.Event | None = None
        self.entered = asyncio.Event()
        self.running = 0
        self.most_at_once = 0

    def hold_at_gate(self) -> asyncio.Event:
        """Make the handler wait on the returned event before answering."""
        self.gate = asyncio.Event()
        return self.gate

    async def __call__(self, delivery: Delivery) -> Outcome | None:
        self.deliveries.append(delivery)
        self.running += 1
        self.most_at_once = max(self.most_at_once, self.running)
        self.entered.set()
        try:
            if self.gate is not None:
                await self.gate.wait()
            return self.decide(delivery)
        finally:
            self.running -= 1

    @property
    def labels(self) -> list[str]:
        return [label(d.event) for d in self.deliveries]

    def of(self, name: str) -> list[Delivery]:
        return [d for d in self.deliveries if label(d.event) == name]


class BatchRecorder:
    """A subscribe_batch handler that records every batch and answers with `decide(batch)`."""

    def __init__(self, decide: Callable[[Batch], Outcome | None] | None = None) -> None:
        self.decide = decide or (lambda b: None)
        self.batches: list[Batch] = []
        self.gate: asyncio.Event | None = None
        self.entered = asyncio.Event()

    def hold_at_gate(self) -> asyncio.Event:
        self.gate = asyncio.Event()
        return self.gate

    async def __call__(self, batch: Batch) -> Outcome | None:
        self.batches.append(batch)
        self.entered.set()
        if self.gate is not None:
            await self.gate.wait()
        result = self.decide(batch)
        if asyncio.iscoroutine(result):
            result = await result
        return result

    @property
    def shapes(self) -> list[list[str]]:
        """Each batch as the labels it carried, in order."""
        return [[label(e) for e in b.events] for b in self.batches]

    @property
    def seen(self) -> list[str]:
        return [name for shape in self.shapes for name in shape]
