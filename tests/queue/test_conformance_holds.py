"""Conformance: holding a subscription and letting go of it (seed 000, "Busy agents queue;
held agents wait on the broker", "Letting go of a subscription: four verbs", "Every durable
subscription can be listed"). Every case runs against both backends."""
from __future__ import annotations

import pytest

from engine.queue import topics
from engine.queue.contract import SubscriptionError
from tests.queue.recording import GROUP, INBOX, Recorder, label, probe
from tests.queue.waiting import eventually, throughout

pytestmark = pytest.mark.timeout(30)


async def _pending(queue, n: int, topic: str = INBOX, group: str = GROUP) -> bool:
    return await queue.pending(topic, group) == n


async def test_a_held_seats_mail_is_neither_delivered_nor_republished_until_the_hold_lifts(queue):
    await queue.ensure_subscription(INBOX, GROUP)
    wire: list[str] = []  # every copy that reaches the stream, republishes included
    watch = await queue.subscribe_stream(INBOX, lambda e: _append(wire, label(e)))
    seen = Recorder()
    await queue.subscribe(INBOX, GROUP, seen)
    await queue.hold(INBOX, GROUP, "sandbox")
    for name in ("m1", "m2", "m3"):
        await queue.publish(INBOX, probe(name))
    await eventually(lambda: len(wire) == 3)
    await throughout(lambda: not seen.deliveries and len(wire) == 3, message="a held seat was served or republished to")
    await eventually(lambda: _pending(queue, 3), message="the held mail was not all pending")
    await queue.release(INBOX, GROUP, "sandbox")
    await eventually(lambda: len(seen.deliveries) == 3)
    assert seen.labels == ["m1", "m2", "m3"]  # in order
    assert [d.deliveries for d in seen.deliveries] == [1, 1, 1]  # waiting cost nothing
    await throughout(lambda: len(wire) == 3, window=0.3, message="delivery republished something")
    await watch.close()


async def _append(into: list, value) -> None:
    into.append(value)


async def test_a_hold_taken_before_attaching_applies_on_attach(queue):
    await queue.ensure_subscription(INBOX, GROUP)
    await queue.hold(INBOX, GROUP, "recovered-run")
    await queue.publish(INBOX, probe("m1"))
    seen = Recorder()
    await queue.subscribe(INBOX, GROUP, seen)
    await throughout(lambda: not seen.deliveries, message="a hold taken before attaching was ignored")
    await queue.release(INBOX, GROUP, "recovered-run")
    await eventually(lambda: seen.deliveries)


async def test_every_named_hold_must_lift_before_mail_flows(queue):
    await queue.ensure_subscription(INBOX, GROUP)
    seen = Recorder()
    await queue.subscribe(INBOX, GROUP, seen)
    await queue.hold(INBOX, GROUP, "sandbox")
    await queue.hold(INBOX, GROUP, "budget")
    assert queue.holds(INBOX, GROUP) == frozenset({"sandbox", "budget"})
    await queue.publish(INBOX, probe("m1"))
    await queue.release(INBOX, GROUP, "sandbox")
    assert queue.holds(INBOX, GROUP) == frozenset({"budget"})
    await throughout(lambda: not seen.deliveries, message="one hold lifting released the seat")
    await queue.release(INBOX, GROUP, "budget")
    assert queue.holds(INBOX, GROUP) == frozenset()
    await eventually(lambda: seen.deliveries)


async def test_taking_one_hold_twice_needs_one_release(queue):
    await queue.ensure_subscription(INBOX, GROUP)
    seen = Recorder()
    await queue.subscribe(INBOX, GROUP, seen)
    await queue.hold(INBOX, GROUP, "sandbox")
    await queue.hold(INBOX, GROUP, "sandbox")
    await queue.publish(INBOX, probe("m1"))
    await queue.release(INBOX, GROUP, "sandbox")
    await eventually(lambda: seen.deliveries)


async def test_a_hold_on_one_subscription_leaves_another_flowing(queue):
    control = topics.agent_control("ada")
    control_group = topics.control_group("ada")
    await queue.ensure_subscription(INBOX, GROUP)
    await queue.ensure_subscription(control, control_group)
    inbox_seen, control_seen = Recorder(), Recorder()
    await queue.subscribe(INBOX, GROUP, inbox_seen)
    await queue.subscribe(control, control_group, control_seen)
    await queue.hold(INBOX, GROUP, "sandbox")
    await queue.publish(INBOX, probe("wake"))
    await queue.publish(control, probe("run-completed"))
    await eventually(lambda: control_seen.deliveries)
    assert not inbox_seen.deliveries


async def test_pause_delivery_holds_mail_until_resumed(queue):
    await queue.ensure_subscription(INBOX, GROUP)
    await queue.pause_delivery(INBOX, GROUP)
    seen = Recorder()
    await queue.subscribe(INBOX, GROUP, seen)
    await queue.publish(INBOX, probe("m1"))
    await queue.publish(INBOX, probe("m2"))
    await throughout(lambda: not seen.deliveries, message="a paused seat was served")
    await eventually(lambda: _pending(queue, 2), message="the paused mail was not pending")
    await queue.resume_delivery(INBOX, GROUP)
    await eventually(lambda: len(seen.deliveries) == 2)
    assert seen.labels == ["m1", "m2"]
    assert [d.deliveries for d in seen.deliveries] == [1, 1]


async def test_ensure_subscription_is_idempotent_and_listed_as_its_exact_pair(queue):
    await queue.ensure_subscription(INBOX, GROUP)
    await queue.publish(INBOX, probe("m1"))
    await queue.ensure_subscription(INBOX, GROUP)  # must neither reset nor duplicate the mailbox
    await eventually(lambda: _pending(queue, 1), message="the mailbox was reset or duplicated")
    assert await queue.list_subscriptions(INBOX) == [(INBOX, GROUP)]
    seen = Recorder()
    await queue.subscribe(INBOX, GROUP, seen)
    await eventually(lambda: seen.deliveries)
    await throughout(lambda: len(seen.deliveries) == 1, window=0.3)


async def test_list_subscriptions_matches_wildcards_and_returns_exact_pairs(backend):
    a = await backend.client("node-a")
    b = await backend.client("node-b")
    bob_inbox = topics.agent_inbox("bob")
    await a.ensure_subscription(INBOX, GROUP)
    await b.ensure_subscription(bob_inbox, topics.inbox_group("bob"))  # another node's mailbox
    await a.ensure_subscription(topics.agent_control("ada"), topics.control_group("ada"))
    await a.ensure_subscription(topics.NOTIFICATIONS_INBOUND, topics.NOTIFICATIONS_GROUP)
    listed = await a.list_subscriptions(topics.agent_pattern("inbox"))
    assert sorted(listed) == sorted([(INBOX, GROUP), (bob_inbox, topics.inbox_group("bob"))])
    assert sorted(await a.list_subscriptions("crewlet.agent.ada.*")) == sorted(
        [(INBOX, GROUP), (topics.agent_control("ada"), topics.control_group("ada"))]
    )
    assert await a.list_subscriptions("crewlet.notifications.>") == [
        (topics.NOTIFICATIONS_INBOUND, topics.NOTIFICATIONS_GROUP)
    ]
    assert await a.list_subscriptions("crewlet.agent.nobody.inbox") == []


async def test_detach_keeps_the_subscription_its_mail_and_its_counts(queue):
    await queue.ensure_subscription(INBOX, GROUP)
    seen = Recorder()
    await queue.subscribe(INBOX, GROUP, seen)
    assert queue.is_attached(INBOX, GROUP)
    await queue.detach(INBOX, GROUP)
    assert not queue.is_attached(INBOX, GROUP)
    await queue.publish(INBOX, probe("m1"))
    await throughout(lambda: not seen.deliveries, message="a detached consumer was served")
    await eventually(lambda: _pending(queue, 1), message="a detached subscription lost its mail")
    assert await queue.list_subscriptions(INBOX) == [(INBOX, GROUP)]
    again = Recorder()
    await queue.subscribe(INBOX, GROUP, again)
    await eventually(lambda: again.deliveries)
    assert again.deliveries[0].deliveries == 1


async def test_delete_subscription_destroys_the_mail_without_an_attachment(backend):
    owner = await backend.client("node-a")
    janitor = await backend.client("node-b")  # never attached to it
    await owner.ensure_subscription(INBOX, GROUP)
    await owner.publish(INBOX, probe("m1"))
    await owner.publish(INBOX, probe("m2"))
    await janitor.delete_subscription(INBOX, GROUP)
    assert await janitor.list_subscriptions(INBOX) == []
    await owner.ensure_subscription(INBOX, GROUP)
    assert await owner.pending(INBOX, GROUP) == 0
    seen = Recorder()
    await owner.subscribe(INBOX, GROUP, seen)
    await throughout(lambda: not seen.deliveries, message="a deleted subscription's mail came back")


async def test_delete_subscription_stops_an_attached_consumer(queue):
    await queue.ensure_subscription(INBOX, GROUP)
    seen = Recorder()
    await queue.subscribe(INBOX, GROUP, seen)
    await queue.delete_subscription(INBOX, GROUP)
    await eventually(lambda: not queue.is_attached(INBOX, GROUP))
    await queue.publish(INBOX, probe("dropped"))  # nothing covers the subject any more
    await throughout(lambda: not seen.deliveries)
    assert await queue.list_subscriptions(INBOX) == []


async def test_quiesce_needs_an_attachment(queue):
    await queue.ensure_subscription(INBOX, GROUP)
    with pytest.raises(SubscriptionError):
        await queue.quiesce(INBOX, GROUP)
