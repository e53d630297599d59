"""Blocking store work off the event loop (the event store is SQLite through Django's
connections, which are per thread): a small pool whose threads each keep one connection."""
from __future__ import annotations

import asyncio
import functools
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

from django.db import DEFAULT_DB_ALIAS, connections


class StoreThreads:
    """`await threads(fn, *args, **kwargs)` runs a blocking store call on one of `count` threads."""

    def __init__(self, count: int, name: str) -> None:
        self._pool = ThreadPoolExecutor(max_workers=count, thread_name_prefix=name)

    async def __call__(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, functools.partial(_closing, fn, *args, **kwargs))

    def close(self) -> None:
        """Let the threads go once what they run is done; a thread's connection goes with it."""
        self._pool.shutdown(wait=False)


def _closing(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    try:
        return fn(*args, **kwargs)
    finally:
        # A thread keeps its connection for the next call; a broken one is dropped, not reused.
        connections[kwargs.get("using", DEFAULT_DB_ALIAS)].close_if_unusable_or_obsolete()
