"""The coordination store on NATS KV buckets: `coordination.type: embedded-kv` (seed 002,
"The account needs more than publish and subscribe", "A coordination read costs one
ordered pass", "A broker blip is not a node restart", "A clustered node is given longer to
create them").

A bucket `crewlet_x` is the stream `KV_crewlet_x` on subjects `$KV.crewlet_x.>`, laid out as
every NATS KV client lays it out, so `nats kv` can read it. It lives on the stream's own
broker, on a connection of its own beside the queue's.

Every read is the leader's (seed 002, "Coordination § Every read is the leader's"): a key is
read with `$JS.API.STREAM.MSG.GET` (`direct=False`), never the bucket's direct get, which any
replica, one that has fallen behind included, may answer. A listing is one ordered pass over
a temporary consumer plus the stream's subject index (`$JS.API.STREAM.INFO` narrowed to the
bucket); a key the index names that the pass missed, or saw only as a removal marker, is
read by itself from the leader, because a key rewritten under the pass (every renew is one)
can land behind the marker that ends it.

Keys are encoded into one subject token: letters, digits, `-`, `_` and `/` pass through and
every other byte becomes `=XX` (so `seat:alice` is `seat=3Aalice`), which keeps any string a
key and keeps a prefix a prefix.
"""
from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import inspect
import logging
import re
import string
from typing import Awaitable, Callable, Iterator

import nats
import nats.aio.client
import nats.errors
import nats.js.errors
from nats.js import api
from nats.js.kv import KeyValue

from engine.coord.contract import (
    LINK_CLOSED,
    LINK_DOWN,
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
from engine.queue.dial import Dial, Refused

log = logging.getLogger("coord.natskv")

REQUEST_TIMEOUT_SECONDS = 2.0     # seed 002: an attempt gets 2 s; a node waiting longer is not renewing
CONNECT_TIMEOUT_SECONDS = 30.0    # seed 002, "Listeners": the handshake budget to one's own member
# Provisioning a bucket (seed 002, "A dropped stream or consumer lookup is asked again within
# two seconds; a create after sixteen"): a member that is not the metadata leader drops a
# lookup of an object still in flight without a word, so a lookup waits 1 s and is re-asked a
# second later, for up to 30 s, then falls through to the create; the broker keeps a create's
# reply until the object has a leader, so a create waits 15 s and is re-sent a second later,
# inside 30 s solo and 2 minutes on a member with peers (a raft round trip, not a file set-up).
LOOKUP_TIMEOUT_SECONDS = 1.0
LOOKUP_RETRY_SECONDS = 1.0
LOOKUP_BUDGET_SECONDS = 30.0
CREATE_TIMEOUT_SECONDS = 15.0
CREATE_RETRY_SECONDS = 1.0
CREATE_BUDGET_SECONDS = 30.0
CREATE_BUDGET_CLUSTERED_SECONDS = 120.0
SLOW_AFTER_SECONDS = 10.0         # a bucket still being made after this writes one WARN naming it
# A listing's temporary consumer is reaped this long after the pass lets go of it. The client's
# default is five minutes, and since nats-server 2.15 a stream that names no consumer limit
# holds 1,000: three nodes sweeping placement every 0.3 s filled crewlet_leases with passes
# already read ("maximum consumers limit reached") and every listing failed from then on.
PASS_CONSUMER_IDLE_SECONDS = 5.0
BUCKET_MAX_CONSUMERS = 100_000    # explicit, for the same reason: far past what listings keep alive

_SAFE = frozenset(string.ascii_letters + string.digits + "-_/")
_ESCAPED = re.compile(r"(?:=[0-9A-F]{2})+")
_REMOVED_OPS = {"DEL", "PURGE"}
_WRONG_LAST_SEQUENCE = {10071, 10164}
_STREAM_NOT_FOUND = 10059
_STREAM_NAME_IN_USE = 10058
_NO_MESSAGE = 10037

_UNANSWERED = (
    asyncio.TimeoutError,
    nats.errors.ConnectionClosedError,
    nats.errors.ConnectionDrainingError,
    nats.errors.ConnectionReconnectingError,
    nats.errors.NoRespondersError,
    nats.errors.NoServersError,
    nats.errors.OutboundBufferLimitError,
    nats.errors.StaleConnectionError,
    nats.js.errors.ServiceUnavailableError,
    OSError,
)


def encode_key(key: str) -> str:
    """The key as one subject token (see the module docstring)."""
    return "".join(ch if ch in _SAFE else "".join(f"={b:02X}" for b in ch.encode()) for ch in key)


def decode_key(token: str) -> str:
    """The inverse of encode_key."""
    return _ESCAPED.sub(lambda m: bytes.fromhex(m.group(0).replace("=", "")).decode(), token)


def _removed(headers: dict | None) -> bool:
    """Whether a message is a removal marker: a client's delete/purge or a server's marker."""
    if not headers:
        return False
    return headers.get("KV-Operation") in _REMOVED_OPS or "Nats-Marker-Reason" in headers


class NatsKVCoord:
    """The store on one broker connection. `connect` dials and owns it; the constructor
    adopts a connection somebody else owns (and `close` then leaves it open)."""

    # The provisioning budgets (see the module's constants); attributes so a test may shorten them.
    lookup_timeout_seconds = LOOKUP_TIMEOUT_SECONDS
    lookup_retry_seconds = LOOKUP_RETRY_SECONDS
    lookup_budget_seconds = LOOKUP_BUDGET_SECONDS
    create_timeout_seconds = CREATE_TIMEOUT_SECONDS
    create_retry_seconds = CREATE_RETRY_SECONDS
    slow_after_seconds = SLOW_AFTER_SECONDS

    def __init__(self, nc, *, timeout: float = REQUEST_TIMEOUT_SECONDS, replicas: int = 1,
                 clustered: bool = False, owned: bool = False) -> None:
        self._nc = nc
        self._js = nc.jetstream(timeout=timeout)
        self._timeout = timeout
        self._replicas = replicas
        self.create_budget_seconds = CREATE_BUDGET_CLUSTERED_SECONDS if clustered else CREATE_BUDGET_SECONDS
        self._owned = owned
        self._closed = False
        self._down = False  # between a disconnect and the reconnect that follows it

    @property
    def link(self) -> str:
        """The connection as a probe reads it: LINK_UP, LINK_DOWN while the client redials,
        LINK_CLOSED once closed (by `close`, or by the client for good)."""
        if self._closed or self._nc.is_closed:
            return LINK_CLOSED
        if self._down or self._nc.is_reconnecting or not self._nc.is_connected:
            return LINK_DOWN
        return LINK_UP

    @classmethod
    async def connect(cls, dial: Dial | str, token: str | None = None, *, name: str = "crewlet-coord",
                      timeout: float = REQUEST_TIMEOUT_SECONDS, replicas: int = 1,
                      clustered: bool = False, reconnect_attempts: int | None = None,
                      on_closed: Callable[[str], Awaitable[None] | None] | None = None) -> "NatsKVCoord":
        """Dial the broker as `dial` says -- the same URL list, token, credentials file and TLS
        the node's queue dials with -- redialling a second apart: for ever against an external
        server (seed 002, "A broker blip is not a node restart"), or the dial's bound (the
        node's own member, gone for good once the listeners' budget has passed). A bare URL
        (and `token`) is a dial to the node's own member, with the listeners' handshake budget.
        `on_closed(reason)` hears when the client gives up for good: the coordination link is
        then lost, as the queue's `on_closed_for_good` reports its own. `clustered`: the
        bucket creates get a member's longer budgets (2 minutes, not 30 s). A server that
        answers and refuses the dial (its credentials, its certificate) is an answer, not
        silence: CoordError naming it at once, as the queue's own dial (`Dial.connect`)."""
        if isinstance(dial, str):
            dial = Dial(dial, token=token, connect_timeout=CONNECT_TIMEOUT_SECONDS)
        if reconnect_attempts is not None:
            dial = dataclasses.replace(dial, max_reconnect_attempts=reconnect_attempts)
        dial = dataclasses.replace(dial, name=name)

        made: list[NatsKVCoord] = []

        async def closed() -> None:
            if not made or made[0]._closed:  # our own close, or a dial that never finished
                return
            error = made[0]._nc.last_error
            reason = ("coord: the NATS client closed the coordination connection for good "
                      f"({type(error).__name__ if error else 'no error'}"
                      f"{': ' + dial.scrub(str(error)) if error and str(error) else ''})")
            log.error("coord_connection_closed_for_good", extra={"reason": reason, "server": dial.server})
            if on_closed is not None:
                try:
                    result = on_closed(reason)
                    if inspect.isawaitable(result):
                        await result
                except Exception:
                    log.exception("coord_on_closed_failed")

        async def disconnected() -> None:
            if made and not made[0]._closed:
                made[0]._down = True
                log.warning("coord_disconnected", extra={"server": dial.server})

        async def reconnected() -> None:
            if made:
                made[0]._down = False
                log.info("coord_reconnected", extra={"server": dial.server})

        async def errored(err: Exception) -> None:
            log.warning("coord_connection_error", extra={"server": dial.server,
                                                         "error": dial.scrub(str(err) or type(err).__name__)})

        options = dial.options(error_cb=errored, disconnected_cb=disconnected, reconnected_cb=reconnected,
                               closed_cb=closed)
        nc = nats.aio.client.Client()
        try:
            await dial.connect(nc, options)
        except Refused as err:  # an answer: redialling would hear it again, for ever
            raise CoordError(f"the broker at {err.server} refused this node: {err.refusal}") from err
        except _UNANSWERED + (nats.errors.Error,) as err:
            raise Unavailable(f"the broker at {dial.server} did not answer the dial: {type(err).__name__}") from err
        except Exception as err:  # anything else the client raised while dialling
            raise CoordError(f"could not connect to {dial.server}: {dial.scrub(str(err) or type(err).__name__)}") from err
        made.append(cls(nc, timeout=timeout, replicas=replicas, owned=True, clustered=clustered))
        return made[0]

    async def ping(self, timeout: float) -> bool:
        """JetStream's account info asked and answered within `timeout`; False on silence, while
        the client redials, or once it closed. (Not a flush: nats-py's flush that times out
        leaves a future behind that the late PONG then breaks the client's read loop on.)"""
        if not self._nc.is_connected:
            return False
        try:
            await self._nc.request("$JS.API.INFO", b"", timeout=timeout)
        except Exception:
            return False
        return True

    async def close(self) -> None:
        """Let go; every later call raises Unavailable. Closes the connection if it is ours."""
        self._closed = True
        if self._owned and not self._nc.is_closed:
            with contextlib.suppress(Exception):
                await self._nc.close()
            await self._end_reconnecting()

    async def _end_reconnecting(self) -> None:
        # nats-py's reconnect loop can swallow close()'s cancellation on Python 3.11 (its
        # wait_for returns a refused connect that raced the cancel) and then retries for
        # ever; cancel until the task has really ended.
        task = getattr(self._nc, "_reconnection_task", None)
        for _ in range(100):
            if task is None or task.done():
                return
            task.cancel()
            await asyncio.wait({task}, timeout=0.05)

    # -- the contract

    async def ensure_bucket(self, bucket: str, *, max_age: float | None = None) -> BucketInfo:
        """Create the bucket's stream if it is missing; an existing one is adopted as found,
        unless it keeps fewer replicas than `stream.replicas` asks (refused, naming both
        counts: seed 002, "Raising it on a fleet that already ran needs the existing objects
        resized"). Three answers, not two: there, not there, and silence, which is asked again
        (see the budgets above); Unavailable once a create has gone unanswered for its budget."""
        check_bucket(bucket)
        if max_age is not None and max_age <= 0:
            raise CoordError(f"bucket {bucket}: max_age {max_age!r} must be positive, or None")
        slow = asyncio.get_running_loop().call_later(self.slow_after_seconds, lambda: log.warning(
            "coord_kv_bucket_slow", extra={"bucket": bucket, "elapsed_seconds": self.slow_after_seconds}))
        try:
            info = await self._lookup_bucket(bucket)
            if info is None:
                info = await self._create_bucket(bucket, max_age)
        finally:
            slow.cancel()
        have = int(info.config.num_replicas or 1)
        if have < self._replicas:
            raise CoordError(
                f"bucket {bucket} keeps {have} {'replica' if have == 1 else 'replicas'}, below the {self._replicas} "
                f"stream.replicas asks: the leases, the fencing epochs and the company's records would be on fewer "
                f"disks than the config claims. A booting node never rewrites what the fleet shares: resize it "
                f"deliberately (nats stream update {_stream(bucket)} --replicas={self._replicas}), or set "
                f"stream.replicas back to {have}")
        return BucketInfo(name=bucket, max_age=info.config.max_age or None)

    async def _lookup_bucket(self, bucket: str):
        """The bucket's stream info; None when the broker says it is not there, or when nobody
        said for the whole lookup budget (logged; the create then settles it either way)."""
        js = self._nc.jetstream(timeout=self.lookup_timeout_seconds)
        deadline = asyncio.get_running_loop().time() + self.lookup_budget_seconds
        while True:
            try:
                with self._answers(bucket):
                    return await js.stream_info(_stream(bucket))
            except BucketNotFound:
                return None
            except Unavailable as exc:
                if self._closed or self._nc.is_closed:
                    raise
                if asyncio.get_running_loop().time() + self.lookup_retry_seconds > deadline:
                    log.warning("coord_kv_bucket_lookup_unanswered", extra={"bucket": bucket, "error": str(exc)})
                    return None
                await asyncio.sleep(self.lookup_retry_seconds)

    async def _create_bucket(self, bucket: str, max_age: float | None):
        """Create the bucket's stream, re-sending a create nobody answered; a peer that made it
        first (under any config) counts as made, and is looked up."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.create_budget_seconds
        config = self._bucket_config(bucket, max_age)
        while True:
            js = self._nc.jetstream(timeout=max(min(self.create_timeout_seconds, deadline - loop.time()), 0.5))
            try:
                with self._answers(bucket):
                    try:
                        return await js.add_stream(config)
                    except nats.js.errors.BadRequestError as lost:
                        if lost.err_code != _STREAM_NAME_IN_USE:
                            raise
                info = await self._lookup_bucket(bucket)  # a peer made it first
                if info is not None:
                    return info
            except Unavailable:
                if self._closed or self._nc.is_closed:
                    raise
                if loop.time() + self.create_retry_seconds >= deadline:
                    raise Unavailable(f"{bucket}: the broker did not answer its create within "
                                      f"{self.create_budget_seconds:g}s") from None
            except CoordError as exc:
                # Placement is retried for as long as the cluster answers "no suitable peers",
                # inside the create's budget (seed 002): a member still joining will join.
                if "no suitable peers" not in str(exc).lower() or loop.time() + self.create_retry_seconds >= deadline:
                    raise
                log.warning("coord_kv_bucket_placement_waiting", extra={"bucket": bucket, "detail": str(exc)})
            await asyncio.sleep(self.create_retry_seconds)

    async def create(self, bucket: str, key: str, value: bytes, ttl: float | None = None) -> int:
        """Write only if the key holds no live value; return the new revision."""
        subject = self._subject(bucket, key)
        seconds = whole_seconds(ttl)
        expected = 0
        # A removal marker (or a value that aged out between the two calls) leaves the
        # subject's last sequence non-zero, so a refused first try reads what is there.
        for _ in range(4):
            try:
                return await self._publish(bucket, subject, value, expected=expected, ttl=seconds)
            except RevisionMismatch:
                msg = await self._last(bucket, subject)
                if msg is not None and not _removed(msg.headers):
                    raise KeyExists(f"{bucket} {key}: already holds revision {msg.seq}") from None
                expected = 0 if msg is None else msg.seq
        raise KeyExists(f"{bucket} {key}: lost every create race to a peer writing it")

    async def update(self, bucket: str, key: str, value: bytes, expected_revision: int,
                     ttl: float | None = None) -> int:
        """Write only if `expected_revision` is the key's latest; return the new revision."""
        subject = self._subject(bucket, key)
        if not isinstance(expected_revision, int) or expected_revision < 1:
            raise RevisionMismatch(f"{bucket} {key}: expected revision {expected_revision!r} "
                                   "names no write")
        return await self._publish(bucket, subject, value, expected=expected_revision,
                                   ttl=whole_seconds(ttl))

    async def put(self, bucket: str, key: str, value: bytes, ttl: float | None = None) -> int:
        """Write unconditionally; return the new revision."""
        return await self._publish(bucket, self._subject(bucket, key), value, ttl=whole_seconds(ttl))

    async def get(self, bucket: str, key: str) -> Entry | None:
        """The key's live value, read from the stream leader, or None."""
        msg = await self._last(bucket, self._subject(bucket, key))
        if msg is None or _removed(msg.headers):
            return None
        return Entry(key=key, value=msg.data or b"", revision=msg.seq, updated=msg.time.timestamp())

    async def delete(self, bucket: str, key: str, expected_revision: int | None = None) -> None:
        """Write a removal marker, conditional on `expected_revision` when given."""
        subject = self._subject(bucket, key)
        headers = {"KV-Operation": "DEL"}
        if expected_revision is not None:
            headers["Nats-Expected-Last-Subject-Sequence"] = str(expected_revision)
        with self._answers(bucket, key):
            try:
                await self._js.publish(subject, b"", headers=headers)
            except nats.js.errors.NoStreamResponseError:
                await self._no_stream(bucket)

    async def keys(self, bucket: str, prefix: str | None = None) -> list[str]:
        """The keys holding live values (with `prefix`), sorted: the pass, the index, and a
        leader read for each key the index names that the pass did not show live."""
        check_bucket(bucket)
        pre = f"$KV.{bucket}."
        live = await self._pass(bucket)
        with self._answers(bucket):
            info = await self._js.stream_info(_stream(bucket), subjects_filter=f"{pre}>")
        index = (info.state.subjects or {}) if info.state else {}
        out = []
        for subject in index:
            key = decode_key(subject[len(pre):])
            if prefix is not None and not key.startswith(prefix):
                continue
            if subject in live:
                out.append(key)
                continue
            msg = await self._last(bucket, subject)
            if msg is not None and not _removed(msg.headers):
                out.append(key)
        return sorted(out)

    # -- inside

    def _subject(self, bucket: str, key: str) -> str:
        check_bucket(bucket)
        check_key(key)
        return f"$KV.{bucket}.{encode_key(key)}"

    def _bucket_config(self, bucket: str, max_age: float | None) -> api.StreamConfig:
        # The layout every KV client creates (history 1), with per-value TTLs allowed and no
        # direct get: nothing here may be answered by a replica.
        return api.StreamConfig(
            name=_stream(bucket), subjects=[f"$KV.{bucket}.>"], max_msgs_per_subject=1,
            max_age=max_age, discard=api.DiscardPolicy.NEW, allow_rollup_hdrs=True,
            allow_msg_ttl=True, deny_delete=True, allow_direct=False, max_msgs=-1,
            max_consumers=BUCKET_MAX_CONSUMERS, num_replicas=self._replicas, storage=api.StorageType.FILE,
            duplicate_window=min(120.0, max_age) if max_age else 120.0)

    async def _publish(self, bucket: str, subject: str, value: bytes, *, expected: int | None = None,
                       ttl: int | None = None) -> int:
        if not isinstance(value, (bytes, bytearray, memoryview)):
            raise CoordError(f"{subject}: a value is bytes, not {type(value).__name__}")
        headers = {}
        if expected is not None:
            headers["Nats-Expected-Last-Subject-Sequence"] = str(expected)
        if ttl is not None:
            headers["Nats-TTL"] = str(ttl)
        with self._answers(bucket):
            try:
                ack = await self._js.publish(subject, bytes(value), headers=headers or None)
            except nats.js.errors.NoStreamResponseError:
                await self._no_stream(bucket)
        return ack.seq

    async def _last(self, bucket: str, subject: str):
        """The subject's last message from the stream leader ($JS.API.STREAM.MSG.GET), or None."""
        with self._answers(bucket):
            try:
                return await self._js.get_msg(_stream(bucket), subject=subject, direct=False)
            except nats.js.errors.NotFoundError as err:
                if err.err_code == _STREAM_NOT_FOUND:
                    raise
                return None

    async def _pass(self, bucket: str) -> set[str]:
        """One ordered pass over the bucket, last message per key, headers only: the subjects
        it delivered as live values."""
        kv = KeyValue(name=bucket, stream=_stream(bucket), pre=f"$KV.{bucket}.", js=self._js, direct=False)
        live: set[str] = set()
        with self._answers(bucket):
            watcher = await kv.watch(">", meta_only=True, inactive_threshold=PASS_CONSUMER_IDLE_SECONDS)
            try:
                while (entry := await watcher.updates(timeout=self._timeout)) is not None:
                    if entry.operation is None:
                        live.add(f"$KV.{bucket}.{entry.key}")
            finally:
                with contextlib.suppress(Exception):
                    await watcher.stop()
        return live

    async def _no_stream(self, bucket: str) -> None:
        """Nobody took a publish: the bucket is missing, or its stream has no leader."""
        with self._answers(bucket):
            await self._js.stream_info(_stream(bucket))
        raise Unavailable(f"{bucket}: no stream leader took the write")

    @contextlib.contextmanager
    def _answers(self, bucket: str, key: str | None = None) -> Iterator[None]:
        """Translate the client's errors into the contract's: silence is Unavailable."""
        where = bucket if key is None else f"{bucket} {key}"
        if self._closed or self._nc.is_closed:
            raise Unavailable(f"{where}: the coordination connection is closed")
        try:
            yield
        except CoordError:
            raise
        except nats.js.errors.APIError as err:
            if isinstance(err, nats.js.errors.ServiceUnavailableError):
                raise Unavailable(f"{where}: the broker has no JetStream to answer") from err
            if err.err_code in _WRONG_LAST_SEQUENCE:
                raise RevisionMismatch(f"{where}: {err.description}", code=err.err_code) from None
            if err.err_code == _STREAM_NOT_FOUND:
                raise BucketNotFound(f"{bucket}: no such bucket", code=err.err_code) from None
            raise CoordError(f"{where}: {err.description}", code=err.err_code) from err
        except _UNANSWERED as err:
            raise Unavailable(f"{where}: the broker did not answer ({type(err).__name__})") from err
        except nats.errors.Error as err:
            raise CoordError(f"{where}: {err}") from err


def _stream(bucket: str) -> str:
    return f"KV_{bucket}"
