"""Conformance: publishing, publish listeners, mailboxes that exist before anyone attaches
(seed 000, "Publish Listeners", "A seat's mailbox exists before the seat is running",
"Topic Structure"). Every case runs against both backends."""
from __future__ import annotations

import logging

import pytest

from engine.queue import topics
from engine.queue.contract import Unreachable
from events.envelope import Event
from tests.queue.recording import GROUP, INBOX, PROBE, Recorder, label, probe
from tests.queue.waiting import eventually, throughout

pytestmark = pytest.mark.timeout(30)


async def _pending(queue, n: int) -> bool:  # JetStream's count trails the publish's ack: waited for
    return await queue.pending(INBOX, GROUP) == n


async def test_publish_stamps_the_node_on_a_copy_and_returns_it(queue):
    original = probe("m1")
    stamped = await queue.publish(topics.event_subject("probe"), original)
    assert stamped.node == queue.node_id
    assert stamped.id == original.id
    assert original.node == ""  # the caller's event is never written to


async def test_publish_keeps_an_existing_origin(queue):
    stamped = await queue.publish(topics.event_subject("probe"), probe("m1").replace(node="elsewhere"))
    assert stamped.node == "elsewhere"


async def test_the_subscriber_gets_the_stamped_event(queue):
    await queue.ensure_subscription(INBOX, GROUP)
    await queue.publish(INBOX, probe("m1"))
    seen = Recorder()
    await queue.subscribe(INBOX, GROUP, seen)
    await eventually(lambda: seen.deliveries)
    assert seen.deliveries[0].event.node == queue.node_id


async def test_publish_listeners_run_inline_on_the_stamped_copy(queue):
    heard: list[tuple[str, Event]] = []
    queue.add_publish_listener(lambda topic, event: heard.append((topic, event)))
    subject = topics.event_subject("probe")
    stamped = await queue.publish(subject, probe("m1"))
    # Inline: by the time publish returns, the listener has run.
    assert [(t, e.id, e.node) for t, e in heard] == [(subject, stamped.id, queue.node_id)]


async def test_a_failing_listener_is_logged_and_the_publish_still_succeeds(queue, caplog):
    def broken(topic, event):
        raise RuntimeError("listener broke")

    heard: list[str] = []
    queue.add_publish_listener(broken)
    queue.add_publish_listener(lambda topic, event: heard.append(label(event)))
    await queue.ensure_subscription(INBOX, GROUP)
    with caplog.at_level(logging.ERROR):
        stamped = await queue.publish(INBOX, probe("m1"))
    assert stamped.node == queue.node_id
    assert heard == ["m1"]  # the listener after the failing one still ran
    assert any(r.exc_info and "listener broke" in str(r.exc_info[1]) for r in caplog.records)
    await eventually(lambda: _pending(queue, 1), message="the message was not stored")


async def test_a_listener_hears_only_its_own_nodes_publishes(backend):
    a = await backend.client("node-a")
    b = await backend.client("node-b")
    heard: list[str] = []
    a.add_publish_listener(lambda topic, event: heard.append(label(event)))
    await b.publish(topics.event_subject("probe"), probe("from-b"))
    await a.publish(topics.event_subject("probe"), probe("from-a"))
    assert heard == ["from-a"]


async def test_a_repeated_dedupe_id_is_delivered_once(queue):
    await queue.ensure_subscription(INBOX, GROUP)
    await queue.publish(INBOX, probe("first"), dedupe_id="wake-1")
    await queue.publish(INBOX, probe("repeat"), dedupe_id="wake-1")
    await queue.publish(INBOX, probe("other"), dedupe_id="wake-2")
    await eventually(lambda: _pending(queue, 2), message="the two distinct ids were not pending")
    seen = Recorder()
    await queue.subscribe(INBOX, GROUP, seen)
    await eventually(lambda: len(seen.deliveries) == 2)
    await throughout(lambda: len(seen.deliveries) == 2)
    assert seen.labels == ["first", "other"]


async def test_unknown_event_types_travel_losslessly(queue):
    await queue.ensure_subscription(INBOX, GROUP)
    sent = Event(
        type="from_a_newer_build",
        source="future",
        payload={"nested": {"list": [1, "two", None], "flag": True}},
        extra={"novel_field": {"deep": [1.5, {"x": "y"}]}, "count": 3},
        trace_id="0af7651916cd43dd8448eb211c80319c",
        delegation_chain=("a", "b"),
    )
    stamped = await queue.publish(INBOX, sent)
    seen = Recorder()
    await queue.subscribe(INBOX, GROUP, seen)
    await eventually(lambda: seen.deliveries)
    got = seen.deliveries[0].event
    assert got.data is None
    assert got.to_wire() == stamped.to_wire()
    assert got.extra == {"novel_field": {"deep": [1.5, {"x": "y"}]}, "count": 3}


async def test_a_subscriber_never_shares_the_publishers_objects(queue):
    await queue.ensure_subscription(INBOX, GROUP)
    sent = probe("m1", items=["kept"])
    await queue.publish(INBOX, sent)
    sent.payload["items"].append("changed after publish")
    seen = Recorder()
    await queue.subscribe(INBOX, GROUP, seen)
    await eventually(lambda: seen.deliveries)
    got = seen.deliveries[0].event
    assert got is not sent and got.payload is not sent.payload
    assert got.payload["items"] == ["kept"]


async def test_mail_published_before_anyone_attaches_waits_for_the_attach(queue):
    await queue.ensure_subscription(INBOX, GROUP)
    for name in ("m1", "m2", "m3"):
        await queue.publish(INBOX, probe(name))
    await eventually(lambda: _pending(queue, 3), message="three messages waiting for the attach")
    seen = Recorder()
    await queue.subscribe(INBOX, GROUP, seen)
    await eventually(lambda: len(seen.deliveries) == 3)
    assert seen.labels == ["m1", "m2", "m3"]
    assert [d.deliveries for d in seen.deliveries] == [1, 1, 1]
    await eventually(lambda: _pending_is(queue, 0))


async def test_a_publish_no_subscription_covers_is_dropped(queue):
    ghost = topics.agent_inbox("ghost")
    await queue.publish(ghost, probe("lost"))  # no mailbox yet: the broker drops it
    await queue.ensure_subscription(ghost, GROUP)
    assert await queue.pending(ghost, GROUP) == 0
    seen = Recorder()
    await queue.subscribe(ghost, GROUP, seen)
    await throughout(lambda: not seen.deliveries, message="a dropped publish was delivered")
    await queue.publish(ghost, probe("kept"))
    await eventually(lambda: seen.deliveries)
    assert seen.labels == ["kept"]


async def test_a_limits_stream_keeps_what_was_published_before_any_subscription(queue):
    subject = topics.event_subject("probe")
    await queue.publish(subject, probe("recorded"))
    await queue.ensure_subscription(subject, "materializer")
    seen = Recorder()
    await queue.subscribe(subject, "materializer", seen)
    await eventually(lambda: seen.deliveries)
    assert seen.labels == ["recorded"]


async def test_each_group_on_a_topic_gets_every_message(queue):
    await queue.ensure_subscription(INBOX, "one")
    await queue.ensure_subscription(INBOX, "two")
    await queue.publish(INBOX, probe("m1"))
    first, second = Recorder(), Recorder()
    await queue.subscribe(INBOX, "one", first)
    await queue.subscribe(INBOX, "two", second)
    await eventually(lambda: first.deliveries and second.deliveries)
    assert first.labels == second.labels == ["m1"]


async def _pending_is(queue, n: int, topic: str = INBOX, group: str = GROUP) -> bool:
    return await queue.pending(topic, group) == n


def test_probe_is_an_unregistered_type():
    from events.envelope import model_for

    assert model_for(PROBE) is None


async def test_a_ping_is_answered_while_the_broker_serves_and_not_once_the_client_closed(backend):
    client = await backend.client("node-p")
    assert await client.ping(2.0) is True
    await client.close()
    assert await client.ping(0.5) is False  # an answer, never an exception: the node's probes read it


async def test_a_publish_the_client_cannot_carry_raises_unreachable_not_a_refusal(backend):
    """A closed client (a node stopping under a running turn) says so with `Unreachable`, the
    error a caller holding mail answers with a NAK: the message was not refused, the broker
    was not there to take it."""
    client = await backend.client("node-p")
    await client.close()
    with pytest.raises(Unreachable, match="is closed"):
        await client.publish(topics.event_subject("probe"), probe("m1"))
