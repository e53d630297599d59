"""Which seats follow a chat thread (seed 000, "Distributed Tracing": "a thread reply the seat
does not follow" is chat noise, logged at debug rather than recorded).

A seat follows a thread once it was woken in it (named in its root or in a reply) or posted in
it itself; a later reply that names nobody reaches the thread's followers. The record is the
fleet's: one coordination slot per thread (whichever node routes the next reply must see it),
holding the followers' handles, kept for a week after the last write.
"""
from __future__ import annotations

import json
import logging
from typing import Iterable

from engine.coord.contract import CoordError, CoordStore, KeyExists, RevisionMismatch

log = logging.getLogger("notify.threads")

FOLLOWS_BUCKET = "crewlet_notify_follows"
FOLLOW_TTL_SECONDS = 7 * 24 * 3600  # a week: a thread quiet that long is a new conversation
CAS_ATTEMPTS = 8


class ThreadFollows:
    def __init__(self, store: CoordStore) -> None:
        self.store = store
        self._provisioned = False

    async def _ready(self) -> None:
        if not self._provisioned:
            await self.store.ensure_bucket(FOLLOWS_BUCKET)
            self._provisioned = True

    async def followers(self, thread: str) -> set[str]:
        """The handles following `thread`; empty when nobody does or the store did not answer."""
        try:
            await self._ready()
            entry = await self.store.get(FOLLOWS_BUCKET, thread)
        except CoordError as exc:
            log.warning("thread_follows_unavailable", extra={"thread": thread, "error": str(exc)})
            return set()
        return set(json.loads(entry.value)) if entry is not None else set()

    async def follow(self, thread: str, handles: Iterable[str]) -> None:
        """Add `handles` to the thread's followers (compare-and-set; a lost race retries)."""
        wanted = set(handles)
        if not thread or not wanted:
            return
        try:
            await self._ready()
            for _ in range(CAS_ATTEMPTS):
                entry = await self.store.get(FOLLOWS_BUCKET, thread)
                have = set(json.loads(entry.value)) if entry is not None else set()
                if wanted <= have and entry is not None:
                    return
                value = json.dumps(sorted(have | wanted)).encode()
                try:
                    if entry is None:
                        await self.store.create(FOLLOWS_BUCKET, thread, value, ttl=FOLLOW_TTL_SECONDS)
                    else:
                        await self.store.update(FOLLOWS_BUCKET, thread, value, entry.revision, ttl=FOLLOW_TTL_SECONDS)
                    return
                except (KeyExists, RevisionMismatch):
                    continue
        except CoordError as exc:
            log.warning("thread_follow_failed", extra={"thread": thread, "error": str(exc)})
