"""Trace context for events (seed 000, "Distributed Tracing"; seed 002, "Tracing").

- `trace_of()` never returns empty: inside a span it reports that span's ids (the span
  that emits the event, and the span above it); with no span open it mints a fresh root.
- W3C `traceparent` in (`parse_traceparent`) and out (`format_traceparent`).
- `span(name, parent=...)` opens an OpenTelemetry span, optionally under a remote parent
  restored from an event or a header, so a turn's span is a child of its trigger's.
"""
from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass
from typing import Iterator

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

_TRACEPARENT = re.compile(r"^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")
_ZERO_TRACE = "0" * 32
_ZERO_SPAN = "0" * 16

# The engine's span names (seed 002, "How Traces Flow"), each opened through `span` below, so an
# exporter attached to the one provider ships every one of them; a part of the engine that
# opens one names it from here. The seed's set, plus notify.route (the delivery's routing to
# the seats it wakes, between webhook.receive and the turns).
WEBHOOK_RECEIVE = "webhook.receive"
NOTIFY_ROUTE = "notify.route"
AGENT_TURN = "agent.turn"
AGENT_TURN_RESUME = "agent.turn.resume"
LLM_ROUND = "llm.round"          # once per round: never per fallback member or credential
TOOL_CALL = "tool.call"
SCHEDULE_FIRE = "schedule.fire"  # cron-started work


def turn_phase(phase: str) -> str:
    """`agent.turn.<phase>`: one phase of a turn."""
    return f"{AGENT_TURN}.{phase}"


SERVICE_NAME = "crewlet"  # the resource's service.name unless OTEL_SERVICE_NAME (or the resource attributes) say otherwise


def _resource() -> Resource:
    named = os.environ.get("OTEL_SERVICE_NAME") or "service.name=" in os.environ.get("OTEL_RESOURCE_ATTRIBUTES", "")
    return Resource.create({} if named else {"service.name": SERVICE_NAME})


# One provider for the process (the OpenTelemetry SDK's unit), so trace ids reach events whether
# or not anything exports; engine.node.telemetry attaches the OTLP exporter to it when asked.
_provider = TracerProvider(resource=_resource())
_tracer = _provider.get_tracer("crewlet")


def tracer_provider() -> TracerProvider:
    """The engine's provider; an exporter (OTLP) is attached to it at node start when configured."""
    return _provider


@dataclass(frozen=True)
class TraceContext:
    trace_id: str
    span_id: str
    parent_span_id: str = ""

    def traceparent(self) -> str:
        return format_traceparent(self)


def _hex(n: int, width: int) -> str:
    return format(n, f"0{width}x")


def new_trace_id() -> str:
    while True:
        value = os.urandom(16).hex()
        if value != _ZERO_TRACE:
            return value


def new_span_id() -> str:
    while True:
        value = os.urandom(8).hex()
        if value != _ZERO_SPAN:
            return value


def trace_of() -> TraceContext:
    """The trace an event built here belongs to; a fresh root when no span is open."""
    span = trace.get_current_span()
    ctx = span.get_span_context()
    if not ctx.is_valid:
        return TraceContext(new_trace_id(), new_span_id(), "")
    parent = getattr(span, "parent", None)
    parent_id = _hex(parent.span_id, 16) if parent is not None and parent.is_valid else ""
    return TraceContext(_hex(ctx.trace_id, 32), _hex(ctx.span_id, 16), parent_id)


def parse_traceparent(header: str | None) -> TraceContext | None:
    """A W3C traceparent's trace and span ids, or None when absent or malformed."""
    if not header:
        return None
    match = _TRACEPARENT.match(header.strip().lower())
    if not match or match.group(1) == "ff":
        return None
    trace_id, span_id = match.group(2), match.group(3)
    if trace_id == _ZERO_TRACE or span_id == _ZERO_SPAN:
        return None
    return TraceContext(trace_id, span_id, "")


def format_traceparent(ctx: TraceContext) -> str:
    return f"00-{ctx.trace_id}-{ctx.span_id}-01"


def _remote(parent: TraceContext) -> otel_context.Context:
    span_context = SpanContext(
        trace_id=int(parent.trace_id, 16),
        span_id=int(parent.span_id, 16),
        is_remote=True,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
    )
    return trace.set_span_in_context(NonRecordingSpan(span_context))


@contextlib.contextmanager
def span(name: str, parent: TraceContext | None = None, **attributes) -> Iterator[TraceContext]:
    """Open span `name` (under `parent` when given, else under the current span) and yield its trace.

    The yielded context is what events published inside the span carry.
    """
    ctx = _remote(parent) if parent is not None else None
    with _tracer.start_as_current_span(name, context=ctx, attributes={k: v for k, v in attributes.items() if v is not None}):
        yield trace_of()


def current_span() -> trace.Span:
    """The span open here (a non-recording one when none is): to set an attribute learned inside it."""
    return trace.get_current_span()


def event_trace(event) -> TraceContext | None:
    """The trace an event carries, to restore as a parent; None when it carries none."""
    if event.trace_id and event.span_id:
        return TraceContext(event.trace_id, event.span_id, event.parent_span_id)
    return None
