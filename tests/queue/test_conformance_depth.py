"""Conformance: what a mailbox holds, as the dashboard's "is it healthy" reads it (the contract's
`depth` and `dead_letters`; seed 000, "Delivery Semantics": a message is waiting, delivered and
unsettled, or gone -- acked or dead-lettered to `dlq.{topic}.{group}.{digest}`). Every case runs
against both backends."""
from __future__ import annotations

import pytest

from engine.queue import topics
from engine.queue.contract import Depth, SubscriptionError
from tests.queue.recording import GROUP, INBOX, Recorder, probe
from tests.queue.waiting import eventually

pytestmark = pytest.mark.timeout(60)

DAY = 24 * 3600.0


async def test_depth_splits_waiting_from_in_flight_and_ages_the_oldest(queue):
    await queue.ensure_subscription(INBOX, GROUP)
    assert await queue.depth(INBOX, GROUP) == Depth(0, 0, None)
    for name in ("one", "two", "three"):
        await queue.publish(INBOX, probe(name))
    waiting = await queue.depth(INBOX, GROUP)
    assert (waiting.pending, waiting.in_flight) == (3, 0)
    assert waiting.oldest_age_seconds is not None and waiting.oldest_age_seconds >= 0
    # It is an age, not a constant: read again, it has grown.
    await eventually(lambda: _older(queue, waiting.oldest_age_seconds), message="the oldest message to age")

    seen = Recorder()
    gate = seen.hold_at_gate()
    await queue.subscribe(INBOX, GROUP, seen)
    await eventually(lambda: _split(queue, 2, 1), message="one delivered and held, two waiting")
    assert (await queue.depth(INBOX, GROUP)).total == await queue.pending(INBOX, GROUP) == 3
    gate.set()
    await eventually(lambda: _split(queue, 0, 0), message="everything settled")
    assert (await queue.depth(INBOX, GROUP)).oldest_age_seconds is None


async def test_depth_of_a_subscription_that_does_not_exist_is_refused(queue):
    with pytest.raises(SubscriptionError):
        await queue.depth(topics.agent_inbox("nobody"), topics.inbox_group("nobody"))


async def test_dead_letters_are_counted_per_pair_and_by_when(queue):
    other = (topics.agent_inbox("bo"), topics.inbox_group("bo"))
    await queue.ensure_subscription(INBOX, GROUP)
    await queue.ensure_subscription(*other)
    assert await queue.dead_letters(INBOX, GROUP, DAY) == 0
    # Bytes this build cannot decode are dead-lettered on their first delivery.
    await queue.publish(INBOX, probe("garbled").replace(delegation_depth="deep"))
    await queue.subscribe(INBOX, GROUP, Recorder())
    await eventually(lambda: _dead(queue, 1), message="the dead letter to be counted")
    assert await queue.dead_letters(*other, DAY) == 0
    # Outside a window shorter than its age, it is not counted.
    await eventually(lambda: _dead(queue, 0, within=0.3), message="the dead letter to leave a 0.3 s window")
    assert await queue.dead_letters(INBOX, GROUP, DAY) == 1


async def _split(queue, pending: int, in_flight: int) -> bool:
    depth = await queue.depth(INBOX, GROUP)
    return (depth.pending, depth.in_flight) == (pending, in_flight)


async def _older(queue, than: float) -> bool:
    return (await queue.depth(INBOX, GROUP)).oldest_age_seconds > than


async def _dead(queue, n: int, within: float = DAY) -> bool:
    return await queue.dead_letters(INBOX, GROUP, within) == n
