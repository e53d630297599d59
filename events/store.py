"""The event-store writer (seed 002, "The event store"; seed 000, "Publish Listeners").

`EventStoreWriter` is a publish listener: `writer(topic, event)` is called inline on every
publish, after the broker acknowledged it. It only admits the event to a bounded queue --
a turn never waits on its own audit trail -- and a dedicated thread writes what queued, in
batches, on its own database connection: one transaction per batch, `INSERT OR IGNORE` so a
second write of one event (a relayed copy, a custody batch written twice) changes nothing.

What is written is decided by `events.categories`: a type the category map does not place
is left out (and counted), the stored-not-fed class is written with `feed = 0`, and an
`inbound_delivery` row is filed under the delivery's own label. Nothing here raises into
the publisher: a failure is logged and counted in `stats`.
"""
from __future__ import annotations

import logging
import queue
import threading
import time
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from typing import Any, Iterable

import pydantic_core
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections, transaction

from events import categories
from events.envelope import Event

log = logging.getLogger("events.store")

BATCH_RETRY_PAUSE_SECONDS = 0.2  # before the one retry of a batch that met a held lock

DEFAULT_QUEUE_SIZE = 10_000
# 1,000 rows a transaction: large enough that the commit is a small share of a batch,
# small enough (a few MB of payload) that one batch never holds the file for long.
DEFAULT_BATCH_SIZE = 1_000
# A full queue is logged at most this often; every drop is counted regardless.
DROP_LOG_INTERVAL_SECONDS = 10.0

EVENT_COLUMNS: tuple[str, ...] = (
    "event_id",
    "event_time",
    "event_type",
    "source",
    "category",
    "agent_id",
    "agent_role",
    "task_id",
    "channel_id",
    "sender",
    "trace_id",
    "span_id",
    "parent_span_id",
    "node",
    "conversation_key",
    "partition_key",
    "summary",
    "payload",
    "feed",
)
# Promoted out of the event as `event.get(name)` answers (a typed field, an unknown one, or the payload's).
PROMOTED: tuple[str, ...] = ("agent_id", "agent_role", "task_id", "channel_id", "sender", "conversation_key", "partition_key")
# Fields naming further agents an event involves (beside agent_id), for crewlet_event_parties.
PARTY_FIELDS: tuple[str, ...] = ("agent_ids", "participants", "to_agent_id", "from_agent_id")
# A handle the event carries is filed as a party too, so a per-agent filter given a handle
# seeks the same index as one given an id (agent ids are uuid5s, so the two never collide).
PARTY_HANDLE_FIELDS: tuple[str, ...] = ("agent_handle",)

INSERT_EVENT_SQL = (
    f"INSERT OR IGNORE INTO crewlet_events ({', '.join(EVENT_COLUMNS)}) "
    f"VALUES ({', '.join(['%s'] * len(EVENT_COLUMNS))})"
)
INSERT_PARTY_SQL = "INSERT OR IGNORE INTO crewlet_event_parties (event_time, event_id, agent_id) VALUES (%s, %s, %s)"


def db_time(ts: datetime) -> str:
    """`ts` as Django's SQLite backend stores a DateTimeField under USE_TZ: naive UTC text.

    Written out here so a batch of thousands skips the per-value settings lookups; a test
    holds it equal to `connection.ops.adapt_datetimefield_value`.
    """
    if ts.tzinfo is None:
        return str(ts)
    return str(ts.astimezone(timezone.utc))[:-6]  # drop the "+00:00" a UTC-aware value prints


def _text(value: Any) -> str:
    if value.__class__ is str:
        return value
    return "" if value is None else str(value)


def _names(value: Any) -> list[str]:
    """Agent ids named by one field: a string, a list of strings, or objects with `agent_id`/`id`."""
    if value is None or value == "":
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        found = value.get("agent_id") or value.get("id")
        return [str(found)] if found else []
    if isinstance(value, (list, tuple, set)):
        out: list[str] = []
        for item in value:
            out.extend(_names(item))
        return out
    return [str(value)]


_ABSENT = object()
_PARTY_NAMES = ("agent_id", *PARTY_FIELDS, *PARTY_HANDLE_FIELDS)


def _field(wire: dict[str, Any], payload: dict[str, Any], name: str) -> Any:
    """`event.get(name)`, read off the wire form already built: the typed or unknown field
    (flat beside the envelope), else the payload's. A dict lookup instead of a model walk."""
    value = wire.get(name, _ABSENT)
    return payload.get(name) if value is _ABSENT else value


def _parties(wire: dict[str, Any], payload: dict[str, Any]) -> list[str]:
    seen: dict[str, None] = {}
    for name in _PARTY_NAMES:
        value = _field(wire, payload, name)
        if value.__class__ is str:
            if value:
                seen[value] = None
        elif value is not None:
            for agent in _names(value):
                if agent:
                    seen[agent] = None
    return list(seen)


def parties_of(event: Event) -> list[str]:
    """Every agent the event involves (ids, and the handle it carries), each once, in field order."""
    wire = event.to_wire()
    return _parties(wire, wire.get("payload") or {})


def _encode(wire: dict[str, Any]) -> str:
    # pydantic-core's encoder: a few times faster than json.dumps on a turn's kilobytes, and
    # NaN/Infinity become null, so the column's JSON_VALID check never refuses a row.
    return pydantic_core.to_json(wire, inf_nan_mode="null", fallback=str).decode()


def rows_for(event: Event) -> tuple[tuple, list[tuple]] | None:
    """The event's `crewlet_events` row and its party rows, or None for a type the store leaves out."""
    if not categories.is_stored(event.type):
        return None
    wire = event.to_wire()
    payload = wire.get("payload")
    if not isinstance(payload, dict):
        payload = {}
    event_id = event.id.hex
    event_time = db_time(event.timestamp)
    promoted = [_text(_field(wire, payload, name)) for name in PROMOTED]
    if not promoted[5]:
        # A notification carries its conversation as `conversation_identity`: the same key a
        # turn's events carry as conversation_key, so one column answers for both.
        promoted[5] = _text(_field(wire, payload, "conversation_identity"))
    row = (
        event_id,
        event_time,
        categories.row_label(event),
        event.source,
        categories.category_of(event.type),
        *promoted[:5],
        event.trace_id,
        event.span_id,
        event.parent_span_id,
        event.node,
        *promoted[5:],
        event.summary(),
        _encode(wire),
        1 if categories.is_fed(event.type) else 0,
    )
    return row, [(event_time, event_id, agent) for agent in _parties(wire, payload)]


def write_rows(rows: list[tuple], party_rows: list[tuple], using: str = DEFAULT_DB_ALIAS) -> None:
    """Insert prepared rows in one transaction on this thread's connection to `using`."""
    if not rows:
        return
    with transaction.atomic(using=using):
        with connections[using].cursor() as cursor:
            cursor.executemany(INSERT_EVENT_SQL, rows)
            if party_rows:
                cursor.executemany(INSERT_PARTY_SQL, party_rows)


def write_events(events: Iterable[Event], using: str = DEFAULT_DB_ALIAS) -> int:
    """Write `events` now, on the caller's thread, in one transaction; returns how many were admitted.

    Excluded types are left out; an event already stored is left as it is.
    """
    rows: list[tuple] = []
    party_rows: list[tuple] = []
    for event in events:
        built = rows_for(event)
        if built is not None:
            rows.append(built[0])
            party_rows.extend(built[1])
    write_rows(rows, party_rows, using)
    return len(rows)


@dataclass
class WriterStats:
    """What the writer did with what it was handed: every publish is queued, excluded, dropped
    or failed, and every queued event is then written or failed."""

    queued: int = 0    # admitted to the queue
    written: int = 0   # in a committed batch (a row already stored counts too: it is stored)
    excluded: int = 0  # a type the category map leaves out
    dropped: int = 0   # the queue was full, or the writer was closed
    failed: int = 0    # a row could not be built, or its batch could not be written


class _Stop:
    pass


_STOP = _Stop()


class EventStoreWriter:
    """The store's publish listener and the thread that drains it; see the module docstring.

    `writer(topic, event)` never blocks and never raises. `flush(timeout)` returns once
    everything handed over before the call is written; `close()` flushes and stops the thread.
    """

    def __init__(
        self,
        *,
        queue_size: int | None = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
        using: str = DEFAULT_DB_ALIAS,
        name: str = "event-store-writer",
    ) -> None:
        size = queue_size if queue_size is not None else getattr(settings, "EVENT_STORE_QUEUE_SIZE", DEFAULT_QUEUE_SIZE)
        self.queue_size = int(size)
        self.batch_size = batch_size
        self.using = using
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=self.queue_size)
        self._stats = WriterStats()
        self._lock = threading.Lock()
        self._closed = False
        self._last_drop_log = 0.0
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    # -- the publish listener -------------------------------------------------------------
    def __call__(self, topic: str, event: Event) -> None:
        """Hand `event` to the writer thread; excluded types and a full queue are counted, never raised."""
        try:
            if not categories.is_stored(event.type):
                self._count(excluded=1)
                return
            if self._closed:
                self._count(dropped=1)
                self._log_drop("closed")
                return
            self._queue.put_nowait(event)
            self._count(queued=1)
        except queue.Full:
            self._count(dropped=1)
            self._log_drop("full")
        except Exception:
            self._count(failed=1)
            log.exception("event_store_listener_failed", extra={"topic": topic})

    # -- lifecycle ------------------------------------------------------------------------
    @property
    def stats(self) -> WriterStats:
        """A snapshot of the counts."""
        with self._lock:
            return WriterStats(**asdict(self._stats))

    @property
    def backlog(self) -> int:
        """How many events (and flush markers) wait for the thread: the queue's depth, for metrics."""
        return self._queue.qsize()

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until everything queued before this call is written; False when `timeout` ran out."""
        if not self._thread.is_alive():
            return self._queue.empty()
        deadline = None if timeout is None else time.monotonic() + timeout
        done = threading.Event()
        try:
            # The marker waits behind what is queued, so its turn means they are written.
            self._queue.put(done, timeout=timeout)
        except queue.Full:
            return False
        remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
        return done.wait(remaining)

    def close(self, timeout: float | None = None) -> bool:
        """Flush, then stop the thread and release its connection; True when all of it finished in time."""
        if self._closed and not self._thread.is_alive():
            return True
        self._closed = True  # later publishes are dropped (counted), not queued behind the stop
        deadline = None if timeout is None else time.monotonic() + timeout
        flushed = self.flush(timeout)
        remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            self._queue.put(_STOP, timeout=remaining)
        except queue.Full:
            return False
        self._thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return flushed and not self._thread.is_alive()

    # -- the thread -----------------------------------------------------------------------
    def _run(self) -> None:
        try:
            stopping = False
            while not stopping:
                taken = [self._queue.get()]
                while len(taken) < self.batch_size:
                    try:
                        taken.append(self._queue.get_nowait())
                    except queue.Empty:
                        break
                batch: list[Event] = []
                for item in taken:
                    if item is _STOP:
                        stopping = True
                    elif isinstance(item, threading.Event):
                        # Ordering: write what came before the marker, then release the waiter.
                        self._write(batch)
                        batch = []
                        item.set()
                    else:
                        batch.append(item)
                self._write(batch)
        finally:
            connections[self.using].close()

    def _write(self, batch: list[Event]) -> None:
        if not batch:
            return
        rows: list[tuple] = []
        party_rows: list[tuple] = []
        for event in batch:
            try:
                built = rows_for(event)
            except Exception:
                self._count(failed=1)
                log.exception("event_store_row_failed", extra={"event_type": event.type, "event_id": str(event.id)})
                continue
            if built is None:
                self._count(excluded=1)
                continue
            rows.append(built[0])
            party_rows.extend(built[1])
        if not rows:
            return
        for attempt in (1, 2):
            try:
                write_rows(rows, party_rows, self.using)
                self._count(written=len(rows))
                return
            except Exception:
                if attempt == 2:
                    self._count(failed=len(rows))
                    log.exception("event_store_batch_failed", extra={"rows": len(rows)})
                else:
                    # One retry: a batch that met a held lock past the busy timeout usually fits next time.
                    connections[self.using].close()
                    time.sleep(BATCH_RETRY_PAUSE_SECONDS)

    # -- counting -------------------------------------------------------------------------
    def _count(self, **deltas: int) -> None:
        with self._lock:
            for name, delta in deltas.items():
                setattr(self._stats, name, getattr(self._stats, name) + delta)

    def _log_drop(self, why: str) -> None:
        now = time.monotonic()
        with self._lock:
            if now - self._last_drop_log < DROP_LOG_INTERVAL_SECONDS and self._last_drop_log:
                return
            self._last_drop_log = now
            dropped = self._stats.dropped
        log.warning(
            "event_store_dropped",
            extra={"reason": "queue full" if why == "full" else "writer closed", "dropped_total": dropped, "queue_size": self.queue_size},
        )
