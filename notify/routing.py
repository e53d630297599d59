"""Recipient resolution and the wake (seed 000, "Routing": "Every producer resolves its recipient
from the organization (a handle, a role name or an agent id to a seat, and a seat to its inbox
subject) and never from which seats this node runs"; "When the resolved target is a human seat,
the event is skipped"; "Inbox Batching & Coalescing": the wake carries partition_key in its
payload and conversation_identity on its own field).

A source names people in its own words (a login, a user id); the integration's `users` map
turns each into a seat handle, and a name the map does not hold may be a seat's handle or a
role itself (`@carol`, `@pm`); the org of the CURRENT company turns that into seats. A role
names every seat that holds it.
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from events.envelope import Event, new
from events.tracing import TraceContext
from events.types.notification import ExternalNotification
from notify.sources.base import Address, Notification

# A wake's id is derived from the delivery and the seat, so a redelivered delivery publishes
# the same wake (the completion ledger and the same-id dedupe key on it).
_WAKE_NAMESPACE = uuid.UUID("9a4e2b71-c3d8-5f06-8b1a-2d7e6c9f0a35")


@dataclass(frozen=True)
class Target:
    """A seat a delivery reaches, and the strongest address that named it."""

    seat: Any
    address: Address


@dataclass
class Resolution:
    targets: list[Target] = field(default_factory=list)
    unmatched: list[Address] = field(default_factory=list)   # explicit addresses no seat matches
    sender_seats: set[str] = field(default_factory=set)      # the handles the author is


def seats_named(company: Any, users: Mapping[str, str], names: Iterable[str]) -> list[Any]:
    """The seats one person is, by any of their identifiers: the integration's users map first
    (exact, then case-insensitive), else an identifier that is itself a seat handle, else a role
    (every seat holding it). The users map's values are seat handles (validated with the company)."""
    names = [n for n in names if n]
    folded = {k.casefold(): v for k, v in users.items()}
    for name in names:
        handle = users.get(name) or folded.get(name.casefold())
        seat = company.seat_by_handle(handle) if handle else None
        if seat is not None:
            return [seat]
    for name in names:
        seat = company.seat_by_handle(name)
        if seat is not None:
            return [seat]
        by_role = [s for s in company.org.seats if s.role and s.role == name]
        if by_role:
            return by_role
    return []


def _stronger(a: Address, b: Address) -> bool:
    """Whether a beats b: explicit over implicit, then direct over not."""
    return (a.explicit, a.direct) > (b.explicit, b.direct)


def resolve(company: Any, users: Mapping[str, str], notification: Notification,
            followers: Iterable[str] = ()) -> Resolution:
    """Every seat the notification reaches, each once, with the address that reached it."""
    out = Resolution()
    out.sender_seats = {s.handle for s in seats_named(company, users, (notification.sender, *notification.sender_aka))}
    best: dict[str, Target] = {}
    addresses = list(notification.addresses) + [Address(h, "follower", explicit=False) for h in followers]
    for address in addresses:
        if address.why == "follower":
            seat = company.seat_by_handle(address.who)
            seats = [seat] if seat is not None else []
        else:
            seats = seats_named(company, users, address.names)
        if not seats:
            if address.explicit and address not in out.unmatched:
                out.unmatched.append(address)
            continue
        for seat in seats:
            held = best.get(seat.handle)
            if held is None or _stronger(address, held.address):
                best[seat.handle] = Target(seat, address)
    out.targets = list(best.values())
    return out


def wake_event(notification: Notification, target: Target, company: Any, raw: Event, delivery_id: str,
               trace: TraceContext) -> Event:
    """The external_notification wake for one agent seat, under the delivery's trace."""
    seat = target.seat
    wake_id = uuid.uuid5(_WAKE_NAMESPACE, f"{raw.id}\x00{seat.handle}")
    partition = notification.partition_key or f"event:{wake_id}"
    identity = notification.conversation_identity or partition
    direct = target.address.direct
    metadata = {
        **notification.metadata,
        "lead": notification.lead,
        "lifecycle": notification.lifecycle,
        "event_kind": notification.event_kind,
        "addressed_as": target.address.why,
    }
    data = ExternalNotification(
        agent_id=str(company.agent_id_for(seat.handle)), agent_handle=seat.handle, agent_role=seat.role or "",
        event_kind=notification.event_kind, subject=notification.subject, sender=notification.sender,
        delivery_id=delivery_id, conversation_identity=identity, body=notification.body,
        salient_body=notification.salient_body, url=notification.url, metadata=metadata,
        recon=not direct, direct=direct,
    )
    return new(data, trace, source=notification.source, payload={"partition_key": partition}, id=wake_id)


def wake_dedupe_id(notification: Notification, handle: str, wake: Event) -> str:
    """The broker dedupe id of a wake: the message's identity on its backend where it has one,
    so one Slack message delivered as both `message` and `app_mention` wakes a seat once."""
    return f"wake:{handle}:{notification.message_id or wake.id}"
