"""The watchdog (seed 002, "Probes": the engine ends a wedged process itself -- it exits once
its watched loop stalls for a seat lease TTL, 45 s, with exit code 75).

A heartbeat task on the event loop stamps the time every `beat` seconds; a thread checks the
stamp and calls `on_stall` when it is older than `stall_after`. A stalled loop cannot renew
its leases, so a node past that point is acting on leases a peer may already hold.
"""
from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Callable

log = logging.getLogger("engine.node.watchdog")

EXIT_WATCHDOG = 75


class Watchdog:
    def __init__(self, stall_after: float, on_stall: Callable[[float], None], beat: float = 1.0) -> None:
        self.stall_after = stall_after
        self.beat = min(beat, stall_after / 4)
        self.on_stall = on_stall
        self._last = time.monotonic()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._task: asyncio.Task | None = None

    async def _heartbeat(self) -> None:
        while True:
            self._last = time.monotonic()
            await asyncio.sleep(self.beat)

    def check(self) -> float | None:
        """One check: the stall in seconds when the loop has been silent too long, else None."""
        silent = time.monotonic() - self._last
        return silent if silent >= self.stall_after else None

    def _watch(self) -> None:
        while not self._stop.wait(self.beat):
            silent = self.check()
            if silent is not None:
                log.error("watchdog_loop_stalled", extra={"silent_seconds": round(silent, 1), "limit_seconds": self.stall_after})
                self.on_stall(silent)
                return

    def start(self) -> None:
        self._last = time.monotonic()
        self._task = asyncio.get_running_loop().create_task(self._heartbeat(), name="watchdog-heartbeat")
        self._thread = threading.Thread(target=self._watch, name="watchdog", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._task is not None:
            self._task.cancel()
