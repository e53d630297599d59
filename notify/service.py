"""The notification service, `notify.Service` (seed 000, "Routing": it "consumes
crewlet.notifications.inbound in one fleet-wide group, resolves each delivery to its recipients,
and publishes a wake to each agent seat's inbox"; "A producer reads the organization from the
epoch current when it handles the event"; "Distributed Tracing": every drop of a delivery
addressed to somebody is a NotificationSkipped with one of the fixed reasons).

One delivery (`raw_webhook`, published by the edge in `notify.edge`) at a time:

  decode    -> its payload cannot be read               (skip)
  source    -> nothing parses its source                (skip)
  connected -> its source was disconnected              (skip: the active revision dropped it)
  parse     -> its parser refuses the payload           (skip, the parser's error in detail)
            -> chat noise                               (debug log, never recorded)
  resolve   -> no seat matches its recipient            (skip, per explicit address)
  per seat  -> the author's own post                    (debug log; the seat follows the thread)
            -> a human seat: the routing gate refuses it (info-level skip)
            -> the rate valve is shut                   (skip)
            -> the wake, on the seat's inbox

Wakes and skips carry the delivery's trace: they are published inside a `notify.route` span
that hangs under the delivery's `webhook.receive`, so the turn a wake starts hangs under the
routing, and the routing under the delivery. A failed publish raises, the delivery is NAK'd and comes back;
wakes and skips have ids derived from the delivery, so a second pass republishes the same ones.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from engine.queue import topics
from engine.queue.contract import Delivery, Outcome
from events.envelope import Event
from events.tracing import NOTIFY_ROUTE, TraceContext, event_trace, span, trace_of
from notify import skips
from notify.node import NotifyNode
from notify.routing import resolve, wake_dedupe_id, wake_event
from notify.sources import source_named
from notify.sources.base import Ignored, Notification, ParseError, PayloadError
from notify.threads import ThreadFollows
from notify.valve import RateValve

log = logging.getLogger("notify.service")


@dataclass
class Routed:
    """What one delivery became: the wakes published (by seat), the skips (by reason), the
    noise (debug-logged reasons). A test reads it; the node only logs it."""

    wakes: list[str] = field(default_factory=list)
    skips: list[str] = field(default_factory=list)
    noise: list[str] = field(default_factory=list)


class NotificationService:
    """Built by the node for the ingress and workers roles (engine.node.services)."""

    name = "notifications"

    def __init__(self, node: NotifyNode) -> None:
        self.node = node
        self.valve = RateValve(node.coord)
        self.follows = ThreadFollows(node.coord)

    async def start(self) -> None:
        await self.node.queue.subscribe(topics.NOTIFICATIONS_INBOUND, topics.NOTIFICATIONS_GROUP, self.handle)

    async def stop(self, cut: bool) -> None:
        # Detach: a delivery in flight goes back at once, with its count, for a peer to route.
        await self.node.queue.detach(topics.NOTIFICATIONS_INBOUND, topics.NOTIFICATIONS_GROUP)

    async def handle(self, delivery: Delivery) -> Outcome | None:
        if self.node.company is None:
            return Outcome.NAK  # no revision applied yet: nothing to route through
        await self.route(delivery.event)
        return Outcome.ACK

    # -- one delivery ----------------------------------------------------------------------
    async def route(self, raw: Event) -> Routed:
        """Route one delivery through the current company, under a `notify.route` span that hangs
        under the delivery's own (webhook.receive); see the module docstring."""
        name = str(raw.get("integration") or raw.source or "")
        with span(NOTIFY_ROUTE, parent=event_trace(raw), **{"webhook.source": name or None}):
            return await self._route(raw)

    async def _route(self, raw: Event) -> Routed:
        out = Routed()
        trace = trace_of()
        name = str(raw.get("integration") or raw.source or "")
        delivery_id = str(raw.get("delivery_id") or raw.id)
        event_kind = str(raw.get("event_kind") or "")
        about = {"source": name, "delivery_id": delivery_id, "event_kind": event_kind, "trace": trace, "raw": raw}
        source = source_named(name)
        if source is None:
            return await self._skip(out, skips.NO_PARSER, f"no source named {name!r} in this build", **about)
        company = self.node.company
        creds = self.node.credentials
        if not creds.connected(name):
            return await self._skip(out, skips.SOURCE_DISCONNECTED,
                                    f"integrations.{name} is not in the active revision", **about)
        headers = dict(raw.get("headers") or {})
        try:
            payload = source.decode(headers, str(raw.get("raw_body") or "").encode("utf-8"))
        except PayloadError as exc:
            return await self._skip(out, skips.PAYLOAD_UNREADABLE, exc.detail, **about)
        try:
            parsed = source.parse(event_kind, payload)
        except ParseError as exc:
            return await self._skip(out, skips.PARSER_REFUSED, exc.detail, **about)
        except Exception as exc:  # a parser's own bug refuses this payload, never the node
            log.exception("notification_parser_failed", extra={"source": name, "delivery_id": delivery_id})
            return await self._skip(out, skips.PARSER_REFUSED, f"{type(exc).__name__}: {exc}", **about)
        if isinstance(parsed, Ignored):
            return self._noise(out, source.noise_log_event, parsed.why, name, delivery_id)
        if parsed is None:
            log.debug("notification_unaddressed", extra={"source": name, "delivery_id": delivery_id, "event_kind": event_kind})
            return out
        await self._deliver(out, parsed, source, company, creds.users(name), about)
        return out

    async def _deliver(self, out: Routed, n: Notification, source: Any, company: Any, users, about: dict) -> None:
        reply = bool(n.thread) and bool(n.metadata.get("reply"))
        followers = await self.follows.followers(n.thread) if reply else set()
        found = resolve(company, users, n, followers)
        about = {**about, "notification": n}
        for address in found.unmatched:
            await self._skip(out, skips.NO_SEAT, f"integrations.{n.source}.users names no seat or role for {address.who!r}",
                             recipient=address.who, **about)
        if not found.targets and not found.unmatched and reply:
            self._noise(out, source.noise_log_event, "a thread reply no seat follows", n.source, about["delivery_id"])
            return
        woken: list[str] = []
        for target in found.targets:
            seat = target.seat
            if seat.handle in found.sender_seats:
                self._noise(out, source.noise_log_event, f"{seat.handle}'s own post", n.source, about["delivery_id"])
                continue
            if not seat.is_agent:
                await self._skip(out, skips.GATE_REFUSED, f"{seat.handle} is a human seat: a person is notified where the "
                                 "work lives, never through an inbox", recipient=target.address.who, seat=seat,
                                 level="info", **about)
                continue
            if not await self.valve.admit(seat.handle, company.notification_rate_limit):
                await self._skip(out, skips.RATE_VALVE_SHUT, f"over notification_rate_limit "
                                 f"({company.notification_rate_limit} per seat per second)",
                                 recipient=target.address.who, seat=seat, **about)
                continue
            wake = wake_event(n, target, company, about["raw"], about["delivery_id"], about["trace"])
            await self.node.queue.publish(topics.agent_inbox(seat.handle), wake, dedupe_id=wake_dedupe_id(n, seat.handle, wake))
            out.wakes.append(seat.handle)
            woken.append(seat.handle)
        if n.thread:
            agents = [h for h in found.sender_seats if (s := company.seat_by_handle(h)) is not None and s.is_agent]
            await self.follows.follow(n.thread, woken + agents)
        if woken:
            log.debug("notification_routed", extra={"source": n.source, "delivery_id": about["delivery_id"],
                                                    "seats": ",".join(woken), "partition_key": n.partition_key})

    # -- drops -----------------------------------------------------------------------------
    async def _skip(self, out: Routed, reason: str, detail: str, *, source: str, delivery_id: str, event_kind: str,
                    trace: TraceContext, raw: Event, notification: Notification | None = None, recipient: str = "",
                    seat: Any = None, level: str = "warning") -> Routed:
        company = self.node.company
        n = notification
        event = skips.skip_event(
            reason, detail, trace, source=source, about=f"{raw.id}", event_kind=event_kind, delivery_id=delivery_id,
            subject=n.subject if n else "", sender=n.sender if n else "",
            conversation_identity=n.conversation_identity if n else "", recipient=recipient, seat=seat,
            agent_id=str(company.agent_id_for(seat.handle)) if seat is not None and company is not None else "", level=level,
        )
        await self.node.queue.publish(topics.event_subject(event.type), event)
        log.info("notification_skipped", extra={"source": source, "delivery_id": delivery_id, "reason": reason,
                                                "detail": detail, "recipient": recipient})
        out.skips.append(reason)
        return out

    def _noise(self, out: Routed, log_event: str, why: str, source: str, delivery_id: str) -> Routed:
        log.debug(log_event, extra={"source": source, "delivery_id": delivery_id, "why": why})
        out.noise.append(why)
        return out
