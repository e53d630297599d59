"""The in-process coordination twin: `coordination.type: local` (seed 002, "Replica count":
one node is the design's degenerate case, not a lesser path; seed 000, "Ephemeral A2A
channels": a real implementation of the same certified contract rather than a fallback).

It keeps what the NATS KV backend keeps, the same way: per-bucket revisions that only grow
(a bucket is one sequence, as a stream is), a removed key leaves a marker holding its
revision until the bucket's age takes it, and values age out on a clock. The clock is
injectable so a test can step over a lifetime instead of sleeping through it.

It is per process and keeps nothing past it. Two nodes each holding their own twin would each
believe they own the whole company, which is why Tier A refuses `coordination.type: local`
beside a clustered or external stream; and a restart forgets everything, which is why it
holds only leases on a running node (a restarted node then has no stale lease of its own to
wait out) and never the records an operator's decision lives in (`factory`).
"""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Callable

from engine.coord.contract import (
    LINK_CLOSED,
    LINK_UP,
    BucketInfo,
    BucketNotFound,
    CoordError,
    Entry,
    KeyExists,
    RevisionMismatch,
    Unavailable,
    check_bucket,
    check_key,
    whole_seconds,
)

Clock = Callable[[], float]


@dataclass
class _Slot:
    value: bytes
    revision: int
    written: float
    expires: float | None  # the value's own ttl, if it was created with one
    removed: bool = False  # a removal marker: holds the revision, answers as absent


@dataclass
class _Bucket:
    max_age: float | None
    last_revision: int = 0
    slots: dict[str, _Slot] = field(default_factory=dict)


class LocalCoord:
    """The twin. `clock` returns seconds since the epoch (time.time by default)."""

    def __init__(self, clock: Clock = time.time) -> None:
        self._clock = clock
        self._buckets: dict[str, _Bucket] = {}
        self._closed = False

    async def ensure_bucket(self, bucket: str, *, max_age: float | None = None) -> BucketInfo:
        """Create the bucket if missing; an existing one is adopted as found."""
        await asyncio.sleep(0)  # a broker round trip lets other tasks in
        self._check_open()
        check_bucket(bucket)
        if max_age is not None and max_age <= 0:
            raise CoordError(f"bucket {bucket}: max_age {max_age!r} must be positive, or None")
        found = self._buckets.setdefault(bucket, _Bucket(max_age=max_age))
        return BucketInfo(name=bucket, max_age=found.max_age)

    async def create(self, bucket: str, key: str, value: bytes, ttl: float | None = None) -> int:
        """Write only if the key holds no live value; return the new revision."""
        await asyncio.sleep(0)  # a broker round trip lets other tasks in
        b, now = self._bucket(bucket, key), self._clock()
        slot = self._live_slot(b, key, now)
        if slot is not None and not slot.removed:
            raise KeyExists(f"{bucket} {key}: already holds revision {slot.revision}")
        return self._write(b, key, value, now, _expiry(now, ttl))

    async def update(self, bucket: str, key: str, value: bytes, expected_revision: int,
                     ttl: float | None = None) -> int:
        """Write only if `expected_revision` is the key's latest; return the new revision."""
        await asyncio.sleep(0)  # a broker round trip lets other tasks in
        b, now = self._bucket(bucket, key), self._clock()
        slot = self._live_slot(b, key, now)
        latest = 0 if slot is None else slot.revision
        if latest != expected_revision or latest == 0:
            raise RevisionMismatch(f"{bucket} {key}: expected revision {expected_revision}, "
                                   f"latest is {latest}")
        return self._write(b, key, value, now, _expiry(now, ttl))

    async def put(self, bucket: str, key: str, value: bytes, ttl: float | None = None) -> int:
        """Write unconditionally; return the new revision."""
        await asyncio.sleep(0)  # a broker round trip lets other tasks in
        b, now = self._bucket(bucket, key), self._clock()
        return self._write(b, key, value, now, _expiry(now, ttl))

    async def get(self, bucket: str, key: str) -> Entry | None:
        """The key's live value, or None."""
        await asyncio.sleep(0)  # a broker round trip lets other tasks in
        b, now = self._bucket(bucket, key), self._clock()
        slot = self._live_slot(b, key, now)
        if slot is None or slot.removed:
            return None
        return Entry(key=key, value=slot.value, revision=slot.revision, updated=slot.written)

    async def delete(self, bucket: str, key: str, expected_revision: int | None = None) -> None:
        """Leave a removal marker; conditional on `expected_revision` when given."""
        await asyncio.sleep(0)  # a broker round trip lets other tasks in
        b, now = self._bucket(bucket, key), self._clock()
        slot = self._live_slot(b, key, now)
        if expected_revision is not None:
            latest = 0 if slot is None else slot.revision
            if latest != expected_revision:
                raise RevisionMismatch(f"{bucket} {key}: expected revision {expected_revision}, "
                                       f"latest is {latest}")
        b.last_revision += 1
        b.slots[key] = _Slot(value=b"", revision=b.last_revision, written=now, expires=None, removed=True)

    async def keys(self, bucket: str, prefix: str | None = None) -> list[str]:
        """The keys holding live values (with `prefix`), sorted."""
        await asyncio.sleep(0)  # a broker round trip lets other tasks in
        self._check_open()
        check_bucket(bucket)
        b = self._buckets.get(bucket)
        if b is None:
            raise BucketNotFound(f"{bucket}: no such bucket")
        now = self._clock()
        out = []
        for key in list(b.slots):
            slot = self._live_slot(b, key, now)
            if slot is not None and not slot.removed and (prefix is None or key.startswith(prefix)):
                out.append(key)
        return sorted(out)

    async def ping(self, timeout: float) -> bool:
        """In process there is no server to stop answering: True until closed."""
        await asyncio.sleep(0)
        return not self._closed

    async def close(self) -> None:
        """Close the twin: from here on it answers nothing (Unavailable)."""
        self._closed = True

    @property
    def link(self) -> str:
        """In process, there is no connection to lose: up until closed."""
        return LINK_CLOSED if self._closed else LINK_UP

    # -- inside: every public call yields once (as a round trip would) and is synchronous
    # after that, so each one is atomic on the event loop, as a stream's single writer
    # makes it on the broker, while callers still interleave between calls.

    def _check_open(self) -> None:
        if self._closed:
            raise Unavailable("the local coordination store is closed")

    def _bucket(self, bucket: str, key: str) -> _Bucket:
        self._check_open()
        check_bucket(bucket)
        check_key(key)
        b = self._buckets.get(bucket)
        if b is None:
            raise BucketNotFound(f"{bucket}: no such bucket")
        return b

    def _live_slot(self, b: _Bucket, key: str, now: float) -> _Slot | None:
        """The key's slot after ageing: a value (or marker) past its lifetime is gone."""
        slot = b.slots.get(key)
        if slot is None:
            return None
        aged = b.max_age is not None and now - slot.written >= b.max_age
        lapsed = slot.expires is not None and now >= slot.expires
        if aged or lapsed:
            del b.slots[key]
            return None
        return slot

    def _write(self, b: _Bucket, key: str, value: bytes, now: float, expires: float | None) -> int:
        if not isinstance(value, (bytes, bytearray, memoryview)):
            raise CoordError(f"{key}: a value is bytes, not {type(value).__name__}")
        b.last_revision += 1
        b.slots[key] = _Slot(value=bytes(value), revision=b.last_revision, written=now, expires=expires)
        return b.last_revision


def _expiry(now: float, ttl: float | None) -> float | None:
    seconds = whole_seconds(ttl)
    return None if seconds is None else now + seconds
