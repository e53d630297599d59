"""One trigger for a multi-event partition (seed 000, "Inbox Batching & Coalescing", "The digest
trigger").

`merge_partition(events)` is the seat host's one door to the coalescer: it uses
`notify.coalesce.coalesce` when that module exists and otherwise builds a plain chronological
merge -- the latest constituent's body, the FIRST constituent's trace (a span cannot have two
parents, and the merged ask leads with the first message), every constituent listed in
`messages`. A partition that cannot be merged raises `CoalesceError`, and the host degrades to
per-event dispatch.
"""
from __future__ import annotations

import uuid
from typing import Any

from events.envelope import Event, new
from events.errors import EventDecodeError
from events.tracing import TraceContext
from events.types.notification import NotificationsCoalesced

try:  # the notify app's coalescer, once it exists
    from notify.coalesce import CoalesceError
    from notify.coalesce import coalesce as _coalesce
    from notify.coalesce import coalesced_event as _coalesced_event
except ModuleNotFoundError as exc:  # only its absence is tolerated, never a bug inside it
    if exc.name not in ("notify.coalesce", "notify"):
        raise
    _coalesce = _coalesced_event = None

    class CoalesceError(Exception):  # type: ignore[no-redef]
        """A partition that cannot be merged into one trigger (a malformed constituent)."""


def merge_partition(events: list[Event]) -> Event:
    """One trigger for the partition's events (already sorted by timestamp, duplicates dropped).
    A single event is returned as it is; CoalesceError when the partition cannot be merged."""
    if not events:
        raise CoalesceError("an empty partition has nothing to merge")
    if len(events) == 1:
        return events[0]
    if _coalesce is not None:
        return _coalesce(list(events))
    return chronological_merge(events)


def coalesced_record(merged: Event, events: list[Event], partition_key: str, turn_id: str) -> Event:
    """The `notifications_coalesced` record of one merge (naming the PARTITION), under the merged
    trigger's trace: the coalescer's own when it exists, else one built from the constituents."""
    if _coalesced_event is not None:
        return _coalesced_event(merged, events, turn_id)
    data = NotificationsCoalesced(
        agent_id=str(merged.get("agent_id") or ""), agent_handle=str(merged.get("agent_handle") or ""),
        agent_role=str(merged.get("agent_role") or ""), partition_key=partition_key, turn_id=turn_id,
        constituents=len(events), event_ids=[str(e.id) for e in events],
        senders=list(dict.fromkeys(str(e.get("sender")) for e in events if e.get("sender"))))
    return new(data, TraceContext(merged.trace_id, merged.span_id, merged.parent_span_id), source=merged.source)


def chronological_merge(events: list[Event]) -> Event:
    """The stand-in digest: the latest event's body under a new id, the first one's trace, and
    every constituent in `messages` (oldest first)."""
    first, latest = events[0], events[-1]
    wire = latest.to_wire()
    wire.update(
        id=str(uuid.uuid4()),
        trace_id=first.trace_id,
        span_id=first.span_id,
        parent_span_id=first.parent_span_id,
        delegation_depth=max(e.delegation_depth for e in events),  # batching cannot launder the depth cap
        messages=[constituent(e) for e in events],
        constituent_ids=[str(e.id) for e in events],
    )
    wire.pop("node", None)
    try:
        return Event.from_wire(wire)
    except EventDecodeError as exc:
        raise CoalesceError(f"the merged trigger does not decode: {exc}") from None


def constituent(event: Event) -> dict[str, Any]:
    """One entry of a merged trigger's `messages`."""
    body = event.get("salient_body") or event.get("body") or event.get("task") or ""
    if not isinstance(body, str):
        raise CoalesceError(f"event {event.id}: its body is not text")
    return {
        "id": str(event.id),
        "type": event.type,
        "timestamp": event.to_wire()["timestamp"],
        "sender": str(event.get("sender") or event.source or ""),
        "body": body,
        "metadata": event.get("metadata") or {},
    }
