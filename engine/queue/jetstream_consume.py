"""The JetStream consume loops: one attachment per (topic, group) this process is attached to,
and one tap per broadcast subscriber (seed 000, "Delivery Semantics", "Inbox Batching &
Coalescing", "Broadcast Streams").

Pull, never push: an attachment asks the broker for one message (`subscribe`) or one drain
(`subscribe_batch`) only when it is ready to run it, on a pull request of its own. Every
pull request answers on an inbox this attachment subscribes; a hold, pause, quiesce or detach
cancels the outstanding request by dropping that inbox (the broker forgets a waiting request
whose reply subject lost its interest) after a round trip, so once the verb returns nothing
more is delivered. A message that arrived in that instant raced the verb: it goes straight
back (an immediate NAK, through the dead-letter check), costing the delivery it had.

What JetStream decides for the contract here:
- NAK: `nak(delay=tuning.nak_delay(deliveries))`. The consumer carries no BackOff list, which
  would replace AckWait and does not apply to NAKs. While the delay runs the broker serves
  never-delivered mail, so a failure returns behind it.
- DEFER and every hand-back: an immediate NAK, which the broker puts on the consumer's
  redelivery queue, served before new mail: the head. Several go back in stream order.
- `deliveries` is the broker's own `num_delivered`, carried in the ack subject, so it
  survives handoffs and restarts; on the last one a failure is dead-lettered here (the body
  to `topics.dlq_subject`, then TERM), with the consumer's MaxDeliver as the backstop.
- The ack window (AckWait) is kept from running out under a live holder by `+WPI`, the
  in-progress acknowledgement: `JetStreamQueue`'s heartbeat calls `Attachment.heartbeat`
  every `tuning.heartbeat_seconds` for everything fetched and not yet settled.
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from typing import TYPE_CHECKING, Any

from nats.aio.msg import Msg

from engine.queue import topics
from engine.queue.contract import (
    BatchHandler,
    Delivery,
    Handler,
    OptionsSource,
    Outcome,
    QueueError,
    partition,
    read_options,
)
from events.envelope import Event
from events.errors import EventDecodeError

if TYPE_CHECKING:
    from engine.queue.jetstream import JetStreamQueue

log = logging.getLogger("queue.jetstream")

# A pull answered "no consumer" while the consumer still exists (its stream electing a
# leader): ask again after this long. An unexpected pull status: pause this long, not spin.
CONSUMER_GONE_RECHECK_SECONDS = 1.0
PULL_STATUS_PAUSE_SECONDS = 0.05

POLL_SECONDS = 10.0   # a waiting pull request's life; re-sent at once, so this only bounds idle chatter
GRACE_SECONDS = 2.0   # past a request's expiry, a status that never came is taken as lost
_WAKE = object()


class Puller:
    """Pull requests on one durable consumer, answered on an inbox this object owns."""

    def __init__(self, nc, stream: str, consumer: str) -> None:
        self.nc = nc
        self.next_subject = f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{consumer}"
        self.info_subject = f"$JS.API.CONSUMER.INFO.{stream}.{consumer}"
        self.queue: asyncio.Queue = asyncio.Queue()
        self._sub = None
        self._inbox = ""
        self._count = 0
        self._open: str | None = None     # reply subject of the request still open
        self._remaining = 0
        self._expires_at = 0.0

    @property
    def outstanding(self) -> bool:
        return self._open is not None and time.monotonic() < self._expires_at

    async def pull(self, batch: int, *, expires: float | None = None, no_wait: bool = False) -> None:
        """Ask for up to `batch` messages: waiting up to `expires`, or only what is there now."""
        if self._sub is None:
            self._inbox = self.nc.new_inbox()
            self._sub = await self.nc.subscribe(f"{self._inbox}.*", cb=self._arrived)
        self._count += 1
        reply = f"{self._inbox}.{self._count}"
        request: dict[str, Any] = {"batch": batch}
        if no_wait:
            request["no_wait"] = True
            wait = 0.0
        else:
            wait = expires if expires is not None else POLL_SECONDS
            request["expires"] = max(int(wait * 1_000_000_000), 1_000_000)
        self._open, self._remaining = reply, batch
        self._expires_at = time.monotonic() + wait + GRACE_SECONDS
        await self.nc.publish(self.next_subject, json.dumps(request).encode(), reply=reply)

    async def _arrived(self, msg: Msg) -> None:
        self.queue.put_nowait(msg)

    def wake(self) -> None:
        self.queue.put_nowait(_WAKE)

    async def get(self, timeout: float) -> "Msg | object | None":
        """The next message with a body, a status message, `_WAKE`, or None after timeout."""
        try:
            async with asyncio.timeout(max(timeout, 0.001)):
                item = await self.queue.get()
        except TimeoutError:
            self._open = None
            return None
        if isinstance(item, Msg):
            if _status(item) is None:
                self._remaining -= 1
                if self._remaining <= 0:
                    self._open = None
            elif item.subject == self._open:
                self._open = None
        return item

    def take_ready(self) -> list[Msg]:
        """Messages with a body already here (delivered, not yet handled); statuses dropped."""
        out = []
        while not self.queue.empty():
            item = self.queue.get_nowait()
            if isinstance(item, Msg) and _status(item) is None:
                out.append(item)
        return out

    async def cancel(self) -> None:
        """End every open request: drop the inbox after a round trip, so the broker delivers
        nothing more to it; whatever it sent before that is left in `queue`.

        The broker forgets a request whose interest is gone only when it next walks its wait
        queue, and until then a redelivery it tries on that request goes to the back of the
        redelivery queue -- which reorders a drain handed back right after. A consumer-info
        request walks the queue, so one is made before anything is handed back."""
        sub, self._sub = self._sub, None
        was_open, self._open = self._open is not None, None
        if sub is None:
            return
        with contextlib.suppress(Exception):
            await sub.drain()
        if was_open:
            with contextlib.suppress(Exception):
                await self.nc.request(self.info_subject, b"", timeout=2.0)


def _status(msg: Msg) -> str | None:
    """A pull request's status ("404", "408", "409", "100", ...), None for a message."""
    if msg.headers and not msg.data:
        return msg.headers.get("Status")
    return None


def _seq(msg: Msg) -> int:
    try:
        return msg.metadata.sequence.stream
    except Exception:
        return 0


class Attachment:
    """This process's consumer on one durable subscription: one consume loop (a task)."""

    def __init__(self, queue: "JetStreamQueue", topic: str, group: str, stream: str) -> None:
        self.queue = queue
        self.topic, self.group, self.stream = topic, group, stream
        self.consumer = topics.durable_name(topic, group)
        self.puller = Puller(queue.nc, stream, self.consumer)
        self.quiesced = False
        self.active = True
        self.task: asyncio.Task | None = None
        self._changed = asyncio.Event()
        self._lock = asyncio.Lock()
        self._held: dict[int, Msg] = {}   # fetched, not yet settled: handed back if the loop ends

    @property
    def key(self) -> tuple[str, str]:
        return (self.topic, self.group)

    @property
    def ready(self) -> bool:
        """Attached, not quiesced, not paused, no hold: only then does it fetch or keep mail."""
        return self.active and not self.quiesced and self.queue.gate_open(self.key)

    # -- state changes ----------------------------------------------------------------------
    async def changed(self) -> None:
        """Re-read the state: a closed gate cancels the open pull request before returning."""
        self._changed.set()
        self.puller.wake()
        if self.ready:
            return
        async with self._lock:
            await self.puller.cancel()
            stray = self.puller.take_ready()
            self.puller.wake()
        if stray:  # delivered in the instant before the cancel: they raced the verb
            await self.give_back(stray)

    def kick(self) -> None:
        """The connection came back: any open request died with the old one."""
        self.puller._open = None
        self.puller.wake()

    # -- fetching -------------------------------------------------------------------------
    async def _wait_ready(self) -> bool:
        while not self.ready:
            if not self.active:
                return False
            self._changed.clear()
            await self._changed.wait()
        return True

    async def next_message(self) -> Msg | None:
        """One delivered message once this attachment is ready; None when woken without one."""
        if not await self._wait_ready():
            return None
        async with self._lock:
            if not self.ready:
                return None
            if self.puller.queue.empty() and not self.puller.outstanding:
                await self.puller.pull(1)
        item = await self.puller.get(POLL_SECONDS + GRACE_SECONDS)
        if item is None or item is _WAKE:
            return None
        status = _status(item)
        if status is None:
            self._held[id(item)] = item
            return item
        await self._on_status(status, item)
        return None

    async def _on_status(self, status: str, msg: Msg) -> None:
        description = (msg.headers or {}).get("Description", "")
        if status == "409" and "Deleted" in description:
            log.info("jetstream_subscription_deleted", extra={"topic": self.topic, "group": self.group})
            self.queue.forget(self)
            self.active = False
        elif status == "503":
            # No responder for the pull: the consumer (or its stream) is gone, or a cluster
            # is electing its leader. Ask which before trying again.
            try:
                info = await self.queue.provisioner.consumer_info(self.stream, self.consumer)
            except QueueError as exc:  # "JetStream system temporarily unavailable", silence: ask again later
                log.info("jetstream_pull_unavailable", extra={"topic": self.topic, "group": self.group, "error": str(exc)})
                await asyncio.sleep(CONSUMER_GONE_RECHECK_SECONDS)
                return
            if info is None:
                log.info("jetstream_subscription_deleted", extra={"topic": self.topic, "group": self.group})
                self.queue.forget(self)
                self.active = False
            else:
                await asyncio.sleep(CONSUMER_GONE_RECHECK_SECONDS)
        elif status not in ("404", "408", "100"):
            log.debug("jetstream_pull_status", extra={"topic": self.topic, "status": status, "detail": description})
            await asyncio.sleep(PULL_STATUS_PAUSE_SECONDS)  # e.g. "Exceeded MaxWaiting": not a reason to spin

    async def collect(self, drained: list[Msg], room: int, linger: float) -> None:
        """Add to `drained` what is there now plus what arrives within linger, up to room more;
        stops early (cancelling the request) when this attachment stops being ready."""
        if room <= 0:
            return
        async with self._lock:
            if not self.ready:
                return
            await self.puller.pull(room, expires=linger if linger > 0 else None, no_wait=linger <= 0)
        deadline = time.monotonic() + linger + GRACE_SECONDS
        want = len(drained) + room
        while len(drained) < want and self.puller._open is not None:
            item = await self.puller.get(deadline - time.monotonic())
            if item is None:
                return
            if item is _WAKE:
                if not self.ready:
                    return
                continue
            if _status(item) is None:
                self._held[id(item)] = item
                drained.append(item)

    # -- settling -------------------------------------------------------------------------
    async def deliver(self, msg: Msg) -> Delivery | None:
        """Decode a delivered message; bytes that are not an event are dead-lettered at once."""
        deliveries = msg.metadata.num_delivered
        try:
            event = Event.from_json(msg.data)
        except EventDecodeError as exc:
            log.error("delivery_undecodable", extra={"topic": self.queue.ns.logical(msg.subject), "group": self.group,
                                                     "error": str(exc)})
            await self.dead_letter(msg, deliveries, "undecodable")
            return None
        left = max(self.queue.tuning.max_deliveries - deliveries, 0)
        return Delivery(event=event, topic=self.queue.ns.logical(msg.subject), deliveries=deliveries, deliveries_left=left)

    async def settle(self, msgs: list[Msg], outcome: Outcome) -> None:
        if outcome is Outcome.ACK:
            for msg in msgs:
                await msg.ack()
                self._held.pop(id(msg), None)
        elif outcome is Outcome.NAK:
            for msg in sorted(msgs, key=_seq):
                await self._return(msg, delay=self.queue.tuning.nak_delay(msg.metadata.num_delivered))
        else:  # DEFER: stop fetching first, then back at the head
            self.quiesced = True
            await self.give_back(msgs)

    async def give_back(self, msgs: list[Msg]) -> None:
        """Immediate NAKs in stream order (the broker serves them before new mail), each
        through the dead-letter check: being drained was the delivery."""
        for msg in sorted(msgs, key=_seq):
            await self._return(msg, delay=None)

    async def _return(self, msg: Msg, delay: float | None) -> None:
        self._held.pop(id(msg), None)
        deliveries = msg.metadata.num_delivered
        try:
            if deliveries >= self.queue.tuning.max_deliveries:
                await self.dead_letter(msg, deliveries, "max_deliveries")
            else:
                await msg.nak(delay=delay)
        except Exception:
            log.exception("jetstream_return_failed", extra={"topic": self.topic, "group": self.group})

    async def dead_letter(self, msg: Msg, deliveries: int, reason: str) -> None:
        """Publish the body to the pair's dead-letter subject, then terminate the message. A dead
        letter's own redelivery is only terminated: dead-lettering it again would start a loop."""
        self._held.pop(id(msg), None)
        fields = {"topic": self.topic, "group": self.group, "deliveries": deliveries, "reason": reason}
        if topics.namespace_of(self.queue.ns.logical(msg.subject)) == topics.DLQ_ROOT:
            log.error("dead_letter_terminated", extra={**fields, "subject": msg.subject})
            await msg.term()
            return
        subject = topics.dlq_subject(self.topic, self.group)
        try:
            await self.queue.js.publish(self.queue.ns.subject(subject), msg.data, timeout=self.queue.publish_timeout_seconds, headers={
                "Crewlet-Topic": self.topic, "Crewlet-Group": self.group,
                "Crewlet-Deliveries": str(deliveries), "Crewlet-Reason": reason})
        except Exception:
            # Not terminated without its copy: back with the longest spacing, and the
            # consumer's MaxDeliver ends it if this keeps failing.
            log.exception("dead_letter_failed", extra=fields)
            await msg.nak(delay=self.queue.tuning.nak_cap_seconds)
            return
        await msg.term()
        log.error("dead_lettered", extra={**fields, "subject": subject})

    async def heartbeat(self) -> int:
        """Tell the broker every message this attachment holds is still being worked on (`+WPI`,
        which restarts its ack window); returns how many were sent. One that cannot be sent is
        left to the window: the next beat, or the redelivery the window makes, covers it."""
        sent = 0
        for msg in list(self._held.values()):
            try:
                await msg.in_progress()
                sent += 1
            except Exception as exc:
                log.debug("jetstream_in_progress_failed", extra={"topic": self.topic, "group": self.group,
                                                                 "error": type(exc).__name__})
        return sent

    async def hand_back_held(self) -> None:
        """Everything fetched and not settled goes back at once (the loop is ending)."""
        held = list(self._held.values()) + self.puller.take_ready()
        self._held.clear()
        if held:
            await self.give_back(held)

    # -- running handlers -------------------------------------------------------------------
    async def outcome(self, handler, arg) -> Outcome:
        """Run handler; None is ACK, a raise or a non-Outcome is a NAK (logged)."""
        try:
            result = await handler(arg)
        except Exception:
            log.exception("handler_failed", extra={"topic": self.topic, "group": self.group})
            return Outcome.NAK
        if result is None:
            return Outcome.ACK
        if isinstance(result, Outcome):
            return result
        log.error("handler_returned_non_outcome", extra={"topic": self.topic, "group": self.group, "result": repr(result)})
        return Outcome.NAK

    async def run_one(self, handler: Handler) -> None:
        """`subscribe`'s loop: one message, its handler, its outcome; again."""
        try:
            while self.active:
                msg = await self.next_message()
                if msg is None:
                    continue
                if not self.ready:
                    await self.give_back([msg])
                    continue
                delivery = await self.deliver(msg)
                if delivery is None:
                    continue
                await self.settle([msg], await self.outcome(handler, delivery))
        finally:
            await self._end()

    async def run_batches(self, options: OptionsSource, handler: BatchHandler) -> None:
        """`subscribe_batch`'s loop: one drain at a time."""
        try:
            while self.active:
                await self.drain_once(options, handler)
        finally:
            await self._end()

    async def drain_once(self, options_source: OptionsSource, handler: BatchHandler) -> bool:
        """One drain: the first message (waiting), what is there plus what lingers in, up to the
        cap; partition; dispatch oldest first. Returns whether it dispatched anything."""
        first = await self.next_message()
        if first is None:
            return False
        options = read_options(options_source)  # every drain, so a hot reload applies
        drained = [first]
        await self.collect(drained, options.effective_max_batch - 1, options.effective_linger)
        if not self.ready:
            # A pause, hold, quiesce or detach taken during collection: the whole drain goes
            # back rather than flushing past it.
            await self.give_back(drained + self.puller.take_ready())
            return False
        msg_of: dict[int, Msg] = {}
        deliveries: list[Delivery] = []
        for msg in drained:
            delivery = await self.deliver(msg)
            if delivery is not None:
                deliveries.append(delivery)
                msg_of[id(delivery)] = msg
        batches = partition(deliveries, options.partition_key)
        for index, batch in enumerate(batches):
            if not self.ready:
                # Stopped between partitions: the rest go back the same way.
                await self.give_back([msg_of[id(d)] for b in batches[index:] for d in b.deliveries])
                break
            outcome = await self.outcome(handler, batch)
            await self.settle([msg_of[id(d)] for d in batch.deliveries], outcome)
        return True

    async def _end(self) -> None:
        self.active = False
        async with self._lock:
            await self.puller.cancel()
        await asyncio.shield(self.hand_back_held())
        self.queue.forget(self)
