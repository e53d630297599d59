"""The trace as a waterfall (dashboard.waterfall): the tree webhook -> notification -> turn ->
phase -> rounds -> tool calls an operator reads, times on the trace's own clock, failures and
skips marked. Built from the items `events.queries.trace` lists, as the engine's events carry
them (a delivery, its wake and its skips under one span; the turn's span under that span)."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from dashboard.waterfall import build, waterfall
from events.store import write_events
from events.tracing import new_span_id, new_trace_id
from tests.events.factories import make_event

pytestmark = pytest.mark.timeout(30)

T0 = datetime(2025, 6, 1, 9, 0, 0, tzinfo=timezone.utc)


def at(ms: float) -> datetime:
    return T0 + timedelta(milliseconds=ms)


def item(event) -> dict:
    from events import categories

    wire = event.to_wire()
    return {**wire, "category": categories.category_of(event.type), "summary": event.summary()}


def webhook_trace(*, failed: bool = False, rounds: list | None = None):
    """A GitHub comment for alice and maya: the delivery, alice's wake, maya's skip, alice's turn."""
    trace, edge, turn_span = new_trace_id(), new_span_id(), new_span_id()
    delivery = make_event("inbound_delivery", at=at(0), trace_id=trace, span_id=edge, label="webhook:issue_comment",
                          integration="github", event_kind="issue_comment")
    wake = make_event("external_notification", at=at(4), trace_id=trace, span_id=edge, agent_handle="alice",
                      event_kind="issue_comment")
    skip = make_event("notification_skipped", at=at(6), trace_id=trace, span_id=edge, reason="the routing gate refuses it",
                      detail="maya is a human seat")
    common = dict(trace_id=trace, span_id=turn_span, parent_span_id=edge, agent_handle="alice", turn_id="turn-1")
    started = make_event("agent_turn_started", at=at(10), trigger_id=str(wake.id), **common)
    phase = make_event("agent_phase_completed", at=at(510), phase="respond", model="m", duration_ms=490, failed=failed,
                       error="the model stopped: refusal" if failed else "", system_prompt="You are alice",
                       user_prompt="octo-maya commented: the upload retries", response="" if failed else "Looking now",
                       rounds=rounds if rounds is not None else [{"round": 1, "started_at": at(20).isoformat(), "duration_ms": 480,
                                                                  "stop_reason": "end", "tokens_in": 10, "tokens_out": 5}],
                       **common)
    completed = make_event("agent_turn_completed", at=at(512), trigger_id=str(wake.id), trigger_ids=[str(wake.id)],
                           outcome="failed" if failed else "completed", failed=failed, duration_ms=502,
                           response="" if failed else "Looking now", tokens_in=10, tokens_out=5, trigger_type="external_notification",
                           error="the model stopped: refusal" if failed else "", **common)
    return trace, [delivery, wake, skip, started, phase, completed]


def shape(rows, depth=0):
    out = []
    for row in rows:
        out.append((depth, row["kind"], row["status"]))
        out += shape(row["children"], depth + 1)
    return out


def test_a_webhook_woken_turn_nests_delivery_notification_turn_phase_round():
    trace, events = webhook_trace()
    drawn = build(trace, [item(e) for e in events])
    assert shape(drawn["rows"]) == [
        (0, "webhook", "ok"),
        (1, "notification", "ok"),        # alice's wake
        (2, "turn", "ok"),                # the turn its trigger_id names
        (3, "phase", "ok"),
        (4, "round", "ok"),
        (1, "notification", "skipped"),   # maya's skip, its reason inline
    ]
    webhook = drawn["rows"][0]
    wake, skip = webhook["children"]
    turn = wake["children"][0]
    assert skip["note"] == "the routing gate refuses it (maya is a human seat)"
    assert (turn["start_ms"], turn["duration_ms"]) == (10.0, 502.0)
    assert webhook["duration_ms"] is None and wake["start_ms"] == 4.0  # instants
    phase = turn["children"][0]
    assert (phase["start_ms"], phase["duration_ms"]) == (20.0, 490.0)
    assert turn["detail"]["prompt"] == "octo-maya commented: the upload retries" and turn["detail"]["reply"] == "Looking now"
    assert drawn["duration_ms"] == 512.0 and drawn["failed"] == 0 and drawn["events"] == 6


def test_a_phase_starts_at_its_own_start_record_before_the_records_made_just_after_it():
    # the turn publishes agent_phase_started and prompt.size a few microseconds apart; the phase's
    # rounded duration alone would start it after the prompt's size
    trace, events = webhook_trace()
    common = dict(trace_id=trace, span_id=events[3].span_id, parent_span_id=events[3].parent_span_id,
                  agent_handle="alice", turn_id="turn-1")
    opened = make_event("agent_phase_started", at=at(19.6), phase="respond", iteration=1, model="m", **common)
    size = make_event("prompt.size", at=at(19.62), phase="respond", iteration=1, **common)
    ended = make_event("agent_phase_completed", at=at(510), phase="respond", iteration=1, model="m", duration_ms=490,
                       response="Looking now", rounds=[{"round": 1, "started_at": at(20).isoformat(), "duration_ms": 480,
                                                       "stop_reason": "end", "tokens_in": 10, "tokens_out": 5}], **common)
    drawn = build(trace, [item(e) for e in [*events[:4], opened, size, ended, events[5]]])
    turn = drawn["rows"][0]["children"][0]["children"][0]
    assert [(c["kind"], c["start_ms"]) for c in turn["children"]] == [("phase", 19.6), ("event", 19.62)]


def test_a_failed_turn_is_failed_with_its_error_and_so_is_its_phase():
    trace, events = webhook_trace(failed=True)
    drawn = build(trace, [item(e) for e in events])
    turn = drawn["rows"][0]["children"][0]["children"][0]
    assert turn["status"] == "failed" and "refusal" in turn["note"]
    assert turn["children"][0]["status"] == "failed"
    assert drawn["failed"] == 2


def test_rounds_and_their_tool_calls_are_child_spans_laid_out_in_time():
    rounds = [
        {"round": 1, "stop_reason": "tool_use", "text": "let me look", "duration_ms": 300,
         "tool_calls": [{"name": "search", "arguments": {"q": "upload"}, "result": "3 hits", "duration_ms": 100},
                        {"name": "read", "arguments": {"path": "a.py"}, "result": "", "duration_ms": 50, "error": "no such file"}]},
        {"round": 2, "stop_reason": "end", "text": "done", "duration_ms": 190, "tool_calls": []},
    ]
    trace, events = webhook_trace(rounds=rounds)
    drawn = build(trace, [item(e) for e in events])
    phase = drawn["rows"][0]["children"][0]["children"][0]["children"][0]
    one, two = phase["children"]
    assert [c["label"] for c in one["children"]] == ["tool search", "tool read"]
    search, read = one["children"]
    # The phase began at 20 ms; round 1 took 300 ms, its tools the last 150 of them, end to end.
    assert (one["start_ms"], one["duration_ms"]) == (20.0, 300.0)
    assert (search["start_ms"], read["start_ms"]) == (170.0, 270.0)
    assert read["status"] == "failed" and read["note"] == "no such file" and one["status"] == "failed"
    assert search["detail"]["arguments"] == {"q": "upload"} and search["detail"]["result"] == "3 hits"
    assert two["start_ms"] == 320.0 and two["label"] == "round 2 · end"


def test_a_guard_breach_is_red_and_a_turn_without_its_completion_is_running():
    trace, span = new_trace_id(), new_span_id()
    task = make_event("task_assigned", at=at(0), trace_id=trace, span_id=span, agent_handle="bob", task="triage")
    started = make_event("agent_turn_started", at=at(5), trace_id=trace, span_id=new_span_id(), parent_span_id=span,
                         agent_handle="bob", turn_id="t1", trigger_id=str(task.id))
    breach = make_event("turn.guard_breach", at=at(40), trace_id=trace, span_id=new_span_id(), parent_span_id=span,
                        agent_handle="bob", turn_id="t1", guard="turn_error", detail="KeyError: 'x'")
    drawn = build(trace, [item(e) for e in (task, started, breach)])
    (root,) = drawn["rows"]
    turn = root["children"][0]
    assert root["kind"] == "task" and root["detail"]["task"] == "triage"
    assert turn["status"] == "failed" and "guard breach: turn_error" in turn["note"]
    assert turn["children"][0]["status"] == "failed"

    running = build(trace, [item(e) for e in (task, started)])
    assert running["rows"][0]["children"][0]["status"] == "running"


@pytest.mark.django_db
def test_the_waterfall_reads_the_store():
    trace, events = webhook_trace()
    write_events(events)
    drawn = waterfall(trace)
    assert drawn["events"] == 6 and shape(drawn["rows"])[0] == (0, "webhook", "ok")
    assert waterfall(new_trace_id())["rows"] == []
