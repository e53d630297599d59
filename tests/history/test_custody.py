"""Custody (seed 002, "Custody: the rows of a node without data"): what a node without data
publishes is stored exactly once, on one data node; a batch two data nodes wrote is kept by
the claim's winner and deleted by the other, at once or at its next pass or boot; until then
the fleet's reads hold each row once. Real queues (twin and nats-server), real coordination
stores, a real SQLite store per node."""
from __future__ import annotations

import asyncio
import json
from datetime import datetime, timedelta, timezone

import pytest
from django.db import connections

from engine.coord.local import LocalCoord
from engine.history import custody
from engine.history.custody import CLAIMS_BUCKET, CustodyKeeper, CustodySender
from engine.queue import topics
from events import custody as store
from events.types.wakes import CustodyBatch
from tests.events.factories import make_event
from tests.history.conftest import fleet_db
from tests.queue.waiting import eventually

pytestmark = [fleet_db, pytest.mark.timeout(90)]


def rows(using: str) -> set[str]:
    with connections[using].cursor() as cursor:
        cursor.execute("SELECT event_id FROM crewlet_events")
        return {r[0] for r in cursor.fetchall()}


async def stored_ids(using: str) -> set[str]:
    return await asyncio.to_thread(rows, using)


async def stateless(fleet, node_id: str = "node-s", **kwargs) -> tuple[object, CustodySender]:
    """A node without data: its queue, with the custody sender as its publish listener."""
    queue = await fleet.queue(node_id)
    sender = CustodySender(queue, node_id, **kwargs)
    queue.add_publish_listener(sender)
    await sender.start()
    return queue, sender


async def keeper(fleet, node_id: str, using: str, coord=None, **kwargs) -> CustodyKeeper:
    made = CustodyKeeper(queue=await fleet.queue(node_id), coord=coord or await fleet.coord(node_id), node_id=node_id,
                         run_write=fleet.store_threads(f"{node_id}-w"), horizon_hours=720, using=using, **kwargs)
    return made


async def publish(queue, events) -> None:
    for event in events:
        await queue.publish(topics.event_subject(event.type), event)


def test_the_custody_numbers_are_the_seeds():
    assert custody.LINGER_SECONDS == 1.0                     # "buffered for at most a second"
    assert custody.MAX_BATCH_EVENTS == 256                   # "batches of up to 256 events ...
    assert custody.MAX_BATCH_BYTES == 1024 * 1024            # ... or 1 MiB"
    assert custody.BUFFER_EVENTS == 4096                     # "holds 4 096 events while the broker is unreachable"
    assert custody.SETTLE_SECONDS == 60.0                    # "a pass a minute"
    assert (topics.CUSTODY_RECORDS, topics.CUSTODY_GROUP) == ("crewlet.custody.records", "event-custody")
    assert topics.stream_for(topics.CUSTODY_RECORDS).name == "CREWLET_CUSTODY"


async def test_what_a_node_without_data_publishes_is_stored_once_on_a_data_node(fleet):
    queue, sender = await stateless(fleet)  # the seed's linger: a second at most
    data = await keeper(fleet, "node-d", "default")
    await data.start()
    kept = [make_event("task_assigned", task=f"t{i}") for i in range(600)]
    wake = make_event("raw_webhook", integration="github")  # not stored anywhere: the row is inbound_delivery
    await publish(queue, [*kept, wake])
    expected = {e.id.hex for e in kept}
    await eventually(lambda: stored_ids("default"), message="the first batch to be written")
    await eventually(lambda: _has(stored_ids("default"), expected), message="every event to be kept")
    assert await stored_ids("default") == expected
    assert sender.stats.batches >= 3 and sender.stats.events == 600  # 256 to a batch at most
    await eventually(lambda: data.stats.kept == sender.stats.batches, message="every batch settled as kept")
    assert data.stats.deleted == 0
    assert await asyncio.to_thread(store.unsettled, using="default") == []  # every batch settled as kept
    await data.stop(False)
    await sender.close(5)


async def _has(found, expected) -> bool:
    return expected <= await found


async def test_two_data_nodes_in_the_group_keep_every_event_exactly_once(fleet):
    queue, sender = await stateless(fleet, linger=0.05, max_events=20)
    first, second = await keeper(fleet, "node-d1", "default"), await keeper(fleet, "node-d2", "peer1")
    await first.start()
    await second.start()
    events = [make_event("task_assigned", task=f"t{i}") for i in range(300)]
    await publish(queue, events)
    expected = {e.id.hex for e in events}

    async def all_kept() -> bool:
        return (await stored_ids("default")) | (await stored_ids("peer1")) == expected

    await eventually(all_kept, message="every event kept by one data node or the other")
    one, two = await stored_ids("default"), await stored_ids("peer1")
    assert not one & two and len(one) + len(two) == 300
    await first.stop(False)
    await second.stop(False)
    await sender.close(5)


async def test_a_batch_two_data_nodes_wrote_is_kept_by_the_claims_winner_and_read_once_until_settled(fleet):
    """d1 writes a batch but cannot reach the coordination store, so it hands the batch back
    unsettled; d2 takes it again, wins the claim and keeps it. Until d1 settles, both stores
    hold the rows -- and the fleet's reads hold each once, its turn counts included."""
    queue, sender = await stateless(fleet, linger=0.05)
    cut_off = LocalCoord()
    await cut_off.close()  # every call: Unavailable -- the store is not answering d1
    d1 = await keeper(fleet, "node-d1", "default", coord=cut_off, patience_seconds=0.3)
    await d1.queue.subscribe(topics.CUSTODY_RECORDS, topics.CUSTODY_GROUP, d1.handle)  # start() would settle first
    turn = make_event("agent_turn_completed", agent_id="id-ada", turn_id="t1", tokens_in=100, tokens_out=20)
    step = make_event("task_assigned", task="before the turn", trace_id=turn.trace_id)
    await publish(queue, [step, turn])
    expected = {turn.id.hex, step.id.hex}
    await eventually(lambda: d1.stats.undecided >= 1, message="d1 to hand the batch back undecided")
    await d1.queue.detach(topics.CUSTODY_RECORDS, topics.CUSTODY_GROUP)
    assert await stored_ids("default") == expected  # written, unsettled
    (batch_id,) = await asyncio.to_thread(store.unsettled, using="default")

    d2 = await keeper(fleet, "node-d2", "peer1")
    await d2.start()
    await eventually(lambda: d2.stats.kept == 1, message="d2 to keep the batch handed back")
    assert await stored_ids("peer1") == expected

    # Both stores hold the rows now; the fleet holds each once.
    await fleet.answering("node-d2", "peer1")
    reads = await fleet.asker("node-d1", "default", ["node-d1", "node-d2"])
    page = await reads.events_page()
    assert sorted(i["id"] for i in page["items"]) == sorted(str(e.id) for e in (step, turn))
    assert len((await reads.trace(turn.trace_id))["items"]) == 2
    seed = await reads.seed(handles=[], move_types=[], pause_types=[], until=datetime.now(timezone.utc) + timedelta(minutes=1),
                            turns_since=datetime.now(timezone.utc) - timedelta(hours=1), feed_size=10, seat_replay=5)
    assert [(a, n, t) for _, a, n, t in seed["turns"]] == [("id-ada", 1, 120)]  # one turn, not two

    # d1 reaches the store again: its next pass finds d2's claim and deletes its copy.
    d1.coord = await fleet.coord("node-d1")
    assert await d1.settle_pass(settle_after=0) == 1
    assert await stored_ids("default") == set() and d1.stats.deleted == 1
    assert await asyncio.to_thread(store.unsettled, using="default") == []
    claim = await d1.coord.get(CLAIMS_BUCKET, batch_id)
    assert json.loads(claim.value)["keeper"] == "node-d2"
    seed = await reads.seed(handles=[], move_types=[], pause_types=[], until=datetime.now(timezone.utc) + timedelta(minutes=1),
                            turns_since=datetime.now(timezone.utc) - timedelta(hours=1), feed_size=10, seat_replay=5)
    assert [(a, n, t) for _, a, n, t in seed["turns"]] == [("id-ada", 1, 120)]
    await d2.stop(False)
    await sender.close(5)


async def test_a_crash_between_writing_and_claiming_is_settled_at_the_next_boot(fleet):
    coord = await fleet.coord("node-d1")
    await coord.ensure_bucket(CLAIMS_BUCKET)
    mine = [make_event("task_assigned", task="nobody claimed it")]
    theirs = [make_event("task_assigned", task="node-d2 kept it")]
    await asyncio.to_thread(store.write_batch, "batch-mine", "node-s", mine, using="default",
                            now=datetime.now(timezone.utc) - timedelta(minutes=5))
    await asyncio.to_thread(store.write_batch, "batch-theirs", "node-s", theirs, using="default",
                            now=datetime.now(timezone.utc) - timedelta(minutes=5))
    await coord.create(CLAIMS_BUCKET, "batch-theirs", json.dumps({"keeper": "node-d2"}).encode())
    d1 = await keeper(fleet, "node-d1", "default", coord=coord)
    await d1.start()  # the boot's settle pass
    assert await stored_ids("default") == {mine[0].id.hex}
    assert (d1.stats.kept, d1.stats.deleted) == (1, 1)
    assert await asyncio.to_thread(store.unsettled, using="default") == []
    await d1.stop(False)


async def test_a_batch_delivered_again_to_its_keeper_is_kept_once(fleet):
    coord = await fleet.coord("node-d1")
    d1 = await keeper(fleet, "node-d1", "default", coord=coord)
    await coord.ensure_bucket(CLAIMS_BUCKET)
    assert await d1.claim("batch-1") == "node-d1"
    assert await d1.claim("batch-1") == "node-d1"  # its own claim, read back: still its batch
    d2 = await keeper(fleet, "node-d2", "peer1", coord=await fleet.coord("node-d2"))
    assert await d2.claim("batch-1") == "node-d1"


async def test_a_full_buffer_drops_and_counts_rather_than_holding_the_publisher(fleet):
    queue, sender = await stateless(fleet, capacity=5, linger=0.01)
    await sender.queue.close()  # the broker is unreachable for the sender from now on
    events = [make_event("task_assigned", task=f"t{i}") for i in range(8)]
    for event in events:
        sender(topics.event_subject(event.type), event)  # the publish listener, as publish calls it
    await eventually(lambda: sender.stats.retries >= 1, message="a publish to fail and be retried")
    assert sender.buffered == 5 and sender.stats.dropped == 3
    assert not await sender.close(0.2)  # what the broker never took is counted, not waited on for ever
    assert sender.stats.dropped == 8


async def test_a_stopping_node_sends_what_it_buffered_without_waiting_out_the_linger(fleet):
    queue, sender = await stateless(fleet, linger=3600)
    data = await keeper(fleet, "node-d", "default")
    await data.start()
    event = make_event("task_assigned", task="the last thing it did")
    await publish(queue, [event])
    assert sender.buffered == 1
    assert await sender.close(5)
    await eventually(lambda: _has(stored_ids("default"), {event.id.hex}), message="the flushed batch to be kept")
    await data.stop(False)


async def test_a_batch_carries_every_event_as_it_was_published(fleet):
    queue, sender = await stateless(fleet, linger=0.01)
    tap_queue = await fleet.queue("node-tap")
    seen: list = []
    await tap_queue.subscribe(topics.CUSTODY_RECORDS, topics.CUSTODY_GROUP, lambda d: _record(seen, d))
    event = make_event("external_notification", agent_id="id-bob", channel="C1", payload={"unknown_field": [1, 2]})
    await publish(queue, [event])
    await eventually(lambda: seen, message="the batch")
    batch = seen[0]
    assert batch.type == CustodyBatch.TYPE and batch.source == "node-s"
    (carried,) = batch.get("events")
    assert carried["id"] == str(event.id) and carried["node"] == event.node and carried["payload"]["unknown_field"] == [1, 2]


async def _record(seen: list, delivery) -> None:
    seen.append(delivery.event)
