"""A seat's live state, folded from its events (seed 000, "Event Types")."""
from __future__ import annotations

from dashboard.seatstate import MOVES, STATES, SeatView, _HANDLERS, budget_stops
from events import categories
from tests.dashboard.conftest import make_event


def placed(handle: str = "alice") -> SeatView:
    seat = SeatView(handle)
    seat.apply(make_event("agent_spawned", node="node-1", agent_handle=handle))
    return seat


def test_every_type_the_reducer_reads_is_a_registered_type_and_has_a_handler():
    from events.envelope import registered_types

    assert set(_HANDLERS) == MOVES
    assert MOVES <= set(registered_types())
    # The live-only ones are exactly the placement pair and the per-round signal.
    assert {t for t in MOVES if not categories.is_stored(t)} == {"agent_spawned", "agent_terminated", "agent_turn_progress"}


def test_a_seat_no_node_holds_is_unplaced_and_a_person_has_no_state():
    assert SeatView("alice").state == "unplaced"
    assert SeatView("maya", kind="human").state is None
    assert placed().state == "idle"


def test_a_turn_makes_a_seat_working_and_its_completion_idle_with_the_last_turn():
    seat = placed()
    seat.apply(make_event("agent_turn_started", agent_handle="alice", turn_id="t1"))
    assert seat.state == "working" and seat.working["turn_id"] == "t1"
    seat.apply(make_event("agent_turn_completed", agent_handle="alice", turn_id="t1", tokens_in=9, tokens_out=1))
    assert seat.state == "idle" and seat.last_turn["tokens"] == 10 and seat.last_error is None


def test_a_guard_breach_ends_the_turn_as_the_last_error_never_a_stop():
    seat = placed()
    seat.apply(make_event("agent_turn_started", agent_handle="alice", turn_id="t1"))
    seat.apply(make_event("turn.guard_breach", agent_handle="alice", turn_id="t1", guard="stall"))
    assert seat.state == "idle" and seat.last_error["guard"] == "stall"


def test_llm_unavailable_stops_the_seat_until_a_model_answers_again():
    seat = placed()
    seat.apply(make_event("llm_unavailable", agent_handle="alice", error="all down"))
    assert seat.state == "stopped" and seat.stopped["reason"] == "provider"
    seat.apply(make_event("agent_phase_completed", agent_handle="alice", phase="act"))
    assert seat.state == "idle" and seat.last_error["type"] == "llm_unavailable"


def test_budget_exhausted_is_the_last_error_and_the_stop_comes_from_the_window():
    seat = placed()
    seat.apply(make_event("budget_exhausted", agent_handle="alice", scope="seat", period="day"))
    assert seat.state == "idle" and seat.last_error["type"] == "budget_exhausted"
    company, per_seat = budget_stops([
        {"scope": "seat", "agent_handle": "alice", "period": "day", "state": "refusing"},
        {"scope": "seat", "agent_handle": "bob", "period": "day", "state": "ok"},
    ])
    assert company is None and set(per_seat) == {"alice"}


def test_a_pause_outranks_everything_and_a_resume_lifts_it():
    seat = placed()
    seat.apply(make_event("agent_turn_started", agent_handle="alice", turn_id="t1"))
    seat.apply(make_event("seat_paused", agent_handle="alice", paused_by="token:founder", reason="review"))
    assert seat.state == "paused" and seat.paused["by"] == "token:founder"
    seat.apply(make_event("seat_resumed", agent_handle="alice", resumed_by="token:founder"))
    assert seat.state == "working"


def test_a_coding_run_holds_the_seat_and_a_question_parks_it():
    seat = placed()
    seat.apply(make_event("sandbox_run_started", agent_handle="alice", run_id="r1"))
    assert seat.state == "held"
    seat.apply(make_event("sandbox_clarification_requested", agent_handle="alice", run_id="r1"))
    assert seat.state == "parked"
    seat.apply(make_event("sandbox_run_completed", agent_handle="alice", run_id="r1"))
    assert seat.state == "idle"
    seat.apply(make_event("agent_turn_completed", agent_handle="alice", turn_id="t2", suspended=True))
    assert seat.state == "parked"


def test_every_state_is_one_the_screens_know():
    assert set(STATES) == {"idle", "working", "held", "paused", "parked", "stopped", "unplaced"}


def test_a_turn_whose_node_started_again_is_over_on_the_screen():
    seat = placed()
    seat.apply(make_event("agent_turn_started", agent_handle="alice", turn_id="t1", node="node-1"))
    assert not seat.node_started("node-2") and seat.state == "working"  # another node's boot is not this turn's end
    assert seat.node_started("node-1") and seat.state == "idle"


def test_a_successor_taking_the_seat_ends_the_previous_holders_turn_and_its_late_end_leaves_the_new_one_alone():
    seat = placed()
    seat.apply(make_event("agent_turn_started", agent_handle="alice", turn_id="t1", node="node-1"))
    seat.apply(make_event("agent_spawned", node="node-1", agent_handle="alice"))  # the same holder: still running
    assert seat.state == "working"
    seat.apply(make_event("agent_spawned", node="node-2", agent_handle="alice"))
    assert (seat.state, seat.holder) == ("idle", "node-2")
    seat.apply(make_event("agent_turn_started", agent_handle="alice", turn_id="t2", node="node-2"))
    seat.apply(make_event("agent_turn_completed", agent_handle="alice", turn_id="t1", node="node-1",
                          outcome="interrupted", failed=True))
    assert seat.state == "working" and seat.working["turn_id"] == "t2"
    assert seat.last_turn["turn_id"] == "t1" and seat.last_error["type"] == "agent_turn_completed"
    seat.apply(make_event("agent_turn_completed", agent_handle="alice", turn_id="t2", node="node-2"))
    assert seat.state == "idle"
