"""Conformance: the delivery budget and the dead-letter topic (seed 000, "Delivery Semantics":
25 deliveries, then `dlq.{topic}.{group}.{digest}` and terminated; nothing loops; a message
that is not an event is dead-lettered at once). Every case runs against both backends; the
dead letters are read back the way an operator would, through a subscription on the
dead-letter subject."""
from __future__ import annotations

import pytest

from engine.queue import topics
from engine.queue.contract import BatchOptions, Outcome
from tests.queue.recording import BUDGET, GROUP, INBOX, BatchRecorder, Recorder, label, probe
from tests.queue.waiting import eventually, throughout

pytestmark = pytest.mark.timeout(60)

DLQ = topics.dlq_subject(INBOX, GROUP)


async def _pending(queue, n: int, topic: str = INBOX, group: str = GROUP) -> bool:
    return await queue.pending(topic, group) == n


async def _read_dead_letters(queue) -> Recorder:
    await queue.ensure_subscription(DLQ, "operator")
    inspector = Recorder()
    await queue.subscribe(DLQ, "operator", inspector)
    return inspector


async def test_the_25th_failed_delivery_dead_letters_and_nothing_loops(queue):
    await queue.ensure_subscription(INBOX, GROUP)
    sent = await queue.publish(INBOX, probe("poison"))
    seen = Recorder(lambda d: Outcome.NAK)
    await queue.subscribe(INBOX, GROUP, seen)
    await eventually(lambda: len(seen.deliveries) == BUDGET, timeout=45)
    await eventually(lambda: _pending(queue, 0))
    await throughout(lambda: len(seen.deliveries) == BUDGET, message="delivered past the budget")
    assert [d.deliveries for d in seen.deliveries] == list(range(1, BUDGET + 1))
    assert [d.deliveries_left for d in seen.deliveries] == list(range(BUDGET - 1, -1, -1))
    assert seen.deliveries[-1].last

    inspector = await _read_dead_letters(queue)
    await eventually(lambda: inspector.deliveries)
    dead = inspector.deliveries[0]
    assert dead.topic == topics.dlq_subject(INBOX, GROUP)
    assert dead.event.id == sent.id and label(dead.event) == "poison"
    await throughout(lambda: len(inspector.deliveries) == 1, message="a dead letter was dead-lettered again")


async def test_a_deferral_on_the_last_delivery_dead_letters(queue):
    await queue.ensure_subscription(INBOX, GROUP)
    sent = await queue.publish(INBOX, probe("handed-back"))
    seen = Recorder(lambda d: Outcome.DEFER if d.last else Outcome.NAK)
    await queue.subscribe(INBOX, GROUP, seen)
    await eventually(lambda: len(seen.deliveries) == BUDGET, timeout=45)
    await eventually(lambda: _pending(queue, 0))
    inspector = await _read_dead_letters(queue)
    await eventually(lambda: inspector.deliveries)
    assert inspector.deliveries[0].event.id == sent.id
    await queue.unquiesce(INBOX, GROUP)
    await throughout(lambda: len(seen.deliveries) == BUDGET, message="delivered past the budget")


async def test_an_undecodable_message_is_dead_lettered_at_once_and_the_loop_goes_on(queue):
    await queue.ensure_subscription(INBOX, GROUP)
    # Bytes this build cannot decode: an envelope whose delegation_depth is not an integer,
    # as a producer with another schema might write.
    await queue.publish(INBOX, probe("garbled").replace(delegation_depth="deep"))
    await queue.publish(INBOX, probe("fine"))
    seen = Recorder()
    await queue.subscribe(INBOX, GROUP, seen)
    await eventually(lambda: seen.deliveries)
    assert seen.labels == ["fine"]
    await eventually(lambda: _pending(queue, 0))
    # Never lost: the dead-letter subject holds it, on the first delivery.
    await queue.ensure_subscription(DLQ, "operator")
    await eventually(lambda: _pending(queue, 1, DLQ, "operator"), message="the undecodable message was not dead-lettered")
    # And the loop still works.
    await queue.publish(INBOX, probe("after"))
    await eventually(lambda: seen.labels == ["fine", "after"])


async def test_a_batch_failing_on_its_last_delivery_dead_letters(queue):
    await queue.ensure_subscription(INBOX, GROUP)
    sent = await queue.publish(INBOX, probe("poison", key="k"))
    seen = BatchRecorder(lambda b: Outcome.NAK)
    await queue.subscribe_batch(INBOX, GROUP, BatchOptions(linger_seconds=0), seen)
    await eventually(lambda: len(seen.batches) == BUDGET, timeout=45)
    await eventually(lambda: _pending(queue, 0))
    assert [b.headroom for b in seen.batches] == list(range(BUDGET - 1, -1, -1))
    await throughout(lambda: len(seen.batches) == BUDGET, message="a batch was drained past the budget")
    inspector = await _read_dead_letters(queue)
    await eventually(lambda: inspector.deliveries)
    assert inspector.deliveries[0].event.id == sent.id
    assert inspector.deliveries[0].topic == DLQ


async def test_dead_letters_of_distinct_pairs_never_alias(queue):
    # A join of topic and group alone could alias these; the digest keeps them apart.
    pair_one = (topics.agent_inbox("a-b"), "c")
    pair_two = (topics.agent_inbox("a"), "b-c")
    assert topics.dlq_subject(*pair_one) != topics.dlq_subject(*pair_two)
    for topic, group in (pair_one, pair_two):
        await queue.ensure_subscription(topic, group)
        await queue.publish(topic, probe(f"poison-{group}"))
        await queue.subscribe(topic, group, Recorder(lambda d: Outcome.DEFER if d.last else Outcome.NAK))
    for topic, group in (pair_one, pair_two):
        await eventually(lambda topic=topic, group=group: _pending(queue, 0, topic, group), timeout=45)
        await queue.ensure_subscription(topics.dlq_subject(topic, group), "operator")
        inspector = Recorder()
        await queue.subscribe(topics.dlq_subject(topic, group), "operator", inspector)
        await eventually(lambda inspector=inspector: inspector.deliveries)
        await throughout(lambda inspector=inspector: len(inspector.deliveries) == 1, window=0.3)
        assert inspector.labels == [f"poison-{group}"]


async def test_the_twin_keeps_dead_letters_for_inspection(memory_backend):
    backend = memory_backend  # what only the twin has: its broker object, inspected directly
    queue = await backend.client("node-a")
    await queue.ensure_subscription(INBOX, GROUP)
    sent = await queue.publish(INBOX, probe("poison"))
    backend.broker.publish_raw(INBOX, b"\xff not json")
    await queue.subscribe(INBOX, GROUP, Recorder(lambda d: Outcome.NAK))
    await eventually(lambda: len(backend.broker.dead_letter_records(INBOX)) == 2)
    records = {r.reason: r for r in backend.broker.dead_letter_records(INBOX, GROUP)}
    assert records["undecodable"].body == b"\xff not json"
    assert records["undecodable"].deliveries == 1
    assert records["max_deliveries"].deliveries == BUDGET
    assert {r.subject for r in records.values()} == {DLQ}
    assert [e.id for e in backend.broker.dead_letters(INBOX)] == [sent.id]
    assert backend.broker.dead_letters(topics.agent_inbox("someone-else")) == []
    assert backend.broker.retained(INBOX, GROUP) == []
