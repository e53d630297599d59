"""Conformance: competing consumers and handing a seat from one node to another (seed 000,
"Topic Structure": one consumer group per seat, membership IS ownership; "Delivery
Semantics": DEFER at the head for the next holder, counts that ride on the message, the
ack clock as a backstop). Nodes are clients of one broker. Every case runs against both
backends, except the last, which inspects the twin's broker after a node stopped."""
from __future__ import annotations

import asyncio

import pytest

from engine.queue.contract import Outcome, SubscriptionError
from tests.queue.recording import BUDGET, GROUP, INBOX, Recorder, label, probe
from tests.queue.waiting import eventually, throughout

pytestmark = pytest.mark.timeout(30)


async def _pending(queue, n: int) -> bool:
    return await queue.pending(INBOX, GROUP) == n


async def test_competing_consumers_of_one_group_each_get_a_message_once(backend):
    nodes = [await backend.client(f"node-{n}") for n in "abc"]
    await nodes[0].ensure_subscription(INBOX, GROUP)
    seen: list[tuple[str, str]] = []

    def recorder(node_id):
        async def handle(delivery):
            seen.append((node_id, label(delivery.event)))
            await asyncio.sleep(0)  # let a peer fetch
        return handle

    for node in nodes:
        await node.subscribe(INBOX, GROUP, recorder(node.node_id))
    names = [f"m{n}" for n in range(30)]
    for name in names:
        await nodes[0].publish(INBOX, probe(name))
    await eventually(lambda: len(seen) == 30)
    await eventually(lambda: _pending(nodes[0], 0))
    await throughout(lambda: len(seen) == 30, window=0.5, message="a message was delivered twice")
    assert sorted(name for _, name in seen) == sorted(names)


async def test_a_busy_consumers_peer_takes_the_next_message(backend):
    a = await backend.client("node-a")
    b = await backend.client("node-b")
    await a.ensure_subscription(INBOX, GROUP)
    busy = Recorder()
    busy.hold_at_gate()
    await a.subscribe(INBOX, GROUP, busy)
    await a.publish(INBOX, probe("m1"))
    await eventually(lambda: busy.deliveries)
    peer = Recorder()
    await b.subscribe(INBOX, GROUP, peer)
    await a.publish(INBOX, probe("m2"))
    await eventually(lambda: peer.deliveries)
    assert busy.labels == ["m1"] and peer.labels == ["m2"]
    busy.gate.set()


async def test_a_second_node_attaching_competes_and_detaching_one_leaves_its_peers_attached(backend):
    a = await backend.client("node-a")
    b = await backend.client("node-b")
    await a.ensure_subscription(INBOX, GROUP)
    on_a, on_b = Recorder(), Recorder()
    await a.subscribe(INBOX, GROUP, on_a)
    await b.subscribe(INBOX, GROUP, on_b)
    assert a.is_attached(INBOX, GROUP) and b.is_attached(INBOX, GROUP)
    await a.detach(INBOX, GROUP)
    assert not a.is_attached(INBOX, GROUP)
    assert b.is_attached(INBOX, GROUP)
    for name in ("m1", "m2"):
        await a.publish(INBOX, probe(name))
    await eventually(lambda: len(on_b.deliveries) == 2)
    assert not on_a.deliveries


async def test_attaching_twice_on_one_node_is_refused(queue):
    await queue.subscribe(INBOX, GROUP, Recorder())
    with pytest.raises(SubscriptionError):
        await queue.subscribe(INBOX, GROUP, Recorder())


async def test_subscribe_creates_a_missing_subscription_from_the_beginning(queue):
    seen = Recorder()
    await queue.subscribe(INBOX, GROUP, seen)
    assert await queue.list_subscriptions(INBOX) == [(INBOX, GROUP)]
    await queue.publish(INBOX, probe("m1"))
    await eventually(lambda: seen.deliveries)


async def test_delivery_counts_survive_a_detach_and_reattach(queue):
    await queue.ensure_subscription(INBOX, GROUP)
    await queue.publish(INBOX, probe("m1"))
    # Two failures, then a hand-back: three deliveries spent before letting go.
    first = Recorder(lambda d: Outcome.NAK if d.deliveries < 3 else Outcome.DEFER)
    await queue.subscribe(INBOX, GROUP, first)
    await eventually(lambda: len(first.deliveries) == 3)
    await queue.detach(INBOX, GROUP)
    again = Recorder()
    await queue.subscribe(INBOX, GROUP, again)
    await eventually(lambda: again.deliveries)
    assert again.deliveries[0].deliveries == 4
    assert again.deliveries[0].deliveries_left == BUDGET - 4


async def test_a_deferral_by_one_node_is_received_by_another_with_its_count(backend):
    a = await backend.client("node-a")
    b = await backend.client("node-b")
    await a.ensure_subscription(INBOX, GROUP)
    await a.publish(INBOX, probe("m1"))
    await a.publish(INBOX, probe("m2"))
    loser = Recorder(lambda d: Outcome.DEFER)  # the lease moved: hand it back
    await a.subscribe(INBOX, GROUP, loser)
    await eventually(lambda: loser.deliveries)
    winner = Recorder()
    await b.subscribe(INBOX, GROUP, winner)
    await eventually(lambda: len(winner.deliveries) == 2)
    assert winner.labels == ["m1", "m2"]  # the handed-back message first
    assert [d.deliveries for d in winner.deliveries] == [2, 1]
    assert winner.deliveries[0].deliveries_left == BUDGET - 2
    assert loser.labels == ["m1"]  # quiesced after deferring: it took nothing more


async def test_a_message_in_flight_when_its_node_detaches_goes_to_a_peer_at_once(backend):
    a = await backend.client("node-a")
    b = await backend.client("node-b")
    await a.ensure_subscription(INBOX, GROUP)
    stuck = Recorder()
    stuck.hold_at_gate()  # never answers
    await a.subscribe(INBOX, GROUP, stuck)
    await a.publish(INBOX, probe("m1"))
    await eventually(lambda: stuck.deliveries)
    peer = Recorder()
    await b.subscribe(INBOX, GROUP, peer)
    await throughout(lambda: not peer.deliveries, window=0.3, message="an in-flight message went to a peer")
    await a.detach(INBOX, GROUP)  # well inside the ack window
    await eventually(lambda: peer.deliveries)
    assert peer.deliveries[0].deliveries == 2
    assert label(peer.deliveries[0].event) == "m1"


async def test_a_stopped_nodes_in_flight_mail_returns_to_the_subscription(backend):
    a = await backend.client("node-a")
    b = await backend.client("node-b")
    await a.ensure_subscription(INBOX, GROUP)
    stuck = Recorder()
    stuck.hold_at_gate()
    await a.subscribe(INBOX, GROUP, stuck)
    await a.publish(INBOX, probe("m1"))
    await eventually(lambda: stuck.deliveries)
    await a.close()  # the node dies holding m1
    await eventually(lambda: _pending(b, 1), message="the stopped node's in-flight mail was lost")
    peer = Recorder()
    await b.subscribe(INBOX, GROUP, peer)
    await eventually(lambda: peer.deliveries)
    assert peer.labels == ["m1"]
    assert peer.deliveries[0].deliveries == 2


async def test_the_twin_lets_a_test_inspect_what_a_stopped_nodes_subscription_retained(memory_backend):
    backend = memory_backend  # what only the twin has: its broker object, inspected directly
    a = await backend.client("node-a")
    await a.ensure_subscription(INBOX, GROUP)
    stuck = Recorder()
    stuck.hold_at_gate()
    await a.subscribe(INBOX, GROUP, stuck)
    held = await a.publish(INBOX, probe("m1"))
    waiting = await a.publish(INBOX, probe("m2"))
    await eventually(lambda: stuck.deliveries)
    await a.stop()
    retained = backend.broker.retained(INBOX, GROUP)
    assert [e.id for e in retained] == [held.id, waiting.id]  # the returned one first
    assert backend.broker.delivery_count(INBOX, GROUP, held.id) == 1
    assert backend.broker.delivery_count(INBOX, GROUP, waiting.id) == 0
    assert backend.broker.dead_letters(INBOX) == []
