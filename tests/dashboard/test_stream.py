"""`/ws/stream` through Channels' communicator against a real LiveProjection on the queue twin:
who may connect, the snapshot then live frames, the gap a slow socket is told of, the
four-queries-in-flight bound, and queries that answer exactly what the REST routes answer
(seed 000, "Broadcast Streams"; seed 002, "Querying events")."""
from __future__ import annotations

import asyncio
import collections
import json
from datetime import datetime, timedelta, timezone

import pytest
from asgiref.sync import sync_to_async
from channels.auth import AuthMiddlewareStack
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.contrib.auth import get_user_model
from django.test import AsyncClient
from django.urls import path

from dashboard import consumers, reads
from engine.node.surface import HandOver
from dashboard.routing import websocket_urlpatterns
from events.store import write_events
from tests.dashboard.conftest import make_event
from tests.handover import NodeClient
from tests.settings import ADMIN_TOKEN, READ_TOKEN

pytestmark = pytest.mark.timeout(60)

APP = AuthMiddlewareStack(URLRouter(websocket_urlpatterns))
# Inside the history's 30-day horizon, which every read floors at (events.retention).
T0 = (datetime.now(timezone.utc) - timedelta(days=1)).replace(hour=9, minute=0, second=0, microsecond=0)
SINCE = (T0 + timedelta(seconds=2)).strftime("%Y-%m-%dT%H:%M:%SZ")


async def connect(node, path: str = "/ws/stream", *, subprotocols=None, headers=None, app=APP):
    """A socket to `app`, handed `node` as the node's ASGI layer hands it."""
    communicator = WebsocketCommunicator(HandOver(app, node), path, subprotocols=subprotocols, headers=headers or [])
    connected, detail = await communicator.connect(timeout=10)
    return communicator, connected, detail


async def frame(communicator, timeout: float = 10) -> dict:
    """The next frame: a message carries one, or an array of those that waited together."""
    waiting = communicator.__dict__.setdefault("frames", collections.deque())
    if not waiting:
        got = await communicator.receive_json_from(timeout=timeout)
        waiting.extend(got if isinstance(got, list) else [got])
    return waiting.popleft()


async def frame_of(communicator, kind: str, timeout: float = 10) -> dict:
    """The next frame of `kind`, passing over others (a seat or totals frame, say)."""
    while True:
        got = await frame(communicator, timeout)
        if got["type"] == kind:
            return got


# -- who may connect --------------------------------------------------------------------------
async def test_a_socket_without_credentials_is_refused(twin):
    communicator, connected, _ = await connect(twin)
    assert not connected
    await communicator.disconnect()


async def test_an_unknown_token_is_refused_in_either_place(twin):
    for kwargs in ({"subprotocols": ["crewlet.bearer", "not-a-token"]}, {"path": "/ws/stream?token=not-a-token"}):
        communicator, connected, _ = await connect(twin, **kwargs)
        assert not connected, kwargs
        await communicator.disconnect()


async def test_a_read_token_connects_as_a_subprotocol_without_being_echoed(twin):
    communicator, connected, protocol = await connect(twin, subprotocols=[consumers.BEARER_PROTOCOL, READ_TOKEN])
    assert connected
    assert protocol == consumers.BEARER_PROTOCOL  # the token itself is never sent back
    assert (await frame(communicator))["type"] == "snapshot"
    await communicator.disconnect()


async def test_a_script_connects_with_a_token_query_parameter(twin):
    communicator, connected, _ = await connect(twin, f"/ws/stream?token={ADMIN_TOKEN}")
    assert connected
    assert (await frame(communicator))["type"] == "snapshot"
    await communicator.disconnect()


@pytest.mark.django_db(transaction=True)
async def test_a_signed_in_session_connects_from_its_own_site_only(twin):
    user = await sync_to_async(get_user_model().objects.create_user)("op", password="a-long-password-1")
    client = AsyncClient()
    await sync_to_async(client.force_login)(user)
    cookie = f"sessionid={client.cookies['sessionid'].value}".encode()
    same = [(b"cookie", cookie), (b"host", b"crewlet.example"), (b"origin", b"https://crewlet.example")]
    communicator, connected, _ = await connect(twin, headers=same)
    assert connected
    assert (await frame(communicator))["type"] == "snapshot"
    await communicator.disconnect()
    # Another site's page riding the operator's cookie is refused.
    elsewhere = [(b"cookie", cookie), (b"host", b"crewlet.example"), (b"origin", b"https://evil.example")]
    communicator, connected, _ = await connect(twin, headers=elsewhere)
    assert not connected
    await communicator.disconnect()


# -- snapshot, then live ----------------------------------------------------------------------
async def test_the_snapshot_comes_first_then_every_event_as_it_happens(twin, company):
    communicator, connected, _ = await connect(twin, subprotocols=[consumers.BEARER_PROTOCOL, READ_TOKEN])
    assert connected
    snapshot = await frame(communicator)
    assert snapshot["type"] == "snapshot"
    assert snapshot["node"] == "node-1" and snapshot["company"] == "nimbus" and snapshot["revision"] == 1
    seats = {s["handle"]: s for s in snapshot["seats"]}
    assert set(seats) == {"maya", "alice", "bob"}
    assert seats["maya"]["state"] is None and seats["maya"]["kind"] == "human"
    assert seats["alice"]["state"] == "unplaced"  # no node has said it holds the seat
    # This suite's store is not open to the twin: the projection says it has no history.
    assert snapshot["projection"]["history"].startswith("unavailable")

    await twin.publish(make_event("agent_spawned", company, "alice", node="node-1"))
    spawned = await frame_of(communicator, "event")
    assert spawned["event"]["type"] == "agent_spawned" and spawned["fed"] is False  # live-only, never in the feed
    assert spawned["seats"][0]["state"] == "idle" and spawned["seats"][0]["holder"] == "node-1"

    started = make_event("agent_turn_started", company, "alice", turn_id="t1", trigger_type="task_assigned")
    await twin.publish(started)
    got = await frame_of(communicator, "event")
    assert got["event"]["id"] == str(started.id) and got["fed"] is True
    assert got["event"]["category"] == "system" and got["event"]["summary"] == started.summary()
    assert got["seats"][0]["state"] == "working"

    await twin.publish(make_event("agent_turn_completed", company, "alice", turn_id="t1", tokens_in=120, tokens_out=30))
    done = await frame_of(communicator, "event")
    assert done["seats"][0]["state"] == "idle" and done["seats"][0]["last_turn"]["tokens"] == 150
    assert done["totals"]["turns_24h"] == 1 and done["totals"]["tokens_24h"] == 150
    await communicator.disconnect()


async def test_a_stored_not_fed_event_reaches_the_socket_but_never_the_feed(twin, company):
    communicator, _, _ = await connect(twin, f"/ws/stream?token={READ_TOKEN}")
    await frame(communicator)
    await twin.publish(make_event("auxiliary_spend", company, "alice", purpose="relevance", calls=2))
    got = await frame_of(communicator, "event")
    assert got["event"]["type"] == "auxiliary_spend" and got["fed"] is False
    assert all(item["type"] != "auxiliary_spend" for item in twin.projection.feed)
    await communicator.disconnect()
    # The next tab's snapshot agrees.
    communicator, _, _ = await connect(twin, f"/ws/stream?token={READ_TOKEN}")
    assert all(item["type"] != "auxiliary_spend" for item in (await frame(communicator))["feed"])
    await communicator.disconnect()


async def test_a_socket_that_falls_behind_is_told_how_many_it_missed_and_slows_nobody(twin, company):
    app = AuthMiddlewareStack(URLRouter([path("ws/stream", consumers.StreamConsumer.as_asgi(outbox_size=4))]))
    slow, connected, _ = await connect(twin, f"/ws/stream?token={READ_TOKEN}", app=app)
    assert connected
    await frame(slow)
    keeping_up, _, _ = await connect(twin, f"/ws/stream?token={READ_TOKEN}")
    await frame(keeping_up)
    burst = [make_event("task_assigned", company, "bob", task=f"task {i}") for i in range(20)]
    # The projection hands all 20 to every socket before either socket's sender runs once.
    for event in burst:
        twin.projection.apply(event)
    message = await slow.receive_json_from(timeout=10)  # what waited leaves together, in order
    assert isinstance(message, list)
    slow.__dict__.setdefault("frames", collections.deque()).extend(message)
    got = [await frame(slow) for _ in range(5)]
    assert [g["type"] for g in got] == ["event"] * 4 + ["gap"]
    assert [g["event"]["task"] for g in got[:4]] == ["task 0", "task 1", "task 2", "task 3"]
    assert got[4]["missed"] == 16 and got[4]["where"] == "socket"
    # After the gap the slow socket carries on live; the other one missed nothing.
    after = make_event("task_assigned", company, "bob", task="after the burst")
    twin.projection.apply(after)
    assert (await frame(slow))["event"]["task"] == "after the burst"
    tasks = [(await frame(keeping_up))["event"]["task"] for _ in range(21)]
    assert tasks == [e.get("task") for e in [*burst, after]]
    assert twin.projection.missed == 0  # nothing upstream of the socket lost anything
    await slow.disconnect()
    await keeping_up.disconnect()


async def test_a_closed_socket_is_detached_from_the_projection(twin):
    communicator, _, _ = await connect(twin, f"/ws/stream?token={READ_TOKEN}")
    await frame(communicator)
    assert len(twin.projection.fanout.outboxes) == 1
    await communicator.disconnect()
    assert not twin.projection.fanout.outboxes


# -- queries ------------------------------------------------------------------------------------
async def test_at_most_four_queries_run_at_once_and_a_fifth_waits(twin, monkeypatch):
    running, peak, started = 0, 0, []
    gates = [asyncio.Event() for _ in range(6)]
    four_started, fifth_started = asyncio.Event(), asyncio.Event()

    async def slow_answer(name, args, node):
        nonlocal running, peak
        index = args["n"]
        running += 1
        peak = max(peak, running)
        started.append(index)
        if len(started) == 4:
            four_started.set()
        if len(started) == 5:
            fifth_started.set()
        try:
            await gates[index].wait()
        finally:
            running -= 1
        return {"n": index}

    monkeypatch.setattr(reads, "answer", slow_answer)
    communicator, _, _ = await connect(twin, f"/ws/stream?token={READ_TOKEN}")
    await frame(communicator)
    for n in range(6):
        await communicator.send_json_to({"id": n, "query": "events_page", "args": {"n": n}})
    await asyncio.wait_for(four_started.wait(), 10)
    assert started == [0, 1, 2, 3] and running == 4
    gates[0].set()
    assert (await frame(communicator)) == {"type": "answer", "id": 0, "query": "events_page", "result": {"n": 0}}
    await asyncio.wait_for(fifth_started.wait(), 10)
    assert started == [0, 1, 2, 3, 4] and peak == 4  # the fifth ran only once a slot was free
    for gate in gates[1:]:
        gate.set()
    answers = {(await frame(communicator))["id"] for _ in range(5)}
    assert answers == {1, 2, 3, 4, 5} and peak == 4
    await communicator.disconnect()


@pytest.fixture
def stored(company):
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    events = [
        make_event("external_notification", company, "alice", at=T0, trace_id=trace_id, span_id="a" * 16),
        make_event("agent_turn_started", company, "alice", at=T0 + timedelta(seconds=1), trace_id=trace_id,
                   span_id="b" * 16, parent_span_id="a" * 16, turn_id="t1"),
        make_event("auxiliary_spend", company, "alice", at=T0 + timedelta(seconds=2), trace_id=trace_id,
                   span_id="b" * 16, parent_span_id="a" * 16),
        make_event("agent_turn_completed", company, "alice", at=T0 + timedelta(seconds=3), trace_id=trace_id,
                   span_id="b" * 16, parent_span_id="a" * 16, turn_id="t1", tokens_in=10, tokens_out=5),
        make_event("task_assigned", company, "bob", at=T0 + timedelta(seconds=4), task="write the docs"),
    ]
    write_events(events)
    return trace_id, events


ASKED = [
    ("events_page", {}, "/events"),
    ("events_page", {"limit": 2}, "/events?limit=2"),
    ("events_page", {"type": ["agent_turn_started", "task_assigned"]}, "/events?type=agent_turn_started&type=task_assigned"),
    ("events_page", {"category": "system", "agent": "alice", "feed_only": True}, "/events?category=system&agent=alice&feed_only=true"),
    ("events_page", {"since": SINCE}, f"/events?since={SINCE}"),
    ("events_page", {"category": "nonsense"}, "/events?category=nonsense"),
    ("events_page", {"cursor": "not-a-cursor"}, "/events?cursor=not-a-cursor"),
    ("events_page", {"limit": 0}, "/events?limit=0"),
    ("trace", {"trace_id": "4bf92f3577b34da6a3ce929d0e0e4736"}, "/events/trace/4bf92f3577b34da6a3ce929d0e0e4736"),
    ("event", {"event_id": "00000000-0000-0000-0000-000000000000"}, "/events/00000000-0000-0000-0000-000000000000"),
    ("event", {"event_id": "nonsense"}, "/events/nonsense"),
    ("seat", {"handle": "alice"}, "/seats/alice"),
    ("budgets", {}, "/budgets"),
]


@pytest.mark.django_db(transaction=True)
async def test_queries_answer_exactly_what_the_rest_routes_answer(twin, stored):
    trace_id, events = stored
    asked = [*ASKED, ("event", {"event_id": str(events[2].id)}, f"/events/{events[2].id}")]
    # The next page, by the cursor the first page handed out.
    first = json.loads((await NodeClient(twin).get("/events?limit=2", headers={"Authorization": f"Bearer {READ_TOKEN}"})).content)
    asked.append(("events_page", {"limit": 2, "cursor": first["next_cursor"]}, f"/events?limit=2&cursor={first['next_cursor']}"))
    communicator, _, _ = await connect(twin, f"/ws/stream?token={READ_TOKEN}")
    await frame(communicator)
    client = NodeClient(twin)
    for n, (name, args, url) in enumerate(asked):
        response = await client.get(url, headers={"Authorization": f"Bearer {READ_TOKEN}"})
        rest = json.loads(response.content)
        await communicator.send_json_to({"id": n, "query": name, "args": args})
        got = await frame(communicator)
        assert got["id"] == n
        if response.status_code == 200:
            assert got == {"type": "answer", "id": n, "query": name, "result": rest}, url
        else:
            assert got["type"] == "error", url
            assert (got["status"], got["detail"]) == (response.status_code, rest["detail"]), url
    # The list above did reach rows: the store is what both read.
    assert len(first["items"]) == 2
    await communicator.disconnect()


async def test_a_query_this_node_does_not_answer_is_refused_by_name(twin):
    communicator, _, _ = await connect(twin, f"/ws/stream?token={READ_TOKEN}")
    await frame(communicator)
    await communicator.send_json_to({"id": "x", "query": "seat_pause", "args": {"handle": "alice"}})
    got = await frame(communicator)
    assert got["type"] == "error" and got["status"] == 404 and "seat_pause" in got["detail"]  # writes never ride the socket
    await communicator.send_to(text_data="{not json")
    assert (await frame(communicator))["status"] == 400
    await communicator.disconnect()
