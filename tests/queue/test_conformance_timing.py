"""Conformance: the product's own timings, with the default `Tuning` (seed 000, "Delivery
Semantics": a failure comes back one second later, doubling to thirty, for 25 deliveries in
all, then the dead letter; "The ack clock is real": a message nobody settles comes back when
the ack window passes, counting a delivery; contract.py: in-progress acknowledgements keep a
live holder's mail from doing so).

Every case runs on both backends. The twin runs the defaults whole on a virtual clock, so its
figures are exact; the real broker runs them in real seconds as far as a test can wait (the
first three spacings; the deferral budget, which costs no time) and the ack window cases on
a window shortened through `Tuning`, with `tests/queue/test_jetstream_only.py` pinning the
window the consumer is really created with. The numbers are written out, never read from
the constants they check.
"""
from __future__ import annotations

import itertools

import pytest

from engine.queue import topics
from engine.queue.contract import BatchOptions, Outcome, Tuning
from tests.queue.recording import BUDGET, GROUP, INBOX, BatchRecorder, Recorder, probe
from tests.queue.waiting import DEADLINE, eventually, throughout

pytestmark = pytest.mark.timeout(90)

# Seed 000: after the 1st, 2nd, ... 24th failed delivery, the spacing before the next one.
SPACING = [1, 2, 4, 8, 16] + [30] * 19
ACK_WINDOW = 60      # contract.py: the ack window, kept alive by in-progress acknowledgements
SHORT_WINDOW = 2.0   # the real broker's window in the ack cases: three of them are waited out


def _window(backend) -> float:
    """The ack window a case runs on: the default on the virtual clock, a short one for real."""
    return ACK_WINDOW if backend.virtual else SHORT_WINDOW


async def _ack_client(backend, node_id: str):
    return await backend.client(node_id, tuning=Tuning(ack_wait_seconds=_window(backend)))


async def test_a_failure_comes_back_after_one_second_doubling_to_thirty_then_dead_letters_at_25(timed):
    queue = await timed.client("node-a")
    await queue.ensure_subscription(INBOX, GROUP)
    sent = await queue.publish(INBOX, probe("failing"))
    at: list[float] = []

    def fail(delivery):
        at.append(timed.now())
        return Outcome.NAK

    seen = Recorder(fail)
    await queue.subscribe(INBOX, GROUP, seen)
    # The twin watches every spacing; the broker the first three (1 + 2 + 4 s of real time).
    watched = len(SPACING) if timed.virtual else 3
    for n, spacing in enumerate(SPACING[:watched], start=1):
        await eventually(lambda n=n: len(seen.deliveries) == n, timeout=spacing + DEADLINE)
        if timed.virtual:
            # Not a moment sooner: a millisecond short of the spacing, nothing has come back.
            await timed.elapse(spacing - 0.001)
            await throughout(lambda n=n: len(seen.deliveries) == n, window=0.05, message=f"back before {spacing} s")
            await timed.elapse(0.001)
    await eventually(lambda: len(seen.deliveries) == watched + 1, timeout=SPACING[watched - 1] + DEADLINE)
    gaps = [later - earlier for earlier, later in itertools.pairwise(at)]
    if timed.virtual:
        assert gaps == pytest.approx(SPACING)  # and not a moment later either
    else:
        assert all(gap >= spacing for gap, spacing in zip(gaps, SPACING[:len(gaps)], strict=True)), gaps  # never sooner than asked
    assert [d.deliveries for d in seen.deliveries] == list(range(1, watched + 2))
    if not timed.virtual:
        return
    # The 25th failure is the last: dead-lettered, and nothing comes back however long one waits.
    await queue.ensure_subscription(topics.dlq_subject(INBOX, GROUP), "operator")
    await eventually(lambda: _pending(queue, topics.dlq_subject(INBOX, GROUP), "operator", 1))
    await timed.elapse(10 * 60)
    await throughout(lambda: len(seen.deliveries) == BUDGET, window=0.2, message="delivered past the budget")
    assert seen.deliveries[-1].deliveries_left == 0
    await eventually(lambda: _pending(queue, INBOX, GROUP, 0), message="the dead-lettered message stayed pending")
    dead = Recorder()
    await queue.subscribe(topics.dlq_subject(INBOX, GROUP), "operator", dead)
    await eventually(lambda: dead.deliveries)
    assert dead.deliveries[0].event.id == sent.id


async def _pending(queue, topic: str, group: str, n: int) -> bool:
    return await queue.pending(topic, group) == n


async def test_the_default_budget_is_25_deliveries_then_the_dead_letter(timed):
    # Deferrals spend the budget as failures do and cost no time, so the real broker runs the
    # default budget whole.
    queue = await timed.client("node-a")
    await queue.ensure_subscription(INBOX, GROUP)
    sent = await queue.publish(INBOX, probe("handed-back"))
    seen = Recorder(lambda d: Outcome.DEFER)
    await queue.subscribe(INBOX, GROUP, seen)
    for n in range(1, BUDGET + 1):
        await eventually(lambda n=n: len(seen.deliveries) == n)
        await queue.unquiesce(INBOX, GROUP)
    await eventually(lambda: _pending(queue, INBOX, GROUP, 0))
    await throughout(lambda: len(seen.deliveries) == BUDGET, window=0.5, message="delivered past the budget")
    assert [d.deliveries_left for d in seen.deliveries] == list(range(BUDGET - 1, -1, -1))
    dlq = topics.dlq_subject(INBOX, GROUP)
    await queue.ensure_subscription(dlq, "operator")
    dead = Recorder()
    await queue.subscribe(dlq, "operator", dead)
    await eventually(lambda: dead.deliveries)
    assert [d.event.id for d in dead.deliveries] == [sent.id]


async def test_a_dead_holders_mail_comes_back_when_the_ack_window_passes_counting_a_delivery(timed):
    window = _window(timed)
    a = await _ack_client(timed, "node-a")
    await a.ensure_subscription(INBOX, GROUP)
    await a.publish(INBOX, probe("in-flight"))
    held = Recorder()
    held.hold_at_gate()  # a turn that never ends: its node is killed mid-turn
    asked_at = timed.now()  # the broker delivers after this, and its ack clock starts then
    await a.subscribe(INBOX, GROUP, held)
    await eventually(lambda: held.deliveries)
    await timed.crash(a)
    b = await _ack_client(timed, "node-b")
    seen = Recorder()
    await b.subscribe(INBOX, GROUP, seen)
    if timed.virtual:
        await timed.elapse(window - 0.5)
        await throughout(lambda: not seen.deliveries, window=0.2, message="redelivered inside the ack window")
        await timed.elapse(0.5)
    await eventually(lambda: seen.deliveries, timeout=window + DEADLINE)
    waited = timed.now() - asked_at
    assert waited == window if timed.virtual else waited >= window, waited
    assert [(d.deliveries, d.deliveries_left) for d in seen.deliveries] == [(2, BUDGET - 2)]
    await eventually(lambda: _pending(b, INBOX, GROUP, 0))


async def test_mail_a_running_handler_holds_outlives_the_ack_window_and_is_delivered_once(timed):
    window = _window(timed)
    a = await _ack_client(timed, "node-a")
    await a.ensure_subscription(INBOX, GROUP)
    await a.publish(INBOX, probe("long-turn"))
    running = Recorder()
    gate = running.hold_at_gate()
    await a.subscribe(INBOX, GROUP, running)
    await eventually(lambda: running.deliveries)
    # A peer on the same subscription: it would take the message the moment its window passed.
    b = await _ack_client(timed, "node-b")
    peer = Recorder()
    await b.subscribe(INBOX, GROUP, peer)
    await _outlast(timed, 3 * window, lambda: not peer.deliveries and len(running.deliveries) == 1)
    gate.set()
    await eventually(lambda: _pending(a, INBOX, GROUP, 0))
    await throughout(lambda: not peer.deliveries and len(running.deliveries) == 1, window=0.2)


async def test_a_drain_waiting_behind_a_long_partition_outlives_the_ack_window(timed):
    window = _window(timed)
    a = await _ack_client(timed, "node-a")
    await a.ensure_subscription(INBOX, GROUP)
    await a.publish(INBOX, probe("first", key="one", at=1))
    await a.publish(INBOX, probe("waiting", key="two", at=2))
    batches = BatchRecorder(lambda batch: None)
    gate = batches.hold_at_gate()
    await a.subscribe_batch(INBOX, GROUP, BatchOptions(linger_seconds=0, max_batch=10), batches)
    await eventually(lambda: batches.batches)
    assert batches.shapes == [["first"]]  # "waiting" was drained with it and waits its turn
    b = await _ack_client(timed, "node-b")
    peer = Recorder()
    await b.subscribe(INBOX, GROUP, peer)
    await _outlast(timed, 3 * window, lambda: not peer.deliveries and len(batches.batches) == 1)
    gate.set()
    await eventually(lambda: len(batches.batches) == 2)
    assert batches.shapes == [["first"], ["waiting"]]
    assert batches.batches[1].deliveries[0].deliveries == 1  # never redelivered while it waited
    await eventually(lambda: _pending(a, INBOX, GROUP, 0))
    assert not peer.deliveries


async def _outlast(backend, seconds: float, holds) -> None:
    """Let `seconds` pass while `holds` stays true: the virtual clock in heartbeat-sized steps
    (each step checked), the real broker by watching the condition for that long."""
    if backend.virtual:
        step = ACK_WINDOW / 6
        for _ in range(int(seconds / step)):
            await backend.elapse(step)
            await throughout(holds, window=0.05, message="redelivered while its holder was alive")
    else:
        await throughout(holds, window=seconds, message="redelivered while its holder was alive")
