"""Events as they arrive off the wire, for the store, query and API tests."""
from __future__ import annotations

import uuid
from datetime import datetime

from events.envelope import Event, format_timestamp, utcnow
from events.tracing import new_span_id, new_trace_id


def make_event(event_type: str, *, at: datetime | None = None, trace_id: str = "", payload: dict | None = None,
               **fields) -> Event:
    """An event as it arrives off the wire (typed when the type is registered), from node-a."""
    wire = {
        "id": str(uuid.uuid4()),
        "type": event_type,
        "timestamp": format_timestamp(at or utcnow()),
        "source": "test",
        "payload": payload or {},
        "trace_id": trace_id or new_trace_id(),
        "span_id": new_span_id(),
        "node": "node-a",
        **fields,
    }
    return Event.from_wire(wire)
