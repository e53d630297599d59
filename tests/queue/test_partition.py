"""How a drain is cut into conversations (seed 000, "Inbox batching": one turn per conversation),
on the contract's own `partition` and `default_partition_key`, which both backends share."""
from __future__ import annotations

from engine.queue.contract import Delivery, default_partition_key, partition
from tests.queue.recording import INBOX, label, probe


def delivered(*events) -> list[Delivery]:
    return [Delivery(event=e, topic=INBOX, deliveries=1, deliveries_left=24) for e in events]


def test_events_without_a_key_are_each_their_own_conversation():
    a, b = probe("a", at=1), probe("b", at=2)
    assert default_partition_key(a) == f"event:{a.id}" != default_partition_key(b)
    batches = partition(delivered(a, b), default_partition_key)
    assert [[label(d.event) for d in batch.deliveries] for batch in batches] == [["a"], ["b"]]
    assert [batch.key for batch in batches] == [f"event:{a.id}", f"event:{b.id}"]


def test_events_sharing_a_key_are_one_batch_under_that_key():
    batches = partition(delivered(probe("x1", key="slack:C1", at=1), probe("y", at=2), probe("x2", key="slack:C1", at=3)),
                        default_partition_key)
    assert [(batch.key, [label(d.event) for d in batch.deliveries]) for batch in batches][0] == ("slack:C1", ["x1", "x2"])
    assert len(batches) == 2


def test_a_key_function_that_raises_keeps_each_message_apart_and_loses_none():
    def key(event):
        if event.payload.get("label", "").startswith("bad"):
            raise ValueError("no key for this one")
        return "thread"

    events = [probe("bad1", at=1), probe("bad2", at=2), probe("good1", at=3), probe("good2", at=4)]
    batches = partition(delivered(*events), key)
    shapes = sorted((batch.key, tuple(label(d.event) for d in batch.deliveries)) for batch in batches)
    assert shapes == sorted([(f"event:{events[0].id}", ("bad1",)), (f"event:{events[1].id}", ("bad2",)),
                             ("thread", ("good1", "good2"))])


def test_events_of_one_instant_are_ordered_by_id_whatever_order_they_arrived_in():
    events = [probe(f"p{i}", key="k", at=5) for i in range(6)]
    [batch] = partition(delivered(*reversed(events)), default_partition_key)
    assert [str(d.event.id) for d in batch.deliveries] == sorted(str(e.id) for e in events)
    [again] = partition(delivered(*events), default_partition_key)
    assert again.deliveries == batch.deliveries  # the same order from either arrival order
