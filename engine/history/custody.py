"""Custody: the rows of a node without data (seed 002, "Custody: the rows of a node without
data"; seed 000, "Reading the fleet's history").

A node without the data role writes none of its own rows; it hands every event it would have
written to the data nodes, and exactly one of them keeps each:

- `CustodySender` (a node without data) is a publish listener. Events are buffered for at
  most a second -- a turn never waits on its own audit trail -- and published in batches of
  up to 256 events or 1 MiB onto `crewlet.custody.records` (the CREWLET_CUSTODY stream). A
  batch the broker did not acknowledge is sent again under the same id, which the broker
  collapses. The buffer holds 4,096 events while the broker is unreachable; an event that
  finds it full is dropped and counted (`event_custody_dropped`) rather than holding a turn.
- `CustodyKeeper` (a data node) takes batches from the one group `event-custody`, writes each
  into its own event log (rows and an unsettled record in one transaction: events.custody),
  then claims the batch create-only in the coordination store. The claim's winner keeps the
  batch; any other node that wrote it deletes its copy. A batch is acknowledged only once its
  keeper is decided; a store that does not answer leaves the batch written and unsettled and
  hands the message back. A settle pass -- at start, so a crash between writing and claiming
  is settled at the next boot, and then once a minute -- decides what is left.

What the claim decides is kept as long as the history reaches (the claims bucket ages out at
the history's horizon), so a batch delivered again however late finds its keeper.
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Callable

import pydantic_core

from engine.coord.contract import CoordStore, KeyExists, Unavailable
from engine.queue import topics
from engine.queue.contract import Delivery, EventQueue, Outcome
from events import categories
from events import custody as store
from events.envelope import Event, new
from events.errors import EventDecodeError
from events.fleet import ReadRunner
from events.tracing import trace_of
from events.types.wakes import CustodyBatch

log = logging.getLogger("engine.history.custody")

LINGER_SECONDS = 1.0           # seed 002: "Events are buffered for at most a second"
MAX_BATCH_EVENTS = 256         # seed 002: "batches of up to 256 events ...
MAX_BATCH_BYTES = 1024 * 1024  # ... or 1 MiB"
BUFFER_EVENTS = 4096           # seed 002: "The buffer holds 4 096 events while the broker is unreachable"
# One event larger than this cannot ride a batch under the 8 MiB every server carries.
MAX_EVENT_BYTES = 7 * 1024 * 1024
RETRY_BASE_SECONDS = 0.5       # a batch the broker did not take is sent again, 0.5 s doubling ...
RETRY_CAP_SECONDS = 30.0       # ... to 30 s, as the queue's own backoff caps
DROP_LOG_SECONDS = 10.0        # a full buffer is logged at most this often; every drop is counted

CLAIMS_BUCKET = "crewlet_custody"
SETTLE_SECONDS = 60.0          # seed 002: the loser settles "at its next pass, a minute later"
CLAIM_PATIENCE_SECONDS = 30.0  # a handler asks an unanswering store this long before handing the batch back
CLAIM_RETRY_SECONDS = 1.0
SETTLE_AFTER_SECONDS = 5.0     # a pass leaves a batch written this recently to the handler that wrote it


@dataclass
class SenderStats:
    batches: int = 0     # published and acknowledged
    events: int = 0      # inside those batches
    dropped: int = 0     # event_custody_dropped: the buffer was full, or one event too large
    retries: int = 0     # publishes the broker did not acknowledge, sent again


class CustodySender:
    """A node without data: hands its events to the data nodes; see the module docstring."""

    def __init__(self, queue: EventQueue, node_id: str, *, linger: float = LINGER_SECONDS,
                 max_events: int = MAX_BATCH_EVENTS, max_bytes: int = MAX_BATCH_BYTES, capacity: int = BUFFER_EVENTS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.queue = queue
        self.node_id = node_id
        self.linger = linger
        self.max_events = max_events
        self.max_bytes = max_bytes
        self.capacity = capacity
        self.clock = clock
        self.stats = SenderStats()
        self._buffer: list[tuple[Event, float]] = []   # each event and when it was buffered
        self._sending = 0                 # events in the batch being published
        self._kick = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._closing = False
        self._last_drop_log = 0.0

    # -- the publish listener (inline, on the loop) ---------------------------------------------
    def __call__(self, topic: str, event: Event) -> None:
        """Buffer one published event for custody; never blocks, never raises, and costs the
        publisher an append: the encoding happens when a batch is made."""
        if not categories.is_stored(event.type):
            return  # what the store leaves out is left out here too (custody_batch among them)
        if len(self._buffer) + self._sending >= self.capacity:
            return self._drop(event, "the custody buffer is full (the broker is not taking batches)")
        self._buffer.append((event, self.clock()))
        if len(self._buffer) == 1 or len(self._buffer) >= self.max_events:
            self._kick.set()

    def _drop(self, event: Event, why: str, count: int = 1) -> None:
        self.stats.dropped += count
        now = self.clock()
        if not self._last_drop_log or now - self._last_drop_log >= DROP_LOG_SECONDS:
            self._last_drop_log = now
            log.warning("event_custody_dropped", extra={"event_type": event.type, "event_id": str(event.id),
                                                        "why": why, "dropped": self.stats.dropped})

    # -- the loop ----------------------------------------------------------------------------------
    async def start(self) -> None:
        """The custody group exists before the first batch (an interest stream keeps nothing
        nobody subscribes to), then batches go out as they fill or linger."""
        await self.queue.ensure_subscription(topics.CUSTODY_RECORDS, topics.CUSTODY_GROUP)
        self._task = asyncio.create_task(self._run(), name="custody-sender")

    @property
    def buffered(self) -> int:
        """Events waiting for a batch, and in the batch being published."""
        return len(self._buffer) + self._sending

    async def _run(self) -> None:
        while True:
            if not self._buffer:
                if self._closing:
                    return
                self._kick.clear()
                await self._kick.wait()
                continue
            wait = self._buffer[0][1] + self.linger - self.clock()  # the oldest waits a second at most
            if wait > 0 and len(self._buffer) < self.max_events and not self._closing:
                self._kick.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._kick.wait(), wait)
                continue
            taken = self._take()
            if taken:
                await self._send(taken)

    def _take(self) -> list[tuple[dict[str, Any], int]]:
        """The oldest buffered events as wire forms, up to one batch's limits (at least one);
        an event that cannot be encoded, or is too large for any batch, is dropped and counted."""
        taken: list[tuple[dict[str, Any], int]] = []
        size, used = 0, 0
        for event, _ in self._buffer:
            if len(taken) >= self.max_events:
                break
            try:
                wire = event.to_wire()
                event_size = len(pydantic_core.to_json(wire, inf_nan_mode="null", fallback=str))
            except Exception:
                log.exception("event_custody_unencodable", extra={"event_type": event.type, "event_id": str(event.id)})
                used += 1
                self._drop(event, "unencodable")
                continue
            if event_size > MAX_EVENT_BYTES:
                used += 1
                self._drop(event, f"one event of {event_size} bytes cannot ride a custody batch")
                continue
            if taken and size + event_size > self.max_bytes:
                break
            taken.append((wire, event_size))
            size += event_size
            used += 1
        del self._buffer[:used]
        return taken

    async def _send(self, taken: list[tuple[dict[str, Any], int]]) -> None:
        """Publish one batch, again under the same id until the broker takes it."""
        self._sending = len(taken)
        batch_id = uuid.uuid4().hex
        body = CustodyBatch(batch_id=batch_id, events=[w for w, _ in taken], total_bytes=sum(s for _, s in taken))
        batch = new(body, trace_of(), source=self.node_id)
        delay = RETRY_BASE_SECONDS
        try:
            while True:
                try:
                    await self.queue.publish(topics.CUSTODY_RECORDS, batch, dedupe_id=f"custody:{batch_id}")
                    self.stats.batches += 1
                    self.stats.events += len(taken)
                    return
                except Exception as exc:
                    self.stats.retries += 1
                    log.warning("custody_publish_failed", extra={"batch_id": batch_id, "events": len(taken),
                                                                 "error": str(exc), "retry_seconds": delay})
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, RETRY_CAP_SECONDS)
        finally:
            self._sending = 0

    async def close(self, timeout: float) -> bool:
        """Publish what is buffered (no more lingering), within `timeout`; True when all of it went."""
        self._closing = True
        self._kick.set()
        if self._task is None:
            return not self._buffer
        try:
            await asyncio.wait_for(asyncio.shield(self._task), timeout)
            return True
        except TimeoutError:
            lost = self.buffered
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task
            log.error("custody_undelivered_at_stop", extra={"events": lost})
            self.stats.dropped += lost
            return False


# -- the data nodes' side ---------------------------------------------------------------------------
@dataclass
class KeeperStats:
    kept: int = 0        # batches this node keeps
    deleted: int = 0     # batches another node keeps, this node's copy deleted
    undecided: int = 0   # handed back: the coordination store did not answer


class CustodyKeeper:
    """A data node's custody: takes batches from the one group; see the module docstring."""

    name = "custody"

    def __init__(self, *, queue: EventQueue, coord: CoordStore, node_id: str, run_write: ReadRunner,
                 horizon_hours: float, settle_seconds: float = SETTLE_SECONDS,
                 patience_seconds: float = CLAIM_PATIENCE_SECONDS, using: str = "default") -> None:
        self.queue = queue
        self.coord = coord
        self.node_id = node_id
        self.run_write = run_write
        self.horizon_hours = horizon_hours
        self.settle_seconds = settle_seconds
        self.patience_seconds = patience_seconds
        self.using = using
        self.stats = KeeperStats()
        self._task: asyncio.Task | None = None

    async def start(self) -> None:
        """Claims bucket, then the boot's settle pass (a crash between writing and claiming is
        settled here), then the group and the minute's pass."""
        await self.coord.ensure_bucket(CLAIMS_BUCKET, max_age=self.horizon_hours * 3600)
        await self.settle_pass(settle_after=0.0)
        await self.queue.subscribe(topics.CUSTODY_RECORDS, topics.CUSTODY_GROUP, self.handle)
        self._task = asyncio.create_task(self._settle_loop(), name="custody-settle")

    async def stop(self, cut: bool) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task
        await self.queue.detach(topics.CUSTODY_RECORDS, topics.CUSTODY_GROUP)

    # -- one batch -------------------------------------------------------------------------------
    async def handle(self, delivery: Delivery) -> Outcome:
        """Write, claim, settle; ACK once the keeper is decided, NAK while it is not."""
        batch = delivery.event
        batch_id = str(batch.get("batch_id") or "")
        if batch.type != CustodyBatch.TYPE or not batch_id:
            log.error("custody_not_a_batch", extra={"event_type": batch.type, "event_id": str(batch.id)})
            return Outcome.ACK  # nothing to keep: a stray on the custody subject is not worth 25 deliveries
        events = _events_of(batch)
        await self.run_write(store.write_batch, batch_id, batch.source or batch.node, events, using=self.using)
        keeper = await self._decide(batch_id, self.patience_seconds)
        if keeper is None:
            self.stats.undecided += 1
            log.warning("custody_keeper_undecided", extra={"batch_id": batch_id, "waited_seconds": self.patience_seconds})
            return Outcome.NAK  # written and unsettled: the settle pass or the next delivery decides
        await self._settle(batch_id, keeper)
        return Outcome.ACK

    async def claim(self, batch_id: str) -> str | None:
        """The batch's keeper: this node when its create-only claim wins, else the winner's id;
        None when the coordination store did not answer."""
        value = json.dumps({"keeper": self.node_id, "at": time.time()}).encode()
        for _ in range(3):  # a claim that expired between the create and the read is created again
            try:
                await self.coord.create(CLAIMS_BUCKET, batch_id, value)
                return self.node_id
            except KeyExists:
                try:
                    entry = await self.coord.get(CLAIMS_BUCKET, batch_id)
                except Unavailable:
                    return None
                if entry is not None:
                    return str(json.loads(entry.value).get("keeper") or "")
            except Unavailable:
                return None
        return None

    async def _decide(self, batch_id: str, patience: float) -> str | None:
        deadline = time.monotonic() + patience
        while True:
            keeper = await self.claim(batch_id)
            if keeper is not None or time.monotonic() + CLAIM_RETRY_SECONDS > deadline:
                return keeper
            await asyncio.sleep(CLAIM_RETRY_SECONDS)

    async def _settle(self, batch_id: str, keeper: str) -> None:
        if keeper == self.node_id:
            await self.run_write(store.settle_kept, batch_id, using=self.using)
            self.stats.kept += 1
            return
        rows = await self.run_write(store.settle_lost, batch_id, using=self.using)
        self.stats.deleted += 1
        log.info("custody_copy_deleted", extra={"batch_id": batch_id, "keeper": keeper, "rows": rows})

    # -- the settle pass --------------------------------------------------------------------------
    async def settle_pass(self, settle_after: float = SETTLE_AFTER_SECONDS) -> int:
        """Decide every batch written here and left unsettled; how many were settled. Stops at
        the first the store does not answer (the next pass tries again)."""
        before = datetime.now(timezone.utc) - timedelta(seconds=settle_after)
        settled = 0
        for batch_id in await self.run_write(store.unsettled, written_before=before, using=self.using):
            keeper = await self.claim(batch_id)
            if keeper is None:
                log.warning("custody_settle_deferred", extra={"batch_id": batch_id})
                break
            await self._settle(batch_id, keeper)
            settled += 1
        return settled

    async def _settle_loop(self) -> None:
        while True:
            await asyncio.sleep(self.settle_seconds)
            try:
                await self.settle_pass()
            except Exception:
                log.exception("custody_settle_failed")


def _events_of(batch: Event) -> list[Event]:
    """The events a batch carries; one that does not decode is logged and left out."""
    out = []
    for wire in batch.get("events") or []:
        try:
            out.append(Event.from_wire(wire))
        except (EventDecodeError, TypeError, ValueError) as exc:
            log.error("custody_event_undecodable", extra={"batch_id": batch.get("batch_id"), "error": str(exc)})
    return out
