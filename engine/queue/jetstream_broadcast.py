"""Broadcast on JetStream: `subscribe_stream` (seed 000, "Broadcast Streams").

Each subscriber is an ephemeral consumer on the one stream its pattern resolves to, and three
of its settings are the design: it delivers from now (DeliverPolicy new), acknowledges
nothing (AckPolicy none), and is reaped by the broker a minute after its subscriber goes
(inactive_threshold). The broker pushes to an inbox of this process, into a bounded buffer
the handler empties: past it the subscriber misses events (counted in `missed`) rather than
slowing anyone, and it never holds a message.
"""
from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING

from nats.aio.msg import Msg

from engine.queue.broadcast import BufferedTap
from engine.queue.contract import StreamHandler

if TYPE_CHECKING:
    from engine.queue.jetstream import JetStreamQueue

log = logging.getLogger("queue.jetstream")


class StreamTap(BufferedTap):
    """One broadcast subscriber: an ephemeral consumer delivering from now, acking nothing, into
    a bounded buffer; past it the subscriber misses events (counted) and holds nothing."""

    def __init__(self, queue: "JetStreamQueue", pattern: str, stream: str, handler: StreamHandler, buffer: int) -> None:
        super().__init__(pattern, handler, buffer, name=f"jetstream-stream:{pattern}")
        self._queue = queue
        self._stream = stream
        self._sub = None
        self._consumer = ""

    async def start(self) -> None:
        nc = self._queue.nc
        inbox = nc.new_inbox()
        self._consumer = f"live_{inbox.rsplit('.', 1)[-1]}"
        self._sub = await nc.subscribe(inbox, cb=self._offer)
        config = {
            "name": self._consumer,
            "deliver_subject": inbox,
            "deliver_policy": "new",        # a live feed, not a replay of a month of history
            "ack_policy": "none",           # a dashboard can never hold a message
            "filter_subject": self._queue.ns.subject(self.pattern),
            "replay_policy": "instant",
            "inactive_threshold": int(self._queue.tuning.stream_inactive_seconds * 1_000_000_000),
            "mem_storage": True,
            "num_replicas": 1,
        }
        subject = f"$JS.API.CONSUMER.CREATE.{self._stream}.{self._consumer}.{self._queue.ns.subject(self.pattern)}"
        try:
            await self._queue.provisioner.create(subject, {"stream_name": self._stream, "config": config, "action": "create"},
                                                 f"create stream consumer on {self.pattern}", "jetstream_consumer_slow",
                                                 stream=self._stream, consumer=self._consumer)
        except BaseException:
            with contextlib.suppress(Exception):
                await self._sub.unsubscribe()
            raise
        self.start_pump()

    async def _offer(self, msg: Msg) -> None:
        if msg.headers and not msg.data:  # heartbeats and statuses carry nothing
            return
        self.offer(msg.data)

    async def close(self) -> None:
        """End the subscription; the broker's consumer goes with it (or is reaped when idle)."""
        if self._closed:
            return
        self._queue.forget_tap(self)
        await self.stop_pump()
        if self._sub is not None:
            with contextlib.suppress(Exception):
                await self._sub.unsubscribe()
        if not self._queue.nc.is_closed:
            with contextlib.suppress(Exception):
                await self._queue.provisioner.delete_consumer(self._stream, self._consumer)
