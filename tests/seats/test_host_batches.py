"""The seat host's batched dispatch (seed 000, "Inbox Batching & Coalescing", "A failed turn does
not hold its conversation back", "The ack budget"). Every case runs on the memory twin and on a
real nats-server."""
from __future__ import annotations

import asyncio
from datetime import datetime

import pytest

from engine.coord.ledger import CompletionLedger
from engine.queue.contract import Unreachable
from seats import host as host_module
from notify.coalesce import CoalesceError
from seats.host import ABANDONED, SKIP_ABANDONED_BEFORE, SKIP_ANSWERED, SKIP_WORKED
from seats.turn import CompletedWhileCancelled, TurnResult
from tests.queue.waiting import eventually, throughout
from tests.seats.hosting import (  # noqa: F401  (fixtures)
    ScriptedTurns, backend, company, first_of_two_conversations_running, labels, mail, make_rig, rig)

pytestmark = pytest.mark.timeout(60)


async def test_a_backlog_runs_one_turn_per_conversation(rig):
    await rig.publish(*(mail(f"a{i}", key="slack:C1:1", at=i) for i in range(5)))
    await rig.publish(*(mail(f"b{i}", key="jira:POC-7", at=10 + i) for i in range(3)))
    await rig.runtime.on_seat_acquired("alice", None)
    await eventually(lambda: len(rig.turns.requests) == 2, message="two turns")
    assert sorted(rig.turns.turns_of()) == [["a0", "a1", "a2", "a3", "a4"], ["b0", "b1", "b2"]]
    assert await _settled(rig)
    coalesced = await eventually(lambda: len(rig.published.of("notifications_coalesced")) == 2 and
                                 rig.published.of("notifications_coalesced"), message="two merges recorded")
    assert sorted(e.get("constituents") for e in coalesced) == [3, 5]
    # each merge record names the turn that worked it and the events it stands for
    turns = {r.turn_id: sorted(str(e.id) for e in r.constituents) for r in rig.turns.requests}
    assert {e.get("turn_id"): sorted(e.get("event_ids")) for e in coalesced} == turns
    ledger = CompletionLedger(rig.node.coord)
    for request in rig.turns.requests:
        for event in request.constituents:
            assert (await ledger.worked("alice", str(event.id))).turn_id == request.turn_id


async def test_the_same_event_delivered_twice_in_one_drain_is_one_constituent(rig):
    # seed 000: at-least-once edges (a producer's retry past the dedupe window, the requeue
    # machinery itself) can put one event on the inbox twice; the turn is shown it once.
    twice = mail("said once", key="slack:C1:1", at=0)
    await rig.publish(twice, twice, mail("and then", key="slack:C1:1", at=1))
    await rig.runtime.on_seat_acquired("alice", None)
    await eventually(lambda: rig.turns.outcomes == ["completed"], message="one turn")
    assert rig.turns.turns_of() == [["said once", "and then"]]
    assert await _settled(rig)


async def test_a_burst_that_arrives_mid_turn_is_one_follow_up_turn(rig):
    gate = rig.turns.hold()
    await rig.runtime.on_seat_acquired("alice", None)
    await rig.publish(mail("first", key="slack:D1"))
    await eventually(lambda: rig.turns.running == 1, message="the first turn to start")
    await rig.publish(*(mail(f"burst{i}", key="slack:D1") for i in range(6)))
    gate.set()
    await eventually(lambda: len(rig.turns.outcomes) == 2, message="the follow-up turn")
    await throughout(lambda: len(rig.turns.requests) == 2, window=0.6, message="a third turn ran")
    assert rig.turns.turns_of() == [["first"], [f"burst{i}" for i in range(6)]]
    assert await _settled(rig)


async def test_a_trigger_the_ledger_holds_is_skipped_out_loud(rig):
    worked, fresh = mail("worked"), mail("fresh")
    await CompletionLedger(rig.node.coord).record_worked("alice", str(worked.id), "turn-earlier")
    await rig.publish(worked, fresh)
    await rig.runtime.on_seat_acquired("alice", None)
    await eventually(lambda: rig.turns.outcomes == ["completed"], message="the fresh trigger's turn")
    assert rig.turns.turns_of() == [["fresh"]]
    skips = await eventually(lambda: rig.published.of("turn_trigger_skipped"), message="the skip recorded")
    assert [(s.get("trigger_id"), s.get("reason"), s.get("worked_by_turn_id")) for s in skips] == [
        (str(worked.id), SKIP_WORKED, "turn-earlier")]
    assert skips[0].get("conversation_key") == ""  # mail of no conversation is recorded as of none
    assert await _settled(rig)


async def test_a_seat_with_no_role_is_recorded_with_none_rather_than_one_made_up(backend):
    rig = await make_rig(backend, the_company=company(roleless=("alice",)))
    try:
        worked = mail("worked")
        await CompletionLedger(rig.node.coord).record_worked("alice", str(worked.id), "turn-earlier")
        await rig.publish(worked)
        await rig.runtime.on_seat_acquired("alice", None)
        [skip] = await eventually(lambda: rig.published.of("turn_trigger_skipped"), message="the skip recorded")
        assert (skip.get("agent_handle"), skip.get("agent_role")) == ("alice", "")
        assert skip.get("agent_id") == str(rig.node.company.agent_id_for("alice"))
    finally:
        await rig.runtime.stop(cut=True)


async def test_each_trigger_the_ledger_holds_is_skipped_with_the_reason_it_was_recorded_for(rig):
    # One conversation: the fresh mail first, then three the ledger holds, each for another reason.
    fresh, worked, answered, abandoned = (mail(label, key="slack:C7:1", at=i)
                                          for i, label in enumerate(("fresh", "worked", "answered", "abandoned")))
    ledger = CompletionLedger(rig.node.coord)
    await ledger.record_worked("alice", str(worked.id), "turn-1")
    await ledger.record_worked("alice", str(answered.id), "turn-2", reason="answered_in_thread")
    await ledger.record_worked("alice", str(abandoned.id), "turn-3", reason="abandoned")
    await rig.publish(fresh, worked, answered, abandoned)
    await rig.runtime.on_seat_acquired("alice", None)
    skips = await eventually(lambda: len(rig.published.of("turn_trigger_skipped")) == 3 and rig.published.of("turn_trigger_skipped"),
                             message="three skips recorded")
    agent_id = str(rig.node.company.agent_id_for("alice"))
    shown = {s.get("trigger_id"): (s.get("reason"), s.get("worked_by_turn_id"), s.get("detail"), s.get("conversation_key"),
                                   s.get("trigger_type"), s.get("abandoned"), s.get("agent_id"), s.get("agent_handle"),
                                   s.get("agent_role")) for s in skips}
    assert shown == {
        str(worked.id): (SKIP_WORKED, "turn-1", "the completion ledger records it worked by turn turn-1", "slack:C7:1",
                         worked.type, False, agent_id, "alice", "engineer"),
        str(answered.id): (SKIP_ANSWERED, "turn-2", "the completion ledger records it answered_in_thread by turn turn-2",
                           "slack:C7:1", answered.type, False, agent_id, "alice", "engineer"),
        str(abandoned.id): (SKIP_ABANDONED_BEFORE, "turn-3", "the completion ledger records it abandoned by turn turn-3",
                            "slack:C7:1", abandoned.type, False, agent_id, "alice", "engineer"),
    }
    for skip in skips:  # each traced as a child of the mail it skipped
        skipped = {str(e.id): e for e in (worked, answered, abandoned)}[skip.get("trigger_id")]
        assert skip.trace_id == skipped.trace_id and skip.parent_span_id == skipped.span_id
        assert skip.span_id not in ("", None, skipped.span_id) and skip.source == "engine"
    await eventually(lambda: rig.turns.outcomes == ["completed"], message="the fresh mail's turn")
    assert rig.turns.turns_of() == [["fresh"]]
    assert await _settled(rig)


async def test_what_get_seats_shows_of_a_seat_through_a_provider_outage_and_after_it(rig):
    """A completed turn's record, a provider outage's (the seat `stopped`, its last error), and
    the seat `idle` again once a turn completes; `turns_run` counts every settled turn."""
    down = {"now": False}

    def decide(request):
        if down["now"]:
            return TurnResult(outcome="llm_unavailable", turn_id=request.turn_id, rounds=0, tokens_in=0, tokens_out=0,
                              duration_ms=7, error="main: server: HTTP 503", error_kind="server", transient=True)
        return TurnResult(outcome="completed", turn_id=request.turn_id, rounds=1, tokens_in=1, tokens_out=1, duration_ms=42)

    rig.turns.decide = decide
    first, second = mail("a0", key="slack:C8:1", at=0), mail("a1", key="slack:C8:1", at=1)
    await rig.publish(first, second)
    await rig.runtime.on_seat_acquired("alice", None)
    await eventually(lambda: rig.host().turns_run == 1, message="the first turn settled")
    [request] = rig.turns.requests
    shown = rig.host().describe()
    assert {k: v for k, v in shown["last_turn"].items() if k != "finished_at"} == {
        "turn_id": request.turn_id, "outcome": "completed", "trigger_id": str(request.trigger.id),
        "trigger_ids": [str(first.id), str(second.id)], "duration_ms": 42}
    assert datetime.fromisoformat(shown["last_turn"]["finished_at"])
    assert (shown["state"], shown["holds"], shown["running"], shown["last_error"], shown["turns_run"], shown["parked"]) == \
        ("idle", [], None, None, 1, None)

    down["now"] = True
    await rig.publish(mail("b0", key="slack:C8:2"))
    await eventually(lambda: rig.host().state == "stopped", message="the seat shown stopped while its provider is down")
    failed = rig.turns.requests[1]
    shown = rig.host().describe()
    assert {k: v for k, v in shown["last_error"].items() if k != "at"} == {
        "turn_id": failed.turn_id, "outcome": "llm_unavailable", "error": "main: server: HTTP 503"}
    assert datetime.fromisoformat(shown["last_error"]["at"])
    assert shown["last_turn"]["outcome"] == "llm_unavailable" and shown["last_turn"]["duration_ms"] == 7
    assert await rig.pending() == 1  # NAKed, not acknowledged: it runs again
    assert rig.published.of("turn_trigger_skipped") == []

    down["now"] = False
    await eventually(lambda: rig.turns.outcomes[-1] == "completed" and rig.host().state == "idle",
                     message="the seat idle again once the mail ran")
    await eventually(lambda: rig.host().turns_run == len(rig.turns.outcomes), message="every turn counted")
    assert rig.host().describe()["last_turn"]["outcome"] == "completed"
    assert rig.host().describe()["last_error"]["turn_id"] == failed.turn_id  # kept until another error replaces it
    assert await _settled(rig)


@pytest.mark.parametrize("result,reason,detail", [
    ({"outcome": "failed", "error": ""}, ABANDONED["failed"], "failed"),
    ({"outcome": "failed", "error": "tool loop broke", "guard": "max_iter"}, ABANDONED["guard"], "tool loop broke"),
    ({"outcome": "failed", "error": "declined", "model_refused": True}, ABANDONED["refusal"], "declined"),
    ({"outcome": "llm_unavailable", "error": "main: auth: HTTP 401"}, ABANDONED["provider"], "main: auth: HTTP 401"),
], ids=["failed-without-error", "guard", "model-declined", "provider-refused"])
async def test_a_turn_that_ends_failed_is_abandoned_with_the_reason_that_ended_it(rig, result, reason, detail):
    rig.turns.decide = lambda request: TurnResult(turn_id=request.turn_id, rounds=1, tokens_in=1, tokens_out=1,
                                                  duration_ms=1, **result)
    m1 = mail("m1", key="slack:C6:1")
    await rig.publish(m1)
    await rig.runtime.on_seat_acquired("alice", None)
    [skip] = await eventually(lambda: rig.published.of("turn_trigger_skipped"), message="the abandonment recorded")
    assert (skip.get("reason"), skip.get("detail"), skip.get("abandoned"), skip.get("trigger_id")) == (reason, detail, True, str(m1.id))
    [request] = rig.turns.requests
    assert {k: v for k, v in rig.host().describe()["last_error"].items() if k != "at"} == \
        {"turn_id": request.turn_id, "outcome": result["outcome"], "error": detail}
    record = await CompletionLedger(rig.node.coord).worked("alice", str(m1.id))
    assert (record.turn_id, record.reason) == (request.turn_id, "abandoned")
    assert await _settled(rig)
    assert len(rig.turns.requests) == 1


async def test_a_turn_whose_record_the_broker_did_not_take_is_naked_unrecorded_and_shown_as_the_seats_last_error(rig):
    lost = ["once"]
    unacknowledged = "jetstream: publish to crewlet.events.agent_turn_completed was not acknowledged within 10s " + "x" * 600

    def decide(request):
        if lost:
            lost.pop()
            raise Unreachable(unacknowledged)
        return "completed"

    rig.turns.decide = decide
    m1 = mail("m1", key="slack:C6:2")
    await rig.publish(m1)
    await rig.runtime.on_seat_acquired("alice", None)
    await eventually(lambda: rig.turns.outcomes == ["completed"], message="the mail run again once the broker took it")
    first, again = rig.turns.requests
    assert {k: v for k, v in rig.host().describe()["last_error"].items() if k != "at"} == {
        "turn_id": first.turn_id, "outcome": "failed", "error": f"Unreachable: queue: {unacknowledged}"[:500]}  # cut at 500
    assert rig.published.of("turn_trigger_skipped") == [] and rig.published.of("turn.guard_breach") == []
    record = await CompletionLedger(rig.node.coord).worked("alice", str(m1.id))
    assert (record.turn_id, record.reason) == (again.turn_id, "")
    assert await _settled(rig)


async def test_a_conversation_longer_than_the_max_batch_runs_in_turns_of_at_most_that_many(backend):
    rig = await make_rig(backend, the_company=company(max_batch=2))
    try:
        await rig.publish(*(mail(f"m{i}", key="slack:C6:3", at=i) for i in range(5)))
        await rig.runtime.on_seat_acquired("alice", None)
        await eventually(lambda: len(rig.turns.outcomes) == 3, message="three turns")
        assert rig.turns.turns_of() == [["m0", "m1"], ["m2", "m3"], ["m4"]]
        assert await _settled(rig)
    finally:
        await rig.runtime.stop(cut=True)


async def test_an_idle_seat_waits_out_the_companys_coalesce_window_for_a_burst(backend):
    # notification_coalesce_window_seconds (seed 000): the first mail of an idle seat waits for
    # more within the window, so a burst is one turn; the batch cap ends the wait early.
    rig = await make_rig(backend, the_company=company(window=30, max_batch=2))
    try:
        await rig.runtime.on_seat_acquired("alice", None)
        await rig.publish(mail("first", key="slack:C6:4", at=0))
        await throughout(lambda: not rig.turns.requests, window=0.5, message="the first mail ran before the window ended")
        await rig.publish(mail("second", key="slack:C6:4", at=1))
        await eventually(lambda: len(rig.turns.outcomes) == 1, message="one turn for the burst")
        assert rig.turns.turns_of() == [["first", "second"]]
        assert await _settled(rig)
    finally:
        await rig.runtime.stop(cut=True)


async def test_a_turn_whose_providers_are_all_down_naks_and_newer_mail_of_its_conversation_runs_first(rig):
    failures = {"m1": 1}

    def decide(request):
        label = labels(request.constituents)[0]
        if failures.get(label):
            failures[label] -= 1
            return TurnResult(outcome="llm_unavailable", turn_id=request.turn_id, rounds=0, tokens_in=0, tokens_out=0,
                              duration_ms=1, error="main: server: HTTP 503", error_kind="server", transient=True)
        return "completed"

    rig.turns.decide = decide
    gate = rig.turns.hold()
    await rig.runtime.on_seat_acquired("alice", None)
    await rig.publish(mail("m1", key="slack:C2:9"))
    await eventually(lambda: rig.turns.running == 1, message="m1's turn")
    await rig.publish(mail("m2", key="slack:C2:9"))  # arrives while m1's turn runs
    gate.set()
    await eventually(lambda: len(rig.turns.outcomes) == 3, message="m2 and m1 again")
    assert rig.turns.turns_of() == [["m1"], ["m2"], ["m1"]]
    assert rig.turns.outcomes == ["llm_unavailable", "completed", "completed"]
    assert rig.host().last_error["outcome"] == "llm_unavailable"
    assert rig.published.of("turn_trigger_skipped") == []
    assert await _settled(rig)


async def test_a_turn_that_raises_is_abandoned_once_recorded_and_never_run_again(rig):
    bug = "the turn's own bug: " + "x" * 600

    def decide(request):
        raise RuntimeError(bug)

    rig.turns.decide = decide
    m1 = mail("m1", key="slack:C4:1")
    await rig.publish(m1)
    await rig.runtime.on_seat_acquired("alice", None)
    skips = await eventually(lambda: rig.published.of("turn_trigger_skipped"), message="the abandonment recorded")
    [skip] = skips
    detail = f"RuntimeError: {bug}"[:500]  # the error's type and text, cut at 500 characters
    turn_id = skip.get("turn_id")
    assert (skip.get("trigger_id"), skip.get("trigger_type"), skip.get("reason"), skip.get("abandoned"), skip.get("detail")) == \
        (str(m1.id), m1.type, ABANDONED["raised"], True, detail)
    assert skip.get("worked_by_turn_id") == turn_id and skip.get("agent_handle") == "alice" and skip.get("agent_role") == "engineer"
    assert skip.get("conversation_key") == "slack:C4:1"
    [breach] = rig.published.of("turn.guard_breach")
    assert (breach.get("guard"), breach.get("turn_id"), breach.get("detail"), breach.get("agent_handle"), breach.get("conversation_key")) == \
        ("turn_error", turn_id, detail, "alice", "slack:C4:1")
    # what GET /seats shows of the seat: its last error and its last turn
    shown = rig.host().describe()
    assert {k: v for k, v in shown["last_error"].items() if k != "at"} == {"turn_id": turn_id, "outcome": "failed", "error": detail}
    assert {k: v for k, v in shown["last_turn"].items() if k != "finished_at"} == \
        {"turn_id": turn_id, "outcome": "failed", "trigger_id": str(m1.id), "trigger_ids": [str(m1.id)], "duration_ms": 0}
    assert datetime.fromisoformat(shown["last_error"]["at"]) and datetime.fromisoformat(shown["last_turn"]["finished_at"])
    record = await CompletionLedger(rig.node.coord).worked("alice", str(m1.id))
    assert (record.turn_id, record.reason) == (skip.get("turn_id"), "abandoned")
    assert await _settled(rig)
    await throughout(lambda: len(rig.turns.requests) == 1, window=1.5, message="the abandoned turn ran again")


async def test_an_unmergeable_partition_degrades_to_one_turn_per_event(rig, monkeypatch):
    def refuse(events):
        raise CoalesceError("a malformed constituent")

    monkeypatch.setattr(host_module, "coalesce", refuse)
    await rig.publish(*(mail(f"m{i}", key="slack:C3:1", at=i) for i in range(3)))
    await rig.runtime.on_seat_acquired("alice", None)
    await eventually(lambda: len(rig.turns.outcomes) == 3, message="three turns")
    assert sorted(t for turn in rig.turns.turns_of() for t in turn) == ["m0", "m1", "m2"]
    assert all(len(turn) == 1 for turn in rig.turns.turns_of())
    assert rig.turns.turns_of()[0] == ["m0"]  # the first event runs in the current ack scope
    # each turn's trigger is the one event it stands for
    assert all(r.trigger.id == r.constituents[0].id for r in rig.turns.requests)
    await throughout(lambda: len(rig.turns.requests) == 3, window=0.6, message="a requeued copy ran twice")
    assert await _settled(rig)


async def test_a_released_seat_hands_its_running_mail_to_the_next_holder(backend, rig):
    gate = rig.turns.hold()
    await rig.runtime.on_seat_acquired("alice", None)
    await rig.publish(mail("only"))
    await eventually(lambda: rig.turns.running == 1, message="the turn to start")
    await rig.runtime.on_seat_released("alice", None, "lease lost")
    assert await rig.pending() == 1  # back on the broker, not lost
    peer = await make_rig(backend, node_id="node-b", coord=rig.node.coord)
    try:
        await peer.runtime.on_seat_acquired("alice", None)
        await eventually(lambda: peer.turns.outcomes == ["completed"], message="the peer's turn")
        assert peer.turns.turns_of() == [["only"]]
        assert await _settled(peer)
    finally:
        gate.set()
        await peer.runtime.stop(cut=True)


async def test_the_drain_lets_the_running_turn_finish_then_acks_it(rig):
    gate = rig.turns.hold()
    await rig.runtime.on_seat_acquired("alice", None)
    await rig.publish(mail("in flight"))
    await eventually(lambda: rig.turns.running == 1, message="the turn to start")
    stopping = asyncio.create_task(rig.runtime.stop(cut=False))
    await throughout(lambda: not stopping.done(), window=0.3, message="the drain did not wait for the turn")
    gate.set()
    await asyncio.wait_for(stopping, 10)
    assert rig.turns.outcomes == ["completed"]
    assert await rig.pending() == 0


class CutAsItCompletes(ScriptedTurns):
    """A turn engine whose turn is cancelled after its completed record went out: it raises
    `CompletedWhileCancelled` carrying the completed result, as `seats.turn.TurnEngine` does."""

    async def run(self, request) -> TurnResult:
        self.requests.append(request)
        self.running += 1
        try:
            await asyncio.Event().wait()  # until the cancel
        except asyncio.CancelledError:
            raise CompletedWhileCancelled(TurnResult(outcome="completed", turn_id=request.turn_id, rounds=1,
                                                     tokens_in=1, tokens_out=1, duration_ms=1)) from None
        finally:
            self.running -= 1


async def test_a_turn_cut_as_it_completed_is_recorded_so_the_next_holder_skips_its_mail(backend):
    # A seat let go of at once (lease lost, a node stopping with a second Ctrl-C) cancels the
    # running turn; one that had completed by then is settled before the cancel goes on, so the
    # seat's next holder finds it in the ledger rather than running it again (seed 002, "A
    # redelivery never runs a completed turn twice").
    rig = await make_rig(backend, turns=CutAsItCompletes())
    try:
        sent = mail("completed as the seat was let go", key="slack:C1:1")
        await rig.publish(sent)
        await rig.runtime.on_seat_acquired("alice", None)
        await eventually(lambda: rig.turns.running == 1, message="the turn to start")
        await rig.runtime.on_seat_released("alice", None, "lease lost")
        record = await CompletionLedger(rig.node.coord).worked("alice", str(sent.id))
        assert record is not None and (record.turn_id, record.reason) == (rig.turns.requests[0].turn_id, "")  # worked
        peer = await make_rig(backend, node_id="node-b", coord=rig.node.coord)
        try:
            await peer.runtime.on_seat_acquired("alice", None)
            [skip] = await eventually(lambda: peer.published.of("turn_trigger_skipped"), message="the peer's skip")
            assert (skip.get("trigger_id"), skip.get("worked_by_turn_id"), skip.get("reason")) == (
                str(sent.id), record.turn_id, SKIP_WORKED)
            await throughout(lambda: not peer.turns.requests, window=0.5, message="the peer ran the completed turn again")
            assert await _settled(peer)
        finally:
            await peer.runtime.stop(cut=True)
    finally:
        await rig.runtime.stop(cut=True)


async def test_the_running_turn_is_shown_with_its_trigger_and_start_then_cleared(rig):
    # What GET /seats and the seat page show while a seat works: the turn, the mail it works
    # (the merged trigger and each event it stands for) and since when.
    gate = rig.turns.hold()
    await rig.publish(mail("one", key="slack:C1:1", at=0), mail("two", key="slack:C1:1", at=1))
    await rig.runtime.on_seat_acquired("alice", None)
    await eventually(lambda: rig.turns.running == 1, message="the turn to start")
    [request] = rig.turns.requests
    running = rig.host().describe()["running"]
    assert {k: running[k] for k in ("turn_id", "trigger_id", "trigger_ids")} == {
        "turn_id": request.turn_id, "trigger_id": str(request.trigger.id),
        "trigger_ids": [str(e.id) for e in request.constituents]}
    assert len(running["trigger_ids"]) == 2 and running["trigger_id"] not in running["trigger_ids"]  # the merged trigger
    started = datetime.fromisoformat(running["started_at"])
    assert started.utcoffset() is not None and abs((datetime.now(started.tzinfo) - started).total_seconds()) < 60
    gate.set()
    await eventually(lambda: rig.host().describe()["running"] is None, message="the running turn cleared once it settled")


async def test_the_drain_hands_back_the_conversations_drained_beside_the_running_turn(backend):
    # seed 002, "Draining": the running turn completes; the rest of what the host held goes back
    # to the broker for the seat's next holder, and no further turn starts on a node letting go.
    rig = await make_rig(backend)
    try:
        gate = await first_of_two_conversations_running(rig)
        host = rig.host()
        stopping = asyncio.create_task(host.stop(finish=True))
        await throughout(lambda: not stopping.done(), window=0.3, message="the drain did not wait for the turn")
        gate.set()
        await asyncio.wait_for(stopping, 10)
        assert rig.turns.turns_of() == [["first"]] and rig.turns.outcomes == ["completed"]
        await eventually(lambda: _count(rig, 1), message="the second conversation back on the broker")
    finally:
        await rig.runtime.stop(cut=True)


async def _count(rig, expected: int) -> bool:
    return await rig.pending() == expected


async def _settled(rig, handle: str = "alice") -> bool:
    await eventually(lambda: _zero(rig, handle), message="the inbox to be acked empty")
    return True


async def _zero(rig, handle):
    return await rig.pending(handle) == 0
