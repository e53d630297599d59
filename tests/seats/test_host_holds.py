"""Held seats wait on the broker (seed 000, "Busy agents queue; held agents wait on the broker";
seed 002, "Token Budgets": "A seat out of room waits; its mail is not lost"). Every case runs
on the memory twin and on a real nats-server."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from engine.queue import topics
from seats.budgets import Budgets, Refusal
from seats.host import HOLD_BUDGET, HOLD_NO_PROVIDER, HOLD_PAUSED
from seats.pauses import pause_seat, resume_seat
from seats.turn import TurnResult
from tests.queue.waiting import eventually, throughout
from tests.seats.hosting import backend, company, mail, make_rig, rig  # noqa: F401  (fixtures)

pytestmark = pytest.mark.timeout(60)


async def test_a_company_without_a_provider_holds_the_mail_until_a_revision_adds_one(backend):
    rig = await make_rig(backend, the_company=company(providers=False))
    try:
        await rig.runtime.on_seat_acquired("alice", None)
        await rig.publish(mail("waits"))
        await throughout(lambda: not rig.turns.requests, window=0.5, message="a turn ran with no provider")
        assert HOLD_NO_PROVIDER in rig.host().holds and rig.host().state == "held"
        assert await rig.pending() == 1
        await rig.node.apply(company(providers=True))
        await eventually(lambda: rig.turns.outcomes == ["completed"], message="the held mail to run")
        assert rig.host().holds == frozenset()
        await eventually(lambda: _empty(rig), message="the inbox to be acked")
        # a later revision that drops the provider holds the seat again, by the same name, and
        # the one after that, adding it back, releases it
        await rig.node.apply(company(providers=False))
        assert rig.host().holds == frozenset({HOLD_NO_PROVIDER}) and rig.host().state == "held"
        await rig.publish(mail("waits again"))
        await throughout(lambda: rig.turns.outcomes == ["completed"], window=0.5, message="a turn ran with no provider")
        await rig.node.apply(company(providers=True))
        await eventually(lambda: rig.turns.outcomes == ["completed", "completed"], message="the mail held again to run")
        assert rig.host().holds == frozenset()
    finally:
        await rig.runtime.stop(cut=True)


async def test_a_paused_seat_holds_its_inbox_and_resuming_releases_it(rig):
    await rig.runtime.on_seat_acquired("alice", None)
    await _pause(rig, stop_running=False)
    await eventually(lambda: rig.host().pause is not None, message="the host to learn of the pause")
    await rig.publish(mail("while paused"))
    await throughout(lambda: not rig.turns.requests, window=0.5, message="a paused seat ran a turn")
    assert HOLD_PAUSED in rig.host().holds and rig.host().state == "paused"
    assert await rig.pending() == 1
    await resume_seat(rig.runtime.pauses, rig.runtime.publish, rig.node.company, "alice", resumed_by="admin")
    await eventually(lambda: rig.turns.outcomes == ["completed"], message="the mail to run after the resume")
    assert [e.type for e in rig.published.events if e.type.startswith("seat_")] == ["seat_paused", "seat_resumed"]


async def test_a_seat_paused_before_it_is_hosted_starts_held_and_resuming_releases_it(rig):
    # A node that takes a seat paused elsewhere (or before a restart) starts its host held,
    # under the same name a live pause takes, so the resume that follows lifts it.
    await _pause(rig, stop_running=False)
    await rig.publish(mail("sent while paused"))
    await rig.runtime.on_seat_acquired("alice", None)
    await eventually(lambda: "alice" in rig.runtime.hosts, message="alice hosted")
    assert rig.host().holds == frozenset({HOLD_PAUSED}) and rig.host().state == "paused"
    await throughout(lambda: not rig.turns.requests, window=0.5, message="a paused seat ran a turn")
    await resume_seat(rig.runtime.pauses, rig.runtime.publish, rig.node.company, "alice", resumed_by="admin")
    await eventually(lambda: rig.turns.outcomes == ["completed"], message="the mail to run after the resume")
    assert rig.host().holds == frozenset()


async def test_pausing_twice_announces_once_and_an_amendment_to_stop_announces_again(rig):
    first = await _pause(rig, stop_running=False)
    second = await _pause(rig, stop_running=False)
    third = await _pause(rig, stop_running=True)
    assert (first, second, third) == (True, False, True)
    assert [e.get("stop_running") for e in rig.published.of("seat_paused")] == [False, True]
    ended = await resume_seat(rig.runtime.pauses, rig.runtime.publish, rig.node.company, "alice", resumed_by="admin")
    again = await resume_seat(rig.runtime.pauses, rig.runtime.publish, rig.node.company, "alice", resumed_by="admin")
    assert ended is not None and again is None
    assert len(rig.published.of("seat_resumed")) == 1


async def test_stop_running_stops_the_running_turn_and_its_trigger_counts_as_worked(rig):
    rig.turns.hold()  # never opened: only the pause ends this turn
    await rig.runtime.on_seat_acquired("alice", None)
    await rig.publish(mail("long task"))
    await eventually(lambda: rig.turns.running == 1, message="the turn to start")
    await _pause(rig, stop_running=True)
    await eventually(lambda: rig.turns.outcomes == ["stopped"], message="the turn to stop")
    await eventually(lambda: _empty(rig), message="the stopped turn's trigger to be acked")
    assert rig.host().state == "paused"
    from engine.coord.ledger import CompletionLedger

    trigger = rig.turns.requests[0].trigger
    record = await CompletionLedger(rig.node.coord).worked("alice", str(trigger.id))
    assert (record.turn_id, record.reason) == (rig.turns.requests[0].turn_id, "")  # worked, not abandoned
    assert rig.published.of("turn_trigger_skipped") == [] and rig.host().last_error is None
    # who stopped it and why, as the turn engine records it on the stopped turn
    assert rig.turns.requests[0].stop_requested() == {"stopped_by": "admin", "stopped_by_seat": "", "reason": "checking something"}


async def test_a_seat_out_of_budget_is_parked_and_a_raised_ceiling_releases_it(backend):
    tight = company(alice_budget={"day": 100})
    rig = await make_rig(backend, the_company=tight)
    try:
        await Budgets(rig.node.coord).charge(tight, tight.seat_by_handle("alice"), 150)
        await rig.runtime.on_seat_acquired("alice", None)
        await rig.publish(mail("costly"))
        await eventually(lambda: rig.host().state == "parked", message="the seat to park")
        await throughout(lambda: not rig.turns.requests, window=0.5, message="a parked seat ran a turn")
        assert HOLD_BUDGET in rig.host().holds and await rig.pending() == 1
        assert rig.host().describe()["parked"]["scope"] == "seat"
        # a revision that leaves the ceiling where it was is judged again and keeps the park
        await rig.node.apply(company(alice_budget={"day": 100}, window=1))
        await throughout(lambda: not rig.turns.requests and rig.host().state == "parked", window=0.5,
                         message="a revision that raised nothing released the park")
        await rig.node.apply(company(alice_budget={"day": 10_000}))
        await eventually(lambda: rig.turns.outcomes == ["completed"], message="the parked mail to run")
        assert rig.host().holds == frozenset()
    finally:
        await rig.runtime.stop(cut=True)


async def test_a_turn_the_budget_refused_parks_until_its_window_turns_over(rig):
    refusals = [Refusal(scope="company", period="day", window="2025-01-01", spend=10, ceiling=10,
                        resets_at=datetime.now(timezone.utc) + timedelta(seconds=0.5))]

    def decide(request):
        if refusals:
            refusal = refusals.pop()
            return TurnResult(outcome="budget_exhausted", turn_id=request.turn_id, rounds=1, tokens_in=5,
                              tokens_out=5, duration_ms=1, refusal=refusal)
        return "completed"

    rig.turns.decide = decide
    await rig.runtime.on_seat_acquired("alice", None)
    await rig.publish(mail("refused once"))
    await eventually(lambda: rig.turns.outcomes == ["budget_exhausted"], message="the refused turn")
    await eventually(lambda: rig.turns.outcomes == ["budget_exhausted", "completed"],
                     message="the mail to run again once the window turned over")
    assert [r.trigger.id for r in rig.turns.requests][0] == rig.turns.requests[1].trigger.id
    await eventually(lambda: _empty(rig), message="the inbox to be acked")


async def test_a_turn_that_ran_out_of_budget_without_a_refusal_parks_the_seat_by_the_budgets_own_reading(backend):
    # The turn spent the window's room and ended budget_exhausted without the refusal: the host
    # reads the budget itself, parks the seat, and the mail runs once a raised ceiling lifts the park.
    tight = company(alice_budget={"day": 100})
    rig = await make_rig(backend, the_company=tight)
    ends = ["budget_exhausted"]

    def decide(request):
        if ends:
            return TurnResult(outcome=ends.pop(), turn_id=request.turn_id, rounds=1, tokens_in=75, tokens_out=75, duration_ms=1)
        return "completed"

    rig.turns.decide = decide
    try:
        gate = rig.turns.hold()
        await rig.runtime.on_seat_acquired("alice", None)
        await rig.publish(mail("costly"))
        await eventually(lambda: rig.turns.running == 1, message="the turn to start")
        await Budgets(rig.node.coord).charge(tight, tight.seat_by_handle("alice"), 150)  # what the turn spent
        gate.set()
        await eventually(lambda: rig.host().state == "parked", message="the seat to park")
        assert HOLD_BUDGET in rig.host().holds and rig.host().describe()["parked"]["scope"] == "seat"
        assert rig.turns.outcomes == ["budget_exhausted"] and await rig.pending() == 1
        turn_id = rig.turns.requests[0].turn_id
        assert {k: v for k, v in rig.host().describe()["last_error"].items() if k != "at"} == \
            {"turn_id": turn_id, "outcome": "budget_exhausted", "error": "budget_exhausted"}
        await rig.node.apply(company(alice_budget={"day": 10_000}))
        await eventually(lambda: rig.turns.outcomes == ["budget_exhausted", "completed"], message="the parked mail to run")
        await eventually(lambda: _empty(rig), message="the inbox to be acked")
    finally:
        await rig.runtime.stop(cut=True)


async def test_the_node_gate_bounds_turns_in_flight_and_waiting_keeps_the_delivery(backend):
    rig = await make_rig(backend, max_concurrent=1)
    try:
        gate = rig.turns.hold()
        for handle in ("alice", "bob", "carol"):
            await rig.runtime.on_seat_acquired(handle, None)
            await rig.publish(mail(f"for {handle}", handle=handle), handle=handle)
        await eventually(lambda: all(h._busy for h in rig.runtime.hosts.values()),
                         message="every seat's handler to hold its delivery")
        await throughout(lambda: rig.turns.running == 1 and len(rig.turns.requests) == 1, window=0.5,
                         message="more turns than max_concurrent ran")
        gate.set()
        await eventually(lambda: len(rig.turns.outcomes) == 3, message="every seat's turn")
        assert rig.turns.most_at_once == 1
        for handle in ("alice", "bob", "carol"):
            assert rig.turns.turns_of(handle) == [[f"for {handle}"]]  # once each: nothing was handed back
    finally:
        await rig.runtime.stop(cut=True)


async def test_control_mail_flows_while_the_inbox_is_held(rig):
    await rig.runtime.on_seat_acquired("alice", None)
    await _pause(rig, stop_running=False)
    await eventually(lambda: HOLD_PAUSED in rig.host().holds, message="the pause hold")
    await rig.queue.publish(topics.agent_control("alice"), mail("nudge"))
    control = (topics.agent_control("alice"), topics.control_group("alice"))
    await eventually(lambda: _count(rig.queue.pending(*control), 0), message="the control mail to be acked")


async def _pause(rig, *, stop_running: bool) -> bool:
    _, changed = await pause_seat(rig.runtime.pauses, rig.runtime.publish, rig.node.company, "alice",
                                  reason="checking something", stop_running=stop_running, paused_by="admin")
    return changed


async def _empty(rig) -> bool:
    return await rig.pending() == 0


async def _count(awaitable, n: int) -> bool:
    return await awaitable == n
