"""One ask, one answer, then closed (seed 000, "Ephemeral A2A channels"), through the real seat
runtime on both queue backends and the coordination twin: the ask's refusals as the model
reads them, the answering turn's response waking the asker once (under redelivery too), the
close from the record's own stamps, and the maintenance duty's sweep on a stepped clock at
the seed's default timings."""
from __future__ import annotations

import logging
from datetime import datetime, timedelta

import pytest

from a2a import queries
from a2a import service as a2a
from a2a.channels import ChannelBook
from a2a.errors import A2ARefused
from engine.coord.leases import LeaseManager, seat_key
from engine.coord.local import LocalCoord
from engine.queue import topics
from events.tracing import TraceContext, new_span_id, new_trace_id
from seats.duties import MaintenanceDuty
from seats.turn import TurnResult
from tests.queue.waiting import eventually, throughout
from tests.seats.hosting import FakeNode, Published, backend, company, make_rig  # noqa: F401  (fixtures)

pytestmark = pytest.mark.timeout(60)


def _trace() -> TraceContext:
    return TraceContext(new_trace_id(), new_span_id(), "")


def _answering(request) -> TurnResult:
    """Each seat answers what woke it: an ask is answered with its brief turned round."""
    body = str(request.trigger.get("body") or "")
    return TurnResult(outcome="completed", turn_id=request.turn_id, rounds=1, tokens_in=1, tokens_out=1, duration_ms=1,
                      response=f"answer to: {body}")


@pytest.fixture
async def pair(backend):
    """alice and bob hosted by one runtime whose turns answer (`_answering`)."""
    rig = await make_rig(backend, decide=_answering)
    for handle in ("alice", "bob"):
        await rig.runtime.on_seat_acquired(handle, None)
    try:
        yield rig
    finally:
        await rig.runtime.stop(cut=True)


def _triggers(rig, handle: str) -> list:
    return [r.trigger for r in rig.turns.requests if r.seat.handle == handle]


@pytest.mark.parametrize("target,brief,depth,names", [
    ("zed", "what time is it?", 0, "seat: 'zed' is no seat of the company; agent seats you can ask: bob, carol"),
    ("maya", "what time is it?", 0, "seat: 'maya' is a human seat"),
    ("alice", "what time is it?", 0, "seat: 'alice' is you"),
    ("bob", "x" * (1024 * 1024), 0, "brief: 1,048,576 bytes is over the 65,536-byte limit"),
    ("bob", "   ", 0, "brief: empty"),
    ("bob", "and you?", 5, "past the cap of 5"),
], ids=["unknown-seat", "human-seat", "itself", "1MB-brief", "empty-brief", "past-the-depth-cap"])
async def test_an_ask_the_model_may_not_make_is_refused_as_a_tool_result_naming_why(pair, target, brief, depth, names):
    outcome = await a2a.ask(pair.node, asker="alice", target=target, brief=brief, depth=depth, trace=_trace())
    assert not outcome.ok and outcome.text.startswith("a2a_ask refused: ") and names in outcome.text
    assert await ChannelBook(pair.node.coord).all() == []
    await throughout(lambda: not _triggers(pair, "bob"), window=0.3, message="no wake reached bob")


async def test_an_ask_is_answered_by_the_targets_turn_and_the_answer_wakes_the_asker_once(pair):
    published = pair.published
    trace = _trace()
    outcome = await a2a.ask(pair.node, asker="alice", target="bob", brief="Which port does staging use?", depth=0,
                            trace=trace, turn_id="turn-of-alice")
    assert outcome.ok and outcome.text.startswith("asked bob (channel ") and "bob's answer will wake you" in outcome.text
    answers = await eventually(lambda: _triggers(pair, "alice"), message="the answer to wake alice")
    [ask] = _triggers(pair, "bob")
    assert ask.type == "a2a_request" and ask.get("body") == "Which port does staging use?"
    assert ask.delegation_depth == 1 and ask.delegation_chain == ("alice",) and ask.parent_turn_id == "turn-of-alice"
    [wake] = answers
    assert wake.type == "a2a_message" and wake.get("body") == "answer to: Which port does staging use?"
    assert wake.get("responder") == "bob" and wake.delegation_depth == 0
    channel = await ChannelBook(pair.node.coord).get(outcome.channel_id)
    bob_turn = [r.turn_id for r in pair.turns.requests if r.seat.handle == "bob"][0]
    assert (channel.state, channel.closed_by, channel.turn_id, channel.message_count) == ("closed", "bob", bob_turn, 2)
    assert channel.closed_at >= channel.opened_at and channel.duration_ms == round((channel.closed_at - channel.opened_at) * 1000)
    await eventually(lambda: published.of("a2a_channel_closed"), message="the close recorded")
    [opened], [sent], [closed] = (published.of(t) for t in ("a2a_channel_opened", "a2a_message_sent", "a2a_channel_closed"))
    assert opened.get("brief") == "Which port does staging use?" and opened.get("requester") == "alice"
    assert sent.get("kind") == "answer" and sent.get("sender") == "bob" and sent.get("recipient") == "alice"
    assert closed.get("closed_by") == "bob" and closed.get("turn_id") == bob_turn and closed.get("message_count") == 2
    assert {closed.get("requester"), closed.get("responder")} == {"alice", "bob"}
    # one trace: the ask, the answering turn's trigger, the answer and the wake it sends
    assert {e.trace_id for e in (opened, ask, sent, closed, wake)} == {trace.trace_id}
    assert ask.span_id == opened.span_id == trace.span_id and wake.span_id == sent.span_id and wake.parent_span_id == ask.span_id
    await throughout(lambda: len(_triggers(pair, "alice")) == 1, window=0.5, message="alice woken once")


async def test_an_answering_turn_that_ends_with_no_text_still_answers_and_closes_the_channel(backend):
    # The final response is the reply, whatever it holds: an empty one wakes the asker with an
    # empty answer rather than leaving the channel open for the hour-long sweep.
    def decide(request):
        if request.seat.handle == "bob":
            return TurnResult(outcome="completed", turn_id=request.turn_id, rounds=1, tokens_in=1, tokens_out=0,
                              duration_ms=1, response="")
        return "completed"

    rig = await make_rig(backend, decide=decide)
    try:
        for handle in ("alice", "bob"):
            await rig.runtime.on_seat_acquired(handle, None)
        outcome = await a2a.ask(rig.node, asker="alice", target="bob", brief="anything to add?", depth=0, trace=_trace())
        [wake] = await eventually(lambda: _triggers(rig, "alice"), message="alice woken by bob's empty answer")
        assert wake.type == "a2a_message" and wake.get("body") == "" and wake.get("responder") == "bob"
        channel = await ChannelBook(rig.node.coord).get(outcome.channel_id)
        assert (channel.state, channel.closed_by, channel.message_count) == ("closed", "bob", 2)
    finally:
        await rig.runtime.stop(cut=True)


async def test_a_redelivered_ask_never_answers_twice(pair):
    outcome = await a2a.ask(pair.node, asker="alice", target="bob", brief="ready?", depth=0, trace=_trace())
    await eventually(lambda: _triggers(pair, "alice"), message="the answer")
    [ask] = _triggers(pair, "bob")
    # the ask comes round again (a node that died before its ack): the ledger drops it
    await pair.queue.publish(topics.agent_inbox("bob"), ask)
    await eventually(lambda: pair.published.of("turn_trigger_skipped"), message="the redelivery skipped")
    # and a run the ledger never recorded (it died after closing, before recording) sends the same wake again
    done = await a2a.answer(pair.node, request=ask, response="ready, again", answered_by="bob", turn_id="a-second-run",
                            authorised=lambda: True)
    assert done == a2a.ANSWERED
    await throughout(lambda: len(_triggers(pair, "alice")) == 1 and len(_triggers(pair, "bob")) == 1, window=1.0,
                     message="one answer, one wake")
    channel = await ChannelBook(pair.node.coord).get(outcome.channel_id)
    assert channel.closed_by == "bob" and channel.turn_id != "a-second-run"


async def test_an_answer_sent_before_its_turn_failed_to_record_its_end_wakes_the_asker_once(backend):
    # The turn engine sends an ask's answer as soon as the final response is known, beside the
    # turn's last records. A broker that then does not take the turn's end hands the ask back
    # unrecorded (NAK); the run that follows answers under the same ids, and alice is woken once,
    # by the first answer.
    import asyncio

    from engine.queue.contract import Unreachable

    def decide(request):
        if request.seat.handle != "bob":
            return "completed"
        bob_runs = [r for r in rig.turns.requests if r.seat.handle == "bob"]
        response = f"answer {len(bob_runs)}"
        answering = asyncio.ensure_future(request.answer(response))
        if len(bob_runs) == 1:
            raise Unreachable("jetstream: publish to crewlet.events.agent_turn_completed was not acknowledged within 5s")
        return TurnResult(outcome="completed", turn_id=request.turn_id, rounds=1, tokens_in=1, tokens_out=1,
                          duration_ms=1, response=response, answering=answering)

    rig = await make_rig(backend, decide=decide)
    try:
        for handle in ("alice", "bob"):
            await rig.runtime.on_seat_acquired(handle, None)
        outcome = await a2a.ask(rig.node, asker="alice", target="bob", brief="ready?", depth=0, trace=_trace())
        await eventually(lambda: len(_triggers(rig, "bob")) == 2, timeout=10, message="the ask run again after the NAK")
        await throughout(lambda: len(_triggers(rig, "alice")) == 1, window=1.0, message="alice woken once")
        [wake] = _triggers(rig, "alice")
        assert wake.get("body") == "answer 1"
        first, second = (r.turn_id for r in rig.turns.requests if r.seat.handle == "bob")
        channel = await ChannelBook(rig.node.coord).get(outcome.channel_id)
        assert (channel.state, channel.closed_by, channel.turn_id) == ("closed", "bob", first)
        [sent] = rig.published.of("a2a_message_sent")
        assert sent.get("body") == "answer 1" and sent.get("turn_id") == first != second
    finally:
        await rig.runtime.stop(cut=True)


async def test_an_answer_is_sent_only_by_the_node_holding_the_answering_seat(pair):
    await pair.runtime.on_seat_released("bob", None, "test")  # bob's mail waits; the ask is answered by hand
    outcome = await a2a.ask(pair.node, asker="alice", target="bob", brief="who holds you?", depth=0, trace=_trace())
    ask = (await _read_inbox(pair.queue, "bob"))[0]
    assert await a2a.answer(pair.node, request=ask, response="me", answered_by="bob", turn_id="t",
                            authorised=lambda: False) == a2a.NOT_AUTHORISED
    assert (await ChannelBook(pair.node.coord).get(outcome.channel_id)).is_open
    assert await a2a.answer(pair.node, request=ask, response="me", answered_by="carol", turn_id="t",
                            authorised=lambda: True) == a2a.BOUNCED
    assert await pair.queue.pending(topics.agent_inbox("alice"), topics.inbox_group("alice")) == 0


async def test_an_answer_waits_while_the_answering_seats_renewal_is_overdue_and_is_sent_once_it_lands(backend, caplog):
    # Seed 000: the node that authorises the answer is the one that owns the answering seat,
    # asked of bob's lease as it stands when the turn ends (seed 002, "Leases"). Here the
    # renewal falls overdue during bob's first turn: its answer is held back and the ask
    # deferred; once the renewal lands bob's next turn answers, and alice is woken once.
    caplog.set_level(logging.WARNING, logger="seats.host")
    lease_of: dict = {}

    def decide(request):
        if request.seat.handle == "bob" and not lease_of.get("fell_overdue"):
            lease_of["fell_overdue"] = True
            lease_of["bob"].last_renewed -= lease_of["bob"].ttl
        return _answering(request)

    rig = await make_rig(backend, decide=decide)
    try:
        lease = lease_of["bob"] = await rig.node.leases.acquire(seat_key("bob"))
        await rig.runtime.on_seat_acquired("bob", lease)
        await rig.runtime.on_seat_acquired("alice", None)
        outcome = await a2a.ask(rig.node, asker="alice", target="bob", brief="still yours?", depth=0, trace=_trace())
        await eventually(lambda: any(r.getMessage() == "a2a_answer_not_authorised" for r in caplog.records),
                         message="bob's answer held back while the renewal was overdue")
        await throughout(lambda: not _triggers(rig, "alice"), window=0.5, message="no answer sent on an unproven lease")
        assert (await ChannelBook(rig.node.coord).get(outcome.channel_id)).is_open
        assert await rig.node.leases.renew(lease)
        answers = await eventually(lambda: _triggers(rig, "alice"), message="the answer once the renewal landed")
        assert [a.get("body") for a in answers] == ["answer to: still yours?"]
        assert len(_triggers(rig, "bob")) == 2  # the ask ran again on the proven lease
        channel = await ChannelBook(rig.node.coord).get(outcome.channel_id)
        assert (channel.state, channel.closed_by, channel.message_count) == ("closed", "bob", 2)
        await throughout(lambda: len(_triggers(rig, "alice")) == 1, window=0.5, message="alice woken once")
    finally:
        await rig.runtime.stop(cut=True)


async def _read_inbox(queue, handle: str) -> list:
    seen = []

    async def take(delivery):
        seen.append(delivery.event)

    await queue.subscribe(topics.agent_inbox(handle), topics.inbox_group(handle), take)
    await eventually(lambda: seen, message=f"{handle}'s inbox")
    await queue.detach(topics.agent_inbox(handle), topics.inbox_group(handle))
    return seen


class Clock:
    def __init__(self) -> None:
        self.now = 1_750_000_000.0

    def __call__(self) -> float:
        return self.now


async def test_the_maintenance_duty_closes_a_channel_idle_an_hour_and_deletes_it_a_week_after(backend):
    clock = Clock()
    coord = LocalCoord(clock=clock)
    node = FakeNode(queue=await backend.client("node-w"), coord=coord, company=company())
    node.leases = LeaseManager(coord, "node-w", ttl=30, clock=clock)
    await node.ensure_mailboxes()
    published = Published(node.queue)
    duty = MaintenanceDuty(node, clock=clock)  # the seed's timings: an hour idle, a week kept
    assert (duty.a2a_idle, duty.a2a_retain) == (3600.0, 7 * 24 * 3600.0)
    outcome = await a2a.ask(node, asker="alice", target="bob", brief="anyone?", depth=0, trace=_trace())
    clock.now += 3599
    assert (await duty.sweep_channels()).closed == []
    clock.now += 2
    assert (await duty.sweep_channels()).closed == [outcome.channel_id]
    record = await queries.get_channel(node, outcome.channel_id)
    assert (record["state"], record["closed_by"], record["turn_id"], record["reason"]) == ("closed", "", "", "idle")
    assert record["duration_ms"] == 3_601_000 and record["message_count"] == 1
    await eventually(lambda: published.of("a2a_channel_closed"), message="the sweep's close recorded")
    [closed] = published.of("a2a_channel_closed")
    assert closed.get("closed_by") == "" and closed.get("turn_id") == "" and closed.summary().startswith("system closed A2A channel")
    # bob answers late: it bounces, and the closed record says why
    ask = (await _read_inbox(node.queue, "bob"))[0]
    assert await a2a.answer(node, request=ask, response="late", answered_by="bob", turn_id="t", authorised=lambda: True) == a2a.BOUNCED
    clock.now += 7 * 24 * 3600 - 1
    assert (await duty.sweep_channels()).deleted == []
    clock.now += 1
    assert (await duty.sweep_channels()).deleted == [outcome.channel_id]
    with pytest.raises(A2ARefused) as gone:
        await queries.get_channel(node, outcome.channel_id)
    assert gone.value.status == 404 and outcome.channel_id in gone.value.detail


async def test_channels_are_listed_by_seat_and_state_and_bad_filters_are_refused_by_name(pair):
    first = await a2a.ask(pair.node, asker="alice", target="bob", brief="one", depth=0, trace=_trace())
    await eventually(lambda: _triggers(pair, "alice"), message="the first answer")
    await pair.runtime.on_seat_released("carol", None, "test")
    second = await a2a.ask(pair.node, asker="bob", target="carol", brief="two", depth=0, trace=_trace())
    open_of_carol = await queries.list_channels(pair.node, seat="carol", state="open")
    assert [c["channel_id"] for c in open_of_carol["items"]] == [second.channel_id]
    of_bob = await queries.list_channels(pair.node, seat="bob")
    assert {c["channel_id"] for c in of_bob["items"]} == {first.channel_id, second.channel_id}
    [closed] = (await queries.list_channels(pair.node, state="closed"))["items"]
    assert closed["channel_id"] == first.channel_id
    # times as every other route gives them: ISO 8601 UTC; the duration is of the same two stamps
    opened_at, closed_at = (datetime.fromisoformat(closed[k]) for k in ("opened_at", "closed_at"))
    assert opened_at.utcoffset() == closed_at.utcoffset() == timedelta(0)
    assert abs(closed["duration_ms"] - (closed_at - opened_at).total_seconds() * 1000) <= 1  # stamps kept to the microsecond
    [still_open] = open_of_carol["items"]
    assert datetime.fromisoformat(still_open["opened_at"]).utcoffset() == timedelta(0) and still_open["closed_at"] is None
    for call, status, field in ((queries.list_channels(pair.node, state="shut"), 422, "state:"),
                                (queries.list_channels(pair.node, seat="zed"), 404, "seat:"),
                                (queries.get_channel(pair.node, "not-a-uuid"), 422, "channel_id:")):
        with pytest.raises(A2ARefused) as refused:
            await call
        assert refused.value.status == status and refused.value.detail.startswith(field)
