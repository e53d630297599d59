"""The in-memory twin's client: `MemoryQueue`, the EventQueue contract over one `MemoryBroker`
(seed 000, "Delivery Semantics", "Inbox Batching & Coalescing", "Publish Listeners",
"Broadcast Streams"; the contract is `engine/queue/contract.py`).

One client is one simulated node. It JSON-round-trips everything it carries, so unknown
types travel losslessly and nothing a handler gets shares identity with what was published.
Each attachment is one consume loop (an asyncio task) that fetches one message, or one drain,
only when it is ready to run it: a quiesced, paused, held or detached attachment fetches
nothing, so it holds no mail. While it holds mail -- a handler running, a drain collecting
or waiting behind a partition -- the client's heartbeat keeps that mail's ack clock from
running out, every `tuning.heartbeat_seconds` on the broker's clock, as the JetStream client
sends `+WPI`; so seat code never acknowledges progress itself.
"""
from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from engine.queue import topics
from engine.queue.broadcast import run_publish_listeners
from engine.queue.replies import ReplyTasks
from engine.queue.contract import (
    STREAM_BUFFER,
    BatchHandler,
    Delivery,
    Depth,
    Handler,
    OptionsSource,
    Outcome,
    NoResponders,
    PatternError,
    PublishListener,
    ReplySubscription,
    RequestTimeout,
    Responder,
    StreamHandler,
    StreamSubscription,
    SubscriptionError,
    Unreachable,
    partition,
    read_options,
)
from events.envelope import Event
from events.errors import EventDecodeError

if TYPE_CHECKING:
    from engine.queue.clock import Timer
    from engine.queue.memory import Durable, MemoryBroker, StoredMessage, Taken

log = logging.getLogger("queue.memory")

Key = tuple[str, str]


class MemoryReply:
    """A responder listening on one subject of the twin's broker."""

    def __init__(self, queue: "MemoryQueue", subject: str, responder: Responder) -> None:
        self.queue = queue
        self.subject = subject
        self.tasks = ReplyTasks(subject, responder)

    async def close(self) -> None:
        self.queue.broker.remove_responder(self)
        self.queue.forget_reply(self)
        await self.tasks.close()


@dataclass(eq=False)
class Attachment:
    """This client's consumer on one durable subscription."""

    durable: "Durable"
    mode: str                     # "one" | "batch"
    quiesced: bool = False
    active: bool = True
    task: asyncio.Task | None = field(default=None, repr=False)

    @property
    def key(self) -> Key:
        return self.durable.key


class MemoryQueue:
    """One node's client of a `MemoryBroker`; implements every verb of the EventQueue contract."""

    def __init__(self, broker: "MemoryBroker", node_id: str) -> None:
        self.node_id = node_id
        self.tuning = broker.tuning
        self._broker = broker
        self._listeners: list[PublishListener] = []
        self._attachments: dict[Key, Attachment] = {}
        self._holds: dict[Key, set[str]] = {}
        self._paused: set[Key] = set()
        self._streams: list[StreamSubscription] = []
        self._replies: list[MemoryReply] = []
        self._closed = False
        self._severed = False
        self._heartbeat: "Timer | None" = None
        self.in_progress_sent = 0  # in-progress acknowledgements made, one per message per beat

    @property
    def broker(self) -> "MemoryBroker":
        return self._broker

    def _check_open(self) -> None:
        if self._closed:
            raise Unreachable(f"the client of node {self.node_id} is closed")

    # -- publishing -----------------------------------------------------------------------
    async def publish(self, topic: str, event: Event, *, dedupe_id: str | None = None) -> Event:
        """Stamp `node` when the event names none, store the JSON bytes, then run the publish
        listeners inline on the stamped copy; return that copy. A duplicate `dedupe_id`
        inside the window stores nothing and runs no listener."""
        self._check_open()
        stamped = event.with_node(self.node_id)
        if not self._broker.store(topic, stamped.to_json(), dedupe_id=dedupe_id):
            log.info("publish_duplicate", extra={"topic": topic, "dedupe_id": dedupe_id})
            return stamped
        await run_publish_listeners(self._listeners, topic, stamped)
        return stamped

    def add_publish_listener(self, listener: PublishListener) -> None:
        """Run listener(topic, stamped_event) after every publish this client makes."""
        self._listeners.append(listener)

    # -- request/reply --------------------------------------------------------------------
    async def reply(self, subject: str, responder: Responder) -> ReplySubscription:
        """Answer requests on `subject`; see the contract."""
        self._check_open()
        topics.check_ephemeral(subject)
        handle = MemoryReply(self, subject, responder)
        self._broker.add_responder(handle)
        self._replies.append(handle)
        return handle

    def forget_reply(self, handle: MemoryReply) -> None:
        if handle in self._replies:
            self._replies.remove(handle)

    async def request(self, subject: str, payload: bytes, *, timeout: float) -> bytes:
        """Ask one responder on `subject`; the bytes are copied both ways, as a wire copies them."""
        self._check_open()
        topics.check_ephemeral(subject)
        target = self._broker.responder_for(subject)
        if target is None:
            raise NoResponders(f"no responder on {subject}")
        answered: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()

        async def send(answer: bytes) -> None:
            if not answered.done():
                answered.set_result(bytes(answer))

        target.tasks.spawn(bytes(payload), send)
        try:
            return await asyncio.wait_for(answered, timeout)
        except TimeoutError:
            raise RequestTimeout(f"no answer on {subject} within {timeout:g}s") from None

    # -- subscriptions --------------------------------------------------------------------
    async def ensure_subscription(self, topic: str, group: str) -> None:
        """Create the durable mailbox, detached, from the beginning; a second call is a no-op."""
        self._check_open()
        self._broker.ensure(topic, group)

    async def list_subscriptions(self, pattern: str) -> list[tuple[str, str]]:
        """Every durable subscription under pattern, attached or not, as its exact (topic, group)."""
        return self._broker.subscriptions(pattern)

    async def pending(self, topic: str, group: str) -> int:
        """Messages the subscription retains that nobody has acked: waiting plus in flight."""
        return self._broker.pending(topic, group)

    async def depth(self, topic: str, group: str) -> Depth:
        """Never delivered, delivered and unsettled, and the oldest unsettled message's age."""
        return self._broker.depth(topic, group)

    async def dead_letters(self, topic: str, group: str, within_seconds: float) -> int:
        """The pair's dead letters from the last `within_seconds`."""
        return self._broker.dead_letters_within(topic, group, within_seconds)

    async def delete_subscription(self, topic: str, group: str) -> None:
        """Destroy the subscription and its mail, wherever it is attached; a missing one is a no-op."""
        self._check_open()
        self._broker.delete(topic, group)

    def subscription_deleted(self, durable: "Durable") -> None:
        """The broker's notice that a subscription this client may be attached to is gone."""
        attachment = self._attachments.get(durable.key)
        if attachment is not None and attachment.durable is durable:
            attachment.active = False
            del self._attachments[durable.key]

    # -- attaching ------------------------------------------------------------------------
    async def subscribe(self, topic: str, group: str, handler: Handler) -> None:
        """Attach and run handler per message, one at a time, in a consume loop of its own."""
        attachment = self._attach(topic, group, "one")
        attachment.task = asyncio.create_task(
            self._consume_one(attachment, handler), name=f"memory-consume:{self.node_id}:{group}:{topic}"
        )

    async def subscribe_batch(self, topic: str, group: str, options: OptionsSource, handler: BatchHandler) -> None:
        """Attach and dispatch drains partition by partition; options are read every drain."""
        attachment = self._attach(topic, group, "batch")
        attachment.task = asyncio.create_task(
            self._consume_batches(attachment, options, handler),
            name=f"memory-drain:{self.node_id}:{group}:{topic}",
        )

    def _attach(self, topic: str, group: str, mode: str) -> Attachment:
        self._check_open()
        if (topic, group) in self._attachments:
            raise SubscriptionError(f"{group!r} on {topic} is already attached on node {self.node_id}")
        attachment = Attachment(self._broker.ensure(topic, group), mode)
        self._attachments[(topic, group)] = attachment
        if self._heartbeat is None:
            self._beat_later()
        return attachment

    async def ping(self, timeout: float) -> bool:
        """In process there is no server to stop answering: True until the client is closed."""
        await asyncio.sleep(0)
        return not self._closed

    # -- the heartbeat ----------------------------------------------------------------------
    def _beat_later(self) -> None:
        clock = self._broker.clock
        self._heartbeat = clock.call_at(clock.now() + self.tuning.heartbeat_seconds, self._beat)

    def _beat(self) -> None:
        """Say every message this client's attachments hold is still being worked on."""
        if self._closed:
            return
        for attachment in list(self._attachments.values()):
            self.in_progress_sent += self._broker.in_progress(attachment.durable, attachment)
        self._beat_later()

    def _stop_beating(self) -> None:
        if self._heartbeat is not None:
            self._heartbeat.cancel()

    def is_attached(self, topic: str, group: str) -> bool:
        return (topic, group) in self._attachments

    def _ready(self, attachment: Attachment) -> bool:
        """Whether this attachment may fetch (or keep what it fetched): attached, not quiesced,
        not paused, no hold."""
        key = attachment.key
        return (
            attachment.active
            and not attachment.durable.deleted
            and not attachment.quiesced
            and key not in self._paused
            and not self._holds.get(key)
        )

    def _poke(self, key: Key) -> None:
        """Wake the consumers of key so they re-read their state."""
        durable = self._broker.durable(*key)
        if durable is not None:
            durable.signal.fire()

    # -- letting go -----------------------------------------------------------------------
    async def quiesce(self, topic: str, group: str) -> None:
        """Stop taking new work while staying attached. SubscriptionError if not attached here."""
        self._attached(topic, group).quiesced = True
        self._poke((topic, group))

    async def unquiesce(self, topic: str, group: str) -> None:
        """Fetch again. SubscriptionError if not attached here."""
        self._attached(topic, group).quiesced = False
        self._poke((topic, group))

    def _attached(self, topic: str, group: str) -> Attachment:
        attachment = self._attachments.get((topic, group))
        if attachment is None:
            raise SubscriptionError(f"{group!r} on {topic} is not attached on node {self.node_id}")
        return attachment

    async def detach(self, topic: str, group: str) -> None:
        """Close this client's consumer; the subscription, its mail and counts survive. A running
        handler is cancelled (unless it is the caller) and what was in flight goes back at the
        head with its count. Detaching what is not attached here is a no-op."""
        attachment = self._attachments.pop((topic, group), None)
        if attachment is None:
            return
        attachment.active = False
        attachment.durable.signal.fire()
        task = attachment.task
        if task is None or task is asyncio.current_task():
            # A detach from inside the handler lets it return: its outcome settles its own
            # message, and the loop's exit hands back anything else it held.
            return
        task.cancel()
        try:
            await task  # its exit hands back what it held
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise  # the detacher itself is being cancelled

    async def pause_delivery(self, topic: str, group: str) -> None:
        """Fetch nothing for (topic, group) on this client until resumed; may precede attaching."""
        self._paused.add((topic, group))
        self._poke((topic, group))

    async def resume_delivery(self, topic: str, group: str) -> None:
        self._paused.discard((topic, group))
        self._poke((topic, group))

    async def hold(self, topic: str, group: str, name: str) -> None:
        """Add a named hold; while any is present this client fetches nothing for (topic, group)."""
        if not name:
            raise SubscriptionError(f"{group!r} on {topic}: a hold needs a name")
        self._holds.setdefault((topic, group), set()).add(name)
        self._poke((topic, group))

    async def release(self, topic: str, group: str, name: str) -> None:
        """Lift a named hold; lifting the last resumes delivery with order and counts intact."""
        names = self._holds.get((topic, group))
        if names is None:
            return
        names.discard(name)
        if not names:
            del self._holds[(topic, group)]
        self._poke((topic, group))

    def holds(self, topic: str, group: str) -> frozenset[str]:
        return frozenset(self._holds.get((topic, group), ()))

    # -- broadcast ------------------------------------------------------------------------
    async def subscribe_stream(
        self, pattern: str, handler: StreamHandler, *, buffer: int = STREAM_BUFFER
    ) -> StreamSubscription:
        """Every matching event from now, acking nothing, through a bounded buffer."""
        self._check_open()
        try:
            topics.stream_for_pattern(pattern, self._broker.event_retention_hours)
        except topics.TopicError as exc:
            raise PatternError(str(exc).removeprefix("queue: ")) from None
        tap = self._broker.add_tap(pattern, handler, buffer)
        self._streams.append(tap)
        return tap

    # -- stopping -------------------------------------------------------------------------
    async def close(self) -> None:
        """Stop this node: detach everything and end its broadcast subscriptions. Its in-flight
        mail goes back at once -- the twin models a dead process's ack clock as expired."""
        if self._closed:
            return
        self._closed = True
        self._stop_beating()
        for topic, group in list(self._attachments):
            await self.detach(topic, group)
        for stream in self._streams:
            await stream.close()
        self._streams.clear()
        for handle in list(self._replies):
            await handle.close()
        self._broker.forget_client(self)

    stop = close

    async def sever(self) -> None:
        """This node's process died: its loops stop where they are, nothing is settled or
        handed back and nothing more is heartbeated, so its in-flight mail returns only when
        its ack clock runs out -- what a SIGKILL leaves on a real broker."""
        if self._closed:
            return
        self._closed = self._severed = True
        self._stop_beating()
        tasks = [a.task for a in self._attachments.values() if a.task is not None]
        for attachment in self._attachments.values():
            attachment.active = False
        self._attachments.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for stream in self._streams:
            await stream.close()
        self._streams.clear()
        self._broker.forget_client(self)

    # -- consume loops --------------------------------------------------------------------
    async def _next(self, attachment: Attachment) -> "Taken | None":
        """Wait until this attachment is ready and mail is waiting, then take one message;
        None once the attachment is gone."""
        durable = attachment.durable
        while True:
            if not attachment.active or durable.deleted:
                return None
            if self._ready(attachment):
                taken = self._broker.take(durable, attachment)
                if taken is not None:
                    return taken
            await durable.signal.wait()

    def _delivery(self, attachment: Attachment, message: "StoredMessage", deliveries: int) -> Delivery | None:
        """Decode a taken message; bytes that are not an event are dead-lettered at once."""
        try:
            event = Event.from_json(message.body)
        except EventDecodeError as exc:
            log.error(
                "delivery_undecodable",
                extra={"topic": message.subject, "group": attachment.durable.group, "error": str(exc)},
            )
            self._broker.dead_letter(attachment.durable, message.seq, "undecodable")
            return None
        left = max(self.tuning.max_deliveries - deliveries, 0)
        return Delivery(event=event, topic=message.subject, deliveries=deliveries, deliveries_left=left)

    async def _outcome(self, attachment: Attachment, handler, arg) -> Outcome:
        """Run handler; None is ACK, a raise or anything that is not an Outcome is a NAK (logged)."""
        try:
            result = await handler(arg)
        except Exception:
            log.exception("handler_failed", extra={"topic": attachment.durable.topic, "group": attachment.durable.group})
            return Outcome.NAK
        if result is None:
            return Outcome.ACK
        if isinstance(result, Outcome):
            return result
        log.error(
            "handler_returned_non_outcome",
            extra={"topic": attachment.durable.topic, "group": attachment.durable.group, "result": repr(result)},
        )
        return Outcome.NAK

    def _settle(self, attachment: Attachment, seqs: list[int], outcome: Outcome) -> None:
        durable = attachment.durable
        if outcome is Outcome.ACK:
            self._broker.ack(durable, seqs, attachment)
        elif outcome is Outcome.NAK:
            self._broker.nak(durable, seqs, attachment)
        else:  # DEFER: back at the head at the cost of a delivery, and stop fetching
            attachment.quiesced = True
            self._broker.give_back(durable, seqs, attachment)

    def _let_go(self, attachment: Attachment) -> None:
        """A loop ending hands back what it held -- unless the process died (`sever`)."""
        if not self._severed:
            self._broker.give_back_held(attachment.durable, attachment)
        self._forget(attachment)

    async def _consume_one(self, attachment: Attachment, handler: Handler) -> None:
        try:
            while True:
                taken = await self._next(attachment)
                if taken is None:
                    return
                message = taken.message
                delivery = self._delivery(attachment, message, taken.deliveries)
                if delivery is None:
                    continue
                outcome = await self._outcome(attachment, handler, delivery)
                self._settle(attachment, [message.seq], outcome)
        finally:
            self._let_go(attachment)

    async def _consume_batches(self, attachment: Attachment, options: OptionsSource, handler: BatchHandler) -> None:
        try:
            while await self.drain_once(attachment, options, handler):
                pass
        finally:
            self._let_go(attachment)

    def _forget(self, attachment: Attachment) -> None:
        if self._attachments.get(attachment.key) is attachment:
            del self._attachments[attachment.key]

    async def drain_once(self, attachment: Attachment, options_source: OptionsSource, handler: BatchHandler) -> bool:
        """One drain: wait for a first message, collect, partition, dispatch oldest first.
        Returns False once the attachment is gone (seed 000, "Inbox Batching", steps 1-4)."""
        first = await self._next(attachment)
        if first is None:
            return False
        options = read_options(options_source)  # every drain, so a hot reload applies
        taken = [first] + await self._collect(attachment, options.effective_max_batch - 1, options.effective_linger)
        durable = attachment.durable
        if not self._ready(attachment):
            # A pause, hold, quiesce or detach taken during collection: the whole drain goes back
            # rather than flushing past it, each message at the cost of the delivery it had.
            self._broker.give_back(durable, [t.message.seq for t in taken], attachment)
            return True
        deliveries: list[Delivery] = []
        seq_of: dict[int, int] = {}
        for t in taken:
            delivery = self._delivery(attachment, t.message, t.deliveries)
            if delivery is not None:
                deliveries.append(delivery)
                seq_of[id(delivery)] = t.message.seq
        batches = partition(deliveries, options.partition_key)
        for index, batch in enumerate(batches):
            if not self._ready(attachment):
                # Stopped between partitions: the undispatched ones go back the same way.
                rest = sorted(seq_of[id(d)] for b in batches[index:] for d in b.deliveries)
                self._broker.give_back(durable, rest, attachment)
                break
            outcome = await self._outcome(attachment, handler, batch)
            self._settle(attachment, sorted(seq_of[id(d)] for d in batch.deliveries), outcome)
        return True

    async def _collect(self, attachment: Attachment, room: int, linger: float) -> "list[Taken]":
        """Everything immediately available plus what arrives within linger, up to room;
        stops early when the attachment stops being ready."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + linger
        taken: list[Taken] = []
        durable = attachment.durable
        while len(taken) < room and self._ready(attachment):
            next_one = self._broker.take(durable, attachment)
            if next_one is not None:
                taken.append(next_one)
                continue
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            try:
                await asyncio.wait_for(durable.signal.wait(), remaining)
            except TimeoutError:
                break
        return taken
