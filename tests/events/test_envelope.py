"""The event envelope on the wire (seed 000, "Event Schema"): additive-only, lossless, node-owned."""
from __future__ import annotations

import json
import uuid
from datetime import datetime, timezone

import pytest

from events import tracing
from events.envelope import Event, EventData, new, register
from events.errors import EventDecodeError, EventTypeError
from events.types.task import TaskAssigned


def _wire(**fields) -> dict:
    base = {
        "id": str(uuid.uuid4()),
        "type": "task_assigned",
        "timestamp": "2026-03-12T10:30:00.412345Z",
        "source": "scheduler",
        "payload": {},
        "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736",
        "span_id": "00f067aa0ba902b7",
        "parent_span_id": "",
        "delegation_depth": 0,
        "parent_turn_id": "",
        "delegation_chain": [],
    }
    base.update(fields)
    return base


def test_a_known_type_round_trips_through_json():
    trace = tracing.trace_of()
    event = new(
        TaskAssigned(agent_id="a-1", agent_handle="bob", task="write the release notes", assigned_by="maya"),
        trace,
        source="scheduler",
        payload={"priority": "high"},
        delegation_depth=2,
        delegation_chain=("alice", "bob"),
    )
    back = Event.from_json(event.to_json())
    assert back == event
    assert isinstance(back.data, TaskAssigned)
    assert back.data.agent_handle == "bob"
    assert back.trace_id == trace.trace_id and back.span_id == trace.span_id
    assert back.delegation_chain == ("alice", "bob")
    assert back.summary() == "maya assigned bob: write the release notes"


def test_an_unknown_type_keeps_every_field_and_re_encodes_losslessly():
    wire = _wire(
        type="hologram_projected",
        node="node-b",
        payload={"note": "kept"},
        colour="teal",
        nested={"depth": [1, 2, {"three": None}]},
        count=3,
    )
    event = Event.from_wire(wire)
    assert event.data is None
    assert event.extra == {"colour": "teal", "nested": {"depth": [1, 2, {"three": None}]}, "count": 3}
    assert json.loads(event.to_json()) == wire
    again = Event.from_json(event.to_json())
    assert json.loads(again.to_json()) == json.loads(event.to_json())


def test_an_unknown_field_on_a_known_type_is_kept():
    event = Event.from_wire(_wire(agent_handle="bob", added_by_a_newer_build={"x": 1}))
    assert isinstance(event.data, TaskAssigned)
    assert event.get("added_by_a_newer_build") == {"x": 1}
    assert json.loads(event.to_json())["added_by_a_newer_build"] == {"x": 1}


def test_a_payload_that_declares_node_loses_it():
    event = Event(type="task_assigned", data=TaskAssigned(), payload={"node": "impostor", "kept": 1})
    assert event.payload == {"kept": 1}
    assert "node" not in json.loads(event.to_json())

    decoded = Event.from_wire(_wire(payload={"node": "impostor"}))
    assert decoded.payload == {} and decoded.node == ""


def test_a_typed_body_cannot_claim_the_node_either():
    # An extra field named `node` on a typed body must not leak onto the wire as the origin.
    body = TaskAssigned.model_validate({"agent_handle": "bob", "node": "impostor"})
    event = Event(type="task_assigned", data=body)
    assert "node" not in json.loads(event.to_json())
    assert json.loads(event.with_node("node-a").to_json())["node"] == "node-a"


def test_a_type_may_not_declare_an_envelope_field():
    with pytest.raises(EventTypeError, match="node"):

        @register("test_node_claimer")
        class NodeClaimer(EventData):
            node: str = ""


def test_with_node_stamps_a_copy_and_keeps_an_existing_origin():
    event = Event(type="task_assigned", data=TaskAssigned(agent_handle="bob"))
    stamped = event.with_node("node-a")
    assert stamped.node == "node-a"
    assert event.node == ""  # the caller's event is untouched
    assert stamped.id == event.id and stamped.data == event.data

    relayed = stamped.with_node("node-b")
    assert relayed.node == "node-a"
    assert Event.from_json(relayed.to_json()).node == "node-a"


def test_invalid_json_is_a_decode_error():
    with pytest.raises(EventDecodeError, match="not valid JSON"):
        Event.from_json(b"{not json")


def test_a_non_object_is_a_decode_error():
    with pytest.raises(EventDecodeError, match="an event is a JSON object, got list"):
        Event.from_json(b"[1, 2]")


def test_a_field_breaking_its_types_schema_names_the_type_and_the_field():
    with pytest.raises(EventDecodeError) as caught:
        Event.from_wire(_wire(type="agent_turn_completed", tokens_in="lots"))
    message = str(caught.value)
    assert message.startswith("events: agent_turn_completed.tokens_in:")
    assert caught.value.event_type == "agent_turn_completed"
    assert caught.value.field == "tokens_in"


def test_a_bad_envelope_field_names_it():
    with pytest.raises(EventDecodeError, match=r"task_assigned\.timestamp: expected an RFC 3339 time"):
        Event.from_wire(_wire(timestamp="yesterday"))
    with pytest.raises(EventDecodeError, match=r"task_assigned\.id: expected a UUID"):
        Event.from_wire(_wire(id="not-a-uuid"))


def test_timestamps_keep_microseconds_and_are_utc():
    event = Event.from_wire(_wire(timestamp="2026-03-12T12:30:00.123456+02:00"))
    assert event.timestamp == datetime(2026, 3, 12, 10, 30, 0, 123456, tzinfo=timezone.utc)
    assert event.timestamp.utcoffset().total_seconds() == 0
    assert json.loads(event.to_json())["timestamp"] == "2026-03-12T10:30:00.123456Z"

    fresh = Event(type="task_assigned")
    assert fresh.timestamp.tzinfo is not None and fresh.timestamp.utcoffset().total_seconds() == 0
    assert Event.from_json(fresh.to_json()).timestamp == fresh.timestamp
