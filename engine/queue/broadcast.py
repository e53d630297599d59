"""What both backends share about handing events to local code (seed 000, "Publish
Listeners", "Broadcast Streams"): the publish listeners that run after the broker
acknowledged, and the bounded buffer between a broadcast and a slow subscriber.
"""
from __future__ import annotations

import asyncio
import inspect
import logging
from typing import Iterable

from engine.queue.contract import PublishListener, StreamHandler
from events.envelope import Event
from events.errors import EventDecodeError

log = logging.getLogger("queue")


async def run_publish_listeners(listeners: Iterable[PublishListener], topic: str, stamped: Event) -> None:
    """Run every listener inline on the stamped copy; one that fails is logged, never raised:
    telemetry must not be able to fail a publish."""
    for listener in list(listeners):
        try:
            result = listener(topic, stamped)
            if inspect.isawaitable(result):
                await result
        except Exception:
            log.exception("publish_listener_failed", extra={"topic": topic, "event_id": str(stamped.id)})


class BufferedTap:
    """One broadcast subscriber's buffer and the task that empties it into the handler. A full
    buffer drops the event (counted in `missed`), so a slow subscriber never slows anyone."""

    def __init__(self, pattern: str, handler: StreamHandler, buffer: int, name: str) -> None:
        self.pattern = pattern
        self._handler = handler
        self._buffer: asyncio.Queue[bytes] = asyncio.Queue(maxsize=max(int(buffer), 1))
        self._missed = 0
        self._closed = False
        self._name = name
        self._task: asyncio.Task | None = None

    @property
    def missed(self) -> int:
        """Events this subscriber missed because its buffer was full."""
        return self._missed

    def offer(self, body: bytes) -> None:
        if self._closed:
            return
        try:
            self._buffer.put_nowait(body)
        except asyncio.QueueFull:
            self._missed += 1

    def start_pump(self) -> None:
        self._task = asyncio.create_task(self._pump(), name=self._name)

    async def _pump(self) -> None:
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

    async def stop_pump(self) -> None:
        """Stop handing events on; the pump's own cancellation is not the caller's."""
        self._closed = True
        if self._task is None:
            return
        self._task.cancel()
        try:
            await self._task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise
