"""The projection's sockets (seed 000, "Broadcast Streams": the in-process stream "fans every
event out to every connected WebSocket"; a slow one misses frames, counted in its Outbox,
and never slows the others)."""
from __future__ import annotations

from typing import Any

from dashboard.outbox import Outbox, encode


class Fanout:
    """Every attached socket's outbox; a frame is encoded once, whatever their number."""

    def __init__(self) -> None:
        self.outboxes: set[Outbox] = set()

    def attach(self, outbox: Outbox) -> None:
        self.outboxes.add(outbox)

    def detach(self, outbox: Outbox) -> None:
        self.outboxes.discard(outbox)

    def broadcast(self, frame: dict[str, Any]) -> None:
        if not self.outboxes:
            return
        text = encode(frame)
        for outbox in self.outboxes:
            outbox.offer(text)
