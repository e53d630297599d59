"""The EventQueue contract (seed 000, "Interfaces", "Delivery Semantics", "Inbox Batching &
Coalescing", "Publish Listeners", "Broadcast Streams"; DESIGN.md, "The EventQueue contract").

Two implementations sit behind it -- `jetstream.JetStreamQueue` and `memory.MemoryQueue` --
and nothing above `engine/queue/` may tell which one runs. Both are certified by the one
conformance suite in `tests/queue/`.

Semantics every backend keeps:
- Pull, never push: a consumer fetches one message (`subscribe`) or one drain's worth
  (`subscribe_batch`) only when it is ready to run it; a quiesced, paused, held or
  detached subscription holds no mail.
- ACK (the default when a handler returns None), NAK (redelivered after 1 s doubling to
  30 s, behind never-delivered mail), DEFER (returned at once, at the head, and the
  subscription quiesces itself; it costs one delivery like a NAK). A raising handler NAKs.
  Never a republish.
- 25 deliveries, then the message is published to `dlq.{topic}.{group}.{digest}` and
  terminated. Each delivery carries `deliveries_left` (0 on the last).
- The ack clock is real, and short: a message fetched and not settled is invisible to every
  other consumer for the ack window, 60 s, counted from its delivery or from its holder's
  latest in-progress acknowledgement. The backend sends one for everything an attachment
  holds every 20 s (a third of the window) -- while a handler runs, while a drain collects
  and while its partitions wait behind one another -- so handlers never do. A node that dies
  stops heartbeating and its in-flight mail returns within a minute, rather than after
  the seed's 30 minutes, which were sized to cover a wait behind a running turn plus one
  worst-case turn without any heartbeat (seed 000, "The ack clock is real", "The ack
  budget"). What the window now has to cover is two missed heartbeats. An overrun is still
  a redelivery, never a loss: it spends one delivery and the completion ledger skips it.
- The linger is clamped to MAX_LINGER_SECONDS on every read.
- Request/reply (seed 000, "Reading the fleet's history": "the broker's ephemeral
  request/reply -- no stream, no consumer, no stored record"): `reply` answers requests on
  a subject of a request/reply namespace (`topics.check_ephemeral`), `request` asks one and
  waits for one answer. Nothing is stored; nothing is redelivered. NoResponders says nobody
  listens, RequestTimeout that nobody answered in time; a responder that raises answers
  nothing, so its asker times out.
"""
from __future__ import annotations

import enum
import logging
from dataclasses import dataclass
from typing import Awaitable, Callable, Protocol, Sequence, runtime_checkable

from engine.queue.limits import MAX_BATCH_CEILING, MAX_LINGER_SECONDS
from events.envelope import Event

log = logging.getLogger("queue")

MAX_DELIVERIES = 25          # seed 000: sized for handoffs as well as poison
# The ack window. Kept alive by heartbeats, it bounds how long a dead holder's mail is
# invisible: a minute, so a crashed turn is re-run within two minutes of its seat being taken
# again, and close to the 45 s lease TTL after which a successor may take the seat at all.
ACK_WAIT_SECONDS = 60.0
# In-progress acknowledgements per window: one every 20 s, so two can be lost or late (a
# core publish nobody acknowledges; an event loop busy for 40 s) before a live holder's mail
# is redelivered. Each costs one small message per held message, no store write.
HEARTBEATS_PER_WINDOW = 3
NAK_BASE_SECONDS = 1.0       # seed 000: one second, doubling per further failure ...
NAK_CAP_SECONDS = 30.0       # ... up to thirty: the budget spreads over about ten minutes
STREAM_INACTIVE_SECONDS = 60.0  # seed 000, "Broadcast Streams": reaped a minute after the caller goes
STREAM_BUFFER = 256          # a broadcast subscriber's backlog before it starts missing events
REPLY_CONCURRENCY = 8        # requests one responder runs at once; more wait their turn (each is a store read)


class QueueError(Exception):
    """Base error of the queue; `code` keeps a broker's error code when there is one."""

    def __init__(self, message: str, code: int | None = None) -> None:
        self.code = code
        super().__init__(f"queue: {message}")


class Unreachable(QueueError):
    """The broker did not take the call -- it was silent past the call's time, no stream
    answered, or the connection was gone or reconnecting -- so nothing says what was asked is
    wrong: asked again once the client has failed over, it may well succeed. A caller holding
    mail hands it back (NAK) rather than settling it on this failure."""


class SubscriptionError(QueueError):
    """A verb addressed a subscription that does not exist or is not attached here."""


class PatternError(QueueError):
    """A stream pattern that spans every namespace or more than one stream."""


class NoResponders(QueueError):
    """A request met nobody listening on its subject."""


class RequestTimeout(QueueError):
    """A request's responder did not answer inside the request's time."""


class Outcome(enum.Enum):
    ACK = "ack"
    NAK = "nak"
    DEFER = "defer"


@dataclass(frozen=True)
class Tuning:
    """The contract's timings. Tests may shorten them; they never skip a rule, and the
    conformance suite runs the defaults on the twin's virtual clock."""

    max_deliveries: int = MAX_DELIVERIES
    nak_base_seconds: float = NAK_BASE_SECONDS
    nak_cap_seconds: float = NAK_CAP_SECONDS
    ack_wait_seconds: float = ACK_WAIT_SECONDS
    stream_inactive_seconds: float = STREAM_INACTIVE_SECONDS

    def nak_delay(self, deliveries: int) -> float:
        """The spacing before redelivery after the `deliveries`-th delivery failed."""
        return min(self.nak_base_seconds * (2 ** max(deliveries - 1, 0)), self.nak_cap_seconds)

    @property
    def heartbeat_seconds(self) -> float:
        """How often a backend says the mail it holds is still being worked on."""
        return self.ack_wait_seconds / HEARTBEATS_PER_WINDOW


@dataclass(frozen=True)
class Delivery:
    """One delivered message: the event, its subject, and how much delivery budget is left."""

    event: Event
    topic: str
    deliveries: int              # 1 on the first delivery
    deliveries_left: int         # further deliveries before the dead letter; 0 on the last

    @property
    def last(self) -> bool:
        return self.deliveries_left == 0


@dataclass(frozen=True)
class Depth:
    """What a mailbox holds, as the broker counts it (`EventQueue.depth`)."""

    pending: int                        # never delivered yet: waiting for the seat
    in_flight: int                      # delivered and not settled: a turn on it, or waiting out a NAK's backoff
    oldest_age_seconds: float | None    # how long the oldest unsettled message has waited; None when empty

    @property
    def total(self) -> int:
        return self.pending + self.in_flight


@dataclass(frozen=True)
class Batch:
    """One partition of a drain: its deliveries sorted by event timestamp."""

    key: str
    deliveries: tuple[Delivery, ...]

    @property
    def headroom(self) -> int:
        """The smallest per-message `deliveries_left`: what handing this batch back would risk.
        Folded here, by the contract, so no backend can fold it differently."""
        return min(d.deliveries_left for d in self.deliveries)

    @property
    def events(self) -> list[Event]:
        return [d.event for d in self.deliveries]

    @property
    def oldest(self):
        return self.deliveries[0].event.timestamp


def default_partition_key(event: Event) -> str:
    """Anything without a partition key keys uniquely on its id and is never merged."""
    key = event.get("partition_key")
    return str(key) if key else f"event:{event.id}"


@dataclass(frozen=True)
class BatchOptions:
    linger_seconds: float = 0.0
    max_batch: int = 20
    partition_key: Callable[[Event], str] = default_partition_key

    @property
    def effective_linger(self) -> float:
        """Clamped to [0, MAX_LINGER_SECONDS] on every read, so construction cannot bypass the cap."""
        return min(max(float(self.linger_seconds), 0.0), float(MAX_LINGER_SECONDS))

    @property
    def effective_max_batch(self) -> int:
        return min(max(int(self.max_batch), 1), MAX_BATCH_CEILING)


def partition(deliveries: Sequence[Delivery], key: Callable[[Event], str]) -> list[Batch]:
    """Group a drain by key; each batch sorted by event timestamp; batches oldest first
    (by their oldest constituent), so a waiting conversation outranks a hot one's arrivals."""
    groups: dict[str, list[Delivery]] = {}
    for delivery in deliveries:
        try:
            k = key(delivery.event)
        except Exception:  # a key function that fails must not lose the message
            log.exception("partition_key_failed", extra={"event_id": str(delivery.event.id)})
            k = f"event:{delivery.event.id}"
        groups.setdefault(k, []).append(delivery)
    batches = [
        Batch(k, tuple(sorted(ds, key=lambda d: (d.event.timestamp, str(d.event.id))))) for k, ds in groups.items()
    ]
    batches.sort(key=lambda b: (b.oldest, b.key))
    return batches


Handler = Callable[[Delivery], Awaitable["Outcome | None"]]
BatchHandler = Callable[[Batch], Awaitable["Outcome | None"]]
StreamHandler = Callable[[Event], Awaitable[None]]
PublishListener = Callable[[str, Event], None]
Responder = Callable[[bytes], Awaitable[bytes]]
OptionsSource = BatchOptions | Callable[[], BatchOptions]


def read_options(source: OptionsSource) -> BatchOptions:
    """Options are read on every drain, so a hot reload applies without re-subscribing."""
    return source() if callable(source) else source


@runtime_checkable
class StreamSubscription(Protocol):
    pattern: str

    @property
    def missed(self) -> int:
        """Events this subscriber missed because it fell behind."""

    async def close(self) -> None: ...


@runtime_checkable
class ReplySubscription(Protocol):
    """A responder listening on one request/reply subject."""

    subject: str

    async def close(self) -> None:
        """Stop listening; requests it is answering are cancelled (their askers time out)."""


@runtime_checkable
class EventQueue(Protocol):
    """What every backend provides. Async throughout; `node_id` stamps what it publishes."""

    node_id: str
    tuning: Tuning

    async def publish(self, topic: str, event: Event, *, dedupe_id: str | None = None) -> Event:
        """Publish; return the stamped copy once the broker acknowledged, after listeners ran.
        `dedupe_id` collapses a second publish of the same id inside the broker's window."""

    async def ensure_subscription(self, topic: str, group: str) -> None:
        """Create the durable mailbox, detached, from the beginning; a second call is a no-op."""

    async def list_subscriptions(self, pattern: str) -> list[tuple[str, str]]:
        """Every durable subscription under pattern, attached or not, as its exact (topic, group)."""

    async def subscribe(self, topic: str, group: str, handler: Handler) -> None:
        """Attach this process to the subscription and run handler per message, one at a time.
        Ensures the subscription first (idempotent), so attaching never races its creation;
        SubscriptionError when this client is already attached to (topic, group)."""

    async def subscribe_batch(self, topic: str, group: str, options: OptionsSource, handler: BatchHandler) -> None:
        """Attach and dispatch drains partition by partition (seed 000, "Inbox Batching").
        Ensures the subscription first, as `subscribe` does."""

    async def subscribe_stream(
        self, pattern: str, handler: StreamHandler, *, buffer: int = STREAM_BUFFER
    ) -> StreamSubscription:
        """Broadcast from now, acking nothing; PatternError for a pattern spanning every namespace
        or several streams. Up to `buffer` events wait for a slow handler; past that the
        subscriber misses events (counted in `missed`) rather than slowing anyone."""

    def add_publish_listener(self, listener: PublishListener) -> None: ...

    async def reply(self, subject: str, responder: Responder) -> ReplySubscription:
        """Answer requests on `subject` (a request/reply subject: TopicError otherwise): each
        request's bytes go to `responder`, whose bytes go back to the asker. Up to
        REPLY_CONCURRENCY requests run at once. A responder that raises answers nothing."""

    async def request(self, subject: str, payload: bytes, *, timeout: float) -> bytes:
        """Ask on `subject` and return the first answer. NoResponders when nothing listens
        there; RequestTimeout when nothing answered within `timeout` seconds."""

    async def quiesce(self, topic: str, group: str) -> None: ...

    async def unquiesce(self, topic: str, group: str) -> None: ...

    async def detach(self, topic: str, group: str) -> None:
        """Stop this process's consumer; the durable subscription and its mail survive. A handler
        still running is cancelled and what it held goes back at once, at the head, with its
        delivery count (through the dead-letter check), so a peer takes it without waiting out
        the ack window. Detaching what is not attached here is a no-op."""

    async def delete_subscription(self, topic: str, group: str) -> None:
        """Destroy the subscription and the mail it retains; needs no local attachment."""

    async def pause_delivery(self, topic: str, group: str) -> None: ...

    async def resume_delivery(self, topic: str, group: str) -> None: ...

    async def hold(self, topic: str, group: str, name: str) -> None:
        """Add a named hold; while any is present the consumer fetches nothing."""

    async def release(self, topic: str, group: str, name: str) -> None:
        """Lift a named hold; lifting the last resumes delivery with order and counts intact."""

    def holds(self, topic: str, group: str) -> frozenset[str]: ...

    def is_attached(self, topic: str, group: str) -> bool: ...

    async def ping(self, timeout: float) -> bool:
        """One round trip to the broker within `timeout` seconds: True when it answered. A
        connection can look open while the server behind it has stopped answering; this is
        how the node finds out (seed 002, "Probes": /ready while the broker link is down)."""

    async def pending(self, topic: str, group: str) -> int:
        """Messages the subscription retains that nobody has acked (the mailbox depth)."""

    async def depth(self, topic: str, group: str) -> Depth:
        """The mailbox depth split as the broker's consumer info splits it -- never delivered,
        and delivered but unsettled -- with the age of the oldest unsettled message (the
        dashboard's "is it healthy"). SubscriptionError when the subscription does not exist."""

    async def dead_letters(self, topic: str, group: str, within_seconds: float) -> int:
        """How many of the pair's messages were dead-lettered (`dlq.{topic}.{group}.{digest}`)
        in the last `within_seconds`; 0 when none ever were."""

    async def close(self) -> None:
        """Detach everything (as `detach` does), end broadcast subscriptions, drain the connection."""
