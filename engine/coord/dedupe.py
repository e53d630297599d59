"""Dedupe slots (seed 002, "What changed": "the delivery dedupe, the rate valve, the completion
ledger ... each lives in a coordination bucket ... so the broker expires them"; the custody
claim "in the coordination store, create-only. The claim's winner keeps the batch").

`claim(namespace, key, ttl)` is create-only: the first claim of a key wins and every later one
within `ttl` is told it lost, on whichever node it is made. The slot then expires by itself.
"""
from __future__ import annotations

import json

from engine.coord.contract import CoordError, CoordStore, KeyExists

DEDUPE_BUCKET = "crewlet_dedupe"


class Dedupe:
    """First-claim-wins slots on the coordination store."""

    def __init__(self, store: CoordStore, *, node_id: str = "") -> None:
        self.store = store
        self.node_id = node_id
        self._provisioned = False

    async def provision(self) -> None:
        """Create the dedupe bucket if missing (no bucket age: every slot has its own ttl)."""
        await self.store.ensure_bucket(DEDUPE_BUCKET)
        self._provisioned = True

    async def claim(self, namespace: str, key: str, ttl: float, note: dict | None = None) -> bool:
        """Claim `key` in `namespace` for `ttl` seconds: True for the first claim, False when
        the slot is already claimed. Unavailable when the store did not answer, never False.
        `note` is kept in the slot for `holder` to read (what the first claim was)."""
        if not namespace or ":" in namespace:
            raise CoordError(f"dedupe namespace {namespace!r}: non-empty, with no ':'")
        if not key:
            raise CoordError(f"dedupe key in {namespace}: empty")
        if not self._provisioned:
            await self.provision()
        value = json.dumps({**(note or {}), "node": self.node_id}).encode()
        try:
            await self.store.create(DEDUPE_BUCKET, f"{namespace}:{key}", value, ttl=ttl)
        except KeyExists:
            return False
        return True

    async def holder(self, namespace: str, key: str) -> dict | None:
        """What the winning claim of `key` noted (with its node), or None once it expired."""
        entry = await self.store.get(DEDUPE_BUCKET, f"{namespace}:{key}")
        if entry is None:
            return None
        try:
            return json.loads(entry.value)
        except ValueError:
            return {}
