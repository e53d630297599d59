"""The webhook edge, `POST /webhooks/{source}` (seed 000, "Routing", "Distributed Tracing": "The
webhook edge opens a span, so a delivery is the root of the trace everything it causes hangs
under. An inbound W3C traceparent is honoured"; "Event Types": inbound_delivery and raw_webhook;
seed 002, "Exposing webhooks without the admin API").

The edge checks and hands over; it parses nothing beyond what it must to name the delivery.
Parsing and routing happen behind the queue, in `notify.service`, so the answer is quick:

  unknown source            404, a hint listing the sources
  source not connected      404 "not connected" (no integrations block in the active revision)
  body over 8 MiB           413
  signature wrong/missing   401 naming the header (constant-time comparisons, in the source)
  body unreadable           400, and a notification_skipped "its payload cannot be read"
  Slack's url_verification  200 with the challenge
  a vendor's retry          200 "duplicate" (the fleet's dedupe slot, then the broker's window)
  a replayed body           200 "duplicate" and a notification_skipped "the routing gate refuses
                            it": the same signed body within the dedupe window under another
                            delivery id (the slot is keyed on the body's digest)
  otherwise                 202: raw_webhook on crewlet.notifications.inbound (deduplicated on
                            the provider's delivery id), then inbound_delivery on the record
  a draining node           503 + Retry-After (the probe gate answers first; this is the backstop)
  api.public set, api.port  404 no_route, a hint naming api.public

Nothing is partially processed: the delivery is either on the work queue (202) or refused and
its dedupe slot given back, so the vendor's retry is taken.
"""
from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Mapping

from engine.coord.contract import CoordError
from engine.coord.dedupe import DEDUPE_BUCKET
from engine.queue import topics
from engine.queue.contract import EventQueue
from events.envelope import Event, new
from events.tracing import TraceContext, parse_traceparent, span
from events.types.wakes import RawWebhook
from events.types.webhook import InboundDelivery, delivery_label
from notify import skips
from notify.node import NotifyNode
from notify.sources import SOURCES, source_named
from notify.sources.base import MAX_BODY_BYTES, PayloadError, SignatureError, Source, body_digest, header

log = logging.getLogger("notify.edge")

DEDUPE_NAMESPACE = "webhook"
# A day: every vendor's automatic retries (Slack's three, Jira's five with backoff) land inside
# it; a delivery an operator re-sends by hand a day later is treated as new.
DEDUPE_TTL_SECONDS = 24 * 3600
ROUTE = "/webhooks/{source}"
RETRY_AFTER_SECONDS = 5  # a 503's Retry-After: the probe gate's figure, for the same reason
# The inbound_delivery record's id is derived from the delivery's, so it is one row per delivery.
_RECORD_NAMESPACE = uuid.UUID("6b2f4d18-9e3a-5c70-8d15-a4c3e9b27f61")


@dataclass(frozen=True)
class Answer:
    """What the edge says back: a status, a JSON body and extra headers."""

    status: int
    body: dict
    headers: dict[str, str] = field(default_factory=dict)


def refuse(status: int, detail: str, **more: Any) -> Answer:
    headers = {"Retry-After": str(RETRY_AFTER_SECONDS)} if status == 503 else {}
    return Answer(status, {"detail": detail, **more}, headers)


def sources_hint() -> str:
    return f"POST /webhooks/<source>, where <source> is one of: {', '.join(sorted(SOURCES))}"


async def ensure_work_queue(queue: EventQueue) -> None:
    """The inbound work queue's durable subscription, which must exist before the first delivery
    is put on it: the stream keeps a message only while a consumer covers it (interest
    retention), and the notification service may attach a moment after this node begins
    serving (seed 000, "A seat's mailbox exists before the seat is running" -- the same rule,
    for this queue). The node calls it while preparing, before it serves."""
    await queue.ensure_subscription(topics.NOTIFICATIONS_INBOUND, topics.NOTIFICATIONS_GROUP)


async def receive(node: NotifyNode, name: str, headers: Mapping[str, str], body: bytes | None, *,
                  content_length: int | None = None, listener_port: int | None = None) -> Answer:
    """Take one delivery; see the module docstring for every answer. `body` None means the
    caller did not read it because `content_length` is already over the limit."""
    port = node.public_port
    if port is not None and listener_port is not None and listener_port != port:
        return refuse(404, f"no_route: /webhooks/{name} is not served on api.port",
                      hint=f"webhooks are served on the public listener only: api.public (port {port})")
    source = source_named(name)
    if source is None:
        return refuse(404, f"not found: no webhook source {name!r}", hint=sources_hint())
    if node.stopping:
        return refuse(503, "draining: this node takes no new deliveries; retry")
    creds = node.credentials
    if creds is None or not creds.connected(name):
        return refuse(404, f"not connected: the company configures no integrations.{name} block",
                      hint=f"add integrations.{name} with its {source.secret_field} to company.yaml")
    if body is None or (content_length or 0) > MAX_BODY_BYTES or len(body) > MAX_BODY_BYTES:
        return refuse(413, f"body: a webhook delivery is at most {MAX_BODY_BYTES} bytes (8 MiB)")
    parent = parse_traceparent(header(headers, "traceparent"))
    with span("webhook.receive", parent=parent, **{"webhook.source": name}) as trace:
        try:
            source.verify(creds.secret(name), headers, body, time.time())
        except SignatureError as exc:
            log.info("webhook_refused", extra={"source": name, "header": exc.header, "why": exc.detail})
            return refuse(401, exc.detail, header=exc.header)
        return await _accept(node, source, headers, body, trace)


async def _accept(node: NotifyNode, source: Source, headers: Mapping[str, str], body: bytes, trace: TraceContext) -> Answer:
    name = source.name
    try:
        payload = source.decode(headers, body)
    except PayloadError as exc:
        log.info("webhook_unreadable", extra={"source": name, "why": exc.detail})
        skip = skips.skip_event(skips.PAYLOAD_UNREADABLE, exc.detail, trace, source=name, about=body_digest(body),
                                event_kind="unknown")
        await _record(node, skip)
        return refuse(400, exc.detail)
    challenge = source.challenge(payload)
    if challenge is not None:
        return Answer(200, challenge)
    delivery_id = source.delivery_id(headers, payload, body)
    event_kind = source.event_kind(headers, payload)
    # One slot per body: a vendor's retry and a replay of a captured body under a new delivery
    # id both lose it; the id the winner noted tells them apart.
    slot = f"{name}:{body_digest(body)}"
    claimed = await _claim(node, slot, delivery_id)
    if not claimed:
        return await _duplicate(node, source, slot, delivery_id, event_kind, trace)
    kept = source.headers_kept(headers)
    text = source.scrubbed(headers, body, payload).decode("utf-8", errors="replace")
    content_type = header(headers, "Content-Type")
    route = ROUTE.format(source=name)
    raw = new(RawWebhook(integration=name, route=route, event_kind=event_kind, delivery_id=delivery_id,
                         content_type=content_type, headers=kept, raw_body=text), trace, source=name)
    record = new(InboundDelivery(label=delivery_label("webhook", event_kind), transport="webhook", integration=name,
                                 event_kind=event_kind, delivery_id=delivery_id, route=route, content_type=content_type,
                                 headers=kept, raw_body=text), trace, source=name,
                 id=uuid.uuid5(_RECORD_NAMESPACE, f"{name}\x00{delivery_id}"))
    # Both publishes in flight at once: the answer waits for one broker round trip, not two. The
    # record's id is the delivery's, so a record that landed beside a refused delivery and the
    # record of the vendor's retry are one row.
    recorded = asyncio.ensure_future(_record(node, record))
    try:
        await node.queue.publish(topics.NOTIFICATIONS_INBOUND, raw, dedupe_id=f"{name}:{delivery_id}")
    except Exception as exc:
        log.warning("webhook_publish_failed", extra={"source": name, "delivery_id": delivery_id, "error": str(exc)})
        await _unclaim(node, slot)
        await recorded
        return refuse(503, "the event stream did not take the delivery; retry")
    await recorded
    return Answer(202, {"status": "accepted", "delivery_id": delivery_id, "trace_id": trace.trace_id},
                  {"traceparent": trace.traceparent()})


async def _duplicate(node: NotifyNode, source: Source, slot: str, delivery_id: str, event_kind: str, trace: TraceContext) -> Answer:
    """A body the fleet already took: the vendor's retry (the same delivery id), or a replay of
    it under another id, recorded as a skip (seed 000: every drop is a notification_skipped)."""
    name = source.name
    try:
        first = (await node.dedupe.holder(DEDUPE_NAMESPACE, slot) or {}).get("delivery_id")
    except CoordError:
        first = None
    if first is None or first == delivery_id:
        log.info("webhook_duplicate", extra={"source": name, "delivery_id": delivery_id})
        return Answer(200, {"status": "duplicate", "delivery_id": delivery_id})
    log.info("webhook_replayed", extra={"source": name, "delivery_id": delivery_id, "first_delivery_id": first})
    detail = (f"replayed: this body was accepted under delivery id {first} within the last "
              f"{DEDUPE_TTL_SECONDS // 3600} hours; the copy under {delivery_id} is not taken")
    await _record(node, skips.skip_event(skips.GATE_REFUSED, detail, trace, source=name, about=f"{slot}:{delivery_id}",
                                         event_kind=event_kind, delivery_id=delivery_id))
    return Answer(200, {"status": "duplicate", "delivery_id": delivery_id, "replay_of": first})


async def _claim(node: NotifyNode, key: str, delivery_id: str) -> bool:
    """The fleet's first claim of a body wins; a store that does not answer leaves the
    broker's own window (two minutes) as the only dedupe rather than refusing the delivery."""
    try:
        return await node.dedupe.claim(DEDUPE_NAMESPACE, key, DEDUPE_TTL_SECONDS, {"delivery_id": delivery_id})
    except CoordError as exc:
        log.warning("webhook_dedupe_unavailable", extra={"key": key, "error": str(exc)})
        return True


async def _unclaim(node: NotifyNode, key: str) -> None:
    try:
        await node.coord.delete(DEDUPE_BUCKET, f"{DEDUPE_NAMESPACE}:{key}")
    except CoordError as exc:
        log.warning("webhook_dedupe_release_failed", extra={"key": key, "error": str(exc)})


async def _record(node: NotifyNode, event: Event) -> None:
    """Publish a record of the delivery; a failure is logged, never the delivery's answer."""
    try:
        await node.queue.publish(topics.event_subject(event.type), event)
    except Exception as exc:
        log.warning("event_publish_failed", extra={"type": event.type, "error": str(exc)})
