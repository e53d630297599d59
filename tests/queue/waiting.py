"""Waiting on conditions, never on the clock: the suite runs against a real broker whose
backoff is a real timer, so a case waits for what it expects with a deadline, and proves a
negative by watching a condition hold for a quiet window sized past that backoff."""
from __future__ import annotations

import asyncio
import inspect
from typing import Any, Awaitable, Callable

DEADLINE = 15.0
# Longer than the FAST tuning's whole NAK spacing (0.2 s doubling to 0.4 s) plus a fetch, so a
# redelivery that was going to happen has happened inside the window.
QUIET = 1.0

Predicate = Callable[[], Any | Awaitable[Any]]


async def _value(predicate: Predicate) -> Any:
    result = predicate()
    if inspect.isawaitable(result):
        result = await result
    return result


async def eventually(predicate: Predicate, timeout: float = DEADLINE, message: str = "", interval: float = 0.01) -> Any:
    """Return predicate's first truthy value; AssertionError naming `message` at the deadline."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        result = await _value(predicate)
        if result:
            return result
        if loop.time() >= deadline:
            raise AssertionError(f"not within {timeout}s: {message or predicate}")
        await asyncio.sleep(interval)


async def throughout(predicate: Predicate, window: float = QUIET, message: str = "", interval: float = 0.02) -> None:
    """Assert predicate stays truthy for the whole window (how a case shows something does NOT happen)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + window
    while True:
        if not await _value(predicate):
            raise AssertionError(f"stopped holding: {message or predicate}")
        if loop.time() >= deadline:
            return
        await asyncio.sleep(interval)
