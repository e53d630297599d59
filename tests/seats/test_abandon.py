"""Abandoned turns and the failed message (seed 000, turn_trigger_skipped: "a trigger whose turn
was ABANDONED rather than redelivered (it panicked, wrote outside the engine before breaking, or
its model declined), with the reason"; "And the failed one is not answered twice"). The seat host
with the real turn engine, a real model endpoint that counts its calls, on the memory twin and
on a real nats-server."""
from __future__ import annotations

import asyncio
import threading

import pytest

from engine.coord.ledger import LEDGER_BUCKET, CompletionLedger
from engine.coord.local import LocalCoord
from engine.queue.contract import Unreachable
from seats.host import ABANDONED, SKIP_ANSWERED
from seats.memory import ConversationMemory
from seats.turn import TurnEngine
from tests.queue.waiting import eventually, throughout
from tests.seats.hosting import backend, mail, make_rig  # noqa: F401  (the queue backends)
from tests.seats.test_providers import Reply, chat_body, endpoint  # noqa: F401  (the fixture)
from tests.seats.tooling import openai_calls, tool_company

pytestmark = pytest.mark.timeout(90)


async def real_rig(backend, endpoint, *, raise_on: str = "", unreachable_once: str = "", alice: dict | None = None,
                   hold: tuple[str, asyncio.Event] | None = None, coord: LocalCoord | None = None):
    """A seat runtime whose turns are the real engine's, against the test's model endpoint.
    `raise_on`: every publish of that event type raises; `unreachable_once`: the first one
    raises `Unreachable`, as a publish the broker did not acknowledge while a member was gone;
    `hold`: (type, gate) -- a publish of that type waits for the gate, as a broker slow to ack."""
    company = tool_company([{"name": "main", "kind": "openai", "base_url": endpoint.base_url, "model": "m",
                             "api_key": "${LLM_KEY}", "max_retries": 0}], [], alice=alice)
    coord = coord or LocalCoord()
    rig = await make_rig(backend, the_company=company, coord=coord)

    failed_over: set[str] = set()

    async def publish(event):
        if event.type == raise_on:
            raise RuntimeError(f"the broker refused {event.type}")
        if event.type == unreachable_once and event.type not in failed_over:
            failed_over.add(event.type)
            raise Unreachable(f"jetstream: publish to crewlet.events.{event.type} was not acknowledged within 10s")
        if hold is not None and event.type == hold[0]:
            await hold[1].wait()
        await rig.runtime.publish(event)

    rig.runtime.turns = TurnEngine(node_id="node-a", publish=publish, memory=ConversationMemory(coord))
    return rig


@pytest.fixture
async def rigs():
    made = []
    yield made
    for rig in made:
        await rig.runtime.stop(cut=True)


async def one_mail_hosted(rig):
    """One message on alice's inbox, then her seat hosted: the turn that works it begins."""
    m1 = mail("please fix the build", key="slack:C9:1.1")
    await rig.publish(m1)
    await rig.runtime.on_seat_acquired("alice", None)
    return m1


async def settled(rig) -> None:
    async def empty():
        return await rig.pending() == 0

    await eventually(empty, message="the inbox to be acked empty")


# The end record raising comes after its ledger record was begun beside it: that worked record
# is withdrawn, and the trigger is recorded abandoned as any turn that raises is.
@pytest.mark.parametrize("raising", ["agent_phase_completed", "agent_turn_completed"], ids=["phase-record", "end-record"])
async def test_a_turn_that_raises_is_run_once_and_recorded_abandoned(backend, endpoint, rigs, raising):
    rig = await real_rig(backend, endpoint, raise_on=raising)
    rigs.append(rig)
    m1 = await one_mail_hosted(rig)
    [skip] = await eventually(lambda: rig.published.of("turn_trigger_skipped"), message="the abandonment")
    assert (skip.get("trigger_id"), skip.get("reason"), skip.get("abandoned")) == (str(m1.id), ABANDONED["raised"], True)
    assert f"the broker refused {raising}" in skip.get("detail")
    await settled(rig)
    # a NAK would bring it back after 1 s, then 2 s: nothing comes
    await throughout(lambda: len(endpoint.requests) == 1, window=4.0, message="the raising turn ran again")
    record = await CompletionLedger(rig.node.coord).worked("alice", str(m1.id))
    assert (record.reason, record.turn_id) == ("abandoned", skip.get("turn_id"))


async def test_a_turn_whose_record_the_broker_did_not_take_runs_again_and_is_not_abandoned(backend, endpoint, rigs):
    """The node's own broker failing under a turn (a member killed, the publish of the turn's
    record unacknowledged while the client fails over) is the node's failure, not the mail's:
    nothing is recorded, the mail is NAKed, and the next delivery works it. Abandoned, an
    acknowledged task would be dropped (issue 15's chaos run lost three so)."""
    rig = await real_rig(backend, endpoint, unreachable_once="agent_turn_completed")
    rigs.append(rig)
    m1 = await one_mail_hosted(rig)
    [done] = await eventually(lambda: rig.published.of("agent_turn_completed"), message="the turn completed on its redelivery")
    assert (done.get("outcome"), done.get("trigger_ids")) == ("completed", [str(m1.id)])
    await settled(rig)
    assert len(endpoint.requests) == 2  # the turn whose record was lost, and the one that worked it
    assert rig.published.of("turn_trigger_skipped") == []
    record = await CompletionLedger(rig.node.coord).worked("alice", str(m1.id))
    assert (record.reason, record.turn_id) == ("", done.get("turn_id"))


async def test_a_completed_turns_trigger_is_recorded_worked_while_its_end_record_is_still_on_its_way(backend, endpoint, rigs):
    """The ledger record goes out beside the turn's end record, not after its ack: a node that
    dies once the end record landed has no store round trip left in which to die with the
    trigger unrecorded (its redelivery would be a second turn)."""
    landed = asyncio.Event()
    rig = await real_rig(backend, endpoint, hold=("agent_turn_completed", landed))
    rigs.append(rig)
    m1 = await one_mail_hosted(rig)
    ledger = CompletionLedger(rig.node.coord)
    record = await eventually(lambda: ledger.worked("alice", str(m1.id)), message="the ledger record beside the end record")
    assert rig.published.of("agent_turn_completed") == []  # the end record is still on its way
    assert await rig.pending() == 1  # and the mail is not acked before it lands
    landed.set()
    [done] = await eventually(lambda: rig.published.of("agent_turn_completed"), message="the end record")
    assert record.turn_id == done.get("turn_id") and record.reason == ""
    await settled(rig)


class SlowLedger(LocalCoord):
    """The coordination twin whose ledger writes wait for `answers` (a store electing a leader)."""

    def __init__(self) -> None:
        super().__init__()
        self.answers = asyncio.Event()

    async def create(self, bucket, key, value, ttl=None):
        if bucket == LEDGER_BUCKET:
            await self.answers.wait()
        return await super().create(bucket, key, value, ttl)


async def test_a_worked_turns_mail_is_acked_without_waiting_for_a_slow_ledger_write(backend, endpoint, rigs):
    """The ack does not wait for the ledger record: a store slow to answer would hold the mail
    unacked for the whole retry, and a node that died meanwhile would hand it to a second turn.
    The record still lands once the store answers."""
    coord = SlowLedger()
    rig = await real_rig(backend, endpoint, coord=coord)
    rigs.append(rig)
    m1 = await one_mail_hosted(rig)
    [done] = await eventually(lambda: rig.published.of("agent_turn_completed"), message="the turn completed")
    await settled(rig)  # acked while the ledger write waits
    ledger = CompletionLedger(rig.node.coord)
    assert await ledger.worked("alice", str(m1.id)) is None
    coord.answers.set()
    record = await eventually(lambda: ledger.worked("alice", str(m1.id)), message="the ledger record once the store answered")
    assert record.turn_id == done.get("turn_id")


async def test_a_turn_whose_opening_record_the_broker_did_not_take_pays_no_model_call_and_runs_again(backend, endpoint, rigs):
    """The opening records go out together, acknowledged before the first round: one the broker
    did not take ends the turn before the model is asked, and the mail runs again."""
    rig = await real_rig(backend, endpoint, unreachable_once="agent_turn_started")
    rigs.append(rig)
    m1 = await one_mail_hosted(rig)
    [done] = await eventually(lambda: rig.published.of("agent_turn_completed"), message="the turn completed on its redelivery")
    assert (done.get("outcome"), done.get("trigger_ids")) == ("completed", [str(m1.id)])
    await settled(rig)
    assert len(endpoint.requests) == 1  # the first run stopped before its model call
    assert rig.published.of("turn_trigger_skipped") == []
    assert [e.type for e in rig.published.events if e.get("turn_id") == done.get("turn_id")][:3] == \
        ["agent_turn_started", "agent_phase_started", "prompt.size"]


async def test_a_turns_records_reach_the_broker_in_the_order_they_were_made(backend, endpoint, rigs):
    """The opening records acknowledged together, the live signals not waited for: on the broker
    each still stands where the turn made it, every signal before the phase's record."""
    rig = await real_rig(backend, endpoint)
    rigs.append(rig)
    await rig.runtime.on_seat_acquired("alice", None)
    for n in range(3):
        await rig.publish(mail(f"message {n}", key=f"slack:C9:{n}.1"))
    done = await eventually(lambda: rig.published.of("agent_turn_completed") if len(rig.published.of("agent_turn_completed")) == 3
                            else None, message="three turns")
    for end in done:
        mine = [e.type for e in rig.published.events if e.get("turn_id") == end.get("turn_id")]
        assert mine == ["agent_turn_started", "agent_phase_started", "prompt.size", "agent_turn_progress",
                        "agent_turn_progress", "agent_phase_completed", "agent_turn_completed"]


async def test_a_model_that_declines_is_abandoned_not_asked_again(backend, endpoint, rigs):
    rig = await real_rig(backend, endpoint)
    rigs.append(rig)
    endpoint.script = [Reply(body=chat_body("I won't do that.", finish_reason="content_filter"))]
    await rig.publish(mail("do the thing"))
    await rig.runtime.on_seat_acquired("alice", None)
    [skip] = await eventually(lambda: rig.published.of("turn_trigger_skipped"), message="the abandonment")
    assert skip.get("reason") == ABANDONED["refusal"]
    await settled(rig)
    await throughout(lambda: len(endpoint.requests) == 1, window=2.0, message="the declined turn ran again")


async def test_a_guard_breach_is_abandoned(backend, endpoint, rigs):
    rig = await real_rig(backend, endpoint, alice={"max_iter": 2})
    rigs.append(rig)
    endpoint.responder = lambda request: Reply(body=openai_calls((f"c{len(endpoint.requests)}", "no__tool",
                                                                  {"n": len(endpoint.requests)})))
    await rig.publish(mail("loop"))
    await rig.runtime.on_seat_acquired("alice", None)
    [skip] = await eventually(lambda: rig.published.of("turn_trigger_skipped"), message="the abandonment")
    assert skip.get("reason") == ABANDONED["guard"] and skip.get("detail").startswith("max_iter:")
    assert rig.published.of("turn.guard_breach")[0].get("guard") == "max_iter"
    await settled(rig)
    assert len(endpoint.requests) == 2


async def test_a_provider_that_refuses_the_call_is_abandoned_but_one_that_is_down_is_redelivered(backend, endpoint, rigs):
    rig = await real_rig(backend, endpoint)
    rigs.append(rig)
    endpoint.script = [Reply(401, {"error": {"message": "bad key"}}), Reply(503, {}), Reply(body=chat_body("done"))]
    await rig.runtime.on_seat_acquired("alice", None)
    await rig.publish(mail("one"))
    [skip] = await eventually(lambda: rig.published.of("turn_trigger_skipped"), message="the 401's abandonment")
    assert skip.get("reason") == ABANDONED["provider"] and "bad key" in skip.get("detail")
    two = mail("two")
    await rig.publish(two)
    await eventually(lambda: len(endpoint.requests) == 3, message="the 503's turn to come back and complete")
    await settled(rig)
    assert len(rig.published.of("turn_trigger_skipped")) == 1
    assert (await CompletionLedger(rig.node.coord).worked("alice", str(two.id))).reason == ""


async def test_a_failed_message_answered_in_its_thread_by_a_later_turn_is_not_answered_again(backend, endpoint, rigs):
    rig = await real_rig(backend, endpoint)
    rigs.append(rig)
    answer = threading.Event()

    def respond(request):  # the first call fails once the second message has arrived
        if len(endpoint.requests) == 1:
            answer.wait(20)
            return Reply(503, {"error": {"message": "overloaded"}})
        return Reply(body=chat_body("Both handled."))

    endpoint.responder = respond
    await rig.runtime.on_seat_acquired("alice", None)
    first = mail("is prod down?", key="slack:C5:77.1")
    await rig.publish(first)
    await eventually(lambda: len(endpoint.requests) == 1, message="the first turn to call its model")
    second = mail("hello? anyone?", key="slack:C5:77.1")
    await rig.publish(second)  # arrives while the first turn runs, as in a chat thread
    answer.set()
    skips = await eventually(lambda: rig.published.of("turn_trigger_skipped"), message="the redelivery skipped")
    assert [(s.get("trigger_id"), s.get("reason")) for s in skips] == [(str(first.id), SKIP_ANSWERED)]
    await settled(rig)
    assert len(endpoint.requests) == 2  # the failed one and the later turn; the redelivery ran nothing
    user = endpoint.requests[1]["body"]["messages"][-1]["content"]
    assert "hello? anyone?" in user
    assert "still waiting for your answer" in user and "dana" in user and "is prod down?" in user
    record = await CompletionLedger(rig.node.coord).worked("alice", str(first.id))
    assert record.reason == "answered_in_thread"
