"""A socket's bounded backlog (seed 000, "Broadcast Streams": "a slow subscriber misses events
rather than keeping them from anyone else").

The projection hands every frame, encoded once, to every socket's `Outbox`; `offer` never
waits. Past `size` frames a socket misses what follows, counted, and a `gap` frame takes the
missed frames' place in the order, so the screen says exactly where it lost what. Frames
that wait together leave together, as one JSON array (`next_message`).
"""
from __future__ import annotations

import asyncio
import collections
import json
from typing import Any

OUTBOX_SIZE = 2048  # a socket's backlog before it starts missing frames: ~4 s at 500 events/s
BATCH_FRAMES = 128  # frames in one message at most: a catching-up socket's message stays ~100-200 KB
# 20 ms: imperceptible on a screen, and at 500 events/s it makes 20 sockets' 10,000 sends a
# second about 1,000 -- what a socket costs is per message far more than per byte.
LINGER_SECONDS = 0.02


def encode(frame: dict[str, Any]) -> str:
    """A frame as the socket sends it (compact JSON; anything unusual as its text)."""
    return json.dumps(frame, separators=(",", ":"), ensure_ascii=False, default=str)


def gap_frame(missed: int, where: str = "socket") -> str:
    return encode({"type": "gap", "missed": missed, "where": where})


class Outbox:
    """One socket's backlog of encoded frames, drained by that socket's sender."""

    def __init__(self, size: int = OUTBOX_SIZE) -> None:
        self.size = max(int(size), 1)
        self.frames: collections.deque[str] = collections.deque()
        self.missed = 0          # dropped since the last gap frame was queued
        self.missed_total = 0
        self._ready = asyncio.Event()

    def offer(self, frame: str) -> None:
        """Queue `frame`, or count it missed when the backlog is full. Never waits."""
        if len(self.frames) >= self.size:
            self.missed += 1
            self.missed_total += 1
            return
        if self.missed:
            self.frames.append(gap_frame(self.missed))
            self.missed = 0
        self.frames.append(frame)
        self._ready.set()

    async def next(self) -> str:
        """The next frame to send, waiting for one; a pending gap once the backlog is empty."""
        while not self.frames:
            if self.missed:
                missed, self.missed = self.missed, 0
                return gap_frame(missed)
            self._ready.clear()
            await self._ready.wait()
        return self.frames.popleft()

    async def next_message(self, most: int = BATCH_FRAMES, linger: float = LINGER_SECONDS) -> str:
        """What the socket sends next: one frame, or -- when several arrive within `linger` of the
        first -- up to `most` of them as one JSON array, in order. A quiet company's frames go
        one by one; a busy one's leave in a few messages a second rather than one per event,
        and a socket that fell behind catches up in large ones."""
        first = await self.next()
        if linger > 0:
            await asyncio.sleep(linger)
        if not self.frames:
            return first
        batch = [first]
        while self.frames and len(batch) < most:
            batch.append(self.frames.popleft())
        return "[" + ",".join(batch) + "]"
