"""The clocks the in-memory twin keeps its timers on (seed 000, "Delivery Semantics": "the
in-memory twin models the backoff virtually"; "The ack clock is real").

The twin's broker runs three timers: a NAK's backoff, each in-flight message's ack window,
and each client's in-progress heartbeat. They run on a `Clock`, so the conformance suite can
drive the product's own spacing (1 s doubling to 30 s) and its own ack window on a
`VirtualClock` in milliseconds, while every other user of the twin gets `MonotonicClock`:
real seconds on the running event loop.

A timer's callback is a plain function, never a coroutine: `VirtualClock.advance` runs every
callback due in deadline order, each at its own instant, so a heartbeat due at 20 s lands
before the ack deadline it pushes back, with no task scheduling in between to reorder them.
"""
from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from typing import Callable, Protocol


class Timer(Protocol):
    def cancel(self) -> None: ...


class Clock(Protocol):
    """Seconds on a monotonic scale, and callbacks at instants on it."""

    def now(self) -> float: ...

    def call_at(self, when: float, callback: Callable[[], None]) -> Timer:
        """Run callback (a plain function) once `now()` reaches `when`; cancellable."""


class MonotonicClock:
    """Real time: `time.monotonic`, timers on the running event loop."""

    def now(self) -> float:
        return time.monotonic()

    def call_at(self, when: float, callback: Callable[[], None]) -> Timer:
        return asyncio.get_running_loop().call_later(max(when - self.now(), 0.0), callback)


class _VirtualTimer:
    __slots__ = ("when", "callback", "cancelled")

    def __init__(self, when: float, callback: Callable[[], None]) -> None:
        self.when, self.callback, self.cancelled = when, callback, False

    def cancel(self) -> None:
        self.cancelled = True


class VirtualClock:
    """Time that moves only when `advance` moves it. Timers due inside an advance run in
    deadline order (ties in the order they were set), each with `now()` at its deadline, and
    a timer one of them sets runs in the same advance when it falls due inside it."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = float(start)
        self._timers: list[tuple[float, int, _VirtualTimer]] = []
        self._order = itertools.count()

    def now(self) -> float:
        return self._now

    def call_at(self, when: float, callback: Callable[[], None]) -> Timer:
        timer = _VirtualTimer(max(float(when), self._now), callback)
        heapq.heappush(self._timers, (timer.when, next(self._order), timer))
        return timer

    def advance(self, seconds: float) -> None:
        """Move time forward by `seconds`, running every timer that falls due on the way."""
        if seconds < 0:
            raise ValueError("a clock does not go back")
        target = self._now + seconds
        while self._timers and self._timers[0][0] <= target:
            when, _, timer = heapq.heappop(self._timers)
            if timer.cancelled:
                continue
            self._now = when
            timer.callback()
        self._now = target
