"""Conformance: inbox batching (seed 000, "Inbox Batching & Coalescing": drain, linger, cap,
partition, dispatch oldest conversation first one partition at a time, ack a partition only
after its handler returns, a failing partition NAKs only its own, a pause or hold hands the
drain back, options read every drain; "Delivery Semantics": per-message and per-batch
budget). Every case runs against both backends."""
from __future__ import annotations

import pytest

from engine.queue.contract import BatchOptions, Outcome
from tests.queue.recording import BUDGET, GROUP, INBOX, BatchRecorder, Recorder, label, probe
from tests.queue.waiting import eventually, throughout

pytestmark = pytest.mark.timeout(30)


async def _pending(queue, n: int) -> bool:
    return await queue.pending(INBOX, GROUP) == n


async def _collecting(backend, queue, n: int) -> None:
    """Until the drain has taken `n` messages and is lingering for more: a publish after this
    arrives during its collection."""
    async def taken() -> bool:
        return await backend.in_flight(queue, INBOX, GROUP) == n

    await eventually(taken, message=f"the drain to be collecting with {n} taken")


async def test_a_batch_reports_per_message_and_per_batch_headroom_at_mixed_counts(backend):
    a = await backend.client("node-a")
    await a.ensure_subscription(INBOX, GROUP)
    await a.publish(INBOX, probe("old", key="k", at=1))
    # Spend two of old's deliveries on deferrals, then let go of it.
    deferrer = Recorder(lambda d: Outcome.DEFER)
    await a.subscribe(INBOX, GROUP, deferrer)
    await eventually(lambda: len(deferrer.deliveries) == 1)
    await a.unquiesce(INBOX, GROUP)
    await eventually(lambda: len(deferrer.deliveries) == 2)
    await a.detach(INBOX, GROUP)
    await a.publish(INBOX, probe("new", key="k", at=2))
    await a.publish(INBOX, probe("other", key="j", at=3))

    b = await backend.client("node-b")
    seen = BatchRecorder()
    await b.subscribe_batch(INBOX, GROUP, BatchOptions(linger_seconds=1.0, max_batch=10), seen)
    await eventually(lambda: seen.seen and sorted(seen.seen) == ["new", "old", "other"])
    conversation = next(x for x in seen.batches if x.key == "k")
    assert [label(e) for e in conversation.events] == ["old", "new"]
    assert [d.deliveries for d in conversation.deliveries] == [3, 1]
    assert [d.deliveries_left for d in conversation.deliveries] == [BUDGET - 3, BUDGET - 1]
    assert conversation.headroom == BUDGET - 3
    lone = next(x for x in seen.batches if x.key == "j")
    assert lone.headroom == BUDGET - 1


async def test_linger_collects_arrivals_within_the_window(backend, queue):
    await queue.ensure_subscription(INBOX, GROUP)
    seen = BatchRecorder()
    # The cap, not the 30 s linger, ends this drain, so the case never waits the linger out.
    await queue.subscribe_batch(INBOX, GROUP, BatchOptions(linger_seconds=30, max_batch=3), seen)
    await queue.publish(INBOX, probe("m1", key="k", at=1))
    await _collecting(backend, queue, 1)
    await queue.publish(INBOX, probe("m2", key="k", at=2))
    await _collecting(backend, queue, 2)
    await queue.publish(INBOX, probe("m3", key="k", at=3))
    await eventually(lambda: seen.batches)
    assert seen.shapes == [["m1", "m2", "m3"]]


async def test_the_linger_ends_a_drain_that_stays_under_the_cap(queue):
    await queue.ensure_subscription(INBOX, GROUP)
    seen = BatchRecorder()
    await queue.subscribe_batch(INBOX, GROUP, BatchOptions(linger_seconds=0.5, max_batch=10), seen)
    await queue.publish(INBOX, probe("m1", key="k"))
    await eventually(lambda: seen.batches)
    assert seen.shapes == [["m1"]]


async def test_without_linger_a_later_arrival_is_its_own_drain(queue):
    await queue.ensure_subscription(INBOX, GROUP)
    seen = BatchRecorder()
    gate = seen.hold_at_gate()
    await queue.subscribe_batch(INBOX, GROUP, BatchOptions(linger_seconds=0, max_batch=10), seen)
    await queue.publish(INBOX, probe("m1", key="k", at=1))
    await eventually(lambda: seen.batches)
    await queue.publish(INBOX, probe("m2", key="k", at=2))
    await queue.publish(INBOX, probe("m3", key="k", at=3))
    gate.set()
    await eventually(lambda: len(seen.seen) == 3)
    # Backlog that accumulated during a turn is drained together.
    assert seen.shapes == [["m1"], ["m2", "m3"]]


async def test_max_batch_caps_a_drain(queue):
    await queue.ensure_subscription(INBOX, GROUP)
    for n in range(5):
        await queue.publish(INBOX, probe(f"m{n}", key="k", at=n))
    seen = BatchRecorder()
    await queue.subscribe_batch(INBOX, GROUP, BatchOptions(linger_seconds=0, max_batch=2), seen)
    await eventually(lambda: len(seen.seen) == 5)
    assert [len(s) for s in seen.shapes] == [2, 2, 1]
    assert seen.seen == ["m0", "m1", "m2", "m3", "m4"]


async def test_partitions_dispatch_oldest_first_each_sorted_by_timestamp(queue):
    await queue.ensure_subscription(INBOX, GROUP)
    # Published out of timestamp order on purpose: order comes from the events' own clocks.
    await queue.publish(INBOX, probe("a-late", key="a", at=50))
    await queue.publish(INBOX, probe("c", key="c", at=30))
    await queue.publish(INBOX, probe("b", key="b", at=20))
    await queue.publish(INBOX, probe("a-early", key="a", at=10))
    await queue.publish(INBOX, probe("lone"))  # no key: partitioned alone, never merged
    seen = BatchRecorder()
    await queue.subscribe_batch(INBOX, GROUP, BatchOptions(linger_seconds=0.5, max_batch=10), seen)
    await eventually(lambda: len(seen.seen) == 5)
    assert seen.shapes[:3] == [["a-early", "a-late"], ["b"], ["c"]]
    assert seen.shapes[3] == ["lone"]  # its timestamp is now, the newest
    assert [b.key for b in seen.batches[:3]] == ["a", "b", "c"]


async def test_partitions_run_one_at_a_time_and_ack_after_their_handler(queue):
    await queue.ensure_subscription(INBOX, GROUP)
    await queue.publish(INBOX, probe("a", key="a", at=1))
    await queue.publish(INBOX, probe("b", key="b", at=2))
    seen = BatchRecorder()
    gate = seen.hold_at_gate()
    await queue.subscribe_batch(INBOX, GROUP, BatchOptions(linger_seconds=0.5, max_batch=10), seen)
    await eventually(lambda: seen.batches)
    await throughout(lambda: len(seen.batches) == 1, message="a second partition ran beside the first")
    await eventually(lambda: _pending(queue, 2), message="something was acked while its handler ran")
    gate.set()
    await eventually(lambda: len(seen.batches) == 2)
    await eventually(lambda: _pending(queue, 0))


async def test_a_failing_partition_naks_only_its_own_messages(queue):
    await queue.ensure_subscription(INBOX, GROUP)
    await queue.publish(INBOX, probe("a1", key="a", at=1))
    await queue.publish(INBOX, probe("b1", key="b", at=2))
    await queue.publish(INBOX, probe("a2", key="a", at=3))

    def decide(batch):
        if batch.key == "a" and batch.deliveries[0].deliveries == 1:
            raise RuntimeError("turn failed")
        return None

    seen = BatchRecorder(decide)
    await queue.subscribe_batch(INBOX, GROUP, BatchOptions(linger_seconds=0.5, max_batch=10), seen)
    await eventually(lambda: len(seen.seen) == 5)
    await eventually(lambda: _pending(queue, 0))
    await throughout(lambda: len(seen.seen) == 5)
    assert seen.shapes == [["a1", "a2"], ["b1"], ["a1", "a2"]]
    assert [d.deliveries for d in seen.batches[1].deliveries] == [1]
    assert [d.deliveries for d in seen.batches[2].deliveries] == [2, 2]


async def test_a_failed_partition_comes_back_behind_newer_mail_of_its_conversation(queue):
    await queue.ensure_subscription(INBOX, GROUP)
    seen = BatchRecorder()
    gate = seen.hold_at_gate()
    seen.decide = lambda b: Outcome.NAK if label(b.events[0]) == "first" and b.deliveries[0].deliveries == 1 else None
    await queue.subscribe_batch(INBOX, GROUP, BatchOptions(linger_seconds=0, max_batch=10), seen)
    await queue.publish(INBOX, probe("first", key="k", at=1))
    await eventually(lambda: seen.batches)
    await queue.publish(INBOX, probe("newer", key="k", at=2))  # waiting when "first" fails
    gate.set()
    await eventually(lambda: len(seen.seen) == 3)
    # The newer message runs in a turn of its own; the failure follows in a later one.
    assert seen.shapes == [["first"], ["newer"], ["first"]]
    assert seen.batches[2].deliveries[0].deliveries == 2


async def test_a_hold_taken_during_collection_hands_the_drain_back(backend, queue):
    await queue.ensure_subscription(INBOX, GROUP)
    seen = BatchRecorder()
    options = {"now": BatchOptions(linger_seconds=30, max_batch=10)}
    await queue.subscribe_batch(INBOX, GROUP, lambda: options["now"], seen)
    await queue.publish(INBOX, probe("m1", key="k", at=1))
    await queue.publish(INBOX, probe("m2", key="k", at=2))
    await _collecting(backend, queue, 2)  # lingering for more
    await queue.hold(INBOX, GROUP, "sandbox")
    options["now"] = BatchOptions(linger_seconds=0, max_batch=10)  # so the next drain need not linger
    await throughout(lambda: not seen.batches, message="a drain was flushed past a hold")
    await eventually(lambda: _pending(queue, 2), message="the handed-back drain was not pending")
    await queue.release(INBOX, GROUP, "sandbox")
    await eventually(lambda: len(seen.seen) == 2)
    assert seen.shapes == [["m1", "m2"]]
    # Being drained was the delivery: handing it back cost one each.
    assert [d.deliveries for d in seen.batches[0].deliveries] == [2, 2]


async def test_a_pause_taken_during_collection_hands_the_drain_back(backend, queue):
    await queue.ensure_subscription(INBOX, GROUP)
    seen = BatchRecorder()
    options = {"now": BatchOptions(linger_seconds=30, max_batch=10)}
    await queue.subscribe_batch(INBOX, GROUP, lambda: options["now"], seen)
    await queue.publish(INBOX, probe("m1", key="k", at=1))
    await _collecting(backend, queue, 1)
    await queue.pause_delivery(INBOX, GROUP)
    options["now"] = BatchOptions(linger_seconds=0, max_batch=10)
    await throughout(lambda: not seen.batches, message="a drain was flushed past a pause")
    await queue.resume_delivery(INBOX, GROUP)
    await eventually(lambda: seen.batches)
    assert seen.shapes == [["m1"]]
    assert seen.batches[0].deliveries[0].deliveries == 2


async def test_a_hold_taken_between_partitions_stops_the_drain(queue):
    await queue.ensure_subscription(INBOX, GROUP)
    await queue.publish(INBOX, probe("a", key="a", at=1))
    await queue.publish(INBOX, probe("b", key="b", at=2))
    await queue.publish(INBOX, probe("c", key="c", at=3))

    async def decide(batch):
        if batch.key == "a":
            await queue.hold(INBOX, GROUP, "sandbox")  # the turn launched a coding run
        return None

    seen = BatchRecorder(decide)
    await queue.subscribe_batch(INBOX, GROUP, BatchOptions(linger_seconds=0.5, max_batch=10), seen)
    await eventually(lambda: seen.batches)
    await throughout(lambda: len(seen.batches) == 1, message="a partition ran past a hold")
    await eventually(lambda: _pending(queue, 2), message="a was not acked, or b and c did not go back")
    await queue.release(INBOX, GROUP, "sandbox")
    await eventually(lambda: len(seen.seen) == 3)
    assert seen.shapes == [["a"], ["b"], ["c"]]
    assert [b.deliveries[0].deliveries for b in seen.batches[1:]] == [2, 2]


async def test_a_deferred_partition_stops_the_drain_and_quiesces(queue):
    await queue.ensure_subscription(INBOX, GROUP)
    await queue.publish(INBOX, probe("a", key="a", at=1))
    await queue.publish(INBOX, probe("b", key="b", at=2))
    seen = BatchRecorder(lambda b: Outcome.DEFER if len(seen.batches) == 1 else None)
    await queue.subscribe_batch(INBOX, GROUP, BatchOptions(linger_seconds=0.5, max_batch=10), seen)
    await eventually(lambda: seen.batches)
    await throughout(lambda: len(seen.batches) == 1, message="a deferring consumer kept dispatching")
    await eventually(lambda: _pending(queue, 2), message="the deferred partitions were not pending")
    await queue.unquiesce(INBOX, GROUP)
    await eventually(lambda: len(seen.seen) == 3)
    assert seen.shapes[1:] == [["a"], ["b"]]
    assert [b.deliveries[0].deliveries for b in seen.batches[1:]] == [2, 2]


async def test_options_changing_between_drains_apply(queue):
    await queue.ensure_subscription(INBOX, GROUP)
    for n in range(4):
        await queue.publish(INBOX, probe(f"m{n}", key="k", at=n))
    current = {"options": BatchOptions(linger_seconds=0, max_batch=1)}

    def decide(batch):
        current["options"] = BatchOptions(linger_seconds=0, max_batch=10)  # a hot reload
        return None

    seen = BatchRecorder(decide)
    await queue.subscribe_batch(INBOX, GROUP, lambda: current["options"], seen)
    await eventually(lambda: len(seen.seen) == 4)
    assert seen.shapes == [["m0"], ["m1", "m2", "m3"]]


async def test_a_detach_from_inside_the_handler_hands_back_the_rest(queue):
    await queue.ensure_subscription(INBOX, GROUP)
    await queue.publish(INBOX, probe("a", key="a", at=1))
    await queue.publish(INBOX, probe("b", key="b", at=2))

    async def decide(batch):
        await queue.detach(INBOX, GROUP)  # the seat's lease moved mid-drain
        return None

    seen = BatchRecorder(decide)
    await queue.subscribe_batch(INBOX, GROUP, BatchOptions(linger_seconds=0.5, max_batch=10), seen)
    await eventually(lambda: seen.batches)
    await eventually(lambda: _pending(queue, 1))
    assert not queue.is_attached(INBOX, GROUP)
    await throughout(lambda: len(seen.batches) == 1)
    again = BatchRecorder()
    await queue.subscribe_batch(INBOX, GROUP, BatchOptions(linger_seconds=0), again)
    await eventually(lambda: again.batches)
    assert again.shapes == [["b"]]
    assert again.batches[0].deliveries[0].deliveries == 2
