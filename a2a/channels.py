"""A2A channel records in the coordination store's channels slot (seed 000, "Ephemeral A2A
channels": "Channel state -- the two participants, open or closed, the message count -- lives
in the coordination store's channels slot, because the two parties are usually on different
nodes").

One key per channel (its id) in the bucket `crewlet_channels`, which has no age: a clock
cannot tell an open channel from a closed one, so the maintenance duty closes the idle ones
and deletes the closed ones itself (`a2a.service.sweep`). The value is JSON: the requester,
the responder, open or closed, the message count, and once closed who closed it, in which
turn and why.

Times are the STORE's, never a node's: a channel is opened on one node and closed on another,
and two machines' clocks differ. The store stamps every revision it writes (`Entry.updated`);
an open channel's `opened_at` is the stamp of the revision that opened it (nothing writes an
open channel again), and the close copies that stamp into the value before it writes, so a
closed channel's `opened_at` is in its value and its `closed_at` is its own last stamp.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, fields
from datetime import datetime, timezone
from typing import Any

from engine.coord.contract import BucketNotFound, CoordStore, Entry, KeyExists, RevisionMismatch

CHANNELS_BUCKET = "crewlet_channels"
OPEN, CLOSED = "open", "closed"


@dataclass(frozen=True)
class Channel:
    """One channel as the store holds it, with the revision a compare-and-set names."""

    channel_id: str
    requester: str
    responder: str
    state: str = OPEN
    message_count: int = 1          # the ask is the first message
    opened_at: float = 0.0          # the store's stamp of the opening revision
    closed_at: float | None = None  # the store's stamp of the closing revision
    closed_by: str = ""             # the answering seat; empty on the sweep's close
    turn_id: str = ""               # the answering turn; empty on the sweep's close
    reason: str = ""                # answered | idle
    ask_turn_id: str = ""           # the asker's turn that asked
    request_id: str = ""            # the a2a_request wake's event id
    brief_bytes: int = 0
    depth: int = 0                  # the wake's delegation depth
    trace_id: str = ""
    revision: int = 0

    @property
    def is_open(self) -> bool:
        return self.state == OPEN

    @property
    def duration_ms(self) -> int:
        """closed_at - opened_at, both the store's; 0 while open."""
        if self.closed_at is None:
            return 0
        return max(0, int(round((self.closed_at - self.opened_at) * 1000)))

    def encode(self) -> bytes:
        raw = self._fields()
        for derived in ("revision", "closed_at"):  # the entry's own: its revision and its stamp
            raw.pop(derived)
        if self.is_open:
            raw.pop("opened_at")  # the opening revision's stamp is the opened_at
        return json.dumps(raw, sort_keys=True).encode()

    def _fields(self) -> dict[str, Any]:
        # every field is a scalar: a flat copy (`asdict` deep-copies each one)
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def decode(cls, entry: Entry) -> "Channel | None":
        """The channel an entry holds, or None for a value this build cannot read."""
        try:
            raw = json.loads(entry.value)
            known = {f.name for f in fields(cls)}
            channel = cls(**{k: v for k, v in raw.items() if k in known and k not in ("revision", "closed_at")})
        except (ValueError, TypeError):
            return None
        stamp = {"revision": entry.revision}
        if channel.is_open:
            stamp["opened_at"] = entry.updated
        else:
            stamp["closed_at"] = entry.updated
        return _with(channel, **stamp)

    def describe(self) -> dict[str, Any]:
        """The channel as `GET /a2a/channels/{id}` shows it: its times in ISO 8601 UTC, as every
        other route and the channel's own events give them."""
        out = self._fields()
        out["opened_at"] = _iso(self.opened_at)
        out["closed_at"] = _iso(self.closed_at)
        out["duration_ms"] = self.duration_ms
        return out


def utc(seconds: float | None) -> datetime | None:
    """A record's stamp (seconds since the epoch) as an aware UTC time; None stays None."""
    return datetime.fromtimestamp(seconds, timezone.utc) if seconds is not None else None


def _iso(seconds: float | None) -> str | None:
    stamp = utc(seconds)
    return stamp.isoformat() if stamp is not None else None


def _with(channel: Channel, **changes: Any) -> Channel:
    from dataclasses import replace

    return replace(channel, **changes)


class ChannelBook:
    """The channels slot: open, read, close, list and delete channel records."""

    def __init__(self, store: CoordStore) -> None:
        self.store = store

    async def open(self, channel: Channel) -> Channel:
        """Write a new open channel; the channel with its revision. Its opened_at is the store's
        stamp, read back by whoever reads the record (not here: the ask does not wait for it)."""
        revision = await self._call(self.store.create, CHANNELS_BUCKET, channel.channel_id, channel.encode())
        return _with(channel, revision=revision)

    async def get(self, channel_id: str) -> Channel | None:
        """The channel, or None when there is no record (never opened, or deleted)."""
        if not channel_id:
            return None
        entry = await self._call(self.store.get, CHANNELS_BUCKET, channel_id)
        return Channel.decode(entry) if entry is not None else None

    async def close(self, channel: Channel, *, closed_by: str, turn_id: str, reason: str,
                    message_count: int) -> Channel | None:
        """Close an open channel over the revision it was read at; the closed channel with its
        `closed_at`, or None when somebody wrote it since (closed it first)."""
        closed = _with(channel, state=CLOSED, closed_by=closed_by, turn_id=turn_id, reason=reason,
                       message_count=message_count)
        try:
            revision = await self._call(self.store.update, CHANNELS_BUCKET, channel.channel_id, closed.encode(),
                                        channel.revision)
        except (RevisionMismatch, KeyExists):
            return None
        entry = await self.store.get(CHANNELS_BUCKET, channel.channel_id)
        if entry is None or entry.revision != revision:
            return None
        return Channel.decode(entry)

    async def all(self) -> list[Channel]:
        """Every channel record, oldest opened first."""
        out = []
        for key in await self._call(self.store.keys, CHANNELS_BUCKET):
            entry = await self.store.get(CHANNELS_BUCKET, key)
            channel = Channel.decode(entry) if entry is not None else None
            if channel is not None:
                out.append(channel)
        return sorted(out, key=lambda c: (c.opened_at, c.channel_id))

    async def delete(self, channel: Channel) -> bool:
        """Delete the record if it is still the revision read; whether it was."""
        try:
            await self._call(self.store.delete, CHANNELS_BUCKET, channel.channel_id, channel.revision)
        except RevisionMismatch:
            return False
        return True

    async def _call(self, verb, *args):
        try:
            return await verb(*args)
        except BucketNotFound:  # the first channel of the fleet: the bucket, then again
            await self.store.ensure_bucket(CHANNELS_BUCKET)
            return await verb(*args)
