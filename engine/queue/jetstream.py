"""The JetStream backend of the EventQueue contract (seed 000, "Delivery Semantics", "Topic
Structure", "Broadcast Streams"; seed 002, "An external NATS server", "The largest message
every server must carry", "A connection the client gives up on is a node restart").

One client code path whichever broker it dials: the node's embedded member (`broker.py`) or
an external server or cluster (`stream.type: nats`). `JetStreamQueue.connect(Dial(...))`:
- dials with unlimited reconnects a second apart and 2 s per attempt; a connection the client
  closes for good calls `on_closed_for_good` (the node then exits with status 1);
- opens stream.tls files and the credentials file before the dial, so a missing one is named
  by its field rather than reported as an unreachable broker;
- refuses a server that holds this connection to a max_payload under 8 MiB;
- creates the engine's streams (`topics.engine_streams()`), idempotently.
Dialing's checks live in `jetstream_connection.py`, consume loops in `jetstream_consume.py`,
broadcast taps in `jetstream_broadcast.py`, and the API calls that create things, with the
seed's three-answer discipline, in `jetstream_provision.py`. Nothing here logs a URL's
userinfo: a server is named by scheme, host and port.
"""
from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import inspect
import logging
import time
from dataclasses import dataclass
from typing import Any, Callable

import nats.errors
import nats.js.errors

from engine.queue import topics
from engine.queue.broker import MAX_PAYLOAD_BYTES
from engine.queue.broadcast import run_publish_listeners
from engine.queue.contract import (
    STREAM_BUFFER,
    BatchHandler,
    Depth,
    Handler,
    OptionsSource,
    PatternError,
    PublishListener,
    QueueError,
    ReplySubscription,
    Responder,
    StreamHandler,
    StreamSubscription,
    SubscriptionError,
    Tuning,
    Unreachable,
)
from engine.queue.jetstream_broadcast import StreamTap
from engine.queue.jetstream_connection import ConnectError, Dial, NatsClient, Refused, max_payload_refusal, scrub
from engine.queue.jetstream_consume import Attachment
from engine.queue.jetstream_replies import JetStreamReply, ask
from engine.queue.jetstream_provision import METADATA_GROUP, METADATA_TOPIC, Provisioner, mailbox_config
from events.envelope import Event

log = logging.getLogger("queue.jetstream")

EXIT_CONNECTION_CLOSED = 1      # seed 002: a node whose connection closed for good exits with status 1
PUBLISH_TIMEOUT_SECONDS = 10.0  # an fsync is 15-40 ms at p99 on a network volume; 10 s names a stall

OnClosed = Callable[[str], Any]
Key = tuple[str, str]


@dataclass(frozen=True)
class Layout:
    """What the queue lays out on the broker: how long events are kept, how many replicas each
    stream has, and whether the broker is a cluster (whose creates get the longer budgets)."""

    event_retention_hours: float = topics.EVENT_RETENTION_HOURS_DEFAULT
    replicas: int = 1
    clustered: bool = False
    namespace: topics.Namespace = topics.ROOT_NAMESPACE  # a prefix only for a conformance run on a shared broker


class JetStreamQueue:
    """The EventQueue contract over one NATS connection. Build it with `connect`."""

    publish_timeout_seconds = PUBLISH_TIMEOUT_SECONDS

    def __init__(self, dial: Dial, *, node_id: str, tuning: Tuning, layout: Layout,
                 on_closed_for_good: OnClosed | None) -> None:
        self.nc = NatsClient()
        self.js = self.nc.jetstream(timeout=self.publish_timeout_seconds)
        self.dial = dial
        self.node_id = node_id
        self.tuning = tuning
        self.event_retention_hours = layout.event_retention_hours
        self.replicas = layout.replicas
        self.ns = layout.namespace
        self.server = dial.server
        self.provisioner = Provisioner(self.nc, clustered=layout.clustered)
        self._on_closed_for_good = on_closed_for_good
        self._listeners: list[PublishListener] = []
        self._attachments: dict[Key, Attachment] = {}
        self._holds: dict[Key, set[str]] = {}
        self._paused: set[Key] = set()
        self._taps: set[StreamTap] = set()
        self._replies: set[JetStreamReply] = set()
        self._streams_ready: set[str] = set()
        self._specs: dict[str, topics.StreamSpec] = {}
        self._publishable: set[str] = set()
        self._connected = False
        self._closing = False
        self._heartbeat: asyncio.Task | None = None
        self.in_progress_sent = 0  # in-progress acknowledgements sent, one per message per beat

    # -- connecting -----------------------------------------------------------------------
    @classmethod
    async def connect(cls, dial: Dial, *, node_id: str, tuning: Tuning = Tuning(), layout: Layout = Layout(),
                      on_closed_for_good: OnClosed | None = None) -> "JetStreamQueue":
        """Dial, check the server's max_payload, create the engine's streams; the ready queue.
        ConnectError names the field of a file that cannot be opened, or the refusal."""
        if dial.name is None:
            dial = dataclasses.replace(dial, name=f"crewlet-{node_id}")
        queue = cls(dial, node_id=node_id, tuning=tuning, layout=layout, on_closed_for_good=on_closed_for_good)
        options = dial.options(error_cb=queue._on_error, disconnected_cb=queue._on_disconnected,
                               reconnected_cb=queue._on_reconnected, closed_cb=queue._on_closed)
        try:
            await dial.connect(queue.nc, options)
        except Refused as exc:
            raise ConnectError(f"jetstream: {exc.server} refused this node: {exc.refusal}") from None
        except Exception as exc:
            raise ConnectError(f"jetstream: could not connect to {dial.server}: "
                               f"{dial.scrub(str(exc) or type(exc).__name__)}") from None
        try:
            await queue._provision_streams()
        except BaseException:
            queue._closing = True
            with contextlib.suppress(Exception):
                await queue.nc.close()
            raise
        queue._connected = True
        log.debug("jetstream_connected", extra={"server": dial.server, "node": node_id})
        return queue

    async def _provision_streams(self) -> None:
        """Refuse a server that holds this connection under 8 MiB, then create the engine's streams."""
        if self.nc.max_payload < MAX_PAYLOAD_BYTES:
            raise ConnectError(max_payload_refusal(self.server, self.nc.max_payload))
        for spec in topics.engine_streams(self.event_retention_hours):
            spec = self.ns.spec(spec)
            await self.provisioner.ensure_stream(spec, self.replicas)
            self._streams_ready.add(spec.name)

    # The client's callbacks. Until the queue is handed out (`_connected`), a disconnect or a
    # close is the dial's own failure, which `connect` reports.
    async def _on_error(self, exc: Exception) -> None:
        log.warning("jetstream_connection_error", extra={"server": self.server, "error": self.dial.scrub(str(exc) or type(exc).__name__)})

    async def _on_disconnected(self) -> None:
        if self._connected and not self._closing:
            log.warning("jetstream_disconnected", extra={"server": self.server})

    async def _on_reconnected(self) -> None:
        if self._connected:
            self._reconnected()

    async def _on_closed(self) -> None:
        if self._connected:
            await self._closed()

    def _reconnected(self) -> None:
        log.info("jetstream_reconnected", extra={"server": self.server})
        if self.nc.max_payload < MAX_PAYLOAD_BYTES:
            log.error("jetstream_max_payload_below_contract", extra={
                "server": self.server, "max_payload": self.nc.max_payload, "needed": MAX_PAYLOAD_BYTES})
        for attachment in list(self._attachments.values()):
            attachment.kick()

    async def _closed(self) -> None:
        if self._closing:
            return
        self._closing = True
        error = self.nc.last_error
        reason = (f"jetstream: the NATS client closed this node's connection to {self.server} for good"
                  f" ({type(error).__name__ if error else 'no error'}: {scrub(str(error or ''), '', None)})")
        log.error("jetstream_connection_closed_for_good", extra={"server": self.server, "reason": reason})
        for attachment in list(self._attachments.values()):
            attachment.active = False
            attachment.puller.wake()
        await self._stop_beating()
        if self._on_closed_for_good is not None:
            try:
                result = self._on_closed_for_good(reason)
                if inspect.isawaitable(result):
                    await result
            except Exception:
                log.exception("jetstream_on_closed_failed")

    # -- streams ----------------------------------------------------------------------------
    def _spec(self, topic: str) -> topics.StreamSpec:
        spec = self._specs.get(topic)
        if spec is None:
            if any(t in ("*", ">") for t in topic.split(".")):
                spec = topics.stream_for_pattern(topic, self.event_retention_hours)
            else:
                spec = topics.stream_for(topic, self.event_retention_hours)
            spec = self.ns.spec(spec)  # as laid out on the broker
            if len(self._specs) < 100_000:  # a topic's stream never changes; bounded all the same
                self._specs[topic] = spec
        return spec

    async def _stream_of(self, topic: str) -> str:
        """The stream carrying topic, provisioned first when this client has not yet (a
        namespace the engine does not define gets one on demand, seed 000)."""
        spec = self._spec(topic)
        if spec.name not in self._streams_ready:
            await self.provisioner.ensure_stream(spec, self.replicas)
            self._streams_ready.add(spec.name)
        return spec.name

    # -- publishing -----------------------------------------------------------------------
    async def publish(self, topic: str, event: Event, *, dedupe_id: str | None = None) -> Event:
        """Stamp `node` on a copy when the event names none, wait for the broker's ack, then run
        the publish listeners inline; return the copy. A duplicate `dedupe_id` inside the
        stream's window (2 minutes) stores nothing and runs no listener."""
        self._check_open()
        if topic not in self._publishable:  # validated once per topic, as its stream is resolved once
            topics.validate_subject(topic)
            self._publishable.add(topic)
        stamped = event.with_node(self.node_id)
        await self._stream_of(topic)
        headers = {"Nats-Msg-Id": dedupe_id} if dedupe_id else None
        try:
            ack = await self.js.publish(self.ns.subject(topic), stamped.to_json(), timeout=self.publish_timeout_seconds, headers=headers)
        except nats.js.errors.ServiceUnavailableError as exc:  # "JetStream system temporarily unavailable"
            raise Unreachable(f"jetstream: publish to {topic}: {exc.description}", code=exc.err_code) from None
        except nats.js.errors.APIError as exc:
            raise QueueError(f"jetstream: publish to {topic}: {exc.description}", code=exc.err_code) from None
        except nats.errors.MaxPayloadError:
            raise QueueError(f"jetstream: publish to {topic}: the event is larger than the server's "
                             f"max_payload ({self.nc.max_payload} bytes)") from None
        except (TimeoutError, nats.errors.TimeoutError):
            raise Unreachable(f"jetstream: publish to {topic} was not acknowledged within "
                              f"{self.publish_timeout_seconds:g}s") from None
        except (nats.errors.NoRespondersError, nats.js.errors.NoStreamResponseError):
            # No stream took it: deleted under us (provision again next time), or a replicated
            # stream between leaders. Nothing was accepted; the caller may try again.
            self._streams_ready.discard(self._spec(topic).name)
            raise Unreachable(f"jetstream: publish to {topic}: no stream answered") from None
        except (nats.errors.ConnectionClosedError, nats.errors.ConnectionDrainingError,
                nats.errors.ConnectionReconnectingError, nats.errors.OutboundBufferLimitError,
                nats.errors.StaleConnectionError) as exc:
            raise Unreachable(f"jetstream: publish to {topic}: the connection cannot carry it now "
                              f"({type(exc).__name__})") from None
        if ack.duplicate:
            log.info("publish_duplicate", extra={"topic": topic, "dedupe_id": dedupe_id})
            return stamped
        await run_publish_listeners(self._listeners, topic, stamped)
        return stamped

    def add_publish_listener(self, listener: PublishListener) -> None:
        """Run listener(topic, stamped_event) after every publish this client makes."""
        self._listeners.append(listener)

    # -- request/reply (jetstream_replies) -------------------------------------------------
    async def reply(self, subject: str, responder: Responder) -> ReplySubscription:
        """Answer requests on `subject`; see the contract."""
        self._check_open()
        topics.check_ephemeral(subject)
        handle = JetStreamReply(self, subject, responder)
        await handle.start()
        self._replies.add(handle)
        return handle

    def forget_reply(self, handle: JetStreamReply) -> None:
        self._replies.discard(handle)

    async def request(self, subject: str, payload: bytes, *, timeout: float) -> bytes:
        """Ask on `subject` and return the first answer; see the contract."""
        self._check_open()
        return await ask(self, subject, payload, timeout)

    # -- durable subscriptions ------------------------------------------------------------
    async def ensure_subscription(self, topic: str, group: str) -> None:
        """Create the mailbox: a durable pull consumer, detached, from the beginning, with
        (topic, group) in its metadata; a second call is a no-op."""
        self._check_open()
        if not group or not isinstance(group, str):
            raise SubscriptionError(f"{topic}: a subscription needs a group")
        topics.validate_pattern(topic)
        stream = await self._stream_of(topic)
        config = mailbox_config(topic, group, ack_wait_seconds=self.tuning.ack_wait_seconds,
                                max_deliveries=self.tuning.max_deliveries)
        config["filter_subject"] = self.ns.subject(topic)  # the metadata keeps the caller's own pair
        await self.provisioner.ensure_consumer(stream, config)

    async def list_subscriptions(self, pattern: str) -> list[tuple[str, str]]:
        """Every durable subscription under pattern on the engine's own streams (CREWLET_*),
        as the exact pair its metadata records -- only where that pair derives the consumer's
        own name; another is logged as `jetstream_subscription_unnamed` and left out."""
        topics.validate_pattern(pattern)
        found: set[tuple[str, str]] = set()
        for stream in await self.provisioner.stream_names(self.ns.stream("CREWLET_")):
            for info in await self.provisioner.consumers(stream):
                config = info.get("config") or {}
                name = config.get("durable_name")
                if not name:
                    continue  # an ephemeral consumer (a broadcast tap) is nobody's mailbox
                metadata = config.get("metadata") or {}
                topic, group = metadata.get(METADATA_TOPIC), metadata.get(METADATA_GROUP)
                if not topic or not group or topics.durable_name(topic, group) != name:
                    log.warning("jetstream_subscription_unnamed", extra={"stream": stream, "consumer": name})
                    continue
                if topics.subject_matches(pattern, topic) or pattern == topic:
                    found.add((topic, group))
        return sorted(found)

    async def pending(self, topic: str, group: str) -> int:
        """Waiting plus delivered-and-unacked: the mailbox depth (num_pending + num_ack_pending)."""
        info = await self.provisioner.consumer_info(self._spec(topic).name, topics.durable_name(topic, group))
        if info is None:
            raise SubscriptionError(f"no subscription {group!r} on {topic}")
        return int(info.get("num_pending", 0)) + int(info.get("num_ack_pending", 0))

    async def depth(self, topic: str, group: str) -> Depth:
        """The consumer info's num_pending (never delivered) and num_ack_pending (delivered,
        unacked), and the age of the first message of the topic after the consumer's ack floor
        (one direct read of the stream), by the broker's own clock against this one."""
        stream = self._spec(topic).name
        info = await self.provisioner.consumer_info(stream, topics.durable_name(topic, group))
        if info is None:
            raise SubscriptionError(f"no subscription {group!r} on {topic}")
        pending, in_flight = int(info.get("num_pending", 0)), int(info.get("num_ack_pending", 0))
        oldest = None
        if pending + in_flight:
            floor = int((info.get("ack_floor") or {}).get("stream_seq", 0))
            stored = await self.provisioner.first_message_time(stream, topic, floor + 1)
            if stored is not None:
                oldest = max(0.0, time.time() - stored)
        return Depth(pending, in_flight, oldest)

    async def dead_letters(self, topic: str, group: str, within_seconds: float) -> int:
        """The pair's dead letters from the last `within_seconds`: a count of the subject (one
        request, answering 0 for a pair that never dead-lettered), and only when there are
        some, the count since the instant (a short-lived consumer started at that time)."""
        subject = topics.dlq_subject(topic, group)
        stream = topics.stream_for(subject, self.event_retention_hours).name
        if not await self.provisioner.subject_count(stream, subject):
            return 0
        return await self.provisioner.count_since(stream, subject, time.time() - within_seconds)

    async def delete_subscription(self, topic: str, group: str) -> None:
        """Destroy the consumer and the mail it retains, wherever it is attached; a missing one
        is a no-op."""
        self._check_open()
        await self.detach(topic, group)
        await self.provisioner.delete_consumer(self._spec(topic).name, topics.durable_name(topic, group))

    # -- attaching ------------------------------------------------------------------------
    async def subscribe(self, topic: str, group: str, handler: Handler) -> None:
        """Ensure the subscription, attach, and run handler per message in a loop of its own."""
        attachment = await self._attach(topic, group)
        attachment.task = asyncio.create_task(attachment.run_one(handler), name=f"jetstream-consume:{group}:{topic}")

    async def subscribe_batch(self, topic: str, group: str, options: OptionsSource, handler: BatchHandler) -> None:
        """Ensure the subscription, attach, and dispatch drains partition by partition."""
        attachment = await self._attach(topic, group)
        attachment.task = asyncio.create_task(attachment.run_batches(options, handler),
                                              name=f"jetstream-drain:{group}:{topic}")

    async def _attach(self, topic: str, group: str) -> Attachment:
        self._check_open()
        if (topic, group) in self._attachments:
            raise SubscriptionError(f"{group!r} on {topic} is already attached on node {self.node_id}")
        await self.ensure_subscription(topic, group)
        if (topic, group) in self._attachments:  # a concurrent attach won while we ensured
            raise SubscriptionError(f"{group!r} on {topic} is already attached on node {self.node_id}")
        attachment = Attachment(self, topic, group, self._spec(topic).name)
        self._attachments[(topic, group)] = attachment
        if self._heartbeat is None:
            self._heartbeat = asyncio.create_task(self._beat(), name=f"jetstream-heartbeat:{self.node_id}")
        return attachment

    async def _beat(self) -> None:
        """Every `tuning.heartbeat_seconds`, `+WPI` for everything every attachment holds: the
        ack window then bounds only how long a dead holder's mail stays invisible."""
        while not self._closing:
            await asyncio.sleep(self.tuning.heartbeat_seconds)
            for attachment in list(self._attachments.values()):
                try:
                    self.in_progress_sent += await attachment.heartbeat()
                except Exception:  # a beat that fails must not end the heartbeat
                    log.exception("jetstream_heartbeat_failed", extra={"topic": attachment.topic})

    def forget(self, attachment: Attachment) -> None:
        """An attachment that ended lets go of its place (its consume loop calls this)."""
        if self._attachments.get(attachment.key) is attachment:
            del self._attachments[attachment.key]

    async def ping(self, timeout: float) -> bool:
        """JetStream's account info asked and answered within `timeout`; False on silence, while
        the client redials, or once it closed. (Not a flush: nats-py's flush that times out
        leaves a future behind that the late PONG then breaks the client's read loop on.)"""
        if not self.nc.is_connected:
            return False
        try:
            await self.nc.request("$JS.API.INFO", b"", timeout=timeout)
        except Exception:
            return False
        return True

    def is_attached(self, topic: str, group: str) -> bool:
        return (topic, group) in self._attachments

    def gate_open(self, key: Key) -> bool:
        """No pause and no hold on the subscription: an attachment may fetch (it asks before each pull)."""
        return key not in self._paused and not self._holds.get(key)

    async def _changed(self, key: Key) -> None:
        attachment = self._attachments.get(key)
        if attachment is not None:
            await attachment.changed()

    # -- letting go -----------------------------------------------------------------------
    def _attached(self, topic: str, group: str) -> Attachment:
        attachment = self._attachments.get((topic, group))
        if attachment is None:
            raise SubscriptionError(f"{group!r} on {topic} is not attached on node {self.node_id}")
        return attachment

    async def quiesce(self, topic: str, group: str) -> None:
        """Stop taking new work while staying attached. SubscriptionError if not attached here."""
        attachment = self._attached(topic, group)
        attachment.quiesced = True
        await attachment.changed()

    async def unquiesce(self, topic: str, group: str) -> None:
        """Fetch again. SubscriptionError if not attached here."""
        attachment = self._attached(topic, group)
        attachment.quiesced = False
        await attachment.changed()

    async def detach(self, topic: str, group: str) -> None:
        """Close this process's consumer; the subscription, its mail and counts survive. A
        running handler is cancelled (unless it is the caller) and what was in flight goes
        back at once, at the head, with its count. Not attached here: a no-op."""
        attachment = self._attachments.pop((topic, group), None)
        if attachment is None:
            return
        attachment.active = False
        await attachment.changed()
        task = attachment.task
        if task is None or task is asyncio.current_task():
            # From inside the handler: it returns, its outcome settles its own message, and
            # the loop's exit hands back anything else it held.
            return
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise

    async def pause_delivery(self, topic: str, group: str) -> None:
        """Fetch nothing for (topic, group) on this client until resumed; may precede attaching."""
        self._paused.add((topic, group))
        await self._changed((topic, group))

    async def resume_delivery(self, topic: str, group: str) -> None:
        self._paused.discard((topic, group))
        await self._changed((topic, group))

    async def hold(self, topic: str, group: str, name: str) -> None:
        """Add a named hold; while any is present this client fetches nothing for (topic, group)."""
        if not name:
            raise SubscriptionError(f"{group!r} on {topic}: a hold needs a name")
        self._holds.setdefault((topic, group), set()).add(name)
        await self._changed((topic, group))

    async def release(self, topic: str, group: str, name: str) -> None:
        """Lift a named hold; lifting the last resumes delivery with order and counts intact."""
        names = self._holds.get((topic, group))
        if names is None:
            return
        names.discard(name)
        if not names:
            del self._holds[(topic, group)]
        await self._changed((topic, group))

    def holds(self, topic: str, group: str) -> frozenset[str]:
        return frozenset(self._holds.get((topic, group), ()))

    # -- broadcast ------------------------------------------------------------------------
    async def subscribe_stream(self, pattern: str, handler: StreamHandler, *,
                               buffer: int = STREAM_BUFFER) -> StreamSubscription:
        """Every matching event from now, on an ephemeral consumer of the one stream the pattern
        resolves to (DeliverNew, AckNone, reaped when idle); PatternError for a pattern that
        spans every namespace or several streams."""
        self._check_open()
        try:
            topics.stream_for_pattern(pattern, self.event_retention_hours)
        except topics.TopicError as exc:
            raise PatternError(str(exc).removeprefix("queue: ")) from None
        tap = StreamTap(self, pattern, await self._stream_of(pattern), handler, buffer)
        await tap.start()
        self._taps.add(tap)
        return tap

    def forget_tap(self, tap: StreamTap) -> None:
        """A broadcast subscription that closed lets go of its place (its `close` calls this)."""
        self._taps.discard(tap)

    # -- stopping -------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closing or self.nc.is_closed:
            raise Unreachable(f"the client of node {self.node_id} is closed")

    async def close(self) -> None:
        """Detach everything (in-flight mail goes back at once), end broadcast subscriptions,
        drain the connection."""
        if self._closing:
            return
        for topic, group in list(self._attachments):
            await self.detach(topic, group)
        for tap in list(self._taps):
            await tap.close()
        for handle in list(self._replies):
            await handle.close()
        self._closing = True
        await self._stop_beating()
        if not self.nc.is_closed:
            try:
                await asyncio.wait_for(self.nc.drain(), 10)
            except Exception:
                with contextlib.suppress(Exception):
                    await self.nc.close()

    stop = close

    async def _stop_beating(self) -> None:
        task, self._heartbeat = self._heartbeat, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
