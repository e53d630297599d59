"""Creating what the queue uses on JetStream: its streams and its durable consumers (seed 002,
"The account needs more than publish and subscribe", "A clustered node is given longer to
create them"; seed 000, "Topic Structure", "Delivery Semantics").

Three answers to "does this object exist", not two: it is there, it is not there, and nobody
said. The first two are acted on; silence is asked again -- a lookup waits one second for
its answer and is re-sent a second later, for up to thirty in all, and then falls through to
the create, which settles the question either way; a create waits fifteen seconds and is
re-sent a second after that, inside the per-create budget (30 s solo, 2 minutes clustered).
Any lookup or create still running after 10 s writes one WARN naming the object.
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from datetime import datetime, timezone
from typing import Any, AsyncIterator

import nats.errors

from engine.queue import topics
from engine.queue.contract import QueueError, Unreachable

log = logging.getLogger("queue.jetstream")

API = "$JS.API"
NANOS = 1_000_000_000
DUPLICATE_WINDOW_SECONDS = 120.0  # the window a `dedupe_id` collapses a second publish in
MAX_CONSUMERS_PER_STREAM = 100_000  # far past any company's seats x 3 mailboxes, plus live taps
METADATA_TOPIC = "crewlet_topic"  # the exact pair a durable consumer was created for (seed 000,
METADATA_GROUP = "crewlet_group"  # "Every durable subscription can be listed")

# JetStream API error codes the provisioning acts on.
STREAM_NOT_FOUND = 10059
STREAM_NAME_IN_USE = 10058
CONSUMER_NOT_FOUND = 10014
CONSUMER_EXISTS = 10148          # "consumer already exists" (action=create, different config)
CONSUMER_NAME_EXISTS = 10013     # "consumer name already in use"
NO_MESSAGE_FOUND = 10037         # a stream read past the last message on a subject
COUNTER_INACTIVE_SECONDS = 5.0   # a counting consumer the delete missed is reaped this soon

_SILENCE = (asyncio.TimeoutError, nats.errors.TimeoutError, nats.errors.NoRespondersError,
            nats.errors.ConnectionReconnectingError, nats.errors.StaleConnectionError)


def no_suitable_peers(description: str) -> bool:
    """The cluster's answer while it has fewer members than the replicas asked for."""
    return "no suitable peers" in (description or "").lower()


class ApiError(QueueError):
    """The broker answered a JetStream API request with an error; `code` is its error code."""

    def __init__(self, what: str, error: dict[str, Any]) -> None:
        self.status = error.get("code")
        self.description = error.get("description", "error")
        super().__init__(f"jetstream: {what}: {self.description}", code=error.get("err_code"))


class Unanswered(Unreachable):
    """Nobody answered a JetStream API request within its budget."""


class Provisioner:
    """JetStream API calls with the seed's three-answer discipline."""

    lookup_timeout_seconds = 1.0
    lookup_retry_seconds = 1.0
    lookup_budget_seconds = 30.0
    create_timeout_seconds = 15.0
    create_retry_seconds = 1.0
    slow_after_seconds = 10.0

    def __init__(self, nc, *, clustered: bool = False) -> None:
        self.nc = nc
        # 30 s per create solo, 2 minutes on a member with peers: the two creates are not the
        # same call underneath (a local file-store set-up vs a raft round trip).
        self.create_budget_seconds = 120.0 if clustered else 30.0

    # -- one request ----------------------------------------------------------------------
    async def request(self, subject: str, payload: dict | None, timeout: float, what: str) -> dict:
        """The decoded answer; ApiError for an error answer; a `_SILENCE` exception when none."""
        data = json.dumps(payload).encode() if payload is not None else b""
        reply = await self.nc.request(subject, data, timeout=timeout)
        if reply.headers and reply.headers.get("Status") == "503":
            raise nats.errors.NoRespondersError
        body = json.loads(reply.data or b"{}")
        if isinstance(body, dict) and body.get("error"):
            raise ApiError(what, body["error"])
        return body

    @contextlib.asynccontextmanager
    async def _slow(self, event: str, **fields: Any) -> AsyncIterator[None]:
        """One WARN if the block is still running after `slow_after_seconds`."""
        handle = asyncio.get_running_loop().call_later(
            self.slow_after_seconds, lambda: log.warning(event, extra={**fields, "elapsed_seconds": self.slow_after_seconds}))
        try:
            yield
        finally:
            handle.cancel()

    async def lookup(self, subject: str, not_found: int, what: str, slow: str, unanswered: str, **fields: Any) -> dict | None:
        """The object's info; None when the broker says it is not there. Raises Unanswered
        (after logging `unanswered`) when nobody said, for the caller to fall through."""
        deadline = time.monotonic() + self.lookup_budget_seconds
        async with self._slow(slow, **fields):
            while True:
                try:
                    return await self.request(subject, None, self.lookup_timeout_seconds, what)
                except ApiError as exc:
                    if exc.code == not_found:
                        return None
                    raise
                except _SILENCE:
                    if time.monotonic() + self.lookup_retry_seconds > deadline:
                        log.warning(unanswered, extra=fields)
                        raise Unanswered(f"jetstream: {what}: no answer within {self.lookup_budget_seconds:g}s") from None
                    await asyncio.sleep(self.lookup_retry_seconds)

    async def create(self, subject: str, payload: dict, what: str, slow: str, **fields: Any) -> dict:
        """The created (or identical, already there) object's info; ApiError for a refusal."""
        deadline = time.monotonic() + self.create_budget_seconds
        waited_for_peers = False
        async with self._slow(slow, **fields):
            while True:
                left = deadline - time.monotonic()
                try:
                    return await self.request(subject, payload, max(min(self.create_timeout_seconds, left), 0.5), what)
                except _SILENCE:
                    if time.monotonic() + self.create_retry_seconds >= deadline:
                        raise Unanswered(f"jetstream: {what}: no answer within {self.create_budget_seconds:g}s") from None
                except ApiError as exc:
                    # Seed 002: "placement retries for as long as the cluster answers 'no
                    # suitable peers', inside the per-create provisioning budget" -- a member
                    # that has not joined yet is not a member that never will.
                    if not no_suitable_peers(exc.description) or time.monotonic() + self.create_retry_seconds >= deadline:
                        raise
                    if not waited_for_peers:
                        log.warning("jetstream_placement_waiting", extra={**fields, "detail": exc.description})
                        waited_for_peers = True
                await asyncio.sleep(self.create_retry_seconds)

    # -- streams ----------------------------------------------------------------------------
    async def ensure_stream(self, spec: topics.StreamSpec, replicas: int = 1) -> None:
        """Create `spec`'s stream, or bring an existing one's bounds to `spec`; idempotent."""
        wanted = stream_config(spec, replicas)
        fields = {"stream": spec.name}
        try:
            info = await self.lookup(f"{API}.STREAM.INFO.{spec.name}", STREAM_NOT_FOUND, f"stream {spec.name}",
                                     "jetstream_stream_lookup_slow", "jetstream_stream_lookup_unanswered", **fields)
        except Unanswered:
            info = None
        if info is None:
            try:
                await self._create_stream(spec.name, wanted, fields)
                return
            except ApiError as exc:
                if exc.code != STREAM_NAME_IN_USE:
                    raise
                # A peer won the race, or it was there all along under other bounds.
                info = await self.lookup(f"{API}.STREAM.INFO.{spec.name}", STREAM_NOT_FOUND, f"stream {spec.name}",
                                         "jetstream_stream_lookup_slow", "jetstream_stream_lookup_unanswered", **fields)
                if info is None:
                    raise
        current = info.get("config", {})
        have = int(current.get("num_replicas") or 1)
        if have < wanted["num_replicas"]:
            # Seed 002, "Raising it on a fleet that already ran needs the existing objects
            # resized": a shared stream's configuration has one writer, never the node that
            # booted last, and an acknowledged publish would prove fewer copies than promised.
            raise QueueError(
                f"jetstream: stream {spec.name} keeps {have} {'replica' if have == 1 else 'replicas'}, below the "
                f"{wanted['num_replicas']} stream.replicas asks: an acknowledged publish would be proving fewer copies "
                f"than the config promises. A booting node never rewrites what the fleet shares: resize it deliberately "
                f"(nats stream update {spec.name} --replicas={wanted['num_replicas']}, and each KV_crewlet_* bucket the "
                f"same way), or set stream.replicas back to {have}")
        if current.get("retention") != wanted["retention"]:
            log.warning("jetstream_stream_retention_differs", extra={
                **fields, "retention": current.get("retention"), "wanted": wanted["retention"]})
            return
        changed = {k: v for k, v in wanted.items()
                   if k in ("subjects", "max_age", "max_msgs_per_subject", "duplicate_window") and current.get(k) != v}
        if changed:
            await self.create(f"{API}.STREAM.UPDATE.{spec.name}", {**current, **changed}, f"update stream {spec.name}",
                              "jetstream_stream_slow", **fields)
            log.info("jetstream_stream_updated", extra={**fields, "fields": sorted(changed)})

    async def _create_stream(self, name: str, config: dict, fields: dict) -> None:
        try:
            await self.create(f"{API}.STREAM.CREATE.{name}", config, f"create stream {name}", "jetstream_stream_slow", **fields)
        except ApiError as exc:
            if "account limit" not in exc.description or "consumer" not in exc.description:
                raise
            # The account caps consumers per stream below our explicit bound: take its cap,
            # and say so, since it bounds how many mailboxes this company can have.
            log.warning("jetstream_stream_consumer_limit", extra={**fields, "detail": exc.description})
            await self.create(f"{API}.STREAM.CREATE.{name}", {k: v for k, v in config.items() if k != "max_consumers"},
                              f"create stream {name}", "jetstream_stream_slow", **fields)
        log.debug("jetstream_stream_created", extra=fields)

    async def stream_names(self, prefix: str) -> list[str]:
        """Every stream whose name starts with prefix."""
        names: list[str] = []
        offset = 0
        while True:
            body = await self.request(f"{API}.STREAM.NAMES", {"offset": offset}, self.create_timeout_seconds, "list streams")
            page = body.get("streams") or []
            names.extend(n for n in page if n.startswith(prefix))
            offset += len(page)
            if not page or offset >= body.get("total", 0):
                return names

    # -- consumers --------------------------------------------------------------------------
    async def ensure_consumer(self, stream: str, config: dict) -> dict:
        """Create a durable consumer; an identical one, or one a peer made first under other
        settings, counts as there -- except for its ack window, which is moved to this one's
        (a mailbox an earlier build made under a 30-minute window would otherwise park a
        crashed turn's mail for half an hour). One request when it is there as asked: the
        create is its own existence probe."""
        name = config["durable_name"]
        subject = f"{API}.CONSUMER.CREATE.{stream}.{name}"
        if config.get("filter_subject"):
            subject += f".{config['filter_subject']}"
        fields = {"stream": stream, "consumer": name}
        try:
            return await self.create(subject, {"stream_name": stream, "config": config, "action": "create"},
                                     f"create consumer {name}", "jetstream_consumer_slow", **fields)
        except ApiError as exc:
            if exc.code not in (CONSUMER_EXISTS, CONSUMER_NAME_EXISTS):
                raise
        info = await self.consumer_info(stream, name)
        if info is None:  # deleted between the two: ask again
            return await self.ensure_consumer(stream, config)
        current = info.get("config") or {}
        if "ack_wait" not in config or current.get("ack_wait") == config["ack_wait"]:
            return info
        info = await self.create(subject, {"stream_name": stream, "config": {**current, "ack_wait": config["ack_wait"]},
                                           "action": "update"},
                                 f"update consumer {name}", "jetstream_consumer_slow", **fields)
        log.info("jetstream_consumer_updated", extra={**fields, "ack_wait_seconds": config["ack_wait"] / NANOS,
                                                      "was_seconds": (current.get("ack_wait") or 0) / NANOS})
        return info

    async def consumer_info(self, stream: str, name: str) -> dict | None:
        """The consumer's info; None when it is not there."""
        try:
            return await self.lookup(f"{API}.CONSUMER.INFO.{stream}.{name}", CONSUMER_NOT_FOUND, f"consumer {name}",
                                     "jetstream_consumer_lookup_slow", "jetstream_consumer_lookup_unanswered",
                                     stream=stream, consumer=name)
        except ApiError as exc:
            if exc.code == STREAM_NOT_FOUND:
                return None
            raise

    async def delete_consumer(self, stream: str, name: str) -> bool:
        """False when there was nothing to delete."""
        try:
            await self.create(f"{API}.CONSUMER.DELETE.{stream}.{name}", {}, f"delete consumer {name}",
                              "jetstream_consumer_slow", stream=stream, consumer=name)
            return True
        except ApiError as exc:
            if exc.code in (CONSUMER_NOT_FOUND, STREAM_NOT_FOUND):
                return False
            raise

    async def consumers(self, stream: str) -> list[dict]:
        """Every consumer of a stream, as its info."""
        out: list[dict] = []
        offset = 0
        while True:
            body = await self.request(f"{API}.CONSUMER.LIST.{stream}", {"offset": offset}, self.create_timeout_seconds,
                                      f"list consumers of {stream}")
            page = body.get("consumers") or []
            out.extend(page)
            offset += len(page)
            if not page or offset >= body.get("total", 0):
                return out


    # -- reading a stream (the dashboard's mailbox figures) ------------------------------------
    async def first_message_time(self, stream: str, subject: str, from_seq: int) -> float | None:
        """When the broker stored the first message on `subject` at or after `from_seq` (epoch
        seconds), or None when there is none."""
        try:
            body = await self.request(f"{API}.STREAM.MSG.GET.{stream}", {"seq": max(from_seq, 1), "next_by_subj": subject},
                                      self.lookup_timeout_seconds, f"read {stream}")
        except ApiError as exc:
            if exc.code in (NO_MESSAGE_FOUND, STREAM_NOT_FOUND):
                return None
            raise
        return broker_time((body.get("message") or {}).get("time"))

    async def subject_count(self, stream: str, subject: str) -> int:
        """How many messages the stream holds on one subject (0 for a stream not there)."""
        try:
            body = await self.request(f"{API}.STREAM.INFO.{stream}", {"subjects_filter": subject},
                                      self.lookup_timeout_seconds, f"stream {stream}")
        except ApiError as exc:
            if exc.code == STREAM_NOT_FOUND:
                return 0
            raise
        return int(((body.get("state") or {}).get("subjects") or {}).get(subject, 0))

    async def count_since(self, stream: str, subject: str, since: float) -> int:
        """How many messages on `subject` were stored at or after `since` (epoch seconds): the
        pending count of a consumer created to start there, deleted at once (and reaped by the
        broker after INACTIVE_SECONDS should the delete be lost)."""
        config = {"deliver_policy": "by_start_time", "opt_start_time": format_broker_time(since), "ack_policy": "none",
                  "filter_subject": subject, "inactive_threshold": int(COUNTER_INACTIVE_SECONDS * NANOS),
                  "mem_storage": True, "num_replicas": 1}
        body = await self.request(f"{API}.CONSUMER.CREATE.{stream}", {"stream_name": stream, "config": config},
                                  self.create_timeout_seconds, f"count {subject}")
        name = body.get("name") or (body.get("config") or {}).get("name")
        if name:
            with contextlib.suppress(Exception):
                await self.request(f"{API}.CONSUMER.DELETE.{stream}.{name}", None, self.lookup_timeout_seconds, f"delete {name}")
        return int(body.get("num_pending", 0))


def broker_time(text: str | None) -> float | None:
    """An RFC 3339 time as the broker writes it (nanoseconds, `Z`) as epoch seconds."""
    if not text:
        return None
    head, _, frac = text.rstrip("Z").partition(".")
    try:
        moment = datetime.fromisoformat(head).replace(tzinfo=timezone.utc)
    except ValueError:
        return None
    digits = "".join(c for c in frac if c.isdigit())[:6]
    return moment.timestamp() + (int(digits.ljust(6, "0")) / 1e6 if digits else 0.0)


def format_broker_time(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def stream_config(spec: topics.StreamSpec, replicas: int = 1) -> dict:
    """The JetStream configuration of one of the engine's streams (seed 000's table)."""
    return {
        "name": spec.name,
        "subjects": list(spec.subjects),
        "retention": spec.retention,
        "storage": "file",
        "discard": "old",
        "num_replicas": max(int(replicas), 1),
        "max_age": int(spec.max_age_seconds * NANOS),
        "max_msgs_per_subject": spec.max_msgs_per_subject or -1,
        "max_msgs": -1,
        "max_bytes": -1,
        # Explicit: since nats-server 2.15 a stream that names no limit gets 1,000 consumers
        # (and -1 reads as "the default"), which a company of ~333 seats -- three mailboxes
        # each -- would exhaust at runtime rather than at boot.
        "max_consumers": MAX_CONSUMERS_PER_STREAM,
        "max_msg_size": -1,
        "duplicate_window": int(DUPLICATE_WINDOW_SECONDS * NANOS),
    }


def mailbox_config(topic: str, group: str, *, ack_wait_seconds: float, max_deliveries: int) -> dict:
    """A seat's mailbox: durable, explicit acks, delivering from the beginning, pull only.

    No inactive_threshold (a mailbox outlives every attachment), and no BackOff list: BackOff
    replaces AckWait and does not apply to NAKs, so the spacing rides each NAK instead."""
    name = topics.durable_name(topic, group)
    return {
        "durable_name": name,
        "name": name,
        "deliver_policy": "all",
        "ack_policy": "explicit",
        "ack_wait": int(ack_wait_seconds * NANOS),
        "max_deliver": int(max_deliveries),   # the backstop; the consume loop dead-letters first
        "filter_subject": topic,
        "replay_policy": "instant",
        "metadata": {METADATA_TOPIC: topic, METADATA_GROUP: group},
    }
