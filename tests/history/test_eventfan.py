"""The fleet's history reads (seed 000, "Reading the fleet's history"): a page, an event and a
trace are asked of every live node over the queue's request/reply, at one instant, in one
protocol version; every answer says who answered; pages merge exactly; a reply too large is
cut and says so. Three nodes, three SQLite stores, one broker (twin and nats-server)."""
from __future__ import annotations

import asyncio
import json
import logging
import uuid
from datetime import datetime, timedelta, timezone

import pytest

from engine.queue import topics
from events import questions as answers
from events.queries import EventQueryError
from events.questions import PROTOCOL_VERSION, Question, answer_bytes
from events.store import write_events
from events.tracing import new_trace_id
from tests.events.factories import make_event
from tests.history.conftest import fleet_db

pytestmark = [fleet_db, pytest.mark.timeout(60)]

NOW = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(hours=1)


def at(seconds: float) -> datetime:
    return NOW + timedelta(seconds=seconds)


def spread(trace_id: str) -> dict[str, list]:
    """Rows on three nodes: shared microseconds across nodes, and one row held by two nodes (a
    custody batch not yet settled by the node that lost its claim)."""
    on = {"default": [], "peer1": [], "peer2": []}
    for i in range(12):
        where = ("default", "peer1", "peer2")[i % 3]
        moment = at(i // 2)  # two rows a second, on different nodes: equal timestamps across the merge
        on[where].append(make_event("task_assigned", at=moment, agent_id="id-ada", task=f"t{i}", trace_id=trace_id))
    both = make_event("external_notification", at=at(3.5), agent_id="id-bob", trace_id=trace_id)
    on["peer1"].append(both)
    on["peer2"].append(both)
    for alias, events in on.items():
        write_events(events, using=alias)
    return on


async def stored(fn, *args, **kwargs):
    """A store write off the event loop, as the node makes its own."""
    return await asyncio.to_thread(fn, *args, **kwargs)


async def three_nodes(fleet, **asker):
    await fleet.answering("node-b", "peer1")
    await fleet.answering("node-c", "peer2")
    return await fleet.asker("node-a", "default", ["node-a", "node-b", "node-c"], **asker)


async def test_a_page_walk_lists_every_row_of_every_node_once_in_order(fleet):
    trace_id = new_trace_id()
    on = await stored(spread, trace_id)
    reads = await three_nodes(fleet)
    expected = {str(e.id) for events in on.values() for e in events}
    seen: list[dict] = []
    cursor = None
    while True:
        page = await reads.events_page(limit=3, cursor=cursor)
        assert page["coverage"] == {"nodes": [{"id": n, "answered": True, "error": ""} for n in ("node-a", "node-b", "node-c")],
                                    "complete": True}
        seen.extend(page["items"])
        cursor = page["next_cursor"]
        if cursor is None:
            break
    ids = [i["id"] for i in seen]
    assert len(ids) == len(set(ids)) == len(expected) == 13  # the row on two nodes is listed once
    assert set(ids) == expected
    order = [(i["timestamp"], i["id"]) for i in seen]
    assert order == sorted(order, reverse=True)


async def test_filters_travel_with_the_question(fleet):
    trace_id = new_trace_id()
    await stored(spread, trace_id)
    reads = await three_nodes(fleet)
    page = await reads.events_page(category="notification", trace_id=trace_id)
    assert [i["type"] for i in page["items"]] == ["external_notification"]
    since = await reads.events_page(since=at(5).isoformat(), limit=50)
    assert {i["timestamp"] for i in since["items"]} == {at(5).strftime("%Y-%m-%dT%H:%M:%S.000000Z")}


async def test_a_trace_and_an_event_are_read_from_whichever_node_holds_them(fleet):
    trace_id = new_trace_id()
    on = await stored(spread, trace_id)
    reads = await three_nodes(fleet)
    whole = await reads.trace(trace_id)
    assert whole["coverage"]["complete"] and whole["cut"] == 0
    assert len(whole["items"]) == 13
    assert [i["timestamp"] for i in whole["items"]] == sorted(i["timestamp"] for i in whole["items"])  # oldest first
    only_on_c = on["peer2"][0]
    found = await reads.get_event(str(only_on_c.id))
    assert found["item"]["id"] == str(only_on_c.id) and found["coverage"]["complete"]
    absent = await reads.get_event(str(uuid.uuid4()))
    assert absent["item"] is None and absent["coverage"]["complete"]


async def test_the_trace_box_finds_a_trace_an_event_or_a_task_held_only_by_another_node(fleet):
    # The dashboard's trace box asks the fleet: what a peer stored (a turn run there, a task
    # assigned through its API) is found from any node's dashboard.
    task_id, on_b, on_c = str(uuid.uuid4()), "b0" + new_trace_id()[2:], "c0" + new_trace_id()[2:]
    rerun = "d0" + new_trace_id()[2:]  # a later turn on the task, under a trace of its own
    task = make_event("task_assigned", at=at(1), agent_id="id-ada", task="write it", task_id=task_id, trace_id=on_b)
    turn = make_event("agent_turn_completed", at=at(2), agent_id="id-ada", task_id=task_id, trace_id=rerun)
    shared = "ab12cd34"
    one, two = shared + "0" * 24, shared + "f" * 24
    await stored(write_events, [task], using="peer1")
    await stored(write_events, [turn, make_event("org_started", at=at(3), trace_id=on_c)], using="peer2")
    await stored(write_events, [make_event("org_started", at=at(4), trace_id=one)], using="default")
    await stored(write_events, [make_event("org_started", at=at(5), trace_id=two)], using="peer1")
    reads = await three_nodes(fleet)

    async def found(text: str) -> tuple:
        answer = await reads.find_trace(text)
        assert answer["coverage"]["complete"]
        match = answer["match"]
        return match.trace_id, match.via, match.candidates

    assert await found(on_b) == (on_b, "trace", ())
    assert await found(str(turn.id)) == (rerun, "event", ())
    assert await found(task_id) == (on_b, "task", ())  # the trace its own task_assigned names, on another node
    assert await found(on_c[:8]) == (on_c, "prefix", ())
    assert await found(shared) == (None, "prefix", (one, two))  # begun on two nodes: both listed
    assert await found(str(uuid.uuid4())) == (None, "", ())
    with pytest.raises(EventQueryError) as refused:
        await reads.find_trace("abc")
    assert refused.value.field == "q"


async def test_the_trace_box_names_the_nodes_it_could_not_ask(fleet):
    trace_id = new_trace_id()
    await stored(write_events, [make_event("org_started", at=at(1), trace_id=trace_id)], using="peer1")
    reads = await fleet.asker("node-a", "default", ["node-a", "node-gone"])
    answer = await reads.find_trace(trace_id)
    assert answer["match"].trace_id is None
    assert [(n["id"], n["answered"]) for n in answer["coverage"]["nodes"]] == [("node-a", True), ("node-gone", False)]


async def test_a_node_that_does_not_answer_is_named_with_its_reason_and_history_partial_fires(fleet, caplog):
    trace_id = new_trace_id()
    await stored(spread, trace_id)
    await fleet.answering("node-b", "peer1")
    silent = await fleet.queue("node-stuck")
    stall = asyncio.Event()

    async def never(raw: bytes) -> bytes:
        await stall.wait()
        return b""

    await silent.reply(topics.eventfan_subject("node-stuck"), never)
    reads = await fleet.asker("node-a", "default", ["node-a", "node-b", "node-gone", "node-stuck"])
    caplog.set_level(logging.WARNING, logger="events.fleet")
    page = await reads.events_page(limit=50)  # the seed's 2-second budget, as a user gets it
    stall.set()
    coverage = {n["id"]: n for n in page["coverage"]["nodes"]}
    assert page["coverage"]["complete"] is False
    assert coverage["node-a"]["answered"] and coverage["node-b"]["answered"]
    assert not coverage["node-gone"]["answered"] and coverage["node-gone"]["error"].startswith("no_responders:")
    assert not coverage["node-stuck"]["answered"] and coverage["node-stuck"]["error"] == \
        "timeout: no answer inside the 2 s fleet read budget"
    assert {i["id"] for i in page["items"]}  # what did answer is still served
    partial = [r for r in caplog.records if r.msg == "history_partial"]
    assert partial and partial[0].missing == "node-gone,node-stuck" and partial[0].fraction == 1.0
    assert reads.stats.partial == 1 and reads.stats.reads == 1


async def test_a_node_on_another_protocol_version_is_named_by_version_whatever_it_holds(fleet):
    trace_id = new_trace_id()
    await stored(spread, trace_id)
    newer = await fleet.queue("node-next")

    async def next_build(raw: bytes) -> bytes:  # a build speaking protocol 2 answers only in 2
        return json.dumps({"v": PROTOCOL_VERSION + 1, "node": "node-next", "part": {"items": [], "more": False}}).encode()

    await newer.reply(topics.eventfan_subject("node-next"), next_build)
    reads = await fleet.asker("node-a", "default", ["node-next"])
    page = await reads.events_page()
    (next_node,) = [n for n in page["coverage"]["nodes"] if n["id"] == "node-next"]
    assert not next_node["answered"] and next_node["error"].startswith("version:")


def test_a_question_in_another_version_or_without_an_instant_is_refused_by_name():
    newer = json.dumps({"v": PROTOCOL_VERSION + 1, "q": "trace", "at": "2026-01-01T00:00:00.000000Z",
                        "args": {"trace_id": "x"}}).encode()
    refused = json.loads(answer_bytes(newer, node_id="node-a", horizon_hours=720))
    assert refused["error"].startswith("version: this node speaks history protocol 1")
    timeless = json.dumps({"v": PROTOCOL_VERSION, "q": "trace", "args": {"trace_id": "x"}}).encode()
    assert json.loads(answer_bytes(timeless, node_id="node-a", horizon_hours=720))["error"].startswith("instant:")
    assert json.loads(answer_bytes(b"{not json", node_id="node-a", horizon_hours=720))["error"].startswith("unreadable:")


async def test_every_node_floors_the_history_at_the_askers_instant_not_its_own(fleet):
    now = datetime.now(timezone.utc)
    asked_at = now - timedelta(days=10)  # the asker's clock, read once for the question
    inside = make_event("task_assigned", at=now - timedelta(days=39), task="inside the asker's 30 days")
    outside = make_event("task_assigned", at=now - timedelta(days=41), task="past them")
    await stored(write_events, [inside, outside], using="peer1")
    await fleet.answering("node-b", "peer1")
    reads = await fleet.asker("node-a", "default", ["node-b"], clock=lambda: asked_at)
    page = await reads.events_page(limit=50)
    assert [i["id"] for i in page["items"]] == [str(inside.id)]  # node-b's own clock would have floored it out


async def test_a_reply_too_large_is_cut_from_the_least_important_end_and_the_walk_still_lists_every_row(fleet):
    trace_id = new_trace_id()
    big = "x" * 1500
    events = [make_event("task_assigned", at=at(i), task=f"{i}:{big}", trace_id=trace_id) for i in range(20)]
    await stored(write_events, events, using="peer1")
    budget = 8 * 1024  # a few rows a reply
    await fleet.answering("node-b", "peer1", budget=budget)
    reads = await fleet.asker("node-a", "default", ["node-b"])
    seen, cursor, pages = [], None, 0
    while True:
        page = await reads.events_page(limit=20, cursor=cursor)
        pages += 1
        seen += [i["id"] for i in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert pages > 1 and seen == [str(e.id) for e in reversed(events)]  # the cut page said "more"; nothing lost
    whole = await reads.trace(trace_id)
    kept = [i["id"] for i in whole["items"]]
    assert whole["cut"] == 20 - len(kept) > 0
    assert kept[0] == str(events[0].id) and kept[-1] == str(events[-1].id)  # the middle went, not the ending


def test_a_trace_is_cut_from_its_middle_and_a_page_from_its_oldest_rows():
    rows = [{"id": str(i), "timestamp": "t", "blob": "y" * 100} for i in range(10)]
    size = len(json.dumps(rows[0])) + 1
    trace = answers.cut_to_budget("trace", {"items": rows, "cut": 0}, answers.ENVELOPE_BYTES + 4 * size + 10)
    assert [r["id"] for r in trace["items"]] == ["0", "1", "8", "9"] and trace["cut"] == 6
    page = answers.cut_to_budget("events_page", {"items": rows, "more": False}, answers.ENVELOPE_BYTES + 3 * size + 10)
    assert [r["id"] for r in page["items"]] == ["0", "1", "2"] and page["more"] is True
    with pytest.raises(answers.TooLarge):
        answers.cut_to_budget("event", {"item": rows[0]}, 10)


def test_a_question_carries_one_instant_to_the_microsecond():
    instant = datetime(2026, 3, 1, 12, 0, 0, 123456, tzinfo=timezone.utc)
    raw = Question("trace", instant, {"trace_id": "abc"}).encode()
    assert json.loads(raw)["at"] == "2026-03-01T12:00:00.123456Z"
    assert Question.decode(raw).at == instant
