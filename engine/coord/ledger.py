"""The completion ledger (seed 000, "Routing" and "Inbox Batching": "a turn that finished but
whose delivery was never acked is not re-run, because the completion ledger records what
shipped"; seed 002, "What changed": the ledger is one of the fleet-shared records that lives
in a coordination bucket "whose own age is its retention, so the broker expires them").

A record says: seat `handle` worked trigger `trigger_id` in turn `turn_id`, and `reason` says how
when it was not by running it: `abandoned` (its turn was abandoned rather than redelivered) or
`answered_in_thread` (a later turn of its conversation was shown it waiting and answered it;
seed 000, "the failed one is not answered twice"). It is the fleet's, so a redelivery that
reaches another node is still dropped as worked (TurnTriggerSkipped).
Records age out with the bucket after the horizon (7 days unless configured): a bucket that
already exists keeps the age it was created with (a booting node never rewrites a shared
object), and `horizon` reports the age in force.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

from engine.coord.contract import CoordError, CoordStore, Entry, KeyExists, RevisionMismatch

LEDGER_BUCKET = "crewlet_ledger"
LEDGER_HORIZON_SECONDS = 7 * 24 * 3600.0  # a redelivery is long settled a week on


@dataclass(frozen=True)
class WorkedRecord:
    """One worked trigger: which turn worked it and when it was recorded."""

    handle: str
    trigger_id: str
    turn_id: str
    worked_at: float
    reason: str = ""


class CompletionLedger:
    """What the fleet's seats have worked, keyed by (seat handle, trigger id)."""

    def __init__(self, store: CoordStore, *, horizon: float = LEDGER_HORIZON_SECONDS) -> None:
        self.store = store
        self.horizon = float(horizon)
        self._provisioned = False

    async def provision(self) -> None:
        """Create the ledger bucket if missing; `horizon` becomes the age in force."""
        info = await self.store.ensure_bucket(LEDGER_BUCKET, max_age=self.horizon)
        self.horizon = info.max_age or self.horizon
        self._provisioned = True

    async def record_worked(self, handle: str, trigger_id: str, turn_id: str, *, reason: str = "") -> WorkedRecord:
        """Record that `handle` worked `trigger_id` in `turn_id` (`reason`: how, when not by
        running it). The first record stands: a trigger already recorded returns the record
        that is there."""
        await self.mark_worked(handle, trigger_id, turn_id, reason=reason)
        key = _key(handle, trigger_id)
        entry = await self.store.get(LEDGER_BUCKET, key)
        if entry is None:  # aged out between the two calls: the record is ours to write again
            await self.store.put(LEDGER_BUCKET, key, _value(handle, trigger_id, turn_id, reason))
            entry = await self.store.get(LEDGER_BUCKET, key)
        return _decode(entry)

    async def mark_worked(self, handle: str, trigger_id: str, turn_id: str, *, reason: str = "") -> bool:
        """`record_worked` without reading the record back (one store round trip, what a seat
        host pays after every turn): True when this call wrote it, False when a record stood
        already (the first stands)."""
        await self._ready()
        try:
            await self.store.create(LEDGER_BUCKET, _key(handle, trigger_id), _value(handle, trigger_id, turn_id, reason))
        except KeyExists:
            return False
        return True

    async def withdraw(self, handle: str, trigger_id: str, turn_id: str) -> bool:
        """Delete the record of `handle` working `trigger_id` if `turn_id` wrote it and nobody
        wrote it since (a turn whose record was written beside its end record, and whose end
        did not land, runs again); whether it was deleted."""
        await self._ready()
        key = _key(handle, trigger_id)
        entry = await self.store.get(LEDGER_BUCKET, key)
        if entry is None or _decode(entry).turn_id != turn_id:
            return False
        try:
            await self.store.delete(LEDGER_BUCKET, key, entry.revision)
        except RevisionMismatch:
            return False
        return True

    async def worked(self, handle: str, trigger_id: str) -> WorkedRecord | None:
        """The record of `handle` working `trigger_id`, or None when it has none."""
        await self._ready()
        entry = await self.store.get(LEDGER_BUCKET, _key(handle, trigger_id))
        return None if entry is None else _decode(entry)

    async def _ready(self) -> None:
        if not self._provisioned:
            await self.provision()


def _value(handle: str, trigger_id: str, turn_id: str, reason: str) -> bytes:
    record = {"handle": handle, "trigger_id": trigger_id, "turn_id": turn_id}
    if reason:
        record["reason"] = reason
    return json.dumps(record).encode()


def _key(handle: str, trigger_id: str) -> str:
    if not handle or ":" in handle:
        raise CoordError(f"ledger handle {handle!r}: a seat handle is non-empty and has no ':'")
    if not trigger_id:
        raise CoordError("ledger trigger id: empty")
    return f"{handle}:{trigger_id}"


def _decode(entry: Entry | None) -> WorkedRecord:
    if entry is None:
        raise CoordError("ledger: a record written a moment ago is gone")
    raw = json.loads(entry.value)
    return WorkedRecord(handle=raw["handle"], trigger_id=raw["trigger_id"], turn_id=raw["turn_id"],
                        worked_at=entry.updated, reason=raw.get("reason", ""))
