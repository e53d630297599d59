"""The history's horizon on a data node (seed 002: history is read no further back than the
event log's 30-day floor, `stream.event_retention_hours`; the party rows are "swept on the same
horizon as the events they point at"): rows past it are deleted, an hour apart, so the store
holds no more than a read can reach."""
from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import datetime, timezone
from typing import Callable

from events.fleet import ReadRunner
from events.retention import floor_at, prune

log = logging.getLogger("engine.history")

SWEEP_SECONDS = 3600.0  # an hour: a row outlives the horizon by an hour at most


class HorizonSweep:
    """Deletes what lies past the history's horizon; a data node runs one."""

    name = "horizon"

    def __init__(self, *, horizon_hours: float, run_write: ReadRunner, every: float = SWEEP_SECONDS,
                 clock: Callable[[], datetime] = lambda: datetime.now(timezone.utc), using: str = "default") -> None:
        self.horizon_hours = horizon_hours
        self.run_write = run_write
        self.every = every
        self.clock = clock
        self.using = using
        self._task: asyncio.Task | None = None

    async def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="history-horizon")

    async def stop(self, cut: bool) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task

    async def sweep_once(self) -> int:
        """Delete every row older than the horizon; how many went."""
        deleted = await self.run_write(prune, floor_at(self.clock(), self.horizon_hours), using=self.using)
        if deleted:
            log.info("history_swept", extra={"rows": deleted, "horizon_hours": self.horizon_hours})
        return deleted

    async def _loop(self) -> None:
        while True:
            try:
                await self.sweep_once()
            except Exception:
                log.exception("history_sweep_failed")
            await asyncio.sleep(self.every)
