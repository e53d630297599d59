"""Conformance: what a handler's answer does (seed 000, "Delivery Semantics": ACK, NAK with
its backoff order, DEFER at the head plus quiesce, one message at a time, the delivery
budget each delivery carries). Every case runs against both backends."""
from __future__ import annotations

import pytest

from engine.queue.contract import Outcome
from tests.queue.recording import BUDGET, GROUP, INBOX, Recorder, label, probe
from tests.queue.waiting import eventually, throughout

pytestmark = pytest.mark.timeout(30)


async def _pending(queue, n: int) -> bool:
    return await queue.pending(INBOX, GROUP) == n


async def test_an_acked_message_is_not_delivered_again(queue):
    await queue.ensure_subscription(INBOX, GROUP)
    await queue.publish(INBOX, probe("m1"))
    seen = Recorder(lambda d: Outcome.ACK)
    await queue.subscribe(INBOX, GROUP, seen)
    await eventually(lambda: seen.deliveries)
    await eventually(lambda: _pending(queue, 0))
    await throughout(lambda: len(seen.deliveries) == 1)


async def test_a_handler_returning_nothing_acks(queue):
    await queue.ensure_subscription(INBOX, GROUP)
    await queue.publish(INBOX, probe("m1"))
    seen = Recorder(lambda d: None)
    await queue.subscribe(INBOX, GROUP, seen)
    await eventually(lambda: _pending(queue, 0))
    await throughout(lambda: len(seen.deliveries) == 1)


async def test_each_delivery_carries_its_count_and_the_budget_left(queue):
    await queue.ensure_subscription(INBOX, GROUP)
    await queue.publish(INBOX, probe("m1"))
    seen = Recorder(lambda d: Outcome.NAK if d.deliveries < 3 else Outcome.ACK)
    await queue.subscribe(INBOX, GROUP, seen)
    await eventually(lambda: len(seen.deliveries) == 3)
    await eventually(lambda: _pending(queue, 0))
    assert [d.deliveries for d in seen.deliveries] == [1, 2, 3]
    assert [d.deliveries_left for d in seen.deliveries] == [BUDGET - 1, BUDGET - 2, BUDGET - 3]
    assert all(d.topic == INBOX for d in seen.deliveries)


async def test_a_failed_delivery_returns_behind_never_delivered_mail(queue):
    await queue.ensure_subscription(INBOX, GROUP)
    for name in ("m1", "m2", "m3"):
        await queue.publish(INBOX, probe(name))
    seen = Recorder(lambda d: Outcome.NAK if label(d.event) == "m1" and d.deliveries == 1 else None)
    await queue.subscribe(INBOX, GROUP, seen)
    await eventually(lambda: len(seen.deliveries) == 4)
    assert seen.labels == ["m1", "m2", "m3", "m1"]
    assert seen.deliveries[-1].deliveries == 2
    await eventually(lambda: _pending(queue, 0))


async def test_a_raising_handler_naks(queue, caplog):
    await queue.ensure_subscription(INBOX, GROUP)
    await queue.publish(INBOX, probe("m1"))

    def decide(delivery):
        if delivery.deliveries == 1:
            raise RuntimeError("handler broke")
        return Outcome.ACK

    seen = Recorder(decide)
    await queue.subscribe(INBOX, GROUP, seen)
    await eventually(lambda: len(seen.deliveries) == 2)
    assert [d.deliveries for d in seen.deliveries] == [1, 2]
    await eventually(lambda: _pending(queue, 0))
    assert any(r.exc_info and "handler broke" in str(r.exc_info[1]) for r in caplog.records)


async def test_defer_returns_at_the_head_and_quiesces(queue):
    await queue.ensure_subscription(INBOX, GROUP)
    await queue.publish(INBOX, probe("m1"))
    await queue.publish(INBOX, probe("m2"))
    seen = Recorder(lambda d: Outcome.DEFER if label(d.event) == "m1" and d.deliveries == 1 else None)
    await queue.subscribe(INBOX, GROUP, seen)
    await eventually(lambda: seen.deliveries)
    # Quiesced: it takes nothing more, and both messages stay on the subscription.
    await throughout(lambda: len(seen.deliveries) == 1, message="a deferring consumer kept fetching")
    await eventually(lambda: _pending(queue, 2), message="a deferral lost a message")
    assert queue.is_attached(INBOX, GROUP)
    await queue.unquiesce(INBOX, GROUP)
    await eventually(lambda: len(seen.deliveries) == 3)
    # At the head, ahead of m2, and the deferral cost one delivery.
    assert seen.labels == ["m1", "m1", "m2"]
    assert seen.deliveries[1].deliveries == 2


async def test_quiesce_stops_fetching_and_unquiesce_resumes(queue):
    await queue.ensure_subscription(INBOX, GROUP)
    seen = Recorder()
    await queue.subscribe(INBOX, GROUP, seen)
    await queue.quiesce(INBOX, GROUP)
    await queue.publish(INBOX, probe("m1"))
    await throughout(lambda: not seen.deliveries, message="a quiesced consumer fetched")
    assert queue.is_attached(INBOX, GROUP)
    await eventually(lambda: _pending(queue, 1), message="the quiesced mail was not pending")
    await queue.unquiesce(INBOX, GROUP)
    await eventually(lambda: seen.deliveries)
    assert seen.deliveries[0].deliveries == 1  # quiescing cost nothing


async def test_one_message_is_handled_at_a_time(queue):
    await queue.ensure_subscription(INBOX, GROUP)
    seen = Recorder()
    gate = seen.hold_at_gate()
    await queue.subscribe(INBOX, GROUP, seen)
    for name in ("m1", "m2", "m3"):
        await queue.publish(INBOX, probe(name))
    await eventually(lambda: seen.deliveries)
    await throughout(lambda: len(seen.deliveries) == 1, message="a second message ran beside the first")
    gate.set()
    await eventually(lambda: len(seen.deliveries) == 3)
    assert seen.most_at_once == 1
    assert seen.labels == ["m1", "m2", "m3"]
