"""What both backends share about answering requests (the contract's request/reply: seed 000,
"Reading the fleet's history"): each request runs its responder in a task of its own, so a
slow answer never holds up the next question, and at most REPLY_CONCURRENCY run at once.

Failure policy: a responder that raises is logged and answers nothing (its asker runs out its
own time and names the silence); an answer that cannot be sent is logged. Closing cancels the
requests still running.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Awaitable, Callable

from engine.queue.contract import REPLY_CONCURRENCY, Responder

log = logging.getLogger("queue")

Send = Callable[[bytes], Awaitable[None]]


class ReplyTasks:
    """The running answers of one responder."""

    def __init__(self, subject: str, responder: Responder, limit: int = REPLY_CONCURRENCY) -> None:
        self.subject = subject
        self._responder = responder
        self._slots = asyncio.Semaphore(limit)
        self._tasks: set[asyncio.Task] = set()
        self.closed = False

    def spawn(self, payload: bytes, send: Send) -> None:
        """Answer `payload` in a task of its own; `send` carries the answer back."""
        if self.closed:
            return
        task = asyncio.create_task(self._answer(payload, send), name=f"reply:{self.subject}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _answer(self, payload: bytes, send: Send) -> None:
        async with self._slots:
            try:
                answer = await self._responder(payload)
            except Exception:
                log.exception("reply_responder_failed", extra={"subject": self.subject})
                return
            try:
                await send(answer)
            except Exception as exc:
                log.warning("reply_send_failed", extra={"subject": self.subject, "error": str(exc) or type(exc).__name__})

    async def close(self) -> None:
        """Stop answering; cancel what is running."""
        self.closed = True
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task
