"""Trace context (seed 000, "Distributed Tracing"): never empty, parent-aware, W3C on the edges."""
from __future__ import annotations

import re

import pytest

from events import tracing
from events.tracing import TraceContext

HEX32 = re.compile(r"^[0-9a-f]{32}$")
HEX16 = re.compile(r"^[0-9a-f]{16}$")


def test_outside_a_span_trace_of_mints_a_fresh_root_every_time():
    first, second = tracing.trace_of(), tracing.trace_of()
    for ctx in (first, second):
        assert HEX32.match(ctx.trace_id) and ctx.trace_id != "0" * 32
        assert HEX16.match(ctx.span_id) and ctx.span_id != "0" * 16
        assert ctx.parent_span_id == ""
    assert first.trace_id != second.trace_id
    assert first.span_id != second.span_id


def test_inside_a_span_trace_of_reports_that_span_and_its_parent():
    with tracing.span("agent.turn") as outer:
        assert tracing.trace_of() == outer
        with tracing.span("agent.turn.plan") as inner:
            here = tracing.trace_of()
            assert here == inner
            assert here.trace_id == outer.trace_id
            assert here.span_id != outer.span_id
            assert here.parent_span_id == outer.span_id


def test_a_span_under_a_remote_parent_continues_its_trace():
    parent = tracing.parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
    with tracing.span("webhook.receive", parent=parent) as ctx:
        assert ctx.trace_id == "4bf92f3577b34da6a3ce929d0e0e4736"
        assert ctx.span_id != "00f067aa0ba902b7"
        assert ctx.parent_span_id == "00f067aa0ba902b7"


def test_a_span_under_an_events_trace_continues_it():
    from events.envelope import Event

    event = Event(type="task_assigned", trace_id="ab" * 16, span_id="cd" * 8)
    with tracing.span("agent.turn", parent=tracing.event_trace(event)) as ctx:
        assert ctx.trace_id == "ab" * 16 and ctx.parent_span_id == "cd" * 8
    assert tracing.event_trace(Event(type="task_assigned")) is None


def test_traceparent_round_trips():
    ctx = TraceContext("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7")
    header = tracing.format_traceparent(ctx)
    assert header == "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    assert tracing.parse_traceparent(header) == ctx
    assert ctx.traceparent() == header


@pytest.mark.parametrize(
    "header",
    [
        None,
        "",
        "garbage",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",  # no flags
        "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",  # short trace id
        "00-" + "0" * 32 + "-00f067aa0ba902b7-01",  # all-zero trace id
        "00-4bf92f3577b34da6a3ce929d0e0e4736-" + "0" * 16 + "-01",  # all-zero span id
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  # forbidden version
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902bz-01",  # not hex
    ],
)
def test_a_malformed_traceparent_is_none(header):
    assert tracing.parse_traceparent(header) is None
