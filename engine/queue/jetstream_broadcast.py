"""Broadcast on JetStream: `subscribe_stream` (seed 000, "Broadcast Streams").

Each subscriber is an ephemeral consumer on the one stream its pattern resolves to, and three
of its settings are the design: it delivers from now (DeliverPolicy new), acknowledges
nothing (AckPolicy none), and is reaped by the broker a minute after its subscriber goes
(inactive_threshold). The broker pushes to an inbox of this process, into a bounded buffer
the handler empties: past it the subscriber misses events (counted in `missed`) rather than
slowing anyone, and it never holds a message.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING

from nats.aio.msg import Msg

from engine.queue.contract import StreamHandler
from events.envelope import Event
from events.errors import EventDecodeError

if TYPE_CHECKING:
    from engine.queue.jetstream import JetStreamQueue

log = logging.getLogger("queue.jetstream")


class StreamTap:
    """One broadcast subscriber: an ephemeral consumer delivering from now, acking nothing, into
    a bounded buffer; past it the subscriber misses events (counted) and holds nothing."""

    def __init__(self, queue: "JetStreamQueue", pattern: str, stream: str, handler: StreamHandler, buffer: int) -> None:
        self.pattern = pattern
        self._queue = queue
        self._stream = stream
        self._handler = handler
        self._buffer: asyncio.Queue[bytes] = asyncio.Queue(maxsize=max(int(buffer), 1))
        self._missed = 0
        self._sub = None
        self._name = ""
        self._task: asyncio.Task | None = None
        self._closed = False

    @property
    def missed(self) -> int:
        """Events this subscriber missed because its buffer was full."""
        return self._missed

    async def start(self) -> None:
        nc = self._queue.nc
        inbox = nc.new_inbox()
        self._name = f"live_{inbox.rsplit('.', 1)[-1]}"
        self._sub = await nc.subscribe(inbox, cb=self._offer)
        config = {
            "name": self._name,
            "deliver_subject": inbox,
            "deliver_policy": "new",        # a live feed, not a replay of a month of history
            "ack_policy": "none",           # a dashboard can never hold a message
            "filter_subject": self.pattern,
            "replay_policy": "instant",
            "inactive_threshold": int(self._queue.tuning.stream_inactive_seconds * 1_000_000_000),
            "mem_storage": True,
            "num_replicas": 1,
        }
        subject = f"$JS.API.CONSUMER.CREATE.{self._stream}.{self._name}.{self.pattern}"
        try:
            await self._queue.provisioner.create(subject, {"stream_name": self._stream, "config": config, "action": "create"},
                                                 f"create stream consumer on {self.pattern}", "jetstream_consumer_slow",
                                                 stream=self._stream, consumer=self._name)
        except BaseException:
            with contextlib.suppress(Exception):
                await self._sub.unsubscribe()
            raise
        self._task = asyncio.create_task(self._run(), name=f"jetstream-stream:{self.pattern}")

    async def _offer(self, msg: Msg) -> None:
        if self._closed or (msg.headers and not msg.data):  # heartbeats and statuses carry nothing
            return
        try:
            self._buffer.put_nowait(msg.data)
        except asyncio.QueueFull:
            self._missed += 1

    async def _run(self) -> None:
        while True:
            body = await self._buffer.get()
            try:
                event = Event.from_json(body)
            except EventDecodeError:
                log.warning("stream_event_undecodable", extra={"pattern": self.pattern})
                continue
            try:
                await self._handler(event)
            except Exception:
                log.exception("stream_handler_failed", extra={"pattern": self.pattern})

    async def close(self) -> None:
        """End the subscription; the broker's consumer goes with it (or is reaped when idle)."""
        if self._closed:
            return
        self._closed = True
        self._queue._taps.discard(self)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._sub is not None:
            with contextlib.suppress(Exception):
                await self._sub.unsubscribe()
        if not self._queue.nc.is_closed:
            with contextlib.suppress(Exception):
                await self._queue.provisioner.delete_consumer(self._stream, self._name)
