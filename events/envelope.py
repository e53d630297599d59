"""The event envelope (seed 000, "Event Schema").

Every event carries a common envelope -- id, type, UTC timestamp (microseconds), source,
payload, W3C trace ids, delegation bookkeeping and the node that first published it -- and
a registered type adds its own fields, marshalled flat beside the envelope's in one JSON
object.

Changes are additive-only: an event type this build does not know decodes with `data`
None and its fields kept verbatim in `extra`, and re-encodes losslessly; an unknown field
on a known type is kept too (the typed model allows extras). `node` belongs to the
envelope: a payload may not declare it (a colliding key is dropped).
"""
from __future__ import annotations

import dataclasses
import json
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict
from pydantic import ValidationError as PydanticValidationError

from events.errors import EventDecodeError, EventTypeError

ENVELOPE_KEYS: tuple[str, ...] = (
    "id",
    "type",
    "timestamp",
    "source",
    "payload",
    "trace_id",
    "span_id",
    "parent_span_id",
    "delegation_depth",
    "parent_turn_id",
    "delegation_chain",
    "node",
)


class EventData(BaseModel):
    """The typed half of an event. Subclasses are registered with `@register("type_name")`.

    `summary()` says who did what in a person's words; `actor()` answers who acted:
    the role, then the source, then the agent id, then `system` (seed 000, "Event Schema").
    """

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    TYPE: ClassVar[str] = ""

    def summary(self, event: "Event") -> str:
        return self.TYPE.replace("_", " ")

    def actor(self, event: "Event") -> str:
        for name in ("agent_role",):
            value = getattr(self, name, None)
            if value:
                return str(value)
        if event.source:
            return event.source
        agent_id = getattr(self, "agent_id", None)
        if agent_id:
            return str(agent_id)
        return "system"


_REGISTRY: dict[str, type[EventData]] = {}


def register(type_name: str):
    """Class decorator: make `cls` the typed body of `type_name`.

    Refuses a second registration of one name and a field that collides with the envelope,
    since a flat wire object cannot carry both.
    """

    def decorate(cls: type[EventData]) -> type[EventData]:
        if type_name in _REGISTRY and _REGISTRY[type_name] is not cls:
            raise EventTypeError(f"{type_name} is registered twice", event_type=type_name)
        clash = set(cls.model_fields) & set(ENVELOPE_KEYS)
        if clash:
            raise EventTypeError(
                f"{type_name}.{sorted(clash)[0]}: a typed field may not reuse an envelope key",
                event_type=type_name,
                field=sorted(clash)[0],
            )
        cls.TYPE = type_name
        _REGISTRY[type_name] = cls
        return cls

    return decorate


def registered_types() -> dict[str, type[EventData]]:
    """Every registered type name and its model (importing the taxonomy first)."""
    import events.types  # noqa: F401  (registration side effect)

    return dict(_REGISTRY)


def model_for(type_name: str) -> type[EventData] | None:
    import events.types  # noqa: F401

    return _REGISTRY.get(type_name)


def utcnow() -> datetime:
    """Now, in UTC, at the store's resolution (microseconds)."""
    return datetime.now(timezone.utc)


def format_timestamp(ts: datetime) -> str:
    """`YYYY-MM-DDTHH:MM:SS.ffffffZ` in UTC (every event carries one; isoformat is the fast path)."""
    if ts.tzinfo is not timezone.utc:
        ts = ts.astimezone(timezone.utc)
    return ts.replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


def parse_timestamp(value: Any, event_type: str | None = None) -> datetime:
    if isinstance(value, datetime):
        ts = value
    elif isinstance(value, str):
        try:
            ts = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise EventDecodeError(
                f"{event_type or 'event'}.timestamp: expected an RFC 3339 time, got {value!r}",
                event_type=event_type,
                field="timestamp",
            ) from None
    else:
        raise EventDecodeError(
            f"{event_type or 'event'}.timestamp: expected an RFC 3339 time, got {type(value).__name__}",
            event_type=event_type,
            field="timestamp",
        )
    if ts.tzinfo is None:
        ts = ts.replace(tzinfo=timezone.utc)
    return ts.astimezone(timezone.utc)


@dataclass(frozen=True)
class Event:
    """One event: the envelope, the typed body (`data`) and any fields this build does not know."""

    type: str
    data: EventData | None = None
    id: uuid.UUID = field(default_factory=uuid.uuid4)
    timestamp: datetime = field(default_factory=utcnow)
    source: str = ""
    payload: dict[str, Any] = field(default_factory=dict)
    trace_id: str = ""
    span_id: str = ""
    parent_span_id: str = ""
    delegation_depth: int = 0
    parent_turn_id: str = ""
    delegation_chain: tuple[str, ...] = ()
    node: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if "node" in self.payload:
            object.__setattr__(self, "payload", {k: v for k, v in self.payload.items() if k != "node"})
        if not isinstance(self.delegation_chain, tuple):
            object.__setattr__(self, "delegation_chain", tuple(self.delegation_chain))

    # -- derived ------------------------------------------------------------------------
    @property
    def fields(self) -> dict[str, Any]:
        """The typed fields and unknown extras, as they travel flat beside the envelope."""
        out: dict[str, Any] = {}
        if self.data is not None:
            out.update(self.data.model_dump(mode="json", exclude_none=False))
        out.update(self.extra)
        return out

    def get(self, name: str, default: Any = None) -> Any:
        """A typed or unknown field by name, else the payload's, else default."""
        if self.data is not None and name in type(self.data).model_fields:
            return getattr(self.data, name)
        if self.data is not None and self.data.model_extra and name in self.data.model_extra:
            return self.data.model_extra[name]
        if name in self.extra:
            return self.extra[name]
        return self.payload.get(name, default)

    def summary(self) -> str:
        if self.data is not None:
            return self.data.summary(self)
        return f"{self.type.replace('_', ' ')}"

    def actor(self) -> str:
        if self.data is not None:
            return self.data.actor(self)
        return self.extra.get("agent_role") or self.source or self.extra.get("agent_id") or "system"

    def replace(self, **changes: Any) -> "Event":
        """A copy with envelope fields changed (the caller's event is never written to)."""
        return dataclasses.replace(self, **changes)

    def with_node(self, node: str) -> "Event":
        """The copy the queue publishes: stamped with `node` unless the event names one already."""
        if self.node or not node:
            return self
        return dataclasses.replace(self, node=node)

    # -- wire ---------------------------------------------------------------------------
    def to_wire(self) -> dict[str, Any]:
        wire: dict[str, Any] = {
            "id": str(self.id),
            "type": self.type,
            "timestamp": format_timestamp(self.timestamp),
            "source": self.source,
            "payload": self.payload,
            "trace_id": self.trace_id,
            "span_id": self.span_id,
            "parent_span_id": self.parent_span_id,
            "delegation_depth": self.delegation_depth,
            "parent_turn_id": self.parent_turn_id,
            "delegation_chain": list(self.delegation_chain),
        }
        if self.node:
            wire["node"] = self.node
        for key, value in self.fields.items():
            # Every envelope key is the envelope's: a typed body's extra `node` (absent from
            # `wire` when the event names no origin) must not be written as the origin.
            if key not in ENVELOPE_KEYS:
                wire[key] = value
        return wire

    def to_json(self) -> bytes:
        return json.dumps(self.to_wire(), separators=(",", ":"), ensure_ascii=False, default=str).encode()

    @classmethod
    def from_wire(cls, wire: Any) -> "Event":
        """Decode the wire object; EventDecodeError names the type and field on any problem."""
        if not isinstance(wire, dict):
            raise EventDecodeError(f"an event is a JSON object, got {type(wire).__name__}")
        event_type = wire.get("type")
        if not isinstance(event_type, str) or not event_type:
            raise EventDecodeError("event.type: expected a non-empty string", field="type")
        try:
            event_id = uuid.UUID(str(wire.get("id")))
        except ValueError:
            raise EventDecodeError(f"{event_type}.id: expected a UUID, got {wire.get('id')!r}", event_type=event_type, field="id") from None
        payload = wire.get("payload") or {}
        if not isinstance(payload, dict):
            raise EventDecodeError(f"{event_type}.payload: expected an object", event_type=event_type, field="payload")
        chain = wire.get("delegation_chain") or []
        if not isinstance(chain, list):
            raise EventDecodeError(f"{event_type}.delegation_chain: expected a list", event_type=event_type, field="delegation_chain")
        depth = wire.get("delegation_depth") or 0
        if not isinstance(depth, int) or isinstance(depth, bool):
            raise EventDecodeError(f"{event_type}.delegation_depth: expected an integer", event_type=event_type, field="delegation_depth")
        rest = {k: v for k, v in wire.items() if k not in ENVELOPE_KEYS}
        model = model_for(event_type)
        data: EventData | None = None
        extra: dict[str, Any] = {}
        if model is None:
            extra = rest
        else:
            try:
                data = model.model_validate(rest)
            except PydanticValidationError as exc:
                first = exc.errors()[0]
                where = ".".join(str(p) for p in first.get("loc", ())) or "?"
                raise EventDecodeError(
                    f"{event_type}.{where}: {first.get('msg', 'invalid')}", event_type=event_type, field=where
                ) from None
        return cls(
            type=event_type,
            data=data,
            id=event_id,
            timestamp=parse_timestamp(wire.get("timestamp"), event_type),
            source=str(wire.get("source") or ""),
            payload=payload,
            trace_id=str(wire.get("trace_id") or ""),
            span_id=str(wire.get("span_id") or ""),
            parent_span_id=str(wire.get("parent_span_id") or ""),
            delegation_depth=depth,
            parent_turn_id=str(wire.get("parent_turn_id") or ""),
            delegation_chain=tuple(str(x) for x in chain),
            node=str(wire.get("node") or ""),
            extra=extra,
        )

    @classmethod
    def from_json(cls, body: bytes | str) -> "Event":
        try:
            wire = json.loads(body)
        except (ValueError, UnicodeDecodeError) as exc:
            raise EventDecodeError(f"the body is not valid JSON ({exc})") from None
        return cls.from_wire(wire)


def new(data: EventData, trace, *, source: str = "", payload: dict[str, Any] | None = None, **envelope: Any) -> Event:
    """Build an event of data's registered type under `trace` (seed 000: the trace is passed, never captured).

    `trace` is a `events.tracing.TraceContext` -- normally `tracing.trace_of()`.
    """
    if not data.TYPE:
        raise EventTypeError(f"{type(data).__name__} is not a registered event type")
    return Event(
        type=data.TYPE,
        data=data,
        source=source,
        payload=dict(payload or {}),
        trace_id=trace.trace_id,
        span_id=trace.span_id,
        parent_span_id=trace.parent_span_id,
        **envelope,
    )
