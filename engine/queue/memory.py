"""The in-memory twin's broker (seed 000, "Interfaces": a real broker object plus N clients,
so a test can stop a node and still inspect what its subscription retained).

`MemoryBroker` is the broker: streams chosen by `topics.stream_for`, durable subscriptions
with their own mailboxes and delivery counts, interest retention (a publish to a subject no
durable subscription covers is dropped on an interest stream; a limits stream keeps it), the
dead-letter stream, publish de-duplication and the topic-filtered publish hook behind
broadcast streams. `MemoryBroker.client(node_id)` makes one `MemoryQueue` (the EventQueue
contract, in `memory_consume.py`) per simulated node.

Its timers run on a `Clock` (`clock.py`): real seconds by default, or a `VirtualClock` the
conformance suite moves by hand, so the product's own spacing and ack window are certified
on the twin without waiting them out (seed 000: "the in-memory twin models the backoff
virtually"). The seed's twin modelled the backoff with no timer at all, a failure simply
going to the back of the mailbox; a timer on a virtual clock keeps the order that gave and
certifies the spacing too, which the order alone could not. As JetStream does:
- A NAK's backoff is a timer: the failure is invisible for `tuning.nak_delay(deliveries)`
  while never-delivered mail is served, then joins the redelivery queue. Failures of one
  partition NAK'd together share one timer and come back together.
- The ack clock is real: a message in flight longer than `tuning.ack_wait_seconds` since its
  delivery or its holder's last in-progress acknowledgement goes to the redelivery queue, and
  its next delivery counts. A client heartbeats what its attachments hold every
  `tuning.heartbeat_seconds`, as the JetStream client sends `+WPI`.
- Immediate returns (DEFER, a handed-back drain, a detached or stopped client's in-flight
  mail) join the redelivery queue, served before the mailbox in the order they were
  returned, as the broker serves an immediate NAK before new mail.
What the twin models on purpose rather than by timer: a client that closes hands its
in-flight mail back at once, as the JetStream client's close does; one that is severed (a
process that died) hands back nothing, and its mail returns when its ack clock runs out.
"""
from __future__ import annotations

import asyncio
import logging
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable, NamedTuple

from engine.queue import topics
from engine.queue.broadcast import BufferedTap
from engine.queue.clock import Clock, MonotonicClock, Timer
from engine.queue.contract import STREAM_BUFFER, Depth, StreamHandler, SubscriptionError, Tuning
from events.envelope import Event
from events.errors import EventDecodeError

if TYPE_CHECKING:
    from engine.queue.memory_consume import MemoryQueue

log = logging.getLogger("queue.memory")

DEDUPE_WINDOW_SECONDS = 120.0  # JetStream's default duplicate window, which the embedded broker keeps


@dataclass
class StoredMessage:
    """One message on a stream: its sequence, subject and the bytes the publisher sent."""

    seq: int
    subject: str
    body: bytes
    stored_at: float


class Taken(NamedTuple):
    """A message handed to a consumer, and its count after this delivery."""

    message: StoredMessage
    deliveries: int


@dataclass(frozen=True)
class DeadLetter:
    """A dead letter as the broker holds it: where it came from, why, and its bytes."""

    subject: str          # topics.dlq_subject(topic, group)
    topic: str
    group: str
    deliveries: int
    reason: str           # "max_deliveries" | "undecodable"
    body: bytes

    def event(self) -> Event | None:
        """The dead event, or None when its bytes never were one."""
        try:
            return Event.from_json(self.body)
        except EventDecodeError:
            return None


class Signal:
    """Wakes every coroutine waiting on it; waiters re-check their own condition.

    There is no await between a waiter's check and `wait()`, so a `fire()` cannot slip
    between them on one event loop."""

    def __init__(self) -> None:
        self._event: asyncio.Event | None = None

    def fire(self) -> None:
        if self._event is not None:
            self._event.set()
            self._event = None

    async def wait(self) -> None:
        if self._event is None:
            self._event = asyncio.Event()
        await self._event.wait()


@dataclass
class Stream:
    spec: topics.StreamSpec
    messages: dict[int, StoredMessage] = field(default_factory=dict)
    dedupe: dict[str, float] = field(default_factory=dict)

    @property
    def interest(self) -> bool:
        return self.spec.retention == "interest"


@dataclass
class Durable:
    """One durable subscription (a mailbox): never-delivered mail, the redelivery queue served
    before it, what is in flight and with whom (and its ack timer), what is backing off (and
    its backoff timer), and each message's delivery count."""

    topic: str
    group: str
    stream: Stream
    mailbox: deque[int] = field(default_factory=deque)
    redeliver: deque[int] = field(default_factory=deque)
    in_flight: dict[int, object] = field(default_factory=dict)
    ack_timers: dict[int, Timer] = field(default_factory=dict)
    backing_off: dict[int, Timer] = field(default_factory=dict)
    deliveries: dict[int, int] = field(default_factory=dict)
    signal: Signal = field(default_factory=Signal)
    deleted: bool = False

    @property
    def key(self) -> tuple[str, str]:
        return (self.topic, self.group)

    def covers(self, subject: str) -> bool:
        return topics.subject_matches(self.topic, subject)

    def holds(self, seq: int) -> bool:
        return seq in self.deliveries

    def retained(self) -> list[int]:
        """In-flight first, then the order the mailbox would serve, then what is backing off."""
        return sorted(self.in_flight) + list(self.redeliver) + list(self.mailbox) + sorted(self.backing_off)


class Tap(BufferedTap):
    """One broadcast subscriber: a bounded buffer filled by the publish hook and a task that
    empties it into the handler. A full buffer drops the event (counted in `missed`), so a
    slow subscriber never slows a publisher."""

    def __init__(self, broker: "MemoryBroker", pattern: str, handler: StreamHandler, buffer: int) -> None:
        super().__init__(pattern, handler, buffer, name=f"memory-stream:{pattern}")
        self._broker = broker
        self.start_pump()

    async def close(self) -> None:
        """End the subscription: no further events reach the handler."""
        if self._closed:
            return
        self._broker.remove_tap(self)
        await self.stop_pump()


class MemoryBroker:
    """The twin's broker: every client made by `client()` talks to this one object."""

    def __init__(
        self,
        tuning: Tuning = Tuning(),
        *,
        clock: Clock | None = None,
        dedupe_window_seconds: float = DEDUPE_WINDOW_SECONDS,
        event_retention_hours: float = topics.EVENT_RETENTION_HOURS_DEFAULT,
    ) -> None:
        self.tuning = tuning
        self.clock: Clock = clock if clock is not None else MonotonicClock()
        self.dedupe_window_seconds = dedupe_window_seconds
        self.event_retention_hours = event_retention_hours
        self._streams: dict[str, Stream] = {}
        self._durables: dict[tuple[str, str], Durable] = {}
        self._taps: list[Tap] = []
        self._dead: list[DeadLetter] = []
        self._clients: list["MemoryQueue"] = []
        self._seq = 0

    # -- clients ------------------------------------------------------------------------
    def client(self, node_id: str) -> "MemoryQueue":
        """A new client on this broker: another node attaching to it."""
        from engine.queue.memory_consume import MemoryQueue

        queue = MemoryQueue(self, node_id)
        self._clients.append(queue)
        return queue

    def forget_client(self, queue: "MemoryQueue") -> None:
        if queue in self._clients:
            self._clients.remove(queue)

    # -- streams and storage --------------------------------------------------------------
    def _stream(self, spec: topics.StreamSpec) -> Stream:
        stream = self._streams.get(spec.name)
        if stream is None:
            stream = self._streams[spec.name] = Stream(spec)
        return stream

    def _stream_of(self, subject_or_pattern: str) -> Stream:
        if any(t in ("*", ">") for t in subject_or_pattern.split(".")):
            spec = topics.stream_for_pattern(subject_or_pattern, self.event_retention_hours)
        else:
            spec = topics.stream_for(subject_or_pattern, self.event_retention_hours)
        return self._stream(spec)

    def store(self, subject: str, body: bytes, *, dedupe_id: str | None = None) -> bool:
        """Accept one publish. False for a duplicate inside the window (nothing stored, no hook
        runs); True otherwise -- including a publish an interest stream drops for want of a
        covering subscription, which the broker acknowledges all the same."""
        topics.validate_subject(subject)
        stream = self._stream_of(subject)
        now = self.clock.now()
        if dedupe_id is not None:
            cutoff = now - self.dedupe_window_seconds
            stream.dedupe = {k: t for k, t in stream.dedupe.items() if t > cutoff}
            if dedupe_id in stream.dedupe:
                return False
            stream.dedupe[dedupe_id] = now
        self._seq += 1
        message = StoredMessage(self._seq, subject, body, now)
        covering = [d for d in self._durables.values() if d.stream is stream and d.covers(subject)]
        if covering or not stream.interest:
            stream.messages[message.seq] = message
            self._apply_limits(stream, message)
        for durable in covering:
            durable.mailbox.append(message.seq)
            durable.deliveries[message.seq] = 0
            durable.signal.fire()
        for tap in list(self._taps):
            if topics.subject_matches(tap.pattern, subject):
                tap.offer(body)
        return True

    def publish_raw(self, subject: str, body: bytes) -> bool:
        """Store bytes that need not be an event (a test's poison, another producer's bytes)."""
        return self.store(subject, body)

    def _apply_limits(self, stream: Stream, newest: StoredMessage) -> None:
        """A limits stream's bounds: one message per subject where the spec says so, and age."""
        spec = stream.spec
        gone: list[int] = []
        if spec.max_msgs_per_subject:
            same = [s for s, m in stream.messages.items() if m.subject == newest.subject]
            gone.extend(same[: max(len(same) - spec.max_msgs_per_subject, 0)])
        if spec.max_age_seconds:
            cutoff = newest.stored_at - spec.max_age_seconds
            gone.extend(s for s, m in stream.messages.items() if m.stored_at < cutoff)
        for seq in set(gone):
            stream.messages.pop(seq, None)
            for durable in self._durables.values():
                if durable.stream is stream and durable.holds(seq) and seq not in durable.in_flight:
                    self._unreference(durable, seq)

    def _unreference(self, durable: Durable, seq: int) -> None:
        """Durable no longer holds seq; an interest stream forgets a message nobody holds."""
        durable.deliveries.pop(seq, None)
        durable.in_flight.pop(seq, None)
        for timers in (durable.ack_timers, durable.backing_off):
            timer = timers.pop(seq, None)
            if timer is not None:
                timer.cancel()
        for queue in (durable.mailbox, durable.redeliver):
            try:
                queue.remove(seq)
            except ValueError:
                pass
        stream = durable.stream
        if stream.interest and not any(
            d.stream is stream and d.holds(seq) for d in self._durables.values()
        ):
            stream.messages.pop(seq, None)

    # -- durable subscriptions ----------------------------------------------------------
    def ensure(self, topic: str, group: str) -> Durable:
        """The durable subscription for (topic, group), created from the beginning of what its
        stream still holds if it did not exist; a second call returns the same one."""
        if not group or not isinstance(group, str):
            raise SubscriptionError(f"{topic}: a subscription needs a group")
        topics.validate_pattern(topic)
        durable = self._durables.get((topic, group))
        if durable is not None:
            return durable
        stream = self._stream_of(topic)
        durable = Durable(topic, group, stream)
        for seq, message in stream.messages.items():
            if durable.covers(message.subject):
                durable.mailbox.append(seq)
                durable.deliveries[seq] = 0
        self._durables[(topic, group)] = durable
        return durable

    def durable(self, topic: str, group: str) -> Durable | None:
        return self._durables.get((topic, group))

    def require(self, topic: str, group: str) -> Durable:
        durable = self._durables.get((topic, group))
        if durable is None:
            raise SubscriptionError(f"no subscription {group!r} on {topic}")
        return durable

    def delete(self, topic: str, group: str) -> bool:
        """Destroy the subscription and the mail it retains. False when there was none."""
        durable = self._durables.pop((topic, group), None)
        if durable is None:
            return False
        durable.deleted = True
        for client in list(self._clients):
            client.subscription_deleted(durable)
        for seq in list(durable.deliveries):
            self._unreference(durable, seq)
        durable.signal.fire()
        return True

    def subscriptions(self, pattern: str) -> list[tuple[str, str]]:
        """Every durable subscription whose topic the pattern matches, as its exact pair."""
        topics.validate_pattern(pattern)
        return sorted(k for k in self._durables if topics.subject_matches(pattern, k[0]))

    def pending(self, topic: str, group: str) -> int:
        durable = self.require(topic, group)
        return sum(1 for seq in durable.retained() if seq in durable.stream.messages)

    def depth(self, topic: str, group: str) -> Depth:
        """As JetStream's consumer info counts: `pending` never delivered (the mailbox), `in_flight`
        delivered and unsettled (held by a consumer, or returned for redelivery)."""
        durable = self.require(topic, group)
        held = durable.stream.messages
        waiting = [seq for seq in durable.mailbox if seq in held]
        unsettled = [seq for seq in (*durable.in_flight, *durable.redeliver, *durable.backing_off) if seq in held]
        stored = [held[seq].stored_at for seq in (*waiting, *unsettled)]
        oldest = max(0.0, self.clock.now() - min(stored)) if stored else None
        return Depth(len(waiting), len(unsettled), oldest)

    def dead_letters_within(self, topic: str, group: str, seconds: float) -> int:
        """The pair's dead letters the dead-letter stream holds from the last `seconds`."""
        subject = topics.dlq_subject(topic, group)
        stream = self._streams.get(topics.stream_for(subject, self.event_retention_hours).name)
        if stream is None:
            return 0
        since = self.clock.now() - seconds
        return sum(1 for m in stream.messages.values() if m.subject == subject and m.stored_at >= since)

    # -- delivery -----------------------------------------------------------------------
    def take(self, durable: Durable, holder: object) -> Taken | None:
        """The next message for holder (redeliveries first), counted as one delivery and in
        flight with holder, on its ack clock, until it is settled; None when nothing is
        waiting. A failure still backing off is in neither queue, so a drain collecting
        passes over it, as a real backoff outlasts the collection of the mail that was
        waiting when it failed."""
        if durable.deleted:
            return None
        for queue in (durable.redeliver, durable.mailbox):
            while queue:
                seq = queue.popleft()
                message = durable.stream.messages.get(seq)
                if message is None:  # a limits stream let it go meanwhile
                    self._unreference(durable, seq)
                    continue
                durable.deliveries[seq] += 1
                durable.in_flight[seq] = holder
                self._start_ack_clock(durable, seq, holder)
                return Taken(message, durable.deliveries[seq])
        return None

    def _start_ack_clock(self, durable: Durable, seq: int, holder: object) -> None:
        previous = durable.ack_timers.pop(seq, None)
        if previous is not None:
            previous.cancel()
        when = self.clock.now() + self.tuning.ack_wait_seconds
        durable.ack_timers[seq] = self.clock.call_at(when, lambda: self._ack_window_passed(durable, seq, holder))

    def _ack_window_passed(self, durable: Durable, seq: int, holder: object) -> None:
        """Nobody acknowledged seq, nor said it was in progress, for the whole ack window: it goes
        to the redelivery queue and its next delivery counts. On its last delivery the broker's
        MaxDeliver backstop stops delivering it instead (nobody is there to dead-letter it)."""
        if durable.in_flight.get(seq) is not holder:
            return
        del durable.in_flight[seq]
        durable.ack_timers.pop(seq, None)
        fields = {"topic": durable.topic, "group": durable.group, "deliveries": durable.deliveries.get(seq, 0)}
        if durable.deliveries.get(seq, 0) >= self.tuning.max_deliveries:
            log.error("ack_window_passed_on_last_delivery", extra=fields)
            self._unreference(durable, seq)
            return
        log.warning("ack_window_passed", extra=fields)
        durable.redeliver.append(seq)
        durable.signal.fire()

    def in_progress(self, durable: Durable, holder: object) -> int:
        """Restart the ack clock of everything holder has in flight (JetStream's `+WPI`);
        returns how many messages that was."""
        held = [seq for seq, h in durable.in_flight.items() if h is holder]
        for seq in held:
            self._start_ack_clock(durable, seq, holder)
        return len(held)

    def _held_by(self, durable: Durable, seqs: Iterable[int], holder: object) -> list[int]:
        """The seqs holder still holds: a settle for a message whose ack window passed is stale."""
        return [seq for seq in seqs if durable.in_flight.get(seq) is holder]

    def ack(self, durable: Durable, seqs: Iterable[int], holder: object) -> None:
        for seq in self._held_by(durable, seqs, holder):
            self._unreference(durable, seq)

    def nak(self, durable: Durable, seqs: Iterable[int], holder: object) -> None:
        """A failure: invisible for its backoff while never-delivered mail is served, then back
        on the redelivery queue -- unless that was its last delivery. Messages whose backoff
        ends at one instant share one timer, so a failed partition comes back together."""
        due: dict[float, list[int]] = {}
        now = self.clock.now()
        for seq in self._returnable(durable, self._held_by(durable, seqs, holder)):
            due.setdefault(now + self.tuning.nak_delay(durable.deliveries[seq]), []).append(seq)
        for when, group in due.items():
            timer = self.clock.call_at(when, lambda group=group: self._backoff_over(durable, group))
            for seq in group:
                durable.backing_off[seq] = timer

    def _backoff_over(self, durable: Durable, seqs: list[int]) -> None:
        returned = [seq for seq in seqs if durable.backing_off.pop(seq, None) is not None]
        if returned:
            durable.redeliver.extend(returned)
            durable.signal.fire()

    def give_back(self, durable: Durable, seqs: Iterable[int], holder: object) -> None:
        """An immediate return (DEFER, a handed-back drain, a detach): served before new mail,
        unless that was its last delivery."""
        returned = self._returnable(durable, self._held_by(durable, seqs, holder))
        durable.redeliver.extend(returned)
        if returned:
            durable.signal.fire()

    def give_back_held(self, durable: Durable, holder: object) -> None:
        """Everything holder still has in flight goes back with its count."""
        self.give_back(durable, sorted(s for s, h in durable.in_flight.items() if h is holder), holder)

    def _returnable(self, durable: Durable, seqs: list[int]) -> list[int]:
        """Take seqs out of flight; those on their last delivery are dead-lettered instead."""
        out = []
        for seq in seqs:
            if durable.deliveries[seq] >= self.tuning.max_deliveries:
                self.dead_letter(durable, seq, "max_deliveries")
                continue
            del durable.in_flight[seq]
            timer = durable.ack_timers.pop(seq, None)
            if timer is not None:
                timer.cancel()
            out.append(seq)
        return out

    def dead_letter(self, durable: Durable, seq: int, reason: str) -> None:
        """Publish the message's bytes to its dead-letter subject and terminate it. A message
        already on the dead-letter stream is only terminated: that stream keeps it anyway,
        and dead-lettering a dead letter is how a loop would start."""
        message = durable.stream.messages.get(seq)
        deliveries = durable.deliveries.get(seq, 0)
        self._unreference(durable, seq)
        if message is None:
            return
        fields = {"topic": durable.topic, "group": durable.group, "deliveries": deliveries, "reason": reason}
        if topics.namespace_of(message.subject) == topics.DLQ_ROOT:
            log.error("dead_letter_terminated", extra={**fields, "subject": message.subject})
            return
        subject = topics.dlq_subject(durable.topic, durable.group)
        self._dead.append(DeadLetter(subject, durable.topic, durable.group, deliveries, reason, message.body))
        self.store(subject, message.body)
        log.error("dead_lettered", extra={**fields, "subject": subject})

    # -- broadcast ----------------------------------------------------------------------
    def add_tap(self, pattern: str, handler: StreamHandler, buffer: int = STREAM_BUFFER) -> Tap:
        tap = Tap(self, pattern, handler, buffer)
        self._taps.append(tap)
        return tap

    def remove_tap(self, tap: Tap) -> None:
        if tap in self._taps:
            self._taps.remove(tap)

    # -- inspection (what a test reads after stopping a node) ----------------------------
    def retained(self, topic: str, group: str) -> list[Event]:
        """The events the subscription still holds, in flight first, then in serving order;
        bytes that are not an event are left out (see `dead_letter_records`)."""
        durable = self.require(topic, group)
        out = []
        for seq in durable.retained():
            message = durable.stream.messages.get(seq)
            if message is None:
                continue
            try:
                out.append(Event.from_json(message.body))
            except EventDecodeError:
                continue
        return out

    def delivery_count(self, topic: str, group: str, event_id) -> int | None:
        """How many times the subscription has delivered the retained event, None if not retained."""
        durable = self.require(topic, group)
        for seq in durable.retained():
            message = durable.stream.messages.get(seq)
            if message is None:
                continue
            try:
                if str(Event.from_json(message.body).id) == str(event_id):
                    return durable.deliveries[seq]
            except EventDecodeError:
                continue
        return None

    def dead_letter_records(self, topic: str | None = None, group: str | None = None) -> list[DeadLetter]:
        """Every dead letter, or those of one topic (and group), oldest first."""
        return [
            d for d in self._dead
            if (topic is None or d.topic == topic) and (group is None or d.group == group)
        ]

    def dead_letters(self, topic: str | None = None, group: str | None = None) -> list[Event]:
        """The dead events, or those of one topic (and group); undecodable bytes left out."""
        return [e for e in (d.event() for d in self.dead_letter_records(topic, group)) if e is not None]
