"""The digest trigger: a multi-event partition merged into ONE notification (seed 000, "Inbox
Batching & Coalescing", "The digest trigger"; seed 001's `coalesce_notifications`).

`coalesce(events)` returns one `external_notification` whose body is a chronological digest of
the earlier messages, then the latest constituent's full enriched body, so the per-source
scaffolding (## Get Full Context) renders exactly once and points at the most recent state:

- per-source supersede rules first (`Source.digest_body`: Jira issue_updated bodies and a code
  host's lifecycle events collapse to their lead); comments and messages always keep their text;
- then a source-agnostic same-sender dedupe: a constituent whose effective body is
  byte-identical to a LATER message from the same sender collapses to a marker (two different
  people's "+1" are two facts and both survive);
- every constituent kept in `messages` (sender, salient body, metadata, recon flag);
- conservative merges: `recon` only when every constituent is recon, `direct` (the delivery
  obligation) when any is -- one direct ask inside a burst of broadcasts is still somebody waiting;
- the deepest constituent's delegation bookkeeping (batching cannot launder the depth cap);
- the FIRST constituent's trace: a span cannot have two parents, and rooting the turn under the
  message the rest are replies to is what makes the trace readable.

Same-id duplicates are dropped before merging. A partition that cannot be merged (a
constituent that is not a notification, or one naming another seat, partition or
conversation) raises `CoalesceError`; the seat host then degrades to per-event dispatch.
`coalesced_event(merged, events)` builds the `notifications_coalesced` record naming the
PARTITION (`partition_key`), for the host to publish.
"""
from __future__ import annotations

import uuid
from typing import Any, Iterable

from events.envelope import Event, format_timestamp, new
from events.tracing import TraceContext
from events.types.notification import ExternalNotification, NotificationsCoalesced
from notify.errors import NotifyError
from notify.sources import source_named

# The merged trigger's id is derived from its constituents, so a redelivered partition merges
# into the same trigger (the completion ledger keys on it).
_DIGEST_NAMESPACE = uuid.UUID("c2b5e8a4-61f7-5d3c-a09e-4b8d1f27e6c0")
DUPLICATE_MARKER = "(the same as a later message from {sender})"


class CoalesceError(NotifyError):
    """A partition that cannot be merged; the message names the constituent and why."""


def coalesce(events: Iterable[Event]) -> Event:
    """The one trigger a partition's events merge into; see the module docstring."""
    unique: dict[uuid.UUID, Event] = {}
    for event in events:
        unique.setdefault(event.id, event)
    if not unique:
        raise CoalesceError("an empty partition has nothing to merge")
    ordered = sorted(unique.values(), key=lambda e: (e.timestamp, str(e.id)))
    partition = _agreed(ordered)
    if len(ordered) == 1:
        return ordered[0]
    first, latest = ordered[0], ordered[-1]
    data: ExternalNotification = latest.data  # type: ignore[assignment]
    messages = [_message(e) for e in ordered]
    body, deduplicated, superseded = _digest(ordered, messages)
    deepest = max(ordered, key=lambda e: e.delegation_depth)  # the first of the deepest, in order
    positions = [e.data.trigger_position for e in ordered if e.data.trigger_position]  # type: ignore[union-attr]
    merged = data.model_copy(update={
        "body": body,
        "messages": messages,
        "recon": all(e.data.recon for e in ordered),  # type: ignore[union-attr]
        "direct": any(e.data.direct for e in ordered),  # type: ignore[union-attr]
        "trigger_position": positions[-1] if positions else "",
        "metadata": {**data.metadata, "coalesced": len(ordered)},
    })
    digest_id = uuid.uuid5(_DIGEST_NAMESPACE, "\x00".join(sorted(str(e.id) for e in ordered)))
    payload = {**latest.payload, "partition_key": partition,
               "digest": {"constituents": len(ordered), "deduplicated": deduplicated, "superseded": superseded}}
    return Event(
        type=latest.type, data=merged, id=digest_id, timestamp=latest.timestamp, source=latest.source,
        payload=payload, trace_id=first.trace_id, span_id=first.span_id, parent_span_id=first.parent_span_id,
        delegation_depth=deepest.delegation_depth, parent_turn_id=deepest.parent_turn_id,
        delegation_chain=deepest.delegation_chain,
    )


def coalesced_event(merged: Event, events: Iterable[Event], turn_id: str = "") -> Event:
    """The `notifications_coalesced` record of one merge, under the merged trigger's trace."""
    constituents = sorted({e.id: e for e in events}.values(), key=lambda e: (e.timestamp, str(e.id)))
    stats = merged.payload.get("digest") or {}
    data = NotificationsCoalesced(
        agent_id=merged.get("agent_id") or "", agent_handle=merged.get("agent_handle") or "",
        agent_role=merged.get("agent_role") or "", partition_key=str(merged.get("partition_key") or ""),
        turn_id=turn_id, constituents=len(constituents), event_ids=[str(e.id) for e in constituents],
        senders=list(dict.fromkeys(str(e.get("sender") or "") for e in constituents if e.get("sender"))),
        deduplicated=int(stats.get("deduplicated", 0)), superseded=int(stats.get("superseded", 0)),
    )
    trace = TraceContext(merged.trace_id, merged.span_id, merged.parent_span_id)
    return new(data, trace, source=merged.source)


# -- the parts ---------------------------------------------------------------------------------
def _agreed(events: list[Event]) -> str:
    """The partition key every constituent shares; CoalesceError naming one that does not merge."""
    seat = identity = partition = None
    for event in events:
        if event.type != ExternalNotification.TYPE or not isinstance(event.data, ExternalNotification):
            raise CoalesceError(f"event {event.id}: a {event.type} is not a notification and cannot join a digest")
        fields = (event.data.agent_handle, event.data.conversation_identity, str(event.get("partition_key") or ""))
        if seat is None:
            seat, identity, partition = fields
            continue
        for name, have, got in zip(("agent_handle", "conversation_identity", "partition_key"), (seat, identity, partition), fields, strict=True):
            if have != got:
                raise CoalesceError(f"event {event.id}: {name} {got!r} differs from the partition's {have!r}")
    return partition or ""


def _message(event: Event) -> dict[str, Any]:
    """One constituent as the merged trigger carries it: full fidelity for the learning workers."""
    data: ExternalNotification = event.data  # type: ignore[assignment]
    return {
        "id": str(event.id), "timestamp": format_timestamp(event.timestamp), "source": event.source,
        "event_kind": data.event_kind, "sender": data.sender, "subject": data.subject, "delivery_id": data.delivery_id,
        "salient_body": data.salient_body, "url": data.url, "metadata": dict(data.metadata),
        "recon": data.recon, "direct": data.direct,
    }


def _effective(message: dict[str, Any]) -> tuple[str, bool]:
    """(what the message contributes to a digest, whether a supersede rule fired)."""
    plain = str(message.get("salient_body") or message["metadata"].get("lead") or "")
    source = source_named(message.get("source") or "")
    text = source.digest_body(message) if source is not None else plain
    return text, text != plain


def _digest(events: list[Event], messages: list[dict[str, Any]]) -> tuple[str, int, int]:
    """(the digest body, how many constituents the dedupe collapsed, how many were superseded)."""
    effective = [_effective(m) for m in messages]
    deduplicated = superseded = 0
    lines: list[str] = []
    for i, message in enumerate(messages[:-1]):
        text, was_superseded = effective[i]
        sender = message["sender"] or "someone"
        if was_superseded:  # a supersede rule fires first: what it collapsed never reaches the dedupe
            superseded += 1
        elif any(m["sender"] == message["sender"] and effective[j][0] == text
                 for j, m in enumerate(messages[i + 1:], start=i + 1)):
            deduplicated += 1
            text = DUPLICATE_MARKER.format(sender=sender)
        stamp = message["timestamp"][11:19]
        lines.append(f"- [{stamp}] {sender}: " + text.strip().replace("\n", "\n  "))
    latest = events[-1].data
    where = latest.subject or latest.conversation_identity  # type: ignore[union-attr]
    head = (f"{len(messages)} messages on {where} arrived together: the earlier ones in order, "
            f"then the latest in full.")
    body = "\n".join([head, "", "## Earlier messages", *lines, "", "## Latest message", latest.body])  # type: ignore[union-attr]
    return body, deduplicated, superseded
