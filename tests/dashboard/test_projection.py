"""The live projection: seeded from the event store, the seat leases and the pause records;
kept current by the stream; honest about what it lost (seed 000, "Broadcast Streams",
"Event Types"; seed 002, "What gets stored": the feed and the stored-not-fed class)."""
from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest
from asgiref.sync import sync_to_async

from dashboard.outbox import Outbox
from dashboard.projection import LiveProjection
from engine.coord.leases import LeaseManager, seat_key
from engine.coord.local import LocalCoord
from engine.queue.memory import MemoryBroker
from events.store import write_events
from seats.pauses import PauseBook
from tests.dashboard.conftest import TwinNode, make_event

pytestmark = pytest.mark.timeout(60)


def now() -> datetime:
    return datetime.now(timezone.utc)


async def projection_on(company, *, coord=None, feed_size: int = 300, stream_buffer: int = 8192):
    queue = MemoryBroker().client("node-1")
    node = TwinNode(queue=queue, company=company, coord=coord)
    projection = LiveProjection(node, feed_size=feed_size, stream_buffer=stream_buffer)
    await projection.start()
    return projection, queue


@pytest.mark.django_db(transaction=True)
async def test_the_seed_reads_the_feed_newest_first_without_the_stored_not_fed_class(company):
    at = now() - timedelta(minutes=5)
    history = [make_event("task_assigned", company, "alice", at=at + timedelta(seconds=i), task=f"t{i}") for i in range(5)]
    history.append(make_event("auxiliary_spend", company, "alice", at=at + timedelta(seconds=10), purpose="relevance"))
    await sync_to_async(write_events)(history)
    projection, queue = await projection_on(company, feed_size=3)
    try:
        assert projection.history == "ok"
        assert [item["task"] for item in projection.feed] == ["t4", "t3", "t2"]  # the ring keeps the newest three
        assert all(item["type"] != "auxiliary_spend" for item in projection.feed)
        assert {"category", "summary"} <= set(projection.feed[0])  # as GET /events lists it
    finally:
        await projection.stop(False)
        await queue.close()


@pytest.mark.django_db(transaction=True)
async def test_turns_and_tokens_count_the_last_24_hours_from_the_store_and_then_live(company):
    recent, old = now() - timedelta(hours=2), now() - timedelta(hours=25)
    await sync_to_async(write_events)([
        make_event("agent_turn_completed", company, "alice", at=recent, tokens_in=100, tokens_out=20, turn_id="a"),
        make_event("agent_turn_completed", company, "bob", at=recent, tokens_in=5, tokens_out=5, turn_id="b"),
        make_event("agent_turn_completed", company, "alice", at=recent, tokens_in=7, suspended=True, turn_id="c"),
        make_event("agent_turn_completed", company, "alice", at=old, tokens_in=1000, turn_id="d"),
    ])
    projection, queue = await projection_on(company)
    try:
        assert projection.totals_row()["turns_24h"] == 2 and projection.totals_row()["tokens_24h"] == 130
        assert projection.seat_row("alice")["turns_24h"] == 1 and projection.seat_row("alice")["tokens_24h"] == 120
        outbox = Outbox()
        projection.attach(outbox)
        projection.apply(make_event("agent_turn_completed", company, "bob", tokens_in=40, tokens_out=2, turn_id="e"))
        assert projection.totals_row() == {"turns_24h": 3, "tokens_24h": 172, "window_minutes": 1440}
        assert projection.seat_row("bob")["turns_24h"] == 2
    finally:
        await projection.stop(False)
        await queue.close()


@pytest.mark.django_db(transaction=True)
async def test_a_seat_is_seeded_from_its_history_through_the_same_reducer(company):
    at = now() - timedelta(minutes=30)
    await sync_to_async(write_events)([
        make_event("llm_unavailable", company, "alice", at=at, error="every provider refused"),
        make_event("agent_turn_completed", company, "alice", at=at + timedelta(seconds=1), turn_id="t1", tokens_in=3),
        make_event("turn.guard_breach", company, "alice", at=at + timedelta(seconds=2), guard="max_iter", turn_id="t2"),
        make_event("llm_unavailable", company, "bob", at=at, error="timeout"),
    ])
    projection, queue = await projection_on(company)
    try:
        alice, bob = projection.seat_row("alice"), projection.seat_row("bob")
        assert alice["stopped"] is None  # a model answered after the outage
        assert alice["last_turn"]["tokens"] == 3 and alice["last_error"]["type"] == "turn.guard_breach"
        assert bob["state"] == "stopped" and bob["stopped"]["reason"] == "provider"
    finally:
        await projection.stop(False)
        await queue.close()


async def test_pauses_and_holders_come_from_the_fleet_records(company):
    coord = LocalCoord()
    book = PauseBook(coord)
    await book.pause("bob", reason="budget review", stop_running=False, paused_by="token:founder")
    await LeaseManager(coord, "node-1", 45).provision()
    peer = LeaseManager(coord, "node-2", 45)
    await peer.acquire(seat_key("alice"))
    projection, queue = await projection_on(company, coord=coord)
    try:
        alice, bob = projection.seat_row("alice"), projection.seat_row("bob")
        assert alice["holder"] == "node-2" and alice["state"] == "idle"
        assert bob["state"] == "paused" and bob["paused"]["by"] == "token:founder" and bob["paused"]["reason"] == "budget review"
    finally:
        await projection.stop(False)
        await queue.close()


async def test_a_refusing_budget_window_stops_seats_until_it_stops_refusing(twin, company):
    projection = twin.projection
    projection.apply(make_event("agent_spawned", company, "alice", node="node-1"))
    window = {"scope": "company", "period": "day", "window": "2025-06-01", "spend": 10, "ceiling": 10, "state": "refusing"}
    projection.apply(make_event("budget_meters", windows=[window], reason="refusal"))
    assert projection.seat_row("alice")["state"] == "stopped"
    assert projection.seat_row("alice")["stopped"]["reason"] == "budget"
    assert projection.seat_row("maya")["state"] is None  # a person is never stopped
    projection.apply(make_event("budget_meters", windows=[{**window, "state": "ok"}], reason="tick"))
    assert projection.seat_row("alice")["state"] == "idle"


async def test_the_projection_says_when_it_lost_events_and_reads_everything_again(company):
    projection, queue = await projection_on(company, stream_buffer=2)
    outbox = Outbox()
    projection.attach(outbox)
    try:
        # The twin's publish runs no await: ten land in a two-slot buffer before the handler runs.
        from engine.queue import topics

        for i in range(10):
            await queue.publish(topics.event_subject("task_assigned"), make_event("task_assigned", company, "bob", task=str(i)))
        frames = []
        while not any('"type":"snapshot"' in f for f in frames):
            frames.append(await outbox.next())
        gaps = [f for f in frames if '"type":"gap"' in f]
        assert gaps and '"where":"projection"' in gaps[0]
        assert projection.missed == 8
    finally:
        await projection.stop(False)
        await queue.close()


async def test_a_release_by_a_node_that_no_longer_holds_the_seat_changes_nothing(twin, company):
    projection = twin.projection
    projection.apply(make_event("agent_spawned", company, "alice", node="node-1"))
    projection.apply(make_event("agent_turn_started", company, "alice", node="node-1", turn_id="t1"))
    projection.apply(make_event("agent_spawned", company, "alice", node="node-2"))
    projection.apply(make_event("agent_terminated", company, "alice", node="node-1"))
    assert projection.seat_row("alice")["holder"] == "node-2"
    projection.apply(make_event("agent_terminated", company, "alice", node="node-2"))
    row = projection.seat_row("alice")
    assert row["holder"] is None and row["state"] == "unplaced" and row["working"] is None


async def test_a_node_starting_again_ends_on_every_screen_the_turns_it_was_running(twin, company):
    projection = twin.projection
    for handle in ("alice", "bob"):
        projection.apply(make_event("agent_spawned", company, handle, node=f"node-{handle}"))
        projection.apply(make_event("agent_turn_started", company, handle, node=f"node-{handle}", turn_id=handle))
    outbox = Outbox()
    projection.attach(outbox)
    projection.apply(make_event("org_started", node="node-alice", company="acme"))
    assert projection.seat_row("alice")["state"] == "idle" and projection.seat_row("bob")["state"] == "working"
    frame = json.loads(outbox.frames[-1])
    assert frame["event"]["type"] == "org_started"
    assert [row["handle"] for row in frame["seats"]] == ["alice"]  # the sockets are told which seat changed


async def test_a_new_revision_adds_and_removes_seats(twin, company):
    from engine.config import parse_company

    outbox = Outbox()
    twin.projection.attach(outbox)
    await twin.projection.on_company(parse_company("name: nimbus\norg:\n  seats:\n    - {handle: alice, kind: agent}\n    - {handle: dan, kind: agent}\n"))
    assert set(twin.projection.seats) == {"alice", "dan"}
    assert '"type":"seats"' in await outbox.next()


async def test_a_seat_reads_stopped_budget_from_the_windows_get_budgets_reports(company):
    """No node need publish budget_meters: the projection reads the refusing window itself,
    through the function GET /budgets calls."""
    from engine.config import parse_company
    from seats.budgets import Budgets

    capped = parse_company(
        "name: nimbus\norg:\n  seats:\n    - {handle: alice, kind: agent, token_budget: {day: 100}}\n"
        "    - {handle: bob, kind: agent}\n")
    coord = LocalCoord()
    projection, queue = await projection_on(capped, coord=coord)
    try:
        await Budgets(coord).charge(capped, capped.seat_by_handle("alice"), 150)
        await projection._read_budgets()
        alice, bob = projection.seat_row("alice"), projection.seat_row("bob")
        assert alice["state"] == "stopped" and alice["stopped"]["reason"] == "budget"
        assert alice["stopped"]["period"] == "day" and alice["stopped"]["ceiling"] == 100
        assert bob["stopped"] is None
    finally:
        await projection.stop(False)
        await queue.close()
