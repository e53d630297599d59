"""A turn its node never ended is closed at that node's next boot (seats.interrupted), read from a
real SQLite store: only this node's turns since its last boot, only those with no end."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from asgiref.sync import sync_to_async

from dashboard.waterfall import build
from events.queries import trace as trace_items
from events.store import write_events
from events.tracing import new_span_id, new_trace_id
from seats.interrupted import close_interrupted_turns, open_turns
from tests.dashboard.conftest import make_event

pytestmark = [pytest.mark.timeout(30), pytest.mark.django_db(transaction=True)]


def _turn(turn_id: str, at: datetime, node: str = "node-1", *ends: str) -> list:
    """A turn's start and the given ends, in one trace and span as the turn engine writes them."""
    trace, span = new_trace_id(), new_span_id()
    fields = {"agent_handle": "alice", "agent_id": "a1", "turn_id": turn_id, "trace_id": trace, "span_id": span, "node": node}
    events = [make_event("agent_turn_started", at=at, trigger_id="trig-" + turn_id, trigger_ids=["trig-" + turn_id], **fields)]
    events += [make_event(end, at=at + timedelta(seconds=1), **fields) for end in ends]
    return events


async def test_the_turns_a_node_left_open_since_its_last_boot_are_closed_as_interrupted_once():
    now = datetime.now(timezone.utc)
    booted = now - timedelta(minutes=10)
    await sync_to_async(write_events)([
        *_turn("before-the-last-boot", booted - timedelta(minutes=5)),                # its own boot closed it
        make_event("org_started", at=booted, node="node-1", company="acme"),
        *_turn("completed", booted + timedelta(minutes=1), "node-1", "agent_turn_completed"),
        *_turn("raised", booted + timedelta(minutes=2), "node-1", "turn.guard_breach"),  # a breach alone ends it
        *_turn("another-nodes", booted + timedelta(minutes=3), "node-2"),
        *_turn("killed", booted + timedelta(minutes=4)),
    ])
    assert [e.get("turn_id") for e in await sync_to_async(open_turns)("node-1")] == ["killed"]

    published = []

    async def publish(event) -> None:
        published.append(event)
        await sync_to_async(write_events)([event])

    closed = await close_interrupted_turns("node-1", sync_to_async(open_turns), publish)
    assert closed == ["killed"]
    [end] = published
    started = (await sync_to_async(open_turns)("node-2"))[0]  # the one left alone
    assert started.get("turn_id") == "another-nodes"
    assert (end.type, end.get("outcome"), end.get("failed"), end.get("error_kind")) == \
        ("agent_turn_completed", "interrupted", True, "node_stopped")
    assert (end.get("agent_handle"), end.get("trigger_ids")) == ("alice", ["trig-killed"])
    assert end.get("duration_ms") >= 6 * 60 * 1000 - 1000  # from its start to the boot that closed it

    # The waterfall closes the same turn row, red, saying why.
    tree = build(end.trace_id, await sync_to_async(trace_items)(end.trace_id))
    [turn] = tree["rows"]
    assert (turn["kind"], turn["status"], tree["turns"]) == ("turn", "failed", 1)
    assert turn["detail"]["outcome"] == "interrupted" and "the node stopped" in turn["note"]

    assert await close_interrupted_turns("node-1", sync_to_async(open_turns), publish) == []  # closed once
