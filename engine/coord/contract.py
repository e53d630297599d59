"""The coordination store contract (seed 002, "The account needs more than publish and
subscribe", "Replica count", "The store"; seed 000, "Routing", "Ephemeral A2A channels";
DESIGN.md, "The store").

Everything the fleet shares lives here rather than in a node's SQLite file: seat, presence
and duty leases with their fencing epochs, the activation pointer and each node's apply
status, the completion ledger, delivery dedupe. The store is a key/value store in named
buckets (`crewlet_*`), each key holding one value with a revision that grows on every write.

Two implementations sit behind it, both certified by `tests/coord/test_conformance.py`:
`local.LocalCoord` (the in-process twin: revisions, compare-and-set and expiry on an
injectable clock; it holds a `coordination.type: local` node's leases, and everything beside
the in-memory queue twin) and `natskv.NatsKVCoord` (NATS KV buckets on the stream's own
broker: every node's shared records, and the leases too under `embedded-kv`). Callers get
them from `factory.open_coordination` and cannot tell which runs.

Semantics every backend keeps:
- `create` is create-only: a live key refuses it with `KeyExists`; a key that was deleted
  or has expired can be created again.
- `update` is compare-and-set: it lands only while the key's latest revision is the one
  the caller read; otherwise `RevisionMismatch`. `delete` may be conditional the same way.
- Revisions grow within a bucket and are never reused: a write after a read always has a
  larger revision than the one read.
- Expiry: a bucket may have a `max_age` (a value older than that since its last write is
  gone), and any write may give its value a lifetime of its own (`ttl`, whole seconds,
  rounded up, at least one, because the broker counts a value's lifetime in seconds). A
  write without `ttl` gives its value none, whatever the value before it had.
- `Unavailable` means the store did not answer. It is never read as "no records": a `get`
  that returns None and a `keys` that returns [] are answers; a store that is down, closed
  or electing a leader raises instead.
- Reads are the leader's (seed 002, "Coordination § Every read is the leader's"): a value
  that decides ownership is never answered by a replica that may lag.
- Durability is the backend's: NATS KV keeps every write across a broker restart (with the
  stream's `sync: always`, an acknowledged write is on disk), which is why the records live
  there; the twin keeps nothing past its process. `tests/coord/test_restart.py` certifies it
  for every backend that persists.
- `link` says how the store's connection stands, for the probes: "up", "down" while it
  redials (calls then raise Unavailable), "closed" once closed for good.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

BUCKET_NAME = re.compile(r"^crewlet_[A-Za-z0-9_\-]+$")
LINK_UP, LINK_DOWN, LINK_CLOSED = "up", "down", "closed"


class CoordError(Exception):
    """Base error of the coordination store; `code` keeps a broker's error code."""

    def __init__(self, message: str, code: int | None = None) -> None:
        self.code = code
        super().__init__(f"coord: {message}")


class KeyExists(CoordError):
    """`create` met a live value under the key."""


class RevisionMismatch(CoordError):
    """A compare-and-set named a revision that is no longer the key's latest."""


class BucketNotFound(CoordError):
    """The bucket was never provisioned (`ensure_bucket`)."""


class InvalidName(CoordError):
    """A bucket name outside `crewlet_*`, or an empty key."""


class Unavailable(CoordError):
    """The store did not answer. Never the same thing as "not there"."""


@dataclass(frozen=True)
class Entry:
    """One key's latest value: `revision` is what a compare-and-set names; `updated` is when
    this revision was written (seconds since the epoch, the store's clock)."""

    key: str
    value: bytes
    revision: int
    updated: float


@dataclass(frozen=True)
class BucketInfo:
    """A bucket as provisioned: `max_age` in seconds, None when values do not age."""

    name: str
    max_age: float | None


@runtime_checkable
class CoordStore(Protocol):
    """The fleet's shared key/value store. Async throughout."""

    async def ensure_bucket(self, bucket: str, *, max_age: float | None = None) -> BucketInfo:
        """Create the bucket if it is missing and return it as it is. An existing bucket is
        adopted as found, never rewritten: a shared object has one writer, not whichever
        node booted last (seed 002, "Raising it on a fleet that already ran")."""
        ...

    async def create(self, bucket: str, key: str, value: bytes, ttl: float | None = None) -> int:
        """Write `value` only if the key holds no live value; return the new revision.
        Raises KeyExists otherwise."""
        ...

    async def update(self, bucket: str, key: str, value: bytes, expected_revision: int,
                     ttl: float | None = None) -> int:
        """Write `value` only if `expected_revision` is the key's latest revision; return
        the new revision. Raises RevisionMismatch otherwise."""
        ...

    async def put(self, bucket: str, key: str, value: bytes, ttl: float | None = None) -> int:
        """Write `value` unconditionally; return the new revision."""
        ...

    async def get(self, bucket: str, key: str) -> Entry | None:
        """The key's live value, or None when it has none (never written, deleted, expired)."""
        ...

    async def delete(self, bucket: str, key: str, expected_revision: int | None = None) -> None:
        """Remove the key's value; with `expected_revision`, only if it is still the latest
        (RevisionMismatch otherwise). Deleting a key with no value is not an error."""
        ...

    async def keys(self, bucket: str, prefix: str | None = None) -> list[str]:
        """The keys holding live values, those starting with `prefix` when given, sorted."""
        ...

    async def ping(self, timeout: float) -> bool:
        """One round trip to the store within `timeout` seconds: True when it answered."""
        ...

    async def close(self) -> None:
        """Let go of the store; every later call raises Unavailable."""
        ...

    @property
    def link(self) -> str:
        """LINK_UP, LINK_DOWN (the connection is being redialled) or LINK_CLOSED."""
        ...


def check_bucket(bucket: str) -> None:
    """Refuse a bucket name outside `crewlet_*` (seed 002: every coordination bucket is one)."""
    if not isinstance(bucket, str) or not BUCKET_NAME.match(bucket):
        raise InvalidName(f"bucket {bucket!r}: a coordination bucket is named crewlet_<name> "
                          "(letters, digits, '_' and '-')")


def check_key(key: str) -> None:
    """Refuse an empty key; any other string is a key (backends encode what they must)."""
    if not isinstance(key, str) or not key:
        raise InvalidName(f"key {key!r}: a key is a non-empty string")


def whole_seconds(seconds: float | None) -> int | None:
    """A lifetime as the broker counts it: whole seconds, rounded up, at least one."""
    if seconds is None:
        return None
    if seconds <= 0:
        raise CoordError(f"ttl {seconds!r}: a lifetime must be positive")
    return max(1, math.ceil(seconds))
